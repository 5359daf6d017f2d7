//! Large multipart uploads (`/v1/audio/transcriptions`, `/v1/images/edits`,
//! `/v1/files`) streamed to the upstream as they arrive: the gateway's memory grows by
//! a buffer, not by the file; the upstream gets the client's bytes (only
//! `model` replaced) with a computed `Content-Length`; a tail that is
//! malformed, or brings a deciding field after the file, is refused and
//! never reaches the upstream whole; a form routed by fields after its file
//! is still served (read whole); billing per second still works.

use e2e::{to_yaml, Gateway, MockServer, RawUpstream, MASTER_KEY};
use serde_json::json;
use std::time::Duration;

const BOUNDARY: &str = "----stream-test-b0undary";

/// A form: `before` fields, a `talk.wav` file part of `len` bytes, `after`
/// fields, then `end` (the closing delimiter, or something else).
fn form(before: &[(&str, &str)], len: usize, after: &[(&str, &str)], end: &str) -> Vec<u8> {
    form_with("file", before, len, after, end)
}

/// [`form`] with the file part named `part`.
fn form_with(
    part: &str,
    before: &[(&str, &str)],
    len: usize,
    after: &[(&str, &str)],
    end: &str,
) -> Vec<u8> {
    let field = |body: &mut Vec<u8>, (name, value): &(&str, &str)| {
        body.extend_from_slice(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    };
    let mut body = Vec::with_capacity(len + 1024);
    for f in before {
        field(&mut body, f);
    }
    body.extend_from_slice(
        format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{part}\"; filename=\"talk.wav\"\r\nContent-Type: audio/wav\r\n\r\n").as_bytes(),
    );
    body.extend_from_slice(b"RIFF");
    // Bytes that look like the start of a delimiter now and then.
    body.extend((4..len).map(|i| match i % 4099 {
        0 => b'\r',
        1 => b'\n',
        2 | 3 => b'-',
        _ => (i % 251) as u8,
    }));
    body.extend_from_slice(b"\r\n");
    for f in after {
        field(&mut body, f);
    }
    body.extend_from_slice(end.as_bytes());
    body
}

fn closing() -> String {
    format!("--{BOUNDARY}--\r\n")
}

fn upload(gw: &Gateway, path: &str, body: &[u8]) -> e2e::Response {
    let auth = format!("Bearer {MASTER_KEY}");
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    gw.call(
        "POST",
        path,
        &[("Authorization", &auth), ("Content-Type", &content_type)],
        body,
    )
}

#[test]
fn a_large_upload_costs_a_buffer_not_the_file_and_is_billed() {
    let mock = MockServer::start(&[]);
    let config = json!({
        "model_list": [
            {"model_name": "whisper", "litellm_params": {"model": "openai/whisper-1", "api_key": "sk-up", "api_base": mock.api_base()}},
        ],
        "general_settings": {"master_key": MASTER_KEY, "max_request_size_mb": 40},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let path = "/v1/audio/transcriptions";
    // 24 MB: 1,500 seconds of the mock's audio.
    let size = 24_000_000;
    let body = form(
        &[("model", "whisper"), ("response_format", "verbose_json")],
        size,
        &[("temperature", "0")],
        &closing(),
    );
    // A small one first, so the connection's and the logs' own first
    // allocations are not counted below.
    let small = form(&[("model", "whisper")], 100, &[], &closing());
    assert_eq!(upload(&gw, path, &small).status, 200);

    let pid = gw.pid();
    // Resets the peak resident set to the current one.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let before = e2e::status_kb(pid, "VmRSS:");
    let resp = upload(&gw, path, &body);
    let peak = e2e::status_kb(pid, "VmHWM:");
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["duration"], 1500.0);
    let grown_kb = peak.saturating_sub(before);
    assert!(
        grown_kb < 8 * 1024,
        "a 24 MB upload grew the gateway's resident set by {grown_kb} kB"
    );

    // Billed per second as before: 1,500 s of whisper-1 at 0.0001.
    let call_id = resp.header("x-litellm-call-id").unwrap().to_string();
    let row = e2e::eventually("the spend row", Duration::from_secs(5), || {
        let rows = gw.get(&format!("/spend/logs?request_id={call_id}")).json();
        rows.as_array().and_then(|r| r.first().cloned())
    });
    assert_eq!(row["call_type"], "atranscription");
    let spent = row["spend"].as_f64().unwrap();
    assert!((spent - 0.15).abs() < 1e-9, "{spent}");

    // Routed by a field after the file (as some clients write forms):
    // read whole, still served.
    let file_first = form(&[], 2_000_000, &[("model", "whisper")], &closing());
    let resp = upload(&gw, path, &file_first);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["usage"]["seconds"], 125);

    // Two streamed uploads on one kept-alive connection.
    let mut conn = gw.connect();
    let auth = format!("Bearer {MASTER_KEY}");
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let headers = [("Authorization", &*auth), ("Content-Type", &*content_type)];
    let one = form(&[("model", "whisper")], 1_000_000, &[], &closing());
    for _ in 0..2 {
        conn.send(&e2e::request("POST", path, &headers, &one));
        let resp = conn.try_read_response().unwrap();
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
}

#[test]
fn the_upstream_gets_the_clients_bytes_or_no_whole_request() {
    let reply = br#"{"text":"ok","usage":{"type":"duration","seconds":3}}"#;
    let raw = RawUpstream::start(
        [
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                reply.len()
            )
            .as_bytes(),
            reply,
        ]
        .concat(),
        false,
    );
    let config = json!({
        "model_list": [
            {"model_name": "whisper", "litellm_params": {"model": "openai/whisper-1", "api_key": "sk-up", "api_base": raw.api_base()}},
            {"model_name": "editor", "litellm_params": {"model": "openai/gpt-image-1", "api_key": "sk-up", "api_base": raw.api_base()}},
        ],
        "general_settings": {"master_key": MASTER_KEY, "max_request_size_mb": 5},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let path = "/v1/audio/transcriptions";

    // The client's bytes, with only the model field's value replaced.
    let size = 3_000_000;
    let after = [("language", "en")];
    let body = form(&[("model", "whisper")], size, &after, &closing());
    let resp = upload(&gw, path, &body);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(raw.requests(), 1);
    let got = raw.last_request();
    let split = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let want = form(&[("model", "whisper-1")], size, &after, &closing());
    let head = String::from_utf8_lossy(&got[..split]).to_ascii_lowercase();
    assert!(
        head.contains(&format!("content-length: {}\r\n", want.len())),
        "{head}"
    );
    assert!(got[split..] == want[..], "the upstream's body differs");

    // Refused on the way, the upstream never reading a whole request: a
    // deciding field after the file, a malformed end, a part too many, a
    // form that never ends.
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        (
            "user after the file",
            form(&[("model", "whisper")], size, &[("user", "u1")], &closing()),
            Some("user"),
        ),
        (
            "stream after the file",
            form(
                &[("model", "whisper")],
                size,
                &[("stream", "true")],
                &closing(),
            ),
            Some("stream"),
        ),
        (
            "no closing delimiter",
            form(&[("model", "whisper")], size, &[], "trailing junk"),
            None,
        ),
        (
            "a bad delimiter line",
            form(
                &[("model", "whisper")],
                size,
                &[],
                &format!("--{BOUNDARY}xx\r\n"),
            ),
            None,
        ),
        (
            "a field over 64 KiB after the file",
            form(
                &[("model", "whisper")],
                size,
                &[("language", &"x".repeat(70_000))],
                &closing(),
            ),
            None,
        ),
    ];
    for (what, body, param) in cases {
        let resp = upload(&gw, path, &body);
        let err = e2e::assert_error(&resp, 400);
        if let Some(param) = param {
            assert_eq!(err["param"], param, "{what}: {err:?}");
            assert!(
                e2e::error_message(&err).contains("comes after the file"),
                "{what}: {err:?}"
            );
        }
        assert_eq!(raw.requests(), 1, "{what} reached the upstream whole");
    }
    // Over the limit: 413, as before (within what the gateway drops after
    // refusing unread, so the client's write is not cut).
    let big = form(&[("model", "whisper")], 6 << 20, &[], &closing());
    e2e::assert_error(&upload(&gw, path, &big), 413);

    // An image edit streams too once its prompt is known; without one
    // before the image it is read whole (and still needs one).
    let edits = "/v1/images/edits";
    let before = [("model", "editor"), ("prompt", "a hat")];
    let edit = form_with("image", &before, size, &[], &closing());
    upload(&gw, edits, &edit);
    assert_eq!(raw.requests(), 2, "an edit streamed");
    let late = [("prompt", "a hat")];
    let edit = form_with("image", &[("model", "editor")], size, &late, &closing());
    upload(&gw, edits, &edit);
    assert_eq!(
        raw.requests(),
        3,
        "a prompt after the image: read whole, sent"
    );
    let edit = form_with("image", &[("model", "editor")], size, &[], &closing());
    let err = e2e::assert_error(&upload(&gw, edits, &edit), 400);
    assert_eq!(err["param"], "prompt");
    assert_eq!(raw.requests(), 3);
}

#[test]
fn a_large_file_upload_is_streamed_and_bad_forms_never_reach_the_upstream_whole() {
    let mock = MockServer::start(&[]);
    let base = format!("http://127.0.0.1:{}", mock.port());
    let config = json!({
        "model_list": [
            {"model_name": "gpt-4o-mini", "litellm_params": {"model": "openai/gpt-4o-mini", "api_key": "sk-up", "api_base": mock.api_base()}},
        ],
        "general_settings": {"master_key": MASTER_KEY, "max_request_size_mb": 40},
    });
    let env = [
        ("OPENAI_API_BASE", base.as_str()),
        ("OPENAI_API_KEY", "sk-up"),
    ];
    let gw = Gateway::start(&to_yaml(&config), &env);
    let path = "/v1/files";
    let small = form(&[("purpose", "user_data")], 100, &[], &closing());
    assert_eq!(upload(&gw, path, &small).status, 200);

    // 24 MB, `purpose` and the gateway's own `model` before the file, a
    // field OpenAI knows after it: the upstream gets the form without
    // `model` (the mock refuses fields OpenAI does not know) and the file
    // whole, and the gateway's resident set grows by a buffer.
    let size = 24_000_000;
    let before = [("purpose", "user_data"), ("model", "gpt-4o-mini")];
    let after = [("expires_after[anchor]", "created_at")];
    let body = form(&before, size, &after, &closing());
    let pid = gw.pid();
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let rss_before = e2e::status_kb(pid, "VmRSS:");
    let resp = upload(&gw, path, &body);
    let peak = e2e::status_kb(pid, "VmHWM:");
    assert_eq!(resp.status, 200, "{}", resp.text());
    let grown_kb = peak.saturating_sub(rss_before);
    assert!(
        grown_kb < 8 * 1024,
        "a 24 MB file upload grew the gateway's resident set by {grown_kb} kB"
    );
    let file = resp.json();
    assert_eq!(file["bytes"], size as u64, "{file}");
    let id = file["id"].as_str().unwrap();
    let auth = format!("Bearer {MASTER_KEY}");
    let content = gw.call(
        "GET",
        &format!("/v1/files/{id}/content"),
        &[("Authorization", &auth)],
        b"",
    );
    assert_eq!(content.status, 200);
    let at = body.windows(4).position(|w| w == b"RIFF").unwrap();
    assert!(
        content.body[..] == body[at..at + size],
        "the stored file differs from the upload"
    );

    // Refused on the way: the upstream never receives a whole request.
    let received = || mock.stats()["received"].as_u64().unwrap_or(0);
    let start = received();
    let purpose = [("purpose", "user_data")];
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        (
            "model after the file",
            form(&purpose, 3_000_000, &[("model", "gpt-4o-mini")], &closing()),
            Some("model"),
        ),
        (
            "custom_llm_provider after the file",
            form(
                &purpose,
                3_000_000,
                &[("custom_llm_provider", "azure")],
                &closing(),
            ),
            Some("custom_llm_provider"),
        ),
        (
            "no closing delimiter",
            form(&purpose, 3_000_000, &[], "trailing junk"),
            None,
        ),
        (
            "a bad delimiter line",
            form(&purpose, 3_000_000, &[], &format!("--{BOUNDARY}xx\r\n")),
            None,
        ),
    ];
    for (what, body, param) in cases {
        let resp = upload(&gw, path, &body);
        let err = e2e::assert_error(&resp, 400);
        if let Some(param) = param {
            assert_eq!(err["param"], param, "{what}: {err:?}");
            assert!(
                e2e::error_message(&err).contains("comes after the file"),
                "{what}: {err:?}"
            );
        }
        assert_eq!(received(), start, "{what} reached the upstream whole");
    }
    // A form without `purpose` before its file (some SDKs write the file
    // first) is read whole and served, in any order.
    let file_first = form(&[], 1_000_000, &[("purpose", "user_data")], &closing());
    let resp = upload(&gw, path, &file_first);
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json()["bytes"], 1_000_000);
}
