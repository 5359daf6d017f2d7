//! `POST …/chat/completions`: OpenAI `chat.completion` and its stream.

use serde::Serialize;
use serde_json::Value;

use super::{sse, sse_done, wants_stream, wants_stream_usage, Ctx, OpenAiUsage, Reply, Usage};
use crate::mock::tokens;

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [Choice<'a>; 1],
    usage: OpenAiUsage,
}

#[derive(Serialize)]
struct Choice<'a> {
    index: u32,
    message: Message<'a>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [ChunkChoice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<OpenAiUsage>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    finish_reason: Option<&'static str>,
}

#[derive(Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
}

/// Answers a chat completion request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let usage = Usage {
        prompt: tokens::estimate(tokens::messages_chars(body)),
        completion: tokens::completion_tokens(ctx.controls.completion_tokens, body),
    };
    let id = format!("chatcmpl-mock-{}", ctx.id);
    if wants_stream(body) {
        return Reply::stream(stream(ctx, &id, usage, wants_stream_usage(body)), usage);
    }
    let content = tokens::text(usage.completion);
    let completion = Completion {
        id: &id,
        object: "chat.completion",
        created: ctx.created,
        model: ctx.model,
        choices: [Choice {
            index: 0,
            message: Message {
                role: "assistant",
                content: &content,
            },
            finish_reason: "stop",
        }],
        usage: usage.into(),
    };
    Reply::ok(&completion, usage)
}

fn stream(ctx: &Ctx<'_>, id: &str, usage: Usage, include_usage: bool) -> Vec<super::Event> {
    let n = usage.completion;
    let emit = |choices: &[ChunkChoice<'_>], usage: Option<OpenAiUsage>, delay_ms: u64| {
        let chunk = Chunk {
            id,
            object: "chat.completion.chunk",
            created: ctx.created,
            model: ctx.model,
            choices,
            usage,
        };
        sse(None, &chunk, delay_ms)
    };
    let mut events = Vec::with_capacity(n as usize + 3);
    for i in 0..n {
        let piece = tokens::piece(i, n);
        let choice = ChunkChoice {
            index: 0,
            delta: Delta {
                role: (i == 0).then_some("assistant"),
                content: Some(&piece),
            },
            finish_reason: None,
        };
        events.push(emit(&[choice], None, ctx.token_delay(i)));
    }
    let last = ChunkChoice {
        index: 0,
        delta: Delta {
            role: (n == 0).then_some("assistant"),
            content: None,
        },
        finish_reason: Some("stop"),
    };
    let delay = if n == 0 { ctx.controls.ttft_ms } else { 0 };
    events.push(emit(&[last], None, delay));
    if include_usage {
        events.push(emit(&[], Some(usage.into()), 0));
    }
    events.push(sse_done());
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::Body;
    use crate::mock::controls::Controls;
    use serde_json::json;

    static REQ: std::sync::LazyLock<crate::mock::http::Request> =
        std::sync::LazyLock::new(|| crate::mock::api::test_request("/v1/chat/completions", &[]));

    fn ctx(controls: &Controls) -> Ctx<'_> {
        Ctx {
            id: 7,
            created: 1,
            model: "gpt-x",
            controls,
            req: &REQ,
        }
    }

    #[test]
    fn full_completion() {
        let controls = Controls {
            completion_tokens: 5,
            ..Controls::default()
        };
        let body = json!({"model": "gpt-x", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 3});
        let reply = handle(&ctx(&controls), &body);
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt: 2,
                completion: 3
            })
        );
        let Body::Full(b) = reply.body else { panic!() };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["id"], "chatcmpl-mock-7");
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["model"], "gpt-x");
        assert_eq!(v["choices"][0]["message"]["content"], "lorem ipsum dolor");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["usage"]["total_tokens"], 5);
    }

    #[test]
    fn stream_events() {
        let controls = Controls {
            completion_tokens: 3,
            ttft_ms: 50,
            chunk_delay_ms: 10,
            ..Controls::default()
        };
        let body = json!({"model": "gpt-x", "messages": [], "stream": true, "stream_options": {"include_usage": true}});
        let Body::Stream(events) = handle(&ctx(&controls), &body).body else {
            panic!()
        };
        assert_eq!(events.len(), 3 + 1 + 1 + 1);
        let delays: Vec<u64> = events.iter().map(|e| e.delay_ms).collect();
        assert_eq!(delays, vec![50, 10, 10, 0, 0, 0]);
        let parse = |e: &super::super::Event| -> Value {
            let s = std::str::from_utf8(&e.data).unwrap();
            serde_json::from_str(s.strip_prefix("data: ").unwrap().trim_end()).unwrap()
        };
        let first = parse(&events[0]);
        assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(first["object"], "chat.completion.chunk");
        let text: String = events[..3]
            .iter()
            .map(|e| {
                parse(e)["choices"][0]["delta"]["content"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(text, "lorem ipsum dolor");
        assert_eq!(parse(&events[3])["choices"][0]["finish_reason"], "stop");
        assert_eq!(parse(&events[4])["usage"]["completion_tokens"], 3);
        assert_eq!(parse(&events[4])["choices"], json!([]));
        assert_eq!(events[5].data, b"data: [DONE]\n\n");
    }
}
