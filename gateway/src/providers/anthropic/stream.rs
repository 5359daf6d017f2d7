//! A Messages event stream → internal chat completion chunks, event by
//! event as LiteLLM translates it: `message_start` opens with the
//! assistant role, text and thinking deltas become `content` and
//! `reasoning_content`, each `tool_use` block one tool call whose
//! arguments stream as `input_json_delta` arrives, `message_delta` carries
//! the finish reason, `message_stop` the usage chunk (when the client asked
//! for it) and `[DONE]`. An `error` event becomes an error chunk.

use super::response::{finish_reason, openai_usage};
use crate::formats::{unix_now, write_event, EventTranslator, TranslateError, DONE};
use serde_json::{json, Map, Value};

/// Translates Messages events into chat completion chunks.
#[derive(Debug)]
pub struct MessagesToChat {
    include_usage: bool,
    id: Value,
    model: Value,
    created: u64,
    /// Usage so far: `message_start`'s, updated by `message_delta`'s.
    usage: Map<String, Value>,
    /// Type of the open content block.
    block: Option<String>,
    /// Whether the open tool block streamed any argument.
    block_args: bool,
    /// OpenAI index of the current tool call (-1: none yet).
    tool_index: i64,
    /// The stream answers through the forced `response_format` tool.
    json_answer: bool,
    done: bool,
    finished: bool,
}

impl MessagesToChat {
    /// A translator; `include_usage` adds the usage chunk at the end.
    pub fn new(include_usage: bool) -> Self {
        MessagesToChat {
            include_usage,
            id: Value::Null,
            model: Value::Null,
            created: unix_now(),
            usage: Map::new(),
            block: None,
            block_args: false,
            tool_index: -1,
            json_answer: false,
            done: false,
            finished: false,
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

    fn merge_usage(&mut self, usage: &Value) {
        if let Some(u) = usage.as_object() {
            for (k, v) in u {
                if !v.is_null() {
                    self.usage.insert(k.clone(), v.clone());
                }
            }
        }
    }

    fn on_event(&mut self, event: &Value, out: &mut Vec<u8>) {
        match event["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let message = &event["message"];
                self.id = message["id"].clone();
                self.model = message["model"].clone();
                self.merge_usage(&message["usage"]);
                self.chunk(out, json!({"role": "assistant", "content": ""}), None);
            }
            "content_block_start" => {
                let block = &event["content_block"];
                let kind = block["type"].as_str().unwrap_or_default();
                self.block = Some(kind.to_string());
                self.block_args = false;
                match kind {
                    "text" => {
                        if let Some(t) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            self.chunk(out, json!({"content": t}), None);
                        }
                    }
                    "tool_use" if block["name"] == super::request::JSON_TOOL => {
                        // Its arguments stream as the answer's content.
                        self.block = Some("json_answer".into());
                        self.json_answer = true;
                    }
                    "tool_use" => {
                        self.tool_index += 1;
                        let call = json!({
                            "index": self.tool_index,
                            "id": block["id"],
                            "type": "function",
                            "function": {"name": block["name"], "arguments": ""},
                        });
                        self.chunk(out, json!({"tool_calls": [call]}), None);
                    }
                    "redacted_thinking" => {
                        self.chunk(
                            out,
                            json!({"thinking_blocks": [{"type": "redacted_thinking", "data": block["data"]}]}),
                            None,
                        );
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = &event["delta"];
                match delta["type"].as_str().unwrap_or_default() {
                    "text_delta" => self.chunk(out, json!({"content": delta["text"]}), None),
                    "input_json_delta" if self.block.as_deref() == Some("json_answer") => {
                        self.chunk(out, json!({"content": delta["partial_json"]}), None);
                    }
                    "input_json_delta" if self.block.as_deref() == Some("tool_use") => {
                        let args = delta["partial_json"].as_str().unwrap_or_default();
                        if args.is_empty() {
                            return;
                        }
                        self.block_args = true;
                        let call =
                            json!({"index": self.tool_index, "function": {"arguments": args}});
                        self.chunk(out, json!({"tool_calls": [call]}), None);
                    }
                    "thinking_delta" => {
                        let text = &delta["thinking"];
                        self.chunk(
                            out,
                            json!({"reasoning_content": text, "thinking_blocks": [{"type": "thinking", "thinking": text}]}),
                            None,
                        );
                    }
                    "signature_delta" => {
                        self.chunk(
                            out,
                            json!({"thinking_blocks": [{"type": "thinking", "thinking": "", "signature": delta["signature"]}]}),
                            None,
                        );
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if self.block.as_deref() == Some("tool_use") && !self.block_args {
                    let call = json!({"index": self.tool_index, "function": {"arguments": "{}"}});
                    self.chunk(out, json!({"tool_calls": [call]}), None);
                }
                self.block = None;
            }
            "message_delta" => {
                self.merge_usage(&event["usage"]);
                let mut stop = event["delta"]["stop_reason"].as_str().unwrap_or("end_turn");
                if self.json_answer && self.tool_index < 0 {
                    stop = "end_turn";
                }
                let reason = finish_reason(stop);
                self.finished = true;
                self.chunk(out, json!({}), Some(reason));
            }
            "message_stop" => self.stop(out),
            "error" => {
                let error = &event["error"];
                let body = json!({"error": {
                    "message": error["message"].as_str().unwrap_or("upstream stream error"),
                    "type": error["type"],
                    "code": if error["type"] == "overloaded_error" { "529" } else { "500" },
                }});
                write_event(out, None, &body);
                self.done = true;
            }
            _ => {} // ping and anything new
        }
    }

    fn stop(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        self.done = true;
        if self.include_usage {
            let usage = openai_usage(&Value::Object(std::mem::take(&mut self.usage)));
            let chunk = json!({
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage,
            });
            write_event(out, None, &chunk);
        }
        out.extend_from_slice(DONE);
    }
}

impl EventTranslator for MessagesToChat {
    fn event(
        &mut self,
        _name: &[u8],
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), TranslateError> {
        if self.done {
            return Ok(());
        }
        let event: Value = serde_json::from_slice(data)?;
        self.on_event(&event, out);
        Ok(())
    }

    /// A stream cut before `message_stop` is closed only if its message
    /// was finished (`message_delta`); otherwise the client sees it end
    /// without `[DONE]`.
    fn end(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError> {
        if self.finished {
            self.stop(out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{Events, StreamTranslator};

    fn ev(name: &str, data: Value) -> String {
        format!("event: {name}\ndata: {data}\n\n")
    }

    fn stream() -> String {
        [
            ev("message_start", json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [], "stop_reason": null, "usage": {"input_tokens": 25, "output_tokens": 1, "cache_read_input_tokens": 5}}})),
            ev("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}})),
            ev("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}})),
            ev("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            ev("ping", json!({"type": "ping"})),
            ev("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})),
            ev("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}})),
            ev("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
            ev("content_block_start", json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}})),
            ev("content_block_delta", json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}})),
            ev("content_block_delta", json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "1}"}})),
            ev("content_block_stop", json!({"type": "content_block_stop", "index": 2})),
            ev("content_block_start", json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}}})),
            ev("content_block_stop", json!({"type": "content_block_stop", "index": 3})),
            ev("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 12}})),
            ev("message_stop", json!({"type": "message_stop"})),
        ]
        .concat()
    }

    fn chunks(out: &[u8]) -> Vec<Value> {
        String::from_utf8(out.to_vec())
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty() && *e != "data: [DONE]")
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    fn run(input: &[u8], include_usage: bool, split: usize) -> Vec<u8> {
        let mut t = Events::new(MessagesToChat::new(include_usage));
        let mut out = Vec::new();
        t.feed(&input[..split], &mut out).unwrap();
        t.feed(&input[split..], &mut out).unwrap();
        t.finish(&mut out).unwrap();
        out
    }

    #[test]
    fn translates_every_block_kind_and_the_usage_chunk() {
        let s = stream();
        let out = run(s.as_bytes(), true, 0);
        for split in [1, 50, s.len() / 2, s.len() - 1] {
            let again = run(s.as_bytes(), true, split);
            // `created` is the same second in practice; compare without it.
            let strip = |o: &[u8]| {
                chunks(o)
                    .into_iter()
                    .map(|mut c| {
                        c["created"] = json!(0);
                        c
                    })
                    .collect::<Vec<_>>()
            };
            assert_eq!(strip(&again), strip(&out), "split at {split}");
        }
        assert!(out.ends_with(b"data: [DONE]\n\n"));
        let c = chunks(&out);
        let deltas: Vec<&Value> = c.iter().map(|c| &c["choices"][0]["delta"]).collect();
        assert_eq!(c[0]["id"], "msg_1");
        assert_eq!(c[0]["object"], "chat.completion.chunk");
        assert_eq!(*deltas[0], json!({"role": "assistant", "content": ""}));
        assert_eq!(deltas[1]["reasoning_content"], "hmm");
        assert_eq!(*deltas[2], json!({"content": "Hi"}));
        assert_eq!(
            deltas[3]["tool_calls"][0],
            json!({"index": 0, "id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": ""}})
        );
        assert_eq!(
            deltas[4]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":"
        );
        assert_eq!(deltas[5]["tool_calls"][0]["function"]["arguments"], "1}");
        assert_eq!(deltas[6]["tool_calls"][0]["index"], 1);
        assert_eq!(
            deltas[7]["tool_calls"][0],
            json!({"index": 1, "function": {"arguments": "{}"}})
        );
        assert_eq!(c[8]["choices"][0]["finish_reason"], "tool_calls");
        let usage = &c[9]["usage"];
        assert_eq!(c[9]["choices"], json!([]));
        assert_eq!(
            (
                usage["prompt_tokens"].as_u64(),
                usage["completion_tokens"].as_u64()
            ),
            (Some(30), Some(12))
        );
        assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 5);
        let without = chunks(&run(s.as_bytes(), false, 0));
        assert!(without.iter().all(|c| c.get("usage").is_none()));
    }

    #[test]
    fn the_json_tool_streams_as_content() {
        let s = [
            ev("message_start", json!({"type": "message_start", "message": {"id": "m", "model": "c", "usage": {"input_tokens": 1}}})),
            ev("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "json_tool_call", "input": {}}})),
            ev("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}})),
            ev("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "1}"}})),
            ev("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            ev("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}})),
            ev("message_stop", json!({"type": "message_stop"})),
        ]
        .concat();
        let c = chunks(&run(s.as_bytes(), false, 0));
        let text: String = c
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "{\"a\":1}");
        assert!(c
            .iter()
            .all(|c| c["choices"][0]["delta"].get("tool_calls").is_none()));
        assert_eq!(c.last().unwrap()["choices"][0]["finish_reason"], "stop");
    }

    #[test]
    fn errors_and_cut_streams() {
        let err = ev(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        );
        let out = run(err.as_bytes(), true, 0);
        let c = chunks(&out);
        assert_eq!(c[0]["error"]["message"], "Overloaded");
        assert_eq!(c[0]["error"]["code"], "529");
        assert!(!out.ends_with(DONE));
        let s = stream();
        let cut = &s[..s.find("event: message_delta").unwrap()];
        assert!(!run(cut.as_bytes(), true, 0).ends_with(DONE));
        let mut t = Events::new(MessagesToChat::new(false));
        assert!(t.feed(b"data: {oops\n\n", &mut Vec::new()).is_err());
    }
}
