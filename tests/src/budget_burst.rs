//! Bursts against a priced model until a budget refuses, shared by the
//! fleet-budget tests on one Redis (`fleet_budget.rs`) and on a Cluster
//! (`cluster_budget.rs`): requests of one fixed shape, their worst case and
//! real cost, and senders that stop after three refusals in a row.

use crate::Gateway;
use serde_json::{json, Value};
use std::time::Duration;

/// Prices that make each request cost about a tenth of a cent.
pub const INPUT_COST: f64 = 0.00001;
/// See [`INPUT_COST`].
pub const OUTPUT_COST: f64 = 0.0001;
/// What the mock answers: ten words, ten completion tokens.
pub const REPLY: &str = "one two three four five six seven eight nine ten";
/// How long the mock takes per answer, so concurrent requests overlap.
pub const LATENCY_MS: u64 = 30;
/// Senders per replica in a burst.
pub const SENDERS: usize = 8;
/// Requests one sender makes at most.
pub const PER_SENDER: usize = 40;

/// The request every burst sends to `model`.
fn body(model: &str) -> Value {
    json!({"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
}

/// A chat completion to `model` through `gw` with `key`: (status, body).
pub fn chat(gw: &Gateway, model: &str, key: &str) -> (u16, Value) {
    let auth = format!("Bearer {key}");
    let resp = gw.call(
        "POST",
        "/v1/chat/completions",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body(model).to_string().as_bytes(),
    );
    (resp.status, resp.json())
}

/// The worst case one request reserves: its body's bytes as prompt tokens
/// plus `max_tokens` of output.
pub fn worst_case(model: &str) -> f64 {
    body(model).to_string().len() as f64 * INPUT_COST + 10.0 * OUTPUT_COST
}

/// What an answer cost, from its usage.
pub fn cost_of(body: &Value) -> f64 {
    let usage = &body["usage"];
    usage["prompt_tokens"].as_f64().expect("prompt_tokens") * INPUT_COST
        + usage["completion_tokens"]
            .as_f64()
            .expect("completion_tokens")
            * OUTPUT_COST
}

/// [`SENDERS`] senders per replica, all at once, each sending until three
/// refusals in a row (a refusal may come while others' reservations are
/// still in flight); the cost of every admitted request and how many each
/// replica admitted.
pub fn hammer(replicas: &[Gateway], model: &str, key: &str) -> (Vec<f64>, Vec<usize>) {
    let results: Vec<(usize, Vec<f64>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..SENDERS * replicas.len())
            .map(|i| {
                let at = i % replicas.len();
                let gw = &replicas[at];
                s.spawn(move || (at, send_until_refused(gw, model, key)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("sender"))
            .collect()
    });
    let mut counts = vec![0; replicas.len()];
    let mut costs = Vec::new();
    for (at, c) in results {
        counts[at] += c.len();
        costs.extend(c);
    }
    (costs, counts)
}

/// Sends through `gw` until three 422 `budget_exceeded` refusals in a row
/// (pausing after each, so reservations in flight settle) or
/// [`PER_SENDER`] requests; the cost of each admitted one.
pub fn send_until_refused(gw: &Gateway, model: &str, key: &str) -> Vec<f64> {
    let mut costs = Vec::new();
    let mut refusals = 0;
    for _ in 0..PER_SENDER {
        let (status, body) = chat(gw, model, key);
        match status {
            200 => {
                refusals = 0;
                costs.push(cost_of(&body));
            }
            422 => {
                assert_eq!(body["error"]["type"], "budget_exceeded", "{body}");
                refusals += 1;
                if refusals == 3 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(LATENCY_MS * 2));
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    costs
}
