//! Process lifecycle: start-up failures, config loading and graceful shutdown.

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use e2e::config::add_model;
use e2e::http::is_timeout;
use e2e::{
    base_config, chat_body, openai_model, request, to_yaml, unique_id, Conn, Gateway, MockServer,
    MASTER_KEY,
};
use serde_json::json;

const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

#[test]
fn port_in_use_exits_nonzero_with_a_clear_message() {
    let mock = MockServer::start(&[]);
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = holder.local_addr().expect("addr").port();
    let mut gw = Gateway::spawn(&to_yaml(&base_config(mock.port())), &[], port, &[]);
    let status = gw
        .wait_exit(EXIT_TIMEOUT)
        .unwrap_or_else(|| panic!("gateway kept running on a port in use\n{}", gw.output()));
    assert!(!status.success(), "exit status {status}\n{}", gw.output());
    let out = gw.output();
    let lower = out.to_ascii_lowercase();
    assert!(
        lower.contains("in use") || lower.contains("eaddrinuse"),
        "message should say the address is in use:\n{out}"
    );
    assert!(
        out.contains(&port.to_string()),
        "message should name port {port}:\n{out}"
    );
    drop(holder);
}

#[test]
fn second_gateway_on_the_same_port_exits_nonzero() {
    // Both would bind with SO_REUSEPORT: the second must still refuse to start.
    let mock = MockServer::start(&[]);
    let config = to_yaml(&base_config(mock.port()));
    let first = Gateway::start(&config, &[]);
    let mut second = Gateway::spawn(&config, &[], first.port(), &[]);
    let status = second.wait_exit(EXIT_TIMEOUT).unwrap_or_else(|| {
        panic!(
            "a second gateway started on port {} already served by another\n{}",
            first.port(),
            second.output()
        )
    });
    assert!(
        !status.success(),
        "exit status {status}\n{}",
        second.output()
    );
    assert!(
        second.output().to_ascii_lowercase().contains("in use"),
        "{}",
        second.output()
    );
    assert_eq!(
        first.call("GET", "/health/liveliness", &[], b"").status,
        200
    );
}

#[test]
fn invalid_config_names_the_file_and_the_entry() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        json!({
            "model_name": "broken-entry",
            "litellm_params": {"api_base": mock.api_base(), "api_key": "sk-x"},
        }),
    );
    let mut gw = Gateway::spawn(&to_yaml(&config), &[], e2e::free_port(), &[]);
    let status = gw
        .wait_exit(EXIT_TIMEOUT)
        .unwrap_or_else(|| panic!("gateway started with an invalid config\n{}", gw.output()));
    assert!(!status.success(), "exit status {status}\n{}", gw.output());
    let out = gw.output();
    let path = gw.config_path().display().to_string();
    assert!(out.contains(&path), "message should name {path}:\n{out}");
    assert!(
        ["broken-entry", "model_list[2]", "model_list.2"]
            .iter()
            .any(|s| out.contains(s)),
        "message should name the entry (its model_name or model_list[2]):\n{out}"
    );
}

#[test]
fn env_references_are_resolved_anywhere_in_the_config() {
    let mock = MockServer::start(&[]);
    let upstream_key = format!("sk-{}", unique_id("env"));
    let master = format!("sk-master-{}", unique_id("env"));
    let config = r#"model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/upstream-gpt
      api_base: os.environ/E2E_API_BASE
      api_key: os.environ/UPSTREAM_KEY
    model_info:
      id: dep-env
general_settings:
  master_key: os.environ/E2E_MASTER_KEY
"#;
    let api_base = mock.api_base();
    let gw = Gateway::start(
        config,
        &[
            ("UPSTREAM_KEY", &upstream_key),
            ("E2E_API_BASE", &api_base),
            ("E2E_MASTER_KEY", &master),
        ],
    );
    let auth = format!("Bearer {master}");
    let resp = gw.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        chat_body("gpt-4o").to_string().as_bytes(),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let stats = mock.stats();
    assert!(
        stats["by_key"].get(&upstream_key).is_some(),
        "mock did not receive the key from UPSTREAM_KEY: {stats}"
    );
    assert!(
        stats["by_key"].get("os.environ/UPSTREAM_KEY").is_none(),
        "reference sent unresolved: {stats}"
    );
}

#[test]
fn sigint_when_idle_exits_zero_promptly() {
    let mock = MockServer::start(&[]);
    let mut gw = Gateway::start_json(&base_config(mock.port()), &[]);
    gw.signal(libc::SIGINT);
    // shutdown_grace_secs is 10: with nothing in flight it must not wait it out.
    let status = gw.wait_exit(Duration::from_secs(8)).unwrap_or_else(|| {
        panic!(
            "idle gateway still running 8 s after SIGINT\n{}",
            gw.output()
        )
    });
    assert!(status.success(), "exit status {status}\n{}", gw.output());
}

#[test]
fn sigterm_lets_an_in_flight_stream_finish() {
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(
            "slow-stream",
            "dep-slow",
            &mock.api_base(),
            json!({"extra_headers": {"x-mock-chunk-delay-ms": "100", "x-mock-completion-tokens": "20"}}),
        ),
    );
    let mut gw = Gateway::start_json(&config, &[]);

    let mut body = chat_body("slow-stream");
    body["stream"] = json!(true);
    let auth = format!("Bearer {MASTER_KEY}");
    let mut conn = gw.connect();
    conn.send(&request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    ));
    let head = conn.read_head().expect("stream head");
    assert_eq!(head.status, 200, "{head:?}");
    let mut sse = conn.sse(&head);
    let first = sse.next_event().expect("first event").expect("an event");
    assert_ne!(first, "[DONE]");

    let signalled = Instant::now();
    gw.signal(libc::SIGTERM);
    thread::sleep(Duration::from_millis(300));

    // A new connection is refused, or answered with `Connection: close`.
    check_new_connection_after_sigterm(gw.port(), &gw);

    let rest = sse.collect_timed().expect("rest of the stream");
    let (last, _) = rest.last().cloned().expect("events after SIGTERM");
    assert_eq!(last, "[DONE]", "stream cut short by SIGTERM: {rest:?}");
    assert!(
        rest.len() >= 5,
        "only {} events after SIGTERM for 20 tokens",
        rest.len()
    );

    let status = gw
        .wait_exit(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("gateway still running after SIGTERM\n{}", gw.output()));
    assert!(status.success(), "exit status {status}\n{}", gw.output());
    assert!(signalled.elapsed() < Duration::from_secs(15));
}

#[test]
fn sigterm_closes_idle_keep_alive_connections_without_waiting_out_the_grace() {
    let mock = MockServer::start(&[]);
    let mut gw = Gateway::start_json(&base_config(mock.port()), &[]);
    // Several idle connections, so both cores (whichever accepted them)
    // must close theirs.
    let mut idle: Vec<Conn> = (0..8)
        .map(|_| {
            let mut conn = gw.connect();
            let resp = conn.roundtrip(&request(
                "GET",
                "/health/liveliness",
                &[("Connection", "keep-alive")],
                b"",
            ));
            assert_eq!(resp.status, 200);
            assert!(!resp.connection_close(), "{:?}", resp.headers);
            conn
        })
        .collect();
    gw.signal(libc::SIGTERM);
    // shutdown_grace_secs is 10 and the keep-alive timeout longer: an idle
    // connection the shutdown does not close would stay open past 8 s.
    for (i, conn) in idle.iter_mut().enumerate() {
        assert!(
            conn.closed_within(Duration::from_secs(8)),
            "idle connection {i} still open 8 s after SIGTERM\n{}",
            gw.output()
        );
    }
    let status = gw
        .wait_exit(Duration::from_secs(8))
        .unwrap_or_else(|| panic!("gateway still running after SIGTERM\n{}", gw.output()));
    assert!(status.success(), "exit status {status}\n{}", gw.output());
}

fn check_new_connection_after_sigterm(port: u16, gw: &Gateway) {
    let Ok(mut conn) = Conn::try_connect(port) else {
        return; // refused
    };
    conn.set_read_timeout(Duration::from_secs(5));
    let sent = conn.try_send(&request(
        "GET",
        "/health/liveliness",
        &[("Connection", "keep-alive")],
        b"",
    ));
    match conn.try_read_response() {
        Ok(resp) => assert!(
            resp.header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close")),
            "a connection accepted after SIGTERM must be answered with Connection: close; \
             got {} {:?}",
            resp.status,
            resp.headers
        ),
        Err(e) if is_timeout(&e) => panic!(
            "a connection made after SIGTERM hung (sent: {sent:?})\n{}",
            gw.output()
        ),
        // Closed or reset unanswered: the listener was gone (a refusal).
        Err(_) => {}
    }
}
