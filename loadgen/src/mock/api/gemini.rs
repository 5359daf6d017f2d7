//! `POST …/models/{model}:generateContent` and
//! `…:streamGenerateContent?alt=sse`: Google's Gemini API, with the checks
//! the real endpoint makes: the API key (`x-goog-api-key` or `?key=`) must
//! be [`API_KEY`] (else 400 `API key not valid`), or on Vertex AI paths
//! (`…/projects/…`) a Bearer token (see `vertex`); streams need `alt=sse`,
//! `contents` must hold `user`/`model` turns with parts, unknown top-level
//! fields are refused. Answers have the real shapes: `candidates` with
//! parts, `finishReason`, `usageMetadata`, `modelVersion`; streams are SSE
//! events of partial answers separated by CRLF pairs, usage on the last.
//!
//! Behaviour: `toolConfig.functionCallingConfig.mode` `ANY` (or a prompt
//! containing `mock-tool-use`) answers with a `functionCall` part; a prompt
//! containing `mock-context-window` is refused as too long. `inlineData`
//! parts must carry base64 `data` matching their image `mimeType`;
//! `mock-describe-images` lists them (`images`).

use serde_json::{json, Map, Value};

use super::{images, to_json, Ctx, Event, Reply, Usage};
use crate::mock::tokens;

/// The only API key the mock accepts.
pub const API_KEY: &str = "mock-gemini-api-key";

const KNOWN_FIELDS: &[&str] = &[
    "contents",
    "systemInstruction",
    "system_instruction",
    "generationConfig",
    "generation_config",
    "tools",
    "toolConfig",
    "tool_config",
    "safetySettings",
    "safety_settings",
    "cachedContent",
    "cached_content",
    "labels",
];

/// The model and whether the path streams, for a Gemini path.
pub fn parse_path(path: &str) -> Option<(&str, bool)> {
    let (rest, method) = path.rsplit_once(':')?;
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        _ => return None,
    };
    let (_, model) = rest.rsplit_once("/models/")?;
    Some((model, stream))
}

/// An error reply in Google's shape.
pub fn error(status: u16, message: &str) -> Reply {
    let kind = match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    let body = json!({"error": {"code": status, "message": message, "status": kind}});
    Reply::json(status, to_json(&body))
}

fn query_param<'a>(target: &'a str, name: &str) -> Option<&'a str> {
    let (_, query) = target.split_once('?')?;
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The credentials check: the API key (AI Studio) or, on Vertex AI
/// paths (`…/projects/…`), the OAuth token.
pub fn check_credentials(ctx: &Ctx<'_>) -> Result<(), Reply> {
    let key = ctx
        .req
        .header("x-goog-api-key")
        .or_else(|| query_param(&ctx.req.target, "key"));
    if ctx.req.path().contains("/projects/") {
        super::vertex::check(ctx.req, ctx.created, "google")
    } else if key != Some(API_KEY) {
        Err(error(
            400,
            "API key not valid. Please pass a valid API key.",
        ))
    } else {
        Ok(())
    }
}

fn check(ctx: &Ctx<'_>, body: &Value, stream: bool) -> Result<(), Reply> {
    check_credentials(ctx)?;
    if stream && query_param(&ctx.req.target, "alt") != Some("sse") {
        return Err(error(400, "the mock streams only with alt=sse"));
    }
    let Some(obj) = body.as_object() else {
        return Err(error(400, "Invalid JSON payload received."));
    };
    if let Some(extra) = obj.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())) {
        return Err(error(
            400,
            &format!("Invalid JSON payload received. Unknown name \"{extra}\": Cannot find field."),
        ));
    }
    let Some(contents) = body["contents"].as_array() else {
        return Err(error(
            400,
            "* GenerateContentRequest.contents: contents is not specified",
        ));
    };
    for c in contents {
        if !matches!(c["role"].as_str(), Some("user" | "model")) {
            return Err(error(400, "Please use a valid role: user, model."));
        }
        if c["parts"].as_array().is_none_or(|p| p.is_empty()) {
            return Err(error(
                400,
                "* GenerateContentRequest.contents.parts: contents.parts must not be empty.",
            ));
        }
        for part in c["parts"].as_array().into_iter().flatten() {
            if let Some(blob) = part.get("inlineData") {
                check_blob(blob)?;
            }
        }
    }
    Ok(())
}

/// An `inlineData` blob: a MIME type and base64 `data`, checked against
/// the type when it is an image.
fn check_blob(blob: &Value) -> Result<(String, usize), Reply> {
    let (Some(mime), Some(data)) = (blob["mimeType"].as_str(), blob["data"].as_str()) else {
        return Err(error(
            400,
            "* GenerateContentRequest.contents.parts.inline_data: mimeType and data are required",
        ));
    };
    let format = match mime.strip_prefix("image/") {
        Some("jpg") => "jpeg",
        Some(f) => f,
        None => return Ok((mime.to_string(), data.len() / 4 * 3)),
    };
    let len = images::check(format, data)
        .map_err(|m| error(400, &format!("Unable to process input image. {m}")))?;
    Ok((mime.to_string(), len))
}

/// The inline blobs of every turn, as (MIME type, bytes).
fn images_seen(body: &Value) -> Vec<(String, usize)> {
    let contents = body["contents"].as_array().into_iter().flatten();
    let parts = contents.flat_map(|c| c["parts"].as_array().into_iter().flatten());
    parts
        .filter_map(|p| p.get("inlineData"))
        .filter_map(|b| check_blob(b).ok())
        .collect()
}

fn chosen_tool<'a>(body: &'a Value, prompt: &str) -> Option<&'a Value> {
    let decls = body.pointer("/tools/0/functionDeclarations")?.as_array()?;
    let config = body.pointer("/toolConfig/functionCallingConfig");
    let mode = config.and_then(|c| c["mode"].as_str());
    if let Some(name) = config.and_then(|c| c.pointer("/allowedFunctionNames/0")) {
        return decls.iter().find(|d| d.get("name") == Some(name));
    }
    if mode == Some("ANY") || (mode != Some("NONE") && prompt.contains("mock-tool-use")) {
        return decls.first();
    }
    None
}

fn tool_args(decl: &Value) -> Value {
    let mut args = Map::new();
    let props = decl
        .pointer("/parameters/properties")
        .and_then(Value::as_object);
    for (name, schema) in props.into_iter().flatten() {
        let value = match schema.get("type").and_then(Value::as_str) {
            Some("integer" | "number" | "INTEGER" | "NUMBER") => json!(1),
            Some("boolean" | "BOOLEAN") => json!(true),
            _ => json!("mock"),
        };
        args.insert(name.clone(), value);
    }
    Value::Object(args)
}

fn sse(value: &Value, delay_ms: u64) -> Event {
    let mut data = b"data: ".to_vec();
    data.extend_from_slice(value.to_string().as_bytes());
    data.extend_from_slice(b"\r\n\r\n");
    Event { delay_ms, data }
}

/// Answers a `generateContent` or `streamGenerateContent` request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let Some((model, stream)) = parse_path(ctx.req.path()) else {
        return error(404, "unknown method");
    };
    if let Err(refusal) = check(ctx, body, stream) {
        return refusal;
    }
    let prompt = body["contents"].to_string();
    if prompt.contains("mock-context-window") {
        return error(
            400,
            "The input token count (2000000) exceeds the maximum number of tokens allowed (1048576).",
        );
    }
    let chars = tokens::content_chars(&body["contents"])
        + body["contents"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| tokens::content_chars(&c["parts"]))
            .sum::<usize>();
    let prompt_tokens = tokens::estimate(chars);
    let max = body
        .pointer("/generationConfig/maxOutputTokens")
        .and_then(Value::as_u64);
    let completion = max.map_or(ctx.controls.completion_tokens, |m| {
        m.min(ctx.controls.completion_tokens)
    });
    let usage = json!({
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": completion,
        "totalTokenCount": prompt_tokens + completion,
    });
    let counted = Usage {
        prompt: prompt_tokens,
        completion,
    };
    let tool = chosen_tool(body, &prompt);
    let call = tool.map(|d| json!({"functionCall": {"name": d["name"], "args": tool_args(d)}}));
    let version = model.to_string();
    if !stream {
        let text = if prompt.contains("mock-describe-images") {
            images::describe(&images_seen(body))
        } else {
            tokens::text(completion)
        };
        let mut parts = vec![json!({"text": text})];
        parts.extend(call);
        let answer = json!({
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage,
            "modelVersion": version,
            "responseId": format!("mock-{}", ctx.id),
        });
        return Reply::ok(&answer, counted);
    }
    let mut events = Vec::new();
    for i in 0..completion {
        let piece = json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": tokens::piece(i, completion)}]}, "index": 0}],
            "usageMetadata": {"promptTokenCount": prompt_tokens, "totalTokenCount": prompt_tokens},
            "modelVersion": version,
            "responseId": format!("mock-{}", ctx.id),
        });
        events.push(sse(&piece, ctx.token_delay(i)));
    }
    let last_parts: Vec<Value> = call.into_iter().collect();
    let last_parts = if last_parts.is_empty() {
        vec![json!({"text": ""})]
    } else {
        last_parts
    };
    events.push(sse(
        &json!({
            "candidates": [{"content": {"role": "model", "parts": last_parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": usage,
            "modelVersion": version,
            "responseId": format!("mock-{}", ctx.id),
        }),
        if completion == 0 { ctx.controls.ttft_ms } else { 0 },
    ));
    Reply::stream(events, counted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::{test_request, Body};
    use crate::mock::controls::Controls;

    fn run(target: &str, headers: &[(&str, &str)], body: Value) -> Reply {
        let controls = Controls {
            completion_tokens: 3,
            ..Controls::default()
        };
        let req = test_request(target, headers);
        let ctx = Ctx {
            id: 1,
            created: 0,
            model: "m",
            controls: &controls,
            req: &req,
        };
        handle(&ctx, &body)
    }

    #[test]
    fn keys_paths_and_bodies_are_checked() {
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        let key = [("x-goog-api-key", API_KEY)];
        let ok = run(
            "/v1beta/models/gemini-2.0-flash:generateContent",
            &key,
            body.clone(),
        );
        assert_eq!(ok.status, 200);
        let Body::Full(b) = ok.body else { panic!() };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            v["candidates"][0]["content"]["parts"][0]["text"],
            "lorem ipsum dolor"
        );
        assert_eq!(v["modelVersion"], "gemini-2.0-flash");
        let bad = run(
            "/v1beta/models/m:generateContent",
            &[("x-goog-api-key", "nope")],
            body.clone(),
        );
        assert_eq!(bad.status, 400);
        let by_query = run(
            &format!("/v1beta/models/m:generateContent?key={API_KEY}"),
            &[],
            body.clone(),
        );
        assert_eq!(by_query.status, 200);
        assert_eq!(
            run("/v1beta/models/m:streamGenerateContent", &key, body.clone()).status,
            400
        );
        let streamed = run("/v1beta/models/m:streamGenerateContent?alt=sse", &key, body);
        assert_eq!(streamed.status, 200);
        let Body::Stream(events) = streamed.body else {
            panic!()
        };
        assert_eq!(events.len(), 4);
        for bad in [
            json!({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}),
            json!({"contents": [{"role": "user", "parts": []}]}),
            json!({"contents": [], "model": "x"}),
        ] {
            assert_eq!(
                run("/v1beta/models/m:generateContent", &key, bad).status,
                400
            );
        }
        assert_eq!(parse_path("/v1/models/a:b"), None);
    }
}
