//! Internal chat completion chunks → Responses stream events:
//! `response.created` and `response.in_progress` first; the text as a
//! `message` item (`response.output_item.added`,
//! `response.content_part.added`, `response.output_text.delta`...), each
//! tool call a `function_call` item with `response.function_call_arguments.delta`;
//! at the end every open item is closed (`….done`) and
//! `response.completed` carries the whole response with its usage. An
//! error chunk becomes an `error` event.

use super::response::{call_item, message_item, response, usage};
use super::tools::CallNames;
use crate::formats::{write_event, EventTranslator, TranslateError};
use serde_json::{json, Value};

/// One function call being streamed.
struct Call {
    output_index: usize,
    id: String,
    call_id: Value,
    name: Value,
    args: String,
}

/// Translates chat completion chunks into Responses events.
pub struct ChatToResponses {
    id: String,
    model: Value,
    seq: u64,
    started: bool,
    /// The message item: output index and text so far.
    message: Option<(usize, String)>,
    calls: Vec<Call>,
    items: usize,
    finish: Option<String>,
    usage: Value,
    done: bool,
    /// The request's custom and namespaced tools, which shape call items.
    names: CallNames,
}

impl Default for ChatToResponses {
    fn default() -> Self {
        Self::new(CallNames::default())
    }
}

impl ChatToResponses {
    /// A translator for a request whose tools are `names`.
    pub fn new(names: CallNames) -> Self {
        ChatToResponses {
            id: String::new(),
            model: Value::Null,
            seq: 0,
            started: false,
            message: None,
            calls: Vec::new(),
            items: 0,
            finish: None,
            usage: Value::Null,
            done: false,
            names,
        }
    }

    /// A call item shaped for the tool it calls (see [`CallNames::shape`]).
    fn call(&self, c: &Call, args: &str, status: &str) -> Value {
        let mut item = call_item(&c.id, &c.call_id, &c.name, args, status);
        self.names.shape(&mut item);
        item
    }

    fn emit(&mut self, out: &mut Vec<u8>, kind: &str, mut body: Value) {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.seq);
        self.seq += 1;
        write_event(out, Some(kind), &body);
    }

    fn snapshot(&self, status: &str) -> Value {
        let mut output = Vec::new();
        let item_status = if status == "in_progress" {
            "in_progress"
        } else {
            "completed"
        };
        let mut items: Vec<(usize, Value)> = Vec::new();
        if let Some((i, text)) = &self.message {
            items.push((*i, message_item(&self.msg_id(), text, item_status)));
        }
        for c in &self.calls {
            items.push((c.output_index, self.call(c, &c.args, item_status)));
        }
        items.sort_by_key(|(i, _)| *i);
        output.extend(items.into_iter().map(|(_, v)| v));
        let usage = if self.usage.is_null() {
            Value::Null
        } else {
            usage(&self.usage)
        };
        response(&self.id, &self.model, status, Value::Array(output), usage)
    }

    fn msg_id(&self) -> String {
        format!("msg_{}", self.id.trim_start_matches("resp_"))
    }

    fn start(&mut self, chunk: &Value, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        self.id = format!("resp_{}", chunk["id"].as_str().unwrap_or("gateway"));
        self.model = chunk["model"].clone();
        let snapshot = self.snapshot("in_progress");
        self.emit(out, "response.created", json!({ "response": snapshot }));
        let snapshot = self.snapshot("in_progress");
        self.emit(out, "response.in_progress", json!({ "response": snapshot }));
    }

    fn text(&mut self, delta: &str, out: &mut Vec<u8>) {
        if self.message.is_none() {
            let index = self.items;
            self.items += 1;
            self.message = Some((index, String::new()));
            let item = message_item(&self.msg_id(), "", "in_progress");
            let mut item = item;
            item["content"] = json!([]);
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": index, "item": item}),
            );
            self.emit(
                out,
                "response.content_part.added",
                json!({"item_id": self.msg_id(), "output_index": index, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": []}}),
            );
        }
        let Some((index, text)) = self.message.as_mut() else {
            return;
        };
        text.push_str(delta);
        let index = *index;
        self.emit(
            out,
            "response.output_text.delta",
            json!({"item_id": self.msg_id(), "output_index": index, "content_index": 0, "delta": delta}),
        );
    }

    fn tool_call(&mut self, call: &Value, out: &mut Vec<u8>) {
        let index = call["index"].as_u64().unwrap_or(0) as usize;
        if call.get("id").is_some_and(|id| !id.is_null()) || index >= self.calls.len() {
            let output_index = self.items;
            self.items += 1;
            let c = Call {
                output_index,
                id: format!(
                    "fc_{}_{}",
                    self.id.trim_start_matches("resp_"),
                    self.calls.len()
                ),
                call_id: call["id"].clone(),
                name: call["function"]["name"].clone(),
                args: String::new(),
            };
            let item = self.call(&c, "", "in_progress");
            self.calls.push(c);
            self.emit(
                out,
                "response.output_item.added",
                json!({"output_index": output_index, "item": item}),
            );
        }
        let Some(args) = call["function"]["arguments"]
            .as_str()
            .filter(|a| !a.is_empty())
        else {
            return;
        };
        let Some(c) = self.calls.last_mut() else {
            return;
        };
        c.args.push_str(args);
        let (id, output_index) = (c.id.clone(), c.output_index);
        // A custom tool's input is whole in its item's `done` event.
        if c.name.as_str().is_some_and(|n| self.names.is_custom(n)) {
            return;
        }
        self.emit(
            out,
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": output_index, "delta": args}),
        );
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        self.done = true;
        if !self.started {
            self.start(&Value::Null, out);
        }
        if let Some((index, text)) = self.message.clone() {
            let id = self.msg_id();
            self.emit(
                out,
                "response.output_text.done",
                json!({"item_id": id, "output_index": index, "content_index": 0, "text": text}),
            );
            self.emit(
                out,
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "part": {"type": "output_text", "text": text, "annotations": []}}),
            );
            let item = message_item(&id, &text, "completed");
            self.emit(
                out,
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            );
        }
        let calls: Vec<(String, usize, Value)> = self
            .calls
            .iter()
            .map(|c| {
                (
                    c.args.clone(),
                    c.output_index,
                    self.call(c, &c.args, "completed"),
                )
            })
            .collect();
        for (args, index, item) in calls {
            if item["type"] == "function_call" {
                self.emit(
                    out,
                    "response.function_call_arguments.done",
                    json!({"item_id": item["id"], "output_index": index, "arguments": args}),
                );
            }
            self.emit(
                out,
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            );
        }
        let status = if self.finish.as_deref() == Some("length") {
            "incomplete"
        } else {
            "completed"
        };
        let snapshot = self.snapshot(status);
        let kind = if status == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.emit(out, kind, json!({ "response": snapshot }));
    }
}

impl EventTranslator for ChatToResponses {
    fn event(
        &mut self,
        _name: &[u8],
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), TranslateError> {
        if self.done {
            return Ok(());
        }
        if data == b"[DONE]" {
            self.close(out);
            return Ok(());
        }
        let chunk: Value = serde_json::from_slice(data)?;
        if let Some(err) = chunk.get("error") {
            let body = json!({
                "code": err["code"],
                "message": err["message"].as_str().unwrap_or("upstream stream error"),
                "param": err.get("param").cloned().unwrap_or(Value::Null),
            });
            self.emit(out, "error", body);
            self.done = true;
            return Ok(());
        }
        self.start(&chunk, out);
        if let Some(u) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = u.clone();
        }
        let choice = &chunk["choices"][0];
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            self.text(t, out);
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            self.tool_call(call, out);
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            self.finish = Some(f.to_string());
        }
        Ok(())
    }

    fn end(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError> {
        self.close(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{Events, StreamTranslator};

    fn run(input: &str) -> Vec<(String, Value)> {
        run_for(input, CallNames::default())
    }

    fn run_for(input: &str, names: CallNames) -> Vec<(String, Value)> {
        let mut t = Events::new(ChatToResponses::new(names));
        let mut out = Vec::new();
        t.feed(input.as_bytes(), &mut out).unwrap();
        t.finish(&mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let data: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                (name.strip_prefix("event: ").unwrap().to_string(), data)
            })
            .collect()
    }

    #[test]
    fn text_and_tool_calls_stream_as_response_events() {
        let input = concat!(
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
            "data: [DONE]\n\n",
        );
        let evs = run(input);
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, (name, data)) in evs.iter().enumerate() {
            assert_eq!(data["type"], name.as_str());
            assert_eq!(data["sequence_number"], i as u64);
        }
        let done = &evs.last().unwrap().1["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][0]["content"][0]["text"], "Hello");
        assert_eq!(done["output"][1]["arguments"], "{}");
        assert_eq!(done["usage"]["input_tokens"], 3);
    }

    #[test]
    fn errors_and_cut_streams_end_cleanly() {
        let evs = run("data: {\"error\":{\"message\":\"boom\",\"code\":\"500\"}}\n\n");
        assert_eq!(evs.last().unwrap().0, "error");
        assert_eq!(evs.last().unwrap().1["message"], "boom");
        let evs = run("data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"length\"}]}\n\n");
        assert_eq!(evs.last().unwrap().0, "response.incomplete");
    }

    /// Calls to a custom tool and to a namespace member stream back in
    /// their own shapes: a custom call's input whole in its `done` item
    /// (no argument deltas), a member's call with its namespace.
    #[test]
    fn custom_and_namespaced_calls_stream_in_their_own_shapes() {
        let tools = serde_json::json!({"tools": [
            {"type": "custom", "name": "apply_patch"},
            {"type": "namespace", "name": "agents", "tools": [{"type": "function", "name": "spawn"}]},
        ]});
        let names = CallNames::of(tools.to_string().as_bytes());
        let input = concat!(
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"apply_patch\",\"arguments\":\"{\\\"content\\\":\\\"patch\\\"}\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"agents__spawn\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let evs = run_for(input, names);
        let deltas: Vec<&Value> = evs
            .iter()
            .filter(|(n, _)| n == "response.function_call_arguments.delta")
            .map(|(_, d)| d)
            .collect();
        assert_eq!(deltas.len(), 1, "only the function call's: {deltas:?}");
        let done: Vec<&Value> = evs
            .iter()
            .filter(|(n, _)| n == "response.output_item.done")
            .map(|(_, d)| &d["item"])
            .collect();
        assert_eq!(done[0]["type"], "custom_tool_call");
        assert_eq!(done[0]["input"], "patch");
        assert_eq!(done[1]["type"], "function_call");
        assert_eq!(done[1]["name"], "spawn");
        assert_eq!(done[1]["namespace"], "agents");
        let completed = &evs.last().unwrap().1["response"]["output"];
        assert_eq!(completed[0]["type"], "custom_tool_call");
        assert_eq!(completed[1]["namespace"], "agents");
    }
}
