//! Group commit of lease mode's other scripts on a private `redis-server`:
//! `slot_lease.lua` runs of many keys sent as one call of its batch form
//! (`grouped.lua` around the script, as `gateway/src/limits/call.rs` builds
//! it) do what the same runs do one call each, every run gets its own
//! reply, and a run that fails fails alone.

use e2e::redis::Reply;
use e2e::PrivateRedis;

const SLOT_LEASE: &str = include_str!("../../gateway/src/limits/slot_lease.lua");
const GROUPED: &str = include_str!("../../gateway/src/limits/grouped.lua");

/// The batch form of `body`, as the gateway makes it.
fn batch_form(body: &str) -> String {
    format!("local function one(KEYS, ARGV)\n{body}\nend\n{GROUPED}")
}

/// Slot lease `id`'s grant of `want` members from 0 on `key` (limit 10, a
/// life of a minute, no deadline), as `slot_lease.rs` sends it.
fn grant(id: &str, key: &str, want: u64) -> (Vec<String>, Vec<String>) {
    let args = [id, "60000", "0", "10", &want.to_string(), "0", "0"];
    (
        vec![key.to_string()],
        args.iter().map(|a| a.to_string()).collect(),
    )
}

/// `runs` as one call of `script`'s batch form.
fn batched(redis: &PrivateRedis, script: &str, runs: &[(Vec<String>, Vec<String>)]) -> Reply {
    let body = batch_form(script);
    let keys: usize = runs.iter().map(|(k, _)| k.len()).sum();
    let (keys, n) = (keys.to_string(), runs.len().to_string());
    let counts: Vec<String> = runs
        .iter()
        .flat_map(|(k, a)| [k.len().to_string(), a.len().to_string()])
        .collect();
    let mut args: Vec<&str> = vec!["EVAL", &body, &keys];
    args.extend(runs.iter().flat_map(|(k, _)| k.iter().map(String::as_str)));
    args.push(&n);
    args.extend(counts.iter().map(String::as_str));
    args.extend(runs.iter().flat_map(|(_, a)| a.iter().map(String::as_str)));
    redis.command(&args)
}

/// One run of `script` on its own.
fn alone(redis: &PrivateRedis, script: &str, run: &(Vec<String>, Vec<String>)) -> Reply {
    let n = run.0.len().to_string();
    let mut args: Vec<&str> = vec!["EVAL", script, &n];
    args.extend(run.0.iter().map(String::as_str));
    args.extend(run.1.iter().map(String::as_str));
    redis.command(&args)
}

fn ints(v: &[i64]) -> Reply {
    Reply::Array(v.iter().map(|n| Reply::Int(*n)).collect())
}

#[test]
fn batched_slot_lease_runs_do_what_they_do_one_by_one_each_with_its_reply() {
    let redis = PrivateRedis::start();
    let runs = [
        grant("lease:p:1", "{api_key:a}:parallel", 3),
        grant("lease:p:1", "{api_key:b}:parallel", 20),
        // Another lease of the same counter: runs in order, after the first.
        grant("lease:q:1", "{api_key:a}:parallel", 9),
    ];
    let together = batched(&redis, SLOT_LEASE, &runs);
    let slots = |key| redis.slots(key);
    let after_batch = (slots("{api_key:a}:parallel"), slots("{api_key:b}:parallel"));
    redis.command(&["FLUSHALL"]);
    let one_by_one: Vec<Reply> = runs.iter().map(|r| alone(&redis, SLOT_LEASE, r)).collect();
    assert_eq!(together, Reply::Array(one_by_one.clone()));
    assert_eq!(
        one_by_one,
        [ints(&[1, 3, 0]), ints(&[1, 10, 0]), ints(&[1, 7, 3])],
        "the limit of 10 holds across runs on one counter"
    );
    assert_eq!(
        after_batch,
        (slots("{api_key:a}:parallel"), slots("{api_key:b}:parallel"))
    );
    assert_eq!(after_batch, (10, 10));
}

#[test]
fn a_failing_run_fails_alone() {
    let redis = PrivateRedis::start();
    let bad = (
        vec!["{api_key:c}:parallel".to_string()],
        vec!["too few".to_string()],
    );
    let reply = batched(
        &redis,
        SLOT_LEASE,
        &[
            grant("lease:p:1", "{api_key:a}:parallel", 2),
            bad,
            grant("lease:p:1", "{api_key:b}:parallel", 1),
        ],
    );
    let Reply::Array(items) = reply else {
        panic!("one reply per run: {reply:?}")
    };
    assert_eq!(items.len(), 3);
    assert_eq!(items[0], ints(&[1, 2, 0]));
    assert!(matches!(&items[1], Reply::Error(_)), "{:?}", items[1]);
    assert_eq!(items[2], ints(&[1, 1, 0]));
}
