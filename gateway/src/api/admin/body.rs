//! Management request bodies: a JSON object into a typed struct, every
//! unknown, missing or wrong-typed field refused with a 400 that names it,
//! [`Patch`] for fields of partial updates, and the range checks of every
//! number an admin sends (amounts, limits, durations), all with checked
//! arithmetic.

use crate::error::GatewayError;
use crate::store::{parse_duration, DurationError, MAX_DURATION};
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// The largest USD amount a budget or a spend may hold (a billion dollars):
/// room for any real budget, far inside the nano-dollar counters' range.
pub const MAX_USD: f64 = 1e9;

/// The largest rpm, tpm or parallel-request limit (10^12): exact in the
/// limiter's counters and in Redis's Lua numbers.
pub const MAX_LIMIT: i64 = 1_000_000_000_000;

/// A 400 naming `field`.
pub fn bad_field(field: &str, message: impl Into<String>) -> GatewayError {
    GatewayError::BadField {
        field: field.to_string(),
        message: message.into(),
    }
}

/// A 400 for a required field that is absent.
pub fn missing(field: &str) -> GatewayError {
    bad_field(field, "missing required field")
}

/// Parses a JSON object body into `T`; an empty body reads as `{}`.
pub fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, GatewayError> {
    let start = body.iter().position(|b| !b.is_ascii_whitespace());
    let body: &[u8] = match start {
        None => b"{}",
        Some(i) if body[i] == b'{' => body,
        Some(_) => {
            return Err(GatewayError::MalformedJson(
                "the body must be a JSON object".into(),
            ))
        }
    };
    check_sizes(body)?;
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let out_of_range = inner.to_string().starts_with("number out of range");
        if (inner.is_syntax() && !out_of_range) || inner.is_eof() {
            return GatewayError::MalformedJson(inner.to_string());
        }
        field_error(&path, &inner.to_string())
    })?;
    de.end()
        .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    Ok(value)
}

/// The JSON type of a field that LiteLLM's request type declares and this
/// gateway accepts without enforcing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Str,
    /// Any number.
    Num,
    /// An integer.
    Int,
    /// `true` or `false`.
    Bool,
    /// An array.
    List,
    /// An object.
    Object,
}

impl Kind {
    /// Whether `v` is of this kind; `null` always is (LiteLLM's fields are
    /// optional).
    fn admits(self, v: &Value) -> bool {
        match (self, v) {
            (_, Value::Null) => true,
            (Kind::Str, Value::String(_)) | (Kind::Bool, Value::Bool(_)) => true,
            (Kind::Num, Value::Number(_)) => true,
            (Kind::Int, Value::Number(n)) => n.is_i64() || n.is_u64(),
            (Kind::List, Value::Array(_)) | (Kind::Object, Value::Object(_)) => true,
            _ => false,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Str => "a string",
            Kind::Num => "a number",
            Kind::Int => "an integer",
            Kind::Bool => "a boolean",
            Kind::List => "a list",
            Kind::Object => "an object",
        }
    }
}

/// The fields LiteLLM keeps in the row's `metadata` rather than in a column
/// of its own (its `LiteLLM_ManagementEndpoint_MetadataFields` and
/// `..._Premium`, 1.110.2); given on a key or team, they land there here
/// too.
pub(super) const METADATA_FIELDS: [&str; 30] = [
    "model_rpm_limit",
    "model_tpm_limit",
    "model_itpm_limit",
    "model_otpm_limit",
    "default_estimated_output_tokens",
    "default_estimated_output_tokens_per_model",
    "mcp_rpm_limit",
    "tag_rpm_limit",
    "rpm_limit_type",
    "tpm_limit_type",
    "enforced_params",
    "temp_budget_increase",
    "temp_budget_expiry",
    "allowed_vector_store_indexes",
    "enforced_batch_output_expires_after",
    "enforced_file_expires_after",
    "throttle_on_budget_exceeded",
    "enable_prompt_caching",
    "end_user_budget_id",
    "require_trace_id",
    "disable_global_guardrails",
    "guardrails",
    "policies",
    "tags",
    "team_member_key_duration",
    "prompts",
    "logging",
    "secret_manager_settings",
    "allowed_passthrough_routes",
    "denied_passthrough_routes",
];

/// Accepted fields LiteLLM acts on that this gateway does not, refused
/// (400 naming the field) when given a value rather than dropped: ignoring
/// them would let callers spend what LiteLLM refuses them.
const REFUSED_WHEN_SET: [(&str, &str); 3] = [
    (
        "tpd_limit",
        "is not enforced by this gateway (LiteLLM charges /v1/batches submissions to it as tokens per day); leave it unset",
    ),
    (
        "enforced_file_expires_after",
        "is not applied by this gateway (LiteLLM sets it as the expiry of the team's /v1/files uploads); leave it unset",
    ),
    (
        "enforced_batch_output_expires_after",
        "is not applied by this gateway (LiteLLM sets it as the expiry of the team's /v1/batches outputs); leave it unset",
    ),
];

/// Parses like [`parse`], after taking out the fields of `accepted`: fields
/// LiteLLM's request type declares that this gateway does not enforce. Each
/// is checked against its [`Kind`] (400 naming it), then dropped, except
/// those LiteLLM keeps in `metadata`, which are returned for the caller to
/// store there. Names in neither `T` nor `accepted` are still a 400: a typo
/// is refused, not silently ignored.
pub fn parse_accepting<T: DeserializeOwned>(
    body: &[u8],
    accepted: &[(&str, Kind)],
) -> Result<(T, Map<String, Value>), GatewayError> {
    let mut for_metadata = Map::new();
    let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(body) else {
        return Ok((parse(body)?, for_metadata));
    };
    if !accepted.iter().any(|(name, _)| fields.contains_key(*name)) {
        return Ok((parse(body)?, for_metadata));
    }
    check_sizes(body)?;
    for (name, kind) in accepted {
        let Some(v) = fields.remove(*name) else {
            continue;
        };
        if !kind.admits(&v) {
            return Err(bad_field(name, format!("must be {}", kind.name())));
        }
        if *name == "tag_rpm_limit" {
            per_tag_limits(&v)?;
        }
        if let Some((_, reason)) = REFUSED_WHEN_SET.iter().find(|(n, _)| n == name) {
            if !v.is_null() {
                return Err(bad_field(name, (*reason).to_string()));
            }
        }
        if !v.is_null() && METADATA_FIELDS.contains(name) {
            for_metadata.insert(name.to_string(), v);
        }
    }
    let rest = serde_json::to_vec(&Value::Object(fields))
        .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    Ok((parse(&rest)?, for_metadata))
}

/// Refuses a body that sets one of `refused` to a value asking for
/// something (not `null`, `false`, `{}`, `[]` or a value the entry calls
/// harmless), at the top level or, for those LiteLLM also reads there, in
/// its `metadata`: a 400 naming the field and what LiteLLM does with it.
/// A body that is not a JSON object is left to the typed parse.
pub fn refuse_when_set(
    body: &[u8],
    refused: &[super::accepted::Refused],
) -> Result<(), GatewayError> {
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return Ok(());
    };
    let asks = |v: &Value, entry: &super::accepted::Refused| entry.asks(v);
    let metadata = fields.get("metadata").and_then(Value::as_object);
    for entry in refused {
        let top = fields.get(entry.name).filter(|v| asks(v, entry));
        let inner = metadata
            .filter(|_| entry.in_metadata)
            .and_then(|m| m.get(entry.name))
            .filter(|v| asks(v, entry));
        let field = match (top, inner) {
            (Some(_), _) => entry.name.to_string(),
            (None, Some(_)) => format!("metadata.{}", entry.name),
            (None, None) => continue,
        };
        return Err(bad_field(
            &field,
            format!(
                "is not applied by this gateway: {}; leave it unset",
                entry.why
            ),
        ));
    }
    Ok(())
}

/// Refuses a `tag_rpm_limit` (enforced on requests) whose limits are not
/// whole numbers of requests within [`MAX_LIMIT`].
fn per_tag_limits(v: &Value) -> Result<(), GatewayError> {
    let Some(limits) = v.as_object() else {
        return Ok(());
    };
    for (tag, n) in limits {
        if !n.as_i64().is_some_and(|n| (0..=MAX_LIMIT).contains(&n)) {
            return Err(bad_field(
                &format!("tag_rpm_limit.{tag}"),
                format!("must be a non-negative integer, at most {MAX_LIMIT}"),
            ));
        }
    }
    Ok(())
}

/// Longest string accepted anywhere in a management body (aliases,
/// metadata values, ids, provider parameters); they become log fields,
/// spend-row columns, metric labels and limiter keys.
pub const MAX_STRING_BYTES: usize = 16 * 1024;
/// Most members or items of one object or array in a management body.
pub const MAX_ITEMS: usize = 10_000;

/// Refuses a body with a string longer than [`MAX_STRING_BYTES`] or an
/// object or array of more than [`MAX_ITEMS`], naming where (400). Bodies
/// that are not JSON are left to the typed parse, which says why.
fn check_sizes(body: &[u8]) -> Result<(), GatewayError> {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ok(());
    };
    fn walk(v: &serde_json::Value, path: &mut String) -> Result<(), GatewayError> {
        use serde_json::Value;
        let at = |path: &str| {
            if path.is_empty() {
                ".".to_string()
            } else {
                path.to_string()
            }
        };
        match v {
            Value::String(s) if s.contains('\0') => {
                Err(bad_field(&at(path), "contains a NUL character"))
            }
            Value::String(s) if s.len() > MAX_STRING_BYTES => Err(bad_field(
                &at(path),
                format!(
                    "is {} bytes long; at most {MAX_STRING_BYTES} are accepted",
                    s.len()
                ),
            )),
            Value::Array(items) if items.len() > MAX_ITEMS => Err(bad_field(
                &at(path),
                format!(
                    "has {} items; at most {MAX_ITEMS} are accepted",
                    items.len()
                ),
            )),
            Value::Object(map) if map.len() > MAX_ITEMS => Err(bad_field(
                &at(path),
                format!(
                    "has {} members; at most {MAX_ITEMS} are accepted",
                    map.len()
                ),
            )),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    walk(item, path)?;
                    path.truncate(len);
                }
                Ok(())
            }
            Value::Object(map) => {
                for (key, item) in map {
                    if key.len() > MAX_STRING_BYTES {
                        return Err(bad_field(&at(path), "has a member name too long"));
                    }
                    if key.contains('\0') {
                        return Err(bad_field(
                            &at(path),
                            "has a member name with a NUL character",
                        ));
                    }
                    let len = path.len();
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                    walk(item, path)?;
                    path.truncate(len);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
    walk(&value, &mut String::new())
}

/// Names the field of a deserialization error: its path, or for a missing
/// field the path of its parent plus the name serde quotes.
fn field_error(path: &str, message: &str) -> GatewayError {
    let message = message.rsplit_once(" at line ").map_or(message, |(m, _)| m);
    let quoted = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(name, _)| name);
    let field = match (quoted, path) {
        (Some(name), "." | "") => name.to_string(),
        (Some(name), parent) => format!("{parent}.{name}"),
        (None, path) => path.to_string(),
    };
    bad_field(&field, message)
}

/// A field of a partial update: absent (keep), `null` (clear) or a value.
#[derive(Debug, Default, Clone, PartialEq)]
pub enum Patch<T> {
    /// Not in the body: the stored value stays.
    #[default]
    Keep,
    /// `null`: the stored value is cleared.
    Clear,
    /// A new value.
    Set(T),
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Patch<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Option::<T>::deserialize(d)?.map_or(Patch::Clear, Patch::Set))
    }
}

impl<T> Patch<T> {
    /// Applies the patch to an optional field.
    pub fn apply(self, field: &mut Option<T>) {
        match self {
            Patch::Keep => {}
            Patch::Clear => *field = None,
            Patch::Set(v) => *field = Some(v),
        }
    }

    /// Applies the patch to a field whose "unset" is its default (a list, a
    /// map, a flag).
    pub fn apply_or_default(self, field: &mut T)
    where
        T: Default,
    {
        match self {
            Patch::Keep => {}
            Patch::Clear => *field = T::default(),
            Patch::Set(v) => *field = v,
        }
    }

    /// Whether the body carried the field (a value or `null`).
    pub fn is_given(&self) -> bool {
        !matches!(self, Patch::Keep)
    }
}

/// Checks a USD amount of field `name`: finite, non-negative, at most
/// [`MAX_USD`].
pub fn amount(name: &str, v: f64) -> Result<f64, GatewayError> {
    if !v.is_finite() || v < 0.0 {
        return Err(bad_field(name, "must be a non-negative number"));
    }
    if v > MAX_USD {
        return Err(bad_field(name, format!("must be at most {MAX_USD} USD")));
    }
    Ok(v)
}

/// Checks a count limit of field `name`: non-negative, at most
/// [`MAX_LIMIT`].
pub fn limit(name: &str, v: i64) -> Result<i64, GatewayError> {
    if v < 0 {
        return Err(bad_field(name, "must be a non-negative integer"));
    }
    if v > MAX_LIMIT {
        return Err(bad_field(name, format!("must be at most {MAX_LIMIT}")));
    }
    Ok(v)
}

impl Patch<f64> {
    /// Applies a USD amount, checked by [`amount`].
    pub fn apply_amount(self, name: &str, field: &mut Option<f64>) -> Result<(), GatewayError> {
        if let Patch::Set(v) = self {
            amount(name, v)?;
        }
        self.apply(field);
        Ok(())
    }
}

impl Patch<i64> {
    /// Applies a count limit (tpm, rpm, parallel requests), checked by
    /// [`limit`].
    pub fn apply_limit(self, name: &str, field: &mut Option<i64>) -> Result<(), GatewayError> {
        if let Patch::Set(v) = self {
            limit(name, v)?;
        }
        self.apply(field);
        Ok(())
    }
}

impl Patch<String> {
    /// Applies `budget_duration`: a valid period also schedules the next
    /// reset from `now`; `null` removes both.
    pub fn apply_period(
        self,
        duration: &mut Option<String>,
        reset_at: &mut Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Result<(), GatewayError> {
        match self {
            Patch::Keep => {}
            Patch::Clear => (*duration, *reset_at) = (None, None),
            Patch::Set(d) => {
                *reset_at = Some(after("budget_duration", now, &d)?);
                *duration = Some(d);
            }
        }
        Ok(())
    }
}

/// Parses a LiteLLM duration (`30s`, `1h`, `30d`, `1mo`) of field `name`,
/// at most [`MAX_DURATION`].
pub fn period(name: &str, text: &str) -> Result<chrono::Duration, GatewayError> {
    parse_duration(text).map_err(|e| match e {
        DurationError::Malformed => bad_field(
            name,
            format!("'{text}' is not a duration such as 30s, 10m, 1h, 30d or 1mo"),
        ),
        DurationError::TooLong => bad_field(
            name,
            format!(
                "'{text}' is too long: at most {} days",
                MAX_DURATION.num_days()
            ),
        ),
    })
}

/// The time the duration `text` of field `name` after `now` ends.
pub fn after(name: &str, now: DateTime<Utc>, text: &str) -> Result<DateTime<Utc>, GatewayError> {
    now.checked_add_signed(period(name, text)?).ok_or_else(|| {
        bad_field(
            name,
            format!("'{text}' ends past the last representable date"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Default)]
    #[serde(default, deny_unknown_fields)]
    struct Probe {
        max_budget: Patch<f64>,
        items: Vec<Item>,
    }

    #[derive(Debug, Deserialize, Default)]
    #[serde(deny_unknown_fields)]
    struct Item {
        user_id: String,
    }

    fn field_of(body: &str) -> String {
        match parse::<Probe>(body.as_bytes()).unwrap_err() {
            GatewayError::BadField { field, .. } => field,
            other => panic!("not a field error: {other:?}"),
        }
    }

    #[test]
    fn accepted_fields_are_typed_dropped_or_kept_for_metadata() {
        let accepted = [
            ("tags", Kind::List),
            ("tpd_limit", Kind::Int),
            ("denied_passthrough_routes", Kind::List),
        ];
        let (p, meta): (Probe, _) = parse_accepting(
            br#"{"max_budget": 1, "tags": ["a"], "tpd_limit": null, "denied_passthrough_routes": ["/x"]}"#,
            &accepted,
        )
        .unwrap();
        assert_eq!(p.max_budget, Patch::Set(1.0));
        assert_eq!(meta.get("tags"), Some(&serde_json::json!(["a"])));
        // In LiteLLM's premium metadata fields, as `allowed_passthrough_routes`.
        assert_eq!(
            meta.get("denied_passthrough_routes"),
            Some(&serde_json::json!(["/x"]))
        );
        assert!(!meta.contains_key("tpd_limit"));
        let (_, meta): (Probe, _) = parse_accepting(br#"{"tags": null}"#, &accepted).unwrap();
        assert!(meta.is_empty());
        for (body, field) in [
            (r#"{"tags": "a"}"#, "tags"),
            (r#"{"tpd_limit": 1.5}"#, "tpd_limit"),
            (r#"{"tpd_limit": 5}"#, "tpd_limit"),
            (r#"{"tags": [], "max_budgett": 1}"#, "max_budgett"),
            (r#"{"tags": [], "max_budget": "x"}"#, "max_budget"),
        ] {
            let err = parse_accepting::<Probe>(body.as_bytes(), &accepted).unwrap_err();
            assert_eq!(err.param(), Some(field), "{body}");
        }
    }

    #[test]
    fn names_unknown_missing_and_mistyped_fields() {
        assert_eq!(field_of(r#"{"max_budget":"x"}"#), "max_budget");
        assert_eq!(field_of(r#"{"max_budgets":1}"#), "max_budgets");
        assert_eq!(field_of(r#"{"items":[{"user_id":1}]}"#), "items[0].user_id");
        assert_eq!(field_of(r#"{"items":[{}]}"#), "items[0].user_id");
        let err = parse::<Probe>(br#"{"max_budget":"x"}"#).unwrap_err();
        assert!(!err.to_string().contains(" at line "), "{err}");
    }

    #[test]
    fn tells_absent_from_null() {
        let p: Probe = parse(b"").unwrap();
        assert_eq!(p.max_budget, Patch::Keep);
        let p: Probe = parse(br#"{"max_budget":null}"#).unwrap();
        assert_eq!(p.max_budget, Patch::Clear);
        let p: Probe = parse(br#" {"max_budget":2.5, "items":[{"user_id":"u"}]} "#).unwrap();
        assert_eq!(p.max_budget, Patch::Set(2.5));
        assert_eq!(p.items[0].user_id, "u");
    }

    #[test]
    fn refuses_non_objects_and_trailing_bytes() {
        for body in ["[1]", "{\"max_budget\":1} x", "{", "nope"] {
            let err = parse::<Probe>(body.as_bytes()).unwrap_err();
            assert!(
                matches!(err, GatewayError::MalformedJson(_)),
                "{body}: {err:?}"
            );
        }
    }

    #[test]
    fn validates_amounts_limits_and_periods() {
        let mut v = None;
        for bad in [-1.0, f64::NAN, f64::INFINITY, 1e10, f64::MAX] {
            let err = Patch::Set(bad).apply_amount("max_budget", &mut v);
            assert_eq!(err.unwrap_err().param(), Some("max_budget"), "{bad}");
        }
        assert_eq!(v, None);
        Patch::Set(2.0).apply_amount("max_budget", &mut v).unwrap();
        assert_eq!(v, Some(2.0));
        let mut l = Some(5);
        for bad in [-1, i64::MIN, MAX_LIMIT + 1, i64::MAX] {
            let err = Patch::Set(bad).apply_limit("rpm_limit", &mut l);
            assert_eq!(err.unwrap_err().param(), Some("rpm_limit"), "{bad}");
        }
        assert_eq!(l, Some(5));
        Patch::Clear.apply_limit("rpm_limit", &mut l).unwrap();
        assert_eq!(l, None);
        let now = Utc::now();
        let (mut d, mut at) = (None, None);
        for bad in ["soon", "100000000d", "9223372036854775807s", "-1d"] {
            let err = Patch::Set(bad.to_string()).apply_period(&mut d, &mut at, now);
            assert_eq!(err.unwrap_err().param(), Some("budget_duration"), "{bad}");
        }
        assert_eq!((d.as_deref(), at), (None, None));
        let err = after("duration", DateTime::<Utc>::MAX_UTC, "1s").unwrap_err();
        assert_eq!(err.param(), Some("duration"));
        Patch::Set("1h".to_string())
            .apply_period(&mut d, &mut at, now)
            .unwrap();
        assert_eq!(
            (d.as_deref(), at),
            (Some("1h"), Some(now + chrono::Duration::hours(1)))
        );
    }

    #[test]
    fn oversized_strings_and_lists_are_refused_naming_where() {
        let long = "x".repeat(MAX_STRING_BYTES + 1);
        let body = format!(r#"{{"metadata":{{"team":{{"note":"{long}"}}}}}}"#);
        let err = parse::<serde_json::Value>(body.as_bytes()).unwrap_err();
        assert_eq!(err.param(), Some("metadata.team.note"), "{err}");
        let body = format!(r#"{{"key_alias":"{long}"}}"#);
        assert_eq!(
            parse::<serde_json::Value>(body.as_bytes())
                .unwrap_err()
                .param(),
            Some("key_alias")
        );
        let many = vec!["\"m\""; MAX_ITEMS + 1].join(",");
        let body = format!(r#"{{"models":[{many}]}}"#);
        assert_eq!(
            parse::<serde_json::Value>(body.as_bytes())
                .unwrap_err()
                .param(),
            Some("models")
        );
        let ok = format!(
            r#"{{"metadata":{{"note":"{}"}}}}"#,
            "x".repeat(MAX_STRING_BYTES)
        );
        assert!(parse::<serde_json::Value>(ok.as_bytes()).is_ok());
    }
}
