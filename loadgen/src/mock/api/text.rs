//! `POST …/completions`: OpenAI legacy `text_completion` and its stream.

use serde::Serialize;
use serde_json::Value;

use super::{
    sse, sse_done, wants_stream, wants_stream_usage, Ctx, Event, OpenAiUsage, Reply, Usage,
};
use crate::mock::tokens;

#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: &'a [Choice<'a>],
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<OpenAiUsage>,
}

#[derive(Serialize)]
struct Choice<'a> {
    text: &'a str,
    index: u32,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
}

/// Answers a legacy text completion request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let usage = Usage {
        prompt: tokens::estimate(body.get("prompt").map_or(0, tokens::input_chars)),
        completion: tokens::completion_tokens(ctx.controls.completion_tokens, body),
    };
    let id = format!("cmpl-mock-{}", ctx.id);
    if !wants_stream(body) {
        let text = tokens::text(usage.completion);
        let completion = Completion {
            id: &id,
            object: "text_completion",
            created: ctx.created,
            model: ctx.model,
            choices: &[choice(&text, Some("stop"))],
            usage: Some(usage.into()),
        };
        return Reply::ok(&completion, usage);
    }
    let emit = |choices: &[Choice<'_>], usage: Option<OpenAiUsage>, delay_ms: u64| {
        let completion = Completion {
            id: &id,
            object: "text_completion",
            created: ctx.created,
            model: ctx.model,
            choices,
            usage,
        };
        sse(None, &completion, delay_ms)
    };
    let n = usage.completion;
    let mut events: Vec<Event> = Vec::with_capacity(n as usize + 3);
    for i in 0..n {
        let piece = tokens::piece(i, n);
        events.push(emit(&[choice(&piece, None)], None, ctx.token_delay(i)));
    }
    let delay = if n == 0 { ctx.controls.ttft_ms } else { 0 };
    events.push(emit(&[choice("", Some("stop"))], None, delay));
    if wants_stream_usage(body) {
        events.push(emit(&[], Some(usage.into()), 0));
    }
    events.push(sse_done());
    Reply::stream(events, usage)
}

fn choice<'a>(text: &'a str, finish_reason: Option<&'static str>) -> Choice<'a> {
    Choice {
        text,
        index: 0,
        logprobs: None,
        finish_reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::Body;
    use crate::mock::controls::Controls;
    use serde_json::json;

    #[test]
    fn full_and_stream() {
        let controls = Controls {
            completion_tokens: 2,
            ..Controls::default()
        };
        let ctx = Ctx {
            id: 1,
            created: 2,
            model: "davinci",
            controls: &controls,
            req: &crate::mock::api::test_request("/v1/x", &[]),
        };
        let reply = handle(
            &ctx,
            &json!({"model": "davinci", "prompt": ["abc", "defgh"]}),
        );
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt: 2,
                completion: 2
            })
        );
        let Body::Full(b) = reply.body else { panic!() };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["id"], "cmpl-mock-1");
        assert_eq!(v["choices"][0]["text"], "lorem ipsum");
        assert_eq!(v["usage"]["total_tokens"], 4);

        let reply = handle(
            &ctx,
            &json!({"model": "davinci", "prompt": "x", "stream": true}),
        );
        let Body::Stream(events) = reply.body else {
            panic!()
        };
        assert_eq!(events.len(), 2 + 1 + 1);
        let s = String::from_utf8(events[1].data.clone()).unwrap();
        assert!(s.starts_with("data: {"), "{s}");
        assert!(s.contains(r#""text":"ipsum""#), "{s}");
    }
}
