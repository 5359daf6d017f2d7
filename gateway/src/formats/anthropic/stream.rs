//! An internal chat completions stream → a Messages event stream.
//!
//! The first chunk opens the message (`message_start`); content, reasoning
//! and each tool call open their own content block, closed when another
//! kind begins; the end of the stream (`[DONE]`) closes the last block and
//! sends `message_delta` (stop reason and the usage chunk's counts) and
//! `message_stop`. Only choice 0 is translated: Messages has no `n`.

use super::response::{stop_reason, usage};
use crate::formats::{write_event, EventTranslator, TranslateError};
use serde_json::{json, Value};

/// The open content block.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Block {
    Text,
    Thinking,
    /// A tool call, by its OpenAI `index`.
    Tool(u64),
}

/// Translates chat completion chunks into Messages events.
#[derive(Debug, Default)]
pub struct ChatToMessages {
    started: bool,
    stopped: bool,
    /// The open block and its Anthropic index.
    block: Option<(Block, u64)>,
    next_index: u64,
    stop: Option<&'static str>,
    usage: Option<Value>,
}

impl ChatToMessages {
    /// A translator for a new stream.
    pub fn new() -> Self {
        Self::default()
    }

    fn start(&mut self, chunk: &Value, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let message = json!({
            "id": chunk.get("id").cloned().unwrap_or_else(|| json!("msg_gateway")),
            "type": "message",
            "role": "assistant",
            "model": chunk.get("model").cloned().unwrap_or_else(|| json!("")),
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        });
        write_event(
            out,
            Some("message_start"),
            &json!({"type": "message_start", "message": message}),
        );
    }

    /// Closes the open block, if any.
    fn close_block(&mut self, out: &mut Vec<u8>) {
        if let Some((_, index)) = self.block.take() {
            write_event(
                out,
                Some("content_block_stop"),
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    /// Makes `kind` the open block (opening it with `start`); returns its
    /// index.
    fn open(&mut self, kind: Block, start: Value, out: &mut Vec<u8>) -> u64 {
        if let Some((open, index)) = self.block {
            if open == kind {
                return index;
            }
        }
        self.close_block(out);
        let index = self.next_index;
        self.next_index += 1;
        self.block = Some((kind, index));
        write_event(
            out,
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        );
        index
    }

    fn delta(out: &mut Vec<u8>, index: u64, delta: Value) {
        write_event(
            out,
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        );
    }

    fn on_chunk(&mut self, chunk: &Value, out: &mut Vec<u8>) {
        if let Some(error) = chunk.get("error") {
            let message = error["message"].as_str().unwrap_or("upstream stream error");
            write_event(
                out,
                Some("error"),
                &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
            );
            return;
        }
        self.start(chunk, out);
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        let Some(choice) = chunk["choices"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["index"].as_u64().unwrap_or(0) == 0))
        else {
            return;
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["reasoning_content"]
            .as_str()
            .filter(|t| !t.is_empty())
        {
            let start = json!({"type": "thinking", "thinking": "", "signature": ""});
            let index = self.open(Block::Thinking, start, out);
            Self::delta(
                out,
                index,
                json!({"type": "thinking_delta", "thinking": text}),
            );
        }
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            let index = self.open(Block::Text, json!({"type": "text", "text": ""}), out);
            Self::delta(out, index, json!({"type": "text_delta", "text": text}));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let tool = Block::Tool(call["index"].as_u64().unwrap_or(0));
            let is_new = call.get("id").is_some_and(|id| !id.is_null());
            if is_new && self.block.is_some_and(|(b, _)| b == tool) {
                self.close_block(out);
            }
            let start = json!({
                "type": "tool_use",
                "id": call.get("id").cloned().unwrap_or_else(|| json!("")),
                "name": call["function"].get("name").cloned().unwrap_or_else(|| json!("")),
                "input": {},
            });
            let index = self.open(tool, start, out);
            if let Some(args) = call["function"]["arguments"]
                .as_str()
                .filter(|a| !a.is_empty())
            {
                Self::delta(
                    out,
                    index,
                    json!({"type": "input_json_delta", "partial_json": args}),
                );
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.stop = Some(stop_reason(reason));
        }
    }

    /// Closes the message: the open block, `message_delta`, `message_stop`.
    fn stop(&mut self, out: &mut Vec<u8>) {
        if self.stopped {
            return;
        }
        self.start(&Value::Null, out);
        self.close_block(out);
        self.stopped = true;
        let usage = usage(self.usage.as_ref().unwrap_or(&Value::Null));
        write_event(
            out,
            Some("message_delta"),
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": self.stop.unwrap_or("end_turn"), "stop_sequence": null},
                "usage": usage,
            }),
        );
        write_event(out, Some("message_stop"), &json!({"type": "message_stop"}));
    }
}

impl EventTranslator for ChatToMessages {
    fn event(
        &mut self,
        _name: &[u8],
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), TranslateError> {
        if data == b"[DONE]" {
            self.stop(out);
            return Ok(());
        }
        let chunk: Value = serde_json::from_slice(data)?;
        self.on_chunk(&chunk, out);
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError> {
        self.stop(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{Events, StreamTranslator};

    /// The events of `out`: (name, data).
    fn parse(out: &[u8]) -> Vec<(String, Value)> {
        String::from_utf8(out.to_vec())
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let name = name.strip_prefix("event: ").unwrap().to_string();
                let data: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(data["type"], name.as_str());
                (name, data)
            })
            .collect()
    }

    fn chunk(delta: Value, finish: Value) -> String {
        format!(
            "data: {}\n\n",
            json!({"id": "c1", "model": "gpt", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    }

    #[test]
    fn text_then_tool_calls_then_usage() {
        let stream = [
            chunk(json!({"role": "assistant", "content": ""}), Value::Null),
            chunk(json!({"content": "Hel"}), Value::Null),
            chunk(json!({"content": "lo"}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}), Value::Null),
            chunk(json!({"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "g", "arguments": "{}"}}]}), Value::Null),
            chunk(json!({}), json!("tool_calls")),
            format!("data: {}\n\n", json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}})),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        let bytes = stream.as_bytes();
        let mut whole = Vec::new();
        for split in [0, 1, 17, bytes.len() / 2, bytes.len()] {
            let mut t = Events::new(ChatToMessages::new());
            let mut out = Vec::new();
            t.feed(&bytes[..split], &mut out).unwrap();
            t.feed(&bytes[split..], &mut out).unwrap();
            t.finish(&mut out).unwrap();
            if split == 0 {
                whole = out;
            } else {
                assert_eq!(out, whole, "split at {split}");
            }
        }
        let events = parse(&whole);
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[0].1["message"]["id"], "c1");
        assert_eq!(
            events[3].1["delta"],
            json!({"type": "text_delta", "text": "lo"})
        );
        assert_eq!(
            events[5].1["content_block"],
            json!({"type": "tool_use", "id": "call_1", "name": "f", "input": {}})
        );
        assert_eq!(
            events[7].1["delta"],
            json!({"type": "input_json_delta", "partial_json": "1}"})
        );
        assert_eq!(events[9].1["index"], 2);
        assert_eq!(
            events[12].1,
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"input_tokens": 9, "output_tokens": 4}})
        );
    }

    #[test]
    fn an_empty_or_cut_stream_still_closes_the_message() {
        let mut t = Events::new(ChatToMessages::new());
        let mut out = Vec::new();
        t.finish(&mut out).unwrap();
        let names: Vec<String> = parse(&out).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["message_start", "message_delta", "message_stop"]);
        let mut t = Events::new(ChatToMessages::new());
        let mut out = Vec::new();
        t.feed(b"data: {\"error\":{\"message\":\"boom\"}}\n\n", &mut out)
            .unwrap();
        assert_eq!(parse(&out)[0].1["error"]["message"], "boom");
        assert!(t.feed(b"data: nope\n\n", &mut out).is_err());
    }
}
