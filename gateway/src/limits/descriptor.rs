//! What a request is counted against: one descriptor per (scope, kind) that
//! has a limit, named the way LiteLLM's v3 limiter names its Redis keys
//! (`{api_key:<hash>}:tokens`), hash-tagged on `{scope:value}`.

use std::sync::Arc;

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
    /// A team member's limits in the key's team (the team's member budget
    /// row: `team_member_rpm_limit` / `team_member_tpm_limit`).
    TeamMember,
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
            Scope::TeamMember => "team_member",
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
    /// The counter's name: `{scope:value}:kind`, shared with the
    /// [`CounterNames`] it may come from.
    pub key: Arc<str>,
}

impl Descriptor {
    /// A descriptor for `scope`/`value` limited to `limit` per window.
    pub fn new(scope: Scope, value: &str, kind: Kind, limit: u64) -> Descriptor {
        Descriptor {
            scope,
            kind,
            limit,
            key: counter_name(scope, value, kind),
        }
    }

    /// The scope's value (key hash, user id...), as the 429 message shows
    /// it: the part of the counter's name between `{scope:` and `}:kind`
    /// (one string a descriptor, not two).
    pub fn value(&self) -> &str {
        value_in(&self.key, self.scope, self.kind)
    }
}

/// The value in `scope`/`kind`'s counter name `key`.
fn value_in(key: &str, scope: Scope, kind: Kind) -> &str {
    let start = scope.as_str().len() + 2;
    let end = key.len().saturating_sub(kind.as_str().len() + 2);
    key.get(start..end).unwrap_or_default()
}

/// The counter's name `{scope:value}:kind`, in one allocation: pieces
/// copied into a stack buffer (built for limits of every request, and the
/// formatting machinery costs more than the copy), a longer name through a
/// `String`.
fn counter_name(scope: Scope, value: &str, kind: Kind) -> Arc<str> {
    let pieces = ["{", scope.as_str(), ":", value, "}:", kind.as_str()];
    let len: usize = pieces.iter().map(|p| p.len()).sum();
    let mut buf = [0u8; 128];
    if let Some(out) = buf.get_mut(..len) {
        let mut at = 0;
        for piece in pieces {
            out[at..at + piece.len()].copy_from_slice(piece.as_bytes());
            at += piece.len();
        }
        // Whole `str`s end to end: always UTF-8.
        if let Ok(name) = std::str::from_utf8(out) {
            return Arc::from(name);
        }
    }
    Arc::from(pieces.concat())
}

/// The counter names of one scope value, one a kind, made once and shared
/// by the descriptors of every request counted against them (a cached
/// key's own: [`ScopeLimits::push_named`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterNames {
    scope: Scope,
    /// `requests`, `tokens`, `parallel`, in [`Kind`]'s order.
    names: [Arc<str>; 3],
}

impl CounterNames {
    /// The names of `scope`/`value`'s counters.
    pub fn new(scope: Scope, value: &str) -> CounterNames {
        CounterNames {
            scope,
            names: [Kind::Requests, Kind::Tokens, Kind::Parallel]
                .map(|kind| counter_name(scope, value, kind)),
        }
    }

    /// Whether these are the names of `scope`/`value`'s counters.
    pub fn are_for(&self, scope: Scope, value: &str) -> bool {
        self.scope == scope && value_in(&self.names[0], scope, Kind::Requests) == value
    }

    /// A descriptor of `kind` limited to `limit`, on its shared name.
    fn descriptor(&self, kind: Kind, limit: u64) -> Descriptor {
        let name = match kind {
            Kind::Requests => &self.names[0],
            Kind::Tokens => &self.names[1],
            Kind::Parallel => &self.names[2],
        };
        Descriptor {
            scope: self.scope,
            kind,
            limit,
            key: name.clone(),
        }
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

    /// [`push_into`](Self::push_into) on names made before: the same
    /// descriptors, their keys shared instead of built.
    pub fn push_named(&self, names: &CounterNames, out: &mut Vec<Descriptor>) {
        for (kind, limit) in [
            (Kind::Requests, self.rpm),
            (Kind::Tokens, self.tpm),
            (Kind::Parallel, self.parallel),
        ] {
            if let Some(limit) = limit {
                out.push(names.descriptor(kind, limit));
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
        assert_eq!(&*d.key, "{model_per_key:abc:gpt-4o}:tokens");
        assert_eq!(d.value(), "abc:gpt-4o");
        let d = Descriptor::new(Scope::ApiKey, "abc", Kind::Parallel, 2);
        assert_eq!(&*d.key, "{api_key:abc}:parallel");
        assert_eq!(d.value(), "abc");
        let d = Descriptor::new(Scope::EndUser, "", Kind::Requests, 2);
        assert_eq!((&*d.key, d.value()), ("{end_user:}:requests", ""));
        // Past the stack buffer: the same name, through a `String`.
        let long = "é".repeat(100);
        let d = Descriptor::new(Scope::User, &long, Kind::Tokens, 2);
        assert_eq!(&*d.key, format!("{{user:{long}}}:tokens"));
        assert_eq!(d.value(), long);
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

    const SCOPES: [Scope; 11] = [
        Scope::Server,
        Scope::ApiKey,
        Scope::User,
        Scope::Team,
        Scope::Organization,
        Scope::ModelPerKey,
        Scope::ModelPerTeam,
        Scope::EndUser,
        Scope::TagPerKey,
        Scope::ModelPerOrganization,
        Scope::TeamMember,
    ];
    const KINDS: [Kind; 3] = [Kind::Requests, Kind::Tokens, Kind::Parallel];

    proptest::proptest! {
        /// Names of any length (past the stack buffer too) and any text
        /// are the pieces end to end, as `format!` wrote them, and shared
        /// names make the same descriptors.
        #[test]
        fn counter_names_are_the_pieces_end_to_end(
            scope in proptest::sample::select(SCOPES.to_vec()),
            kind in proptest::sample::select(KINDS.to_vec()),
            value in ".{0,140}",
            limit: u64,
        ) {
            let d = Descriptor::new(scope, &value, kind, limit);
            let old = format!("{{{}:{value}}}:{}", scope.as_str(), kind.as_str());
            proptest::prop_assert_eq!(&*d.key, old.as_str());
            proptest::prop_assert_eq!(d.value(), value.as_str());
            let names = CounterNames::new(scope, &value);
            proptest::prop_assert!(names.are_for(scope, &value));
            proptest::prop_assert_eq!(names.descriptor(kind, limit), d);
        }
    }

    #[test]
    fn named_descriptors_are_the_built_ones_sharing_their_names() {
        let limits = ScopeLimits::from_fields(Some(10), Some(1000), Some(2));
        let names = CounterNames::new(Scope::ApiKey, "abc");
        let (mut built, mut named, mut again) = (Vec::new(), Vec::new(), Vec::new());
        limits.push_into(Scope::ApiKey, "abc", &mut built);
        limits.push_named(&names, &mut named);
        limits.push_named(&names, &mut again);
        assert_eq!(built.len(), 3);
        assert_eq!(named, built);
        assert!(named
            .iter()
            .zip(&again)
            .all(|(a, b)| Arc::ptr_eq(&a.key, &b.key)));
        assert!(!names.are_for(Scope::ApiKey, "abd"));
        assert!(!names.are_for(Scope::ApiKey, "ab"));
        assert!(!names.are_for(Scope::User, "abc"));
    }

    /// `Limiter::descriptors` on a cached key: the same descriptors as
    /// built each time, their names made once; names kept for another
    /// token are not used, and a key with no limit of its own makes none.
    #[test]
    fn a_cached_keys_requests_share_its_counter_names() {
        use crate::limits::{AdmitInput, KeyRows, LimitSettings, Limiter};
        use crate::store::KeyRecord;
        use std::sync::OnceLock;
        let (limiter, _) = Limiter::new(LimitSettings::default());
        let key = KeyRecord {
            token: "ab".repeat(32),
            rpm_limit: Some(10),
            tpm_limit: Some(1000),
            max_parallel_requests: Some(2),
            ..Default::default()
        };
        let other = KeyRecord {
            token: "cd".repeat(32),
            ..key.clone()
        };
        let free = KeyRecord {
            token: "ef".repeat(32),
            ..Default::default()
        };
        let prompt = crate::spend::PromptEstimate::new(bytes::Bytes::new());
        let descs = |key: &KeyRecord, names: Option<&OnceLock<CounterNames>>| {
            limiter.descriptors(&AdmitInput {
                key: Some(KeyRows {
                    key,
                    team: None,
                    user: None,
                    org: None,
                    names,
                }),
                model: "gpt-4o",
                end_user: None,
                end_user_limits: None,
                prompt: &prompt,
                max_tokens: None,
                estimated_output: None,
                embeddings: false,
                request_id: "",
                extra: Vec::new(),
            })
        };
        let kept = OnceLock::new();
        let built = descs(&key, None);
        let first = descs(&key, Some(&kept));
        let second = descs(&key, Some(&kept));
        assert_eq!(built.len(), 3);
        assert_eq!(first, built);
        assert!(first
            .iter()
            .zip(&second)
            .all(|(a, b)| Arc::ptr_eq(&a.key, &b.key)));
        assert!(first.iter().all(|d| kept
            .get()
            .is_some_and(|n| n.are_for(Scope::ApiKey, &key.token))
            && d.value() == key.token));
        assert_eq!(descs(&other, Some(&kept)), descs(&other, None));
        assert!(descs(&other, Some(&kept))
            .iter()
            .all(|d| d.value() == other.token));
        let untouched = OnceLock::new();
        assert!(descs(&free, Some(&untouched)).is_empty());
        assert!(untouched.get().is_none());
    }
}
