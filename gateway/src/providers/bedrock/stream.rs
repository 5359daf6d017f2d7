//! A ConverseStream answer (binary event-stream messages) → internal chat
//! completion chunks, message by message.
//!
//! `messageStart` opens with the assistant role; text and reasoning deltas
//! become `content` and `reasoning_content`; a `toolUse` block start opens
//! a tool call whose arguments stream as its input deltas arrive;
//! `messageStop` carries the finish reason; `metadata` the usage (a usage
//! chunk when the client asked for it), then `[DONE]`. An exception
//! message (`:message-type` `exception` or `error`) becomes an error chunk
//! and ends the stream.

use super::response::{completion_id, finish_reason, openai_usage};
use crate::formats::{unix_now, write_event, StreamTranslator, TranslateError, DONE};
use crate::providers::eventstream::{Decoder, FrameError, Message};
use serde_json::{json, Value};

/// Translates ConverseStream messages into chat completion chunks.
pub struct ConverseToChat {
    decoder: Decoder,
    include_usage: bool,
    id: String,
    created: u64,
    /// OpenAI index of the current tool call (-1: none yet).
    tool_index: i64,
    /// The usage of the `metadata` event, in OpenAI's shape.
    usage_json: Option<Value>,
    finished: bool,
    done: bool,
}

impl ConverseToChat {
    /// A translator; `include_usage` adds the usage chunk at the end.
    pub fn new(include_usage: bool) -> Self {
        ConverseToChat {
            decoder: Decoder::new(),
            include_usage,
            id: completion_id(),
            created: unix_now(),
            tool_index: -1,
            usage_json: None,
            finished: false,
            done: false,
        }
    }

    fn chunk(&self, out: &mut Vec<u8>, delta: Value, finish: Option<&str>) {
        let chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": "",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        write_event(out, None, &chunk);
    }

    fn on_message(&mut self, msg: &Message, out: &mut Vec<u8>) -> Result<(), TranslateError> {
        if self.done {
            return Ok(());
        }
        match msg.header(":message-type") {
            Some("event") => {}
            Some("exception") | Some("error") => {
                let payload: Value = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                let kind = msg
                    .header(":exception-type")
                    .or(msg.header(":error-code"))
                    .unwrap_or("exception");
                let message = payload["message"]
                    .as_str()
                    .or(payload["Message"].as_str())
                    .or(msg.header(":error-message"))
                    .unwrap_or("upstream stream error");
                let code = if kind.starts_with("throttling") {
                    "429"
                } else if kind.starts_with("validation") {
                    "400"
                } else {
                    "500"
                };
                let body = json!({"error": {"message": message, "type": kind, "code": code}});
                write_event(out, None, &body);
                self.done = true;
                return Ok(());
            }
            _ => return Ok(()),
        }
        let event: Value = serde_json::from_slice(&msg.payload)?;
        match msg.header(":event-type").unwrap_or_default() {
            "messageStart" => {
                self.chunk(out, json!({"role": "assistant", "content": ""}), None);
            }
            "contentBlockStart" => {
                if let Some(tool) = event["start"].get("toolUse") {
                    self.tool_index += 1;
                    let call = json!({
                        "index": self.tool_index,
                        "id": tool["toolUseId"],
                        "type": "function",
                        "function": {"name": tool["name"], "arguments": ""},
                    });
                    self.chunk(out, json!({"tool_calls": [call]}), None);
                }
            }
            "contentBlockDelta" => {
                let delta = &event["delta"];
                if let Some(t) = delta["text"].as_str() {
                    self.chunk(out, json!({ "content": t }), None);
                } else if let Some(args) = delta["toolUse"]["input"].as_str() {
                    if !args.is_empty() && self.tool_index >= 0 {
                        let call =
                            json!({"index": self.tool_index, "function": {"arguments": args}});
                        self.chunk(out, json!({"tool_calls": [call]}), None);
                    }
                } else if let Some(r) = delta["reasoningContent"]["text"].as_str() {
                    self.chunk(out, json!({ "reasoning_content": r }), None);
                }
            }
            "messageStop" => {
                let stop = event["stopReason"].as_str().unwrap_or("end_turn");
                self.finished = true;
                self.chunk(out, json!({}), Some(finish_reason(stop)));
            }
            "metadata" => {
                self.usage_json = Some(openai_usage(&event["usage"]));
                self.stop(out);
            }
            _ => {} // contentBlockStop and anything new
        }
        Ok(())
    }

    fn stop(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        self.done = true;
        if !self.finished {
            self.finished = true;
            self.chunk(out, json!({}), Some("stop"));
        }
        if self.include_usage {
            if let Some(usage) = self.usage_json.take() {
                let chunk = json!({
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": "",
                    "choices": [],
                    "usage": usage,
                });
                write_event(out, None, &chunk);
            }
        }
        out.extend_from_slice(DONE);
    }
}

impl From<FrameError> for TranslateError {
    fn from(e: FrameError) -> Self {
        TranslateError(e.to_string())
    }
}

impl StreamTranslator for ConverseToChat {
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), TranslateError> {
        let mut failed = None;
        let mut messages = Vec::new();
        self.decoder.feed(input, &mut |m| {
            messages.push(m);
            Ok(())
        })?;
        for m in messages {
            if let Err(e) = self.on_message(&m, out) {
                failed = Some(e);
                break;
            }
        }
        failed.map_or(Ok(()), Err)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError> {
        if self.decoder.has_partial() {
            return Err(TranslateError("event stream: truncated message".into()));
        }
        self.stop(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::eventstream::{encode, encode_event};

    fn sample() -> Vec<u8> {
        let events = [
            ("messageStart", json!({"role": "assistant"})),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "Hel"}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "lo"}}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
            (
                "contentBlockStart",
                json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "f"}}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"a\":"}}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "1}"}}}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 1})),
            ("messageStop", json!({"stopReason": "tool_use"})),
            (
                "metadata",
                json!({"usage": {"inputTokens": 4, "outputTokens": 6, "totalTokens": 10}, "metrics": {"latencyMs": 1}}),
            ),
        ];
        events
            .iter()
            .flat_map(|(t, p)| encode_event(t, p.to_string().as_bytes()))
            .collect()
    }

    fn chunks(out: &[u8]) -> Vec<Value> {
        String::from_utf8(out.to_vec())
            .unwrap()
            .split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn streams_translate_in_any_split() {
        let input = sample();
        let mut first: Option<Vec<Value>> = None;
        for split in (0..input.len()).step_by(7) {
            let mut t = ConverseToChat::new(true);
            let mut out = Vec::new();
            t.feed(&input[..split], &mut out).unwrap();
            t.feed(&input[split..], &mut out).unwrap();
            t.finish(&mut out).unwrap();
            assert!(out.ends_with(DONE));
            let mut got = chunks(&out);
            for c in &mut got {
                c["id"] = Value::Null;
                c["created"] = Value::Null;
            }
            match &first {
                None => first = Some(got),
                Some(f) => assert_eq!(f, &got, "split at {split}"),
            }
        }
        let got = first.unwrap();
        let text: String = got
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "Hello");
        let args: String = got
            .iter()
            .filter_map(|c| {
                c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
            })
            .collect();
        assert_eq!(args, "{\"a\":1}");
        assert!(got
            .iter()
            .any(|c| c["choices"][0]["finish_reason"] == "tool_calls"));
        assert_eq!(got.last().unwrap()["usage"]["total_tokens"], 10);
    }

    #[test]
    fn exceptions_and_truncation() {
        let mut input = encode_event("messageStart", br#"{"role":"assistant"}"#);
        input.extend(encode(
            &[
                (":message-type", "exception"),
                (":exception-type", "modelStreamErrorException"),
            ],
            br#"{"message":"model failed"}"#,
        ));
        let mut t = ConverseToChat::new(false);
        let mut out = Vec::new();
        t.feed(&input, &mut out).unwrap();
        t.finish(&mut out).unwrap();
        let got = chunks(&out);
        assert_eq!(got.last().unwrap()["error"]["message"], "model failed");
        assert_eq!(
            got.last().unwrap()["error"]["type"],
            "modelStreamErrorException"
        );
        let whole = sample();
        let mut t = ConverseToChat::new(false);
        t.feed(&whole[..whole.len() - 3], &mut Vec::new()).unwrap();
        assert!(t.finish(&mut Vec::new()).is_err());
        let mut bad = whole.clone();
        bad[20] ^= 1;
        assert!(ConverseToChat::new(false)
            .feed(&bad, &mut Vec::new())
            .is_err());
    }
}
