//! An idle gateway's resident set: in the full pipeline's configuration (a
//! virtual key with limits and a budget in Redis, keys and spend rows in
//! Postgres, a group of deployments), the code only start-up ran does not
//! stay resident (the kernel maps an executable 64 KiB around each page
//! touched, so start-up alone kept most of the text section resident).

use e2e::{chat_body, eventually, to_yaml, Gateway, MockServer, PrivateRedis, TestDb, MASTER_KEY};
use serde_json::json;
use std::time::Duration;

/// `(Rss, Size)` of the gateway executable's text mapping in process
/// `pid`, in kB.
fn text_rss_and_size_kb(pid: u32) -> (u64, u64) {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    let exe = exe.to_string_lossy().into_owned();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let (mut in_text, mut size) = (false, 0);
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if !first.ends_with(':') {
            in_text = fields.next() == Some("r-xp") && fields.nth(3) == Some(exe.as_str());
        } else if in_text && first == "Size:" {
            size = fields.next().unwrap().parse().unwrap();
        } else if in_text && first == "Rss:" {
            return (fields.next().unwrap().parse().unwrap(), size);
        }
    }
    panic!("no text mapping of {exe} in process {pid}");
}

#[test]
fn an_idle_gateway_keeps_resident_the_code_it_serves_with_not_all_start_up_ran() {
    let mock = MockServer::start(&[]);
    let redis = PrivateRedis::start();
    let db = TestDb::create();
    let deployment = |id: &str| json!({"model_name": "gpt-4o", "litellm_params": {"model": "openai/gpt-4o", "api_key": "sk-m", "api_base": mock.api_base()}, "model_info": {"id": id}});
    let config = json!({
        "model_list": [deployment("a"), deployment("b"), deployment("c")],
        "router_settings": {"num_retries": 2},
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(
        &to_yaml(&config),
        &[("REDIS_URL", &redis.url()), ("DATABASE_URL", db.url())],
    );
    let key = gw.post(
        "/key/generate",
        &json!({"models": ["gpt-4o"], "rpm_limit": 1000000, "tpm_limit": 1000000000, "max_parallel_requests": 1000, "max_budget": 1000}),
    );
    assert_eq!(key.status, 200, "{}", key.text());
    let key = key.json()["key"].as_str().unwrap().to_string();
    for _ in 0..20 {
        let resp = gw.post_as(&key, "/v1/chat/completions", &chat_body("gpt-4o"));
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    eventually("start-up's pages released", Duration::from_secs(30), || {
        gw.output()
            .contains("start-up pages released")
            .then_some(())
    });
    // Served once more after the release: the serving code is back in.
    let resp = gw.post_as(&key, "/v1/chat/completions", &chat_body("gpt-4o"));
    assert_eq!(resp.status, 200, "{}", resp.text());
    let (rss, size) = text_rss_and_size_kb(gw.pid());
    // Before the release start-up left about 88 % of a debug build's text
    // resident (23 of 26 MB; 10.5 of 14 MB in a release build).
    assert!(
        rss * 2 < size,
        "{rss} kB of the {size} kB text section resident after serving"
    );
}
