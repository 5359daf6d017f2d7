//! The fleet budget's Lua scripts (`gateway/src/budget/reserve.lua`,
//! `settle.lua`) run on a private `redis-server`, as the gateway sends them:
//! holds are exact whatever the amount (a zero hold settles, a 15-digit one
//! gives back every nano-USD), a hold written as JSON by the previous
//! version settles, lapsed holds stop refusing, and a request's
//! reservation and settlement stay within the `redis.call`s the scripts
//! were cut to (Redis's CPU per request is mostly those calls).

use e2e::redis::Reply;
use e2e::PrivateRedis;
use std::time::Duration;

const RESERVE: &str = include_str!("../../gateway/src/budget/reserve.lua");
const SETTLE: &str = include_str!("../../gateway/src/budget/settle.lua");

const HASH: &str = "{budget:key:t}";
const HOLDS: &str = "{budget:key:t}:holds";

/// `reserve.lua` for one principal with the key's own budget (`max`, -1
/// for none) and a per-model one without a limit, seeded with 0 spend.
fn reserve(redis: &PrivateRedis, ttl_ms: &str, rid: &str, amount: &str, max: &str) -> Reply {
    redis.command(&[
        "EVAL",
        RESERVE,
        "2",
        HASH,
        HOLDS,
        ttl_ms,
        rid,
        amount,
        "0",
        "0",
        "2",
        "",
        max,
        "0",
        "0",
        "model:gpt-4o:",
        "-1",
        "0",
        "0",
    ])
}

/// `settle.lua` of `rid` with `cost`.
fn settle(redis: &PrivateRedis, rid: &str, cost: &str) -> Reply {
    redis.command(&[
        "EVAL",
        SETTLE,
        "2",
        HASH,
        HOLDS,
        rid,
        cost,
        "0",
        "2",
        "",
        "model:gpt-4o:",
    ])
}

fn field(redis: &PrivateRedis, name: &str) -> Option<String> {
    match redis.command(&["HGET", HASH, name]) {
        Reply::Bulk(v) => v,
        other => panic!("HGET {name}: {other:?}"),
    }
}

fn admitted() -> Reply {
    Reply::Array(vec![Reply::Int(1)])
}

#[test]
fn holds_are_exact_for_any_amount_and_settle() {
    let redis = PrivateRedis::start();
    // Zero: its release must not send HINCRBY "-0" (not an integer to Redis).
    assert_eq!(reserve(&redis, "600000", "r0", "0", "1000"), admitted());
    assert_eq!(settle(&redis, "r0", "0"), admitted());
    assert_eq!(field(&redis, "hold:r0"), None, "released");
    // More digits than a Lua number prints (%.14g): every nano-USD back.
    let big = "123456789012345";
    assert_eq!(reserve(&redis, "600000", "r1", big, "-1"), admitted());
    assert_eq!(field(&redis, "reserved").as_deref(), Some(big));
    assert_eq!(
        field(&redis, "hold:r1").as_deref(),
        Some(r#"{"a":123456789012345,"p":["","model:gpt-4o:"]}"#),
        "the JSON cjson would write, the amount exact"
    );
    assert_eq!(settle(&redis, "r1", "7"), admitted());
    assert_eq!(field(&redis, "reserved").as_deref(), Some("0"));
    assert_eq!(field(&redis, "model:gpt-4o:reserved").as_deref(), Some("0"));
    assert_eq!(field(&redis, "spent").as_deref(), Some("7"));
    assert_eq!(field(&redis, "model:gpt-4o:spent").as_deref(), Some("7"));
    assert_eq!(redis.command(&["ZCARD", HOLDS]), Reply::Int(0));
}

#[test]
fn a_hold_the_previous_version_wrote_settles() {
    let redis = PrivateRedis::start();
    assert_eq!(reserve(&redis, "600000", "r1", "100", "1000"), admitted());
    // cjson's own encoding: members in table order, the amount a float.
    let old = r#"{"p":["","model:gpt-4o:"],"a":1e+14}"#;
    redis.command(&["HSET", HASH, "hold:old", old, "reserved", "100000000000100"]);
    redis.command(&["HSET", HASH, "model:gpt-4o:reserved", "100000000000100"]);
    assert_eq!(settle(&redis, "old", "0"), admitted());
    assert_eq!(settle(&redis, "r1", "0"), admitted());
    assert_eq!(field(&redis, "reserved").as_deref(), Some("0"));
    assert_eq!(field(&redis, "model:gpt-4o:reserved").as_deref(), Some("0"));
}

#[test]
fn a_lapsed_hold_never_refuses_a_request() {
    let redis = PrivateRedis::start();
    // A replica that crashed holding 900 of 1,000 for 1 ms.
    assert_eq!(reserve(&redis, "1", "gone", "900", "1000"), admitted());
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(reserve(&redis, "600000", "r1", "500", "1000"), admitted());
    assert_eq!(field(&redis, "hold:gone"), None, "released");
    assert_eq!(field(&redis, "reserved").as_deref(), Some("500"));
    // A hold still alive refuses as before, naming the counter.
    let refused = reserve(&redis, "600000", "r2", "600", "1000");
    assert_eq!(
        refused,
        Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(1),
            Reply::Int(1),
            Reply::Int(0),
            Reply::Int(500)
        ])
    );
}

/// Commands run inside scripts, from `INFO commandstats` (the scripts'
/// own `eval` calls, `config` and `info` left out).
fn commands_run(redis: &PrivateRedis) -> i64 {
    let Reply::Bulk(Some(info)) = redis.command(&["INFO", "commandstats"]) else {
        panic!("INFO commandstats");
    };
    info.lines()
        .filter(|l| l.starts_with("cmdstat_"))
        .filter(|l| {
            !["cmdstat_eval", "cmdstat_info", "cmdstat_config"]
                .iter()
                .any(|c| l.starts_with(c))
        })
        .filter_map(|l| {
            let calls = l.split("calls=").nth(1)?;
            calls.split(',').next()?.parse::<i64>().ok()
        })
        .sum()
}

#[test]
fn a_steady_reservation_and_settlement_make_fourteen_redis_calls() {
    let redis = PrivateRedis::start();
    assert_eq!(reserve(&redis, "600000", "warm", "10", "1000"), admitted());
    assert_eq!(settle(&redis, "warm", "3"), admitted());
    // The least of two rounds: a round that crosses an hour also does the
    // hourly upkeep (an idle expiry renewed, lapsed holds looked for).
    let mut least = i64::MAX;
    for rid in ["r1", "r2"] {
        redis.command(&["CONFIG", "RESETSTAT"]);
        assert_eq!(reserve(&redis, "600000", rid, "10", "1000"), admitted());
        assert_eq!(settle(&redis, rid, "3"), admitted());
        least = least.min(commands_run(&redis));
    }
    // reserve: TIME, HMGET, HINCRBY x2 (both counters), HSET, ZADD,
    // PEXPIRE; settle (no deadline: no TIME): HMGET, HINCRBY x2, HDEL,
    // ZREM, HINCRBY x2. The previous scripts made 22.
    assert_eq!(least, 14);
    assert_eq!(field(&redis, "spent").as_deref(), Some("9"));
    assert_eq!(field(&redis, "reserved").as_deref(), Some("0"));
}
