//! TLS on every hop the gateway owns, against real servers with a CA of the
//! test's own: Postgres with `sslmode=require` / `verify-full`, Redis over
//! `rediss://` on the per-core path and the control plane, and clients
//! terminating TLS at the gateway, with the certificate reloaded on SIGHUP.

use e2e::pki::{path_str, TestPki};
use e2e::{chat_body, to_yaml, Gateway, PrivatePostgres, MASTER_KEY};
use serde_json::{json, Value};

fn local_config() -> Value {
    json!({
        "model_list": [{
            "model_name": "local",
            "litellm_params": {
                "model": "mock/local",
                "mock_response": "one two three",
                "input_cost_per_token": 0.00001,
                "output_cost_per_token": 0.0001,
            },
        }],
        "general_settings": {"master_key": MASTER_KEY},
    })
}

/// Whether every session the gateway holds on `pg` is encrypted.
fn gateway_sessions_encrypted(pg: &PrivatePostgres) -> String {
    pg.query(
        "SELECT count(*) FILTER (WHERE s.ssl) || '/' || count(*) FROM pg_stat_ssl s
         JOIN pg_stat_activity a USING (pid) WHERE a.application_name LIKE 'gateway%'",
    )
}

fn generate_and_spend(gw: &Gateway) {
    let key = gw
        .post("/key/generate", &json!({}))
        .expect_status(200)
        .json()["key"]
        .as_str()
        .expect("a key")
        .to_string();
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
    .expect_status(200);
}

/// `sslmode=verify-full` with the CA given by `sslrootcert` (or by
/// `SSL_CERT_FILE`): the gateway checks the chain and the host name, and
/// every session it holds (pool and change listener) is encrypted.
#[test]
fn postgres_verify_full_with_a_private_ca() {
    let pki = TestPki::new();
    let pg = PrivatePostgres::start_tls(&pki.cert, &pki.key);
    let encoded_ca = path_str(&pki.ca).replace('/', "%2F");
    let url = format!("{}?sslmode=verify-full&sslrootcert={encoded_ca}", pg.url());
    let gw = Gateway::start(&to_yaml(&local_config()), &[("DATABASE_URL", &url)]);
    generate_and_spend(&gw);
    e2e::eventually(
        "the spend row in Postgres",
        std::time::Duration::from_secs(10),
        || (pg.query(r#"SELECT count(*) FROM "LiteLLM_SpendLogs""#) == "1").then_some(()),
    );
    let sessions = gateway_sessions_encrypted(&pg);
    let (encrypted, all) = sessions.split_once('/').expect("a ratio");
    assert!(
        all != "0" && encrypted == all,
        "encrypted sessions: {sessions}"
    );
    drop(gw);

    // The same CA through SSL_CERT_FILE, the gateway's bundle for every hop.
    let url = format!("{}?sslmode=verify-full", pg.url());
    let gw = Gateway::start(
        &to_yaml(&local_config()),
        &[("DATABASE_URL", &url), ("SSL_CERT_FILE", path_str(&pki.ca))],
    );
    generate_and_spend(&gw);
}

/// `verify-full` against a server whose CA the gateway does not trust is a
/// start-up error naming the certificate problem; `require` (encryption
/// without authentication, as libpq) connects, encrypted.
#[test]
fn postgres_require_encrypts_and_verify_full_refuses_an_unknown_ca() {
    let pki = TestPki::new();
    let pg = PrivatePostgres::start_tls(&pki.cert, &pki.key);
    let url = format!("{}?sslmode=verify-full", pg.url());
    let mut gw = Gateway::spawn(
        &to_yaml(&local_config()),
        &[("DATABASE_URL", &url)],
        e2e::free_port(),
        &[],
    );
    let status = gw
        .wait_exit(std::time::Duration::from_secs(30))
        .expect("start-up fails");
    assert!(!status.success());
    let out = gw.output();
    assert!(
        out.to_ascii_lowercase().contains("certificate"),
        "the error names the certificate: {out}"
    );

    let url = format!("{}?sslmode=require", pg.url());
    let gw = Gateway::start(&to_yaml(&local_config()), &[("DATABASE_URL", &url)]);
    generate_and_spend(&gw);
    let sessions = gateway_sessions_encrypted(&pg);
    let (encrypted, all) = sessions.split_once('/').expect("a ratio");
    assert!(
        all != "0" && encrypted == all,
        "encrypted sessions: {sessions}"
    );
}

fn rate_limited_config(mode: &str) -> String {
    let mut config = local_config();
    config["gateway_settings"] = json!({"rate_limits": {"mode": mode}});
    to_yaml(&config)
}

fn chat_with(gw: &Gateway, key: &str) -> u16 {
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
    .status
}

fn token(key: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}

/// `rediss://` with a CA from `SSL_CERT_FILE`: per-request limiter calls
/// (each core's own connection) and lease grants (the control plane's
/// client) both count in Redis over TLS, and the limit holds.
#[test]
fn redis_over_tls_on_the_cores_and_the_control_plane() {
    let pki = TestPki::new();
    let redis = e2e::PrivateRedis::start_tls(path_str(&pki.cert), path_str(&pki.key));
    let url = redis.tls_url();
    for mode in ["redis", "lease"] {
        let gw = Gateway::start(
            &rate_limited_config(mode),
            &[("REDIS_URL", &url), ("SSL_CERT_FILE", path_str(&pki.ca))],
        );
        let key = gw
            .post("/key/generate", &json!({"rpm_limit": 3}))
            .expect_status(200)
            .json()["key"]
            .as_str()
            .expect("a key")
            .to_string();
        let statuses: Vec<u16> = (0..4).map(|_| chat_with(&gw, &key)).collect();
        assert_eq!(statuses, [200, 200, 200, 429], "{mode}\n{}", gw.output());
        let counted = redis.window_total(&format!("{{api_key:{}}}:requests", token(&key)));
        assert!(counted >= 3, "{mode}: counted in Redis: {counted}");
        let out = gw.output();
        assert!(
            !out.contains("Redis limiter call failed") && !out.contains("circuit breaker"),
            "{mode}: Redis over TLS failed\n{out}"
        );
        if mode == "redis" {
            // The cores' own links (named so) are on the TLS port.
            let clients = match redis.command(&["CLIENT", "LIST"]) {
                e2e::redis::Reply::Bulk(Some(text)) => text,
                other => panic!("CLIENT LIST: {other:?}"),
            };
            let tls_port = url.rsplit(':').next().expect("a port");
            assert!(
                clients
                    .lines()
                    .any(|l| l.contains(&format!("laddr=127.0.0.1:{tls_port} "))
                        && l.contains("name=gateway-limiter-core ")),
                "no core link on the TLS port:\n{clients}"
            );
        }
    }
}

/// `rediss://...#insecure` (the certificate not checked, no CA given): the
/// cores leave such a URL to the control plane, whose connection speaks
/// TLS all the same; the limit holds and is counted in Redis.
#[test]
fn insecure_rediss_goes_through_the_control_plane_over_tls() {
    let pki = TestPki::new();
    let redis = e2e::PrivateRedis::start_tls(path_str(&pki.cert), path_str(&pki.key));
    let url = format!("{}#insecure", redis.tls_url());
    let gw = Gateway::start(&rate_limited_config("redis"), &[("REDIS_URL", &url)]);
    let key = gw
        .post("/key/generate", &json!({"rpm_limit": 3}))
        .expect_status(200)
        .json()["key"]
        .as_str()
        .expect("a key")
        .to_string();
    let statuses: Vec<u16> = (0..4).map(|_| chat_with(&gw, &key)).collect();
    assert_eq!(statuses, [200, 200, 200, 429], "{}", gw.output());
    let counted = redis.window_total(&format!("{{api_key:{}}}:requests", token(&key)));
    assert!(counted >= 3, "counted in Redis: {counted}");
    let clients = match redis.command(&["CLIENT", "LIST"]) {
        e2e::redis::Reply::Bulk(Some(text)) => text,
        other => panic!("CLIENT LIST: {other:?}"),
    };
    let tls_port = redis
        .tls_url()
        .rsplit(':')
        .next()
        .expect("a port")
        .to_string();
    let on_tls = |name: &str| {
        clients
            .lines()
            .any(|l| l.contains(&format!("laddr=127.0.0.1:{tls_port} ")) && l.contains(name))
    };
    assert!(on_tls("name=gateway-control "), "{clients}");
    assert!(!on_tls("name=gateway-limiter-core "), "{clients}");
}

/// A gateway terminating TLS: started with `args` (the flags) and `envs`,
/// ready once it answers over HTTPS.
fn start_https(pki: &TestPki, envs: &[(&str, &str)], args: &[&str]) -> Gateway {
    let mut config = local_config();
    config["model_list"]
        .as_array_mut()
        .expect("a model list")
        .push(json!({
            "model_name": "stream",
            "litellm_params": {"model": "mock/s", "mock_response": "a b c d e f", "mock_chunk_delay_ms": 5},
        }));
    let mut gw = Gateway::spawn(&to_yaml(&config), envs, e2e::free_port(), args);
    let client = e2e::tls_client::trusting(&pki.ca);
    let port = gw.port();
    e2e::eventually::<()>(
        "the gateway answering over HTTPS",
        std::time::Duration::from_secs(30),
        || {
            if let Some(status) = gw.wait_exit(std::time::Duration::ZERO) {
                panic!("gateway exited with {status}\n{}", gw.output());
            }
            let mut conn = e2e::tls_client::TlsConn::connect(port, &client).ok()?;
            conn.send(&e2e::request(
                "GET",
                "/health/liveliness",
                &[("Connection", "close")],
                b"",
            ))
            .ok()?;
            let answer = conn.read_until(b"\r\n\r\n", 1).ok()?;
            answer.starts_with(b"HTTP/1.1 200").then_some(())
        },
    );
    gw
}

fn https_chat(stream: bool, close: bool) -> Vec<u8> {
    let mut body = chat_body(if stream { "stream" } else { "local" });
    body["stream"] = json!(stream);
    let auth = format!("Bearer {MASTER_KEY}");
    let connection = if close { "close" } else { "keep-alive" };
    e2e::request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Connection", connection),
        ],
        body.to_string().as_bytes(),
    )
}

/// Clients reach the gateway over HTTPS (LiteLLM's `--ssl_certfile_path` /
/// `--ssl_keyfile_path`): keep-alive requests, a stream, and a plain HTTP
/// request to the TLS port is closed, not hung.
#[test]
fn clients_speak_https_with_keep_alive_and_streams() {
    let pki = TestPki::new();
    let gw = start_https(
        &pki,
        &[],
        &[
            "--ssl_certfile_path",
            path_str(&pki.cert),
            "--ssl_keyfile_path",
            path_str(&pki.key),
        ],
    );
    let client = e2e::tls_client::trusting(&pki.ca);
    let mut conn = e2e::tls_client::TlsConn::connect(gw.port(), &client).expect("handshake");
    assert_eq!(conn.peer_cert(), e2e::tls_client::cert_der(&pki.cert));
    // Two requests on one connection, then a stream that closes it.
    conn.send(&https_chat(false, false)).expect("send");
    let first = conn.read_until(b"\"usage\"", 1).expect("first answer");
    assert!(
        first.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&first)
    );
    conn.send(&https_chat(false, false)).expect("send");
    let second = conn.read_until(b"\"usage\"", 1).expect("second answer");
    assert!(
        second.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&second)
    );
    conn.send(&https_chat(true, true)).expect("send");
    let stream = conn.read_until(b"0\r\n\r\n", 1).expect("the stream");
    let text = String::from_utf8_lossy(&stream);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("data: [DONE]"), "{text}");

    // Plain HTTP on the TLS port: the handshake fails and the connection closes.
    let mut plain = gw.connect();
    plain.set_read_timeout(std::time::Duration::from_secs(5));
    let _ = plain.try_send(&e2e::request("GET", "/health/liveliness", &[], b""));
    assert!(
        plain.try_read_response().is_err(),
        "plain HTTP answered on the TLS port"
    );
}

/// `SSL_CERTFILE_PATH` / `SSL_KEYFILE_PATH` turn TLS on too; SIGHUP reloads
/// the certificate: new connections get the new one, a connection opened
/// before keeps working, and a broken file keeps the one in use.
#[test]
fn sighup_reloads_the_certificate() {
    let mut pki = TestPki::new();
    let gw = start_https(
        &pki,
        &[
            ("SSL_CERTFILE_PATH", path_str(&pki.cert)),
            ("SSL_KEYFILE_PATH", path_str(&pki.key)),
        ],
        &[],
    );
    let client = e2e::tls_client::trusting(&pki.ca);
    let first = e2e::tls_client::cert_der(&pki.cert);
    let mut open = e2e::tls_client::TlsConn::connect(gw.port(), &client).expect("handshake");
    assert_eq!(open.peer_cert(), first);

    pki.issue("second");
    let second = e2e::tls_client::cert_der(&pki.cert);
    assert_ne!(first, second);
    gw.signal(libc::SIGHUP);
    e2e::eventually(
        "new connections get the new certificate",
        std::time::Duration::from_secs(10),
        || {
            let conn = e2e::tls_client::TlsConn::connect(gw.port(), &client).ok()?;
            (conn.peer_cert() == second).then_some(())
        },
    );
    open.send(&https_chat(false, true)).expect("send");
    let answer = open.read_until(b"\"usage\"", 1).expect("answer");
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "the open connection still works"
    );

    // A broken file: the reload fails, the certificate in use stays.
    std::fs::write(&pki.key, "not a key").expect("break the key");
    gw.signal(libc::SIGHUP);
    e2e::eventually(
        "the failed reload logged",
        std::time::Duration::from_secs(10),
        || gw.output().contains("NOT reloaded").then_some(()),
    );
    let conn = e2e::tls_client::TlsConn::connect(gw.port(), &client).expect("handshake");
    assert_eq!(conn.peer_cert(), second);
}

/// Over TLS, the console's session cookie is `Secure` (beside `HttpOnly`
/// and `SameSite=Strict`).
#[test]
fn the_console_cookie_is_secure_over_tls() {
    let pki = TestPki::new();
    let gw = start_https(
        &pki,
        &[],
        &[
            "--ssl_certfile_path",
            path_str(&pki.cert),
            "--ssl_keyfile_path",
            path_str(&pki.key),
        ],
    );
    let client = e2e::tls_client::trusting(&pki.ca);
    let mut conn = e2e::tls_client::TlsConn::connect(gw.port(), &client).expect("handshake");
    let body = json!({"username": "admin", "password": MASTER_KEY}).to_string();
    conn.send(&e2e::request(
        "POST",
        "/ui/login",
        &[
            ("Content-Type", "application/json"),
            ("Connection", "close"),
        ],
        body.as_bytes(),
    ))
    .expect("send");
    let answer =
        String::from_utf8_lossy(&conn.read_until(b"csrf_token", 1).expect("answer")).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let cookie = answer
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .expect("a session cookie");
    for part in ["HttpOnly", "SameSite=Strict", "; Secure"] {
        assert!(cookie.contains(part), "{cookie}");
    }
}
