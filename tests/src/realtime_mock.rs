//! A mock of OpenAI's realtime API over WebSocket (`GET /v1/realtime?model=`,
//! and Azure OpenAI's `GET /openai/realtime?api-version=&deployment=`):
//! the opening handshake is checked as OpenAI checks it (path, `model`,
//! `Authorization: Bearer <key>`; Azure's deployment, api-version and
//! `api-key`; refusals are HTTP errors in OpenAI's body), then `session.created` is sent, and each client
//! `response.create` is answered with `response.created`, a
//! `response.text.delta` and a `response.done` carrying usage. After a
//! `conversation.item.create` with message text, the next response echoes
//! it (`You said: <text>`) in OpenAI's full sequence: the output item and
//! content part added, the text in deltas of 8 bytes, `response.text.done`,
//! the part and item done, then `response.done`. A `response.cancel` with
//! no response in progress (this mock finishes each at once) gets OpenAI's
//! `response_cancel_not_active` error; an unknown event gets OpenAI's
//! `error` event. Client frames must be masked (the
//! server side refuses unmasked ones, as RFC 6455 requires). What each
//! handshake carried is recorded for the tests.

use serde_json::{json, Value};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;
use tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tungstenite::{Message, WebSocket};

/// The usage of every `response.done` the mock sends.
pub const USAGE: Usage = Usage {
    input_text: 40,
    input_audio: 60,
    cached: 20,
    output_text: 10,
    output_audio: 30,
};

/// Token counts of a `response.done`.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// Input text tokens.
    pub input_text: u64,
    /// Input audio tokens.
    pub input_audio: u64,
    /// Cached input tokens (of the input).
    pub cached: u64,
    /// Output text tokens.
    pub output_text: u64,
    /// Output audio tokens.
    pub output_audio: u64,
}

impl Usage {
    /// All input tokens.
    pub fn input(&self) -> u64 {
        self.input_text + self.input_audio
    }

    /// All output tokens.
    pub fn output(&self) -> u64 {
        self.output_text + self.output_audio
    }
}

/// One opening handshake the mock received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Path and query.
    pub uri: String,
    /// Headers, names lowercase.
    pub headers: Vec<(String, String)>,
    /// Whether it was accepted.
    pub accepted: bool,
}

impl Seen {
    /// The value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The mock, stopped on drop.
pub struct RealtimeMock {
    port: u16,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Seen>>>,
    events: Arc<Mutex<Vec<Value>>>,
}

impl RealtimeMock {
    /// Serves sessions for `model` with the upstream key `key`.
    pub fn start(model: &str, key: &str) -> RealtimeMock {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind realtime mock");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let port = listener.local_addr().expect("local addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let events = Arc::new(Mutex::new(Vec::new()));
        let (s, sn, ev) = (stop.clone(), seen.clone(), events.clone());
        let (model, key) = (model.to_string(), key.to_string());
        thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (sn, ev, model, key) =
                            (sn.clone(), ev.clone(), model.clone(), key.clone());
                        thread::spawn(move || session(stream, &model, &key, &sn, &ev));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        RealtimeMock {
            port,
            stop,
            seen,
            events,
        }
    }

    /// `http://127.0.0.1:<port>/v1`, the api_base of a deployment on it.
    pub fn api_base(&self) -> String {
        crate::config::mock_api_base(self.port)
    }

    /// `http://127.0.0.1:<port>`, the api_base of an Azure deployment on it.
    pub fn azure_base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The handshakes received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The client events received so far.
    pub fn events(&self) -> Vec<Value> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

impl Drop for RealtimeMock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn refusal(status: u16, code: &str, message: &str) -> ErrorResponse {
    let body = json!({"error": {"type": "invalid_request_error", "code": code, "message": message, "param": null}});
    let body = body.to_string();
    let length = body.len();
    let mut resp = ErrorResponse::new(Some(body));
    *resp.status_mut() = tungstenite::http::StatusCode::from_u16(status).expect("status");
    resp.headers_mut().insert(
        "content-type",
        tungstenite::http::HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        "content-length",
        tungstenite::http::HeaderValue::from(length),
    );
    resp
}

#[expect(
    clippy::result_large_err,
    reason = "tungstenite's handshake callback returns its own HTTP response as the error"
)]
fn session(
    stream: TcpStream,
    model: &str,
    key: &str,
    seen: &Mutex<Vec<Seen>>,
    events: &Mutex<Vec<Value>>,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let check = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
        let uri = req.uri().to_string();
        let headers = req
            .headers()
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_ascii_lowercase(),
                    v.to_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let mut record = Seen {
            uri: uri.clone(),
            headers,
            accepted: false,
        };
        let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
        let param = |name: &str| {
            req.uri().query().and_then(|q| {
                q.split('&')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .map(str::to_string)
            })
        };
        // OpenAI's route, or Azure OpenAI's (beta): the deployment and an
        // api-version in the query, the key in `api-key`.
        let verdict = match req.uri().path() {
            "/v1/realtime" if header("authorization") != Some(&format!("Bearer {key}")) => Err(
                refusal(401, "invalid_api_key", "Incorrect API key provided"),
            ),
            "/v1/realtime" if param("model").as_deref() != Some(model) => {
                Err(refusal(400, "invalid_model", "Model not found"))
            }
            "/openai/realtime" if header("api-key") != Some(key) => Err(refusal(
                401,
                "401",
                "Access denied due to invalid subscription key or wrong API endpoint.",
            )),
            "/openai/realtime"
                if param("deployment").as_deref() != Some(model)
                    || param("api-version").is_none() =>
            {
                Err(refusal(
                    404,
                    "DeploymentNotFound",
                    "The API deployment for this resource does not exist.",
                ))
            }
            "/v1/realtime" | "/openai/realtime" => Ok(resp),
            _ => Err(refusal(404, "not_found", "Invalid URL")),
        };
        record.accepted = verdict.is_ok();
        if let Ok(mut s) = seen.lock() {
            s.push(record);
        }
        verdict
    };
    let Ok(mut ws) = tungstenite::accept_hdr(stream, check) else {
        return;
    };
    let mut n = 0u64;
    let mut id = || {
        n += 1;
        format!("event_{n}")
    };
    let created = json!({
        "type": "session.created",
        "event_id": id(),
        "session": {"id": "sess_mock", "object": "realtime.session", "model": model, "modalities": ["text", "audio"]},
    });
    if send(&mut ws, &created).is_err() {
        return;
    }
    // The text of the last message item the client created, to echo.
    let mut said: Option<String> = None;
    loop {
        let message = match ws.read() {
            Ok(m) => m,
            Err(_) => return,
        };
        let text = match message {
            Message::Text(t) => t.to_string(),
            Message::Close(_) => {
                // tungstenite queued the close reply: flush it.
                let _ = ws.flush();
                return;
            }
            _ => continue,
        };
        let Ok(event) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if let Ok(mut e) = events.lock() {
            e.push(event.clone());
        }
        let answer = match event["type"].as_str() {
            Some("response.create") => match said.take() {
                Some(text) => echo(&mut ws, &mut id, &format!("You said: {text}")),
                None => respond(&mut ws, &mut id),
            },
            Some("conversation.item.create") => {
                let texts: Vec<&str> = event["item"]["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p["text"].as_str())
                    .collect();
                if !texts.is_empty() {
                    said = Some(texts.join(" "));
                }
                Ok(())
            }
            Some("response.cancel") => send(
                &mut ws,
                &json!({"type": "error", "event_id": id(), "error": {"type": "invalid_request_error",
                    "code": "response_cancel_not_active", "message": "Cancellation failed: no active response found",
                    "param": null, "event_id": event["event_id"]}}),
            ),
            Some("session.update" | "input_audio_buffer.append") => Ok(()),
            _ => send(
                &mut ws,
                &json!({"type": "error", "event_id": id(), "error": {"type": "invalid_request_error", "code": "unknown_event", "message": "Unknown event type", "param": null, "event_id": event["event_id"]}}),
            ),
        };
        if answer.is_err() {
            return;
        }
    }
}

fn respond(
    ws: &mut WebSocket<TcpStream>,
    id: &mut impl FnMut() -> String,
) -> Result<(), tungstenite::Error> {
    send(
        ws,
        &json!({"type": "response.created", "event_id": id(), "response": {"id": "resp_mock", "object": "realtime.response", "status": "in_progress", "output": [], "usage": null}}),
    )?;
    send(
        ws,
        &json!({"type": "response.text.delta", "event_id": id(), "response_id": "resp_mock", "item_id": "item_mock", "output_index": 0, "content_index": 0, "delta": "Hello"}),
    )?;
    let u = USAGE;
    send(
        ws,
        &json!({
            "type": "response.done",
            "event_id": id(),
            "response": {
                "id": "resp_mock", "object": "realtime.response", "status": "completed",
                "output": [{"id": "item_mock", "object": "realtime.item", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "Hello"}]}],
                "usage": {
                    "total_tokens": u.input() + u.output(),
                    "input_tokens": u.input(),
                    "output_tokens": u.output(),
                    "input_token_details": {"cached_tokens": u.cached, "text_tokens": u.input_text, "audio_tokens": u.input_audio, "cached_tokens_details": {"text_tokens": u.cached, "audio_tokens": 0}},
                    "output_token_details": {"text_tokens": u.output_text, "audio_tokens": u.output_audio},
                },
            },
        }),
    )
}

/// A response whose text is `text`, in OpenAI's full sequence of events.
fn echo(
    ws: &mut WebSocket<TcpStream>,
    id: &mut impl FnMut() -> String,
    text: &str,
) -> Result<(), tungstenite::Error> {
    let (rid, iid) = ("resp_echo", "item_echo");
    let item = |status: &str, text: Option<&str>| {
        let content: Vec<Value> = text
            .map(|t| json!({"type": "text", "text": t}))
            .into_iter()
            .collect();
        json!({"id": iid, "object": "realtime.item", "type": "message", "status": status,
            "role": "assistant", "content": content})
    };
    let at = json!({"response_id": rid, "item_id": iid, "output_index": 0, "content_index": 0});
    let with = |kind: &str, id: String, extra: Value| {
        let mut e = at.clone();
        e["type"] = json!(kind);
        e["event_id"] = json!(id);
        if let (Some(e), Some(extra)) = (e.as_object_mut(), extra.as_object()) {
            e.extend(extra.clone());
        }
        e
    };
    send(
        ws,
        &json!({"type": "response.created", "event_id": id(), "response": {"id": rid, "object": "realtime.response", "status": "in_progress", "output": [], "usage": null}}),
    )?;
    send(
        ws,
        &json!({"type": "response.output_item.added", "event_id": id(), "response_id": rid, "output_index": 0, "item": item("in_progress", None)}),
    )?;
    send(
        ws,
        &with(
            "response.content_part.added",
            id(),
            json!({"part": {"type": "text", "text": ""}}),
        ),
    )?;
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        let mut end = (start + 8).min(bytes.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        send(
            ws,
            &with(
                "response.text.delta",
                id(),
                json!({"delta": &text[start..end]}),
            ),
        )?;
        start = end;
    }
    send(ws, &with("response.text.done", id(), json!({"text": text})))?;
    send(
        ws,
        &with(
            "response.content_part.done",
            id(),
            json!({"part": {"type": "text", "text": text}}),
        ),
    )?;
    send(
        ws,
        &json!({"type": "response.output_item.done", "event_id": id(), "response_id": rid, "output_index": 0, "item": item("completed", Some(text))}),
    )?;
    let u = USAGE;
    send(
        ws,
        &json!({
            "type": "response.done",
            "event_id": id(),
            "response": {
                "id": rid, "object": "realtime.response", "status": "completed",
                "output": [item("completed", Some(text))],
                "usage": {
                    "total_tokens": u.input() + u.output(),
                    "input_tokens": u.input(),
                    "output_tokens": u.output(),
                    "input_token_details": {"cached_tokens": u.cached, "text_tokens": u.input_text, "audio_tokens": u.input_audio, "cached_tokens_details": {"text_tokens": u.cached, "audio_tokens": 0}},
                    "output_token_details": {"text_tokens": u.output_text, "audio_tokens": u.output_audio},
                },
            },
        }),
    )
}

fn send(ws: &mut WebSocket<TcpStream>, event: &Value) -> Result<(), tungstenite::Error> {
    ws.send(Message::text(event.to_string()))
}
