//! Usage in Cohere's answers: a chat answer's `usage` (and a stream's
//! `message-end` event's `delta.usage`) holds `billed_units` (what Cohere
//! charges: `input_tokens`, `output_tokens`) and `tokens` (the counts
//! with Cohere's own prompt template); embed and rerank answers hold
//! `meta.billed_units` (`input_tokens`; rerank `search_units`). The
//! gateway bills `billed_units` where present, else `tokens` (LiteLLM
//! reads `tokens` for chat: its spend can be a little higher).

use crate::spend::Usage;
use serde_json::Value;

fn count(v: &Value) -> Option<u64> {
    v.as_u64()
}

/// The usage of a chat `usage` object: `billed_units`, else `tokens`.
pub fn of_chat(usage: &Value) -> Option<Usage> {
    ["billed_units", "tokens"].iter().find_map(|part| {
        let units = usage.get(part)?;
        let (input, output) = (
            count(&units["input_tokens"]),
            count(&units["output_tokens"]),
        );
        (input.is_some() || output.is_some()).then(|| Usage {
            prompt_tokens: input.unwrap_or(0),
            completion_tokens: output.unwrap_or(0),
            ..Usage::default()
        })
    })
}

/// The usage of an embed or rerank answer (`meta.billed_units.input_tokens`,
/// else LiteLLM's `total_tokens` of a rerank billed by the token).
pub fn of_meta(resp: &Value) -> Option<Usage> {
    let billed = &resp["meta"]["billed_units"];
    let tokens = count(&billed["input_tokens"]).or_else(|| count(&billed["total_tokens"]))?;
    Some(Usage {
        prompt_tokens: tokens,
        ..Usage::default()
    })
}

/// Search units a rerank answer was billed (`meta.billed_units.search_units`).
pub fn search_units(resp: &Value) -> Option<u64> {
    count(&resp["meta"]["billed_units"]["search_units"])
}

/// OpenAI's `usage` object for `usage`.
pub fn openai(usage: Usage) -> Value {
    serde_json::json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens.saturating_add(usage.completion_tokens),
    })
}

/// The usage of a whole Cohere answer: chat, embed or rerank (its search
/// units, and its input tokens when billed).
pub fn usage_from_body(body: &[u8]) -> Option<Usage> {
    let resp: Value = serde_json::from_slice(body).ok()?;
    if let Some(usage) = resp.get("usage") {
        return of_chat(usage);
    }
    match (of_meta(&resp), search_units(&resp)) {
        (None, None) => None,
        (tokens, units) => Some(Usage {
            search_units: units.unwrap_or(0),
            ..tokens.unwrap_or_default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn billed_units_first_then_tokens() {
        let chat = br#"{"id":"x","message":{},"finish_reason":"COMPLETE","usage":{"billed_units":{"input_tokens":5,"output_tokens":7},"tokens":{"input_tokens":70,"output_tokens":7}}}"#;
        assert_eq!(
            usage_from_body(chat),
            Some(Usage {
                prompt_tokens: 5,
                completion_tokens: 7,
                ..Usage::default()
            })
        );
        let tokens_only = br#"{"usage":{"tokens":{"input_tokens":3,"output_tokens":1}}}"#;
        assert_eq!(usage_from_body(tokens_only).unwrap().prompt_tokens, 3);
        let embed = br#"{"id":"e","embeddings":{"float":[[0.1]]},"meta":{"api_version":{"version":"2"},"billed_units":{"input_tokens":4}}}"#;
        assert_eq!(usage_from_body(embed).unwrap().prompt_tokens, 4);
        let rerank: Value =
            serde_json::from_slice(br#"{"results":[],"meta":{"billed_units":{"search_units":1}}}"#)
                .unwrap();
        assert_eq!(search_units(&rerank), Some(1));
        assert_eq!(
            usage_from_body(br#"{"results":[],"meta":{"billed_units":{"search_units":2}}}"#),
            Some(Usage {
                search_units: 2,
                ..Usage::default()
            })
        );
        assert_eq!(usage_from_body(b"{}"), None);
        assert_eq!(usage_from_body(b"not json"), None);
    }
}
