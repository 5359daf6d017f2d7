//! Azure OpenAI on top of the OpenAI handlers: the checks Azure makes
//! (an `api-version` query parameter, a key in `api-key` or a Bearer token)
//! and the extras it answers with (`prompt_filter_results`,
//! `content_filter_results`, a leading stream chunk carrying only the
//! prompt's filter results). A prompt containing `mock-content-filter` is
//! refused as Azure's content filter refuses it.

use serde_json::{json, Value};

use super::{to_json, Body, Ctx, Event, Reply};

/// The text in a prompt that makes the mock's content filter refuse it.
pub const FILTER_TRIGGER: &str = "mock-content-filter";

/// The deployment named by an Azure OpenAI path
/// (`…/openai/deployments/<name>/…`).
pub fn deployment(path: &str) -> Option<&str> {
    let rest = &path[path.find("/openai/deployments/")? + "/openai/deployments/".len()..];
    rest.split('/').next().filter(|d| !d.is_empty())
}

fn error(status: u16, code: &str, message: &str) -> Reply {
    Reply::json(
        status,
        to_json(&json!({"error": {"code": code, "message": message}})),
    )
}

/// Azure's refusals: unknown version, missing credential, filtered prompt.
pub fn check(ctx: &Ctx<'_>, body: &Value) -> Result<(), Reply> {
    let query = ctx.req.target.split_once('?').map_or("", |(_, q)| q);
    let has_version = query.split('&').any(|kv| {
        kv.strip_prefix("api-version=")
            .is_some_and(|v| !v.is_empty())
    });
    if !has_version {
        return Err(error(404, "404", "Resource not found"));
    }
    let bearer = ctx
        .req
        .header("authorization")
        .is_some_and(|a| a.len() > 7 && a[..7].eq_ignore_ascii_case("bearer "));
    if ctx.req.header("api-key").is_none_or(str::is_empty) && !bearer {
        return Err(error(
            401,
            "401",
            "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.",
        ));
    }
    let prompt = body.to_string();
    if prompt.contains(FILTER_TRIGGER) {
        let refusal = json!({"error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766",
            "type": null,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
            "innererror": {
                "code": "ResponsibleAIPolicyViolation",
                "content_filter_result": {
                    "hate": {"filtered": false, "severity": "safe"},
                    "self_harm": {"filtered": false, "severity": "safe"},
                    "sexual": {"filtered": false, "severity": "safe"},
                    "violence": {"filtered": true, "severity": "medium"},
                },
            },
        }});
        return Err(Reply::json(400, to_json(&refusal)));
    }
    Ok(())
}

/// Azure's filter verdict for one prompt or choice: all safe.
fn safe() -> Value {
    json!({
        "hate": {"filtered": false, "severity": "safe"},
        "self_harm": {"filtered": false, "severity": "safe"},
        "sexual": {"filtered": false, "severity": "safe"},
        "violence": {"filtered": false, "severity": "safe"},
    })
}

fn prompt_filter_results() -> Value {
    json!([{"prompt_index": 0, "content_filter_results": safe()}])
}

/// Adds `content_filter_results` to every choice of `value`.
fn filter_choices(value: &mut Value) {
    if let Some(choices) = value.get_mut("choices").and_then(Value::as_array_mut) {
        for c in choices {
            if let Some(c) = c.as_object_mut() {
                c.insert("content_filter_results".into(), safe());
            }
        }
    }
}

/// `reply` with Azure's extras: filter results on the body or on every
/// chunk, and the leading prompt-filter chunk of a stream.
pub fn decorate(mut reply: Reply) -> Reply {
    if reply.status != 200 {
        return reply;
    }
    reply.body = match reply.body {
        Body::Full(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Ok(mut v) => {
                filter_choices(&mut v);
                if let Some(o) = v.as_object_mut() {
                    o.insert("prompt_filter_results".into(), prompt_filter_results());
                }
                Body::Full(to_json(&v))
            }
            Err(_) => Body::Full(bytes),
        },
        Body::Stream(events) => {
            let first = json!({
                "choices": [], "created": 0, "id": "", "model": "", "object": "",
                "prompt_filter_results": prompt_filter_results(),
            });
            let mut out = Vec::with_capacity(events.len() + 1);
            out.push(super::sse(None, &first, 0));
            for mut e in events {
                let text = String::from_utf8_lossy(&e.data);
                if let Some(data) = text.strip_prefix("data: ").map(str::trim_end) {
                    if let Ok(mut v) = serde_json::from_str::<Value>(data) {
                        filter_choices(&mut v);
                        e = Event {
                            delay_ms: e.delay_ms,
                            data: super::sse(None, &v, 0).data,
                        };
                    }
                }
                out.push(e);
            }
            Body::Stream(out)
        }
        other @ (Body::EventStream(_) | Body::Binary { .. }) => other,
    };
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::{handle, test_request, Route};
    use crate::mock::controls::Controls;

    fn run(target: &str, headers: &[(&str, &str)], body: Value) -> Reply {
        let controls = Controls {
            completion_tokens: 2,
            ..Controls::default()
        };
        let req = test_request(target, headers);
        let ctx = Ctx {
            id: 1,
            created: 0,
            model: "gpt",
            controls: &controls,
            req: &req,
        };
        handle(Route::ChatCompletions, &ctx, &body)
    }

    const PATH: &str = "/openai/deployments/gpt/chat/completions?api-version=2024-10-21";

    #[test]
    fn checks_version_and_credentials() {
        let body = json!({"messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(deployment(PATH.split('?').next().unwrap()), Some("gpt"));
        let r = run(
            "/openai/deployments/gpt/chat/completions",
            &[("api-key", "k")],
            body.clone(),
        );
        assert_eq!(r.status, 404);
        assert_eq!(run(PATH, &[], body.clone()).status, 401);
        assert_eq!(
            run(PATH, &[("authorization", "Bearer t")], body.clone()).status,
            200
        );
        let filtered =
            json!({"messages": [{"role": "user", "content": "say mock-content-filter"}]});
        let r = run(PATH, &[("api-key", "k")], filtered);
        assert_eq!(r.status, 400);
        let Body::Full(b) = r.body else { panic!() };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["error"]["code"], "content_filter");
    }

    #[test]
    fn answers_with_filter_results() {
        let r = run(PATH, &[("api-key", "k")], json!({"messages": []}));
        let Body::Full(b) = r.body else { panic!() };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["prompt_filter_results"][0]["prompt_index"], 0);
        assert_eq!(
            v["choices"][0]["content_filter_results"]["hate"]["filtered"],
            false
        );
        let r = run(
            PATH,
            &[("api-key", "k")],
            json!({"messages": [], "stream": true}),
        );
        let Body::Stream(events) = r.body else {
            panic!()
        };
        let first = String::from_utf8(events[0].data.clone()).unwrap();
        assert!(
            first.contains("\"choices\":[]") && first.contains("prompt_filter_results"),
            "{first}"
        );
        let second = String::from_utf8(events[1].data.clone()).unwrap();
        assert!(second.contains("content_filter_results"), "{second}");
    }
}
