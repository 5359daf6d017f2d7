//! `POST …/model/{modelId}/converse` and `…/converse-stream`: AWS Bedrock's
//! Converse API, with the checks the real endpoint makes: a SigV4
//! `authorization` recomputed with the mock's secret ([`SECRET`]) and
//! compared (a wrong key is a 403 `InvalidSignatureException`), an
//! `x-amz-date` within 15 minutes, service `bedrock`; `messages` present,
//! starting with a user turn, alternating roles, no empty content; no
//! unknown top-level fields. Answers have the real shapes: `output.message`,
//! `stopReason`, `usage` with cache counts, and streams in the binary
//! `application/vnd.amazon.eventstream` framing with real CRCs.
//!
//! Behaviour: `toolConfig.toolChoice` `any`/`tool` (or a prompt containing
//! `mock-tool-use`) answers with a `toolUse` block; a prompt containing
//! `mock-context-window` is refused as too long; `x-mock-cache-read-tokens`
//! and `x-mock-cache-creation-tokens` set the cache counts. `image` blocks
//! must carry base64 `bytes` of their `format` (png, jpeg, gif, webp), as
//! Converse takes no URLs; `mock-describe-images` lists them (`images`).

use gateway::deployment::Credentials;
use gateway::providers::eventstream::encode_event;
use gateway::providers::sigv4::{self, SigningInput};
use serde_json::{json, Map, Value};

use super::{images, to_json, Ctx, Event, Reply, Usage};
use crate::mock::tokens;

/// The secret access key the mock signs with (any access key id).
pub const SECRET: &str = "mock-aws-secret-access-key";

/// Top-level fields the Converse API accepts.
const KNOWN_FIELDS: &[&str] = &[
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "guardrailConfig",
    "additionalModelRequestFields",
    "additionalModelResponseFieldPaths",
    "promptVariables",
    "requestMetadata",
    "performanceConfig",
];

/// The model id and whether the path asks for a stream, for a Converse path.
pub fn parse_path(path: &str) -> Option<(String, bool)> {
    let (rest, stream) = if let Some(r) = path.strip_suffix("/converse-stream") {
        (r, true)
    } else {
        (path.strip_suffix("/converse")?, false)
    };
    let (_, id) = rest.rsplit_once("/model/")?;
    let id = percent_decode(id)?;
    Some((id, stream))
}

/// `s` with its `%XX` escapes decoded.
pub fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// An error reply in Bedrock's shape.
pub fn error(status: u16, message: &str) -> Reply {
    Reply::json(status, to_json(&json!({ "message": message })))
}

/// Verifies the SigV4 signature as AWS does.
pub fn check_signature(ctx: &Ctx<'_>) -> Result<(), Reply> {
    let req = ctx.req;
    let Some(auth) = req.header("authorization") else {
        return Err(error(403, "Missing Authentication Token"));
    };
    let Some(rest) = auth.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return Err(error(403, "Authorization header requires AWS4-HMAC-SHA256"));
    };
    let mut credential = None;
    let mut signed = None;
    let mut signature = None;
    for part in rest.split(',').map(str::trim) {
        match part.split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => {}
        }
    }
    let (Some(credential), Some(signed), Some(signature)) = (credential, signed, signature) else {
        return Err(error(403, "Authorization header is malformed"));
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let [key_id, date, region, service, "aws4_request"] = scope[..] else {
        return Err(error(403, "Credential scope is malformed"));
    };
    if service != "bedrock" {
        return Err(error(
            403,
            "Credential should be scoped to correct service: 'bedrock'",
        ));
    }
    let Some(amz_date) = req.header("x-amz-date") else {
        return Err(error(403, "x-amz-date is required"));
    };
    if !amz_date.starts_with(date) || !fresh(amz_date) {
        return Err(error(
            403,
            "Signature expired or date does not match the scope",
        ));
    }
    let names: Vec<&str> = signed.split(';').collect();
    for required in ["host", "x-amz-date"] {
        if !names.contains(&required) {
            return Err(error(403, &format!("{required} must be signed")));
        }
    }
    let mut headers = Vec::with_capacity(names.len());
    for name in &names {
        let Some(value) = req.header(name) else {
            return Err(error(403, &format!("signed header {name} is missing")));
        };
        headers.push((name.to_string(), value.trim().to_string()));
    }
    let creds = Credentials {
        access_key_id: key_id.to_string(),
        secret_access_key: SECRET.to_string(),
        session_token: None,
    };
    let input = SigningInput {
        method: &req.method,
        path: req.path(),
        query: req.target.split_once('?').map_or("", |(_, q)| q),
        headers: &[],
        payload: &[&req.body],
        amz_date,
        region,
        service,
        double_encode: true,
    };
    let expected = sigv4::signature(&creds, &input, &mut headers);
    if expected != signature {
        return Err(error(
            403,
            "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method.",
        ));
    }
    Ok(())
}

/// Whether `amz_date` (`YYYYMMDD'T'HHMMSS'Z'`) is within 15 minutes of now.
fn fresh(amz_date: &str) -> bool {
    let Ok(t) = chrono::NaiveDateTime::parse_from_str(amz_date, "%Y%m%dT%H%M%SZ") else {
        return false;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    (t.and_utc().timestamp() - now).abs() <= 900
}

/// The checks of the request body.
fn check_body(body: &Value) -> Result<(), Reply> {
    let Some(obj) = body.as_object() else {
        return Err(error(400, "request body must be an object"));
    };
    if let Some(extra) = obj.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())) {
        return Err(error(
            400,
            &format!("Malformed input request: extraneous key [{extra}] is not permitted"),
        ));
    }
    let Some(messages) = body["messages"].as_array() else {
        return Err(error(400, "Malformed input request: messages is required"));
    };
    let mut last = "";
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or_default();
        if i == 0 && role != "user" {
            return Err(error(400, "A conversation must start with a user message."));
        }
        if !matches!(role, "user" | "assistant") || role == last {
            return Err(error(
                400,
                "A conversation must alternate between user and assistant roles.",
            ));
        }
        last = role;
        let content = m["content"].as_array();
        if content.is_none_or(|c| c.is_empty()) {
            return Err(error(
                400,
                "The content field in the Message object is empty.",
            ));
        }
        for block in content.into_iter().flatten() {
            if block["text"].as_str() == Some("") {
                return Err(error(
                    400,
                    "The text field in the ContentBlock object is blank.",
                ));
            }
            if let Some(image) = block.get("image") {
                check_image(image)?;
            }
        }
    }
    Ok(())
}

/// An `ImageBlock`: a known `format` and `source.bytes` of that format.
fn check_image(image: &Value) -> Result<(String, usize), Reply> {
    let format = image["format"].as_str().unwrap_or_default();
    if !matches!(format, "png" | "jpeg" | "gif" | "webp") {
        return Err(error(
            400,
            &format!("Malformed input request: #/messages/content/image/format: {format} is not a valid enum value"),
        ));
    }
    let Some(data) = image.pointer("/source/bytes").and_then(Value::as_str) else {
        return Err(error(
            400,
            "Malformed input request: #/messages/content/image/source: bytes is required",
        ));
    };
    let len = images::check(format, data).map_err(|m| error(400, &m))?;
    Ok((format!("image/{format}"), len))
}

/// The images of every message, as (media type, bytes).
fn images_seen(body: &Value) -> Vec<(String, usize)> {
    let messages = body["messages"].as_array().into_iter().flatten();
    let blocks = messages.flat_map(|m| m["content"].as_array().into_iter().flatten());
    blocks
        .filter_map(|b| b.get("image"))
        .filter_map(|i| check_image(i).ok())
        .collect()
}

fn header_count(ctx: &Ctx<'_>, name: &str) -> u64 {
    ctx.req
        .header(name)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The tool to call, if this request gets a `toolUse` answer.
fn chosen_tool<'a>(body: &'a Value, prompt: &str) -> Option<&'a Value> {
    let tools = body.pointer("/toolConfig/tools")?.as_array()?;
    let choice = body.pointer("/toolConfig/toolChoice");
    if let Some(name) = choice.and_then(|c| c.pointer("/tool/name")) {
        return tools
            .iter()
            .find(|t| t.pointer("/toolSpec/name") == Some(name));
    }
    if choice.is_some_and(|c| c.get("any").is_some()) || prompt.contains("mock-tool-use") {
        return tools.first();
    }
    None
}

fn tool_input(tool: &Value) -> Value {
    let mut input = Map::new();
    let props = tool
        .pointer("/toolSpec/inputSchema/json/properties")
        .and_then(Value::as_object);
    for (name, schema) in props.into_iter().flatten() {
        let value = match schema.get("type").and_then(Value::as_str) {
            Some("integer" | "number") => json!(1),
            Some("boolean") => json!(true),
            _ => json!("mock"),
        };
        input.insert(name.clone(), value);
    }
    Value::Object(input)
}

fn frame(event: &str, payload: Value, delay_ms: u64) -> Event {
    Event {
        delay_ms,
        data: encode_event(event, payload.to_string().as_bytes()),
    }
}

/// Answers a Converse or ConverseStream request.
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    if let Err(refusal) = check_signature(ctx).and_then(|()| check_body(body)) {
        return refusal;
    }
    let Some((_model, stream)) = parse_path(ctx.req.path()) else {
        return error(404, "unknown operation");
    };
    let prompt = body["messages"].to_string();
    if prompt.contains("mock-context-window") {
        return error(400, "Input is too long for requested model.");
    }
    let max = body
        .pointer("/inferenceConfig/maxTokens")
        .and_then(Value::as_u64);
    let completion = max.map_or(ctx.controls.completion_tokens, |m| {
        m.min(ctx.controls.completion_tokens)
    });
    let prompt_tokens = tokens::estimate(tokens::messages_chars(body));
    let cache_read = header_count(ctx, "x-mock-cache-read-tokens");
    let cache_write = header_count(ctx, "x-mock-cache-creation-tokens");
    let usage = json!({
        "inputTokens": prompt_tokens,
        "outputTokens": completion,
        "totalTokens": prompt_tokens + completion + cache_read + cache_write,
        "cacheReadInputTokens": cache_read,
        "cacheWriteInputTokens": cache_write,
    });
    let counted = Usage {
        prompt: prompt_tokens + cache_read + cache_write,
        completion,
    };
    let tool = chosen_tool(body, &prompt);
    let stop = if tool.is_some() {
        "tool_use"
    } else {
        "end_turn"
    };
    let tool_id = format!("tooluse_mock_{}", ctx.id);
    if !stream {
        let text = if prompt.contains("mock-describe-images") {
            images::describe(&images_seen(body))
        } else {
            tokens::text(completion)
        };
        let mut content = vec![json!({"text": text})];
        if let Some(tool) = tool {
            content.push(json!({"toolUse": {"toolUseId": tool_id, "name": tool["toolSpec"]["name"], "input": tool_input(tool)}}));
        }
        let answer = json!({
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop,
            "usage": usage,
            "metrics": {"latencyMs": 1},
        });
        return Reply::ok(&answer, counted);
    }
    let mut events = vec![frame("messageStart", json!({"role": "assistant"}), 0)];
    for i in 0..completion {
        events.push(frame(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": tokens::piece(i, completion)}}),
            ctx.token_delay(i),
        ));
    }
    events.push(frame(
        "contentBlockStop",
        json!({"contentBlockIndex": 0}),
        0,
    ));
    if let Some(tool) = tool {
        let start = json!({"toolUse": {"toolUseId": tool_id, "name": tool["toolSpec"]["name"]}});
        events.push(frame(
            "contentBlockStart",
            json!({"contentBlockIndex": 1, "start": start}),
            0,
        ));
        let args = tool_input(tool).to_string();
        let (a, b) = args.split_at(args.len() / 2);
        for part in [a, b] {
            events.push(frame(
                "contentBlockDelta",
                json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": part}}}),
                0,
            ));
        }
        events.push(frame(
            "contentBlockStop",
            json!({"contentBlockIndex": 1}),
            0,
        ));
    }
    events.push(frame("messageStop", json!({ "stopReason": stop }), 0));
    events.push(frame(
        "metadata",
        json!({"usage": usage, "metrics": {"latencyMs": 1}}),
        0,
    ));
    Reply::event_stream(events, counted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::{test_request, Body};
    use crate::mock::controls::Controls;

    fn signed(path: &str, body: &Value, secret: &str) -> crate::mock::http::Request {
        let bytes = body.to_string().into_bytes();
        let amz_date = sigv4::amz_date(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64,
        );
        let creds = Credentials {
            access_key_id: "AKID".into(),
            secret_access_key: secret.into(),
            session_token: None,
        };
        let out = sigv4::sign(
            &creds,
            &SigningInput {
                method: "POST",
                path,
                query: "",
                headers: &[("host", "mock:1")],
                payload: &[&bytes],
                amz_date: &amz_date,
                region: "us-east-1",
                service: "bedrock",
                double_encode: true,
            },
        );
        let mut headers: Vec<(&str, &str)> = vec![("host", "mock:1")];
        headers.extend(out.iter().map(|(n, v)| (*n, v.as_str())));
        let mut req = test_request(path, &headers);
        req.body = bytes;
        req
    }

    fn run(path: &str, body: Value, secret: &str) -> Reply {
        let req = signed(path, &body, secret);
        let controls = Controls {
            completion_tokens: 3,
            ..Controls::default()
        };
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
    fn signatures_are_verified() {
        let body = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]});
        let path = "/model/anthropic.claude-v2%3A1/converse";
        let ok = run(path, body.clone(), SECRET);
        assert_eq!(ok.status, 200);
        let Body::Full(b) = ok.body else { panic!() };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["stopReason"], "end_turn");
        assert_eq!(run(path, body, "wrong").status, 403);
        assert_eq!(
            parse_path(path),
            Some(("anthropic.claude-v2:1".into(), false))
        );
    }

    #[test]
    fn bodies_are_checked_and_streams_framed() {
        let path = "/model/m/converse-stream";
        for bad in [
            json!({"messages": [{"role": "assistant", "content": [{"text": "x"}]}]}),
            json!({"messages": [{"role": "user", "content": []}]}),
            json!({"messages": [{"role": "user", "content": [{"text": "a"}]}, {"role": "user", "content": [{"text": "b"}]}]}),
            json!({"messages": [], "model": "x"}),
            json!({"messages": [{"role": "user", "content": [{"image": {"format": "png", "source": {"bytes": "/9j/4AAQ"}}}]}]}),
            json!({"messages": [{"role": "user", "content": [{"image": {"format": "tiff", "source": {"bytes": "AAAA"}}}]}]}),
            json!({"messages": [{"role": "user", "content": [{"image": {"format": "png", "source": {"url": "https://x/y.png"}}}]}]}),
        ] {
            assert_eq!(run(path, bad, SECRET).status, 400);
        }
        let jpeg = json!({"messages": [{"role": "user", "content": [{"text": "mock-describe-images"}, {"image": {"format": "jpeg", "source": {"bytes": "/9j/4AAQ"}}}]}]});
        let Body::Full(answer) = run("/model/m/converse", jpeg, SECRET).body else {
            panic!()
        };
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(
            answer["output"]["message"]["content"][0]["text"],
            "image/jpeg 6"
        );
        let body = json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}], "inferenceConfig": {"maxTokens": 3}});
        let reply = run(path, body, SECRET);
        assert_eq!(reply.content_type(), "application/vnd.amazon.eventstream");
        let Body::EventStream(events) = reply.body else {
            panic!()
        };
        let bytes: Vec<u8> = events.into_iter().flat_map(|e| e.data).collect();
        let mut n = 0;
        gateway::providers::eventstream::Decoder::new()
            .feed(&bytes, &mut |_| {
                n += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(n, 7, "start, 3 deltas, block stop, stop, metadata");
    }
}
