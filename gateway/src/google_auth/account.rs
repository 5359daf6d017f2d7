//! Google credentials files and the token request each makes: a service
//! account's key (the RS256-signed JWT assertion exchanged for an access
//! token, RFC 7523 `urn:ietf:params:oauth:grant-type:jwt-bearer`), or a
//! user's (`authorized_user`, what `gcloud auth application-default login`
//! writes: its refresh token exchanged, `grant_type=refresh_token`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};
use std::fmt;

/// The OAuth scope every Vertex AI call needs.
pub const CLOUD_PLATFORM_SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Google's token endpoint, when the key file names none.
pub const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// Lifetime asked for in an assertion (Google's maximum, an hour).
const ASSERTION_LIFETIME_SECS: u64 = 3600;
/// Largest key file read.
pub const MAX_KEY_FILE: usize = 64 << 10;

/// A credentials file: who asks for tokens and how.
#[derive(Debug)]
pub enum Credentials {
    /// `type: service_account`.
    ServiceAccount(Box<ServiceAccount>),
    /// `type: authorized_user`.
    AuthorizedUser(AuthorizedUser),
}

/// A user's OAuth client and refresh token.
pub struct AuthorizedUser {
    /// `client_id`, which names the credentials in messages.
    pub client_id: String,
    client_secret: String,
    refresh_token: String,
    /// `token_uri`, else Google's.
    pub token_uri: String,
    /// `quota_project_id`, the default project.
    pub quota_project_id: Option<String>,
}

impl fmt::Debug for AuthorizedUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret and the refresh token never appear in logs.
        f.debug_struct("AuthorizedUser")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// `s` as an `application/x-www-form-urlencoded` value.
fn form_value(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

impl Credentials {
    /// Parses a credentials file's JSON. Messages never quote a secret.
    pub fn from_json(text: &str) -> Result<Credentials, String> {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| format!("the credentials are not JSON ({e})"))?;
        let field = |name: &str| {
            v.get(name)
                .and_then(|f| f.as_str())
                .filter(|s| !s.is_empty())
        };
        match field("type") {
            Some("service_account") => ServiceAccount::from_json(text).map(|a| Self::ServiceAccount(Box::new(a))),
            Some("authorized_user") => {
                let need = |name: &str| {
                    field(name)
                        .map(str::to_string)
                        .ok_or_else(|| format!("the authorized_user credentials have no {name}"))
                };
                let token_uri = field("token_uri").unwrap_or(DEFAULT_TOKEN_URI).to_string();
                check_token_uri(&token_uri)?;
                Ok(Self::AuthorizedUser(AuthorizedUser {
                    client_id: need("client_id")?,
                    client_secret: need("client_secret")?,
                    refresh_token: need("refresh_token")?,
                    token_uri,
                    quota_project_id: field("quota_project_id").map(str::to_string),
                }))
            }
            Some(other) => Err(format!(
                "credentials of type \"{other}\" are not supported; give a service-account key or authorized_user credentials"
            )),
            None => Err("the credentials have no \"type\"".into()),
        }
    }

    /// Who the tokens are for: the service account's email, or the user
    /// credentials' client id.
    pub fn identity(&self) -> &str {
        match self {
            Self::ServiceAccount(a) => &a.client_email,
            Self::AuthorizedUser(u) => &u.client_id,
        }
    }

    /// Where tokens are asked for.
    pub fn token_uri(&self) -> &str {
        match self {
            Self::ServiceAccount(a) => &a.token_uri,
            Self::AuthorizedUser(u) => &u.token_uri,
        }
    }

    /// The default project (`project_id`, `quota_project_id`).
    pub fn project_id(&self) -> Option<&str> {
        match self {
            Self::ServiceAccount(a) => a.project_id.as_deref(),
            Self::AuthorizedUser(u) => u.quota_project_id.as_deref(),
        }
    }

    /// The form body of a token request made at `now` (Unix seconds).
    pub fn token_request(&self, now: u64) -> Result<String, String> {
        match self {
            Self::ServiceAccount(a) => Ok(format!(
                "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={}",
                a.assertion(now)?
            )),
            Self::AuthorizedUser(u) => Ok(format!(
                "grant_type=refresh_token&client_id={}&client_secret={}&refresh_token={}",
                form_value(&u.client_id),
                form_value(&u.client_secret),
                form_value(&u.refresh_token)
            )),
        }
    }
}

fn check_token_uri(token_uri: &str) -> Result<(), String> {
    if token_uri.starts_with("https://") || token_uri.starts_with("http://") {
        Ok(())
    } else {
        Err(format!("token_uri \"{token_uri}\" is not an http(s) URL"))
    }
}

/// A service account's key: who it is, where it trades assertions for
/// tokens, and the private key that signs them.
pub struct ServiceAccount {
    /// `client_email`: the assertion's issuer.
    pub client_email: String,
    /// `private_key_id`: the JWT header's `kid`.
    pub private_key_id: Option<String>,
    /// `token_uri`: the assertion's audience and where it is posted.
    pub token_uri: String,
    /// `project_id`, the default project.
    pub project_id: Option<String>,
    key: RsaKeyPair,
}

impl fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The private key never appears in logs.
        f.debug_struct("ServiceAccount")
            .field("client_email", &self.client_email)
            .field("token_uri", &self.token_uri)
            .finish_non_exhaustive()
    }
}

impl ServiceAccount {
    /// Parses a key file's JSON. Messages never quote the private key.
    pub fn from_json(text: &str) -> Result<ServiceAccount, String> {
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| format!("the credentials are not JSON ({e})"))?;
        let field = |name: &str| {
            v.get(name)
                .and_then(|f| f.as_str())
                .filter(|s| !s.is_empty())
        };
        match field("type") {
            Some("service_account") => {}
            Some(other) => {
                return Err(format!(
                    "credentials of type \"{other}\" are not supported; give a service-account key (type \"service_account\")"
                ))
            }
            None => return Err("the credentials have no \"type\"; give a service-account key".into()),
        }
        let client_email = field("client_email")
            .ok_or("the service-account key has no client_email")?
            .to_string();
        let pem = field("private_key").ok_or("the service-account key has no private_key")?;
        let key = parse_private_key(pem)?;
        let token_uri = field("token_uri").unwrap_or(DEFAULT_TOKEN_URI).to_string();
        check_token_uri(&token_uri)?;
        Ok(ServiceAccount {
            client_email,
            private_key_id: field("private_key_id").map(str::to_string),
            token_uri,
            project_id: field("project_id").map(str::to_string),
            key,
        })
    }

    /// The signed assertion for `now` (Unix seconds): header
    /// `{"alg":"RS256","typ":"JWT","kid"}`, claims `iss`, `scope`, `aud`
    /// (the token URI), `iat` and `exp` an hour later.
    pub fn assertion(&self, now: u64) -> Result<String, String> {
        let mut header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
        if let Some(kid) = &self.private_key_id {
            header["kid"] = kid.as_str().into();
        }
        let claims = serde_json::json!({
            "iss": self.client_email,
            "scope": CLOUD_PLATFORM_SCOPE,
            "aud": self.token_uri,
            "iat": now,
            "exp": now.saturating_add(ASSERTION_LIFETIME_SECS),
        });
        let mut jwt = URL_SAFE_NO_PAD.encode(header.to_string());
        jwt.push('.');
        jwt.push_str(&URL_SAFE_NO_PAD.encode(claims.to_string()));
        let mut signature = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(
                &RSA_PKCS1_SHA256,
                &SystemRandom::new(),
                jwt.as_bytes(),
                &mut signature,
            )
            .map_err(|_| "could not sign the token request".to_string())?;
        jwt.push('.');
        jwt.push_str(&URL_SAFE_NO_PAD.encode(signature));
        Ok(jwt)
    }
}

/// An RSA key from PEM: PKCS#8 (`BEGIN PRIVATE KEY`, what Google issues)
/// or PKCS#1 (`BEGIN RSA PRIVATE KEY`).
fn parse_private_key(pem: &str) -> Result<RsaKeyPair, String> {
    let bad =
        |what: &str| format!("the service-account private_key is not a usable RSA key ({what})");
    let der = rustls_pemfile::private_key(&mut pem.as_bytes())
        .map_err(|_| bad("not PEM"))?
        .ok_or_else(|| bad("no key in the PEM"))?;
    match der {
        rustls::pki_types::PrivateKeyDer::Pkcs8(k) => RsaKeyPair::from_pkcs8(k.secret_pkcs8_der()),
        rustls::pki_types::PrivateKeyDer::Pkcs1(k) => RsaKeyPair::from_der(k.secret_pkcs1_der()),
        _ => return Err(bad("not an RSA key")),
    }
    .map_err(|e| bad(&e.to_string()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};

    /// A service-account key made for tests (`loadgen`'s mock knows it).
    pub(crate) const TEST_KEY_FILE: &str =
        include_str!("../../../loadgen/src/mock/api/vertex/service_account.json");

    #[test]
    fn assertions_are_signed_with_the_account_key() {
        let account = ServiceAccount::from_json(TEST_KEY_FILE).unwrap();
        assert!(!format!("{account:?}").contains("PRIVATE"));
        let jwt = account.assertion(1_700_000_000).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
        assert_eq!(header["alg"], "RS256");
        assert_eq!(header["kid"], account.private_key_id.as_deref().unwrap());
        let claims: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(claims["iss"], account.client_email);
        assert_eq!(claims["aud"], account.token_uri);
        assert_eq!(claims["scope"], CLOUD_PLATFORM_SCOPE);
        assert_eq!(claims["exp"], 1_700_003_600u64);
        let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let signed = &jwt[..jwt.rfind('.').unwrap()];
        UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, account.key.public().as_ref())
            .verify(signed.as_bytes(), &signature)
            .unwrap();
    }

    #[test]
    fn user_credentials_trade_their_refresh_token() {
        let user = Credentials::from_json(r#"{"type":"authorized_user","client_id":"c.apps","client_secret":"s&=x","refresh_token":"1//r t","quota_project_id":"q"}"#).unwrap();
        assert_eq!((user.identity(), user.project_id()), ("c.apps", Some("q")));
        assert_eq!(user.token_uri(), DEFAULT_TOKEN_URI);
        assert_eq!(
            user.token_request(0).unwrap(),
            "grant_type=refresh_token&client_id=c%2Eapps&client_secret=s%26%3Dx&refresh_token=1%2F%2Fr%20t"
        );
        assert!(!format!("{user:?}").contains("s&=x"));
        let e =
            Credentials::from_json(r#"{"type":"authorized_user","client_id":"c"}"#).unwrap_err();
        assert!(e.contains("client_secret"), "{e}");
        let sa = Credentials::from_json(TEST_KEY_FILE).unwrap();
        assert!(sa
            .token_request(0)
            .unwrap()
            .starts_with("grant_type=urn%3Aietf"));
    }

    #[test]
    fn unusable_keys_are_refused_with_a_reason() {
        let err = |text: &str| ServiceAccount::from_json(text).unwrap_err();
        assert!(err("{").contains("not JSON"));
        assert!(err(r#"{"type":"external_account"}"#).contains("not supported"));
        assert!(err(r#"{"type":"service_account","private_key":"x"}"#).contains("client_email"));
        let e = err(
            r#"{"type":"service_account","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}"#,
        );
        assert!(e.contains("not a usable RSA key"), "{e}");
    }
}
