//! `POST …/messages`: Anthropic Messages API responses and event streams.

use serde::Serialize;
use serde_json::Value;

use super::{sse, wants_stream, Ctx, Event, Reply, Usage};
use crate::mock::tokens;

#[derive(Serialize)]
struct Message<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: &'a [TextBlock<'a>],
    stop_reason: Option<&'static str>,
    stop_sequence: Option<&'static str>,
    usage: MessageUsage,
}

#[derive(Serialize)]
struct TextBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
struct MessageUsage {
    input_tokens: u64,
    output_tokens: u64,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StreamEvent<'a> {
    MessageStart {
        message: Message<'a>,
    },
    ContentBlockStart {
        index: u32,
        content_block: TextBlock<'a>,
    },
    ContentBlockDelta {
        index: u32,
        delta: TextDelta<'a>,
    },
    ContentBlockStop {
        index: u32,
    },
    MessageDelta {
        delta: StopDelta,
        usage: OutputUsage,
    },
    MessageStop,
}

#[derive(Serialize)]
struct TextDelta<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
struct StopDelta {
    stop_reason: &'static str,
    stop_sequence: Option<&'static str>,
}

#[derive(Serialize)]
struct OutputUsage {
    output_tokens: u64,
}

/// Answers an Anthropic Messages request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let usage = Usage {
        prompt: tokens::estimate(tokens::messages_chars(body)),
        completion: tokens::completion_tokens(ctx.controls.completion_tokens, body),
    };
    let id = format!("msg_mock_{}", ctx.id);
    if !wants_stream(body) {
        let text = tokens::text(usage.completion);
        let message = Message {
            id: &id,
            kind: "message",
            role: "assistant",
            model: ctx.model,
            content: &[text_block(&text)],
            stop_reason: Some("end_turn"),
            stop_sequence: None,
            usage: MessageUsage {
                input_tokens: usage.prompt,
                output_tokens: usage.completion,
            },
        };
        return Reply::ok(&message, usage);
    }

    let n = usage.completion;
    let mut events: Vec<Event> = Vec::with_capacity(n as usize + 5);
    let mut push = |e: StreamEvent<'_>, delay| {
        let name = match e {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop => "message_stop",
        };
        events.push(sse(Some(name), &e, delay));
    };
    push(
        StreamEvent::MessageStart {
            message: Message {
                id: &id,
                kind: "message",
                role: "assistant",
                model: ctx.model,
                content: &[],
                stop_reason: None,
                stop_sequence: None,
                usage: MessageUsage {
                    input_tokens: usage.prompt,
                    output_tokens: 0,
                },
            },
        },
        0,
    );
    push(
        StreamEvent::ContentBlockStart {
            index: 0,
            content_block: text_block(""),
        },
        0,
    );
    for i in 0..n {
        let piece = tokens::piece(i, n);
        let delta = TextDelta {
            kind: "text_delta",
            text: &piece,
        };
        push(
            StreamEvent::ContentBlockDelta { index: 0, delta },
            ctx.token_delay(i),
        );
    }
    let delay = if n == 0 { ctx.controls.ttft_ms } else { 0 };
    push(StreamEvent::ContentBlockStop { index: 0 }, delay);
    push(
        StreamEvent::MessageDelta {
            delta: StopDelta {
                stop_reason: "end_turn",
                stop_sequence: None,
            },
            usage: OutputUsage { output_tokens: n },
        },
        0,
    );
    push(StreamEvent::MessageStop, 0);
    Reply::stream(events, usage)
}

fn text_block(text: &str) -> TextBlock<'_> {
    TextBlock { kind: "text", text }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::Body;
    use crate::mock::controls::Controls;
    use serde_json::json;

    fn ctx(controls: &Controls) -> Ctx<'_> {
        Ctx {
            id: 3,
            created: 0,
            model: "claude-x",
            controls,
        }
    }

    #[test]
    fn full_message() {
        let controls = Controls {
            completion_tokens: 4,
            ..Controls::default()
        };
        let body = json!({"model": "claude-x", "max_tokens": 2, "system": "be brief",
            "messages": [{"role": "user", "content": "hi"}]});
        let reply = handle(&ctx(&controls), &body);
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt: 3,
                completion: 2
            })
        );
        let Body::Full(b) = reply.body else { panic!() };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["id"], "msg_mock_3");
        assert_eq!(v["type"], "message");
        assert_eq!(v["content"][0]["type"], "text");
        assert_eq!(v["content"][0]["text"], "lorem ipsum");
        assert_eq!(v["stop_reason"], "end_turn");
        assert!(v["stop_sequence"].is_null());
        assert_eq!(v["usage"]["input_tokens"], 3);
        assert_eq!(v["usage"]["output_tokens"], 2);
    }

    #[test]
    fn stream_event_sequence() {
        let controls = Controls {
            completion_tokens: 2,
            ttft_ms: 9,
            ..Controls::default()
        };
        let body = json!({"model": "claude-x", "stream": true, "messages": []});
        let Body::Stream(events) = handle(&ctx(&controls), &body).body else {
            panic!()
        };
        let names: Vec<String> = events
            .iter()
            .map(|e| {
                let s = std::str::from_utf8(&e.data).unwrap();
                let (head, data) = s.split_once('\n').unwrap();
                let name = head.strip_prefix("event: ").unwrap();
                let v: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap().trim_end()).unwrap();
                assert_eq!(v["type"], name);
                name.to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[2].delay_ms, 9);
        let s = std::str::from_utf8(&events[5].data).unwrap();
        assert!(s.contains(r#""usage":{"output_tokens":2}"#), "{s}");
    }
}
