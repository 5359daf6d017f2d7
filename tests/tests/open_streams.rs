//! What an open stream costs the gateway: many streamed answers held open
//! at once, its resident set measured while they are.

use e2e::{base_config, request, to_yaml, Conn, Gateway, MockServer, MASTER_KEY};
use serde_json::json;

/// Streams held open at once.
const STREAMS: u64 = 48;
/// Each one's request body.
const BODY_KB: u64 = 256;

/// Sends a streamed chat request with a body of [`BODY_KB`] on `conn` and
/// reads its head and first event: the stream is open in the gateway.
fn open_stream(conn: &mut Conn) {
    let body = json!({
        "model": "gpt-4o",
        "stream": true,
        "messages": [{"role": "user", "content": "x".repeat(BODY_KB as usize * 1024)}],
    })
    .to_string();
    let auth = format!("Bearer {MASTER_KEY}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    conn.send(&request(
        "POST",
        "/v1/chat/completions",
        &headers,
        body.as_bytes(),
    ));
    let head = conn.read_head().expect("the stream's head");
    assert_eq!(head.status, 200);
    let first = conn.sse(&head).next_event().expect("the first event");
    assert!(first.is_some(), "the stream ended at once");
}

#[test]
fn an_open_stream_keeps_none_of_its_request_body() {
    // The first token at once, the next ones far apart: each stream stays
    // open while the others are opened and measured.
    let mock = MockServer::start(&[
        "--ttft-ms",
        "0",
        "--chunk-delay-ms",
        "5000",
        "--completion-tokens",
        "3",
    ]);
    let gw = Gateway::start(&to_yaml(&base_config(mock.port())), &[]);
    let pid = gw.pid();
    // A few first, so the connections' and the logs' first allocations
    // are not counted below.
    let mut warm: Vec<Conn> = (0..4).map(|_| Conn::connect(gw.port())).collect();
    warm.iter_mut().for_each(open_stream);
    let before = e2e::status_kb(pid, "VmRSS:");
    let mut open: Vec<Conn> = (0..STREAMS).map(|_| Conn::connect(gw.port())).collect();
    open.iter_mut().for_each(open_stream);
    let during = e2e::status_kb(pid, "VmRSS:");
    let per_stream = during.saturating_sub(before) / STREAMS;
    eprintln!("open_streams: {STREAMS} streams, {before} -> {during} kB, {per_stream} kB each");
    // Kept, each body alone would be 256 kB a stream.
    assert!(
        per_stream < BODY_KB / 2,
        "{STREAMS} open streams of {BODY_KB} kB requests grew the gateway by {per_stream} kB each"
    );
}
