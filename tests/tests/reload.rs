//! Config reload without a restart: SIGHUP and `POST /config/reload` bring
//! in new models, router settings, rate limits and alert targets while
//! streams run, without one failed request; an invalid file is refused and
//! the running config keeps serving; settings that need a restart say so.

use e2e::config::openai_model;
use e2e::{base_config, to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// A config with group `g` on the mock, streaming slowly.
fn config(mock: &MockServer) -> Value {
    let mut config = base_config(mock.port());
    config["model_list"] = json!([openai_model(
        "g",
        "a",
        &mock.api_base(),
        json!({"extra_headers": {"x-mock-chunk-delay-ms": "5", "x-mock-completion-tokens": "20"}}),
    )]);
    config
}

fn write(gw: &Gateway, config: &Value) {
    std::fs::write(gw.config_path(), to_yaml(config)).expect("rewrite the config");
}

/// Streams `model` and checks the stream is whole; returns the status.
fn stream(port: u16, model: &str) -> Result<(), String> {
    let body =
        json!({"model": model, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let auth = format!("Bearer {MASTER_KEY}");
    let mut conn = e2e::Conn::try_connect(port).map_err(|e| e.to_string())?;
    conn.try_send(&e2e::request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    ))
    .map_err(|e| e.to_string())?;
    let resp = conn.try_read_response().map_err(|e| e.to_string())?;
    let text = resp.text();
    if resp.status != 200 || !text.trim_end().ends_with("data: [DONE]") {
        return Err(format!("{}: {text}", resp.status));
    }
    Ok(())
}

fn chat(gw: &Gateway, model: &str, user: &str) -> u16 {
    gw.post(
        "/v1/chat/completions",
        &json!({"model": model, "user": user, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .status
}

#[test]
fn reloads_under_streaming_load_without_a_failed_request() {
    let mock = MockServer::start(&[]);
    let mut cfg = config(&mock);
    let gw = Gateway::start_json(&cfg, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let port = gw.port();
    let load: Vec<_> = (0..4)
        .map(|_| {
            let (stop, done) = (stop.clone(), done.clone());
            thread::spawn(move || {
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    match stream(port, "g") {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => failures.push(e),
                    }
                }
                failures
            })
        })
        .collect();
    e2e::eventually("streams flowing", Duration::from_secs(10), || {
        (done.load(Ordering::Relaxed) >= 8).then_some(())
    });

    // SIGHUP: a new group, an end-user limit, and a server limit that
    // needs a restart.
    assert_eq!(chat(&gw, "h", "x"), 400, "not served yet");
    cfg["model_list"].as_array_mut().unwrap().push(openai_model(
        "h",
        "b",
        &mock.api_base(),
        json!({}),
    ));
    cfg["gateway_settings"]["rate_limits"] = json!({"end_user": {"rpm_limit": 2}});
    cfg["gateway_settings"]["header_timeout_ms"] = json!(900);
    write(&gw, &cfg);
    gw.signal(libc::SIGHUP);
    e2e::eventually("group h served", Duration::from_secs(10), || {
        (chat(&gw, "h", "first") == 200).then_some(())
    });
    assert_eq!(chat(&gw, "h", "limited"), 200);
    assert_eq!(chat(&gw, "h", "limited"), 200);
    assert_eq!(chat(&gw, "h", "limited"), 429, "the reloaded end-user rpm");
    e2e::eventually("the reload logged", Duration::from_secs(5), || {
        let out = gw.output();
        (out.contains("config reloaded") && out.contains("not reloadable")).then_some(())
    });

    // An invalid file: refused, nothing changes.
    std::fs::write(
        gw.config_path(),
        to_yaml(
            &json!({"model_list": [{"model_name": "bad", "litellm_params": {"model": "nope/x"}}]}),
        ),
    )
    .unwrap();
    let refused = gw.post("/config/reload", &json!({}));
    let err = e2e::assert_error(&refused, 400);
    let message = e2e::error_message(&err);
    assert!(
        message.contains("model_list[0]"),
        "names the entry: {message}"
    );
    e2e::eventually("the refusal logged", Duration::from_secs(5), || {
        gw.output().contains("config reload refused").then_some(())
    });
    assert_eq!(
        chat(&gw, "h", "after-refusal"),
        200,
        "the old config serves"
    );

    // The endpoint: group g's deployment changed, h removed.
    cfg["model_list"] = json!([openai_model(
        "g",
        "a",
        &mock.api_base(),
        json!({"extra_headers": {"x-mock-chunk-delay-ms": "6", "x-mock-completion-tokens": "20"}}),
    )]);
    write(&gw, &cfg);
    let plain = gw.post("/key/generate", &json!({})).json()["key"]
        .as_str()
        .unwrap()
        .to_string();
    let auth = format!("Bearer {plain}");
    let forbidden = gw.call(
        "POST",
        "/config/reload",
        &[("Authorization", &auth), ("Content-Length", "0")],
        b"",
    );
    assert_eq!(forbidden.status, 403);
    let resp = gw.post("/config/reload", &json!({}));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let body = resp.json();
    assert_eq!(
        body["deployments"],
        json!({"kept": 0, "changed": 1, "added": 0, "removed": 1})
    );
    assert!(body["not_reloaded"][0]
        .as_str()
        .unwrap()
        .contains("server limits"));
    assert_eq!(chat(&gw, "h", "gone"), 400);

    let before = done.load(Ordering::Relaxed);
    e2e::eventually("streams after the reloads", Duration::from_secs(10), || {
        (done.load(Ordering::Relaxed) >= before + 8).then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    let failures: Vec<String> = load.into_iter().flat_map(|t| t.join().unwrap()).collect();
    assert!(failures.is_empty(), "failed during reloads: {failures:?}");
}
