//! Holes a code reading found in the fault handling, each closed and held
//! shut by a test here: spend rows at shutdown (the last ones flushed,
//! requests cut at the end of the grace period recorded as such), the spool
//! replay of a torn file, the control plane answering while Postgres is
//! frozen, and a budget reset racing rows settled before it.

use std::time::{Duration, Instant};

use e2e::{
    base_config, chat_body, eventually, request, to_yaml, Gateway, PrivatePostgres, TestDb,
    MASTER_KEY,
};
use serde_json::{json, Value};

/// A config whose only model group, `local`, is the in-process mock with
/// `params` added to its `litellm_params`, with a spool in `spool_dir`.
fn local_config(params: Value, gateway_settings: Value) -> Value {
    let mut litellm_params = json!({
        "model": "mock/local",
        "mock_response": "one two three four",
        "input_cost_per_token": 0.00001,
        "output_cost_per_token": 0.0001,
    });
    if let (Some(p), Value::Object(extra)) = (litellm_params.as_object_mut(), params) {
        p.extend(extra);
    }
    let mut config = base_config(1);
    config["model_list"] = json!([{
        "model_name": "local",
        "litellm_params": litellm_params,
        "model_info": {"id": "local-1"},
    }]);
    if let (Some(g), Value::Object(extra)) =
        (config["gateway_settings"].as_object_mut(), gateway_settings)
    {
        g.extend(extra);
    }
    config
}

fn post_chat(gw: &Gateway, body: &Value) -> e2e::Response {
    let auth = format!("Bearer {MASTER_KEY}");
    gw.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
}

fn count(db: &TestDb, filter: &str) -> usize {
    db.query(&format!(
        r#"SELECT count(*) FROM "LiteLLM_SpendLogs" WHERE {filter}"#
    ))
    .parse()
    .expect("a count")
}

/// The rows of the last requests (still on a core, or in the control
/// plane's batch, when the process stops) are written before it exits:
/// requests in flight at SIGTERM finish during the grace period and their
/// rows are flushed by the cores' last flush, not lost with the runtime.
#[test]
fn sigterm_writes_the_rows_of_the_last_requests() {
    let db = TestDb::create();
    let spool = tempfile::tempdir().expect("spool dir");
    let config = local_config(
        json!({"mock_latency_ms": 300}),
        json!({"spool_dir": spool.path().to_str().expect("utf-8 path")}),
    );
    let mut gw = Gateway::start(&to_yaml(&config), &[("DATABASE_URL", db.url())]);
    const SEQUENTIAL: usize = 5;
    for _ in 0..SEQUENTIAL {
        post_chat(&gw, &chat_body("local")).expect_status(200);
    }
    // Requests in flight when the signal comes, on both cores.
    const IN_FLIGHT: usize = 16;
    let auth = format!("Bearer {MASTER_KEY}");
    let body = chat_body("local").to_string();
    let mut conns: Vec<e2e::Conn> = (0..IN_FLIGHT)
        .map(|_| {
            let mut conn = gw.connect();
            conn.send(&request(
                "POST",
                "/v1/chat/completions",
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/json"),
                ],
                body.as_bytes(),
            ));
            conn
        })
        .collect();
    // Every request reached the gateway (each holds a connection) before
    // the signal: the mock's latency keeps them in flight.
    eventually("the requests in flight", Duration::from_secs(10), || {
        (count_open(&gw) >= IN_FLIGHT).then_some(())
    });
    gw.signal(libc::SIGTERM);
    for conn in &mut conns {
        conn.read_response().expect_status(200);
    }
    let status = gw
        .wait_exit(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("gateway still running after SIGTERM\n{}", gw.output()));
    assert!(status.success(), "exit status {status}\n{}", gw.output());
    assert_eq!(
        count(&db, "true"),
        SEQUENTIAL + IN_FLIGHT,
        "every answered request has its row once the process exited\n{}",
        gw.output()
    );
}

/// A connection the gateway accepted before SIGTERM whose client sends its
/// first request only once shutdown has begun is still answered: the
/// client connected while the gateway served (a request already in the
/// socket, or one a client sends just after connecting), so closing it
/// unread would lose a request nobody refused.
#[test]
fn a_connection_accepted_before_sigterm_gets_its_first_request_answered() {
    let config = local_config(json!({}), json!({}));
    let mut gw = Gateway::start(&to_yaml(&config), &[]);
    let mut conn = gw.connect();
    eventually("the connection accepted", Duration::from_secs(10), || {
        (count_open(&gw) >= 1).then_some(())
    });
    gw.signal(libc::SIGTERM);
    // Shutdown has begun once no core listens any more.
    eventually("the listeners closed", Duration::from_secs(10), || {
        e2e::Conn::try_connect(gw.port()).is_err().then_some(())
    });
    let auth = format!("Bearer {MASTER_KEY}");
    conn.send(&request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        chat_body("local").to_string().as_bytes(),
    ));
    let answer = conn.read_response().expect_status(200);
    assert!(
        answer.connection_close(),
        "an answer during shutdown closes its connection"
    );
    let status = gw
        .wait_exit(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("gateway still running after SIGTERM\n{}", gw.output()));
    assert!(status.success(), "exit status {status}\n{}", gw.output());
}

/// Client connections the gateway holds open, from its `/proc` fd table:
/// the sockets established with a peer on its port.
fn count_open(gw: &Gateway) -> usize {
    let port = format!(":{:04X} ", gw.port());
    let inodes: std::collections::HashSet<String> =
        std::fs::read_dir(format!("/proc/{}/fd", gw.pid()))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| std::fs::read_link(e.path()).ok())
                    .filter_map(|l| {
                        let l = l.to_string_lossy().into_owned();
                        l.strip_prefix("socket:[")?
                            .strip_suffix(']')
                            .map(str::to_string)
                    })
                    .collect()
            })
            .unwrap_or_default();
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    tcp.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local address, state 01 (established), inode
            f.len() > 9
                && format!("{} ", f[1]).contains(&port)
                && f[3] == "01"
                && inodes.contains(f[9])
        })
        .count()
}

/// A stream still running when the grace period ends is cut off, and its
/// row says so (status failure, error class `cut_off`), with the usage it
/// had streamed.
#[test]
fn a_stream_cut_off_at_the_end_of_the_grace_period_leaves_a_row() {
    let db = TestDb::create();
    let spool = tempfile::tempdir().expect("spool dir");
    let config = local_config(
        json!({"mock_chunk_delay_ms": 300, "mock_completion_tokens": 200}),
        json!({
            "shutdown_grace_secs": 1,
            "spool_dir": spool.path().to_str().expect("utf-8 path"),
        }),
    );
    let mut gw = Gateway::start(&to_yaml(&config), &[("DATABASE_URL", db.url())]);
    let mut body = chat_body("local");
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
    let call_id = head
        .header("x-litellm-call-id")
        .expect("a call id")
        .to_string();
    let mut sse = conn.sse(&head);
    sse.next_event().expect("first event").expect("an event");

    let signalled = Instant::now();
    gw.signal(libc::SIGTERM);
    // The stream ends without its [DONE]: cut off.
    let rest = sse.collect_timed().unwrap_or_default();
    assert!(
        rest.last().is_none_or(|(e, _)| e != "[DONE]"),
        "a 60 s stream finished within a 1 s grace period"
    );
    let status = gw
        .wait_exit(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("gateway still running after SIGTERM\n{}", gw.output()));
    assert!(status.success(), "exit status {status}\n{}", gw.output());
    assert!(
        signalled.elapsed() < Duration::from_secs(15),
        "the grace period is 1 s"
    );
    let row = db.query(&format!(
        r#"SELECT status, error_class, completion_tokens > 0 FROM "LiteLLM_SpendLogs"
           WHERE call_id = '{call_id}'"#
    ));
    assert_eq!(
        row,
        "failure|cut_off|t",
        "the cut stream's row\n{}",
        gw.output()
    );
}

/// A frozen Postgres (SIGSTOP: connections hang rather than fail) does not
/// freeze the control plane: management calls answer 503 within their
/// deadline, cached keys keep serving, and the rows of that time reach the
/// database once it thaws.
#[test]
fn the_control_plane_answers_while_postgres_is_frozen() {
    let pg = PrivatePostgres::start();
    let spool = tempfile::tempdir().expect("spool dir");
    let config = local_config(
        json!({}),
        json!({"spool_dir": spool.path().to_str().expect("utf-8 path")}),
    );
    let gw = Gateway::start(&to_yaml(&config), &[("DATABASE_URL", &pg.url())]);
    let key = gw
        .post("/key/generate", &json!({}))
        .expect_status(200)
        .json()["key"]
        .as_str()
        .expect("a key")
        .to_string();
    let with_key = |gw: &Gateway| {
        let auth = format!("Bearer {key}");
        gw.call(
            "POST",
            "/v1/chat/completions",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            chat_body("local").to_string().as_bytes(),
        )
    };
    with_key(&gw).expect_status(200);

    pg.freeze();
    let mut served = 0;
    let frozen_at = Instant::now();
    while frozen_at.elapsed() < Duration::from_secs(8) {
        with_key(&gw).expect_status(200);
        served += 1;
        let started = Instant::now();
        let info = gw.get("/key/list");
        assert!(
            started.elapsed() < Duration::from_secs(7),
            "a management call took {:?} while Postgres was frozen",
            started.elapsed()
        );
        assert!(
            info.status == 200 || info.status == 503,
            "{} {}",
            info.status,
            info.text()
        );
    }
    pg.thaw();
    let expected = served + 1;
    eventually(
        "the rows of the frozen time in Postgres",
        Duration::from_secs(30),
        || {
            let rows: usize = pg
                .query(r#"SELECT count(*) FROM "LiteLLM_SpendLogs""#)
                .parse()
                .ok()?;
            (rows == expected).then_some(())
        },
    );
    gw.get("/key/list").expect_status(200);
}

/// Admissions that reach Redis but are answered too late (Redis frozen with
/// SIGSTOP: the calls wait in its socket buffers and run when it thaws) are
/// served locally, so they must charge nothing in Redis when they finally
/// run: no request unit for the window, and above all no parallel slot for
/// `parallel_slot_ttl_secs` (600 s by default).
#[test]
fn late_redis_answers_leave_no_charge_and_no_slot_behind() {
    let redis = e2e::PrivateRedis::start();
    let url = redis.url();
    let config = local_config(json!({}), json!({}));
    let gw = Gateway::start(
        &to_yaml(&config),
        &[
            ("REDIS_URL", &url),
            ("REDIS_CIRCUIT_BREAKER_FAILURE_THRESHOLD", "3"),
            ("REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT", "1"),
        ],
    );
    let new_key = || {
        gw.post(
            "/key/generate",
            &json!({"rpm_limit": 1000, "max_parallel_requests": 10}),
        )
        .expect_status(200)
        .json()["key"]
            .as_str()
            .expect("a key")
            .to_string()
    };
    let (frozen_key, probe_key) = (new_key(), new_key());
    let chat_as = |key: &str| {
        let auth = format!("Bearer {key}");
        gw.call(
            "POST",
            "/v1/chat/completions",
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            chat_body("local").to_string().as_bytes(),
        )
    };
    let counter = |key: &str, kind: &str| format!("{{api_key:{}}}:{kind}", token(key));
    chat_as(&frozen_key).expect_status(200);
    assert_eq!(redis.window_total(&counter(&frozen_key, "requests")), 1);

    redis.freeze();
    for _ in 0..6 {
        chat_as(&frozen_key).expect_status(200);
    }
    e2e::eventually("the breaker opened", Duration::from_secs(10), || {
        gw.output().contains("circuit breaker opened").then_some(())
    });
    redis.thaw();
    // Once a probe closes the breaker, Redis has run everything it held.
    eventually("the breaker closed", Duration::from_secs(20), || {
        chat_as(&probe_key).expect_status(200);
        gw.output().contains("circuit breaker closed").then_some(())
    });
    chat_as(&probe_key).expect_status(200);
    assert_eq!(
        redis.window_total(&counter(&frozen_key, "requests")),
        1,
        "admissions run after their deadline charged requests\n{}",
        gw.output()
    );
    eventually("no parallel slot left", Duration::from_secs(10), || {
        (redis.slots(&counter(&frozen_key, "parallel")) == 0).then_some(())
    });
}

fn token(key: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}

/// The cores' Redis links name themselves (`CLIENT SETNAME`); a server
/// whose ACL refuses that command still counts every request.
#[test]
fn a_redis_acl_refusing_client_setname_still_counts_limits() {
    let redis = e2e::PrivateRedis::start();
    redis.command(&[
        "ACL", "SETUSER", "limited", "on", ">secret", "~*", "+@all", "-client",
    ]);
    let url = format!("redis://limited:secret@127.0.0.1:{}", redis.port());
    let config = local_config(json!({}), json!({}));
    let gw = Gateway::start(&to_yaml(&config), &[("REDIS_URL", &url)]);
    let key = gw
        .post("/key/generate", &json!({"rpm_limit": 2}))
        .expect_status(200)
        .json()["key"]
        .as_str()
        .expect("a key")
        .to_string();
    let auth = format!("Bearer {key}");
    let statuses: Vec<u16> = (0..3)
        .map(|_| {
            gw.call(
                "POST",
                "/v1/chat/completions",
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/json"),
                ],
                chat_body("local").to_string().as_bytes(),
            )
            .status
        })
        .collect();
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(
        redis.window_total(&format!("{{api_key:{}}}:requests", token(&key))),
        2,
        "counted in Redis\n{}",
        gw.output()
    );
}
