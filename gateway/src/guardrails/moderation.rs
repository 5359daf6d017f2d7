//! `openai_moderation`: OpenAI's moderation endpoint, as LiteLLM calls it:
//! `POST {api_base}/moderations` (default `https://api.openai.com/v1`)
//! with `Authorization: Bearer {api_key}` (or `OPENAI_API_KEY`) and
//! `{model, input}` (`model` default `omni-moderation-latest`). The input
//! is a chat request's last run of user messages, else every text joined
//! by newlines. A flagged first result refuses with LiteLLM's 400,
//! `Violated OpenAI moderation policy`, with the violated categories and
//! their scores; moderation never rewrites. This module reads the config,
//! writes the request and reads the answer; the proxy calls.

use super::params;
use serde_json::{json, Value};
use std::time::Duration;

/// OpenAI's API when `api_base` is not set (LiteLLM's default).
const DEFAULT_BASE: &str = "https://api.openai.com/v1";
/// The moderation model when `model` is not set (LiteLLM's default).
const DEFAULT_MODEL: &str = "omni-moderation-latest";
/// What LiteLLM's refusal says.
pub const BLOCKED: &str = "Violated OpenAI moderation policy";

/// `litellm_params` keys an `openai_moderation` guardrail reads.
pub(super) const PARAMS: &[&str] = &[
    "guardrail",
    "mode",
    "default_on",
    "api_key",
    "api_base",
    "model",
    "timeout",
];

/// A configured OpenAI moderation guardrail.
pub struct OpenAiModeration {
    /// `{api_base}/moderations`.
    pub url: String,
    api_key: String,
    model: String,
    /// Deadline of one call (`timeout`, seconds).
    pub timeout: Duration,
}

impl std::fmt::Debug for OpenAiModeration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("OpenAiModeration")
            .field("url", &self.url)
            .field("model", &self.model)
            .finish()
    }
}

impl OpenAiModeration {
    /// Reads `litellm_params` (the key may come from `OPENAI_API_KEY`, as
    /// in LiteLLM); the error names the parameter.
    pub(super) fn from_params(p: &serde_yaml::Mapping) -> Result<OpenAiModeration, String> {
        let api_key = match params::text(p, "api_key")? {
            Some(k) if !k.is_empty() => k,
            _ => std::env::var("OPENAI_API_KEY")
                .ok()
                .filter(|k| !k.is_empty())
                .ok_or(
                    "litellm_params.api_key (or OPENAI_API_KEY) is required for openai_moderation",
                )?,
        };
        let model = params::text(p, "model")?.unwrap_or_else(|| DEFAULT_MODEL.to_string());
        if model.is_empty() || model.len() > 256 {
            return Err("litellm_params.model must be a moderation model name".into());
        }
        Ok(OpenAiModeration {
            url: format!("{}/moderations", params::base(p, "api_base", DEFAULT_BASE)?),
            api_key,
            model,
            timeout: params::timeout(p)?,
        })
    }

    /// The headers of a call besides host, length and content type.
    pub fn headers(&self) -> Vec<(String, String)> {
        vec![(
            "authorization".to_string(),
            format!("Bearer {}", self.api_key),
        )]
    }

    /// The text to moderate: on a request with chat `messages`, its last
    /// run of user messages (their texts, one per line), as LiteLLM's
    /// `get_last_user_message`; else `texts` joined by newlines. `None`
    /// when there is nothing to moderate.
    pub fn input(messages: Option<&Value>, texts: &[String]) -> Option<String> {
        if let Some(chat) = messages.and_then(Value::as_array) {
            let mut run: Vec<String> = chat
                .iter()
                .rev()
                .take_while(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .map(|m| content_text(m.get("content")))
                .collect();
            run.reverse();
            let joined = run.join("\n");
            let joined = joined.trim();
            if !joined.is_empty() {
                return Some(joined.to_string());
            }
        }
        let joined = texts.join("\n");
        (!joined.is_empty()).then_some(joined)
    }

    /// The body of a call on `input`.
    pub fn body(&self, input: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({"model": self.model, "input": input})).unwrap_or_default()
    }

    /// Reads OpenAI's answer: `Some(detail)` (LiteLLM's
    /// `moderation_result`: `violated_categories`, `category_scores`) when
    /// its first result is flagged.
    pub fn verdict(body: &[u8]) -> Result<Option<Value>, String> {
        let answer: Value =
            serde_json::from_slice(body).map_err(|e| format!("the answer is not JSON ({e})"))?;
        let results = answer
            .get("results")
            .and_then(Value::as_array)
            .ok_or("the answer has no `results` list")?;
        let Some(first) = results.first() else {
            return Ok(None);
        };
        match first.get("flagged") {
            Some(Value::Bool(false)) => return Ok(None),
            Some(Value::Bool(true)) => {}
            _ => return Err("the result has no boolean `flagged`".into()),
        }
        let violated: Vec<&String> = first
            .get("categories")
            .and_then(Value::as_object)
            .map(|c| {
                c.iter()
                    .filter(|(_, v)| v == &&Value::Bool(true))
                    .map(|(k, _)| k)
                    .collect()
            })
            .unwrap_or_default();
        Ok(Some(json!({
            "violated_categories": violated,
            "category_scores": first.get("category_scores").cloned().unwrap_or(json!({})),
        })))
    }
}

/// A message's text: a string, or its text parts one after another.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moderation(yaml: &str) -> Result<OpenAiModeration, String> {
        let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        OpenAiModeration::from_params(v.as_mapping().unwrap())
    }

    #[test]
    fn config_input_and_verdict() {
        let m = moderation("{api_key: sk-m, api_base: 'http://h:1/v1/'}").unwrap();
        assert_eq!(m.url, "http://h:1/v1/moderations");
        assert!(!format!("{m:?}").contains("sk-m"));
        assert_eq!(m.headers()[0].1, "Bearer sk-m");
        let body: Value = serde_json::from_slice(&m.body("x")).unwrap();
        assert_eq!(
            body,
            json!({"model": "omni-moderation-latest", "input": "x"})
        );
        assert!(moderation("{api_key: k, api_base: ftp://x}").is_err());
        let chat = json!([
            {"role": "user", "content": "old"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "one"},
            {"role": "user", "content": [{"type": "text", "text": "two"}]},
        ]);
        let texts = vec!["old".to_string(), "a".to_string()];
        assert_eq!(
            OpenAiModeration::input(Some(&chat), &texts).as_deref(),
            Some("one\ntwo")
        );
        assert_eq!(
            OpenAiModeration::input(None, &texts).as_deref(),
            Some("old\na")
        );
        assert_eq!(OpenAiModeration::input(None, &[]), None);
        let flagged = br#"{"id":"modr-1","results":[{"flagged":true,"categories":{"violence":true,"hate":false},"category_scores":{"violence":0.9}}]}"#;
        let detail = OpenAiModeration::verdict(flagged).unwrap().unwrap();
        assert_eq!(detail["violated_categories"], json!(["violence"]));
        assert_eq!(detail["category_scores"]["violence"], 0.9);
        assert_eq!(
            OpenAiModeration::verdict(br#"{"results":[{"flagged":false}]}"#),
            Ok(None)
        );
        assert!(OpenAiModeration::verdict(b"{}").is_err());
    }
}
