//! The text parts of request and answer bodies, visited in place: what a
//! guardrail reads and may rewrite. Images, audio and ids are left alone.

use crate::error::GatewayError;
use serde_json::Value;

/// Visits a text; may replace it.
pub type Visit<'a> = dyn FnMut(&mut String) -> Result<(), GatewayError> + 'a;

/// The request members that hold text: chat and Messages `messages`
/// (string content, text parts, tool-call arguments, tool results),
/// Messages `system`, Responses `input` and `instructions`, embeddings
/// `input`, completions `prompt`.
const REQUEST_TEXT: &[&str] = &["messages", "system", "input", "prompt", "instructions"];

/// Every text of a request body.
pub fn request(body: &mut Value, visit: &mut Visit<'_>) -> Result<(), GatewayError> {
    let Some(obj) = body.as_object_mut() else {
        return Ok(());
    };
    for key in REQUEST_TEXT {
        if let Some(v) = obj.get_mut(*key) {
            content(v, visit)?;
        }
    }
    Ok(())
}

/// Every text of a whole answer: chat `choices[].message` (content and
/// tool-call arguments), completions `choices[].text`, Messages `content`,
/// Responses `output`.
pub fn answer(body: &mut Value, visit: &mut Visit<'_>) -> Result<(), GatewayError> {
    let Some(obj) = body.as_object_mut() else {
        return Ok(());
    };
    if let Some(Value::Array(choices)) = obj.get_mut("choices") {
        for choice in choices {
            if let Some(Value::String(s)) = choice.get_mut("text") {
                visit(s)?;
            }
            if let Some(message) = choice.get_mut("message") {
                content(message, visit)?;
            }
        }
    }
    for key in ["content", "output"] {
        if let Some(v) = obj.get_mut(key) {
            content(v, visit)?;
        }
    }
    Ok(())
}

/// A content value: a string, a list of strings or parts, or a part (its
/// `text`, its nested `content`, its tool calls' `arguments`).
fn content(v: &mut Value, visit: &mut Visit<'_>) -> Result<(), GatewayError> {
    match v {
        Value::String(s) => visit(s),
        Value::Array(items) => items.iter_mut().try_for_each(|item| content(item, visit)),
        Value::Object(part) => {
            if let Some(Value::String(s)) = part.get_mut("text") {
                visit(s)?;
            }
            // A Responses `function_call` item.
            if let Some(Value::String(s)) = part.get_mut("arguments") {
                visit(s)?;
            }
            if let Some(Value::Array(calls)) = part.get_mut("tool_calls") {
                for call in calls {
                    if let Some(Value::String(s)) = call.pointer_mut("/function/arguments") {
                        visit(s)?;
                    }
                }
            }
            match part.get_mut("content") {
                Some(inner) => content(inner, visit),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(body: &str, answer_side: bool) -> Vec<String> {
        let mut v: Value = serde_json::from_str(body).unwrap();
        let mut out = Vec::new();
        let mut visit = |s: &mut String| {
            out.push(s.clone());
            Ok(())
        };
        if answer_side {
            answer(&mut v, &mut visit).unwrap();
        } else {
            request(&mut v, &mut visit).unwrap();
        }
        out
    }

    #[test]
    fn every_text_of_each_request_shape_is_visited() {
        let chat = r#"{"model":"m","messages":[{"role":"system","content":"a"},{"role":"user","content":[{"type":"text","text":"b"},{"type":"image_url","image_url":{"url":"http://x"}}]},{"role":"assistant","tool_calls":[{"id":"t","function":{"name":"f","arguments":"c"}}]}]}"#;
        assert_eq!(seen(chat, false), ["a", "b", "c"]);
        let messages = r#"{"model":"m","system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"r"}]}]}]}"#;
        assert_eq!(seen(messages, false), ["r", "s"]);
        let responses = r#"{"model":"m","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"t"}]}]}"#;
        assert_eq!(seen(responses, false), ["t", "i"]);
        assert_eq!(
            seen(r#"{"model":"m","input":["e1","e2"]}"#, false),
            ["e1", "e2"]
        );
        assert_eq!(seen(r#"{"model":"m","prompt":"p"}"#, false), ["p"]);
        assert!(seen(r#"{"model":"m","input":[[1,2]]}"#, false).is_empty());
    }

    #[test]
    fn every_text_of_each_answer_shape_is_visited() {
        let chat = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"a"}}]}"#;
        assert_eq!(seen(chat, true), ["a"]);
        assert_eq!(seen(r#"{"choices":[{"text":"t"}]}"#, true), ["t"]);
        let messages = r#"{"type":"message","content":[{"type":"text","text":"m"}]}"#;
        assert_eq!(seen(messages, true), ["m"]);
        let responses =
            r#"{"output":[{"type":"message","content":[{"type":"output_text","text":"o"}]}]}"#;
        assert_eq!(seen(responses, true), ["o"]);
    }
}
