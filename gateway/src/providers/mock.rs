//! The in-process `mock/` provider: answers in OpenAI's format without any
//! network, for the quickstart, tests and benchmarks. Reply text, token counts,
//! latency, chunk cadence and an error status come from the deployment.

use crate::deployment::MockSettings;
use crate::inbound::{Endpoint, LlmRequest};
use bytes::Bytes;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DEFAULT_REPLY: &str = "This is a mock response from the gateway's built-in mock provider.";

/// What the mock answers.
#[derive(Debug)]
pub enum MockReply {
    /// An injected error.
    Error {
        /// HTTP status.
        status: u16,
        /// Message.
        message: String,
    },
    /// A JSON body, or SSE events when streaming.
    Success {
        /// `application/json` or `text/event-stream`.
        content_type: &'static str,
        /// The body (one part) or the SSE events in order.
        parts: Vec<Bytes>,
        /// Delay before the first byte.
        latency: Duration,
        /// Delay between SSE events.
        chunk_delay: Duration,
        /// The usage event of a stream whose client did not ask for it,
        /// for the spend record only (a request's `mock_response`).
        unsent_usage: Option<Bytes>,
    },
}

/// Builds the mock's reply to `req`, naming `model` in it.
pub fn reply(req: &LlmRequest, model: &str, settings: &MockSettings) -> MockReply {
    if let Some(status) = settings.error_status {
        return MockReply::Error {
            status,
            message: format!("mock provider configured to fail with status {status}"),
        };
    }
    let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
    let text = body
        .get("mock_response")
        .and_then(Value::as_str)
        .or(settings.response.as_deref())
        .unwrap_or(DEFAULT_REPLY);
    let prompt_tokens = settings
        .prompt_tokens
        .unwrap_or_else(|| (req.body.len() as u64).div_ceil(4).max(1));
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    let completion_tokens = settings
        .completion_tokens
        .map_or(words.len() as u64, u64::from);
    let usage = json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    });
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let id = format!("chatcmpl-mock-{:016x}", fastrand::u64(..));
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let mut unsent_usage = None;
    let parts = match (req.endpoint, req.stream) {
        (Endpoint::Embeddings, _) => {
            let inputs = body
                .get("input")
                .and_then(Value::as_array)
                .map_or(1, Vec::len);
            let data: Vec<Value> = (0..inputs)
                .map(|i| json!({"object": "embedding", "index": i, "embedding": [0.0023, -0.0093, 0.0157, 0.0041, -0.0012, 0.0087, 0.0031, -0.0065]}))
                .collect();
            let usage = json!({"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens});
            vec![to_bytes(
                &json!({"object": "list", "data": data, "model": model, "usage": usage}),
            )]
        }
        (endpoint, false) => {
            let choice = match endpoint {
                Endpoint::Completions => {
                    json!({"index": 0, "text": text, "logprobs": null, "finish_reason": "stop"})
                }
                _ => {
                    json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"})
                }
            };
            let object = if endpoint == Endpoint::Completions {
                "text_completion"
            } else {
                "chat.completion"
            };
            vec![to_bytes(&json!({
                "id": id, "object": object, "created": created, "model": model,
                "choices": [choice], "usage": usage,
            }))]
        }
        (endpoint, true) => {
            let chat = endpoint == Endpoint::ChatCompletions;
            let object = if chat {
                "chat.completion.chunk"
            } else {
                "text_completion"
            };
            let chunk = |choice: Value| json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
            let mut events = Vec::with_capacity(words.len() + 3);
            for (i, word) in words.iter().enumerate() {
                let choice = if chat {
                    let delta = if i == 0 {
                        json!({"role": "assistant", "content": word})
                    } else {
                        json!({"content": word})
                    };
                    json!({"index": 0, "delta": delta, "finish_reason": null})
                } else {
                    json!({"index": 0, "text": word, "finish_reason": null})
                };
                events.push(sse(&chunk(choice)));
            }
            let last = if chat {
                json!({"index": 0, "delta": {}, "finish_reason": "stop"})
            } else {
                json!({"index": 0, "text": "", "finish_reason": "stop"})
            };
            events.push(sse(&chunk(last)));
            let usage_event = sse(
                &json!({"id": id, "object": object, "created": created, "model": model, "choices": [], "usage": usage}),
            );
            if include_usage {
                events.push(usage_event);
            } else if settings.prompt_tokens.is_some() {
                unsent_usage = Some(usage_event);
            }
            events.push(Bytes::from_static(b"data: [DONE]\n\n"));
            events
        }
    };
    MockReply::Success {
        content_type: if req.stream && req.endpoint != Endpoint::Embeddings {
            "text/event-stream"
        } else {
            "application/json"
        },
        parts,
        latency: settings.latency,
        chunk_delay: settings.chunk_delay,
        unsent_usage,
    }
}

fn to_bytes(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).expect("json"))
}

fn sse(v: &Value) -> Bytes {
    let mut out = b"data: ".to_vec();
    serde_json::to_writer(&mut out, v).expect("json");
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(endpoint: Endpoint, body: &str) -> LlmRequest {
        LlmRequest::parse(endpoint, Bytes::copy_from_slice(body.as_bytes())).unwrap()
    }

    #[test]
    fn streams_one_event_per_word_then_usage_and_done() {
        let settings = MockSettings {
            response: Some("a b c".into()),
            ..Default::default()
        };
        let r = req(
            Endpoint::ChatCompletions,
            r#"{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}"#,
        );
        let MockReply::Success {
            parts,
            content_type,
            ..
        } = reply(&r, "m", &settings)
        else {
            panic!()
        };
        assert_eq!(content_type, "text/event-stream");
        assert_eq!(parts.len(), 3 + 1 + 1 + 1);
        assert!(std::str::from_utf8(&parts[4])
            .unwrap()
            .contains("\"completion_tokens\":3"));
        assert_eq!(&parts[5][..], b"data: [DONE]\n\n");
    }

    #[test]
    fn embeddings_answer_every_input_and_errors_inject() {
        let r = req(Endpoint::Embeddings, r#"{"model":"m","input":["a","b"]}"#);
        let MockReply::Success { parts, .. } = reply(&r, "m", &MockSettings::default()) else {
            panic!()
        };
        let v: Value = serde_json::from_slice(&parts[0]).unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        let failing = MockSettings {
            error_status: Some(503),
            ..Default::default()
        };
        assert!(matches!(
            reply(&r, "m", &failing),
            MockReply::Error { status: 503, .. }
        ));
    }
}
