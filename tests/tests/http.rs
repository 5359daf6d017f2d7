//! HTTP/1.1 behaviour: keep-alive, pipelining, chunked uploads,
//! `Expect: 100-continue`, `Connection: close` and the request limits.

use std::collections::HashSet;
use std::io::Write;
use std::thread;
use std::time::Duration;

use e2e::http::chunked;
use e2e::{assert_error, base_config, chat_body, request, Gateway, MockServer, MASTER_KEY};
use serde_json::json;

fn start() -> (MockServer, Gateway) {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start_json(&base_config(mock.port()), &[]);
    (mock, gw)
}

fn bearer() -> String {
    format!("Bearer {MASTER_KEY}")
}

fn chat_request(model: &str) -> Vec<u8> {
    let auth = bearer();
    request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        chat_body(model).to_string().as_bytes(),
    )
}

fn models_request() -> Vec<u8> {
    let auth = bearer();
    request("GET", "/v1/models", &[("Authorization", &auth)], b"")
}

#[test]
fn keep_alive_serves_several_requests_on_one_connection() {
    let (_mock, gw) = start();
    let mut conn = gw.connect();
    let mut call_ids = HashSet::new();
    for i in 0..6 {
        let resp = if i % 2 == 0 {
            let resp = conn.roundtrip(&chat_request("gpt-4o")).expect_status(200);
            assert_eq!(resp.json()["model"], "upstream-gpt");
            resp
        } else {
            let resp = conn.roundtrip(&models_request()).expect_status(200);
            assert_eq!(resp.json()["object"], "list");
            resp
        };
        assert!(
            !resp
                .header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close")),
            "request {i} closed a keep-alive connection: {:?}",
            resp.headers
        );
        if let Some(id) = resp.header("x-litellm-call-id") {
            assert!(call_ids.insert(id.to_string()), "call id {id} reused");
        }
    }
    assert_eq!(call_ids.len(), 3, "each chat response has its own call id");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (_mock, gw) = start();
    let mut conn = gw.connect();
    let mut batch = chat_request("gpt-4o");
    batch.extend(models_request());
    batch.extend(chat_request("local-mock"));
    conn.send(&batch);

    let first = conn.read_response().expect_status(200).json();
    assert_eq!(first["model"], "upstream-gpt", "first response: {first}");
    let second = conn.read_response().expect_status(200).json();
    assert_eq!(second["object"], "list", "second response: {second}");
    let third = conn.read_response().expect_status(200).json();
    assert_eq!(
        third["choices"][0]["message"]["content"], "Hello from the mock",
        "third response: {third}"
    );
}

/// A body larger than the read buffer (read into its own allocation)
/// ends exactly where its Content-Length says: the request pipelined
/// behind it, sent in the same write, is read whole and answered next.
#[test]
fn a_large_body_pipelined_with_the_next_request_leaves_it_whole() {
    let (_mock, gw) = start();
    let auth = bearer();
    let big =
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "x ".repeat(120_000)}]});
    let mut batch = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        big.to_string().as_bytes(),
    );
    batch.extend(models_request());
    batch.extend(chat_request("local-mock"));
    let mut conn = gw.connect();
    conn.send(&batch);
    let first = conn.read_response().expect_status(200).json();
    assert_eq!(first["model"], "upstream-gpt", "first response: {first}");
    assert!(
        first["usage"]["prompt_tokens"].as_u64().unwrap() > 50_000,
        "the whole prompt reached the upstream: {first}"
    );
    let second = conn.read_response().expect_status(200).json();
    assert_eq!(second["object"], "list", "second response: {second}");
    let third = conn.read_response().expect_status(200).json();
    assert_eq!(
        third["choices"][0]["message"]["content"],
        "Hello from the mock"
    );
}

#[test]
fn chunked_request_body() {
    let (_mock, gw) = start();
    let body = chat_body("gpt-4o").to_string();
    let (a, rest) = body.as_bytes().split_at(7);
    let (b, c) = rest.split_at(rest.len() / 2);
    let auth = bearer();
    let head = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
        b"",
    );
    let mut conn = gw.connect();
    conn.send(&head);
    // Each chunk in its own write, so the body arrives in pieces.
    let encoded = chunked(&[a, b, c]);
    for piece in encoded.chunks(encoded.len() / 3 + 1) {
        conn.send(piece);
        thread::sleep(Duration::from_millis(30));
    }
    let resp = conn.read_response().expect_status(200);
    assert_eq!(resp.json()["model"], "upstream-gpt");
}

#[test]
fn expect_100_continue() {
    let (_mock, gw) = start();
    let body = chat_body("gpt-4o").to_string();
    let auth = bearer();
    let len = body.len().to_string();
    let head = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Content-Length", &len),
            ("Expect", "100-continue"),
        ],
        b"",
    );
    let mut conn = gw.connect();
    conn.send(&head);
    conn.set_read_timeout(Duration::from_secs(5));
    let interim = conn
        .try_read_response()
        .expect("a `100 Continue` before the body is sent");
    assert_eq!(interim.status, 100, "{interim:?}");
    conn.send(body.as_bytes());
    let resp = conn.read_response().expect_status(200);
    assert_eq!(resp.json()["model"], "upstream-gpt");
}

#[test]
fn connection_close_is_honoured() {
    let (_mock, gw) = start();
    let auth = bearer();
    let mut conn = gw.connect();
    conn.send(&request(
        "GET",
        "/v1/models",
        &[("Authorization", &auth), ("Connection", "close")],
        b"",
    ));
    conn.read_response().expect_status(200);
    assert!(
        conn.closed_within(Duration::from_secs(3)),
        "connection still open after `Connection: close`"
    );
}

#[test]
fn oversized_body_is_413() {
    let (_mock, gw) = start();
    // max_request_size_mb is 1: send 1.5 MB of valid JSON.
    let big = "x".repeat(1_500_000);
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": big}]});
    let auth = bearer();
    let bytes = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    );
    let mut conn = gw.connect();
    // The gateway may answer (and close) before reading the whole body, so
    // write from another thread and ignore write errors.
    let mut writer = conn.stream().try_clone().expect("clone socket");
    let sender = thread::spawn(move || {
        let _ = writer.write_all(&bytes);
    });
    let resp = conn.read_response();
    assert_error(&resp, 413);
    let _ = sender.join();
}

/// A body refused as too large once its head is read is drained, not
/// reset: a client that writes its whole upload before it reads (as most
/// HTTP clients do) still gets its 413 (it used to meet a reset mid-write,
/// the answer lost with it).
#[test]
fn a_client_that_writes_its_whole_oversized_body_first_still_reads_its_413() {
    let (_mock, gw) = start();
    let auth = bearer();
    // 2 MiB against a 1 MB limit, written in pieces with pauses, so the
    // gateway has answered long before the last piece is sent.
    let body = vec![b' '; 2 * 1024 * 1024];
    let bytes = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        &body,
    );
    let mut conn = gw.connect();
    let mut writer = conn.stream().try_clone().expect("clone socket");
    for piece in bytes.chunks(64 * 1024) {
        writer
            .write_all(piece)
            .expect("the refused body is read and dropped, not reset");
        thread::sleep(Duration::from_millis(2));
    }
    assert_error(&conn.read_response(), 413);
}

#[test]
fn oversized_chunked_body_is_413() {
    let (_mock, gw) = start();
    let auth = bearer();
    let head = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
        b"",
    );
    // 24 chunks of 64 KiB: 1.5 MiB against a 1 MB limit, no length up front.
    let piece = vec![b' '; 64 * 1024];
    let parts = vec![piece.as_slice(); 24];
    let mut bytes = head;
    bytes.extend(chunked(&parts));
    let mut conn = gw.connect();
    let mut writer = conn.stream().try_clone().expect("clone socket");
    let sender = thread::spawn(move || {
        let _ = writer.write_all(&bytes);
    });
    assert_error(&conn.read_response(), 413);
    let _ = sender.join();
}

#[test]
fn oversized_content_length_with_expect_gets_413_not_100() {
    let (_mock, gw) = start();
    let auth = bearer();
    let len = (3 * 1024 * 1024).to_string();
    let head = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Content-Length", &len),
            ("Expect", "100-continue"),
        ],
        b"",
    );
    let mut conn = gw.connect();
    conn.send(&head);
    conn.set_read_timeout(Duration::from_secs(5));
    // The declared length is over the limit: answer at once, ask for no body.
    let resp = conn
        .try_read_response()
        .expect("a final 413 for a declared length over the limit");
    assert_error(&resp, 413);
}

#[test]
fn too_many_headers_is_431() {
    let (_mock, gw) = start();
    let auth = bearer();
    let names: Vec<String> = (0..120).map(|i| format!("X-Filler-{i}")).collect();
    let mut headers: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    headers.push(("Authorization", &auth));
    let mut conn = gw.connect();
    conn.send(&request("GET", "/v1/models", &headers, b""));
    assert_error(&conn.read_response(), 431);
}

#[test]
fn header_block_over_64k_is_431() {
    let (_mock, gw) = start();
    let auth = bearer();
    let huge = "a".repeat(70 * 1024);
    let bytes = request(
        "GET",
        "/v1/models",
        &[("Authorization", &auth), ("X-Huge", &huge)],
        b"",
    );
    let mut conn = gw.connect();
    let mut writer = conn.stream().try_clone().expect("clone socket");
    let sender = thread::spawn(move || {
        let _ = writer.write_all(&bytes);
    });
    assert_error(&conn.read_response(), 431);
    let _ = sender.join();
}

#[test]
fn slow_header_is_408_and_closes() {
    let (_mock, gw) = start();
    let mut conn = gw.connect();
    // Part of a head, then silence past header_timeout_ms (500).
    conn.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    thread::sleep(Duration::from_millis(1200));
    conn.set_read_timeout(Duration::from_secs(5));
    let resp = conn
        .try_read_response()
        .expect("a 408 after the header timeout");
    assert_error(&resp, 408);
    assert!(
        conn.closed_within(Duration::from_secs(3)),
        "connection still open after a header timeout"
    );
}

#[test]
fn trickled_header_still_times_out() {
    let (_mock, gw) = start();
    let mut conn = gw.connect();
    conn.send(b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    // One byte every 100 ms: the head never completes, but each read makes
    // progress. header_timeout_ms bounds the whole head, not one read.
    let mut cut_off = false;
    for _ in 0..25 {
        if conn.try_send(b"X").is_err() {
            cut_off = true;
            break;
        }
        thread::sleep(Duration::from_millis(100));
    }
    conn.set_read_timeout(Duration::from_secs(5));
    match conn.try_read_response() {
        Ok(resp) => {
            assert_error(&resp, 408);
        }
        Err(e) => assert!(
            cut_off,
            "no 408 for a head trickled over 2.5 s (header_timeout_ms 500): {e}"
        ),
    }
}

#[test]
fn transfer_encoding_with_content_length_closes_the_connection() {
    // RFC 9112 §6.1: a request with both may be rejected or read as chunked,
    // but the server MUST close the connection after responding (smuggling).
    let (_mock, gw) = start();
    let body = chat_body("gpt-4o").to_string();
    let auth = bearer();
    let mut bytes = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Content-Length", "3"),
            ("Transfer-Encoding", "chunked"),
        ],
        b"",
    );
    bytes.extend(chunked(&[body.as_bytes()]));
    let mut conn = gw.connect();
    let resp = conn.roundtrip(&bytes);
    assert!(
        resp.status == 200 || resp.status == 400,
        "status {}: {}",
        resp.status,
        resp.text()
    );
    assert!(
        conn.closed_within(Duration::from_secs(3)),
        "connection kept open after a request with both Content-Length and \
         Transfer-Encoding (answered {})",
        resp.status
    );
}

#[test]
fn content_length_must_be_digits_only() {
    // Content-Length = 1*DIGIT: "+N" is malformed framing, not N.
    let (_mock, gw) = start();
    let body = chat_body("gpt-4o").to_string();
    let auth = bearer();
    let len = format!("+{}", body.len());
    let mut conn = gw.connect();
    let resp = conn.roundtrip(&request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Content-Length", &len),
        ],
        body.as_bytes(),
    ));
    assert_error(&resp, 400);
    assert!(
        conn.closed_within(Duration::from_secs(3)),
        "connection kept open after malformed framing"
    );
}

/// Sends `body_wire` as the (already chunk-encoded) body of a chat request.
fn chunked_wire_request(body_wire: &[u8]) -> Vec<u8> {
    let auth = bearer();
    let mut bytes = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
        b"",
    );
    bytes.extend_from_slice(body_wire);
    bytes
}

#[test]
fn chunked_framing_is_strict_crlf_with_checked_sizes() {
    // RFC 9112 §7.1: every line ends in CRLF. A bare LF, a size that
    // overflows 64 bits, unbounded extensions or trailers are 400 and the
    // connection closes (the framing of what follows is unknown).
    let (_mock, gw) = start();
    let body = chat_body("gpt-4o").to_string();
    let ext = format!(";{}", "e".repeat(1000));
    let many_ext: String = body
        .bytes()
        .map(|b| format!("1{ext}\r\n{}\r\n", b as char))
        .collect();
    let trailers: String = (0..100).map(|i| format!("t{i}: v\r\n")).collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "bare LF after the size",
            format!("{:x}\n{body}\r\n0\r\n\r\n", body.len()).into_bytes(),
        ),
        (
            "bare LF after the data",
            format!("{:x}\r\n{body}\n0\r\n\r\n", body.len()).into_bytes(),
        ),
        (
            "bare LF ending the body",
            format!("{:x}\r\n{body}\r\n0\r\n\n", body.len()).into_bytes(),
        ),
        (
            "size overflowing 64 bits",
            b"10000000000000001\r\nx\r\n0\r\n\r\n".to_vec(),
        ),
        (
            "extensions over the cap",
            format!("{many_ext}0\r\n\r\n").into_bytes(),
        ),
        (
            "too many trailers",
            format!("{:x}\r\n{body}\r\n0\r\n{trailers}\r\n", body.len()).into_bytes(),
        ),
    ];
    for (what, wire) in cases {
        let mut conn = gw.connect();
        let resp = conn.roundtrip(&chunked_wire_request(&wire));
        let err = assert_error(&resp, 400);
        assert!(
            conn.closed_within(Duration::from_secs(3)),
            "{what}: connection kept open after bad chunked framing ({err:?})"
        );
    }
    // Within the bounds, extensions and trailers are accepted and ignored.
    let wire = format!(
        "{:x} ;a=\"b; c\"\r\n{body}\r\n0;last\r\nx-t: 1\r\n\r\n",
        body.len()
    );
    let resp = gw
        .connect()
        .roundtrip(&chunked_wire_request(wire.as_bytes()));
    assert_eq!(resp.status, 200, "{}", resp.text());
}

/// Reads and discards until the peer closes (true) or `wait` passes (false).
fn drained_to_close(conn: &e2e::Conn, wait: Duration) -> bool {
    use std::io::Read;
    let deadline = std::time::Instant::now() + wait;
    let mut stream = conn.stream();
    let mut buf = vec![0u8; 1 << 16];
    while std::time::Instant::now() < deadline {
        conn.set_read_timeout(Duration::from_millis(200));
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn a_client_that_stops_reading_is_disconnected_and_its_slot_released() {
    // A stream far larger than every socket buffer on the way; the client
    // never reads, so the gateway's writes stall. With a write deadline the
    // gateway disconnects it, drops the upstream connection and frees the
    // key's only parallel slot; without one the slot is held forever.
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    e2e::config::add_model(
        &mut config,
        e2e::openai_model(
            "endless",
            "endless-id",
            &mock.api_base(),
            json!({"extra_headers": {"x-mock-completion-tokens": "300000"}, "stream_timeout": 600}),
        ),
    );
    config["gateway_settings"]["write_timeout_ms"] = json!(300);
    let gw = Gateway::start_json(&config, &[]);
    let created = gw
        .post("/key/generate", &json!({"max_parallel_requests": 1}))
        .expect_status(200)
        .json();
    let key = format!("Bearer {}", created["key"].as_str().expect("key"));
    let mut body = chat_body("endless");
    body["stream"] = json!(true);
    let mut slow = gw.connect();
    slow.send(&request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &key),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    ));
    // Admitted and streaming (the mock, a debug build, prepares the whole
    // 300,000-token stream first: seconds, or far more on a loaded machine).
    slow.set_read_timeout(Duration::from_secs(120));
    let head = slow.read_head().expect("the stream's head");
    assert_eq!(head.status, 200);
    // The slot comes back while the slow client still holds its socket open.
    let quick = chat_body("local-mock").to_string();
    e2e::eventually(
        "the slow reader's parallel slot to come back",
        Duration::from_secs(20),
        || {
            let r = gw.call(
                "POST",
                "/v1/chat/completions",
                &[
                    ("Authorization", &key),
                    ("Content-Type", "application/json"),
                ],
                quick.as_bytes(),
            );
            (r.status == 200).then_some(())
        },
    );
    assert!(
        drained_to_close(&slow, Duration::from_secs(20)),
        "the gateway kept the non-reading client's connection open"
    );
}

#[test]
fn pipelined_requests_behind_an_unread_response_are_bounded() {
    // A client pipelines requests without ever reading the answers. The
    // gateway reads a request only after answering the previous one, so
    // what it holds is bounded by its read buffer; once the client's
    // receive buffer is full, a write stalls past the deadline and the
    // connection is closed, which ends the client's writes too.
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    config["gateway_settings"]["write_timeout_ms"] = json!(300);
    let gw = Gateway::start_json(&config, &[]);
    let conn = gw.connect();
    let mut writer = conn.stream().try_clone().expect("clone socket");
    writer
        .set_write_timeout(Some(Duration::from_secs(60)))
        .expect("write timeout");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = done.clone();
    let one = models_request();
    thread::spawn(move || {
        let batch = one.repeat(100);
        // At most 1 GB: far past every buffer, yet bounded if it never ends.
        for _ in 0..(1 << 30) / batch.len() {
            if writer.write_all(&batch).is_err() {
                break;
            }
        }
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    e2e::eventually(
        "the gateway to close a pipelining client that never reads",
        Duration::from_secs(30),
        || done.load(std::sync::atomic::Ordering::SeqCst).then_some(()),
    );
    drop(conn);
    // And it still serves.
    gw.connect().roundtrip(&models_request()).expect_status(200);
}
