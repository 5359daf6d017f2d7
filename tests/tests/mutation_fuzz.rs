//! End-to-end mutation fuzzing: a few thousand mutated requests (byte flips,
//! truncations, duplicated and oversized headers, wrong Content-Length, bad
//! chunked framing, random JSON in every body field the gateway reads) sent
//! to a live gateway in front of the mock provider, from a fixed seed and
//! within a time bound. The gateway must never die, every answer must be a
//! well-formed HTTP/1.1 response (or a clean close), an error must be in
//! the OpenAI shape, and a normal request must still succeed afterwards.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use e2e::{base_config, chat_body, Gateway, MockServer, MASTER_KEY};
use fastrand::Rng;
use serde_json::{json, Value};

/// The seed every run starts from, so a failure reproduces.
const SEED: u64 = 0x6a7e_fa22;
/// Requests to send, unless the time bound ends the run first.
const CASES: usize = 4000;
/// The time bound of the sending loop.
const TIME_BOUND: Duration = Duration::from_secs(40);
/// The body fields the gateway reads.
const FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "user",
    "fallbacks",
    "num_retries",
    "metadata",
    "stream_options",
];

/// A random JSON value of any type, with edge-case numbers and strings.
fn random_value(rng: &mut Rng, depth: u32) -> Value {
    match rng.u8(0..12) {
        0 => Value::Null,
        1 => Value::Bool(rng.bool()),
        2 => {
            let edges = [
                json!(0),
                json!(-1),
                json!(1),
                json!(u64::MAX),
                json!(i64::MIN),
                json!(18_446_744_071_562_067_968u64),
                json!(4_294_967_296u64),
                json!(1e300),
                json!(-0.5),
                json!(2.5),
            ];
            edges[rng.usize(0..edges.len())].clone()
        }
        3 => json!(rng.i64(..)),
        4 => {
            let texts = [
                "",
                "gpt-4o",
                "local-mock",
                "a\r\nx-injected: 1",
                "\u{0}",
                "\u{fffd}\u{1F600}",
                "os.environ/DATABASE_URL",
                "../../etc/passwd",
                "*",
            ];
            Value::String(texts[rng.usize(0..texts.len())].to_string())
        }
        5 => Value::String("x".repeat(rng.usize(0..70_000))),
        6 | 7 if depth < 4 => Value::Array(
            (0..rng.usize(0..4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        8 | 9 if depth < 4 => {
            let keys = [
                "role",
                "content",
                "include_usage",
                "gpt-4o",
                "local-mock",
                "x",
            ];
            Value::Object(
                (0..rng.usize(0..4))
                    .map(|_| {
                        (
                            keys[rng.usize(0..keys.len())].to_string(),
                            random_value(rng, depth + 1),
                        )
                    })
                    .collect(),
            )
        }
        10 => {
            // Deep nesting: serde_json's recursion limit must answer, not crash.
            let n = rng.usize(1..300);
            Value::String(format!("{}{}", "[".repeat(n), "]".repeat(n)))
        }
        _ => json!([{"role": "user", "content": "hi"}]),
    }
}

/// A plausible value for `field`, so that many mutants pass validation and
/// reach routing, retries, fallbacks and the upstream.
fn plausible(rng: &mut Rng, field: &str) -> Value {
    match field {
        "model" => json!(["local-mock", "gpt-4o", "nope"][rng.usize(0..3)]),
        "messages" => json!([{"role": "user", "content": "hi"}]),
        "stream" => json!(rng.bool()),
        "max_tokens" | "max_completion_tokens" => json!(rng.u64(0..100)),
        "n" => json!(rng.u64(1..3)),
        "user" => json!(format!("end-user-{}", rng.u8(..))),
        "fallbacks" => [
            json!(["local-mock"]),
            json!(["gpt-4o"]),
            json!([{"gpt-4o": ["local-mock"]}]),
        ][rng.usize(0..3)]
        .clone(),
        "num_retries" => json!(rng.u64(0..3)),
        "metadata" => json!({"tag": "fuzz"}),
        _ => json!({"include_usage": rng.bool()}),
    }
}

/// A chat body: every field the gateway reads may be present, with a
/// plausible or a random value, in random order with random spacing (the
/// splice that removes `fallbacks` and `num_retries` depends on order).
fn body(rng: &mut Rng) -> Vec<u8> {
    let mut members: Vec<(&str, Value)> = vec![
        ("model", plausible(rng, "model")),
        ("messages", plausible(rng, "messages")),
    ];
    for field in &FIELDS[2..] {
        if rng.u8(0..3) == 0 {
            members.push((field, plausible(rng, field)));
        }
    }
    for _ in 0..rng.usize(0..=2) {
        let field = FIELDS[rng.usize(0..FIELDS.len())];
        let value = random_value(rng, 0);
        match members.iter_mut().find(|(k, _)| *k == field) {
            Some(member) => member.1 = value,
            None => members.push((field, value)),
        }
    }
    rng.shuffle(&mut members);
    let space = |rng: &mut Rng| ["", " ", "\n\t"][rng.usize(0..3)];
    let mut text = String::from("{");
    for (i, (k, v)) in members.iter().enumerate() {
        if i > 0 {
            text.push_str(space(rng));
            text.push(',');
        }
        text.push_str(&format!(
            "{}{k:?}{}:{}{v}",
            space(rng),
            space(rng),
            space(rng)
        ));
    }
    text.push_str(space(rng));
    text.push('}');
    // Raw nesting strings become real nesting now and then.
    if rng.u8(0..4) == 0 {
        text = text.replace("\"[[", "[[").replace("]]\"", "]]");
    }
    text.into_bytes()
}

/// Headers of a well-formed chat request with `body_len` bytes.
fn headers(body_len: usize) -> Vec<(String, String)> {
    vec![
        ("Host".into(), "127.0.0.1".into()),
        ("Authorization".into(), format!("Bearer {MASTER_KEY}")),
        ("Content-Type".into(), "application/json".into()),
        ("Content-Length".into(), body_len.to_string()),
    ]
}

fn assemble(request_line: &str, headers: &[(String, String)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{request_line}\r\n").into_bytes();
    for (k, v) in headers {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

fn chunk_encode(rng: &mut Rng, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let n = rng.usize(1..=rest.len().min(64));
        out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// One mutated request and what was done to it.
fn mutated_request(rng: &mut Rng) -> (String, Vec<u8>) {
    let line = "POST /v1/chat/completions HTTP/1.1";
    let body = body(rng);
    let mut h = headers(body.len());
    match rng.u8(0..10) {
        0..=3 => ("json fields".into(), assemble(line, &h, &body)),
        4 => {
            let mut bytes = assemble(line, &h, &body);
            for _ in 0..rng.usize(1..=8) {
                let i = rng.usize(0..bytes.len());
                match rng.u8(0..4) {
                    0 => bytes[i] ^= 1 << rng.u8(0..8),
                    1 => bytes[i] = b"\r\n\0: ;\"{}"[rng.usize(0..9)],
                    2 => bytes.insert(i, rng.u8(..)),
                    _ => {
                        bytes.remove(i);
                    }
                }
            }
            ("byte flips".into(), bytes)
        }
        5 => {
            let bytes = assemble(line, &h, &body);
            let cut = rng.usize(0..bytes.len());
            ("truncated".into(), bytes[..cut].to_vec())
        }
        6 => {
            let what = match rng.u8(0..5) {
                0 => {
                    h.push(("Content-Length".into(), (body.len() + 1).to_string()));
                    "conflicting Content-Length"
                }
                1 => {
                    h.push(("Transfer-Encoding".into(), "chunked".into()));
                    "Content-Length and Transfer-Encoding"
                }
                2 => {
                    h.push(("X-Big".into(), "v".repeat(70_000)));
                    "oversized header"
                }
                3 => {
                    for i in 0..rng.usize(50..200) {
                        h.push((format!("X-Dup-{}", i % 3), "1".into()));
                    }
                    "many duplicated headers"
                }
                _ => {
                    h.insert(1, ("Authorization".into(), "Bearer sk-wrong".into()));
                    "duplicated Authorization"
                }
            };
            (what.into(), assemble(line, &h, &body))
        }
        7 => {
            let len = match rng.u8(0..4) {
                0 => body.len().saturating_sub(rng.usize(1..=body.len().max(1))),
                1 => body.len() + rng.usize(1..100),
                2 => usize::MAX,
                _ => 0,
            };
            h[3].1 = if len == usize::MAX {
                "99999999999999999999".into()
            } else {
                len.to_string()
            };
            ("wrong Content-Length".into(), assemble(line, &h, &body))
        }
        _ => {
            h.pop();
            h.push(("Transfer-Encoding".into(), "chunked".into()));
            let mut wire = chunk_encode(rng, &body);
            for _ in 0..rng.usize(0..=3) {
                if wire.is_empty() {
                    break;
                }
                let i = rng.usize(0..wire.len());
                match rng.u8(0..5) {
                    0 => wire[i] = b'\n',
                    1 => wire.insert(i, b'\n'),
                    2 => drop(wire.splice(i..i, *b"ffffffffffffffffff")),
                    3 => drop(wire.splice(i..i, *b";ext=\"x\"")),
                    _ => wire.truncate(i),
                }
            }
            ("chunked framing".into(), assemble(line, &h, &wire))
        }
    }
}

/// Sends `bytes` on a new connection, half-closes, and reads everything the
/// gateway answers until it closes.
fn exchange(port: u16, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .map_err(|e| e.to_string())?;
    // The gateway may answer and close before reading everything (431,
    // 413): a failed write is not an error.
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            // A reset after the answer (unread request bytes) is a close.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(out),
            Err(e) => {
                return Err(format!(
                    "{e} after {} bytes: {:?}",
                    out.len(),
                    String::from_utf8_lossy(&out)
                ))
            }
        }
    }
}

/// One parsed response.
struct Answer {
    status: u16,
    content_type: Option<String>,
    body: Vec<u8>,
}

/// Splits `wire` into complete HTTP/1.1 responses; anything else is an error.
fn parse_answers(mut wire: &[u8]) -> Result<Vec<Answer>, String> {
    let mut answers = Vec::new();
    while !wire.is_empty() {
        let end = find(wire, b"\r\n\r\n").ok_or("incomplete response head")?;
        let head = std::str::from_utf8(&wire[..end]).map_err(|_| "head is not UTF-8")?;
        wire = &wire[end + 4..];
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status: u16 = status_line
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("bad status line {status_line:?}"))?;
        let mut length = None;
        let mut chunked = false;
        let mut content_type = None;
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| format!("bad header line {line:?}"))?;
            let value = value.trim();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => {
                    length = Some(value.parse::<usize>().map_err(|e| e.to_string())?)
                }
                "transfer-encoding" => chunked = value.eq_ignore_ascii_case("chunked"),
                "content-type" => content_type = Some(value.to_string()),
                _ => {}
            }
        }
        let body = if (100..200).contains(&status) {
            Vec::new()
        } else if chunked {
            let (body, used) = dechunk(wire)?;
            wire = &wire[used..];
            body
        } else if let Some(n) = length {
            let body = wire
                .get(..n)
                .ok_or("body shorter than Content-Length")?
                .to_vec();
            wire = &wire[n..];
            body
        } else {
            // Delimited by the close (HTTP/1.0 streams).
            let body = wire.to_vec();
            wire = &[];
            body
        };
        answers.push(Answer {
            status,
            content_type,
            body,
        });
    }
    Ok(answers)
}

fn dechunk(wire: &[u8]) -> Result<(Vec<u8>, usize), String> {
    let mut body = Vec::new();
    let mut at = 0;
    loop {
        let eol = find(&wire[at..], b"\r\n").ok_or("cut chunked body")? + at;
        let size_text = std::str::from_utf8(&wire[at..eol]).map_err(|_| "chunk size")?;
        let size = usize::from_str_radix(size_text, 16).map_err(|e| e.to_string())?;
        at = eol + 2;
        if size == 0 {
            if wire.get(at..at + 2) != Some(b"\r\n") {
                return Err("no CRLF after the last chunk".into());
            }
            return Ok((body, at + 2));
        }
        let data = wire.get(at..at + size).ok_or("cut chunk")?;
        body.extend_from_slice(data);
        at += size;
        if wire.get(at..at + 2) != Some(b"\r\n") {
            return Err("no CRLF after chunk data".into());
        }
        at += 2;
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// An error answer must be OpenAI's `{"error":{"message","type","param","code"}}`.
fn check_error_shape(answer: &Answer) -> Result<(), String> {
    if answer.status < 400 || answer.content_type.as_deref() != Some("application/json") {
        return Ok(());
    }
    let v: Value = serde_json::from_slice(&answer.body).map_err(|e| format!("error body: {e}"))?;
    let e = &v["error"];
    let ok = e["message"].is_string()
        && e["type"].is_string()
        && (e["param"].is_string() || e["param"].is_null())
        && e["code"] == Value::String(answer.status.to_string());
    if ok {
        Ok(())
    } else {
        Err(format!("error body not in the OpenAI shape: {v}"))
    }
}

#[test]
fn mutated_requests_never_kill_the_gateway() {
    let mock = MockServer::start(&[]);
    let mut gw = Gateway::start_json(&base_config(mock.port()), &[]);
    let mut rng = Rng::with_seed(SEED);
    let started = Instant::now();
    let mut sent = 0;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    while sent < CASES && started.elapsed() < TIME_BOUND {
        let (what, bytes) = mutated_request(&mut rng);
        sent += 1;
        let describe = || {
            format!(
                "case {sent} ({what}), request {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(2000)])
            )
        };
        let wire = exchange(gw.port(), &bytes);
        if let Some(status) = gw.wait_exit(Duration::ZERO) {
            panic!(
                "the gateway died ({status}) on {}\n{}",
                describe(),
                gw.output()
            );
        }
        let wire = wire.unwrap_or_else(|e| {
            panic!(
                "no clean answer (a core may have died): {e}\n{}\n{}",
                describe(),
                gw.output()
            )
        });
        let answers = parse_answers(&wire).unwrap_or_else(|e| {
            panic!(
                "malformed answer ({e}): {:?}\n{}",
                String::from_utf8_lossy(&wire),
                describe()
            )
        });
        for a in &answers {
            check_error_shape(a).unwrap_or_else(|e| panic!("{e}\n{}", describe()));
            *statuses.entry(a.status).or_default() += 1;
        }
    }
    assert!(sent >= 500, "only {sent} cases within {TIME_BOUND:?}");
    eprintln!("{sent} mutated requests; statuses {statuses:?}");
    // Some mutants pass as valid requests and some fail as each kind of error.
    assert!(
        statuses.contains_key(&200),
        "no mutant succeeded: {statuses:?}"
    );
    assert!(
        statuses.contains_key(&400),
        "no mutant was a 400: {statuses:?}"
    );
    // Still serving, streaming and not.
    let resp = gw.post("/v1/chat/completions", &chat_body("gpt-4o"));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let mut stream = chat_body("local-mock");
    stream["stream"] = json!(true);
    let resp = gw.post("/v1/chat/completions", &stream);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp.text().contains("[DONE]"), "{}", resp.text());
}
