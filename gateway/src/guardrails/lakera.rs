//! `lakera_v2`: Lakera Guard's v2 API, `POST {api_base}/v2/guard` with
//! `Authorization: Bearer {api_key}` and `{messages, project_id, payload,
//! breakdown, metadata, dev_info}`; an answer with `flagged: true` blocks
//! (`on_flagged: block`, LiteLLM's 400 "Violated guardrail policy" with
//! Lakera's answer) or is only logged (`monitor`). This module reads the
//! config, writes the request and reads the answer; the proxy calls.

use serde_json::{json, Value};
use std::time::Duration;

/// Lakera's API when `api_base` is not set (LiteLLM's default).
const DEFAULT_BASE: &str = "https://api.lakera.ai";
/// Deadline of one call when `timeout` is not set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// `litellm_params` keys a `lakera_v2` guardrail reads.
pub(super) const PARAMS: &[&str] = &[
    "guardrail",
    "mode",
    "default_on",
    "api_key",
    "api_base",
    "project_id",
    "payload",
    "breakdown",
    "metadata",
    "dev_info",
    "on_flagged",
    "timeout",
];

/// A configured Lakera Guard.
pub struct LakeraV2 {
    /// `{api_base}/v2/guard`.
    pub url: String,
    api_key: String,
    project_id: Option<String>,
    payload: bool,
    breakdown: bool,
    metadata: Option<Value>,
    dev_info: bool,
    /// `on_flagged: block` (else `monitor`: logged, let pass).
    pub block: bool,
    /// Deadline of one call (`timeout`, seconds).
    pub timeout: Duration,
}

impl std::fmt::Debug for LakeraV2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("LakeraV2").field("url", &self.url).finish()
    }
}

impl LakeraV2 {
    /// Reads `litellm_params` (the key may come from `LAKERA_API_KEY`, as
    /// in LiteLLM); the error names the parameter.
    pub(super) fn from_params(params: &serde_yaml::Mapping) -> Result<LakeraV2, String> {
        let get = |k: &str| params.get(k).filter(|v| !v.is_null());
        let text = |k: &str| -> Result<Option<String>, String> {
            match get(k) {
                None => Ok(None),
                Some(v) => v
                    .as_str()
                    .map(|s| Some(s.to_string()))
                    .ok_or(format!("litellm_params.{k} must be a string")),
            }
        };
        let flag = |k: &str| -> Result<bool, String> {
            match get(k) {
                None => Ok(true),
                Some(v) => v
                    .as_bool()
                    .ok_or(format!("litellm_params.{k} must be true or false")),
            }
        };
        let api_key = match text("api_key")? {
            Some(k) => k,
            None => std::env::var("LAKERA_API_KEY").map_err(|_| {
                "litellm_params.api_key (or LAKERA_API_KEY) is required for lakera_v2".to_string()
            })?,
        };
        let base = text("api_base")?.unwrap_or_else(|| DEFAULT_BASE.to_string());
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err("litellm_params.api_base must start with http:// or https://".into());
        }
        let block = match text("on_flagged")?.as_deref() {
            None | Some("block") => true,
            Some("monitor") => false,
            Some(other) => {
                return Err(format!(
                    "litellm_params.on_flagged `{other}` is not supported by this gateway's lakera_v2 (block, monitor); remove it to start"
                ))
            }
        };
        let metadata = match get("metadata") {
            None => None,
            Some(v) => Some(
                serde_json::to_value(v)
                    .map_err(|_| "litellm_params.metadata must be a map".to_string())?,
            ),
        };
        let timeout = match get("timeout") {
            None => DEFAULT_TIMEOUT,
            Some(v) => v
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 600.0)
                .map(Duration::from_secs_f64)
                .ok_or("litellm_params.timeout must be seconds above 0 and at most 600")?,
        };
        Ok(LakeraV2 {
            url: format!("{}/v2/guard", base.trim_end_matches('/')),
            api_key,
            project_id: text("project_id")?,
            payload: flag("payload")?,
            breakdown: flag("breakdown")?,
            metadata,
            dev_info: flag("dev_info")?,
            block,
            timeout,
        })
    }

    /// The headers of a call besides host, length and content type.
    pub fn headers(&self) -> Vec<(String, String)> {
        vec![(
            "authorization".to_string(),
            format!("Bearer {}", self.api_key),
        )]
    }

    /// The body of a call on `messages` (`{role, content}` with text
    /// content).
    pub fn body(&self, messages: Vec<Value>) -> Vec<u8> {
        let body = json!({
            "messages": messages,
            "project_id": self.project_id,
            "payload": self.payload,
            "breakdown": self.breakdown,
            "metadata": self.metadata,
            "dev_info": self.dev_info,
        });
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// Reads Lakera's answer: `Some(answer)` when it flagged the messages.
    pub fn verdict(body: &[u8]) -> Result<Option<Value>, String> {
        let answer: Value =
            serde_json::from_slice(body).map_err(|e| format!("the answer is not JSON ({e})"))?;
        match answer.get("flagged") {
            Some(Value::Bool(true)) => Ok(Some(answer)),
            Some(Value::Bool(false)) => Ok(None),
            _ => Err("the answer has no boolean `flagged`".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lakera(yaml: &str) -> Result<LakeraV2, String> {
        let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        LakeraV2::from_params(v.as_mapping().unwrap())
    }

    #[test]
    fn config_request_and_verdict() {
        let l = lakera("{api_key: lk-1, project_id: p1, on_flagged: monitor}").unwrap();
        assert_eq!(l.url, "https://api.lakera.ai/v2/guard");
        assert!(!l.block);
        assert!(!format!("{l:?}").contains("lk-1"));
        assert_eq!(l.headers()[0].1, "Bearer lk-1");
        let body: Value =
            serde_json::from_slice(&l.body(vec![json!({"role": "user", "content": "x"})])).unwrap();
        assert_eq!(body["project_id"], "p1");
        assert_eq!(body["messages"][0]["content"], "x");
        assert_eq!(body["breakdown"], true);
        let err = lakera("{api_key: k, on_flagged: mask}").unwrap_err();
        assert!(err.contains("`mask`"), "{err}");
        assert_eq!(LakeraV2::verdict(br#"{"flagged":false}"#), Ok(None));
        assert!(LakeraV2::verdict(br#"{"flagged":true}"#).unwrap().is_some());
        assert!(LakeraV2::verdict(b"{}").is_err());
    }
}
