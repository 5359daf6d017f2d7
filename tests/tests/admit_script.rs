//! The limiter's `admit.lua` on a private `redis-server`, for a parallel
//! counter: a steady admission reads the slot set once (lapsed slots are
//! dropped only when the set looks full, where they could change the
//! verdict), and a crashed replica's lapsed slot never refuses a request.

use e2e::redis::Reply;
use e2e::PrivateRedis;

const ADMIT: &str = include_str!("../../gateway/src/limits/admit.lua");
const COUNTER: &str = "{api_key:t}:parallel";

/// `admit.lua` of request `rid` on the parallel counter with `limit`, as
/// the gateway sends it (numbers packed as little-endian doubles: bucket
/// seconds, buckets, slot ttl, no deadline, then limit, amount, need).
fn admit(redis: &PrivateRedis, rid: &str, limit: u64) -> Reply {
    let numbers: Vec<u8> = [1.0, 61.0, 600_000.0, 0.0, limit as f64, 1.0, 1.0]
        .iter()
        .flat_map(|n: &f64| n.to_le_bytes())
        .collect();
    redis.command_bytes(&[
        b"EVAL",
        ADMIT.as_bytes(),
        b"1",
        COUNTER.as_bytes(),
        rid.as_bytes(),
        b"600000",
        b"p",
        &numbers,
        b"1",
    ])
}

fn admitted(reply: &Reply) -> bool {
    matches!(reply, Reply::Array(items) if items.first() == Some(&Reply::Int(1)))
}

/// Commands run inside the script, from `INFO commandstats`.
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
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<i64>()
                .ok()
        })
        .sum()
}

#[test]
fn a_steady_parallel_admission_reads_its_slots_once() {
    let redis = PrivateRedis::start();
    assert!(admitted(&admit(&redis, "warm", 10)));
    redis.command(&["CONFIG", "RESETSTAT"]);
    assert!(admitted(&admit(&redis, "r1", 10)));
    // TIME, ZCARD, ZADD, PEXPIRE (the previous script also ran a
    // ZREMRANGEBYSCORE every time).
    assert_eq!(commands_run(&redis), 4);
    assert_eq!(redis.slots(COUNTER), 2);
}

#[test]
fn a_lapsed_slot_never_refuses_a_request() {
    let redis = PrivateRedis::start();
    // A crashed replica's slot, lapsed at 1 ms after the epoch.
    redis.command(&["ZADD", COUNTER, "1", "gone"]);
    assert!(admitted(&admit(&redis, "r1", 1)), "the lapsed slot dropped");
    assert_eq!(redis.slots(COUNTER), 1, "only r1 holds a slot");
    let refused = admit(&redis, "r2", 1);
    assert!(
        matches!(&refused, Reply::Array(items) if items[..3] == [Reply::Int(0), Reply::Int(1), Reply::Int(1)]),
        "a live slot still refuses: {refused:?}"
    );
}
