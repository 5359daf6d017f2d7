//! The request and answer a spend row keeps with LiteLLM's
//! `general_settings.store_prompts_in_spend_logs` (or the environment's
//! `STORE_PROMPTS_IN_SPEND_LOGS=true`): the request body goes to the row's
//! `proxy_server_request` column and the answer to `response`, both as
//! LiteLLM 1.110.2 stores them (`spend_tracking_utils.py`): every string
//! longer than `MAX_STRING_LENGTH_PROMPT_IN_DB` characters (2048 unless the
//! environment says otherwise) keeps its first 35% and last 65% around
//! LiteLLM's "skipped N chars" note, `secret_fields` is dropped at every
//! level, and a string under a credential-like key is replaced by
//! `REDACTED_BY_LITELM` (except in tool payloads and logprobs). A key's or
//! its team's `metadata.store_prompts_in_spend_logs: false` turns it off
//! for that key.

use serde_json::{Map, Value};

/// Default of `MAX_STRING_LENGTH_PROMPT_IN_DB`, LiteLLM's.
pub const DEFAULT_MAX_STRING_LENGTH: usize = 2048;

/// Most body bytes of a request or an answer kept for its row: a larger
/// one is stored as `{}` rather than held in memory a second time.
pub const MAX_CAPTURED_BYTES: usize = 4 << 20;

/// What replaces a credential's value (LiteLLM's spelling).
const REDACTED: &str = "REDACTED_BY_LITELM";

/// LiteLLM's note inside a truncated string.
const TRUNCATION_NOTE: &str = "Truncation is a DB storage safeguard. \
Full, untruncated data is logged to logging callbacks (OTEL, Datadog, etc.). \
To increase the truncation limit, set `MAX_STRING_LENGTH_PROMPT_IN_DB` in your env.";

/// Key segments that make a key a credential (LiteLLM's
/// `SensitiveDataMasker` defaults plus `apikey`).
const SENSITIVE_SEGMENTS: &[&str] = &[
    "password",
    "secret",
    "key",
    "token",
    "auth",
    "authorization",
    "cookie",
    "credential",
    "credentials",
    "access",
    "private",
    "certificate",
    "fingerprint",
    "tenancy",
    "apikey",
];

/// Whether prompts are stored, and the longest string kept whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptStorage {
    /// `store_prompts_in_spend_logs` is on.
    pub on: bool,
    /// `MAX_STRING_LENGTH_PROMPT_IN_DB`, in characters.
    pub max_string_length: usize,
    /// `general_settings.spend_logs_prompt_storage: latest_turn`: a
    /// request keeps its latest user turn only
    /// ([`super::prompt_privacy::latest_turn`]).
    pub latest_turn: bool,
    /// `litellm_settings.turn_off_message_logging`: messages are redacted
    /// unless a request may and does say otherwise
    /// ([`super::prompt_privacy::redacts`]).
    pub redact_by_default: bool,
}

/// What of one request decides how its row keeps its prompt.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowPrivacy {
    /// A `/v1/responses` request.
    pub responses: bool,
    /// Its redaction headers.
    pub headers: super::prompt_privacy::RedactionHeaders,
    /// Its key or team has `allow_client_message_redaction_opt_out`.
    pub may_opt_out: bool,
    /// Its own `turn_off_message_logging` (cut from the body it sent on).
    pub asked: Option<bool>,
}

impl Default for PromptStorage {
    fn default() -> Self {
        PromptStorage {
            on: false,
            max_string_length: DEFAULT_MAX_STRING_LENGTH,
            latest_turn: false,
            redact_by_default: false,
        }
    }
}

impl PromptStorage {
    /// Reads the setting: `general_settings.store_prompts_in_spend_logs`
    /// (`true`, or a string `"true"` in any case), else the environment's
    /// `STORE_PROMPTS_IN_SPEND_LOGS` (`true` in any case); and the
    /// environment's `MAX_STRING_LENGTH_PROMPT_IN_DB` (a whole number; as in
    /// LiteLLM, anything else leaves the default).
    pub fn parse(
        setting: Option<&serde_yaml::Value>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Self {
        let on = match setting {
            Some(serde_yaml::Value::Bool(true)) => true,
            Some(serde_yaml::Value::String(s)) if s.eq_ignore_ascii_case("true") => true,
            // LiteLLM's `str_to_bool` trims the environment's value.
            _ => env("STORE_PROMPTS_IN_SPEND_LOGS")
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
        };
        let max_string_length = env("MAX_STRING_LENGTH_PROMPT_IN_DB")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_MAX_STRING_LENGTH);
        PromptStorage {
            on,
            max_string_length,
            latest_turn: false,
            redact_by_default: false,
        }
    }

    /// Whether a request of a key with `key_metadata` (and its team's
    /// `team_metadata`) keeps its prompt: on, unless either says
    /// `store_prompts_in_spend_logs: false` (or `"false"`); neither can turn
    /// it on (LiteLLM's precedence).
    pub fn for_caller(
        self,
        key_metadata: Option<&Map<String, Value>>,
        team_metadata: Option<&Map<String, Value>>,
    ) -> bool {
        let turned_off = |m: Option<&Map<String, Value>>| match m
            .and_then(|m| m.get("store_prompts_in_spend_logs"))
        {
            Some(Value::Bool(false)) => true,
            Some(Value::String(s)) => s.trim().eq_ignore_ascii_case("false"),
            _ => false,
        };
        self.on && !turned_off(key_metadata) && !turned_off(team_metadata)
    }

    /// The `proxy_server_request` and `response` columns of a row whose
    /// request body is `request` and answer `answer` (JSON): each as
    /// stored (its latest turn only with `latest_turn`, its messages
    /// redacted when [`super::prompt_privacy::redacts`] says so), or `{}`
    /// when it is not JSON or larger than [`MAX_CAPTURED_BYTES`].
    pub fn columns(
        self,
        request: &[u8],
        answer: Option<&[u8]>,
        privacy: RowPrivacy,
    ) -> (String, Option<String>) {
        use super::prompt_privacy as privacy_rules;
        let request = parse(request);
        let redact = privacy_rules::redacts(
            self.redact_by_default,
            privacy.asked,
            privacy.headers,
            privacy.may_opt_out,
        );
        let request = request.map(|mut v| {
            if self.latest_turn {
                v = privacy_rules::latest_turn(v, privacy.responses);
            }
            if redact {
                privacy_rules::redact_request(&mut v);
            }
            v
        });
        let answer = answer.map(|a| {
            let answer = parse(a).map(|v| match redact {
                true => privacy_rules::redact_answer(v),
                false => v,
            });
            self.stored_value(answer)
        });
        (self.stored_value(request), answer)
    }

    /// A column's text: `value` sanitized, or `{}`.
    fn stored_value(self, value: Option<Value>) -> String {
        match value {
            Some(mut value) => {
                sanitize(&mut value, self.max_string_length, true);
                value.to_string()
            }
            None => "{}".into(),
        }
    }
}

/// `body` parsed, when JSON and at most [`MAX_CAPTURED_BYTES`].
fn parse(body: &[u8]) -> Option<Value> {
    if body.len() > MAX_CAPTURED_BYTES {
        return None;
    }
    serde_json::from_slice(body).ok()
}

/// LiteLLM's `_sanitize_request_body_for_spend_logs_payload`, in place.
fn sanitize(value: &mut Value, max: usize, mask: bool) {
    match value {
        Value::String(s) => {
            if let Some(kept) = truncated(s, max) {
                *s = kept;
            }
            if s.contains('\0') {
                s.retain(|c| c != '\0');
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| sanitize(v, max, mask)),
        Value::Object(map) => {
            map.remove("secret_fields");
            let block = map.get("type").and_then(Value::as_str).map(str::to_owned);
            let tool_role = map.get("role").and_then(Value::as_str) == Some("tool");
            let nul_keys: Vec<String> = map.keys().filter(|k| k.contains('\0')).cloned().collect();
            for k in nul_keys {
                if let Some(v) = map.remove(&k) {
                    map.insert(k.replace('\0', ""), v);
                }
            }
            for (key, v) in map.iter_mut() {
                if mask && v.is_string() && is_credential(key) {
                    *v = Value::String(REDACTED.into());
                    continue;
                }
                let content = is_content(key, block.as_deref(), tool_role);
                sanitize(v, max, mask && !content);
            }
        }
        _ => {}
    }
}

/// `s` cut as LiteLLM's `_truncated_for_db` cuts it, when longer than
/// `max` characters.
fn truncated(s: &str, max: usize) -> Option<String> {
    let len = s.chars().count();
    if len <= max {
        return None;
    }
    // int(max * 0.35) and int(max * 0.65), as LiteLLM computes them.
    let start = (max as f64 * 0.35) as usize;
    let end = (max as f64 * 0.65) as usize;
    let skipped = len as i64 - start as i64 - end as i64;
    let tail_len = end.min(max - start);
    let head: String = s.chars().take(start).collect();
    // Python's `value[-0:]` is the whole string.
    let tail_from = if tail_len == 0 { 0 } else { len - tail_len };
    let tail: String = s.chars().skip(tail_from).collect();
    Some(format!(
        "{head}... (litellm_truncated skipped {skipped} chars. {TRUNCATION_NOTE}) ...{tail}"
    ))
}

/// Whether `key` names a credential: one of its `_`/`-` separated
/// segments is a sensitive word, and none is `cost`.
fn is_credential(key: &str) -> bool {
    let lower = key.to_lowercase().replace('-', "_");
    let segments = || lower.split('_');
    !segments().any(|s| s == "cost") && segments().any(|s| SENSITIVE_SEGMENTS.contains(&s))
}

/// Whether `key` of an object of `block` type holds tool input or output
/// (or logprobs), where nothing is masked (LiteLLM's
/// `_is_spend_log_content`).
fn is_content(key: &str, block: Option<&str>, tool_role: bool) -> bool {
    match key {
        "arguments" | "logprobs" => true,
        "input" => matches!(block, Some("tool_use" | "server_tool_use" | "mcp_tool_use")),
        "content" | "output" => {
            tool_role
                || matches!(
                    block,
                    Some("tool_result" | "mcp_tool_result" | "function_call_output")
                )
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn on(max: usize) -> PromptStorage {
        PromptStorage {
            on: true,
            max_string_length: max,
            ..Default::default()
        }
    }

    #[test]
    fn long_strings_keep_their_ends_around_litellms_note() {
        let s = "a".repeat(10) + &"b".repeat(80) + &"c".repeat(10);
        let kept = truncated(&s, 20).unwrap();
        let expected = format!(
            "aaaaaaa... (litellm_truncated skipped 80 chars. {TRUNCATION_NOTE}) ...bbb{}",
            "c".repeat(10)
        );
        assert_eq!(kept, expected);
        assert_eq!(truncated("short", 20), None);
        // Characters, not bytes.
        assert_eq!(truncated(&"é".repeat(20), 20), None);
    }

    #[test]
    fn secrets_are_dropped_and_credentials_masked_except_in_tool_payloads() {
        let body = json!({
            "model": "m", "api_key": "sk-1", "max_tokens": 5, "input_cost_per_token": "1",
            "secret_fields": {"raw_headers": {"authorization": "Bearer x"}},
            "metadata": {"x-api-key": "k", "secret_fields": 1, "note": "n"},
            "messages": [
                {"role": "tool", "content": "t", "tool_call_id": "c"},
                {"role": "assistant", "tool_calls": [{"function": {"arguments": "{\"token\":1}"}}]}
            ],
            "system_fingerprint": "fp"
        });
        let (stored, _) =
            on(2048).columns(body.to_string().as_bytes(), None, RowPrivacy::default());
        let stored: Value = serde_json::from_str(&stored).unwrap();
        assert_eq!(
            stored,
            json!({
                "model": "m", "api_key": REDACTED, "max_tokens": 5, "input_cost_per_token": "1",
                "metadata": {"x-api-key": REDACTED, "note": "n"},
                "messages": [
                    {"role": "tool", "content": "t", "tool_call_id": "c"},
                    {"role": "assistant", "tool_calls": [{"function": {"arguments": "{\"token\":1}"}}]}
                ],
                "system_fingerprint": REDACTED
            })
        );
        let (request, answer) = on(2048).columns(b"not json", Some(b"{"), RowPrivacy::default());
        assert_eq!((request.as_str(), answer.as_deref()), ("{}", Some("{}")));
    }

    #[test]
    fn credential_keys_are_litellms() {
        // As LiteLLM 1.110.2's `SensitiveDataMasker` (with `apikey`) says.
        for key in [
            "api_key",
            "system_fingerprint",
            "x-api-key",
            "Authorization",
            "apiKey",
        ] {
            assert!(is_credential(key), "{key}");
        }
        for key in [
            "input_cost_per_token",
            "max_tokens",
            "prompt_tokens",
            "access_token_cost",
            "tool_call_id",
            "content",
        ] {
            assert!(!is_credential(key), "{key}");
        }
    }

    #[test]
    fn keys_and_teams_can_only_turn_it_off() {
        let off: Map<String, Value> = json!({"store_prompts_in_spend_logs": false})
            .as_object()
            .unwrap()
            .clone();
        let off_text: Map<String, Value> = json!({"store_prompts_in_spend_logs": "False"})
            .as_object()
            .unwrap()
            .clone();
        let yes: Map<String, Value> = json!({"store_prompts_in_spend_logs": true})
            .as_object()
            .unwrap()
            .clone();
        assert!(on(1).for_caller(None, None));
        assert!(on(1).for_caller(Some(&yes), None));
        assert!(!on(1).for_caller(Some(&off), None));
        assert!(!on(1).for_caller(None, Some(&off_text)));
        assert!(!PromptStorage::default().for_caller(Some(&yes), Some(&yes)));
    }

    #[test]
    fn the_setting_or_the_environment_turns_it_on() {
        let none = |_: &str| None;
        let env = |k: &str| match k {
            "STORE_PROMPTS_IN_SPEND_LOGS" => Some("TRUE".to_string()),
            "MAX_STRING_LENGTH_PROMPT_IN_DB" => Some("100".to_string()),
            _ => None,
        };
        assert_eq!(PromptStorage::parse(None, &none), PromptStorage::default());
        assert!(PromptStorage::parse(Some(&serde_yaml::Value::Bool(true)), &none).on);
        assert!(PromptStorage::parse(Some(&serde_yaml::Value::String("True".into())), &none).on);
        assert!(!PromptStorage::parse(Some(&serde_yaml::Value::String("yes".into())), &none).on);
        assert_eq!(PromptStorage::parse(None, &env), on(100));
        let bad = |_: &str| Some("-".to_string());
        assert_eq!(
            PromptStorage::parse(None, &bad).max_string_length,
            DEFAULT_MAX_STRING_LENGTH
        );
    }
}
