//! The response cache (LiteLLM's `litellm_settings.cache: true`) against
//! the real binary and the mock provider, which numbers its answers and
//! counts its calls: a repeated request is answered without an upstream
//! call, with `x-litellm-cache-key` and the first answer's id; what changes
//! the answer changes the key; streams are stored and played back; errors
//! are never stored; the body's `cache` controls; TTL; Redis shared by two
//! replicas and a Redis outage served from the upstream; refused backends.
//!
//! `type: local` is per core: each local test sends its requests on one
//! keep-alive connection, which one core serves.

use e2e::http::request;
use e2e::{assert_error, base_config, eventually, openai_model, to_yaml, Conn, Gateway};
use e2e::{MockServer, PrivateRedis, Response, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

fn config(mock: &MockServer, cache_params: Value) -> Value {
    let mut c = base_config(mock.port());
    c["litellm_settings"] = json!({"cache": true, "cache_params": cache_params});
    c
}

fn post(conn: &mut Conn, path: &str, body: &Value) -> Response {
    let auth = format!("Bearer {MASTER_KEY}");
    let body = body.to_string();
    conn.roundtrip(&request(
        "POST",
        path,
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    ))
}

fn chat(conn: &mut Conn, body: Value) -> Response {
    post(conn, "/v1/chat/completions", &body)
}

fn chat_as(conn: &mut Conn, key: &str, body: Value) -> Response {
    let auth = format!("Bearer {key}");
    let body = body.to_string();
    conn.roundtrip(&request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    ))
}

fn hello(extra: Value) -> Value {
    let mut b = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}],
        "temperature": 0.2});
    if let (Some(b), Value::Object(extra)) = (b.as_object_mut(), extra) {
        b.extend(extra);
    }
    b
}

fn upstream_calls(mock: &MockServer) -> u64 {
    mock.stats()["requests"].as_u64().expect("requests counter")
}

fn cache_key(r: &Response) -> Option<String> {
    r.header("x-litellm-cache-key").map(str::to_string)
}

/// The chunks of an SSE body and whether it ended with `data: [DONE]`.
fn sse_chunks(r: &Response) -> (Vec<Value>, bool) {
    let text = r.text();
    let data: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(str::trim)
        .collect();
    let done = data.last() == Some(&"[DONE]");
    let chunks = data
        .iter()
        .filter(|d| **d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("bad chunk {d:?}: {e}")))
        .collect();
    (chunks, done)
}

fn streamed_content(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

#[test]
fn a_repeated_request_is_answered_from_the_cache_with_its_key() {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start(&to_yaml(&config(&mock, json!({"type": "local"}))), &[]);
    let mut conn = gw.connect();

    let first = chat(&mut conn, hello(json!({}))).expect_status(200);
    assert!(cache_key(&first).is_none(), "a miss names no entry");
    assert_eq!(upstream_calls(&mock), 1);
    let second = chat(&mut conn, hello(json!({}))).expect_status(200);
    assert_eq!(upstream_calls(&mock), 1, "the hit made no upstream call");
    let key = cache_key(&second).expect("x-litellm-cache-key on a hit");
    assert_eq!(key.len(), 64);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
    let (a, b) = (first.json(), second.json());
    assert_eq!(a["id"], b["id"]);
    assert_eq!(a["choices"], b["choices"]);
    assert_eq!(a["usage"], b["usage"]);

    // What does not change the answer does not change the key.
    let same = chat(
        &mut conn,
        hello(json!({"user": "someone", "metadata": {"trace": "x"}})),
    )
    .expect_status(200);
    assert_eq!(cache_key(&same).as_deref(), Some(key.as_str()));
    assert_eq!(upstream_calls(&mock), 1);

    // What changes it does.
    for changed in [
        hello(json!({"temperature": 0.3})),
        hello(json!({"seed": 7})),
        hello(json!({"messages": [{"role": "user", "content": "hello!"}]})),
        hello(json!({"response_format": {"type": "json_object"}})),
    ] {
        let before = upstream_calls(&mock);
        let r = chat(&mut conn, changed.clone()).expect_status(200);
        assert!(cache_key(&r).is_none(), "{changed} was a hit");
        assert_eq!(upstream_calls(&mock), before + 1);
        assert_ne!(r.json()["id"], a["id"]);
    }

    // Embeddings, text completions and (whole) Responses are cached too.
    for (path, body) in [
        (
            "/v1/embeddings",
            json!({"model": "gpt-4o", "input": ["a", "b"]}),
        ),
        (
            "/v1/completions",
            json!({"model": "gpt-4o", "prompt": "say hi", "max_tokens": 5}),
        ),
        (
            "/v1/responses",
            json!({"model": "gpt-4o", "input": "say hi"}),
        ),
    ] {
        let first = post(&mut conn, path, &body).expect_status(200);
        let before = upstream_calls(&mock);
        let again = post(&mut conn, path, &body).expect_status(200);
        assert_eq!(upstream_calls(&mock), before, "{path}: no upstream call");
        assert!(cache_key(&again).is_some(), "{path}");
        assert_eq!(first.json(), again.json(), "{path}");
    }
}

#[test]
fn a_streamed_answer_is_stored_as_relayed_and_played_back() {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start(&to_yaml(&config(&mock, json!({"type": "local"}))), &[]);
    let mut conn = gw.connect();

    let streamed = chat(&mut conn, hello(json!({"stream": true}))).expect_status(200);
    let (chunks, done) = sse_chunks(&streamed);
    assert!(done && cache_key(&streamed).is_none());
    let content = streamed_content(&chunks);
    assert!(!content.is_empty());
    let id = chunks[0]["id"].clone();
    assert_eq!(upstream_calls(&mock), 1);

    // One entry serves both forms.
    let whole = chat(&mut conn, hello(json!({}))).expect_status(200);
    assert!(cache_key(&whole).is_some());
    let v = whole.json();
    assert_eq!(v["id"], id);
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], content.as_str());
    assert!(v["usage"]["total_tokens"].as_u64().unwrap() > 0, "{v}");

    let replayed = chat(
        &mut conn,
        hello(json!({"stream": true, "stream_options": {"include_usage": true}})),
    )
    .expect_status(200);
    assert!(cache_key(&replayed).is_some());
    assert!(replayed
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let (chunks, done) = sse_chunks(&replayed);
    assert!(done, "a replay ends with data: [DONE]");
    assert!(chunks
        .iter()
        .all(|c| c["id"] == id && c["object"] == "chat.completion.chunk"));
    assert_eq!(streamed_content(&chunks), content);
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"].is_string()));
    assert_eq!(chunks.last().unwrap()["usage"], v["usage"]);
    assert_eq!(upstream_calls(&mock), 1);
}

#[test]
fn errors_are_never_stored() {
    let mock = MockServer::start(&[]);
    let mut c = config(&mock, json!({"type": "local"}));
    c["model_list"].as_array_mut().unwrap().push(openai_model(
        "broken",
        "dep-broken",
        &mock.api_base(),
        json!({"extra_headers": {"x-mock-status": "400", "x-mock-error-message": "bad thing"}}),
    ));
    let gw = Gateway::start(&to_yaml(&c), &[]);
    let mut conn = gw.connect();
    for (stream, n) in [(false, 1), (false, 2), (true, 3), (true, 4)] {
        let r = chat(
            &mut conn,
            json!({"model": "broken", "messages": [{"role": "user", "content": "x"}], "stream": stream}),
        );
        assert_error(&r, 400);
        assert!(cache_key(&r).is_none());
        let failed = mock.stats()["failed"].as_u64().expect("failed counter");
        assert_eq!(failed, n, "every error went upstream");
    }
}

#[test]
fn no_cache_and_no_store_and_bad_controls() {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start(&to_yaml(&config(&mock, json!({"type": "local"}))), &[]);
    let mut conn = gw.connect();

    // no-store: answered, not stored.
    chat(&mut conn, hello(json!({"cache": {"no-store": true}}))).expect_status(200);
    let stored = chat(&mut conn, hello(json!({}))).expect_status(200);
    assert!(cache_key(&stored).is_none());
    assert_eq!(upstream_calls(&mock), 2);
    let hit = chat(&mut conn, hello(json!({}))).expect_status(200);
    assert!(cache_key(&hit).is_some());
    assert_eq!(upstream_calls(&mock), 2);

    // no-cache: the upstream answers, and its answer replaces the entry.
    let fresh = chat(&mut conn, hello(json!({"cache": {"no-cache": true}}))).expect_status(200);
    assert!(cache_key(&fresh).is_none());
    assert_eq!(upstream_calls(&mock), 3);
    assert_ne!(fresh.json()["id"], stored.json()["id"]);
    let hit = chat(&mut conn, hello(json!({}))).expect_status(200);
    assert_eq!(hit.json()["id"], fresh.json()["id"]);

    // A namespace is an entry of its own.
    let other =
        chat(&mut conn, hello(json!({"cache": {"namespace": "team-a"}}))).expect_status(200);
    assert!(cache_key(&other).is_none());
    let again =
        chat(&mut conn, hello(json!({"cache": {"namespace": "team-a"}}))).expect_status(200);
    assert!(cache_key(&again).unwrap().starts_with("team-a:"));

    for (controls, param) in [
        (json!("yes"), "cache"),
        (json!({"ttl": "ten"}), "cache.ttl"),
        (json!({"ttl": -1}), "cache.ttl"),
        (json!({"s-maxage": 1e15}), "cache.s-maxage"),
        (json!({"no-cache": "true"}), "cache.no-cache"),
        (json!({"no_cache": true}), "cache"),
    ] {
        let r = chat(&mut conn, hello(json!({"cache": controls})));
        let err = assert_error(&r, 400);
        assert_eq!(err["param"], param, "{controls}");
    }
    assert_eq!(upstream_calls(&mock), 4, "refused requests went nowhere");
}

#[test]
fn entries_expire_and_s_maxage_bounds_their_age() {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start(&to_yaml(&config(&mock, json!({"type": "local"}))), &[]);
    let mut conn = gw.connect();

    // Stored with the default TTL (600 s).
    let long = hello(json!({}));
    chat(&mut conn, long.clone()).expect_status(200);
    let r = chat(&mut conn, hello(json!({"cache": {"s-maxage": 1000}}))).expect_status(200);
    assert!(cache_key(&r).is_some(), "young enough");

    // Stored for one second.
    let short = hello(json!({"messages": [{"role": "user", "content": "brief"}]}));
    let mut with_ttl = short.clone();
    with_ttl["cache"] = json!({"ttl": 1});
    chat(&mut conn, with_ttl).expect_status(200);
    let calls = upstream_calls(&mock);
    eventually(
        "the one-second entry to expire",
        Duration::from_secs(20),
        || {
            let r = chat(&mut conn, short.clone()).expect_status(200);
            cache_key(&r).is_none().then_some(())
        },
    );
    assert_eq!(upstream_calls(&mock), calls + 1, "one miss once it expired");
    // The default-TTL entry outlived it.
    let r = chat(&mut conn, long.clone()).expect_status(200);
    assert!(cache_key(&r).is_some());
    // ... but not a request that accepts only younger answers.
    eventually(
        "s-maxage to refuse the older entry",
        Duration::from_secs(20),
        || {
            let r = chat(&mut conn, hello(json!({"cache": {"s-maxage": 0.5}}))).expect_status(200);
            cache_key(&r).is_none().then_some(())
        },
    );
}

#[test]
fn default_off_caches_only_what_asks_for_it() {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start(
        &to_yaml(&config(
            &mock,
            json!({"type": "local", "mode": "default_off"}),
        )),
        &[],
    );
    let ready = gw
        .get("/health/readiness/details")
        .expect_status(200)
        .json();
    assert_eq!(ready["cache"], "local");
    let mut conn = gw.connect();
    chat(&mut conn, hello(json!({}))).expect_status(200);
    let r = chat(&mut conn, hello(json!({}))).expect_status(200);
    assert!(cache_key(&r).is_none());
    assert_eq!(upstream_calls(&mock), 2);
    chat(&mut conn, hello(json!({"cache": {"use-cache": true}}))).expect_status(200);
    let r = chat(&mut conn, hello(json!({"cache": {"use-cache": true}}))).expect_status(200);
    assert!(cache_key(&r).is_some());
    assert_eq!(upstream_calls(&mock), 3);
}

#[test]
fn backends_this_gateway_lacks_are_refused_at_start_up() {
    let mock = MockServer::start(&[]);
    for t in ["s3", "gcs", "disk", "qdrant-semantic", "redis-semantic"] {
        let yaml = to_yaml(&config(&mock, json!({"type": t})));
        let mut gw = Gateway::spawn(&yaml, &[], e2e::free_port(), &[]);
        let status = gw
            .wait_exit(Duration::from_secs(20))
            .unwrap_or_else(|| panic!("started with cache type {t}\n{}", gw.output()));
        assert!(!status.success());
        let out = gw.output();
        assert!(
            out.contains(t) && out.contains("not supported"),
            "{t}: {out}"
        );
    }
}

#[test]
fn redis_entries_are_shared_by_replicas_and_an_outage_is_a_miss() {
    let mock = MockServer::start(&[]);
    let redis = PrivateRedis::start();
    let params = json!({"type": "redis", "host": "127.0.0.1", "port": redis.port(),
        "namespace": "gw-test"});
    let yaml = to_yaml(&config(&mock, params));
    let a = Gateway::start(&yaml, &[]);
    let b = Gateway::start(&yaml, &[]);

    let first = chat(&mut a.connect(), hello(json!({}))).expect_status(200);
    assert!(cache_key(&first).is_none());
    // Written without waiting: the other replica sees it once it landed
    // (its misses meanwhile store nothing, so the entry stays the first's).
    let hit = eventually("the entry in Redis", Duration::from_secs(10), || {
        let r = chat(
            &mut b.connect(),
            hello(json!({"cache": {"no-store": true}})),
        )
        .expect_status(200);
        cache_key(&r).is_some().then_some(r)
    });
    let key = cache_key(&hit).unwrap();
    assert!(key.starts_with("gw-test:"), "{key}");
    assert_eq!(hit.json()["id"], first.json()["id"]);
    let calls = upstream_calls(&mock);
    for gw in [&a, &b] {
        let r = chat(&mut gw.connect(), hello(json!({"stream": true}))).expect_status(200);
        assert_eq!(cache_key(&r).as_deref(), Some(key.as_str()));
        assert!(sse_chunks(&r).1);
    }
    assert_eq!(upstream_calls(&mock), calls);

    // A foreign value under a key is a miss, never an error.
    let mut foreign = hello(json!({"messages": [{"role": "user", "content": "foreign"}]}));
    chat(&mut a.connect(), foreign.clone()).expect_status(200);
    foreign["cache"] = json!({"no-store": true});
    let foreign_key = eventually("the second entry", Duration::from_secs(10), || {
        let r = chat(&mut a.connect(), foreign.clone()).expect_status(200);
        cache_key(&r)
    });
    redis.command(&["SET", &foreign_key, "{\"timestamp\": 1, \"response\": 5}"]);
    let r = chat(&mut a.connect(), foreign).expect_status(200);
    assert!(cache_key(&r).is_none());

    // Redis down: served from the upstream.
    redis.stop();
    let calls = upstream_calls(&mock);
    for _ in 0..3 {
        let r = chat(&mut a.connect(), hello(json!({}))).expect_status(200);
        assert!(cache_key(&r).is_none());
    }
    assert_eq!(upstream_calls(&mock), calls + 3);
}

/// The value of the one series of `name` whose labels include `label`.
fn series(text: &str, name: &str, label: &str) -> f64 {
    let found: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(found.len(), 1, "{name} {label}:\n{text}");
    found[0]
}

#[test]
fn hits_and_misses_are_counted_in_litellms_families() {
    let mock = MockServer::start(&[]);
    let mut c = config(&mock, json!({"type": "local"}));
    c["litellm_settings"]["callbacks"] = json!(["prometheus"]);
    let gw = Gateway::start(&to_yaml(&c), &[]);
    let mut conn = gw.connect();
    let first = chat(&mut conn, hello(json!({}))).expect_status(200);
    for _ in 0..2 {
        chat(&mut conn, hello(json!({}))).expect_status(200);
    }
    let text = gw.get("/metrics").expect_status(200).text();
    let model = "model=\"gpt-4o\"";
    assert_eq!(
        series(&text, "litellm_cache_misses_metric_total", model),
        1.0
    );
    assert_eq!(series(&text, "litellm_cache_hits_metric_total", model), 2.0);
    let tokens = first.json()["usage"]["total_tokens"].as_f64().unwrap();
    assert!(tokens > 0.0);
    assert_eq!(
        series(&text, "litellm_cached_tokens_metric_total", model),
        2.0 * tokens
    );
}

#[test]
fn a_frozen_redis_is_bypassed_and_the_cache_comes_back_by_itself() {
    let mock = MockServer::start(&[]);
    let redis = PrivateRedis::start();
    let params = json!({"type": "redis", "host": "127.0.0.1", "port": redis.port()});
    let gw = Gateway::start(
        &to_yaml(&config(&mock, params)),
        &[("REDIS_CIRCUIT_BREAKER_RECOVERY_TIMEOUT", "1")],
    );
    chat(&mut gw.connect(), hello(json!({}))).expect_status(200);
    let stored = hello(json!({"cache": {"no-store": true}}));
    eventually("the entry in Redis", Duration::from_secs(10), || {
        let r = chat(&mut gw.connect(), stored.clone()).expect_status(200);
        cache_key(&r).is_some().then_some(())
    });

    // Redis stops answering (SIGSTOP): every request is served from the
    // upstream, none waits for Redis past its deadline or fails.
    redis.freeze();
    let calls = upstream_calls(&mock);
    for _ in 0..8 {
        let r = chat(&mut gw.connect(), stored.clone()).expect_status(200);
        assert!(cache_key(&r).is_none());
    }
    assert_eq!(upstream_calls(&mock), calls + 8);

    // Redis answers again: the breaker lets a probe through and the entry
    // written before the outage is served again.
    redis.thaw();
    eventually("hits after the outage", Duration::from_secs(30), || {
        let r = chat(&mut gw.connect(), stored.clone()).expect_status(200);
        cache_key(&r).is_some().then_some(())
    });
}

#[test]
fn entries_live_on_a_redis_cluster() {
    let mock = MockServer::start(&[]);
    let cluster = e2e::PrivateCluster::start();
    let nodes: Value = serde_json::from_str(&cluster.nodes_json()).unwrap();
    let params = json!({"type": "redis", "redis_startup_nodes": nodes});
    let yaml = to_yaml(&config(&mock, params));
    let (a, b) = (Gateway::start(&yaml, &[]), Gateway::start(&yaml, &[]));
    // Keys of several prompts land on several slots (and masters).
    let prompts: Vec<Value> = (0..6)
        .map(|i| hello(json!({"messages": [{"role": "user", "content": format!("prompt {i}")}]})))
        .collect();
    let mut ids = Vec::new();
    for p in &prompts {
        ids.push(chat(&mut a.connect(), p.clone()).expect_status(200).json()["id"].clone());
    }
    for (p, id) in prompts.iter().zip(&ids) {
        let mut p = p.clone();
        p["cache"] = json!({"no-store": true});
        let r = eventually("the entry on the cluster", Duration::from_secs(10), || {
            let r = chat(&mut b.connect(), p.clone()).expect_status(200);
            cache_key(&r).is_some().then_some(r)
        });
        assert_eq!(&r.json()["id"], id);
        let key = cache_key(&r).unwrap();
        assert!(
            matches!(
                cluster.command(&["EXISTS", &key]),
                e2e::redis::Reply::Int(1)
            ),
            "{key} is in the cluster"
        );
    }
}

#[test]
fn a_keys_metadata_cache_controls_replace_the_bodys() {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start(&to_yaml(&config(&mock, json!({"type": "local"}))), &[]);
    let generate = |metadata: Value| {
        let r = gw.post("/key/generate", &json!({"metadata": metadata}));
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["key"].as_str().expect("key").to_string()
    };
    let never = generate(json!({"cache": {"no-cache": true}}));
    let plain = generate(json!({}));
    let mut conn = gw.connect();
    chat_as(&mut conn, &plain, hello(json!({}))).expect_status(200);
    let hit = chat_as(&mut conn, &plain, hello(json!({}))).expect_status(200);
    assert!(cache_key(&hit).is_some());
    // The key's no-cache wins over the body's controls: never a hit.
    for body in [hello(json!({})), hello(json!({"cache": {"s-maxage": 600}}))] {
        let before = upstream_calls(&mock);
        let r = chat_as(&mut conn, &never, body).expect_status(200);
        assert!(cache_key(&r).is_none());
        assert_eq!(upstream_calls(&mock), before + 1);
    }
}

#[test]
fn answers_over_the_item_size_are_not_stored() {
    let mock = MockServer::start(&[]);
    let mut c = config(&mock, json!({"type": "local", "max_size_per_item": 1}));
    c["model_list"].as_array_mut().unwrap().push(openai_model(
        "long",
        "dep-long",
        &mock.api_base(),
        json!({"extra_headers": {"x-mock-completion-tokens": "2000"}}),
    ));
    let gw = Gateway::start(&to_yaml(&c), &[]);
    let mut conn = gw.connect();
    let long = json!({"model": "long", "messages": [{"role": "user", "content": "x"}]});
    for stream in [false, true] {
        let mut body = long.clone();
        body["stream"] = json!(stream);
        let first = chat(&mut conn, body.clone()).expect_status(200);
        assert!(first.body.len() > 1024, "the answer is over 1 KB");
        let again = chat(&mut conn, body).expect_status(200);
        assert!(cache_key(&again).is_none(), "stream={stream}: stored");
    }
    assert_eq!(upstream_calls(&mock), 4);
    // A short answer under the same bound is stored.
    chat(&mut conn, hello(json!({}))).expect_status(200);
    let hit = chat(&mut conn, hello(json!({}))).expect_status(200);
    assert!(cache_key(&hit).is_some());
}
