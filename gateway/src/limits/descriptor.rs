//! What a request is counted against: one descriptor per (scope, kind) that
//! has a limit, named the way LiteLLM's v3 limiter names its Redis keys
//! (`{api_key:<hash>}:tokens`), hash-tagged on `{scope:value}`.

/// The scopes a request belongs to, LiteLLM's descriptor names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// The whole server (every request).
    Server,
    /// The virtual key.
    ApiKey,
    /// The key's user.
    User,
    /// The key's team.
    Team,
    /// The organization of the key's team.
    Organization,
    /// The key's limit for one model group.
    ModelPerKey,
    /// The key's team's limit for one model group (`metadata.model_rpm_limit`
    /// / `model_tpm_limit` of the team), where the key sets none of its own.
    ModelPerTeam,
    /// The caller's end user (the body's `user`).
    EndUser,
    /// The key's limit for one request tag (`metadata.tag_rpm_limit`).
    TagPerKey,
    /// The key's team's organization's limit for one model group
    /// (`metadata.model_rpm_limit` / `model_tpm_limit` of the organization).
    ModelPerOrganization,
}

impl Scope {
    /// LiteLLM's name for the scope, used in keys and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Server => "server",
            Scope::ApiKey => "api_key",
            Scope::User => "user",
            Scope::Team => "team",
            Scope::Organization => "organization",
            Scope::ModelPerKey => "model_per_key",
            Scope::ModelPerTeam => "model_per_team",
            Scope::EndUser => "end_user",
            Scope::TagPerKey => "tag_per_key",
            Scope::ModelPerOrganization => "model_per_organization",
        }
    }
}

/// What is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Requests per window (rpm).
    Requests,
    /// Tokens per window (tpm).
    Tokens,
    /// Requests in flight.
    Parallel,
}

impl Kind {
    /// The suffix of the counter's key and LiteLLM's "Limit type".
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Requests => "requests",
            Kind::Tokens => "tokens",
            Kind::Parallel => "parallel",
        }
    }
}

/// One limit a request is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Who is limited.
    pub scope: Scope,
    /// What is counted.
    pub kind: Kind,
    /// The limit per window (or in flight).
    pub limit: u64,
    /// The counter's name: `{scope:value}:kind`.
    pub key: String,
}

impl Descriptor {
    /// A descriptor for `scope`/`value` limited to `limit` per window.
    pub fn new(scope: Scope, value: &str, kind: Kind, limit: u64) -> Descriptor {
        // Pieces pushed, not `write!`: built for every limit of every
        // request, and the formatting machinery costs more than the copy.
        let (scope_name, kind_name) = (scope.as_str(), kind.as_str());
        let mut key = String::with_capacity(scope_name.len() + value.len() + kind_name.len() + 4);
        key.push('{');
        key.push_str(scope_name);
        key.push(':');
        key.push_str(value);
        key.push_str("}:");
        key.push_str(kind_name);
        Descriptor {
            scope,
            kind,
            limit,
            key,
        }
    }

    /// The scope's value (key hash, user id...), as the 429 message shows
    /// it: the part of the counter's name between `{scope:` and `}:kind`
    /// (one string a descriptor, not two).
    pub fn value(&self) -> &str {
        let start = self.scope.as_str().len() + 2;
        let end = self.key.len().saturating_sub(self.kind.as_str().len() + 2);
        self.key.get(start..end).unwrap_or_default()
    }
}

/// rpm, tpm and parallel limits of one scope, as the records and the config
/// hold them (absent or non-positive: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScopeLimits {
    /// Requests per window.
    pub rpm: Option<u64>,
    /// Tokens per window.
    pub tpm: Option<u64>,
    /// Requests in flight.
    pub parallel: Option<u64>,
}

impl ScopeLimits {
    /// Limits from the records' signed fields; zero or negative means none.
    pub fn from_fields(rpm: Option<i64>, tpm: Option<i64>, parallel: Option<i64>) -> ScopeLimits {
        let positive = |v: Option<i64>| v.filter(|v| *v > 0).map(|v| v as u64);
        ScopeLimits {
            rpm: positive(rpm),
            tpm: positive(tpm),
            parallel: positive(parallel),
        }
    }

    /// Whether any limit is set.
    pub fn is_empty(&self) -> bool {
        self.rpm.is_none() && self.tpm.is_none() && self.parallel.is_none()
    }

    /// Appends one descriptor per set limit.
    pub fn push_into(&self, scope: Scope, value: &str, out: &mut Vec<Descriptor>) {
        for (kind, limit) in [
            (Kind::Requests, self.rpm),
            (Kind::Tokens, self.tpm),
            (Kind::Parallel, self.parallel),
        ] {
            if let Some(limit) = limit {
                out.push(Descriptor::new(scope, value, kind, limit));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_hash_tagged_on_scope_and_value() {
        let d = Descriptor::new(Scope::ModelPerKey, "abc:gpt-4o", Kind::Tokens, 200);
        assert_eq!(d.key, "{model_per_key:abc:gpt-4o}:tokens");
        assert_eq!(d.value(), "abc:gpt-4o");
        let d = Descriptor::new(Scope::ApiKey, "abc", Kind::Parallel, 2);
        assert_eq!(d.key, "{api_key:abc}:parallel");
        assert_eq!(d.value(), "abc");
        let d = Descriptor::new(Scope::EndUser, "", Kind::Requests, 2);
        assert_eq!((d.key.as_str(), d.value()), ("{end_user:}:requests", ""));
    }

    #[test]
    fn only_positive_limits_make_descriptors() {
        let limits = ScopeLimits::from_fields(Some(10), Some(0), Some(-1));
        let mut out = Vec::new();
        limits.push_into(Scope::Team, "t1", &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].kind, out[0].limit), (Kind::Requests, 10));
        assert!(ScopeLimits::from_fields(None, None, Some(0)).is_empty());
    }
}
