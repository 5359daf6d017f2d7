//! Unknown keys cannot lock out known ones (issue 10): a key the store does
//! not hold is a 401 without a database read, never a 503, and a real key
//! that is not cached yet (the gateway just restarted) is always read
//! through, however many random keys arrive meanwhile.

use e2e::{assert_error, chat_body, unique_id, Gateway, Response, TestDb, MASTER_KEY};
use serde_json::{json, Value};

fn config() -> Value {
    json!({
        "model_list": [{
            "model_name": "chat-fast",
            "litellm_params": {"model": "mock/chat-fast", "mock_response": "hi"},
        }],
        "general_settings": {"master_key": MASTER_KEY},
    })
}

fn chat(gw: &Gateway, key: &str) -> Response {
    let auth = format!("Bearer {key}");
    gw.call(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &auth)],
        chat_body("chat-fast").to_string().as_bytes(),
    )
}

fn new_key(gw: &Gateway) -> String {
    let answer = gw
        .post("/key/generate", &json!({}))
        .expect_status(200)
        .json();
    answer["key"].as_str().expect("a key").to_string()
}

/// Sends `n` requests with random keys; each must be a 401.
fn flood(gw: &Gateway, n: usize) {
    for i in 0..n {
        let key = format!("sk-{}", unique_id(&format!("random{i}")));
        let err = assert_error(&chat(gw, &key), 401);
        assert_eq!(err["type"], "auth_error", "{err:?}");
    }
}

#[test]
fn random_keys_cannot_lock_out_real_uncached_keys() {
    let db = TestDb::create();
    let envs = [("DATABASE_URL", db.url())];
    let (first, second) = {
        let gw = Gateway::start_json(&config(), &envs);
        (new_key(&gw), new_key(&gw))
    };
    // A new process: neither key is cached.
    let gw = Gateway::start_json(&config(), &envs);
    flood(&gw, 60);
    let body = chat(&gw, &first).expect_status(200).json();
    assert_eq!(body["choices"][0]["message"]["content"], "hi", "{body}");

    std::thread::scope(|s| {
        let flooders: Vec<_> = (0..2).map(|_| s.spawn(|| flood(&gw, 100))).collect();
        for _ in 0..10 {
            chat(&gw, &second).expect_status(200);
        }
        for f in flooders {
            f.join().expect("flooder");
        }
    });
    chat(&gw, &first).expect_status(200);
}

#[test]
fn unknown_keys_are_401_without_a_database() {
    let gw = Gateway::start_json(&config(), &[]);
    flood(&gw, 60);
    let key = new_key(&gw);
    chat(&gw, &key).expect_status(200);
    flood(&gw, 5);
}
