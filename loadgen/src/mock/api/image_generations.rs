//! `POST …/images/generations`: OpenAI's image generation API with its
//! checks: a Bearer key (Azure paths have Azure's own check), `prompt`
//! required, `n` 1 to 10 (1 for `dall-e-3`), `size` and `quality` among
//! the model family's values, `response_format` only for DALL·E. Answers
//! have the real shape: `created` and `data` (`url`, or `b64_json`, with
//! `revised_prompt` on `dall-e-3`); `gpt-image` models always answer
//! `b64_json` with `background`, `output_format`, `quality`, `size` and a
//! token `usage` (`input_tokens`, `input_tokens_details`,
//! `output_tokens`, `total_tokens`), the output tokens OpenAI bills per
//! image of each quality and size.

use serde_json::{json, Value};

use super::{Ctx, Reply, Usage};
use crate::mock::tokens;

/// A 1x1 PNG, the image every answer carries.
const PNG_B64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/// A model family, by its own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    DallE2,
    DallE3,
    GptImage,
}

impl Family {
    fn of(model: &str) -> Family {
        if model.contains("gpt-image") {
            Family::GptImage
        } else if model.contains("dall-e-3") {
            Family::DallE3
        } else {
            Family::DallE2
        }
    }

    fn sizes(self) -> &'static [&'static str] {
        match self {
            Family::DallE2 => &["256x256", "512x512", "1024x1024"],
            Family::DallE3 => &["1024x1024", "1792x1024", "1024x1792"],
            Family::GptImage => &["1024x1024", "1536x1024", "1024x1536", "auto"],
        }
    }

    fn qualities(self) -> &'static [&'static str] {
        match self {
            Family::DallE2 => &["standard"],
            Family::DallE3 => &["standard", "hd"],
            Family::GptImage => &["low", "medium", "high", "auto"],
        }
    }
}

/// OpenAI's 400 naming `param`.
fn invalid(param: &str, code: &str, message: &str) -> Reply {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}});
    Reply::json(400, serde_json::to_vec(&body).unwrap_or_default())
}

/// `value` must be one of `allowed` (absent: the first).
fn one_of<'a>(body: &'a Value, param: &str, allowed: &[&'static str]) -> Result<&'a str, Reply> {
    match body.get(param) {
        None | Some(Value::Null) => Ok(allowed[0]),
        Some(Value::String(s)) if allowed.contains(&s.as_str()) => Ok(s),
        Some(v) => {
            let list: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
            Err(invalid(
                param,
                "invalid_value",
                &format!(
                    "Invalid value: {v}. Supported values are: {}.",
                    list.join(", ")
                ),
            ))
        }
    }
}

/// Output tokens OpenAI bills a `gpt-image` image of `quality` and `size`.
fn image_tokens(quality: &str, size: &str) -> u64 {
    let square = size == "1024x1024" || size == "auto";
    match (quality, square) {
        ("low", true) => 272,
        ("low", false) => 408,
        ("medium", true) => 1056,
        ("medium", false) => 1584,
        (_, true) => 4160,
        (_, false) => 6240,
    }
}

/// Answers an image generation request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let azure = super::azure::deployment(ctx.req.path()).is_some();
    let bearer = ctx
        .req
        .header("authorization")
        .is_some_and(|a| a.len() > 7 && a[..7].eq_ignore_ascii_case("bearer "));
    if !azure && !bearer {
        let body = json!({"error": {"message": "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", "type": "invalid_request_error", "param": null, "code": null}});
        return Reply::json(401, serde_json::to_vec(&body).unwrap_or_default());
    }
    let prompt = match body.get("prompt") {
        Some(Value::String(p)) => p,
        None | Some(Value::Null) => {
            return invalid(
                "prompt",
                "missing_required_parameter",
                "Missing required parameter: 'prompt'.",
            )
        }
        Some(_) => {
            return invalid(
                "prompt",
                "invalid_type",
                "Invalid type for 'prompt': expected a string.",
            )
        }
    };
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("dall-e-2");
    let family = Family::of(model);
    let n = match body.get("n") {
        None | Some(Value::Null) => 1,
        Some(v) => match v.as_u64() {
            Some(n @ 1..=10) => n,
            _ => {
                return invalid(
                    "n",
                    "integer_out_of_range",
                    &format!("Invalid 'n': expected an integer from 1 to 10, but got {v} instead."),
                )
            }
        },
    };
    if family == Family::DallE3 && n != 1 {
        return invalid("n", "invalid_value", "You must provide n=1 for this model.");
    }
    let size = match one_of(body, "size", family.sizes()) {
        Ok(s) => s,
        Err(refusal) => return refusal,
    };
    let quality = match one_of(body, "quality", family.qualities()) {
        Ok(q) => q,
        Err(refusal) => return refusal,
    };
    let b64 = match (family, body.get("response_format")) {
        (Family::GptImage, Some(f)) if !f.is_null() => {
            return invalid(
                "response_format",
                "unknown_parameter",
                "Unknown parameter: 'response_format'.",
            )
        }
        (Family::GptImage, _) => true,
        (_, None | Some(Value::Null)) => false,
        (_, Some(f)) if f == "url" => false,
        (_, Some(f)) if f == "b64_json" => true,
        (_, Some(f)) => {
            return invalid(
                "response_format",
                "invalid_value",
                &format!("Invalid value: {f}. Supported values are: 'url' and 'b64_json'."),
            )
        }
    };
    let data: Vec<Value> = (0..n)
        .map(|i| {
            let mut item = if b64 {
                json!({"b64_json": PNG_B64})
            } else {
                json!({"url": format!("https://mock.invalid/images/img-{}-{i}.png", ctx.id)})
            };
            if family == Family::DallE3 {
                item["revised_prompt"] = json!(format!("A detailed rendering of: {prompt}"));
            }
            item
        })
        .collect();
    let prompt_tokens = tokens::estimate(prompt.chars().count());
    let mut answer = json!({"created": ctx.created, "data": data});
    let mut completion = 0;
    if family == Family::GptImage {
        let quality = if quality == "auto" { "high" } else { quality };
        let size = if size == "auto" { "1024x1024" } else { size };
        completion = image_tokens(quality, size) * n;
        answer["background"] = json!("opaque");
        answer["output_format"] = json!("png");
        answer["quality"] = json!(quality);
        answer["size"] = json!(size);
        answer["usage"] = json!({
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"image_tokens": 0, "text_tokens": prompt_tokens},
            "output_tokens": completion,
            "total_tokens": prompt_tokens + completion,
        });
    }
    Reply::ok(
        &answer,
        Usage {
            prompt: prompt_tokens,
            completion,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::{test_request, Body};
    use crate::mock::controls::Controls;

    fn call(path: &str, headers: &[(&str, &str)], body: Value) -> (u16, Value) {
        let req = test_request(path, headers);
        let controls = Controls::default();
        let ctx = Ctx {
            id: 7,
            created: 1,
            model: "m",
            controls: &controls,
            req: &req,
        };
        let r = handle(&ctx, &body);
        let Body::Full(b) = r.body else { panic!() };
        (r.status, serde_json::from_slice(&b).unwrap())
    }

    const KEY: &[(&str, &str)] = &[("authorization", "Bearer sk-x")];

    #[test]
    fn dall_e_answers_urls_and_gpt_image_b64_with_usage() {
        let (s, v) = call(
            "/v1/images/generations",
            KEY,
            json!({"model": "dall-e-3", "prompt": "a cat", "quality": "hd", "size": "1792x1024"}),
        );
        assert_eq!(s, 200, "{v}");
        assert!(v["data"][0]["url"]
            .as_str()
            .unwrap()
            .starts_with("https://"));
        assert!(v["data"][0]["revised_prompt"].is_string());
        assert!(v.get("usage").is_none());
        let (s, v) = call(
            "/v1/images/generations",
            KEY,
            json!({"model": "gpt-image-1", "prompt": "a cat", "n": 2, "quality": "low"}),
        );
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        assert_eq!(v["data"][1]["b64_json"], PNG_B64);
        assert_eq!(v["usage"]["output_tokens"], 544);
        assert_eq!(v["size"], "1024x1024");
    }

    #[test]
    fn refuses_what_openai_refuses() {
        let (s, v) = call("/v1/images/generations", &[], json!({"prompt": "x"}));
        assert_eq!((s, v["error"]["code"].clone()), (401, Value::Null));
        for (body, param) in [
            (json!({"model": "dall-e-3"}), "prompt"),
            (json!({"model": "dall-e-3", "prompt": "x", "n": 2}), "n"),
            (json!({"model": "dall-e-2", "prompt": "x", "n": 11}), "n"),
            (
                json!({"model": "dall-e-2", "prompt": "x", "size": "1792x1024"}),
                "size",
            ),
            (
                json!({"model": "dall-e-3", "prompt": "x", "quality": "low"}),
                "quality",
            ),
            (
                json!({"model": "gpt-image-1", "prompt": "x", "response_format": "url"}),
                "response_format",
            ),
        ] {
            let (s, v) = call("/v1/images/generations", KEY, body.clone());
            assert_eq!(
                (s, v["error"]["param"].as_str()),
                (400, Some(param)),
                "{body}"
            );
        }
    }
}
