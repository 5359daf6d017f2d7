//! `POST …/audio/speech`: OpenAI's text to speech API with its checks: a
//! Bearer key (Azure paths have Azure's own check), `model`, `input` (a
//! string of at most 4096 characters) and `voice` (one of OpenAI's)
//! required, `response_format` and `speed` in range. The answer is binary
//! audio sent as it is "generated": chunked, in pieces of at most 4 KiB
//! (`chunk_delay_ms` apart), with the format's content type; its length is
//! 64 bytes per input character, starting with the format's magic bytes.

use serde_json::{json, Value};

use super::{Body, Ctx, Event, Reply, Usage};
use crate::mock::tokens;

const VOICES: &[&str] = &[
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
];
/// Longest `input`, in characters.
const MAX_INPUT_CHARS: usize = 4096;
/// Audio bytes per input character.
const BYTES_PER_CHAR: usize = 64;
/// Largest piece of audio written at once.
const PIECE: usize = 4096;

/// The content type and leading bytes of each `response_format`.
fn format(name: &str) -> Option<(&'static str, &'static [u8])> {
    Some(match name {
        "mp3" => ("audio/mpeg", b"ID3"),
        "opus" => ("audio/opus", b"OggS"),
        "aac" => ("audio/aac", b"\xff\xf1"),
        "flac" => ("audio/flac", b"fLaC"),
        "wav" => ("audio/wav", b"RIFF"),
        "pcm" => ("audio/pcm", b""),
        _ => return None,
    })
}

fn invalid(param: &str, message: &str) -> Reply {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": null}});
    Reply::json(400, serde_json::to_vec(&body).unwrap_or_default())
}

/// Answers a speech request.
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
    if !body.get("model").is_some_and(Value::is_string) {
        return invalid("model", "you must provide a model parameter");
    }
    let input = match body.get("input") {
        Some(Value::String(s)) if s.chars().count() <= MAX_INPUT_CHARS => s,
        Some(Value::String(_)) => {
            return invalid(
                "input",
                "[{'type': 'string_too_long', 'loc': ('body', 'input'), 'msg': 'String should have at most 4096 characters'}]",
            )
        }
        _ => return invalid("input", "Missing required parameter: 'input'."),
    };
    match body.get("voice").and_then(Value::as_str) {
        Some(v) if VOICES.contains(&v) => {}
        _ => {
            return invalid(
                "voice",
                &format!(
                    "Invalid value for 'voice'. Supported values are: {}.",
                    VOICES.join(", ")
                ),
            )
        }
    }
    let name = body
        .get("response_format")
        .and_then(Value::as_str)
        .unwrap_or("mp3");
    let Some((content_type, magic)) = format(name) else {
        return invalid(
            "response_format",
            "Invalid value for 'response_format'. Supported values are: 'mp3', 'opus', 'aac', 'flac', 'wav', and 'pcm'.",
        );
    };
    if let Some(speed) = body.get("speed") {
        if !speed.as_f64().is_some_and(|s| (0.25..=4.0).contains(&s)) {
            return invalid(
                "speed",
                "Invalid 'speed': expected a number from 0.25 to 4.0.",
            );
        }
    }
    let chars = input.chars().count();
    let mut audio = magic.to_vec();
    audio.resize(chars.max(1) * BYTES_PER_CHAR, 0x55);
    let pieces = audio
        .chunks(PIECE)
        .enumerate()
        .map(|(i, piece)| Event {
            delay_ms: if i == 0 {
                0
            } else {
                ctx.controls.chunk_delay_ms
            },
            data: piece.to_vec(),
        })
        .collect();
    Reply {
        status: 200,
        body: Body::Binary {
            content_type,
            pieces,
        },
        usage: Some(Usage {
            prompt: tokens::estimate(chars),
            completion: 0,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::test_request;
    use crate::mock::controls::Controls;

    fn call(headers: &[(&str, &str)], body: Value) -> Reply {
        let req = test_request("/v1/audio/speech", headers);
        let controls = Controls::default();
        let ctx = Ctx {
            id: 1,
            created: 1,
            model: "m",
            controls: &controls,
            req: &req,
        };
        handle(&ctx, &body)
    }

    const KEY: &[(&str, &str)] = &[("authorization", "Bearer sk-x")];

    #[test]
    fn answers_chunked_audio_of_the_asked_format() {
        let input = "x".repeat(100);
        let r = call(
            KEY,
            json!({"model": "tts-1", "input": input, "voice": "alloy", "response_format": "flac"}),
        );
        assert_eq!(r.content_type(), "audio/flac");
        let Body::Binary { pieces, .. } = r.body else {
            panic!()
        };
        assert_eq!(pieces.len(), 2);
        let audio: Vec<u8> = pieces.into_iter().flat_map(|p| p.data).collect();
        assert_eq!(audio.len(), 6400);
        assert!(audio.starts_with(b"fLaC"));
    }

    #[test]
    fn refuses_what_openai_refuses() {
        assert_eq!(call(&[], json!({"model": "tts-1"})).status, 401);
        for body in [
            json!({"input": "hi", "voice": "alloy"}),
            json!({"model": "tts-1", "voice": "alloy"}),
            json!({"model": "tts-1", "input": "hi"}),
            json!({"model": "tts-1", "input": "hi", "voice": "bob"}),
            json!({"model": "tts-1", "input": "hi", "voice": "alloy", "response_format": "ogg"}),
            json!({"model": "tts-1", "input": "hi", "voice": "alloy", "speed": 9}),
            json!({"model": "tts-1", "input": "x".repeat(4097), "voice": "alloy"}),
        ] {
            assert_eq!(call(KEY, body.clone()).status, 400, "{body}");
        }
    }
}
