//! `presidio`: Microsoft Presidio's analyzer and anonymizer HTTP APIs, as
//! LiteLLM calls them: `POST {presidio_analyzer_api_base}/analyze` with
//! `{text, language, entities}` lists the entities found; those below
//! their `presidio_score_thresholds` or in `presidio_entities_deny_list`
//! are dropped; one whose `pii_entities_config` action is `BLOCK` refuses
//! (LiteLLM's 400); the rest go to `POST
//! {presidio_anonymizer_api_base}/anonymize` with `{text,
//! analyzer_results}`, whose `text` replaces the original. This module
//! reads the config, writes the requests and reads the answers.

use super::filter::Action;
use serde_json::{json, Map, Value};
use std::time::Duration;

/// Deadline of each call when `timeout` is not set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// `litellm_params` keys a `presidio` guardrail reads.
pub(super) const PARAMS: &[&str] = &[
    "guardrail",
    "mode",
    "default_on",
    "presidio_analyzer_api_base",
    "presidio_anonymizer_api_base",
    "pii_entities_config",
    "presidio_language",
    "presidio_score_thresholds",
    "presidio_entities_deny_list",
    "timeout",
];

/// A configured Presidio pair.
#[derive(Debug)]
pub struct Presidio {
    /// `{analyzer}/analyze`.
    pub analyze_url: String,
    /// `{anonymizer}/anonymize`.
    pub anonymize_url: String,
    /// `pii_entities_config`: entity type and action, in order.
    entities: Vec<(String, Action)>,
    language: String,
    /// `presidio_score_thresholds` (`ALL` for any entity).
    thresholds: Map<String, Value>,
    deny: Vec<String>,
    /// Deadline of each call (`timeout`, seconds).
    pub timeout: Duration,
}

/// Why a text is refused: the entity type found.
#[derive(Debug, PartialEq)]
pub struct BlockedEntity(pub String);

impl Presidio {
    /// Reads `litellm_params` (the bases may come from
    /// `PRESIDIO_ANALYZER_API_BASE` / `PRESIDIO_ANONYMIZER_API_BASE`, as in
    /// LiteLLM); the error names the parameter.
    pub(super) fn from_params(params: &serde_yaml::Mapping) -> Result<Presidio, String> {
        let get = |k: &str| params.get(k).filter(|v| !v.is_null());
        let base = |k: &str, env: &str| -> Result<String, String> {
            let b = match get(k) {
                Some(v) => v
                    .as_str()
                    .ok_or(format!("litellm_params.{k} must be a URL"))?
                    .to_string(),
                None => std::env::var(env).map_err(|_| {
                    format!("litellm_params.{k} (or {env}) is required for presidio")
                })?,
            };
            let b = if b.starts_with("http://") || b.starts_with("https://") {
                b
            } else {
                format!("http://{b}")
            };
            Ok(b.trim_end_matches('/').to_string())
        };
        let mut entities = Vec::new();
        if let Some(v) = get("pii_entities_config") {
            let map = v.as_mapping().ok_or(
                "litellm_params.pii_entities_config must map entity types to MASK or BLOCK",
            )?;
            for (k, a) in map {
                let (Some(k), Some(a)) = (k.as_str(), a.as_str().and_then(Action::parse)) else {
                    return Err(
                        "litellm_params.pii_entities_config must map entity types to MASK or BLOCK"
                            .into(),
                    );
                };
                entities.push((k.to_string(), a));
            }
        }
        let thresholds =
            match get("presidio_score_thresholds") {
                None => Map::new(),
                Some(v) => match serde_json::to_value(v) {
                    Ok(Value::Object(m)) if m.values().all(Value::is_number) => m,
                    _ => return Err(
                        "litellm_params.presidio_score_thresholds must map entity types to scores"
                            .into(),
                    ),
                },
            };
        let deny = match get("presidio_entities_deny_list") {
            None => Vec::new(),
            Some(v) => v
                .as_sequence()
                .and_then(|l| l.iter().map(|e| e.as_str().map(str::to_string)).collect())
                .ok_or(
                    "litellm_params.presidio_entities_deny_list must be a list of entity types",
                )?,
        };
        let language = match get("presidio_language") {
            None => "en".to_string(),
            Some(v) => v
                .as_str()
                .ok_or("litellm_params.presidio_language must be a string")?
                .to_string(),
        };
        let timeout = match get("timeout") {
            None => DEFAULT_TIMEOUT,
            Some(v) => v
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0 && *s <= 600.0)
                .map(Duration::from_secs_f64)
                .ok_or("litellm_params.timeout must be seconds above 0 and at most 600")?,
        };
        Ok(Presidio {
            analyze_url: format!(
                "{}/analyze",
                base("presidio_analyzer_api_base", "PRESIDIO_ANALYZER_API_BASE")?
            ),
            anonymize_url: format!(
                "{}/anonymize",
                base(
                    "presidio_anonymizer_api_base",
                    "PRESIDIO_ANONYMIZER_API_BASE"
                )?
            ),
            entities,
            language,
            thresholds,
            deny,
            timeout,
        })
    }

    /// The `/analyze` body for `text`.
    pub fn analyze_body(&self, text: &str) -> Vec<u8> {
        let mut body = json!({"text": text, "language": self.language});
        if !self.entities.is_empty() {
            let names: Vec<&str> = self.entities.iter().map(|(e, _)| e.as_str()).collect();
            body["entities"] = json!(names);
        }
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The analyzer's findings that count (score thresholds and deny list
    /// applied), or the entity that blocks the text; the error says what
    /// is wrong with the answer.
    pub fn findings(&self, answer: &[u8]) -> Result<Result<Vec<Value>, BlockedEntity>, String> {
        let found: Value = serde_json::from_slice(answer)
            .map_err(|e| format!("the analyzer's answer is not JSON ({e})"))?;
        let Value::Array(found) = found else {
            return Err("the analyzer's answer is not a list".into());
        };
        let mut kept = Vec::with_capacity(found.len());
        for item in found {
            let Some(entity) = item.get("entity_type").and_then(Value::as_str) else {
                return Err("an analyzer finding has no entity_type".into());
            };
            if self.deny.iter().any(|d| d == entity) {
                continue;
            }
            let threshold = self
                .thresholds
                .get(entity)
                .or_else(|| self.thresholds.get("ALL"))
                .and_then(Value::as_f64);
            if let Some(t) = threshold {
                if item
                    .get("score")
                    .and_then(Value::as_f64)
                    .is_none_or(|s| s < t)
                {
                    continue;
                }
            }
            if self
                .entities
                .iter()
                .any(|(e, a)| e == entity && *a == Action::Block)
            {
                return Ok(Err(BlockedEntity(entity.to_string())));
            }
            kept.push(item);
        }
        Ok(Ok(kept))
    }

    /// The `/anonymize` body for `text` and its findings.
    pub fn anonymize_body(text: &str, findings: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({"text": text, "analyzer_results": findings})).unwrap_or_default()
    }

    /// The anonymized text of the anonymizer's answer.
    pub fn anonymized(answer: &[u8]) -> Result<String, String> {
        let answer: Value = serde_json::from_slice(answer)
            .map_err(|e| format!("the anonymizer's answer is not JSON ({e})"))?;
        answer
            .get("text")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| "the anonymizer's answer has no text".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn presidio(yaml: &str) -> Result<Presidio, String> {
        let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        Presidio::from_params(v.as_mapping().unwrap())
    }

    #[test]
    fn thresholds_deny_list_and_block_apply_to_findings() {
        let p = presidio("{presidio_analyzer_api_base: 'http://a:3000/', presidio_anonymizer_api_base: 'b:3001', pii_entities_config: {EMAIL_ADDRESS: MASK, US_SSN: BLOCK, PERSON: MASK}, presidio_score_thresholds: {ALL: 0.5, PERSON: 0.9}, presidio_entities_deny_list: [URL]}").unwrap();
        assert_eq!(p.analyze_url, "http://a:3000/analyze");
        assert_eq!(p.anonymize_url, "http://b:3001/anonymize");
        let body: Value = serde_json::from_slice(&p.analyze_body("hi")).unwrap();
        assert_eq!(
            body["entities"],
            json!(["EMAIL_ADDRESS", "US_SSN", "PERSON"])
        );
        assert_eq!(body["language"], "en");
        let found = br#"[{"entity_type":"EMAIL_ADDRESS","start":0,"end":5,"score":0.95},
            {"entity_type":"PERSON","start":6,"end":9,"score":0.85},
            {"entity_type":"URL","start":10,"end":12,"score":1.0},
            {"entity_type":"US_SSN","start":13,"end":24,"score":0.3}]"#;
        let kept = p.findings(found).unwrap().unwrap();
        assert_eq!(kept.len(), 1, "{kept:?}");
        let ssn = br#"[{"entity_type":"US_SSN","start":0,"end":11,"score":0.85}]"#;
        assert_eq!(
            p.findings(ssn).unwrap(),
            Err(BlockedEntity("US_SSN".into()))
        );
        assert!(p.findings(b"{}").is_err());
        assert_eq!(
            Presidio::anonymized(br#"{"text":"<EMAIL_ADDRESS> hi","items":[]}"#).unwrap(),
            "<EMAIL_ADDRESS> hi"
        );
        assert!(
            presidio("{pii_entities_config: {X: MASK}}").is_err()
                || std::env::var("PRESIDIO_ANALYZER_API_BASE").is_ok()
        );
    }
}
