//! `router_settings` with LiteLLM's names, validated at start-up. LiteLLM
//! also reads several of them from `litellm_settings`; both are accepted and
//! `router_settings` wins field by field.

use super::retry::PerClass;
use super::strategy::Strategy;
use serde_yaml::Value;
use std::collections::HashMap;
use std::time::Duration;

/// LiteLLM's default `num_retries` (the OpenAI SDK's).
const DEFAULT_NUM_RETRIES: u32 = 2;
/// LiteLLM's default `max_fallbacks`.
const DEFAULT_MAX_FALLBACKS: u32 = 5;
/// LiteLLM's default `cooldown_time`.
const DEFAULT_COOLDOWN: Duration = Duration::from_secs(5);

/// How the router chooses, retries, falls back and cools down.
#[derive(Debug, Clone, PartialEq)]
pub struct RouterSettings {
    /// `routing_strategy`.
    pub routing_strategy: Strategy,
    /// `num_retries`: retries within a group when the class has no policy.
    pub num_retries: u32,
    /// `retry_after`: the least wait before retrying the same deployment.
    pub retry_after: Duration,
    /// `retry_policy`: retries per error class.
    pub retry_policy: PerClass,
    /// `allowed_fails`: failures in a minute before a cooldown.
    pub allowed_fails: Option<u32>,
    /// `allowed_fails_policy`: the same per error class.
    pub allowed_fails_policy: Option<PerClass>,
    /// `cooldown_time`.
    pub cooldown_time: Duration,
    /// `disable_cooldowns`.
    pub disable_cooldowns: bool,
    /// `fallbacks`: group → ordered groups, after any failure.
    pub fallbacks: Fallbacks,
    /// `default_fallbacks`: for groups without an entry in `fallbacks`.
    pub default_fallbacks: Vec<String>,
    /// `context_window_fallbacks`: for prompts too long for the group.
    pub context_window_fallbacks: Fallbacks,
    /// `content_policy_fallbacks`: after a content-policy refusal.
    pub content_policy_fallbacks: Fallbacks,
    /// `max_fallbacks`: fallback groups tried per request at most.
    pub max_fallbacks: u32,
    /// `timeout` (or `litellm_settings.request_timeout`): for deployments
    /// without their own.
    pub timeout: Option<Duration>,
    /// `stream_timeout`: for deployments without their own.
    pub stream_timeout: Option<Duration>,
    /// `enable_pre_call_checks`: skip deployments whose context window the
    /// prompt exceeds.
    pub enable_pre_call_checks: bool,
    /// `allowed_model_region` (this gateway's): regions allowed when the key
    /// and team set none.
    pub allowed_model_region: Option<Vec<String>>,
    /// `model_group_alias`: a name clients may ask for and the group that
    /// serves it.
    pub model_group_alias: HashMap<String, GroupAlias>,
    /// `enable_tag_filtering`: route by the request's tags and the
    /// deployments' `tags`.
    pub enable_tag_filtering: bool,
}

/// One `model_group_alias` entry: `alias: group` or
/// `alias: {model: group, hidden: true}`.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupAlias {
    /// The group served.
    pub target: String,
    /// Left out of `/v1/models`.
    pub hidden: bool,
}

impl RouterSettings {
    /// The group `model` names through `model_group_alias`, if it is an
    /// alias (one hop, as LiteLLM resolves it).
    pub fn group_alias(&self, model: &str) -> Option<&str> {
        self.model_group_alias.get(model).map(|a| a.target.as_str())
    }

    /// The aliases `/v1/models` lists (not hidden), with their groups.
    pub fn listed_aliases(&self) -> impl Iterator<Item = (&str, &str)> {
        self.model_group_alias
            .iter()
            .filter(|(_, a)| !a.hidden)
            .map(|(name, a)| (name.as_str(), a.target.as_str()))
    }
}

impl Default for RouterSettings {
    fn default() -> Self {
        RouterSettings {
            routing_strategy: Strategy::SimpleShuffle,
            num_retries: DEFAULT_NUM_RETRIES,
            retry_after: Duration::ZERO,
            retry_policy: PerClass::default(),
            allowed_fails: None,
            allowed_fails_policy: None,
            cooldown_time: DEFAULT_COOLDOWN,
            disable_cooldowns: false,
            fallbacks: Fallbacks::default(),
            default_fallbacks: Vec::new(),
            context_window_fallbacks: Fallbacks::default(),
            content_policy_fallbacks: Fallbacks::default(),
            max_fallbacks: DEFAULT_MAX_FALLBACKS,
            timeout: None,
            stream_timeout: None,
            enable_pre_call_checks: false,
            allowed_model_region: None,
            model_group_alias: HashMap::new(),
            enable_tag_filtering: false,
        }
    }
}

/// Fallback lists by group, as LiteLLM writes them: `[{group: [groups]}]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Fallbacks(HashMap<String, Vec<String>>);

impl Fallbacks {
    /// The ordered fallback groups of `group`.
    pub fn get(&self, group: &str) -> Option<&[String]> {
        self.0.get(group).map(Vec::as_slice)
    }
}

/// A setting with a wrong value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FieldError {
    /// Where, e.g. `router_settings.num_retries`.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

/// The two sections a setting may come from.
struct Sections<'a> {
    router: Option<&'a Value>,
    litellm: Option<&'a Value>,
}

impl<'a> Sections<'a> {
    /// The first non-null value of `names` (aliases), `router_settings`
    /// first, with the path it was found at.
    fn find(&self, names: &[&str]) -> Option<(String, &'a Value)> {
        let sections = [
            ("router_settings", self.router),
            ("litellm_settings", self.litellm),
        ];
        sections.into_iter().find_map(|(section, map)| {
            names.iter().find_map(|name| {
                let v = map?.get(*name)?;
                (!v.is_null()).then(|| (format!("{section}.{name}"), v))
            })
        })
    }

    fn parse<T>(
        &self,
        names: &[&str],
        parse: impl Fn(&Value) -> Result<T, String>,
    ) -> Result<Option<T>, FieldError> {
        match self.find(names) {
            None => Ok(None),
            Some((field, v)) => parse(v)
                .map(Some)
                .map_err(|problem| FieldError { field, problem }),
        }
    }
}

impl RouterSettings {
    /// Reads the settings from `router_settings` and `litellm_settings`;
    /// an error names the field and the problem.
    pub fn from_config(
        router_settings: Option<&Value>,
        litellm_settings: Option<&Value>,
    ) -> Result<RouterSettings, FieldError> {
        for (name, section) in [
            ("router_settings", router_settings),
            ("litellm_settings", litellm_settings),
        ] {
            if section.is_some_and(|v| !v.is_mapping() && !v.is_null()) {
                return Err(FieldError {
                    field: name.into(),
                    problem: "must be a mapping".into(),
                });
            }
        }
        let s = Sections {
            router: router_settings,
            litellm: litellm_settings,
        };
        let d = RouterSettings::default();
        Ok(RouterSettings {
            routing_strategy: s
                .parse(&["routing_strategy"], strategy)?
                .unwrap_or(d.routing_strategy),
            num_retries: s.parse(&["num_retries"], count)?.unwrap_or(d.num_retries),
            retry_after: s
                .parse(&["retry_after"], |v| seconds(v, true))?
                .unwrap_or(d.retry_after),
            retry_policy: s
                .parse(&["retry_policy"], |v| PerClass::parse(v, "Retries"))?
                .unwrap_or_default(),
            allowed_fails: s.parse(&["allowed_fails"], count)?,
            allowed_fails_policy: s.parse(&["allowed_fails_policy"], |v| {
                PerClass::parse(v, "AllowedFails")
            })?,
            cooldown_time: s
                .parse(&["cooldown_time"], |v| seconds(v, true))?
                .unwrap_or(d.cooldown_time),
            disable_cooldowns: s.parse(&["disable_cooldowns"], boolean)?.unwrap_or(false),
            fallbacks: s.parse(&["fallbacks"], fallbacks)?.unwrap_or_default(),
            default_fallbacks: s
                .parse(&["default_fallbacks"], strings)?
                .unwrap_or_default(),
            context_window_fallbacks: s
                .parse(&["context_window_fallbacks"], fallbacks)?
                .unwrap_or_default(),
            content_policy_fallbacks: s
                .parse(&["content_policy_fallbacks"], fallbacks)?
                .unwrap_or_default(),
            max_fallbacks: s
                .parse(&["max_fallbacks"], count)?
                .unwrap_or(d.max_fallbacks),
            timeout: s.parse(&["timeout", "request_timeout"], |v| seconds(v, false))?,
            stream_timeout: s.parse(&["stream_timeout"], |v| seconds(v, false))?,
            enable_pre_call_checks: s
                .parse(&["enable_pre_call_checks"], boolean)?
                .unwrap_or(false),
            allowed_model_region: s
                .parse(&["allowed_model_region"], strings)?
                .map(|rs| rs.iter().map(|r| r.to_ascii_lowercase()).collect()),
            model_group_alias: s
                .parse(&["model_group_alias"], group_aliases)?
                .unwrap_or_default(),
            enable_tag_filtering: s
                .parse(&["enable_tag_filtering"], boolean)?
                .unwrap_or(false),
        })
    }
}

/// `model_group_alias`: `{alias: group}` or `{alias: {model: group, hidden: bool}}`.
fn group_aliases(v: &Value) -> Result<HashMap<String, GroupAlias>, String> {
    let map = v
        .as_mapping()
        .ok_or_else(|| format!("expected a mapping of alias: group, got {}", show(v)))?;
    let mut out = HashMap::new();
    for (k, entry) in map {
        let alias = k
            .as_str()
            .ok_or_else(|| format!("alias {} is not a string", show(k)))?;
        let parsed = match entry {
            Value::String(target) => GroupAlias {
                target: target.clone(),
                hidden: false,
            },
            Value::Mapping(m) => {
                let target = m
                    .get("model")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{alias}: `model` must name a group"))?;
                let hidden = match m.get("hidden") {
                    None | Some(Value::Null) => false,
                    Some(h) => boolean(h).map_err(|e| format!("{alias}.hidden: {e}"))?,
                };
                GroupAlias {
                    target: target.to_string(),
                    hidden,
                }
            }
            other => {
                return Err(format!(
                    "{alias}: expected a group name or {{model, hidden}}, got {}",
                    show(other)
                ))
            }
        };
        if parsed.target.is_empty() {
            return Err(format!("{alias}: the group name is empty"));
        }
        out.insert(alias.to_string(), parsed);
    }
    Ok(out)
}

/// A number, or a string holding one (what an `os.environ/` reference gives).
fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A whole number >= 0.
pub(super) fn count(v: &Value) -> Result<u32, String> {
    match number(v) {
        Some(n) if n >= 0.0 && n.fract() == 0.0 && n <= f64::from(u32::MAX) => Ok(n as u32),
        _ => Err(format!("expected a whole number >= 0, got {}", show(v))),
    }
}

/// Seconds, >= 0 when `zero_ok`, else > 0.
fn seconds(v: &Value, zero_ok: bool) -> Result<Duration, String> {
    match number(v) {
        Some(n) if n.is_finite() && (n > 0.0 || (zero_ok && n == 0.0)) => {
            Ok(Duration::from_secs_f64(n))
        }
        _ => Err(format!(
            "expected a number of seconds {}, got {}",
            if zero_ok { ">= 0" } else { "> 0" },
            show(v)
        )),
    }
}

fn boolean(v: &Value) -> Result<bool, String> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Ok(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Ok(false),
        _ => Err(format!("expected true or false, got {}", show(v))),
    }
}

fn strategy(v: &Value) -> Result<Strategy, String> {
    v.as_str().and_then(Strategy::from_name).ok_or_else(|| {
        format!(
            "unknown routing strategy {} (one of: {})",
            show(v),
            Strategy::NAMES.join(", ")
        )
    })
}

/// A list of names, or one name.
fn strings(v: &Value) -> Result<Vec<String>, String> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Sequence(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("expected a list of names, got {}", show(i)))
            })
            .collect(),
        _ => Err(format!("expected a list of names, got {}", show(v))),
    }
}

/// `[{group: [groups]}, ...]`; the first entry for a group wins.
fn fallbacks(v: &Value) -> Result<Fallbacks, String> {
    let shape = || "expected a list of {group: [fallback groups]} entries".to_string();
    let mut map = HashMap::new();
    for entry in v.as_sequence().ok_or_else(shape)? {
        for (k, list) in entry.as_mapping().ok_or_else(shape)? {
            let group = k.as_str().ok_or_else(shape)?;
            let list = strings(list).map_err(|e| format!("{group}: {e}"))?;
            map.entry(group.to_string()).or_insert(list);
        }
    }
    Ok(Fallbacks(map))
}

/// A value as it appears in YAML, for messages.
pub(super) fn show(v: &Value) -> String {
    serde_yaml::to_string(v)
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| format!("{v:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(router: &str, litellm: &str) -> Result<RouterSettings, String> {
        let r: Value = serde_yaml::from_str(router).unwrap();
        let l: Value = serde_yaml::from_str(litellm).unwrap();
        RouterSettings::from_config(Some(&r), Some(&l)).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_group_aliases_in_both_forms() {
        let s = parse(
            "model_group_alias: {gpt-4: gpt-4o, old: {model: legacy, hidden: true}}\nenable_tag_filtering: true",
            "{}",
        )
        .unwrap();
        assert_eq!(s.group_alias("gpt-4"), Some("gpt-4o"));
        assert_eq!(s.group_alias("old"), Some("legacy"));
        assert_eq!(s.group_alias("gpt-4o"), None);
        let listed: Vec<_> = s.listed_aliases().collect();
        assert_eq!(listed, [("gpt-4", "gpt-4o")]);
        assert!(s.enable_tag_filtering);
        for bad in [
            "model_group_alias: [a]",
            "model_group_alias: {a: 1}",
            "model_group_alias: {a: {hidden: true}}",
            "model_group_alias: {a: {model: b, hidden: maybe}}",
            "model_group_alias: {a: ''}",
        ] {
            let err = parse(bad, "{}").unwrap_err();
            assert!(err.contains("model_group_alias"), "{bad}: {err}");
        }
    }

    #[test]
    fn defaults_match_litellm() {
        let s = RouterSettings::from_config(None, None).unwrap();
        assert_eq!(s, RouterSettings::default());
        assert_eq!(
            (s.num_retries, s.max_fallbacks, s.cooldown_time),
            (2, 5, Duration::from_secs(5))
        );
    }

    #[test]
    fn reads_litellm_names() {
        let s = parse(
            "routing_strategy: latency-based-routing\nnum_retries: '3'\nretry_after: 0.5\nretry_policy: {TimeoutErrorRetries: 4, BadRequestErrorRetries: 0}\nallowed_fails: 2\nallowed_fails_policy: {RateLimitErrorAllowedFails: 10}\ncooldown_time: 30\ndisable_cooldowns: true\nfallbacks: [{gpt: [claude, mistral]}, {claude: gpt}]\ndefault_fallbacks: [cheap]\ncontext_window_fallbacks: [{gpt: [gpt-long]}]\ncontent_policy_fallbacks: [{gpt: [claude]}]\nmax_fallbacks: 2\ntimeout: 30\nstream_timeout: 5\nenable_pre_call_checks: true\nallowed_model_region: eu\n",
            "{}",
        )
        .unwrap();
        assert_eq!(s.routing_strategy, Strategy::LatencyBased);
        assert_eq!(
            (s.num_retries, s.retry_after),
            (3, Duration::from_millis(500))
        );
        assert_eq!(
            s.retry_policy.for_class(crate::error::ErrorClass::Timeout),
            Some(4)
        );
        assert_eq!(
            s.retry_policy
                .for_class(crate::error::ErrorClass::BadRequest),
            Some(0)
        );
        assert_eq!(
            s.retry_policy
                .for_class(crate::error::ErrorClass::RateLimit),
            None
        );
        assert_eq!(s.allowed_fails, Some(2));
        assert_eq!(
            s.allowed_fails_policy
                .unwrap()
                .for_class(crate::error::ErrorClass::RateLimit),
            Some(10)
        );
        assert_eq!(s.cooldown_time, Duration::from_secs(30));
        assert!(s.disable_cooldowns && s.enable_pre_call_checks);
        assert_eq!(s.fallbacks.get("gpt").unwrap(), ["claude", "mistral"]);
        assert_eq!(s.fallbacks.get("claude").unwrap(), ["gpt"]);
        assert_eq!(s.default_fallbacks, ["cheap"]);
        assert_eq!(s.context_window_fallbacks.get("gpt").unwrap(), ["gpt-long"]);
        assert_eq!(s.content_policy_fallbacks.get("gpt").unwrap(), ["claude"]);
        assert_eq!(s.max_fallbacks, 2);
        assert_eq!(
            (s.timeout, s.stream_timeout),
            (Some(Duration::from_secs(30)), Some(Duration::from_secs(5)))
        );
        assert_eq!(s.allowed_model_region.unwrap(), ["eu"]);
    }

    #[test]
    fn litellm_settings_fill_in_and_router_settings_win() {
        let s = parse(
            "num_retries: 1\n",
            "num_retries: 7\nfallbacks: [{a: [b]}]\nrequest_timeout: 12\nrouting_strategy: least-busy\n",
        )
        .unwrap();
        assert_eq!(s.num_retries, 1);
        assert_eq!(s.fallbacks.get("a").unwrap(), ["b"]);
        assert_eq!(s.timeout, Some(Duration::from_secs(12)));
        assert_eq!(s.routing_strategy, Strategy::LeastBusy);
    }

    #[test]
    fn errors_name_the_field() {
        let err = |r: &str| parse(r, "{}").unwrap_err();
        assert_eq!(
            err("num_retries: -1"),
            "router_settings.num_retries: expected a whole number >= 0, got -1"
        );
        assert!(err("routing_strategy: fastest")
            .starts_with("router_settings.routing_strategy: unknown routing strategy fastest (one of: simple-shuffle,"));
        assert!(err("fallbacks: {a: b}").starts_with("router_settings.fallbacks: expected a list"));
        assert!(err("fallbacks: [{a: [1]}]")
            .starts_with("router_settings.fallbacks: a: expected a list of names"));
        assert!(err("retry_policy: {TimeoutRetries: 1}")
            .starts_with("router_settings.retry_policy: unknown key TimeoutRetries"));
        assert!(err("timeout: 0")
            .starts_with("router_settings.timeout: expected a number of seconds > 0"));
        assert!(err("disable_cooldowns: maybe").starts_with("router_settings.disable_cooldowns:"));
        assert_eq!(
            parse("{}", "max_fallbacks: x").unwrap_err(),
            "litellm_settings.max_fallbacks: expected a whole number >= 0, got x"
        );
        let list: Value = serde_yaml::from_str("[1]").unwrap();
        assert_eq!(
            RouterSettings::from_config(Some(&list), None)
                .unwrap_err()
                .field,
            "router_settings"
        );
    }
}
