//! Cohere's v2 chat stream → chat completion chunks.
//!
//! Cohere streams server-sent events named by their `type` (also the
//! `event:` line): `message-start` (the id), `content-start` /
//! `content-delta` / `content-end` (text in
//! `delta.message.content.text`, a reasoning model's in `.thinking`),
//! `tool-plan-delta`, `tool-call-start` (id and name) / `tool-call-delta`
//! (argument pieces) / `tool-call-end`, `citation-start` /
//! `citation-end`, and `message-end` (`delta.finish_reason`,
//! `delta.usage`, or `delta.error` when generation failed). Text and tool
//! calls become chunks as they come; `message-end` the finish chunk, the
//! usage chunk when asked for, and `data: [DONE]`. Tool plans and
//! citations have no chat form and are skipped.

use super::response::{chat_id, finish_reason};
use super::usage;
use crate::formats::{unix_now, write_event, EventTranslator, TranslateError, DONE};
use serde_json::{json, Value};

/// Translates Cohere's chat stream into chat completion chunks.
pub struct CohereToChat {
    include_usage: bool,
    id: Option<String>,
    created: u64,
    /// The next tool call's index; a call's own is one less.
    calls: u64,
    done: bool,
}

impl CohereToChat {
    /// A translator; `include_usage` adds the usage chunk at the end.
    pub fn new(include_usage: bool) -> Self {
        CohereToChat {
            include_usage,
            id: None,
            created: unix_now(),
            calls: 0,
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

    fn start(&mut self, id: Option<&str>, out: &mut Vec<u8>) {
        if self.id.is_none() {
            self.id = Some(chat_id(id));
            self.chunk(out, json!({"role": "assistant", "content": ""}), None);
        }
    }

    fn finish_message(&mut self, delta: &Value, out: &mut Vec<u8>) {
        self.done = true;
        if let Some(error) = delta["error"].as_str().filter(|e| !e.is_empty()) {
            let body = json!({"error": {"message": error, "type": "api_error", "code": "500"}});
            write_event(out, None, &body);
            return;
        }
        let reason = finish_reason(delta["finish_reason"].as_str().unwrap_or("COMPLETE"));
        self.chunk(out, json!({}), Some(reason));
        if self.include_usage {
            if let Some(used) = delta.get("usage").and_then(usage::of_chat) {
                let chunk = json!({
                    "id": self.id,
                    "object": "chat.completion.chunk",
                    "created": self.created,
                    "model": "",
                    "choices": [],
                    "usage": usage::openai(used),
                });
                write_event(out, None, &chunk);
            }
        }
        out.extend_from_slice(DONE);
    }
}

impl EventTranslator for CohereToChat {
    fn event(&mut self, name: &[u8], data: &[u8], out: &mut Vec<u8>) -> Result<(), TranslateError> {
        if self.done || data.is_empty() {
            return Ok(());
        }
        let ev: Value = serde_json::from_slice(data)?;
        let kind = match ev["type"].as_str() {
            Some(kind) => kind,
            None => std::str::from_utf8(name).unwrap_or(""),
        };
        if kind == "message-start" {
            self.start(ev["id"].as_str(), out);
            return Ok(());
        }
        self.start(None, out);
        let message = &ev["delta"]["message"];
        match kind {
            "content-start" | "content-delta" => {
                let content = &message["content"];
                if let Some(t) = content["thinking"].as_str().filter(|t| !t.is_empty()) {
                    self.chunk(out, json!({ "reasoning_content": t }), None);
                }
                if let Some(t) = content["text"].as_str().filter(|t| !t.is_empty()) {
                    self.chunk(out, json!({ "content": t }), None);
                }
            }
            "tool-call-start" => {
                let call = &message["tool_calls"];
                let delta = json!({"tool_calls": [{
                    "index": self.calls,
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"].as_str().unwrap_or(""),
                    },
                }]});
                self.calls += 1;
                self.chunk(out, delta, None);
            }
            "tool-call-delta" => {
                let args = message["tool_calls"]["function"]["arguments"]
                    .as_str()
                    .unwrap_or("");
                if !args.is_empty() {
                    let index = self.calls.saturating_sub(1);
                    let delta =
                        json!({"tool_calls": [{"index": index, "function": {"arguments": args}}]});
                    self.chunk(out, delta, None);
                }
            }
            "message-end" => self.finish_message(&ev["delta"], out),
            _ => {}
        }
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        let message = "Cohere stream ended without message-end";
        if self.id.is_none() {
            return Err(TranslateError(message.into()));
        }
        // What arrived was relayed; the client learns the rest is missing.
        let body = json!({"error": {"message": message, "type": "api_error", "code": "502"}});
        write_event(out, None, &body);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{Events, StreamTranslator};

    const STREAM: &str = concat!(
        "event: message-start\ndata: {\"id\":\"s1\",\"type\":\"message-start\",\"delta\":{\"message\":{\"role\":\"assistant\",\"content\":[],\"tool_plan\":\"\",\"tool_calls\":[],\"citations\":[]}}}\n\n",
        "event: content-start\ndata: {\"type\":\"content-start\",\"index\":0,\"delta\":{\"message\":{\"content\":{\"type\":\"text\",\"text\":\"\"}}}}\n\n",
        "event: content-delta\ndata: {\"type\":\"content-delta\",\"index\":0,\"delta\":{\"message\":{\"content\":{\"text\":\"Hel\"}}}}\n\n",
        "event: content-delta\ndata: {\"type\":\"content-delta\",\"index\":0,\"delta\":{\"message\":{\"content\":{\"text\":\"lo\"}}}}\n\n",
        "event: content-end\ndata: {\"type\":\"content-end\",\"index\":0}\n\n",
        "event: tool-call-start\ndata: {\"type\":\"tool-call-start\",\"index\":0,\"delta\":{\"message\":{\"tool_calls\":{\"id\":\"f_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}}}}\n\n",
        "event: tool-call-delta\ndata: {\"type\":\"tool-call-delta\",\"index\":0,\"delta\":{\"message\":{\"tool_calls\":{\"function\":{\"arguments\":\"{\\\"a\\\":\"}}}}}\n\n",
        "event: tool-call-delta\ndata: {\"type\":\"tool-call-delta\",\"index\":0,\"delta\":{\"message\":{\"tool_calls\":{\"function\":{\"arguments\":\"1}\"}}}}}\n\n",
        "event: tool-call-end\ndata: {\"type\":\"tool-call-end\",\"index\":0}\n\n",
        "event: message-end\ndata: {\"type\":\"message-end\",\"delta\":{\"finish_reason\":\"TOOL_CALL\",\"usage\":{\"billed_units\":{\"input_tokens\":4,\"output_tokens\":6},\"tokens\":{\"input_tokens\":50,\"output_tokens\":6}}}}\n\n",
    );

    fn chunks(out: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(out).unwrap();
        text.split("\n\n")
            .filter_map(|e| e.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap_or(Value::String(d.into())))
            .collect()
    }

    #[test]
    fn streams_translate_in_any_split() {
        for split in [1, 7, 64, STREAM.len()] {
            let mut t = Events::new(CohereToChat::new(true));
            let mut out = Vec::new();
            for piece in STREAM.as_bytes().chunks(split) {
                t.feed(piece, &mut out).unwrap();
            }
            t.finish(&mut out).unwrap();
            let evs = chunks(&out);
            assert_eq!(evs[0]["id"], "chatcmpl-s1");
            assert_eq!(evs[0]["choices"][0]["delta"]["role"], "assistant");
            let text: String = evs
                .iter()
                .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
                .collect();
            assert_eq!(text, "Hello");
            let args: String = evs
                .iter()
                .filter_map(|e| {
                    e["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
                })
                .collect();
            assert_eq!(args, "{\"a\":1}");
            let n = evs.len();
            assert_eq!(evs[n - 3]["choices"][0]["finish_reason"], "tool_calls");
            assert_eq!(evs[n - 2]["usage"]["prompt_tokens"], 4);
            assert_eq!(evs[n - 1], json!("[DONE]"));
        }
    }

    #[test]
    fn errors_and_cut_streams_are_reported() {
        let mut t = Events::new(CohereToChat::new(false));
        let mut out = Vec::new();
        t.feed(b"event: message-end\ndata: {\"type\":\"message-end\",\"delta\":{\"finish_reason\":\"ERROR\",\"error\":\"model overloaded\"}}\n\n", &mut out).unwrap();
        t.finish(&mut out).unwrap();
        let evs = chunks(&out);
        assert_eq!(evs.last().unwrap()["error"]["message"], "model overloaded");
        let mut t = Events::new(CohereToChat::new(false));
        let mut out = Vec::new();
        assert!(t.finish(&mut out).is_err(), "an empty stream is an error");
        let mut t = Events::new(CohereToChat::new(false));
        let mut out = Vec::new();
        let cut = STREAM.find("event: content-end").unwrap();
        t.feed(&STREAM.as_bytes()[..cut], &mut out).unwrap();
        t.finish(&mut out).unwrap();
        assert!(chunks(&out).last().unwrap()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("without message-end"));
    }
}
