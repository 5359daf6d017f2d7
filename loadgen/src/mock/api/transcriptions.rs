//! `POST …/audio/transcriptions`: OpenAI's speech to text API with its
//! checks: a Bearer key (Azure paths have Azure's own check), a
//! `multipart/form-data` body with a `file` part (a file name of a
//! supported format) and a `model` field, `response_format` among the
//! model's. The audio "lasts" one second per 16,000 bytes. Answers have
//! the real shapes: `json` (`text`, and `usage`: `duration` seconds for
//! `whisper`, tokens for the `gpt-4o` transcribers), `verbose_json`
//! (`task`, `language`, `duration`, `segments`), and `text`, `srt`, `vtt`
//! as plain text.
//!
//! `POST …/audio/translations` (OpenAI's speech to English text API) takes
//! the same form without `language`, `include`, `timestamp_granularities`
//! or `stream`, and only `whisper-1` (any Azure deployment); its `verbose_json` says
//! `"task": "translate"` and its answers carry no `usage`.

use serde_json::{json, Value};

use super::{Body, Ctx, Event, Reply, Usage};

/// Audio bytes per second.
const BYTES_PER_SECOND: usize = 16_000;
const FORMATS: &[&str] = &[
    "flac", "m4a", "mp3", "mp4", "mpeg", "mpga", "oga", "ogg", "wav", "webm",
];

fn invalid(param: &str, message: &str) -> Reply {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": null}});
    Reply::json(400, serde_json::to_vec(&body).unwrap_or_default())
}

/// One part: its name, file name and content.
pub(super) struct Part<'a> {
    pub(super) name: String,
    pub(super) filename: Option<String>,
    pub(super) content: &'a [u8],
}

/// The parts of a `multipart/form-data` body, or why it is malformed.
pub(super) fn parts<'a>(content_type: &str, body: &'a [u8]) -> Result<Vec<Part<'a>>, String> {
    let boundary = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("boundary="))
        .next()
        .map(|b| b.trim_matches('"'))
        .ok_or("no boundary")?;
    let delimiter = format!("--{boundary}");
    let text_at = |at: usize| &body[at.min(body.len())..];
    let find = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).position(|w| w == needle);
    let mut at = find(body, delimiter.as_bytes()).ok_or("no part")? + delimiter.len();
    let mut out = Vec::new();
    loop {
        let rest = text_at(at);
        if rest.starts_with(b"--") {
            return Ok(out);
        }
        let rest = rest.strip_prefix(b"\r\n").ok_or("bad delimiter")?;
        let head_end = find(rest, b"\r\n\r\n").ok_or("unterminated part headers")?;
        let head = String::from_utf8_lossy(&rest[..head_end]).to_string();
        let content = &rest[head_end + 4..];
        let end =
            find(content, format!("\r\n{delimiter}").as_bytes()).ok_or("unterminated part")?;
        let disposition = head
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))
            .ok_or("part without Content-Disposition")?;
        let param = |key: &str| {
            disposition.split(';').find_map(|p| {
                p.trim()
                    .strip_prefix(key)
                    .and_then(|v| v.strip_prefix('='))
                    .map(|v| v.trim_matches('"').to_string())
            })
        };
        out.push(Part {
            name: param("name").ok_or("part without a name")?,
            filename: param("filename"),
            content: &content[..end],
        });
        let consumed = body.len() - content.len() + end + 2 + delimiter.len();
        at = consumed;
    }
}

/// Fields of a transcription form that a translation form may not have.
const TRANSCRIPTION_ONLY: &[&str] = &[
    "language",
    "include[]",
    "timestamp_granularities[]",
    "stream",
    "chunking_strategy",
];

/// Answers a transcription request, or a translation one with `translate`
/// (its body is the raw form).
pub fn handle(ctx: &Ctx<'_>, translate: bool) -> Reply {
    let req = ctx.req;
    let azure = super::azure::deployment(req.path()).is_some();
    let bearer = req
        .header("authorization")
        .is_some_and(|a| a.len() > 7 && a[..7].eq_ignore_ascii_case("bearer "));
    if !azure && !bearer {
        let body = json!({"error": {"message": "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).", "type": "invalid_request_error", "param": null, "code": null}});
        return Reply::json(401, serde_json::to_vec(&body).unwrap_or_default());
    }
    let content_type = req.header("content-type").unwrap_or("");
    if !content_type.starts_with("multipart/form-data") {
        return invalid(
            "",
            &format!("Invalid Content-Type header ({content_type}), expected multipart/form-data."),
        );
    }
    let parts = match parts(content_type, &req.body) {
        Ok(p) => p,
        Err(why) => return invalid("", &format!("Could not parse multipart form: {why}")),
    };
    let field = |name: &str| {
        parts
            .iter()
            .find(|p| p.name == name && p.filename.is_none())
            .map(|p| String::from_utf8_lossy(p.content).to_string())
    };
    let Some(file) = parts
        .iter()
        .find(|p| p.name == "file" && p.filename.is_some())
    else {
        return invalid("file", "Missing required parameter: 'file'.");
    };
    let Some(model) = field("model") else {
        return invalid("model", "you must provide a model parameter");
    };
    if translate {
        if let Some(p) = parts
            .iter()
            .find(|p| TRANSCRIPTION_ONLY.contains(&p.name.as_str()))
        {
            return invalid(
                &p.name,
                &format!("Unrecognized request argument supplied: {}", p.name),
            );
        }
        // An Azure deployment's model is its own name.
        if !azure && model != "whisper-1" {
            return invalid(
                "model",
                &format!("The model `{model}` does not support translations. Use whisper-1."),
            );
        }
    }
    let filename = file.filename.clone().unwrap_or_default();
    let extension = filename
        .rsplit('.')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    if !FORMATS.contains(&extension.as_str()) {
        return invalid(
            "file",
            &format!("Invalid file format. Supported formats: {FORMATS:?}"),
        );
    }
    let tokens_model = model.contains("gpt-4o");
    let format = field("response_format").unwrap_or_else(|| "json".into());
    let allowed: &[&str] = if tokens_model {
        &["json", "text"]
    } else {
        &["json", "text", "srt", "verbose_json", "vtt"]
    };
    if !allowed.contains(&format.as_str()) {
        return invalid(
            "response_format",
            &format!("response_format '{format}' is not compatible with model '{model}'."),
        );
    }
    let seconds = file.content.len() as f64 / BYTES_PER_SECOND as f64;
    let text = match translate {
        true => format!("mock translation of {filename}"),
        false => format!("mock transcript of {filename}"),
    };
    let task = if translate { "translate" } else { "transcribe" };
    let audio_tokens = (seconds * 10.0).ceil() as u64;
    let text_tokens = (text.len() as u64).div_ceil(4);
    let usage = if tokens_model {
        json!({"type": "tokens", "input_tokens": audio_tokens, "input_token_details": {"text_tokens": 0, "audio_tokens": audio_tokens}, "output_tokens": text_tokens, "total_tokens": audio_tokens + text_tokens})
    } else {
        json!({"type": "duration", "seconds": seconds.ceil() as u64})
    };
    let counted = Usage {
        prompt: audio_tokens,
        completion: text_tokens,
    };
    let plain = |body: String| Reply {
        status: 200,
        body: Body::Binary {
            content_type: "text/plain; charset=utf-8",
            pieces: vec![Event {
                delay_ms: 0,
                data: body.into_bytes(),
            }],
        },
        usage: Some(counted),
    };
    match format.as_str() {
        "json" if translate => Reply::ok(&json!({"text": text}), counted),
        "json" => Reply::ok(&json!({"text": text, "usage": usage}), counted),
        "verbose_json" => {
            let answer: Value = json!({
                "task": task, "language": "english", "duration": seconds, "text": text,
                "segments": [{"id": 0, "seek": 0, "start": 0.0, "end": seconds, "text": text, "tokens": [50364], "temperature": 0.0, "avg_logprob": -0.2, "compression_ratio": 1.0, "no_speech_prob": 0.01}],
                "usage": usage,
            });
            Reply::ok(&answer, counted)
        }
        "text" => plain(format!("{text}\n")),
        "srt" => plain(format!("1\n00:00:00,000 --> 00:00:01,000\n{text}\n\n")),
        _ => plain(format!(
            "WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{text}\n\n"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::test_request;
    use crate::mock::controls::Controls;

    fn form(fields: &[(&str, &str)], file: Option<(&str, usize)>) -> Vec<u8> {
        let mut b = Vec::new();
        for (n, v) in fields {
            b.extend_from_slice(
                format!("--B\r\nContent-Disposition: form-data; name=\"{n}\"\r\n\r\n{v}\r\n")
                    .as_bytes(),
            );
        }
        if let Some((name, len)) = file {
            b.extend_from_slice(format!("--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\nContent-Type: audio/wav\r\n\r\n").as_bytes());
            b.extend(std::iter::repeat_n(7u8, len));
            b.extend_from_slice(b"\r\n");
        }
        b.extend_from_slice(b"--B--\r\n");
        b
    }

    fn call(body: Vec<u8>) -> (u16, Vec<u8>) {
        let mut req = test_request(
            "/v1/audio/transcriptions",
            &[
                ("authorization", "Bearer sk"),
                ("content-type", "multipart/form-data; boundary=B"),
            ],
        );
        req.body = body;
        let controls = Controls::default();
        let ctx = Ctx {
            id: 1,
            created: 1,
            model: "m",
            controls: &controls,
            req: &req,
        };
        let r = handle(&ctx, false);
        let bytes = match r.body {
            Body::Full(b) => b,
            Body::Binary { pieces, .. } => pieces.into_iter().flat_map(|p| p.data).collect(),
            _ => panic!(),
        };
        (r.status, bytes)
    }

    #[test]
    fn answers_in_each_format() {
        let (s, b) = call(form(&[("model", "whisper-1")], Some(("a.wav", 48_000))));
        assert_eq!(s, 200);
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["usage"]["seconds"], 3);
        let (_, b) = call(form(
            &[("model", "whisper-1"), ("response_format", "verbose_json")],
            Some(("a.mp3", 24_000)),
        ));
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["duration"], 1.5);
        let (_, b) = call(form(
            &[("model", "gpt-4o-transcribe")],
            Some(("a.wav", 16_000)),
        ));
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["usage"]["input_tokens"], 10);
        let (s, b) = call(form(
            &[("model", "whisper-1"), ("response_format", "text")],
            Some(("a.wav", 10)),
        ));
        assert_eq!((s, b), (200, b"mock transcript of a.wav\n".to_vec()));
    }

    #[test]
    fn refuses_what_openai_refuses() {
        for body in [
            form(&[("model", "whisper-1")], None),
            form(&[], Some(("a.wav", 10))),
            form(&[("model", "whisper-1")], Some(("a.txt", 10))),
            form(
                &[("model", "gpt-4o-transcribe"), ("response_format", "srt")],
                Some(("a.wav", 10)),
            ),
            b"--B\r\nno end".to_vec(),
        ] {
            assert_eq!(call(body).0, 400);
        }
    }
}
