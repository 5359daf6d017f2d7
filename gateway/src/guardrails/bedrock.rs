//! `bedrock`: Amazon Bedrock Guardrails' ApplyGuardrail API, as LiteLLM
//! calls it: `POST {endpoint}/guardrail/{guardrailIdentifier}/version/
//! {guardrailVersion}/apply` with `{source: INPUT | OUTPUT, content:
//! [{text: {text}}]}`, signed with SigV4 for service `bedrock` (the proxy
//! signs, as for Bedrock deployments). The endpoint is
//! `aws_bedrock_runtime_endpoint` (or `AWS_BEDROCK_RUNTIME_ENDPOINT`), else
//! `https://bedrock-runtime.{region}.amazonaws.com`; credentials and region
//! are LiteLLM's `aws_*` parameters, else the `AWS_*` environment.
//!
//! Verdict, as LiteLLM maps it: `action: GUARDRAIL_INTERVENED` with any
//! policy assessment `BLOCKED` refuses with LiteLLM's 400, `Violated
//! guardrail policy` (the guardrail's `outputs` text as
//! `bedrock_guardrail_response`); intervened with only `ANONYMIZED` ones
//! rewrites the texts with `outputs` (one per text sent); `NONE` passes.
//! This module reads the config, writes the request and reads the answer.

use super::params;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use std::time::Duration;

/// The region when nothing names one (LiteLLM's default).
const DEFAULT_REGION: &str = "us-west-2";
/// What LiteLLM's refusal says.
pub const BLOCKED: &str = "Violated guardrail policy";

/// `litellm_params` keys a `bedrock` guardrail reads.
pub(super) const PARAMS: &[&str] = &[
    "guardrail",
    "mode",
    "default_on",
    "guardrailIdentifier",
    "guardrailVersion",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "aws_region_name",
    "aws_bedrock_runtime_endpoint",
    "mask_request_content",
    "mask_response_content",
    "disable_exception_on_block",
    "timeout",
];

/// Characters a path label keeps as they are (AWS's URI encoding).
const LABEL: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The policies of an assessment and the lists in each whose items carry
/// an `action` (LiteLLM checks these for `BLOCKED`).
const POLICIES: &[(&str, &[&str])] = &[
    ("topicPolicy", &["topics"]),
    ("contentPolicy", &["filters"]),
    ("wordPolicy", &["customWords", "managedWordLists"]),
    ("sensitiveInformationPolicy", &["piiEntities", "regexes"]),
    ("contextualGroundingPolicy", &["filters"]),
];

/// A configured Bedrock guardrail.
pub struct BedrockGuard {
    /// `{endpoint}/guardrail/{id}/version/{version}/apply`, labels encoded.
    pub url: String,
    /// `guardrailIdentifier`.
    pub identifier: String,
    /// `guardrailVersion`.
    pub version: String,
    /// `aws_access_key_id`.
    pub access_key_id: String,
    /// `aws_secret_access_key`.
    pub secret_access_key: String,
    /// `aws_session_token`.
    pub session_token: Option<String>,
    /// `aws_region_name`.
    pub region: String,
    /// Deadline of one call (`timeout`, seconds).
    pub timeout: Duration,
}

impl std::fmt::Debug for BedrockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret or the token.
        f.debug_struct("BedrockGuard")
            .field("url", &self.url)
            .field("region", &self.region)
            .finish()
    }
}

/// What ApplyGuardrail decided.
#[derive(Debug, PartialEq)]
pub enum Verdict {
    /// The texts pass as they are.
    Pass,
    /// The texts pass rewritten (as many as were sent, in order).
    Rewrite(Vec<String>),
    /// Refused: LiteLLM's `HTTPException.detail`.
    Blocked(Value),
}

impl BedrockGuard {
    /// Reads `litellm_params`, with the `AWS_*` environment through
    /// `lookup` for what they leave out; the error names the parameter.
    pub(super) fn from_params(
        p: &serde_yaml::Mapping,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<BedrockGuard, String> {
        let pick = |k: &str, vars: &[&str]| -> Result<Option<String>, String> {
            Ok(params::text(p, k)?.filter(|v| !v.is_empty()).or_else(|| {
                vars.iter()
                    .find_map(|v| lookup(v).filter(|s| !s.is_empty()))
            }))
        };
        let label = |k: &str| -> Result<String, String> {
            params::text(p, k)?
                .filter(|v| !v.is_empty() && v.len() <= 2048)
                .ok_or(format!("litellm_params.{k} is required for bedrock"))
        };
        let identifier = label("guardrailIdentifier")?;
        let version = label("guardrailVersion")?;
        if params::flag(p, "disable_exception_on_block", false)? {
            return Err("litellm_params.disable_exception_on_block: true is not supported by this gateway's bedrock (a block answers LiteLLM's 400); remove it to start".into());
        }
        // Read for LiteLLM's sake: a masked text is used whenever Bedrock
        // returns one, whatever these say (as LiteLLM does).
        params::flag(p, "mask_request_content", false)?;
        params::flag(p, "mask_response_content", false)?;
        let region = pick(
            "aws_region_name",
            &["AWS_REGION_NAME", "AWS_REGION", "AWS_DEFAULT_REGION"],
        )?
        .unwrap_or_else(|| DEFAULT_REGION.to_string());
        let valid_region = region.len() <= 64
            && region
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid_region {
            return Err(format!(
                "litellm_params.aws_region_name \"{region}\" is not an AWS region"
            ));
        }
        let key_id = pick("aws_access_key_id", &["AWS_ACCESS_KEY_ID"])?;
        let secret = pick("aws_secret_access_key", &["AWS_SECRET_ACCESS_KEY"])?;
        let (Some(access_key_id), Some(secret_access_key)) = (key_id, secret) else {
            return Err("litellm_params.aws_access_key_id and aws_secret_access_key (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) are required for bedrock; role credentials are not supported".into());
        };
        let endpoint = pick(
            "aws_bedrock_runtime_endpoint",
            &["AWS_BEDROCK_RUNTIME_ENDPOINT"],
        )?
        .unwrap_or_else(|| format!("https://bedrock-runtime.{region}.amazonaws.com"));
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(
                "litellm_params.aws_bedrock_runtime_endpoint must start with http:// or https://"
                    .into(),
            );
        }
        let url = format!(
            "{}/guardrail/{}/version/{}/apply",
            endpoint.trim_end_matches('/'),
            utf8_percent_encode(&identifier, LABEL),
            utf8_percent_encode(&version, LABEL),
        );
        Ok(BedrockGuard {
            url,
            identifier,
            version,
            access_key_id,
            secret_access_key,
            session_token: pick("aws_session_token", &["AWS_SESSION_TOKEN"])?,
            region,
            timeout: params::timeout(p)?,
        })
    }

    /// The body of a call on the non-empty `texts` of a `request`
    /// (`source: INPUT`) or a `response` (`OUTPUT`); `None` when there is
    /// no text (ApplyGuardrail refuses empty content).
    pub fn body(input_type: &str, texts: &[String]) -> Option<Vec<u8>> {
        let content: Vec<Value> = texts
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| json!({"text": {"text": t}}))
            .collect();
        if content.is_empty() {
            return None;
        }
        let source = if input_type == "response" {
            "OUTPUT"
        } else {
            "INPUT"
        };
        serde_json::to_vec(&json!({"source": source, "content": content})).ok()
    }

    /// Reads ApplyGuardrail's answer to a call on `texts` (whose empty
    /// ones were not sent).
    pub fn verdict(&self, body: &[u8], texts: &[String]) -> Result<Verdict, String> {
        let answer: Value =
            serde_json::from_slice(body).map_err(|e| format!("the answer is not JSON ({e})"))?;
        let action = answer
            .get("action")
            .and_then(Value::as_str)
            .ok_or("the answer has no `action`")?;
        if action != "GUARDRAIL_INTERVENED" {
            return Ok(Verdict::Pass);
        }
        let outputs: Vec<&str> = answer
            .get("outputs")
            .or_else(|| answer.get("output"))
            .and_then(Value::as_array)
            .map(|o| {
                o.iter()
                    .filter_map(|o| o.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        if blocked(&answer) {
            return Ok(Verdict::Blocked(json!({
                "error": BLOCKED,
                "bedrock_guardrail_response": outputs.concat(),
                "guardrailIdentifier": self.identifier,
                "guardrailVersion": self.version,
            })));
        }
        let sent = texts.iter().filter(|t| !t.is_empty()).count();
        if outputs.len() != sent || sent == 0 {
            // Not aligned with what was sent: left as it is (LiteLLM too).
            return Ok(Verdict::Pass);
        }
        let mut masked = outputs.into_iter();
        let rewritten = texts
            .iter()
            .map(|t| match t.is_empty() {
                true => String::new(),
                false => masked.next().unwrap_or_default().to_string(),
            })
            .collect();
        Ok(Verdict::Rewrite(rewritten))
    }
}

/// Whether any policy assessment of `answer` is `BLOCKED` (not only
/// `ANONYMIZED`).
fn blocked(answer: &Value) -> bool {
    let Some(assessments) = answer.get("assessments").and_then(Value::as_array) else {
        return false;
    };
    assessments.iter().any(|a| {
        POLICIES.iter().any(|(policy, lists)| {
            lists.iter().any(|list| {
                a.get(*policy)
                    .and_then(|p| p.get(*list))
                    .and_then(Value::as_array)
                    .is_some_and(|items| {
                        items
                            .iter()
                            .any(|i| i.get("action").and_then(Value::as_str) == Some("BLOCKED"))
                    })
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(yaml: &str, env: &[(&str, &str)]) -> Result<BedrockGuard, String> {
        let v: serde_yaml::Value = serde_yaml::from_str(yaml).unwrap();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        BedrockGuard::from_params(v.as_mapping().unwrap(), &lookup)
    }

    const BASE: &str = "{guardrailIdentifier: gr-1, guardrailVersion: DRAFT, aws_access_key_id: AK, aws_secret_access_key: SK}";

    #[test]
    fn config_reads_litellms_names_and_the_environment() {
        let g = guard(BASE, &[("AWS_REGION", "eu-west-1")]).unwrap();
        assert_eq!(
            g.url,
            "https://bedrock-runtime.eu-west-1.amazonaws.com/guardrail/gr-1/version/DRAFT/apply"
        );
        assert!(!format!("{g:?}").contains("SK"));
        let g = guard(
            "{guardrailIdentifier: 'arn:aws:bedrock:x:guardrail/a b', guardrailVersion: '1'}",
            &[
                ("AWS_ACCESS_KEY_ID", "A"),
                ("AWS_SECRET_ACCESS_KEY", "S"),
                ("AWS_BEDROCK_RUNTIME_ENDPOINT", "http://h:9/"),
            ],
        )
        .unwrap();
        assert_eq!(
            g.url,
            "http://h:9/guardrail/arn%3Aaws%3Abedrock%3Ax%3Aguardrail%2Fa%20b/version/1/apply"
        );
        assert_eq!(g.region, "us-west-2");
        let err = guard("{guardrailVersion: '1'}", &[]).unwrap_err();
        assert!(err.contains("guardrailIdentifier"), "{err}");
        let err = guard("{guardrailIdentifier: g, guardrailVersion: '1'}", &[]).unwrap_err();
        assert!(err.contains("aws_access_key_id"), "{err}");
        let err = guard(
            &BASE.replace('}', ", disable_exception_on_block: true}"),
            &[],
        )
        .unwrap_err();
        assert!(err.contains("disable_exception_on_block"), "{err}");
    }

    #[test]
    fn blocked_anonymized_and_none_as_litellm_maps_them() {
        let g = guard(BASE, &[]).unwrap();
        let texts = vec!["a".to_string(), String::new(), "b@c.io".to_string()];
        let body: Value =
            serde_json::from_slice(&BedrockGuard::body("request", &texts).unwrap()).unwrap();
        assert_eq!(body["source"], "INPUT");
        assert_eq!(
            body["content"],
            json!([{"text": {"text": "a"}}, {"text": {"text": "b@c.io"}}])
        );
        assert_eq!(BedrockGuard::body("response", &[String::new()]), None);
        let none = br#"{"action":"NONE","outputs":[],"assessments":[]}"#;
        assert_eq!(g.verdict(none, &texts), Ok(Verdict::Pass));
        let masked = br#"{"action":"GUARDRAIL_INTERVENED","outputs":[{"text":"a"},{"text":"{EMAIL}"}],
            "assessments":[{"sensitiveInformationPolicy":{"piiEntities":[{"type":"EMAIL","match":"b@c.io","action":"ANONYMIZED"}]}}]}"#;
        assert_eq!(
            g.verdict(masked, &texts),
            Ok(Verdict::Rewrite(vec![
                "a".into(),
                String::new(),
                "{EMAIL}".into()
            ]))
        );
        let block = br#"{"action":"GUARDRAIL_INTERVENED","outputs":[{"text":"Sorry, blocked."}],
            "assessments":[{"topicPolicy":{"topics":[{"name":"Finance","type":"DENY","action":"BLOCKED"}]}}]}"#;
        let Ok(Verdict::Blocked(detail)) = g.verdict(block, &texts) else {
            panic!("not blocked");
        };
        assert_eq!(detail["error"], BLOCKED);
        assert_eq!(detail["bedrock_guardrail_response"], "Sorry, blocked.");
        assert_eq!(detail["guardrailIdentifier"], "gr-1");
        assert!(g.verdict(b"[]", &texts).is_err());
    }
}
