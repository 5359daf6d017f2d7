//! `generic_guardrail_api`: LiteLLM's contract with a guardrail service of
//! one's own, `POST {api_base}/beta/litellm_basic_guardrail_api`. This
//! module reads its config, writes the request and reads the verdict; the
//! call itself is the proxy's (on the core's upstream client).
//!
//! Request (LiteLLM's `GenericGuardrailAPIRequest`): `input_type`
//! (`request` or `response`), `litellm_call_id`, `litellm_trace_id`,
//! `texts`, `structured_messages` (a chat request's messages), `tools`,
//! `images`, `tool_calls`, `request_data` (the caller's `user_api_key_*`),
//! `request_headers`, `litellm_version`, `additional_provider_specific_params`
//! (the config's, then the request's `extra_body`), `model`; headers
//! `content-type: application/json`, `x-api-key` (`api_key`) and `headers`.
//! Verdict: `action` `BLOCKED` (with `blocked_reason`), `NONE` or
//! `GUARDRAIL_INTERVENED` (with the rewritten `texts`).

use serde_json::{json, Map, Value};
use std::time::Duration;

/// The path LiteLLM appends to `api_base`.
const PATH: &str = "/beta/litellm_basic_guardrail_api";
/// Deadline of one call when `timeout` is not set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest `timeout` accepted.
const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// What a refusal says when the service gives no reason (LiteLLM's).
const DEFAULT_REASON: &str = "Content violates policy";

/// `litellm_params` keys a generic guardrail reads.
pub(super) const PARAMS: &[&str] = &[
    "guardrail",
    "mode",
    "default_on",
    "api_base",
    "api_key",
    "headers",
    "additional_provider_specific_params",
    "unreachable_fallback",
    "fail_on_error",
    "timeout",
];

/// A configured guardrail service.
pub struct GenericApi {
    /// `{api_base}/beta/litellm_basic_guardrail_api`.
    pub url: String,
    /// Sent as `x-api-key`.
    api_key: Option<String>,
    /// `headers`, sent as given.
    headers: Vec<(String, String)>,
    /// `additional_provider_specific_params`.
    additional: Map<String, Value>,
    /// `unreachable_fallback: fail_open`: an unreachable service (no
    /// connection, timeout, 502, 503, 504) lets the text pass.
    pub fail_open: bool,
    /// `fail_on_error` (default true): false lets the text pass on any
    /// failure of the service, a garbled answer included.
    pub fail_on_error: bool,
    /// Deadline of one call (`timeout`, seconds).
    pub timeout: Duration,
}

impl std::fmt::Debug for GenericApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key or the headers' values.
        f.debug_struct("GenericApi")
            .field("url", &self.url)
            .field("fail_open", &self.fail_open)
            .finish()
    }
}

/// What the service decided.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// The texts pass as they are.
    Pass,
    /// The texts pass rewritten (as many as were sent, in order).
    Rewrite(Vec<String>),
    /// Refused, with the service's reason.
    Blocked(String),
}

/// What the request to the service says of the call besides its texts.
#[derive(Default)]
pub struct CallInfo<'a> {
    /// `litellm_call_id` (and `litellm_trace_id`).
    pub call_id: &'a str,
    /// `model`.
    pub model: Option<&'a str>,
    /// `request_data`: the caller's `user_api_key_*` fields.
    pub caller: Map<String, Value>,
    /// `structured_messages`: a chat request's messages.
    pub messages: Option<&'a Value>,
    /// `tools` of the request.
    pub tools: Option<&'a Value>,
    /// The request's `extra_body` for this guardrail.
    pub extra: Option<&'a Value>,
}

impl GenericApi {
    /// Reads `litellm_params`; the error names the parameter.
    pub(super) fn from_params(params: &serde_yaml::Mapping) -> Result<GenericApi, String> {
        let get = |k: &str| params.get(k).filter(|v| !v.is_null());
        let base = get("api_base")
            .and_then(serde_yaml::Value::as_str)
            .filter(|b| !b.is_empty())
            .ok_or("litellm_params.api_base is required for generic_guardrail_api")?;
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err("litellm_params.api_base must start with http:// or https://".into());
        }
        let url = if base.ends_with(PATH) {
            base.to_string()
        } else {
            format!("{}{PATH}", base.trim_end_matches('/'))
        };
        let api_key = match get("api_key") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or("litellm_params.api_key must be a string")?
                    .to_string(),
            ),
        };
        let mut headers = Vec::new();
        if let Some(h) = get("headers") {
            let map = h
                .as_mapping()
                .ok_or("litellm_params.headers must be a map of strings")?;
            for (k, v) in map {
                match (k.as_str(), v.as_str()) {
                    (Some(k), Some(v)) => headers.push((k.to_string(), v.to_string())),
                    _ => return Err("litellm_params.headers must be a map of strings".into()),
                }
            }
        }
        let additional = match get("additional_provider_specific_params") {
            None => Map::new(),
            Some(v) => match serde_json::to_value(v) {
                Ok(Value::Object(m)) => m,
                _ => {
                    return Err(
                        "litellm_params.additional_provider_specific_params must be a map".into(),
                    )
                }
            },
        };
        let fail_open = match get("unreachable_fallback").map(|v| v.as_str()) {
            None | Some(Some("fail_closed")) => false,
            Some(Some("fail_open")) => true,
            Some(_) => {
                return Err(
                    "litellm_params.unreachable_fallback must be fail_closed or fail_open".into(),
                )
            }
        };
        let fail_on_error = match get("fail_on_error") {
            None => true,
            Some(v) => v
                .as_bool()
                .ok_or("litellm_params.fail_on_error must be true or false")?,
        };
        let timeout = match get("timeout") {
            None => DEFAULT_TIMEOUT,
            Some(v) => v
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= MAX_TIMEOUT.as_secs_f64())
                .map(Duration::from_secs_f64)
                .ok_or("litellm_params.timeout must be seconds above 0 and at most 600")?,
        };
        Ok(GenericApi {
            url,
            api_key,
            headers,
            additional,
            fail_open,
            fail_on_error,
            timeout,
        })
    }

    /// The headers of a call besides host, length and content type.
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut h = Vec::with_capacity(self.headers.len() + 1);
        if let Some(key) = &self.api_key {
            h.push(("x-api-key".to_string(), key.clone()));
        }
        h.extend(self.headers.iter().cloned());
        h
    }

    /// The body of a call on `texts` of a `request` or a `response`.
    pub fn body(&self, input_type: &str, texts: &[String], info: &CallInfo<'_>) -> Vec<u8> {
        let mut additional = self.additional.clone();
        if let Some(Value::Object(extra)) = info.extra {
            additional.extend(extra.clone());
        }
        let body = json!({
            "input_type": input_type,
            "litellm_call_id": info.call_id,
            "litellm_trace_id": info.call_id,
            "structured_messages": info.messages,
            "images": null,
            "tools": info.tools,
            "texts": texts,
            "request_data": info.caller,
            "request_headers": null,
            "litellm_version": crate::VERSION,
            "additional_provider_specific_params": additional,
            "tool_calls": null,
            "model": info.model,
        });
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// Reads the service's answer to a call on `sent` texts; the error says
    /// what is wrong with it.
    pub fn verdict(body: &[u8], sent: usize) -> Result<Verdict, String> {
        let answer: Value =
            serde_json::from_slice(body).map_err(|e| format!("the answer is not JSON ({e})"))?;
        let Some(answer) = answer.as_object() else {
            return Err("the answer is not a JSON object".into());
        };
        let action = match answer.get("action") {
            None | Some(Value::Null) => "NONE",
            Some(Value::String(a)) => a.as_str(),
            Some(_) => return Err("`action` is not a string".into()),
        };
        if action == "BLOCKED" {
            let reason = answer
                .get("blocked_reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty())
                .unwrap_or(DEFAULT_REASON);
            return Ok(Verdict::Blocked(reason.to_string()));
        }
        match answer.get("texts") {
            None | Some(Value::Null) => Ok(Verdict::Pass),
            Some(Value::Array(texts)) => {
                if texts.len() != sent {
                    return Err(format!(
                        "`texts` has {} entries for the {sent} sent",
                        texts.len()
                    ));
                }
                let texts: Option<Vec<String>> = texts
                    .iter()
                    .map(|t| t.as_str().map(str::to_string))
                    .collect();
                texts
                    .map(Verdict::Rewrite)
                    .ok_or_else(|| "`texts` is not a list of strings".to_string())
            }
            Some(_) => Err("`texts` is not a list of strings".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(yaml: &str) -> Result<GenericApi, String> {
        let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        GenericApi::from_params(v.as_mapping().unwrap())
    }

    #[test]
    fn config_appends_litellms_path_and_reads_its_fields() {
        let a = api("{api_base: 'http://g:8080/', api_key: k1, unreachable_fallback: fail_open, timeout: 2, headers: {x-team: t}, additional_provider_specific_params: {level: high}}").unwrap();
        assert_eq!(a.url, "http://g:8080/beta/litellm_basic_guardrail_api");
        assert!(a.fail_open && a.fail_on_error);
        assert_eq!(a.timeout, Duration::from_secs(2));
        assert_eq!(
            a.headers(),
            vec![
                ("x-api-key".to_string(), "k1".to_string()),
                ("x-team".to_string(), "t".to_string())
            ]
        );
        assert!(!format!("{a:?}").contains("k1"), "the key is never shown");
        let extra = json!({"threshold": 0.8});
        let info = CallInfo {
            call_id: "c1",
            model: Some("gpt"),
            extra: Some(&extra),
            ..CallInfo::default()
        };
        let body: Value =
            serde_json::from_slice(&a.body("request", &["hi".into()], &info)).unwrap();
        assert_eq!(body["texts"], json!(["hi"]));
        assert_eq!(body["input_type"], "request");
        assert_eq!(
            body["additional_provider_specific_params"],
            json!({"level": "high", "threshold": 0.8})
        );
        assert!(api("{api_key: k}").unwrap_err().contains("api_base"));
        assert!(api("{api_base: 'http://g', unreachable_fallback: maybe}")
            .unwrap_err()
            .contains("unreachable_fallback"));
        assert!(api("{api_base: 'http://g', timeout: -1}")
            .unwrap_err()
            .contains("timeout"));
    }

    #[test]
    fn verdicts_are_read_and_garbage_refused() {
        assert_eq!(
            GenericApi::verdict(br#"{"action":"NONE"}"#, 1),
            Ok(Verdict::Pass)
        );
        assert_eq!(
            GenericApi::verdict(br#"{"action":"BLOCKED","blocked_reason":"no"}"#, 1),
            Ok(Verdict::Blocked("no".into()))
        );
        assert_eq!(
            GenericApi::verdict(br#"{"action":"BLOCKED"}"#, 1),
            Ok(Verdict::Blocked(DEFAULT_REASON.into()))
        );
        assert_eq!(
            GenericApi::verdict(br#"{"action":"GUARDRAIL_INTERVENED","texts":["x"]}"#, 1),
            Ok(Verdict::Rewrite(vec!["x".into()]))
        );
        assert!(
            GenericApi::verdict(br#"{"action":"GUARDRAIL_INTERVENED","texts":["x"]}"#, 2).is_err()
        );
        assert!(GenericApi::verdict(b"<html>", 1).is_err());
        assert!(GenericApi::verdict(br#"{"texts":[1]}"#, 1).is_err());
    }
}
