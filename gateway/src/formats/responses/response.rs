//! An internal chat completion → a Response object: the message's text as
//! an `output_text` part of a `message` item, each tool call a
//! `function_call` item, usage as `input_tokens`/`output_tokens`; a
//! `length` finish makes the response `incomplete`.

use super::tools::CallNames;
use crate::formats::{unix_now, TranslateError};
use serde_json::{json, Value};

/// The Responses usage object for a chat `usage`.
pub(super) fn usage(u: &Value) -> Value {
    let input = u["prompt_tokens"].as_u64().unwrap_or(0);
    let output = u["completion_tokens"].as_u64().unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": u["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0)},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": u["completion_tokens_details"]["reasoning_tokens"].as_u64().unwrap_or(0)},
        "total_tokens": input.saturating_add(output),
    })
}

/// A Response object with `status`, `output` and `usage`.
pub(super) fn response(
    id: &str,
    model: &Value,
    status: &str,
    output: Value,
    usage: Value,
) -> Value {
    let incomplete = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
    json!({
        "id": id,
        "object": "response",
        "created_at": unix_now(),
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "instructions": null,
        "max_output_tokens": null,
        "model": model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": false,
        "temperature": null,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": null,
        "truncation": "disabled",
        "usage": usage,
        "user": null,
        "metadata": {},
    })
}

/// A `message` output item holding `text`.
pub(super) fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

/// A `function_call` output item.
pub(super) fn call_item(
    id: &str,
    call_id: &Value,
    name: &Value,
    args: &str,
    status: &str,
) -> Value {
    json!({
        "type": "function_call",
        "id": id,
        "call_id": call_id,
        "name": name,
        "arguments": args,
        "status": status,
    })
}

/// The Response for the chat completion `body`, answering a request whose
/// tools are `names`.
pub fn from_chat(body: &[u8], names: &CallNames) -> Result<Vec<u8>, TranslateError> {
    let chat: Value = serde_json::from_slice(body)?;
    let choice = &chat["choices"][0];
    let message = &choice["message"];
    let chat_id = chat["id"].as_str().unwrap_or("gateway");
    let mut output = Vec::new();
    if let Some(r) = message["reasoning_content"]
        .as_str()
        .filter(|r| !r.is_empty())
    {
        output.push(json!({
            "type": "reasoning", "id": format!("rs_{chat_id}"),
            "summary": [{"type": "summary_text", "text": r}],
        }));
    }
    let text = message["content"].as_str().unwrap_or_default();
    let calls = message["tool_calls"].as_array();
    if !text.is_empty() || calls.is_none_or(|c| c.is_empty()) {
        output.push(message_item(&format!("msg_{chat_id}"), text, "completed"));
    }
    for (i, call) in calls.into_iter().flatten().enumerate() {
        let mut item = call_item(
            &format!("fc_{chat_id}_{i}"),
            &call["id"],
            &call["function"]["name"],
            call["function"]["arguments"].as_str().unwrap_or("{}"),
            "completed",
        );
        names.shape(&mut item);
        output.push(item);
    }
    let status = if choice["finish_reason"] == "length" {
        "incomplete"
    } else {
        "completed"
    };
    let out = response(
        &format!("resp_{chat_id}"),
        &chat["model"],
        status,
        Value::Array(output),
        usage(&chat["usage"]),
    );
    Ok(serde_json::to_vec(&out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_completions_become_responses() {
        let chat = json!({
            "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "hi",
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 3}},
        });
        let r: Value = serde_json::from_slice(
            &from_chat(chat.to_string().as_bytes(), &CallNames::default()).unwrap(),
        )
        .unwrap();
        assert_eq!(r["object"], "response");
        assert_eq!(r["status"], "completed");
        assert_eq!(r["output"][0]["content"][0]["text"], "hi");
        assert_eq!(r["output"][1]["type"], "function_call");
        assert_eq!(r["output"][1]["call_id"], "call_1");
        assert_eq!(r["output"][1]["arguments"], "{\"a\":1}");
        assert_eq!(r["usage"]["input_tokens"], 5);
        assert_eq!(r["usage"]["output_tokens"], 2);
        assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 3);
        let cut = json!({"id": "c", "model": "m", "choices": [{"finish_reason": "length", "message": {"content": "x"}}]});
        let r: Value = serde_json::from_slice(
            &from_chat(cut.to_string().as_bytes(), &CallNames::default()).unwrap(),
        )
        .unwrap();
        assert_eq!(r["status"], "incomplete");
        assert!(from_chat(b"nope", &CallNames::default()).is_err());
    }
}
