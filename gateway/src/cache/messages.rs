//! Anthropic Messages answers both ways for the cache: a complete event
//! stream (`message_start`, content blocks, `message_delta`,
//! `message_stop`) put together into the whole message it stands for
//! ([`collect`]), and a stored message played back as that event sequence
//! ([`replay`]), in the framing the gateway's Messages streams use
//! (`event: <type>` and `data: <json>`). A stream cut short, carrying an
//! `error` event or a delta this module does not follow is not stored.

use crate::formats::write_event;
use serde_json::{json, Map, Value};

/// The whole message a complete Messages stream stands for, as JSON.
pub fn collect(sse: &[u8]) -> Option<Vec<u8>> {
    let mut message: Option<Map<String, Value>> = None;
    let mut blocks: Vec<Value> = Vec::new();
    // The partial JSON of each tool_use block, parsed at its end.
    let mut partial: Vec<Option<String>> = Vec::new();
    let mut stopped = false;
    for line in sse.split(|&b| b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else {
            continue;
        };
        if stopped {
            // Nothing follows message_stop in a well-formed stream.
            return None;
        }
        let Value::Object(event) = serde_json::from_slice::<Value>(data.trim_ascii()).ok()? else {
            return None;
        };
        match event.get("type")?.as_str()? {
            "message_start" => {
                let Value::Object(m) = event.get("message")?.clone() else {
                    return None;
                };
                message = Some(m);
            }
            "content_block_start" => {
                let index = usize::try_from(event.get("index")?.as_u64()?).ok()?;
                if index != blocks.len() {
                    return None;
                }
                let block = event.get("content_block")?.clone();
                let tool = matches!(block.get("type").and_then(Value::as_str), Some("tool_use"));
                partial.push(tool.then(String::new));
                blocks.push(block);
            }
            "content_block_delta" => {
                let index = usize::try_from(event.get("index")?.as_u64()?).ok()?;
                let block = blocks.get_mut(index)?;
                let delta = event.get("delta")?;
                let piece = |name: &str| delta.get(name).and_then(Value::as_str);
                match delta.get("type")?.as_str()? {
                    "text_delta" => append(block, "text", piece("text")?)?,
                    "thinking_delta" => append(block, "thinking", piece("thinking")?)?,
                    "signature_delta" => append(block, "signature", piece("signature")?)?,
                    "input_json_delta" => partial
                        .get_mut(index)?
                        .as_mut()?
                        .push_str(piece("partial_json")?),
                    _ => return None,
                }
            }
            "content_block_stop" => {
                let index = usize::try_from(event.get("index")?.as_u64()?).ok()?;
                if let Some(json) = partial.get_mut(index)?.take() {
                    let input = match json.trim() {
                        "" => json!({}),
                        text => serde_json::from_str(text).ok()?,
                    };
                    blocks.get_mut(index)?["input"] = input;
                }
            }
            "message_delta" => {
                let m = message.as_mut()?;
                if let Some(Value::Object(delta)) = event.get("delta") {
                    for (k, v) in delta {
                        m.insert(k.clone(), v.clone());
                    }
                }
                if let Some(Value::Object(usage)) = event.get("usage") {
                    let into = m.entry("usage").or_insert_with(|| json!({}));
                    let Value::Object(into) = into else {
                        return None;
                    };
                    for (k, v) in usage {
                        into.insert(k.clone(), v.clone());
                    }
                }
            }
            "message_stop" => stopped = true,
            "ping" => {}
            // An error, or an event this module does not follow.
            _ => return None,
        }
    }
    let mut message = message?;
    if !stopped || message.get("stop_reason").is_none_or(Value::is_null) {
        return None;
    }
    message.insert("content".into(), blocks.into());
    serde_json::to_vec(&Value::Object(message)).ok()
}

/// Appends `piece` to the string member `name` of `block`.
fn append(block: &mut Value, name: &str, piece: &str) -> Option<()> {
    let Value::Object(b) = block else {
        return None;
    };
    match b.entry(name).or_insert_with(|| json!("")) {
        Value::String(s) => s.push_str(piece),
        _ => return None,
    }
    Some(())
}

/// A stored message played back as a Messages event stream; `None` when
/// the body is not a message.
pub fn replay(body: &[u8]) -> Option<Vec<u8>> {
    let Value::Object(whole) = serde_json::from_slice::<Value>(body).ok()? else {
        return None;
    };
    if whole.get("type").and_then(Value::as_str) != Some("message") {
        return None;
    }
    let content = whole.get("content")?.as_array()?;
    let usage = whole.get("usage").cloned().unwrap_or_else(|| json!({}));
    let mut start = whole.clone();
    start.insert("content".into(), json!([]));
    start.insert("stop_reason".into(), Value::Null);
    start.insert("stop_sequence".into(), Value::Null);
    let mut start_usage = usage.clone();
    if let Value::Object(u) = &mut start_usage {
        u.insert("output_tokens".into(), json!(0));
    }
    start.insert("usage".into(), start_usage);
    let mut out = Vec::with_capacity(body.len() * 2);
    write_event(
        &mut out,
        Some("message_start"),
        &json!({"type": "message_start", "message": start}),
    );
    for (index, block) in content.iter().enumerate() {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        let (opened, deltas) = split_block(kind, block);
        write_event(
            &mut out,
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index, "content_block": opened}),
        );
        for delta in deltas {
            write_event(
                &mut out,
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            );
        }
        write_event(
            &mut out,
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        );
    }
    write_event(
        &mut out,
        Some("message_delta"),
        &json!({
            "type": "message_delta",
            "delta": {
                "stop_reason": whole.get("stop_reason").cloned().unwrap_or(Value::Null),
                "stop_sequence": whole.get("stop_sequence").cloned().unwrap_or(Value::Null),
            },
            "usage": usage,
        }),
    );
    write_event(
        &mut out,
        Some("message_stop"),
        &json!({"type": "message_stop"}),
    );
    Some(out)
}

/// A content block as it opens (its text emptied) and the deltas that fill
/// it; a block of another kind opens whole.
fn split_block(kind: &str, block: &Value) -> (Value, Vec<Value>) {
    let mut opened = block.clone();
    let text = |name: &str| block.get(name).and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => {
            opened["text"] = json!("");
            let delta = json!({"type": "text_delta", "text": text("text")});
            (opened, vec![delta])
        }
        "thinking" => {
            opened["thinking"] = json!("");
            opened["signature"] = json!("");
            let mut deltas = vec![json!({"type": "thinking_delta", "thinking": text("thinking")})];
            if !text("signature").is_empty() {
                deltas.push(json!({"type": "signature_delta", "signature": text("signature")}));
            }
            (opened, deltas)
        }
        "tool_use" => {
            opened["input"] = json!({});
            let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
            let delta = json!({"type": "input_json_delta", "partial_json": input.to_string()});
            (opened, vec![delta])
        }
        _ => (opened, Vec::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGE: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude",
        "content":[{"type":"thinking","thinking":"hmm","signature":"sig"},
                   {"type":"text","text":"Hello"},
                   {"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}],
        "stop_reason":"tool_use","stop_sequence":null,
        "usage":{"input_tokens":7,"output_tokens":5}}"#;

    #[test]
    fn a_message_is_played_back_and_put_together_again() {
        let played = replay(MESSAGE.as_bytes()).unwrap();
        let text = String::from_utf8(played.clone()).unwrap();
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("event: "))
            .collect();
        assert_eq!(names.first(), Some(&"message_start"));
        assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
        assert_eq!(
            names
                .iter()
                .filter(|n| **n == "content_block_start")
                .count(),
            3
        );
        let again = collect(&played).unwrap();
        let (a, b): (Value, Value) = (
            serde_json::from_slice(&again).unwrap(),
            serde_json::from_str(MESSAGE).unwrap(),
        );
        assert_eq!(a, b);
    }

    #[test]
    fn cut_off_or_failed_streams_are_not_stored() {
        let played = String::from_utf8(replay(MESSAGE.as_bytes()).unwrap()).unwrap();
        let cut = played.split("event: message_stop").next().unwrap();
        assert!(collect(cut.as_bytes()).is_none());
        let failed = played.replace(
            "event: message_delta",
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\nevent: message_delta",
        );
        assert!(collect(failed.as_bytes()).is_none());
        assert!(replay(br#"{"id":"x","choices":[]}"#).is_none());
    }
}
