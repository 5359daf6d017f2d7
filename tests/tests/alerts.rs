//! Budget alerts by webhook and Slack, as LiteLLM sends them: one POST per
//! crossing (soft budget, then the hard budget refusing), with the hashed
//! token and never the plain key; a listed channel without its URL stops
//! start-up.

use e2e::{to_yaml, Gateway, MASTER_KEY};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

/// One POST the receiver saw: its path and JSON body, and the raw request.
struct Received {
    path: String,
    body: Value,
    raw: String,
}

/// A webhook receiver on 127.0.0.1: reads one HTTP request per connection,
/// answers 200, and hands what it read to the test.
fn receiver() -> (u16, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind receiver");
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().expect("clone stream"));
            let mut raw = String::new();
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if let Some((name, value)) = line.split_once(':') {
                    if name.eq_ignore_ascii_case("content-length") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                }
                raw.push_str(&line);
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let _ = conn
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            raw.push_str(&String::from_utf8_lossy(&body));
            let path = raw.split(' ').nth(1).unwrap_or_default().to_string();
            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if tx.send(Received { path, body, raw }).is_err() {
                break;
            }
        }
    });
    (port, rx)
}

/// Every POST that arrives within `wait` of the last one.
fn drain(rx: &mpsc::Receiver<Received>, wait: Duration) -> Vec<Received> {
    let mut seen = Vec::new();
    while let Ok(r) = rx.recv_timeout(wait) {
        seen.push(r);
    }
    seen
}

fn config(alerting: &[&str]) -> String {
    to_yaml(&json!({
        "model_list": [{
            "model_name": "priced",
            "litellm_params": {
                "model": "mock/priced",
                "mock_response": "one two three four five six seven eight nine ten",
                "input_cost_per_token": 0.00001,
                "output_cost_per_token": 0.0001,
            },
        }],
        "general_settings": {"master_key": MASTER_KEY, "alerting": alerting},
    }))
}

fn chat(gw: &Gateway, key: &str) -> u16 {
    let body = json!({"model": "priced", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]});
    let auth = format!("Bearer {key}");
    gw.call(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", &auth)],
        body.to_string().as_bytes(),
    )
    .status
}

#[test]
fn each_budget_crossing_posts_one_alert_per_channel() {
    let (port, rx) = receiver();
    let webhook = format!("http://127.0.0.1:{port}/hook");
    let slack = format!("http://127.0.0.1:{port}/slack/T0/B0/secret");
    let gw = Gateway::start(
        &config(&["webhook", "slack"]),
        &[("WEBHOOK_URL", &webhook), ("SLACK_WEBHOOK_URL", &slack)],
    );
    let resp = gw.post(
        "/key/generate",
        &json!({"max_budget": 0.006, "soft_budget": 0.002, "key_alias": "alerted"}),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    let key = resp.json()["key"].as_str().expect("key").to_string();
    let token = resp.json()["token_id"]
        .as_str()
        .expect("token_id")
        .to_string();

    // About a tenth of a cent each: the second crosses the soft budget.
    for _ in 0..3 {
        assert_eq!(chat(&gw, &key), 200);
    }
    let soft = drain(&rx, Duration::from_secs(3));
    assert_eq!(soft.len(), 2, "one POST per channel:\n{}", gw.output());
    let hook = soft
        .iter()
        .find(|r| r.path == "/hook")
        .expect("webhook POST");
    assert_eq!(hook.body["event"], "soft_budget_crossed", "{}", hook.raw);
    assert_eq!(hook.body["event_group"], "key");
    assert_eq!(hook.body["token"], token.as_str());
    assert_eq!(hook.body["key_alias"], "alerted");
    assert!(
        hook.body["spend"].as_f64().unwrap() >= 0.002,
        "{}",
        hook.raw
    );
    assert!(
        hook.raw.starts_with("POST /hook HTTP/1.1\r\n"),
        "{}",
        hook.raw
    );
    let text = soft
        .iter()
        .find(|r| r.path.starts_with("/slack/"))
        .expect("Slack POST");
    assert!(
        text.body["text"]
            .as_str()
            .unwrap()
            .starts_with("Soft Budget Crossed"),
        "{}",
        text.raw
    );

    let mut refused = 0;
    for _ in 0..100 {
        if chat(&gw, &key) == 422 {
            refused += 1;
            if refused == 3 {
                break;
            }
        }
    }
    assert_eq!(refused, 3, "the budget never refused");
    let hard = drain(&rx, Duration::from_secs(3));
    assert_eq!(hard.len(), 2, "one alert per crossing, not per refusal");
    let hook = hard
        .iter()
        .find(|r| r.path == "/hook")
        .expect("webhook POST");
    assert_eq!(hook.body["event"], "budget_crossed", "{}", hook.raw);
    assert_eq!(hook.body["token"], token.as_str());
    assert!((hook.body["max_budget"].as_f64().unwrap() - 0.006).abs() < 1e-9);

    for r in soft.iter().chain(&hard) {
        assert!(
            !r.raw.contains(&key),
            "an alert carried the plain key: {}",
            r.raw
        );
    }
    assert!(
        !gw.output().contains("secret"),
        "the Slack URL must not be logged"
    );
}

#[test]
fn a_listed_channel_without_its_url_stops_start_up() {
    let mut gw = Gateway::spawn(&config(&["webhook"]), &[], e2e::free_port(), &[]);
    let status = gw
        .wait_exit(Duration::from_secs(20))
        .expect("gateway exits");
    assert!(!status.success());
    let out = gw.output();
    assert!(
        out.contains("general_settings.alerting") && out.contains("WEBHOOK_URL"),
        "{out}"
    );
}
