//! A Gemini `generateContent` answer → an internal chat completion, and
//! its server-sent stream (`streamGenerateContent?alt=sse`, each event a
//! partial answer) → chat completion chunks.
//!
//! Text parts join into `content` (`thought` parts into
//! `reasoning_content`), `functionCall` parts become tool calls;
//! `finishReason` STOP → stop, MAX_TOKENS → length, SAFETY and the other
//! blocks → content_filter (as does a prompt blocked with no candidate);
//! `usageMetadata` gives the usage (cached and thoughts tokens included).

use crate::formats::{unix_now, write_event, EventTranslator, TranslateError, DONE};
use crate::spend::Usage;
use serde_json::{json, Value};

fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn finish_reason(reason: &str, calls: bool) -> &'static str {
    match reason {
        "MAX_TOKENS" => "length",
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            "content_filter"
        }
        _ if calls => "tool_calls",
        _ => "stop",
    }
}

/// The gateway's usage for a `usageMetadata`.
pub(super) fn usage_of(u: &Value) -> Usage {
    Usage {
        prompt_tokens: count(&u["promptTokenCount"]),
        completion_tokens: count(&u["candidatesTokenCount"])
            .saturating_add(count(&u["thoughtsTokenCount"])),
        cached_tokens: count(&u["cachedContentTokenCount"]),
        cache_creation_tokens: 0,
        search_units: 0,
    }
}

fn openai_usage(u: &Value) -> Value {
    let usage = usage_of(u);
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens.saturating_add(usage.completion_tokens),
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": count(&u["thoughtsTokenCount"])},
    })
}

fn chat_id(resp: &Value) -> String {
    match resp["responseId"].as_str() {
        Some(id) => format!("chatcmpl-{id}"),
        None => format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
    }
}

/// Text, reasoning and tool calls of a candidate's parts.
fn parts_of(candidate: &Value) -> (String, String, Vec<(Value, String)>) {
    let mut text = String::new();
    let mut thought = String::new();
    let mut calls = Vec::new();
    for part in candidate["content"]["parts"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(call) = part.get("functionCall") {
            let args = serde_json::to_string(&call["args"]).unwrap_or_else(|_| "{}".into());
            let args = if args == "null" { "{}".into() } else { args };
            calls.push((call["name"].clone(), args));
        } else if let Some(t) = part["text"].as_str() {
            if part["thought"] == true {
                thought.push_str(t);
            } else {
                text.push_str(t);
            }
        }
    }
    (text, thought, calls)
}

/// The chat completion for the Gemini answer `body`.
pub fn to_chat(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let resp: Value = serde_json::from_slice(body)?;
    if !resp.is_object() {
        return Err(TranslateError("Gemini answer is not an object".into()));
    }
    let id = chat_id(&resp);
    let mut choices = Vec::new();
    for (i, candidate) in resp["candidates"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let (text, thought, calls) = parts_of(candidate);
        let mut message = json!({"role": "assistant", "content": text});
        if !thought.is_empty() {
            message["reasoning_content"] = json!(thought);
        }
        if !calls.is_empty() {
            message["tool_calls"] = calls
                .iter()
                .enumerate()
                .map(|(j, (name, args))| {
                    json!({"id": format!("call_{id}_{j}"), "type": "function",
                           "function": {"name": name, "arguments": args}})
                })
                .collect();
        }
        let reason = candidate["finishReason"].as_str().unwrap_or("STOP");
        choices.push(json!({
            "index": candidate["index"].as_u64().unwrap_or(i as u64),
            "message": message,
            "finish_reason": finish_reason(reason, !calls.is_empty()),
        }));
    }
    if choices.is_empty() {
        // A blocked prompt: no candidate, a `promptFeedback.blockReason`.
        choices.push(json!({
            "index": 0,
            "message": {"role": "assistant", "content": ""},
            "finish_reason": "content_filter",
        }));
    }
    let out = json!({
        "id": id,
        "object": "chat.completion",
        "created": unix_now(),
        "model": resp["modelVersion"],
        "choices": choices,
        "usage": openai_usage(&resp["usageMetadata"]),
    });
    Ok(serde_json::to_vec(&out)?)
}

/// The usage of a whole Gemini answer (embeddings answers included).
pub fn usage_from_body(body: &[u8]) -> Option<Usage> {
    let resp: Value = serde_json::from_slice(body).ok()?;
    if resp.get("candidates").is_none() {
        if let Some(usage) = super::embeddings::usage(&resp) {
            return Some(usage);
        }
    }
    resp.get("usageMetadata").map(usage_of)
}

/// Translates Gemini's SSE answer into chat completion chunks.
pub struct GeminiToChat {
    include_usage: bool,
    id: Option<String>,
    model: Value,
    created: u64,
    calls: u64,
    usage: Value,
    finish: Option<&'static str>,
    done: bool,
}

impl GeminiToChat {
    /// A translator; `include_usage` adds the usage chunk at the end.
    pub fn new(include_usage: bool) -> Self {
        GeminiToChat {
            include_usage,
            id: None,
            model: Value::Null,
            created: unix_now(),
            calls: 0,
            usage: Value::Null,
            finish: None,
            done: false,
        }
    }

    fn chunk(&self, out: &mut Vec<u8>, delta: Value, finish: Option<&str>) {
        let chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        write_event(out, None, &chunk);
    }
}

impl EventTranslator for GeminiToChat {
    fn event(
        &mut self,
        _name: &[u8],
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), TranslateError> {
        if self.done {
            return Ok(());
        }
        let resp: Value = serde_json::from_slice(data)?;
        if let Some(err) = resp.get("error") {
            let body = json!({"error": {
                "message": err["message"].as_str().unwrap_or("upstream stream error"),
                "type": err["status"],
                "code": err["code"].as_u64().map_or("500".to_string(), |c| c.to_string()),
            }});
            write_event(out, None, &body);
            self.done = true;
            return Ok(());
        }
        if self.id.is_none() {
            self.id = Some(chat_id(&resp));
            self.model = resp["modelVersion"].clone();
            self.chunk(out, json!({"role": "assistant", "content": ""}), None);
        }
        if resp.get("usageMetadata").is_some() {
            self.usage = resp["usageMetadata"].clone();
        }
        let Some(candidate) = resp["candidates"].get(0) else {
            if resp["promptFeedback"].get("blockReason").is_some() {
                self.finish = Some("content_filter");
            }
            return Ok(());
        };
        let (text, thought, calls) = parts_of(candidate);
        if !thought.is_empty() {
            self.chunk(out, json!({ "reasoning_content": thought }), None);
        }
        if !text.is_empty() {
            self.chunk(out, json!({ "content": text }), None);
        }
        for (name, args) in &calls {
            let call = json!({
                "index": self.calls,
                "id": format!("call_{}_{}", self.id.as_deref().unwrap_or(""), self.calls),
                "type": "function",
                "function": {"name": name, "arguments": args},
            });
            self.calls += 1;
            self.chunk(out, json!({"tool_calls": [call]}), None);
        }
        if let Some(reason) = candidate["finishReason"].as_str() {
            self.finish = Some(finish_reason(reason, self.calls > 0));
        }
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        if self.id.is_none() {
            return Err(TranslateError(
                "Gemini stream ended without an answer".into(),
            ));
        }
        self.chunk(out, json!({}), Some(self.finish.unwrap_or("stop")));
        if self.include_usage && !self.usage.is_null() {
            let chunk = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": openai_usage(&self.usage),
            });
            write_event(out, None, &chunk);
        }
        out.extend_from_slice(DONE);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{Events, StreamTranslator};

    #[test]
    fn answers_become_chat_completions() {
        let body = json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": "hmm", "thought": true}, {"text": "Hi"}, {"functionCall": {"name": "f", "args": {"x": 1}}}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 3, "thoughtsTokenCount": 2, "cachedContentTokenCount": 4, "totalTokenCount": 15},
            "modelVersion": "gemini-2.0-flash", "responseId": "r1",
        })
        .to_string();
        let chat: Value = serde_json::from_slice(&to_chat(body.as_bytes()).unwrap()).unwrap();
        let choice = &chat["choices"][0];
        assert_eq!(choice["message"]["content"], "Hi");
        assert_eq!(choice["message"]["reasoning_content"], "hmm");
        assert_eq!(
            choice["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"x\":1}"
        );
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert_eq!(chat["model"], "gemini-2.0-flash");
        assert_eq!(chat["usage"]["completion_tokens"], 5);
        assert_eq!(chat["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
        let u = usage_from_body(body.as_bytes()).unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (10, 5, 4)
        );
        let blocked = br#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":3}}"#;
        let chat: Value = serde_json::from_slice(&to_chat(blocked).unwrap()).unwrap();
        assert_eq!(chat["choices"][0]["finish_reason"], "content_filter");
        assert!(to_chat(b"[]").is_err());
    }

    #[test]
    fn streams_translate_in_any_split() {
        let input = concat!(
            "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hel\"}]}}],\"modelVersion\":\"g\",\"responseId\":\"r\"}\r\n\r\n",
            "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"lo\"}]},\"finishReason\":\"MAX_TOKENS\"}],\"usageMetadata\":{\"promptTokenCount\":2,\"candidatesTokenCount\":2}}\r\n\r\n",
        );
        for split in 0..input.len() {
            let mut t = Events::new(GeminiToChat::new(true));
            let mut out = Vec::new();
            t.feed(&input.as_bytes()[..split], &mut out).unwrap();
            t.feed(&input.as_bytes()[split..], &mut out).unwrap();
            t.finish(&mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            let chunks: Vec<Value> = text
                .split("\n\n")
                .filter_map(|e| e.strip_prefix("data: "))
                .filter(|d| *d != "[DONE]")
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            let content: String = chunks
                .iter()
                .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
                .collect();
            assert_eq!(content, "Hello", "split at {split}");
            assert!(chunks
                .iter()
                .any(|c| c["choices"][0]["finish_reason"] == "length"));
            assert_eq!(chunks.last().unwrap()["usage"]["total_tokens"], 4);
            assert!(text.ends_with("data: [DONE]\n\n"));
        }
        let mut t = Events::new(GeminiToChat::new(false));
        assert!(
            t.finish(&mut Vec::new()).is_err(),
            "an empty stream is an error"
        );
    }
}
