//! End-to-end checks of `loadgen mock` over real sockets, using a blocking
//! std client. Each test starts its own in-process server on port 0.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use loadgen::mock::{self, MockConfig};
use serde_json::Value;

fn server(config: MockConfig) -> SocketAddr {
    let server = mock::start(MockConfig {
        port: 0,
        workers: 2,
        ..config
    })
    .expect("start mock");
    let addr = server.addr();
    // Workers run for the rest of the test process.
    std::mem::forget(server);
    addr
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn post(path: &str, headers: &[&str], body: &str) -> String {
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    req.push_str(body);
    req
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// Reads one response from `s`, keeping any extra bytes in `buf`.
fn read_response(s: &mut TcpStream, buf: &mut Vec<u8>) -> Response {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        fill(s, buf);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    buf.drain(..head_end);
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    let mut response = Response {
        status,
        headers,
        body: Vec::new(),
    };
    if let Some(len) = response.header("content-length") {
        let len: usize = len.parse().unwrap();
        while buf.len() < len {
            fill(s, buf);
        }
        response.body = buf.drain(..len).collect();
    } else {
        loop {
            let line_end = loop {
                if let Some(i) = buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                fill(s, buf);
            };
            let size =
                usize::from_str_radix(std::str::from_utf8(&buf[..line_end]).unwrap(), 16).unwrap();
            while buf.len() < line_end + 2 + size + 2 {
                fill(s, buf);
            }
            response
                .body
                .extend_from_slice(&buf[line_end + 2..line_end + 2 + size]);
            buf.drain(..line_end + 2 + size + 2);
            if size == 0 {
                break;
            }
        }
    }
    response
}

fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) {
    let mut chunk = [0u8; 16384];
    let n = s.read(&mut chunk).unwrap();
    assert!(n > 0, "unexpected EOF");
    buf.extend_from_slice(&chunk[..n]);
}

fn roundtrip(addr: SocketAddr, request: &str) -> Response {
    let mut s = connect(addr);
    s.write_all(request.as_bytes()).unwrap();
    read_response(&mut s, &mut Vec::new())
}

const CHAT: &str =
    r#"{"model":"gpt-test","messages":[{"role":"user","content":"hello world"}],"max_tokens":4}"#;

#[test]
fn chat_completion_and_echo_headers() {
    let addr = server(MockConfig::default());
    let r = roundtrip(
        addr,
        &post(
            "/custom/v1/chat/completions",
            &["Authorization: Bearer sk-1"],
            CHAT,
        ),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-mock-received-authorization"),
        Some("Bearer sk-1")
    );
    assert_eq!(r.header("x-mock-received-model"), Some("gpt-test"));
    assert_eq!(r.header("x-mock-request-count"), Some("1"));
    let len = CHAT.len().to_string();
    assert_eq!(
        r.header("x-mock-received-content-length"),
        Some(len.as_str())
    );
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-test");
    assert_eq!(v["usage"]["prompt_tokens"], 3);
    assert_eq!(v["usage"]["completion_tokens"], 4);
}

#[test]
fn pipelined_requests_share_a_connection() {
    let addr = server(MockConfig::default());
    let mut s = connect(addr);
    let chunked = "POST /v1/embeddings HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
                   8\r\n{\"model\"\r\n19\r\n:\"emb\",\"input\":[\"a\",\"b\"]}\r\n0\r\n\r\n";
    let all = format!(
        "{}{}GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n",
        post("/v1/chat/completions", &[], CHAT),
        chunked
    );
    s.write_all(all.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let a = read_response(&mut s, &mut buf);
    let b = read_response(&mut s, &mut buf);
    let c = read_response(&mut s, &mut buf);
    assert_eq!(a.json()["object"], "chat.completion");
    assert_eq!(b.json()["data"].as_array().unwrap().len(), 2);
    assert_eq!(b.header("x-mock-received-model"), Some("emb"));
    assert_eq!(c.json()["data"][0]["id"], "mock");
    let counts: Vec<_> = [&a, &b, &c]
        .iter()
        .map(|r| r.header("x-mock-request-count").unwrap().to_string())
        .collect();
    assert_eq!(counts, ["1", "2", "3"]);
}

#[test]
fn stream_arrives_incrementally() {
    let addr = server(MockConfig::default());
    let body =
        r#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#;
    let req = post(
        "/v1/chat/completions",
        &[
            "x-mock-completion-tokens: 3",
            "x-mock-ttft-ms: 300",
            "x-mock-chunk-delay-ms: 50",
        ],
        body,
    );
    let mut s = connect(addr);
    let start = Instant::now();
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        fill(&mut s, &mut buf);
    }
    // The head is sent before the first token (unless this thread stalled).
    if start.elapsed() < Duration::from_millis(250) {
        assert!(!buf.windows(5).any(|w| w == b"data:"));
    }
    let r = read_response(&mut s, &mut buf);
    assert!(start.elapsed() >= Duration::from_millis(400));
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let text = String::from_utf8(r.body).unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(events.len(), 3 + 1 + 1 + 1, "{text}");
    assert_eq!(*events.last().unwrap(), "data: [DONE]");
}

#[test]
fn injected_errors_and_404() {
    let addr = server(MockConfig::default());
    let r = roundtrip(
        addr,
        &post(
            "/v1/chat/completions",
            &["x-mock-status: 429", "x-mock-retry-after: 7"],
            CHAT,
        ),
    );
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("7"));
    assert_eq!(r.json()["error"]["code"], "429");
    let r = roundtrip(addr, &post("/v1/nope", &[], "{}"));
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = roundtrip(addr, &post("/v1/chat/completions", &[], "{nope"));
    assert_eq!(r.status, 400);
}

#[test]
fn reset_once_then_served_and_counted() {
    let addr = server(MockConfig::default());
    let req = post(
        "/v1/messages",
        &[
            "x-api-key: ak",
            "anthropic-version: 2023-06-01",
            "x-mock-fault: reset-once:t1",
        ],
        r#"{"model":"claude","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    let mut s = connect(addr);
    s.write_all(req.as_bytes()).unwrap();
    let mut byte = [0u8; 1];
    match s.read(&mut byte) {
        Ok(0) => {}
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset),
        Ok(_) => panic!("expected the connection to be reset"),
    }
    let r = roundtrip(addr, &req);
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["type"], "message");

    // The mock counts a request once its last byte is written, which can
    // come just after the client has read it: wait for the count.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let stats = loop {
        let stats = roundtrip(addr, "GET /_stats HTTP/1.1\r\nHost: t\r\n\r\n").json();
        if stats["requests"] == 1 || std::time::Instant::now() > deadline {
            break stats;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(stats["requests"], 1);
    assert_eq!(stats["by_model"]["claude"]["completion_tokens"], 2);
    assert_eq!(stats["by_key"]["ak"]["requests"], 1);
    roundtrip(addr, &post("/_stats/reset", &[], ""));
    let stats = roundtrip(addr, "GET /_stats HTTP/1.1\r\nHost: t\r\n\r\n").json();
    assert_eq!(stats["requests"], 0);
}

#[test]
fn every_api_call_is_received_whatever_its_answer() {
    let addr = server(MockConfig::default());
    let form = "multipart/form-data; boundary=b0";
    let content_type = format!("Content-Type: {form}");
    let no_model = "--b0\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n--b0--\r\n";
    let no_image = "--b0\r\nContent-Disposition: form-data; name=\"prompt\"\r\n\r\nx\r\n--b0--\r\n";
    let refused = [
        ("/v1/audio/transcriptions", no_model, 400),
        ("/v1/audio/translations", no_model, 400),
        ("/v1/images/edits", no_image, 400),
        ("/v1/chat/completions", "{nope", 400),
    ];
    for (path, body, status) in refused {
        let r = roundtrip(
            addr,
            &post(path, &["Authorization: Bearer k", &content_type], body),
        );
        assert_eq!(r.status, status, "{path}");
    }
    // A Files API call the mock refuses (no such file) is received too.
    let r = roundtrip(
        addr,
        "GET /v1/files/file-nope HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer k\r\n\r\n",
    );
    assert_eq!(r.status, 404);
    // Not provider API calls: not received.
    roundtrip(addr, "GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n");
    roundtrip(addr, &post("/v1/nope", &[], "{}"));
    let stats = roundtrip(addr, "GET /_stats HTTP/1.1\r\nHost: t\r\n\r\n").json();
    assert_eq!(stats["received"], refused.len() + 1, "{stats}");
    // Only the authorized Files call counts as served (with no tokens).
    assert_eq!(stats["requests"], 1, "{stats}");
    roundtrip(addr, &post("/_stats/reset", &[], ""));
    let stats = roundtrip(addr, "GET /_stats HTTP/1.1\r\nHost: t\r\n\r\n").json();
    assert_eq!(stats["received"], 0);
}
