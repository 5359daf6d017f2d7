//! `POST …/guardrail/{guardrailIdentifier}/version/{guardrailVersion}/apply`:
//! Amazon Bedrock Guardrails' ApplyGuardrail API, with the checks the real
//! endpoint makes: the SigV4 signature of service `bedrock` recomputed with
//! the mock's secret ([`super::bedrock::SECRET`]), `source` `INPUT` or
//! `OUTPUT`, a non-empty `content` of `{text: {text}}` items, no unknown
//! top-level fields. Answers have the real shape: `usage`, `action`,
//! `outputs`, `assessments`.
//!
//! Behaviour: a text containing `mock-guardrail-block` intervenes with a
//! `BLOCKED` topic (`outputs` is the guardrail's blocked message); words
//! with `@` are anonymized as `{EMAIL}` (`ANONYMIZED`, one output per
//! content item); anything else is `NONE`. Guardrail id `missing` is a 404.

use serde_json::{json, Value};

use super::bedrock::{check_signature, error, percent_decode};
use super::{Ctx, Reply};

/// The blocked message the mock guardrail is configured with.
pub const BLOCKED_MESSAGING: &str = "Sorry, the model cannot answer this question.";

/// The guardrail id and version of an ApplyGuardrail path.
pub fn parse_path(path: &str) -> Option<(String, String)> {
    let rest = path.strip_suffix("/apply")?;
    let (rest, version) = rest.rsplit_once("/version/")?;
    let (_, id) = rest.rsplit_once("/guardrail/")?;
    Some((percent_decode(id)?, percent_decode(version)?))
}

/// The texts of a request body, or the refusal.
fn texts(body: &Value) -> Result<Vec<&str>, Reply> {
    let Some(obj) = body.as_object() else {
        return Err(error(400, "request body must be an object"));
    };
    if let Some(extra) = obj
        .keys()
        .find(|k| !matches!(k.as_str(), "source" | "content" | "outputScope"))
    {
        return Err(error(
            400,
            &format!("Malformed input request: extraneous key [{extra}] is not permitted"),
        ));
    }
    if !matches!(body["source"].as_str(), Some("INPUT" | "OUTPUT")) {
        return Err(error(
            400,
            "1 validation error detected: Value at 'source' failed to satisfy constraint: Member must satisfy enum value set: [INPUT, OUTPUT]",
        ));
    }
    let items = body["content"].as_array().filter(|c| !c.is_empty());
    let Some(items) = items else {
        return Err(error(
            400,
            "1 validation error detected: Value at 'content' failed to satisfy constraint: Member must have length greater than or equal to 1",
        ));
    };
    items
        .iter()
        .map(|i| {
            i.pointer("/text/text")
                .and_then(Value::as_str)
                .ok_or_else(|| error(400, "each content item must carry text.text"))
        })
        .collect()
}

/// Answers an ApplyGuardrail request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    if let Err(refusal) = check_signature(ctx) {
        return refusal;
    }
    let Some((id, _version)) = parse_path(ctx.req.path()) else {
        return error(404, "unknown operation");
    };
    if id == "missing" {
        return error(404, "The guardrail resource was not found.");
    }
    let texts = match texts(body) {
        Ok(t) => t,
        Err(refusal) => return refusal,
    };
    let chars: usize = texts.iter().map(|t| t.chars().count()).sum();
    let usage = json!({"topicPolicyUnits": 1, "contentPolicyUnits": 1, "wordPolicyUnits": 1,
        "sensitiveInformationPolicyUnits": 1, "sensitiveInformationPolicyFreeUnits": 0,
        "contextualGroundingPolicyUnits": 0, "textCharacters": chars});
    let answer = if texts.iter().any(|t| t.contains("mock-guardrail-block")) {
        json!({"usage": usage, "action": "GUARDRAIL_INTERVENED",
            "outputs": [{"text": BLOCKED_MESSAGING}],
            "assessments": [{"topicPolicy": {"topics": [
                {"name": "Forbidden", "type": "DENY", "action": "BLOCKED"}]}}]})
    } else if texts.iter().any(|t| t.contains('@')) {
        let masked: Vec<Value> = texts
            .iter()
            .map(|t| {
                let words: Vec<&str> = t
                    .split(' ')
                    .map(|w| if w.contains('@') { "{EMAIL}" } else { w })
                    .collect();
                json!({"text": words.join(" ")})
            })
            .collect();
        json!({"usage": usage, "action": "GUARDRAIL_INTERVENED", "outputs": masked,
            "assessments": [{"sensitiveInformationPolicy": {"piiEntities": [
                {"type": "EMAIL", "match": "[redacted]", "action": "ANONYMIZED"}]}}]})
    } else {
        json!({"usage": usage, "action": "NONE", "outputs": [], "assessments": [{}]})
    };
    Reply::json(200, serde_json::to_vec(&answer).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_bodies_are_checked() {
        assert_eq!(
            parse_path("/guardrail/arn%3Aa%2Fb/version/DRAFT/apply"),
            Some(("arn:a/b".to_string(), "DRAFT".to_string()))
        );
        assert_eq!(parse_path("/model/x/converse"), None);
        assert!(texts(&json!({"source": "INPUT", "content": []})).is_err());
        assert!(texts(&json!({"source": "X", "content": [{"text": {"text": "a"}}]})).is_err());
        assert!(
            texts(&json!({"source": "INPUT", "content": [{"text": {"text": "a"}}], "x": 1}))
                .is_err()
        );
        assert_eq!(
            texts(&json!({"source": "OUTPUT", "content": [{"text": {"text": "a"}}]})).ok(),
            Some(vec!["a"])
        );
    }
}
