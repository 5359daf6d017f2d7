//! A guardrail service speaking LiteLLM's `generic_guardrail_api`
//! contract (`POST /beta/litellm_basic_guardrail_api`), checking what
//! LiteLLM's client sends: the path, `content-type: application/json`,
//! the `x-api-key` it was given, and a body with `input_type`, `texts` and
//! `request_data`. Its verdict: any text with `BLOCKME` is `BLOCKED`, a
//! text with `secret` comes back with it replaced by `[SECRET]`
//! (`GUARDRAIL_INTERVENED`), anything else is `NONE`. Faults: slow, an
//! error status, garbage.
//!
//! [`GuardrailService::lakera`] speaks Lakera Guard's v2 API instead
//! (`POST /v2/guard`, `Authorization: Bearer`, a body with `messages` of
//! `{role, content}` strings): a message with "ignore previous
//! instructions" is `flagged` as a prompt attack.
//!
//! [`GuardrailService::presidio`] is Presidio's analyzer and anonymizer
//! in one (`POST /analyze` with `{text, language}`, `POST /anonymize` with
//! `{text, analyzer_results}`): it finds words with `@` (EMAIL_ADDRESS,
//! score 1.0), `123-45-6789` (US_SSN, 0.85) and `Smith` (PERSON, 0.4), and
//! anonymizes as Presidio's default does (`<ENTITY_TYPE>`). ASCII text
//! only (offsets are bytes).

use crate::gate::Gate;
use serde_json::{json, Value};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// How the service answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Behaviour {
    /// Judges the texts.
    Judge,
    /// Waits this long, then judges.
    Slow(Duration),
    /// Answers this status with an error body.
    Status(u16),
    /// Answers 200 with a body that is not JSON.
    Garbage,
    /// Answers 200 with a JSON verdict padded past 16 MiB (the most the
    /// gateway reads of a guardrail service's answer).
    Huge,
    /// Lakera Guard v2.
    Lakera,
    /// Presidio's analyzer and anonymizer.
    Presidio,
}

/// A running guardrail service.
pub struct GuardrailService {
    port: u16,
    stop: Arc<AtomicBool>,
    calls: Arc<AtomicUsize>,
    last: Arc<Mutex<Option<Value>>>,
    headers: Arc<Mutex<String>>,
    gate: Gate,
}

impl GuardrailService {
    /// Starts it on a free port; `api_key` is the `x-api-key` it demands.
    pub fn start(api_key: &str, behaviour: Behaviour) -> GuardrailService {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind guardrail service");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let port = listener.local_addr().expect("local addr").port();
        let service = GuardrailService {
            port,
            stop: Arc::new(AtomicBool::new(false)),
            calls: Arc::new(AtomicUsize::new(0)),
            last: Arc::new(Mutex::new(None)),
            headers: Arc::new(Mutex::new(String::new())),
            gate: Gate::default(),
        };
        let (stop, calls, last, headers, gate) = (
            service.stop.clone(),
            service.calls.clone(),
            service.last.clone(),
            service.headers.clone(),
            service.gate.clone(),
        );
        let key = api_key.to_string();
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (calls, last, headers, key, gate) = (
                            calls.clone(),
                            last.clone(),
                            headers.clone(),
                            key.clone(),
                            gate.clone(),
                        );
                        thread::spawn(move || {
                            serve(stream, &key, behaviour, (&calls, &last, &headers), &gate)
                        });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        service
    }

    /// A Lakera Guard v2 service demanding `api_key`.
    pub fn lakera(api_key: &str) -> GuardrailService {
        GuardrailService::start(api_key, Behaviour::Lakera)
    }

    /// Presidio's analyzer and anonymizer.
    pub fn presidio() -> GuardrailService {
        GuardrailService::start("", Behaviour::Presidio)
    }

    /// `http://127.0.0.1:<port>`: LiteLLM's `api_base` (the path is
    /// appended by the client).
    pub fn api_base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Calls answered (whatever the answer).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    /// The body of the last well-formed call.
    pub fn last(&self) -> Option<Value> {
        self.last.lock().ok().and_then(|l| l.clone())
    }

    /// The gate its answers wait at (open unless held): a call is read
    /// and counted at once, its answer waits.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The head of the last call, lower-cased.
    pub fn last_head(&self) -> String {
        self.headers.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

impl Drop for GuardrailService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

type Seen<'a> = (&'a AtomicUsize, &'a Mutex<Option<Value>>, &'a Mutex<String>);

fn serve(
    mut stream: TcpStream,
    key: &str,
    behaviour: Behaviour,
    (calls, last, headers): Seen<'_>,
    gate: &Gate,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    loop {
        let Some(len) = crate::raw_upstream::read_request(&mut stream, &mut buf) else {
            return;
        };
        let request: Vec<u8> = buf.drain(..len).collect();
        calls.fetch_add(1, Ordering::Relaxed);
        gate.pass();
        let (status, body) = answer(&request, key, behaviour, last, headers);
        let reply = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

fn answer(
    request: &[u8],
    key: &str,
    behaviour: Behaviour,
    last: &Mutex<Option<Value>>,
    headers: &Mutex<String>,
) -> (u16, String) {
    let end = request
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(request.len());
    let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
    if let Ok(mut h) = headers.lock() {
        *h = head.clone();
    }
    let body = &request[(end + 4).min(request.len())..];
    let detail = |status: u16, msg: &str| (status, json!({"detail": msg}).to_string());
    if behaviour == Behaviour::Lakera {
        return lakera(&head, body, key, last);
    }
    if behaviour == Behaviour::Presidio {
        return presidio(&head, body, last);
    }
    if !head.starts_with("post /beta/litellm_basic_guardrail_api ") {
        return detail(404, "Not Found");
    }
    if !head
        .lines()
        .any(|l| l == format!("x-api-key: {}", key.to_ascii_lowercase()))
    {
        return detail(401, "invalid x-api-key");
    }
    if !head
        .lines()
        .any(|l| l.starts_with("content-type: application/json"))
    {
        return detail(415, "content-type must be application/json");
    }
    let Ok(call) = serde_json::from_slice::<Value>(body) else {
        return detail(422, "body is not JSON");
    };
    let texts: Option<Vec<&str>> = call["texts"]
        .as_array()
        .and_then(|t| t.iter().map(Value::as_str).collect());
    let Some(texts) = texts else {
        return detail(422, "texts must be a list of strings");
    };
    if !matches!(call["input_type"].as_str(), Some("request" | "response"))
        || !call["request_data"].is_object()
    {
        return detail(422, "input_type and request_data are required");
    }
    if let Ok(mut l) = last.lock() {
        *l = Some(call.clone());
    }
    match behaviour {
        Behaviour::Status(s) => return detail(s, "guardrail service failing"),
        Behaviour::Garbage => return (200, "<html>oops</html>".to_string()),
        Behaviour::Huge => {
            let pad = " ".repeat(17 << 20);
            return (
                200,
                format!("{{\"action\": \"NONE\",{pad}\"texts\": null}}"),
            );
        }
        Behaviour::Slow(d) => thread::sleep(d),
        Behaviour::Judge | Behaviour::Lakera | Behaviour::Presidio => {}
    }
    if texts.iter().any(|t| t.contains("BLOCKME")) {
        let verdict =
            json!({"action": "BLOCKED", "blocked_reason": "policy 12: BLOCKME is not allowed"});
        return (200, verdict.to_string());
    }
    if texts.iter().any(|t| t.contains("secret")) {
        let texts: Vec<String> = texts
            .iter()
            .map(|t| t.replace("secret", "[SECRET]"))
            .collect();
        return (
            200,
            json!({"action": "GUARDRAIL_INTERVENED", "texts": texts}).to_string(),
        );
    }
    (200, json!({"action": "NONE"}).to_string())
}

/// Lakera Guard v2's answer to one call.
fn lakera(head: &str, body: &[u8], key: &str, last: &Mutex<Option<Value>>) -> (u16, String) {
    let error = |status: u16, msg: &str| (status, json!({"message": msg}).to_string());
    if !head.starts_with("post /v2/guard ") {
        return error(404, "Not Found");
    }
    let bearer = format!("authorization: bearer {}", key.to_ascii_lowercase());
    if !head.lines().any(|l| l == bearer) {
        return error(401, "Unauthorized");
    }
    let Ok(call) = serde_json::from_slice::<Value>(body) else {
        return error(400, "body is not JSON");
    };
    let messages: Option<Vec<&str>> = call["messages"].as_array().and_then(|m| {
        m.iter()
            .map(|m| m["role"].as_str().and(m["content"].as_str()))
            .collect()
    });
    let Some(messages) = messages else {
        return error(400, "messages must be a list of {role, content}");
    };
    if let Ok(mut l) = last.lock() {
        *l = Some(call.clone());
    }
    let flagged = messages.iter().any(|c| {
        c.to_ascii_lowercase()
            .contains("ignore previous instructions")
    });
    let answer = json!({
        "flagged": flagged,
        "breakdown": [{"project_id": "p", "policy_id": "pol", "detector_id": "d1",
            "detector_type": "prompt_attack", "detected": flagged}],
    });
    (200, answer.to_string())
}

/// Presidio's answer to one `/analyze` or `/anonymize` call.
fn presidio(head: &str, body: &[u8], last: &Mutex<Option<Value>>) -> (u16, String) {
    let error = |status: u16, msg: &str| (status, json!({"error": msg}).to_string());
    if !head
        .lines()
        .any(|l| l.starts_with("content-type: application/json"))
    {
        return error(415, "content-type must be application/json");
    }
    let Ok(call) = serde_json::from_slice::<Value>(body) else {
        return error(400, "body is not JSON");
    };
    let Some(text) = call["text"].as_str() else {
        return error(400, "text is required");
    };
    if head.starts_with("post /analyze ") {
        if call["language"].as_str().is_none() {
            return error(400, "language is required");
        }
        if let Ok(mut l) = last.lock() {
            *l = Some(call.clone());
        }
        let mut found = Vec::new();
        let mut at = 0;
        for word in text.split(' ') {
            let w = word.trim_end_matches(['.', ',']);
            let hit = if w.contains('@') {
                Some(("EMAIL_ADDRESS", 1.0))
            } else if w == "123-45-6789" {
                Some(("US_SSN", 0.85))
            } else if w == "Smith" {
                Some(("PERSON", 0.4))
            } else {
                None
            };
            if let Some((entity, score)) = hit {
                found.push(
                    json!({"entity_type": entity, "start": at, "end": at + w.len(),
                    "score": score, "analysis_explanation": null,
                    "recognition_metadata": {"recognizer_name": "mock"}}),
                );
            }
            at += word.len() + 1;
        }
        return (200, Value::Array(found).to_string());
    }
    if head.starts_with("post /anonymize ") {
        let Some(results) = call["analyzer_results"].as_array() else {
            return error(400, "analyzer_results is required");
        };
        let mut spans: Vec<(usize, usize, String)> = results
            .iter()
            .filter_map(|r| {
                Some((
                    r["start"].as_u64()? as usize,
                    r["end"].as_u64()? as usize,
                    r["entity_type"].as_str()?.to_string(),
                ))
            })
            .collect();
        spans.sort();
        let mut out = text.to_string();
        let mut items = Vec::new();
        for (start, end, entity) in spans.into_iter().rev() {
            if end > out.len() || start > end {
                return error(400, "offsets out of range");
            }
            out.replace_range(start..end, &format!("<{entity}>"));
            items.push(json!({"operator": "replace", "entity_type": entity}));
        }
        return (200, json!({"text": out, "items": items}).to_string());
    }
    error(404, "Not Found")
}
