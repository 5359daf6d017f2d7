//! A Bedrock deployment's AWS region and credentials.

/// A deployment's AWS settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AwsSettings {
    /// Keys, when configured.
    pub credentials: Option<Credentials>,
    /// Region signed for.
    pub region: String,
}

/// Long-term or temporary AWS credentials (compared only to tell whether a
/// config reload changed a deployment).
#[derive(Clone, PartialEq)]
pub struct Credentials {
    /// `AKIA…` / `ASIA…`.
    pub access_key_id: String,
    /// The secret key; never shown.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}
