//! Responses API answers both ways for the cache: a streamed answer is the
//! whole response its closing `response.completed` (or
//! `response.incomplete`) event carries ([`collect`]), and a stored
//! response is played back as the event sequence the gateway's Responses
//! streams use ([`replay`]): `response.created`, `response.in_progress`,
//! each output item added, filled and done, then `response.completed`,
//! every event with its `sequence_number`.

use crate::formats::write_event;
use serde_json::{json, Value};

/// The whole response a complete Responses stream stands for; `None`
/// when it did not end with `response.completed` or `response.incomplete`,
/// or carried an error.
pub fn collect(sse: &[u8]) -> Option<Vec<u8>> {
    let mut whole = None;
    for line in sse.split(|&b| b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else {
            continue;
        };
        if whole.is_some() {
            // Nothing follows the closing event.
            return None;
        }
        let data = data.trim_ascii();
        let event: Value = serde_json::from_slice(data).ok()?;
        match event.get("type")?.as_str()? {
            "response.completed" | "response.incomplete" => {
                let response = event.get("response")?;
                response.get("id")?.as_str()?;
                whole = Some(serde_json::to_vec(response).ok()?);
            }
            "error" | "response.failed" => return None,
            _ => {}
        }
    }
    whole
}

/// Appends numbered events.
struct Events {
    out: Vec<u8>,
    seq: u64,
}

impl Events {
    fn emit(&mut self, kind: &str, mut body: Value) {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.seq);
        self.seq += 1;
        write_event(&mut self.out, Some(kind), &body);
    }
}

/// A stored response played back as a Responses event stream; `None` when
/// the body is not a response.
pub fn replay(body: &[u8]) -> Option<Vec<u8>> {
    let whole: Value = serde_json::from_slice(body).ok()?;
    if whole.get("object").and_then(Value::as_str) != Some("response") {
        return None;
    }
    let output = whole.get("output")?.as_array()?;
    let mut e = Events {
        out: Vec::with_capacity(body.len() * 3),
        seq: 0,
    };
    let mut opened = whole.clone();
    opened["status"] = json!("in_progress");
    opened["output"] = json!([]);
    opened["usage"] = Value::Null;
    e.emit("response.created", json!({"response": opened}));
    e.emit("response.in_progress", json!({"response": opened}));
    for (index, item) in output.iter().enumerate() {
        replay_item(&mut e, index, item);
    }
    let closing = match whole.get("status").and_then(Value::as_str) {
        Some("incomplete") => "response.incomplete",
        _ => "response.completed",
    };
    e.emit(closing, json!({"response": whole}));
    Some(e.out)
}

/// One output item: added, filled (a message's text parts, a function
/// call's arguments), done.
fn replay_item(e: &mut Events, index: usize, item: &Value) {
    let id = item.get("id").cloned().unwrap_or(Value::Null);
    let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
    let mut added = item.clone();
    if added.get("status").is_some() {
        added["status"] = json!("in_progress");
    }
    match kind {
        "message" => {
            added["content"] = json!([]);
            e.emit(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            );
            let parts = item.get("content").and_then(Value::as_array);
            for (ci, part) in parts.into_iter().flatten().enumerate() {
                let at = json!({"item_id": id, "output_index": index, "content_index": ci});
                let with = |mut v: Value, extra: Value| {
                    if let (Value::Object(v), Value::Object(extra)) = (&mut v, extra) {
                        v.extend(extra);
                    }
                    v
                };
                let ptype = part.get("type").and_then(Value::as_str).unwrap_or("");
                let mut empty = part.clone();
                let text = part.get("text").and_then(Value::as_str);
                if let (Some(_), "output_text") = (text, ptype) {
                    empty["text"] = json!("");
                    empty["annotations"] = json!([]);
                }
                e.emit(
                    "response.content_part.added",
                    with(at.clone(), json!({"part": empty})),
                );
                if let (Some(text), "output_text") = (text, ptype) {
                    e.emit(
                        "response.output_text.delta",
                        with(at.clone(), json!({"delta": text})),
                    );
                    e.emit(
                        "response.output_text.done",
                        with(at.clone(), json!({"text": text})),
                    );
                }
                e.emit(
                    "response.content_part.done",
                    with(at, json!({"part": part})),
                );
            }
        }
        "function_call" => {
            added["arguments"] = json!("");
            e.emit(
                "response.output_item.added",
                json!({"output_index": index, "item": added}),
            );
            let args = item.get("arguments").cloned().unwrap_or_else(|| json!(""));
            e.emit(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": index, "delta": args}),
            );
            e.emit(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": index, "arguments": args}),
            );
        }
        _ => e.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        ),
    }
    e.emit(
        "response.output_item.done",
        json!({"output_index": index, "item": item}),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESPONSE: &str = r#"{"id":"resp_1","object":"response","created_at":1,"status":"completed",
        "model":"gpt","output":[
          {"id":"msg_1","type":"message","status":"completed","role":"assistant",
           "content":[{"type":"output_text","text":"Hello","annotations":[]}]},
          {"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"f","arguments":"{\"a\":1}"}],
        "usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}"#;

    #[test]
    fn a_response_is_played_back_and_taken_from_its_completed_event() {
        let played = replay(RESPONSE.as_bytes()).unwrap();
        let text = String::from_utf8(played.clone()).unwrap();
        let events: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(&kinds[..2], ["response.created", "response.in_progress"]);
        assert_eq!(kinds.last(), Some(&"response.completed"));
        assert!(kinds.contains(&"response.output_text.delta"));
        assert!(kinds.contains(&"response.function_call_arguments.delta"));
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["sequence_number"], i as u64);
        }
        assert_eq!(events[0]["response"]["status"], "in_progress");
        let again: Value = serde_json::from_slice(&collect(&played).unwrap()).unwrap();
        assert_eq!(again, serde_json::from_str::<Value>(RESPONSE).unwrap());
    }

    #[test]
    fn a_stream_without_its_closing_event_or_with_an_error_is_not_stored() {
        let played = String::from_utf8(replay(RESPONSE.as_bytes()).unwrap()).unwrap();
        let cut = played.split("event: response.completed").next().unwrap();
        assert!(collect(cut.as_bytes()).is_none());
        let failed =
            format!("{cut}event: error\ndata: {{\"type\":\"error\",\"message\":\"boom\"}}\n\n");
        assert!(collect(failed.as_bytes()).is_none());
        assert!(replay(br#"{"id":"x","choices":[]}"#).is_none());
    }
}
