//! Which environment variables a deployment added through the API may name
//! with `os.environ/NAME`. LiteLLM resolves these references for stored
//! models, so providers' keys can stay in the environment; but an admin key
//! must not be able to point a model at a host of its choice with the
//! gateway's own secrets as its `api_key` or headers. So, for stored models:
//!
//! - the gateway's own variables are never resolved ([`DENIED`], and any
//!   name starting with `REDIS_`);
//! - nor is any variable whose value is one of the gateway's secrets (the
//!   master key, the salt key, the database and Redis URLs and the
//!   passwords inside them, the Redis password, a key declared in the
//!   config), whatever its name;
//! - with `gateway_settings.model_env_allowlist` set, only the names it
//!   lists resolve (`NAME`, or `PREFIX*` for every name with that prefix).
//!
//! The config file's own entries are the operator's and are not limited.

use crate::config::EntryError;
use serde_json::Value;
use sha2::{Digest, Sha256};

const PREFIX: &str = "os.environ/";

/// The gateway's own variables, never resolved for a stored model.
pub const DENIED: [&str; 12] = [
    "LITELLM_MASTER_KEY",
    "LITELLM_SALT_KEY",
    "DATABASE_URL",
    "DIRECT_URL",
    "PGPASSWORD",
    "REDIS_URL",
    "REDIS_HOST",
    "REDIS_PORT",
    "REDIS_PASSWORD",
    "REDIS_USERNAME",
    "WEBHOOK_URL",
    "SLACK_WEBHOOK_URL",
];

/// Prefixes of the gateway's own variables.
const DENIED_PREFIXES: [&str; 1] = ["REDIS_"];

/// The rules above; the default refuses the gateway's own variables only.
#[derive(Debug, Default, Clone)]
pub struct EnvPolicy {
    /// `gateway_settings.model_env_allowlist`, when set.
    allow: Option<Vec<String>>,
    /// sha256 of each secret value.
    secrets: Vec<[u8; 32]>,
}

impl EnvPolicy {
    /// A policy with `allowlist` (`None`: any name not refused otherwise).
    pub fn new(allowlist: Option<Vec<String>>) -> Self {
        EnvPolicy {
            allow: allowlist,
            secrets: Vec::new(),
        }
    }

    /// Also refuses any variable whose value is `secret` (ignored when
    /// empty).
    pub fn refuse_value(mut self, secret: &str) -> Self {
        if !secret.is_empty() {
            self.secrets.push(Sha256::digest(secret.as_bytes()).into());
        }
        self
    }

    /// Also refuses any variable whose value is the password of `url`'s
    /// userinfo (`scheme://user:password@host`), as written or
    /// percent-decoded: a config may build the database or Redis URL from a
    /// password kept in a variable of any name.
    pub fn refuse_url_password(self, url: &str) -> Self {
        let Some(password) = url::Url::parse(url)
            .ok()
            .and_then(|u| u.password().map(str::to_string))
        else {
            return self;
        };
        let decoded = percent_encoding::percent_decode_str(&password)
            .decode_utf8_lossy()
            .into_owned();
        let policy = self.refuse_value(&password);
        if decoded == password {
            policy
        } else {
            policy.refuse_value(&decoded)
        }
    }

    /// Also refuses any variable whose value has this sha256 (a declared
    /// key's token).
    pub fn refuse_hash(mut self, hash: [u8; 32]) -> Self {
        self.secrets.push(hash);
        self
    }

    /// Why variable `name` may not be resolved for a stored model, if it
    /// may not; `env` reads the environment.
    pub fn refusal(&self, name: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
        let own = DENIED.contains(&name) || DENIED_PREFIXES.iter().any(|p| name.starts_with(p));
        if own {
            return Some(format!(
                "environment variable {name} belongs to the gateway and is never resolved for a model added through the API"
            ));
        }
        if let Some(allow) = &self.allow {
            let listed = allow.iter().any(|a| match a.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => a == name,
            });
            if !listed {
                return Some(format!(
                    "environment variable {name} is not in gateway_settings.model_env_allowlist"
                ));
            }
        }
        let value = env(name)?;
        let hash: [u8; 32] = Sha256::digest(value.as_bytes()).into();
        self.secrets.contains(&hash).then(|| {
            format!(
                "environment variable {name} holds one of the gateway's secrets and is never resolved for a model added through the API"
            )
        })
    }

    /// Refuses the first `os.environ/` reference of `entry` (a `model_list`
    /// entry as JSON) that may not be resolved, naming its field.
    pub fn check(
        &self,
        entry: &Value,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), EntryError> {
        self.walk(entry, String::new(), env)
    }

    fn walk(
        &self,
        value: &Value,
        path: String,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), EntryError> {
        match value {
            Value::String(s) => match s.strip_prefix(PREFIX) {
                Some(name) => match self.refusal(name.trim(), env) {
                    Some(problem) => Err(EntryError {
                        problem: format!("{path}: {problem}"),
                        field: path,
                    }),
                    None => Ok(()),
                },
                None => Ok(()),
            },
            Value::Array(items) => items
                .iter()
                .enumerate()
                .try_for_each(|(i, item)| self.walk(item, format!("{path}[{i}]"), env)),
            Value::Object(map) => map.iter().try_for_each(|(k, v)| {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                self.walk(v, child, env)
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(name: &str) -> Option<String> {
        match name {
            "OPENAI_API_KEY" | "TEAM_OPENAI_KEY" => Some("sk-provider".into()),
            "MY_COPY_OF_THE_MASTER" => Some("sk-master".into()),
            "DECLARED" => Some("sk-declared-1".into()),
            _ => None,
        }
    }

    fn field(policy: &EnvPolicy, params: Value) -> Option<String> {
        let entry = json!({"model_name": "m", "litellm_params": params});
        policy.check(&entry, &env).err().map(|e| e.field)
    }

    #[test]
    fn refuses_the_gateways_own_variables_and_secret_values() {
        let declared: [u8; 32] = Sha256::digest(b"sk-declared-1").into();
        let policy = EnvPolicy::default()
            .refuse_value("sk-master")
            .refuse_value("")
            .refuse_hash(declared);
        for name in [
            "LITELLM_MASTER_KEY",
            "DATABASE_URL",
            "REDIS_PASSWORD",
            "REDIS_SENTINEL_PASSWORD",
        ] {
            let got = field(&policy, json!({"api_key": format!("os.environ/{name}")}));
            assert_eq!(got.as_deref(), Some("litellm_params.api_key"), "{name}");
        }
        let got = field(
            &policy,
            json!({"extra_headers": {"x-leak": "os.environ/MY_COPY_OF_THE_MASTER"}}),
        );
        assert_eq!(got.as_deref(), Some("litellm_params.extra_headers.x-leak"));
        let got = field(&policy, json!({"api_key": "os.environ/ DECLARED"}));
        assert_eq!(got.as_deref(), Some("litellm_params.api_key"));
        assert_eq!(
            field(&policy, json!({"api_key": "os.environ/OPENAI_API_KEY"})),
            None
        );
        assert_eq!(field(&policy, json!({"api_key": "sk-inline"})), None);
        assert_eq!(
            field(&policy, json!({"api_key": "os.environ/UNSET"})),
            None,
            "unset is the resolver's error"
        );
    }

    #[test]
    fn with_an_allowlist_only_listed_names_resolve() {
        let policy = EnvPolicy::new(Some(vec!["OPENAI_API_KEY".into(), "TEAM_*".into()]));
        assert_eq!(
            field(&policy, json!({"api_key": "os.environ/OPENAI_API_KEY"})),
            None
        );
        assert_eq!(
            field(&policy, json!({"api_key": "os.environ/TEAM_OPENAI_KEY"})),
            None
        );
        let got = field(&policy, json!({"api_key": "os.environ/OTHER_KEY"}));
        assert_eq!(got.as_deref(), Some("litellm_params.api_key"));
        let policy = EnvPolicy::new(Some(vec!["DATABASE_URL".into(), "*".into()]));
        let got = field(&policy, json!({"api_base": "os.environ/DATABASE_URL"}));
        assert_eq!(
            got.as_deref(),
            Some("litellm_params.api_base"),
            "never, even if listed"
        );
    }

    #[test]
    fn refuses_the_passwords_inside_the_gateways_urls() {
        let policy = EnvPolicy::default()
            .refuse_url_password("postgres://gw:pg%2Fsecret@db:5432/litellm")
            .refuse_url_password("redis://:redis-secret@cache:6379")
            .refuse_url_password("redis://cache:6379")
            .refuse_url_password("not a url");
        let env = |name: &str| match name {
            "DB_PASS" => Some("pg/secret".to_string()),
            "DB_PASS_ENCODED" => Some("pg%2Fsecret".to_string()),
            "CACHE_PW" => Some("redis-secret".to_string()),
            "PROVIDER" => Some("sk-provider".to_string()),
            _ => None,
        };
        for name in ["DB_PASS", "DB_PASS_ENCODED", "CACHE_PW"] {
            let why = policy.refusal(name, &env);
            assert!(
                why.as_deref()
                    .is_some_and(|w| w.contains("one of the gateway's secrets")),
                "{name}: {why:?}"
            );
        }
        assert_eq!(policy.refusal("PROVIDER", &env), None);
    }
}
