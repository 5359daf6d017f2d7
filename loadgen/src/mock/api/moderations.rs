//! `POST …/moderations`: OpenAI's moderation API, with its checks: `input`
//! is required (a string, a list of strings, or a list of `text` and
//! `image_url` parts), `model` optional (`omni-moderation-latest`).
//! Answers have the real shape: `id`, `model`, one `results` entry per
//! input with `flagged`, `categories`, `category_scores` and
//! `category_applied_input_types`. An input containing `mock-flagged` is
//! flagged for `harassment`.

use serde_json::{json, Map, Value};

use super::{errors, Ctx, Reply, Usage};
use crate::mock::tokens;

const CATEGORIES: &[&str] = &[
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/instructions",
    "self-harm/intent",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
];

/// The inputs to judge: each a text and whether it is an image part.
fn inputs(body: &Value) -> Result<Vec<(String, bool)>, Reply> {
    let bad = || {
        errors::bad_request(
            "input must be a string, a list of strings or a list of text and image_url parts",
        )
    };
    match body.get("input") {
        Some(Value::String(s)) => Ok(vec![(s.clone(), false)]),
        Some(Value::Array(items)) if !items.is_empty() => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok((s.clone(), false)),
                Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                    Some("text") => o
                        .get("text")
                        .and_then(Value::as_str)
                        .map(|t| (t.to_string(), false))
                        .ok_or_else(bad),
                    Some("image_url") => o
                        .get("image_url")
                        .and_then(|u| u.get("url"))
                        .and_then(Value::as_str)
                        .map(|u| (u.to_string(), true))
                        .ok_or_else(bad),
                    _ => Err(bad()),
                },
                _ => Err(bad()),
            })
            .collect(),
        None => Err(errors::reply(
            400,
            "invalid_request_error",
            "you must provide an input parameter",
        )),
        Some(_) => Err(bad()),
    }
}

/// Answers a moderation request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let bearer = ctx
        .req
        .header("authorization")
        .is_some_and(|a| a.len() > 7 && a[..7].eq_ignore_ascii_case("bearer "));
    if !bearer && super::azure::deployment(ctx.req.path()).is_none() {
        let body = json!({"error": {"message": "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", "type": "invalid_request_error", "param": null, "code": null}});
        return Reply::json(401, serde_json::to_vec(&body).unwrap_or_default());
    }
    let inputs = match inputs(body) {
        Ok(i) => i,
        Err(refusal) => return refusal,
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("omni-moderation-latest");
    let results: Vec<Value> = inputs
        .iter()
        .map(|(text, image)| {
            let flagged = !image && text.contains("mock-flagged");
            let mut categories = Map::new();
            let mut scores = Map::new();
            let mut applied = Map::new();
            for c in CATEGORIES {
                let hit = flagged && *c == "harassment";
                categories.insert(c.to_string(), json!(hit));
                scores.insert(c.to_string(), json!(if hit { 0.93 } else { 0.0001 }));
                applied.insert(c.to_string(), json!(if *image { vec!["image"] } else { vec!["text"] }));
            }
            json!({"flagged": flagged, "categories": categories, "category_scores": scores, "category_applied_input_types": applied})
        })
        .collect();
    let chars: usize = inputs
        .iter()
        .filter(|(_, i)| !i)
        .map(|(t, _)| t.chars().count())
        .sum();
    let answer = json!({"id": format!("modr-mock-{}", ctx.id), "model": model, "results": results});
    Reply::ok(
        &answer,
        Usage {
            prompt: tokens::estimate(chars),
            completion: 0,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::{test_request, Body};
    use crate::mock::controls::Controls;

    fn call(body: Value) -> Reply {
        let req = test_request("/v1/moderations", &[("authorization", "Bearer sk-1")]);
        let controls = Controls::default();
        let ctx = Ctx {
            id: 3,
            created: 1,
            model: "m",
            controls: &controls,
            req: &req,
        };
        handle(&ctx, &body)
    }

    #[test]
    fn judges_each_input_in_openais_shape() {
        let r = call(json!({"input": ["fine", "mock-flagged text"]}));
        let Body::Full(b) = r.body else { panic!() };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["model"], "omni-moderation-latest");
        assert_eq!(v["results"][0]["flagged"], false);
        assert_eq!(v["results"][1]["flagged"], true);
        assert_eq!(v["results"][1]["categories"]["harassment"], true);
        assert_eq!(
            v["results"][1]["category_applied_input_types"]["hate"],
            json!(["text"])
        );
        let r = call(
            json!({"input": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}),
        );
        assert_eq!(r.status, 200);
        for bad in [
            json!({}),
            json!({"input": []}),
            json!({"input": [{"type": "audio"}]}),
            json!({"input": 3}),
        ] {
            assert_eq!(call(bad.clone()).status, 400, "{bad}");
        }
    }
}
