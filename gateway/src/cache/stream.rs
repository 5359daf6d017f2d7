//! One entry serves both forms of an answer: a streamed answer (OpenAI's
//! chat or text completion chunks, as the client got them) is put together
//! into the whole answer it stands for ([`collect`]), and a stored answer
//! is played back to a client that asked for a stream as chunks ending in
//! `data: [DONE]` ([`replay`]); Anthropic Messages and Responses streams
//! in their own events ([`super::messages`], [`super::responses`]). A stream that is cut short, carries an
//! error or something this module does not follow (logprobs, legacy
//! `function_call`) is not stored.

use crate::inbound::Endpoint;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Tokens of the answer as the upstream reported them, for a stream that
/// carried no usage of its own (the gateway hides the usage chunk it asked
/// for from a client that did not).
#[derive(Debug, Clone, Copy, Default)]
pub struct Tokens {
    /// Prompt tokens.
    pub prompt: u64,
    /// Completion tokens.
    pub completion: u64,
}

#[derive(Default)]
struct Choice {
    role: Option<Value>,
    content: Option<String>,
    refusal: Option<String>,
    tool_calls: BTreeMap<u64, ToolCall>,
    finish_reason: Option<Value>,
}

#[derive(Default)]
struct ToolCall {
    id: Option<Value>,
    kind: Option<Value>,
    name: String,
    arguments: String,
}

/// The whole answer a complete SSE stream on `endpoint` stands for, as
/// JSON; `None` when it is not complete or not understood.
pub fn collect(endpoint: Endpoint, sse: &[u8], tokens: Tokens) -> Option<Vec<u8>> {
    match endpoint {
        Endpoint::Messages => return super::messages::collect(sse),
        Endpoint::Responses => return super::responses::collect(sse),
        _ => {}
    }
    let text = matches!(endpoint, Endpoint::Completions);
    if !text && endpoint != Endpoint::ChatCompletions {
        return None;
    }
    let mut done = false;
    let mut head: Option<Map<String, Value>> = None;
    let mut choices: BTreeMap<u64, Choice> = BTreeMap::new();
    let mut usage: Option<Value> = None;
    for line in sse.split(|&b| b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else {
            continue;
        };
        let data = data.trim_ascii();
        if done {
            // Nothing follows [DONE] in a well-formed stream.
            return None;
        }
        if data == b"[DONE]" {
            done = true;
            continue;
        }
        let Value::Object(chunk) = serde_json::from_slice::<Value>(data).ok()? else {
            return None;
        };
        if chunk.contains_key("error") {
            return None;
        }
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            usage = Some(u.clone());
        }
        for c in chunk.get("choices")?.as_array()? {
            let index = c.get("index")?.as_u64()?;
            let acc = choices.entry(index).or_default();
            if c.get("logprobs").is_some_and(|l| !l.is_null()) {
                return None;
            }
            if let Some(r) = c.get("finish_reason").filter(|r| !r.is_null()) {
                acc.finish_reason = Some(r.clone());
            }
            if text {
                append(&mut acc.content, c.get("text"))?;
                continue;
            }
            let Some(delta) = c.get("delta") else {
                continue;
            };
            if delta.get("function_call").is_some_and(|f| !f.is_null()) {
                return None;
            }
            if let Some(r) = delta.get("role").filter(|r| !r.is_null()) {
                acc.role = Some(r.clone());
            }
            append(&mut acc.content, delta.get("content"))?;
            append(&mut acc.refusal, delta.get("refusal"))?;
            for call in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let i = call.get("index")?.as_u64()?;
                let t = acc.tool_calls.entry(i).or_default();
                if let Some(id) = call.get("id").filter(|v| !v.is_null()) {
                    t.id = Some(id.clone());
                }
                if let Some(k) = call.get("type").filter(|v| !v.is_null()) {
                    t.kind = Some(k.clone());
                }
                if let Some(f) = call.get("function") {
                    t.name
                        .push_str(f.get("name").and_then(Value::as_str).unwrap_or(""));
                    t.arguments
                        .push_str(f.get("arguments").and_then(Value::as_str).unwrap_or(""));
                }
            }
        }
        if head.is_none() {
            head = Some(chunk);
        }
    }
    let head = head?;
    if !done || choices.is_empty() || choices.values().any(|c| c.finish_reason.is_none()) {
        return None;
    }
    let mut body = Map::new();
    body.insert("id".into(), head.get("id")?.clone());
    let object = if text {
        "text_completion"
    } else {
        "chat.completion"
    };
    body.insert("object".into(), object.into());
    for field in ["created", "model", "system_fingerprint", "service_tier"] {
        if let Some(v) = head.get(field).filter(|v| !v.is_null()) {
            body.insert(field.into(), v.clone());
        }
    }
    let choices: Vec<Value> = choices
        .into_iter()
        .map(|(index, c)| whole_choice(index, c, text))
        .collect();
    body.insert("choices".into(), choices.into());
    let usage = usage.unwrap_or_else(|| {
        json!({
            "prompt_tokens": tokens.prompt,
            "completion_tokens": tokens.completion,
            "total_tokens": tokens.prompt.saturating_add(tokens.completion),
        })
    });
    body.insert("usage".into(), usage);
    serde_json::to_vec(&Value::Object(body)).ok()
}

/// Appends a string piece; `None` when the piece is neither a string nor
/// null.
fn append(to: &mut Option<String>, piece: Option<&Value>) -> Option<()> {
    match piece {
        None | Some(Value::Null) => Some(()),
        Some(Value::String(s)) => {
            to.get_or_insert_with(String::new).push_str(s);
            Some(())
        }
        Some(_) => None,
    }
}

fn whole_choice(index: u64, c: Choice, text: bool) -> Value {
    let finish = c.finish_reason.unwrap_or(Value::Null);
    if text {
        return json!({"index": index, "text": c.content.unwrap_or_default(),
            "finish_reason": finish, "logprobs": null});
    }
    let mut message = Map::new();
    message.insert("role".into(), c.role.unwrap_or_else(|| "assistant".into()));
    message.insert("content".into(), c.content.map_or(Value::Null, Value::from));
    if let Some(r) = c.refusal {
        message.insert("refusal".into(), r.into());
    }
    if !c.tool_calls.is_empty() {
        let calls: Vec<Value> = c
            .tool_calls
            .into_values()
            .map(|t| {
                json!({"id": t.id.unwrap_or(Value::Null), "type": t.kind.unwrap_or_else(|| "function".into()),
                    "function": {"name": t.name, "arguments": t.arguments}})
            })
            .collect();
        message.insert("tool_calls".into(), calls.into());
    }
    json!({"index": index, "message": message, "finish_reason": finish, "logprobs": null})
}

/// A stored answer on `endpoint` as SSE chunks ending in `data: [DONE]`,
/// with a usage chunk when `include_usage`; `None` when the body is not an
/// answer this module plays back.
pub fn replay(endpoint: Endpoint, body: &[u8], include_usage: bool) -> Option<Vec<u8>> {
    match endpoint {
        Endpoint::Messages => return super::messages::replay(body),
        Endpoint::Responses => return super::responses::replay(body),
        _ => {}
    }
    let text = matches!(endpoint, Endpoint::Completions);
    if !text && endpoint != Endpoint::ChatCompletions {
        return None;
    }
    let Value::Object(whole) = serde_json::from_slice::<Value>(body).ok()? else {
        return None;
    };
    let mut base = Map::new();
    base.insert("id".into(), whole.get("id")?.clone());
    let object = if text {
        "text_completion"
    } else {
        "chat.completion.chunk"
    };
    base.insert("object".into(), object.into());
    for field in ["created", "model", "system_fingerprint", "service_tier"] {
        if let Some(v) = whole.get(field).filter(|v| !v.is_null()) {
            base.insert(field.into(), v.clone());
        }
    }
    let choices = whole.get("choices")?.as_array()?;
    let mut out = Vec::with_capacity(body.len() * 2);
    let mut event = |choices: Vec<Value>, usage: Option<&Value>| {
        let mut chunk = base.clone();
        chunk.insert("choices".into(), choices.into());
        if let Some(u) = usage {
            chunk.insert("usage".into(), u.clone());
        }
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(&serde_json::to_vec(&Value::Object(chunk)).unwrap_or_default());
        out.extend_from_slice(b"\n\n");
    };
    let mut last = Vec::with_capacity(choices.len());
    for c in choices {
        let index = c.get("index")?.clone();
        let finish = c.get("finish_reason").cloned().unwrap_or(Value::Null);
        if text {
            let piece = c.get("text")?.clone();
            event(
                vec![
                    json!({"index": index, "text": piece, "finish_reason": null, "logprobs": null}),
                ],
                None,
            );
            last.push(
                json!({"index": index, "text": "", "finish_reason": finish, "logprobs": null}),
            );
            continue;
        }
        let message = c.get("message")?.as_object()?;
        let mut delta = Map::new();
        delta.insert(
            "role".into(),
            message
                .get("role")
                .cloned()
                .unwrap_or_else(|| "assistant".into()),
        );
        delta.insert(
            "content".into(),
            message.get("content").cloned().unwrap_or(Value::Null),
        );
        if let Some(r) = message.get("refusal").filter(|r| !r.is_null()) {
            delta.insert("refusal".into(), r.clone());
        }
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            let calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let mut call = call.clone();
                    if let Value::Object(m) = &mut call {
                        m.insert("index".into(), i.into());
                    }
                    call
                })
                .collect();
            delta.insert("tool_calls".into(), calls.into());
        }
        event(
            vec![json!({"index": index, "delta": delta, "finish_reason": null, "logprobs": null})],
            None,
        );
        last.push(json!({"index": index, "delta": {}, "finish_reason": finish, "logprobs": null}));
    }
    event(last, None);
    if include_usage {
        if let Some(u) = whole.get("usage").filter(|u| !u.is_null()) {
            event(Vec::new(), Some(u));
        }
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sse(chunks: &[Value]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            out.extend_from_slice(format!("data: {c}\n\n").as_bytes());
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        out
    }

    #[test]
    fn a_chat_stream_is_put_together_and_played_back() {
        let chunks = [
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 5, "model": "m",
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": null}]}),
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 5, "model": "m",
                "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": null}]}),
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 5, "model": "m",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        ];
        let tokens = Tokens {
            prompt: 3,
            completion: 2,
        };
        let body = collect(Endpoint::ChatCompletions, &sse(&chunks), tokens).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["id"], "c1");
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["content"], "Hello");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["usage"]["total_tokens"], 5);
        let played = replay(Endpoint::ChatCompletions, &body, true).unwrap();
        assert!(played.ends_with(b"data: [DONE]\n\n"));
        // Played back and put together again: the same answer.
        let again = collect(Endpoint::ChatCompletions, &played, Tokens::default()).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&again).unwrap(), v);
    }

    #[test]
    fn tool_calls_and_text_completions() {
        let chunks = [
            json!({"id": "c2", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant",
                "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}}]}}]}),
            json!({"id": "c2", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {
                "tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}, "finish_reason": "tool_calls"}]}),
        ];
        let body = collect(Endpoint::ChatCompletions, &sse(&chunks), Tokens::default()).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        let call = &v["choices"][0]["message"]["tool_calls"][0];
        assert_eq!(call["id"], "call_1");
        assert_eq!(call["function"]["arguments"], "{\"a\":1}");
        assert!(v["choices"][0]["message"]["content"].is_null());

        let chunks = [
            json!({"id": "t1", "object": "text_completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "text": "ab", "finish_reason": null}]}),
            json!({"id": "t1", "object": "text_completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "text": "c", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}),
        ];
        let body = collect(Endpoint::Completions, &sse(&chunks), Tokens::default()).unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["choices"][0]["text"], "abc");
        assert_eq!(v["usage"]["total_tokens"], 3);
        let played = replay(Endpoint::Completions, &body, false).unwrap();
        assert!(!String::from_utf8_lossy(&played).contains("usage"));
        assert!(played.ends_with(b"data: [DONE]\n\n"));
    }

    #[test]
    fn cut_off_or_failed_streams_are_not_stored() {
        let start = json!({"id": "c", "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": null}]});
        let end =
            json!({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
        let whole = sse(&[start.clone(), end.clone()]);
        assert!(collect(Endpoint::ChatCompletions, &whole, Tokens::default()).is_some());
        // No [DONE].
        let cut = &whole[..whole.len() - b"data: [DONE]\n\n".len()];
        assert!(collect(Endpoint::ChatCompletions, cut, Tokens::default()).is_none());
        // No finish reason.
        assert!(collect(
            Endpoint::ChatCompletions,
            &sse(std::slice::from_ref(&start)),
            Tokens::default()
        )
        .is_none());
        // An error event.
        let err = json!({"error": {"message": "boom"}});
        assert!(collect(
            Endpoint::ChatCompletions,
            &sse(&[start, err, end]),
            Tokens::default()
        )
        .is_none());
        assert!(collect(Endpoint::Embeddings, &whole, Tokens::default()).is_none());
    }
}
