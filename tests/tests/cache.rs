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
    // That hit may have followed the first request's single flight before
    // its write reached Redis: overwrite the entry only once it is there.
    eventually("the second entry in Redis", Duration::from_secs(10), || {
        matches!(
            redis.command(&["EXISTS", &foreign_key]),
            e2e::redis::Reply::Int(1)
        )
        .then_some(())
    });
    redis.command(&["SET", &foreign_key, "{\"timestamp\": 1, \"response\": 5}"]);
    // A core's near copy goes once Redis's invalidation reached it.
    eventually("the foreign value a miss", Duration::from_secs(10), || {
        let r = chat(&mut a.connect(), foreign.clone()).expect_status(200);
        cache_key(&r).is_none().then_some(())
    });

    // Redis down: served from the upstream, the stored entry included.
    // Each request after the first asks something new: a miss's single
    // flight ends after its client has the answer, so an identical request
    // sent at once may follow it (a hit from this replica, not Redis).
    redis.stop();
    let calls = upstream_calls(&mock);
    for i in 0..3 {
        let body = match i {
            0 => hello(json!({})),
            _ => hello(json!({"messages": [{"role": "user", "content": format!("down {i}")}]})),
        };
        let r = chat(&mut a.connect(), body).expect_status(200);
        assert!(cache_key(&r).is_none());
    }
    assert_eq!(upstream_calls(&mock), calls + 3);
}

/// How many `GET`s Redis has run (`INFO commandstats`).
fn redis_gets(redis: &PrivateRedis) -> u64 {
    let e2e::redis::Reply::Bulk(Some(info)) = redis.command(&["INFO", "commandstats"]) else {
        panic!("INFO commandstats");
    };
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// Sends `probe` on `conn` until it is a hit that Redis ran no `GET` for
/// (served from the core's near copy); returns the entry's key.
fn near_hit(conn: &mut Conn, redis: &PrivateRedis, probe: &Value) -> String {
    eventually("a hit from the near copy", Duration::from_secs(20), || {
        let before = redis_gets(redis);
        let r = chat(conn, probe.clone()).expect_status(200);
        let key = cache_key(&r)?;
        (redis_gets(redis) == before).then_some(key)
    })
}

/// `type: redis` with each core's near copy (`CLIENT TRACKING`): a hit
/// repeated on one replica needs no Redis round trip; an entry deleted
/// through the other replica, or in Redis itself, stops being served at
/// once; while the tracking connection is down nothing is served from the
/// near copy, and it serves again once tracking is back.
#[test]
fn near_copies_stay_coherent_across_replicas() {
    let mock = MockServer::start(&[]);
    let redis = PrivateRedis::start();
    let params = json!({"type": "redis", "host": "127.0.0.1", "port": redis.port(),
        "namespace": "near"});
    let yaml = to_yaml(&config(&mock, params));
    let a = Gateway::start(&yaml, &[]);
    let b = Gateway::start(&yaml, &[]);
    let body = hello(json!({"messages": [{"role": "user", "content": "near"}]}));
    let mut probe = body.clone();
    probe["cache"] = json!({"no-store": true});
    // One keep-alive connection: one core of B serves it all.
    let mut on_b = b.connect();

    chat(&mut a.connect(), body.clone()).expect_status(200);
    let key = near_hit(&mut on_b, &redis, &probe);
    assert!(key.starts_with("near:"), "{key}");

    // Deleted through A: B stops serving it. Redis sends the invalidation
    // as it deletes, but writes it to B's tracking connection beside the
    // deleter's reply, not before it: B may serve its copy for the
    // moments the message is on its way (without it, for ever).
    let missed = |on_b: &mut Conn, what: &str| {
        eventually(what, Duration::from_secs(10), || {
            let r = chat(on_b, probe.clone()).expect_status(200);
            cache_key(&r).is_none().then_some(())
        })
    };
    let r = a.post("/cache/delete", &json!({"keys": [key]}));
    assert_eq!(r.status, 200, "{}", r.text());
    let calls = upstream_calls(&mock);
    missed(&mut on_b, "B's copy of a deleted entry dropped");
    assert!(upstream_calls(&mock) > calls);

    // Overwritten in Redis by someone else: a foreign value, a miss.
    chat(&mut a.connect(), body.clone()).expect_status(200);
    near_hit(&mut on_b, &redis, &probe);
    redis.command(&["SET", &key, "not an entry"]);
    missed(&mut on_b, "B's copy of an overwritten entry dropped");
    redis.command(&["DEL", &key]);

    // The tracking connections lost and kept from coming back (no channel
    // may be subscribed): B's near copy is emptied, so an entry deleted
    // meanwhile (its invalidation sent to nobody) is not served ...
    chat(&mut a.connect(), body.clone()).expect_status(200);
    near_hit(&mut on_b, &redis, &probe);
    redis.command(&["ACL", "SETUSER", "default", "resetchannels"]);
    redis.command(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    redis.command(&["DEL", &key]);
    missed(&mut on_b, "B's copies dropped with its tracking");
    // ... and hits go to Redis while tracking is down.
    chat(&mut a.connect(), body.clone()).expect_status(200);
    eventually("the entry in Redis", Duration::from_secs(10), || {
        let before = redis_gets(&redis);
        let r = chat(&mut on_b, probe.clone()).expect_status(200);
        let hit = cache_key(&r).is_some();
        assert!(
            redis_gets(&redis) > before,
            "served from the near copy without tracking"
        );
        hit.then_some(())
    });
    for _ in 0..3 {
        let before = redis_gets(&redis);
        let r = chat(&mut on_b, probe.clone()).expect_status(200);
        assert!(cache_key(&r).is_some());
        assert!(
            redis_gets(&redis) > before,
            "served from the near copy without tracking"
        );
    }

    // Tracking back: the near copy serves again.
    redis.command(&["ACL", "SETUSER", "default", "allchannels"]);
    near_hit(&mut on_b, &redis, &probe);
}

/// A near copy lives no longer than `default_in_memory_ttl`, nor than its
/// entry's TTL in Redis.
#[test]
fn near_copies_expire() {
    let mock = MockServer::start(&[]);
    let redis = PrivateRedis::start();
    let params = json!({"type": "redis", "host": "127.0.0.1", "port": redis.port(),
        "default_in_memory_ttl": 1});
    let gw = Gateway::start(&to_yaml(&config(&mock, params)), &[]);
    let body = hello(json!({"messages": [{"role": "user", "content": "short"}],
        "cache": {"ttl": 6}}));
    let mut probe = body.clone();
    probe["cache"] = json!({"no-store": true});
    let mut conn = gw.connect();
    chat(&mut conn, body).expect_status(200);
    let key = near_hit(&mut conn, &redis, &probe);
    let e2e::redis::Reply::Int(left) = redis.command(&["PTTL", &key]) else {
        panic!("PTTL");
    };
    assert!((1..=6000).contains(&left), "{left}");
    // The copy is dropped after a second: a hit read from Redis again.
    eventually(
        "a hit read from Redis again",
        Duration::from_secs(20),
        || {
            let before = redis_gets(&redis);
            let r = chat(&mut conn, probe.clone()).expect_status(200);
            (cache_key(&r).is_some() && redis_gets(&redis) > before).then_some(())
        },
    );
    // The entry expires in Redis: a miss.
    eventually("the entry expired", Duration::from_secs(20), || {
        let r = chat(&mut conn, probe.clone()).expect_status(200);
        cache_key(&r).is_none().then_some(())
    });
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
    // upstream, none waits for Redis past its deadline or fails (a core's
    // near copy serves at most a second after Redis's last answer).
    // Each core has its own near copy and its own clock of Redis's last
    // answer: a miss on one core says nothing of the other, so the test
    // waits out that bound (1 s) and then for a run of misses long enough
    // to have reached every core.
    redis.freeze();
    std::thread::sleep(Duration::from_millis(1500));
    eventually(
        "every core's near copy off",
        Duration::from_secs(10),
        || {
            (0..8)
                .all(|_| {
                    let r = chat(&mut gw.connect(), stored.clone()).expect_status(200);
                    cache_key(&r).is_none()
                })
                .then_some(())
        },
    );
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

/// A priced model answered without an upstream, and the cache on
/// (`cache_params` `cache`; `None`: no cache at all).
fn priced_config(cache: Option<Value>) -> Value {
    let mut c = json!({
        "model_list": [{
            "model_name": "priced",
            "litellm_params": {
                "model": "mock/priced",
                "mock_response": "one two three four five",
                "input_cost_per_token": 0.001,
                "output_cost_per_token": 0.002,
            },
        }],
        "general_settings": {"master_key": MASTER_KEY},
    });
    if let Some(params) = cache {
        c["litellm_settings"] = json!({"cache": true, "cache_params": params});
    }
    c
}

/// The rows `/spend/logs` holds for `call_id`, once there is one.
fn spend_rows(gw: &Gateway, call_id: &str) -> Vec<Value> {
    eventually("the spend row", Duration::from_secs(10), || {
        let r = gw.get(&format!("/spend/logs?request_id={call_id}"));
        assert_eq!(r.status, 200, "{}", r.text());
        let rows = r.json().as_array().cloned().unwrap_or_default();
        (!rows.is_empty()).then_some(rows)
    })
}

fn key_spend(gw: &Gateway, key: &str) -> f64 {
    let info = gw.get(&format!("/key/info?key={key}"));
    assert_eq!(info.status, 200, "{}", info.text());
    info.json()["info"]["spend"].as_f64().expect("spend")
}

/// A hit is logged as LiteLLM logs it (`cache_hit` "True", spend 0, the
/// entry's key, the stored answer's tokens) and moves no budget; the miss
/// before it says `cache_hit` "False" with the same key.
fn hits_leave_a_free_spend_row(database_url: Option<&str>) {
    let envs: Vec<(&str, &str)> = database_url
        .map(|u| ("DATABASE_URL", u))
        .into_iter()
        .collect();
    let c = priced_config(Some(json!({"type": "local"})));
    let gw = Gateway::start(&to_yaml(&c), &envs);
    let r = gw.post("/key/generate", &json!({"max_budget": 10.0}));
    assert_eq!(r.status, 200, "{}", r.text());
    let key = r.json()["key"].as_str().expect("key").to_string();
    let body = json!({"model": "priced", "messages": [{"role": "user", "content": "hi"}]});
    let mut conn = gw.connect();
    let miss = chat_as(&mut conn, &key, body.clone()).expect_status(200);
    let call = |r: &Response| r.header("x-litellm-call-id").expect("call id").to_string();
    let miss_rows = spend_rows(&gw, &call(&miss));
    let cost = miss_rows[0]["spend"].as_f64().expect("spend");
    assert!(cost > 0.0, "{miss_rows:?}");
    let spent = eventually("the miss settled", Duration::from_secs(10), || {
        let s = key_spend(&gw, &key);
        ((s - cost).abs() < 1e-9).then_some(s)
    });
    let hit = chat_as(&mut conn, &key, body).expect_status(200);
    let entry = cache_key(&hit).expect("a hit");
    assert_eq!(miss_rows[0]["cache_hit"], "False");
    assert_eq!(miss_rows[0]["cache_key"], entry.as_str());
    let rows = spend_rows(&gw, &call(&hit));
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row["cache_hit"], "True", "{row}");
    assert_eq!(row["cache_key"], entry.as_str());
    assert_eq!(row["spend"].as_f64(), Some(0.0));
    assert_eq!(row["status"], "success");
    assert_eq!(row["model_group"], "priced");
    let usage = &hit.json()["usage"];
    assert_eq!(row["prompt_tokens"], usage["prompt_tokens"]);
    assert_eq!(row["completion_tokens"], usage["completion_tokens"]);
    assert!(row["total_tokens"].as_i64().unwrap() > 0);
    // Another request settles after the hit's row: the key's spend moved
    // by that one's cost only.
    let other = json!({"model": "priced", "messages": [{"role": "user", "content": "other"}]});
    let third = chat_as(&mut conn, &key, other).expect_status(200);
    let third_cost = spend_rows(&gw, &call(&third))[0]["spend"].as_f64().unwrap();
    let after = eventually("the third settled", Duration::from_secs(10), || {
        let s = key_spend(&gw, &key);
        (s > spent).then_some(s)
    });
    assert!((after - spent - third_cost).abs() < 1e-9, "{after} {spent}");
}

#[test]
fn hits_leave_a_free_spend_row_in_memory() {
    hits_leave_a_free_spend_row(None);
}

#[test]
fn hits_leave_a_free_spend_row_in_postgres() {
    let db = e2e::TestDb::create();
    hits_leave_a_free_spend_row(Some(db.url()));
}

#[test]
fn without_a_cache_rows_say_cache_off() {
    let gw = Gateway::start(&to_yaml(&priced_config(None)), &[]);
    let mut conn = gw.connect();
    let body = json!({"model": "priced", "messages": [{"role": "user", "content": "hi"}]});
    let r = chat(&mut conn, body).expect_status(200);
    let rows = spend_rows(&gw, r.header("x-litellm-call-id").expect("call id"));
    assert_eq!(rows[0]["cache_hit"], "False");
    assert_eq!(rows[0]["cache_key"], "Cache OFF");
}

fn get_as(gw: &Gateway, key: &str, path: &str) -> Response {
    let auth = format!("Bearer {key}");
    gw.call("GET", path, &[("Authorization", &auth)], b"")
}

fn exists(redis: &PrivateRedis, key: &str) -> bool {
    matches!(redis.command(&["EXISTS", key]), e2e::redis::Reply::Int(1))
}

/// LiteLLM's `/cache/ping`, `/cache/delete`, `/cache/flushall` and
/// `/cache/redis/info` on `type: redis`: an admin's, with LiteLLM's
/// answers; a flush removes this cache's entries and nothing else of the
/// Redis it shares with the limiter.
#[test]
fn cache_routes_on_redis() {
    let mock = MockServer::start(&[]);
    let redis = PrivateRedis::start();
    let params = json!({"type": "redis", "host": "127.0.0.1", "port": redis.port(),
        "namespace": "gw"});
    let gw = Gateway::start(&to_yaml(&config(&mock, params)), &[]);

    let ping = gw.get("/cache/ping");
    assert_eq!(ping.status, 200, "{}", ping.text());
    let p = ping.json();
    assert_eq!(p["status"], "healthy");
    assert_eq!(p["cache_type"], "redis");
    assert_eq!(p["ping_response"], true);
    assert_eq!(p["set_cache_response"], "success");
    let params: Value = serde_json::from_str(p["litellm_cache_params"].as_str().unwrap()).unwrap();
    assert_eq!(params["namespace"], "gw");
    let health = &p["health_check_cache_params"];
    assert_eq!(health["port"], redis.port().to_string());
    assert!(health["redis_version"].is_string(), "{health}");

    // Only an admin may call them.
    let r = gw.post("/key/generate", &json!({}));
    let user_key = r.json()["key"].as_str().expect("key").to_string();
    for path in ["/cache/ping", "/cache/redis/info"] {
        let r = get_as(&gw, &user_key, path);
        assert!(r.status == 401 || r.status == 403, "{path}: {}", r.status);
    }

    // An entry, deleted by its key: the next request is a miss.
    let stored = |body: Value| {
        let mut conn = gw.connect();
        chat(&mut conn, body.clone()).expect_status(200);
        let mut probe = body;
        probe["cache"] = json!({"no-store": true});
        eventually("the entry in Redis", Duration::from_secs(10), || {
            cache_key(&chat(&mut conn, probe.clone()).expect_status(200))
        })
    };
    let key = stored(hello(json!({})));
    assert!(exists(&redis, &key));
    let r = gw.post("/cache/delete", &json!({"keys": [key]}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"status": "success"}));
    assert!(!exists(&redis, &key));
    // A core's near copy goes once Redis's invalidation reached it.
    eventually("the deleted entry a miss", Duration::from_secs(10), || {
        let r = chat(
            &mut gw.connect(),
            hello(json!({"cache": {"no-store": true}})),
        );
        cache_key(&r.expect_status(200)).is_none().then_some(())
    });
    let r = gw.post("/cache/delete", &json!({"keys": "not a list"}));
    let err = assert_error(&r, 400);
    assert_eq!(
        (&err["type"], &err["param"]),
        (&json!("invalid_request_error"), &json!("keys"))
    );

    // A flush removes the entries, and only them.
    let key = stored(hello(json!({})));
    let other = stored(hello(json!({"temperature": 0.9})));
    let look_alike = format!("theirs:{}", "a".repeat(64));
    redis.command(&["SET", &look_alike, "not an entry"]);
    redis.command(&["SET", "{limiter}:requests", "7"]);
    let r = gw.post("/cache/flushall", &json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"status": "success"}));
    assert!(!exists(&redis, &key) && !exists(&redis, &other));
    assert!(exists(&redis, &look_alike) && exists(&redis, "{limiter}:requests"));

    let info = gw.get("/cache/redis/info");
    assert_eq!(info.status, 200, "{}", info.text());
    let i = info.json();
    assert!(i["num_clients"].as_i64().unwrap() >= 1, "{i}");
    assert!(i["info"]["redis_version"].is_string());
    assert!(i["clients"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "gateway-cache-core"));

    // Redis down: the ping says so in LiteLLM's words.
    redis.stop();
    let r = gw.get("/cache/ping");
    let err = assert_error(&r, 503);
    assert_eq!(
        (&err["type"], &err["param"]),
        (&json!("cache_ping_error"), &json!("cache_ping"))
    );
    let message: Value =
        serde_json::from_str(r.json()["error"]["message"].as_str().unwrap()).unwrap();
    assert_eq!(message["message"], "Service Unhealthy");
}

/// Without Redis, the routes answer as LiteLLM's do: a local cache pings
/// healthy and refuses to delete or flush; without a cache every route
/// says it is not initialized.
#[test]
fn cache_routes_without_redis() {
    let mock = MockServer::start(&[]);
    let local = Gateway::start(&to_yaml(&config(&mock, json!({"type": "local"}))), &[]);
    let p = local.get("/cache/ping");
    assert_eq!(p.status, 200, "{}", p.text());
    assert_eq!(
        (p.json()["status"].clone(), p.json()["cache_type"].clone()),
        (json!("healthy"), json!("local"))
    );
    let r = local.post("/cache/delete", &json!({"keys": ["k"]}));
    assert_eq!(r.status, 500);
    assert_eq!(
        r.json()["error"]["message"],
        "Cache Delete Failed(500: Cache type local does not support deleting a key. only `redis` is supported)"
    );
    let r = local.post("/cache/flushall", &json!({}));
    assert_eq!(r.status, 503);
    assert_eq!(
        r.json()["error"]["message"],
        "Service Unhealthy (500: Cache type local does not support flushing)"
    );

    let none = Gateway::start(&to_yaml(&base_config(mock.port())), &[]);
    let r = none.get("/cache/ping");
    let err = assert_error(&r, 503);
    assert_eq!(
        (&err["type"], &err["param"]),
        (&json!("cache_ping_error"), &json!("cache_ping"))
    );
    let message: Value =
        serde_json::from_str(r.json()["error"]["message"].as_str().unwrap()).unwrap();
    assert_eq!(
        message["message"],
        "Cache not initialized. litellm.cache is None"
    );
    let r = none.get("/cache/redis/info");
    assert_eq!(r.status, 503);
    assert_eq!(
        r.json()["error"]["message"],
        "Service Unhealthy (503: Cache not initialized. litellm.cache is None)"
    );
}

/// LiteLLM's `allowed_cache_controls` of a key: a request may set only the
/// controls listed (403 naming the first other), the key's own
/// `metadata.cache` included; an empty list allows any. Kept by the store.
fn allowed_cache_controls(database_url: Option<&str>) {
    let envs: Vec<(&str, &str)> = database_url
        .map(|u| ("DATABASE_URL", u))
        .into_iter()
        .collect();
    let c = priced_config(Some(json!({"type": "local"})));
    let gw = Gateway::start(&to_yaml(&c), &envs);
    let generate = |body: Value| {
        let r = gw.post("/key/generate", &body);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["key"].as_str().expect("key").to_string()
    };
    let key = generate(json!({"allowed_cache_controls": ["no-cache"]}));
    let info = gw.get(&format!("/key/info?key={key}"));
    assert_eq!(
        info.json()["info"]["allowed_cache_controls"],
        json!(["no-cache"])
    );
    let body = |cache: Value| {
        let mut b = json!({"model": "priced", "messages": [{"role": "user", "content": "hi"}]});
        if !cache.is_null() {
            b["cache"] = cache;
        }
        b
    };
    let mut conn = gw.connect();
    chat_as(&mut conn, &key, body(Value::Null)).expect_status(200);
    chat_as(&mut conn, &key, body(json!({"no-cache": true}))).expect_status(200);
    let r = chat_as(&mut conn, &key, body(json!({"no-cache": true, "ttl": 60})));
    let err = assert_error(&r, 403);
    assert_eq!(
        err["message"],
        "Not allowed to set ttl as a cache control. Contact admin to change permissions."
    );
    // An empty list allows any.
    let r = gw.post(
        "/key/update",
        &json!({"key": key, "allowed_cache_controls": []}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    eventually("the update applied", Duration::from_secs(10), || {
        let r = chat_as(&mut gw.connect(), &key, body(json!({"ttl": 60})));
        (r.status == 200).then_some(())
    });
    // The key's own controls are checked too.
    let own = generate(json!({"allowed_cache_controls": ["ttl"],
        "metadata": {"cache": {"no-store": true}}}));
    let r = chat_as(&mut conn, &own, body(Value::Null));
    let err = assert_error(&r, 403);
    assert!(
        err["message"].as_str().unwrap().contains("set no-store"),
        "{err:?}"
    );
}

#[test]
fn allowed_cache_controls_in_memory() {
    allowed_cache_controls(None);
}

#[test]
fn allowed_cache_controls_in_postgres() {
    let db = e2e::TestDb::create();
    allowed_cache_controls(Some(db.url()));
}

/// `n` identical requests (`stream` for every other one) sent at once,
/// each on its own connection (so both cores take some).
fn at_once(gw: &Gateway, model: &str, n: usize) -> Vec<Response> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let mut conn = gw.connect();
            let barrier = barrier.clone();
            let body = hello(json!({"model": model, "stream": i % 2 == 1}));
            std::thread::spawn(move || {
                barrier.wait();
                chat(&mut conn, body)
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

#[test]
fn concurrent_identical_requests_make_one_upstream_call() {
    let mock = MockServer::start(&[]);
    let mut c = config(&mock, json!({"type": "local"}));
    // A slow upstream: every request arrives while the first one's call
    // is in progress.
    c["model_list"].as_array_mut().unwrap().push(openai_model(
        "slow",
        "dep-slow",
        &mock.api_base(),
        json!({"extra_headers": {"x-mock-latency-ms": "2500"}}),
    ));
    let gw = Gateway::start(&to_yaml(&c), &[]);
    let n = 6;
    let answers = at_once(&gw, "slow", n);
    assert_eq!(upstream_calls(&mock), 1, "one call served {n} requests");
    let mut ids = Vec::new();
    for (i, r) in answers.iter().enumerate() {
        assert_eq!(r.status, 200, "{}", r.text());
        let id = match i % 2 {
            0 => r.json()["id"].clone(),
            _ => {
                let (chunks, done) = sse_chunks(r);
                assert!(done, "a follower's stream ends with [DONE]");
                chunks[0]["id"].clone()
            }
        };
        ids.push(id);
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "one answer: {ids:?}");
    // Every follower was answered from the leader's answer, as a hit.
    let hits = answers.iter().filter(|r| cache_key(r).is_some()).count();
    assert_eq!(hits, n - 1);
}

#[test]
fn followers_of_a_failing_leader_make_their_own_calls() {
    let mock = MockServer::start(&[]);
    let mut c = config(&mock, json!({"type": "local"}));
    c["model_list"].as_array_mut().unwrap().push(openai_model(
        "slow-broken",
        "dep-slow-broken",
        &mock.api_base(),
        json!({"extra_headers": {"x-mock-latency-ms": "1500", "x-mock-status": "400",
            "x-mock-error-message": "bad thing"}}),
    ));
    let gw = Gateway::start(&to_yaml(&c), &[]);
    let n = 4;
    let answers = at_once(&gw, "slow-broken", n);
    for r in &answers {
        assert_error(r, 400);
        assert!(cache_key(r).is_none());
    }
    // The leader's error was never handed to a follower: each made its own
    // call once the leader failed.
    let failed = mock.stats()["failed"].as_u64().expect("failed counter");
    assert_eq!(failed, n as u64);
}

#[test]
fn single_flight_can_be_turned_off() {
    let mock = MockServer::start(&[]);
    let mut c = config(&mock, json!({"type": "local", "single_flight_timeout": 0}));
    c["model_list"].as_array_mut().unwrap().push(openai_model(
        "slow",
        "dep-slow",
        &mock.api_base(),
        json!({"extra_headers": {"x-mock-latency-ms": "1500"}}),
    ));
    let gw = Gateway::start(&to_yaml(&c), &[]);
    let answers = at_once(&gw, "slow", 3);
    assert!(answers.iter().all(|r| r.status == 200));
    assert_eq!(upstream_calls(&mock), 3);
}

/// A leader's answer is stored, and its followers let go, before the
/// write that ends its own response: a client that never reads its
/// 12 MB answer (more than the sockets' buffers hold) leaves that write
/// hanging, and the next identical request is still answered from the
/// cache. The upstream is Anthropic's API, so the answer is translated
/// and sent whole (a relayed body's earlier pieces follow the client's
/// pace by design: nothing is buffered without bound).
#[test]
fn the_answer_is_stored_before_the_leaders_client_reads_it() {
    use std::io::Write;
    let mock = MockServer::start(&[]);
    // Items up to 16 MB are stored; a follower waits at most 20 s (then
    // makes its own call), the leader's hung write 120 s.
    let mut c = config(
        &mock,
        json!({"type": "local", "max_size_per_item": 16384, "max_memory_mb": 256,
            "single_flight_timeout": 20}),
    );
    c["gateway_settings"]["write_timeout_ms"] = json!(120_000);
    c["model_list"].as_array_mut().unwrap().push(json!({
        "model_name": "big",
        "litellm_params": {"model": "anthropic/claude-3-5-sonnet-20241022",
            "api_base": mock.api_base().trim_end_matches("/v1"), "api_key": "sk-ant-upstream",
            "timeout": 60,
            // About 6.3 bytes a token: a 12.6 MB answer.
            "extra_headers": {"x-mock-completion-tokens": "2000000"}},
    }));
    // One core: a later request finds the entry whichever way it arrives.
    let mut gw = Gateway::spawn(&to_yaml(&c), &[], e2e::free_port(), &["--workers", "1"]);
    gw.wait_ready(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("gateway did not start: {e}"));
    let body = hello(json!({"model": "big", "max_tokens": 2_000_000})).to_string();
    let auth = format!("Bearer {MASTER_KEY}");
    let raw = request(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body.as_bytes(),
    );
    // The leader: sends and never reads.
    let leader = gw.connect();
    leader.stream().write_all(&raw).expect("send the leader");
    eventually(
        "the leader's upstream call",
        Duration::from_secs(60),
        || (upstream_calls(&mock) == 1).then_some(()),
    );
    let mut next = gw.connect();
    next.set_read_timeout(Duration::from_secs(90));
    let r = next.roundtrip(&raw);
    assert_eq!(r.status, 200);
    assert!(
        cache_key(&r).is_some(),
        "answered from the leader's stored answer"
    );
    assert_eq!(upstream_calls(&mock), 1, "one upstream call");
    assert!(r.body.len() > 12_000_000, "{} bytes", r.body.len());
    drop(leader);
}

fn post_with(conn: &mut Conn, path: &str, headers: &[(&str, &str)], body: &Value) -> Response {
    let body = body.to_string();
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    conn.roundtrip(&request("POST", path, &all, body.as_bytes()))
}

/// `POST /v1/messages` as the Anthropic SDK sends it.
fn messages(conn: &mut Conn, body: &Value) -> Response {
    post_with(
        conn,
        "/v1/messages",
        &[
            ("x-api-key", MASTER_KEY),
            ("anthropic-version", "2023-06-01"),
        ],
        body,
    )
}

/// The events of an SSE body: (`event:` name, data).
fn named_events(r: &Response) -> Vec<(String, Value)> {
    r.text()
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: "));
            let data = e.lines().find_map(|l| l.strip_prefix("data: "));
            let data = data.unwrap_or_else(|| panic!("an event without data: {e:?}"));
            let data: Value = serde_json::from_str(data).expect("JSON event data");
            (name.unwrap_or("").to_string(), data)
        })
        .collect()
}

/// The text of a Messages stream's text deltas, checking the event order
/// Anthropic's SDK expects.
fn messages_stream_text(r: &Response) -> (String, Value) {
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = named_events(r);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{names:?}");
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str());
    }
    let text = events
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "text_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap().to_string())
        .collect();
    (text, events[0].1["message"]["id"].clone())
}

#[test]
fn anthropic_messages_are_cached_and_streams_played_back_as_messages_events() {
    let mock = MockServer::start(&[]);
    let mut c = config(&mock, json!({"type": "local"}));
    // Claude on Anthropic's API (passed through) next to gpt-4o (translated).
    c["model_list"].as_array_mut().unwrap().push(json!({
        "model_name": "claude",
        "litellm_params": {"model": "anthropic/claude-3-5-sonnet-20241022",
            "api_base": mock.api_base().trim_end_matches("/v1"), "api_key": "sk-ant-upstream", "timeout": 10},
    }));
    let gw = Gateway::start(&to_yaml(&c), &[]);
    let mut conn = gw.connect();
    for model in ["claude", "gpt-4o"] {
        let ask = |stream: bool| {
            json!({"model": model, "max_tokens": 50, "stream": stream,
                "metadata": {"user_id": "u-1"},
                "messages": [{"role": "user", "content": format!("hello {model}")}]})
        };
        let before = upstream_calls(&mock);
        let streamed = messages(&mut conn, &ask(true)).expect_status(200);
        assert!(cache_key(&streamed).is_none(), "{model}: a miss");
        let (text, id) = messages_stream_text(&streamed);
        assert!(!text.is_empty(), "{model}");
        assert_eq!(upstream_calls(&mock), before + 1);

        // The streamed answer was stored: the whole message is served.
        let whole = messages(&mut conn, &ask(false)).expect_status(200);
        assert!(cache_key(&whole).is_some(), "{model}: a hit");
        let v = whole.json();
        assert_eq!(v["type"], "message");
        assert_eq!(v["id"], id);
        assert_eq!(v["content"][0]["text"], text.as_str());
        assert!(v["stop_reason"].is_string(), "{v}");
        assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0, "{v}");

        // And played back as a stream in Messages events.
        let replayed = messages(&mut conn, &ask(true)).expect_status(200);
        assert!(cache_key(&replayed).is_some());
        let (again, again_id) = messages_stream_text(&replayed);
        assert_eq!((again, again_id), (text, id));
        let last = named_events(&replayed);
        let delta = &last[last.len() - 2].1;
        assert_eq!(delta["delta"]["stop_reason"], v["stop_reason"]);
        assert_eq!(delta["usage"], v["usage"]);
        assert_eq!(
            upstream_calls(&mock),
            before + 1,
            "{model}: hits made no call"
        );
    }
}

#[test]
fn responses_streams_are_stored_and_played_back_as_responses_events() {
    let mock = MockServer::start(&[]);
    let gw = Gateway::start(&to_yaml(&config(&mock, json!({"type": "local"}))), &[]);
    let mut conn = gw.connect();
    let ask = |stream: bool| json!({"model": "gpt-4o", "input": "say hi", "stream": stream});
    let auth = format!("Bearer {MASTER_KEY}");
    let headers = [("Authorization", auth.as_str())];

    let streamed = post_with(&mut conn, "/v1/responses", &headers, &ask(true)).expect_status(200);
    assert!(cache_key(&streamed).is_none());
    let completed = |r: &Response| {
        let events = named_events(r);
        for (i, (name, data)) in events.iter().enumerate() {
            assert_eq!(data["type"], name.as_str());
            assert_eq!(data["sequence_number"], i as u64);
        }
        assert_eq!(events[0].0, "response.created");
        let (name, last) = events.last().unwrap();
        assert_eq!(name, "response.completed");
        let text: String = events
            .iter()
            .filter(|(n, _)| n == "response.output_text.delta")
            .map(|(_, d)| d["delta"].as_str().unwrap().to_string())
            .collect();
        (last["response"].clone(), text)
    };
    let (response, text) = completed(&streamed);
    assert!(!text.is_empty());
    assert_eq!(upstream_calls(&mock), 1);

    let whole = post_with(&mut conn, "/v1/responses", &headers, &ask(false)).expect_status(200);
    assert!(
        cache_key(&whole).is_some(),
        "the streamed answer was stored"
    );
    assert_eq!(whole.json(), response);

    let replayed = post_with(&mut conn, "/v1/responses", &headers, &ask(true)).expect_status(200);
    assert!(cache_key(&replayed).is_some());
    let (again, again_text) = completed(&replayed);
    assert_eq!((again, again_text), (response, text));
    assert_eq!(upstream_calls(&mock), 1);
}

/// LiteLLM's `/cache/settings` routes: the settings in force in LiteLLM's
/// form (no credential shown), a connection test of the configured Redis,
/// and a save refused by name (settings come from `config.yaml`); an
/// admin's only.
#[test]
fn cache_settings_routes() {
    let mock = MockServer::start(&[]);
    let redis = PrivateRedis::start();
    let params = json!({"type": "redis", "host": "127.0.0.1", "port": redis.port(),
        "namespace": "gw", "ttl": 30});
    let gw = Gateway::start(&to_yaml(&config(&mock, params)), &[]);

    let r = gw.get("/cache/settings");
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    let current = &v["current_values"];
    assert_eq!(current["type"], "redis");
    assert_eq!(current["redis_type"], "node");
    assert_eq!(current["host"], "127.0.0.1");
    assert_eq!(current["port"], redis.port().to_string());
    assert_eq!(
        (&current["namespace"], &current["ttl"]),
        (&json!("gw"), &json!(30.0))
    );
    let fields = v["fields"].as_array().unwrap();
    let host = fields.iter().find(|f| f["field_name"] == "host").unwrap();
    assert_eq!(host["field_value"], "127.0.0.1");
    for member in ["field_type", "field_description", "ui_field_name"] {
        assert!(fields.iter().all(|f| f[member].is_string()), "{member}");
    }
    assert!(v["redis_type_descriptions"]["cluster"].is_string());

    let test = |settings: Value| {
        let r = gw.post("/cache/settings/test", &json!({"cache_settings": settings}));
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let ok = test(json!({"type": "redis", "host": "127.0.0.1", "port": redis.port()}));
    assert_eq!(ok["status"], "success", "{ok}");
    let other = test(json!({"type": "redis", "host": "10.9.9.9", "port": 6379}));
    assert_eq!(other["status"], "failed");
    let local = test(json!({"type": "local"}));
    assert_eq!(
        local["message"],
        "Only Redis cache type is currently supported for testing"
    );

    let r = gw.post(
        "/cache/settings",
        &json!({"cache_settings": {"type": "local"}}),
    );
    let err = assert_error(&r, 400);
    assert!(
        err["message"].as_str().unwrap().contains("config.yaml"),
        "{err:?}"
    );

    let r = gw.post("/key/generate", &json!({}));
    let user_key = r.json()["key"].as_str().expect("key").to_string();
    let r = get_as(&gw, &user_key, "/cache/settings");
    assert!(r.status == 401 || r.status == 403, "{}", r.status);

    // Redis down: the test says so.
    redis.stop();
    let down = test(json!({"type": "redis"}));
    assert_eq!(down["status"], "failed", "{down}");
}

/// `cache_params.scope` (this gateway's): under `team` the keys of one
/// team share entries and no one else reads them (a key without a team and
/// the master key keep their own); under `key` each key keeps its own;
/// `global` (the default) shares every entry, as LiteLLM does. On Redis
/// too, where the owner is hashed into the key `/cache/delete` takes.
#[test]
fn scope_isolates_entries_per_team_or_per_key() {
    let mock = MockServer::start(&[]);
    let redis = PrivateRedis::start();
    for (scope, backend) in [
        (Some("team"), json!({"type": "local"})),
        (Some("key"), json!({"type": "local"})),
        (None, json!({"type": "local"})),
        (
            Some("team"),
            json!({"type": "redis", "host": "127.0.0.1", "port": redis.port()}),
        ),
    ] {
        let mut params = backend;
        if let Some(scope) = scope {
            params["scope"] = json!(scope);
        }
        let gw = Gateway::start(&to_yaml(&config(&mock, params)), &[]);
        for team in ["red", "blue"] {
            let r = gw.post("/team/new", &json!({"team_id": team}));
            assert_eq!(r.status, 200, "{}", r.text());
        }
        let generate = |team: Option<&str>| {
            let r = gw.post("/key/generate", &json!({"team_id": team}));
            assert_eq!(r.status, 200, "{}", r.text());
            r.json()["key"].as_str().expect("key").to_string()
        };
        let (red1, red2, blue, lone) = (
            generate(Some("red")),
            generate(Some("red")),
            generate(Some("blue")),
            generate(None),
        );
        // A fresh body per backend: the Redis is kept between runs.
        let body =
            hello(json!({"messages": [{"role": "user", "content": format!("{scope:?} scoped")}]}));
        let mut conn = gw.connect();
        // Whether `key`'s request is a hit, and its entry's key.
        let mut send = |key: &str| {
            let before = upstream_calls(&mock);
            let r = chat_as(&mut conn, key, body.clone()).expect_status(200);
            let hit = upstream_calls(&mock) == before;
            assert_eq!(hit, cache_key(&r).is_some(), "{scope:?}: {}", r.text());
            (hit, cache_key(&r))
        };
        // A key's own entry, once it landed (a Redis write is not waited for).
        let until_hit = |send: &mut dyn FnMut(&str) -> (bool, Option<String>), key: &str| {
            eventually("a hit", Duration::from_secs(10), || {
                let (hit, entry) = send(key);
                hit.then_some(entry)
            })
        };
        let first = send(&red1);
        assert!(!first.0, "{scope:?}: the first request is a miss");
        let red1_key = until_hit(&mut send, &red1);
        let (red2_hit, red2_key) = send(&red2);
        let (blue_hit, _) = send(&blue);
        let (lone_hit, _) = send(&lone);
        let (master_hit, _) = send(MASTER_KEY);
        match scope {
            Some("team") => {
                assert!(red2_hit, "a team's keys share entries");
                assert_eq!(red2_key, red1_key);
                assert!(!blue_hit, "another team's key read red's entry");
                assert!(!lone_hit, "a key without a team read red's entry");
                assert!(!master_hit, "the master key read red's entry");
                // Each of them stored its own.
                for key in [blue.as_str(), lone.as_str(), MASTER_KEY] {
                    assert_ne!(until_hit(&mut send, key), red1_key);
                }
            }
            Some("key") => {
                assert!(!red2_hit, "a team mate read red1's entry under scope: key");
                assert!(!blue_hit && !lone_hit && !master_hit);
                assert_ne!(until_hit(&mut send, &red2), red1_key, "red2 stored its own");
            }
            _ => assert!(
                red2_hit && blue_hit && lone_hit && master_hit,
                "scope: global shares every entry"
            ),
        }
    }
}
