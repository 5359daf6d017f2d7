//! The limiter's `limiter.lua` on a private `redis-server`: for a parallel
//! counter, a steady admission reads the slot set once (lapsed slots are
//! dropped only when the set looks full, where they could change the
//! verdict), and a crashed replica's lapsed slot never refuses a request;
//! a batch of operations (group commit) runs them in order, each all or
//! none, with one reply each and one reading of the clock.

use e2e::redis::Reply;
use e2e::PrivateRedis;

const LIMITER: &str = include_str!("../../gateway/src/limits/limiter.lua");
const COUNTER: &str = "{api_key:t}:parallel";

/// Numbers packed as the gateway packs them (little-endian doubles).
fn packed(numbers: &[f64]) -> Vec<u8> {
    numbers.iter().flat_map(|n| n.to_le_bytes()).collect()
}

/// One operation of a batch: its key and its arguments.
struct Op {
    key: &'static str,
    args: Vec<Vec<u8>>,
    letter: u8,
}

/// An admission of request `rid` charging one unit of `kind` on `key` with
/// `limit`, as the gateway sends it (numbers: bucket seconds, buckets, slot
/// ttl, the deadline in Redis milliseconds or 0, then limit, amount, need).
fn admission(key: &'static str, kind: &str, rid: &str, limit: u64, deadline_ms: f64) -> Op {
    Op {
        key,
        letter: b'a',
        args: vec![
            rid.into(),
            b"600000".to_vec(),
            kind.into(),
            packed(&[1.0, 61.0, 600_000.0, deadline_ms, limit as f64, 1.0, 1.0]),
            b"1".to_vec(),
        ],
    }
}

/// The settlement of request `rid`'s parallel slot on `key`.
fn settlement(key: &'static str, rid: &str) -> Op {
    Op {
        key,
        letter: b'f',
        args: vec![
            rid.into(),
            b"0".to_vec(),
            b"p".to_vec(),
            packed(&[1.0, 61.0, 0.0, 1.0]),
        ],
    }
}

/// `limiter.lua` run on `ops` as one call.
fn batch(redis: &PrivateRedis, ops: &[Op]) -> Reply {
    let count = ops.len().to_string();
    let letters: Vec<u8> = ops.iter().map(|o| o.letter).collect();
    let mut args: Vec<&[u8]> = vec![b"EVAL", LIMITER.as_bytes(), count.as_bytes()];
    args.extend(ops.iter().map(|o| o.key.as_bytes()));
    args.push(&letters);
    for op in ops {
        args.extend(op.args.iter().map(Vec::as_slice));
    }
    redis.command_bytes(&args)
}

/// An admission of request `rid` on the parallel counter with `limit`, on
/// its own.
fn admit(redis: &PrivateRedis, rid: &str, limit: u64) -> Reply {
    batch(redis, &[admission(COUNTER, "p", rid, limit, 0.0)])
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

/// What a batch replied for each of its operations.
fn replies(reply: Reply) -> Vec<Reply> {
    match reply {
        Reply::Array(items) => items,
        other => panic!("a batch answers an array: {other:?}"),
    }
}

#[test]
fn a_batch_runs_its_operations_in_order_each_all_or_none() {
    let redis = PrivateRedis::start();
    const RPM: &str = "{api_key:t}:requests";
    redis.command(&["CONFIG", "RESETSTAT"]);
    let out = replies(batch(
        &redis,
        &[
            admission(COUNTER, "p", "r1", 2, 0.0),
            admission(COUNTER, "p", "r2", 2, 0.0),
            // Full: refused, and charges nothing.
            admission(COUNTER, "p", "r3", 2, 0.0),
            // r1 leaves, so the next admission has room.
            settlement(COUNTER, "r1"),
            admission(COUNTER, "p", "r4", 2, 0.0),
            admission(RPM, "r", "r5", 1, 0.0),
            admission(RPM, "r", "r6", 1, 0.0),
        ],
    ));
    assert_eq!(out.len(), 7, "one reply per operation: {out:?}");
    assert!(admitted(&out[0]) && admitted(&out[1]), "{out:?}");
    assert!(
        matches!(&out[2], Reply::Array(items) if items[..3] == [Reply::Int(0), Reply::Int(1), Reply::Int(2)]),
        "the third slot is refused with the usage it saw: {:?}",
        out[2]
    );
    assert_eq!(out[3], Reply::Int(1), "the settlement's reply");
    assert!(admitted(&out[4]), "room after the settlement: {:?}", out[4]);
    assert!(admitted(&out[5]), "{:?}", out[5]);
    assert!(
        matches!(&out[6], Reply::Array(items) if items.first() == Some(&Reply::Int(0))),
        "the rpm limit of 1 refuses the second request: {:?}",
        out[6]
    );
    assert_eq!(redis.slots(COUNTER), 2, "r2 and r4 hold slots");
    let Reply::Bulk(Some(info)) = redis.command(&["INFO", "commandstats"]) else {
        panic!("INFO commandstats");
    };
    assert!(
        info.lines().any(|l| l.starts_with("cmdstat_time:calls=1,")),
        "the clock is read once per batch: {info}"
    );
}

#[test]
fn an_admission_past_its_deadline_charges_nothing_and_the_batch_goes_on() {
    let redis = PrivateRedis::start();
    let out = replies(batch(
        &redis,
        &[
            // A deadline long past (1 ms after the epoch, in Redis time).
            admission(COUNTER, "p", "late", 5, 1.0),
            admission(COUNTER, "p", "on-time", 5, 0.0),
        ],
    ));
    assert_eq!(out[0], Reply::Array(vec![Reply::Int(2)]), "{out:?}");
    assert!(admitted(&out[1]), "{out:?}");
    assert_eq!(
        redis.slots(COUNTER),
        1,
        "only the on-time request holds a slot"
    );
}

#[test]
fn a_batch_of_settlements_that_only_free_slots_reads_no_clock() {
    let redis = PrivateRedis::start();
    assert!(admitted(&admit(&redis, "r1", 5)));
    assert!(admitted(&admit(&redis, "r2", 5)));
    redis.command(&["CONFIG", "RESETSTAT"]);
    let out = replies(batch(
        &redis,
        &[settlement(COUNTER, "r1"), settlement(COUNTER, "r2")],
    ));
    assert_eq!(out, [Reply::Int(1), Reply::Int(1)]);
    assert_eq!(redis.slots(COUNTER), 0, "both slots freed");
    let Reply::Bulk(Some(info)) = redis.command(&["INFO", "commandstats"]) else {
        panic!("INFO commandstats");
    };
    assert!(
        !info.contains("cmdstat_time:"),
        "no TIME for settlements that only free slots: {info}"
    );
}

/// An admission of one unit on the rpm counter `key` with `limit`.
fn rpm_admission(key: &'static str, rid: &str, limit: u64) -> Op {
    Op {
        key,
        letter: b'a',
        args: vec![
            rid.into(),
            b"600000".to_vec(),
            b"r".to_vec(),
            packed(&[1.0, 61.0, 600_000.0, 0.0, limit as f64, 1.0, 1.0]),
            b"1".to_vec(),
        ],
    }
}

/// The counter's fields and values, sorted by field.
fn fields(redis: &PrivateRedis, key: &str) -> Vec<(String, String)> {
    let Reply::Array(items) = redis.command(&["HGETALL", key]) else {
        panic!("HGETALL {key}");
    };
    let text = |r: &Reply| match r {
        Reply::Bulk(Some(s)) => s.clone(),
        other => panic!("a field: {other:?}"),
    };
    let mut out: Vec<(String, String)> = items
        .chunks(2)
        .map(|kv| (text(&kv[0]), text(&kv[1])))
        .collect();
    out.sort();
    out
}

/// Redis's current second.
fn redis_second(redis: &PrivateRedis) -> i64 {
    match redis.command(&["TIME"]) {
        Reply::Array(t) => match &t[0] {
            Reply::Bulk(Some(s)) => s.parse().expect("seconds"),
            other => panic!("TIME: {other:?}"),
        },
        other => panic!("TIME: {other:?}"),
    }
}

#[test]
fn a_window_that_moved_on_is_written_with_the_charge_and_not_at_all_on_a_refusal() {
    let redis = PrivateRedis::start();
    const RPM: &str = "{api_key:t}:requests";
    // A counter last checked a second ago (61 one-second buckets): a
    // bucket 61 s old (just out of the window, 2 units) and one a second
    // old (3 units).
    let now = redis_second(&redis);
    let (dead, live) = ((now - 61).to_string(), (now - 1).to_string());
    redis.command(&[
        "HSET", RPM, &dead, "2", &live, "3", "-1", "5", "-2", &dead, "-3", &live,
    ]);
    redis.command(&["EXPIRE", RPM, "120"]);
    let before = fields(&redis, RPM);
    // Refused (3 live units, limit 3): the usage it saw leaves the dead
    // bucket out, and nothing is written.
    let refused = batch(&redis, &[rpm_admission(RPM, "r1", 3)]);
    assert!(
        matches!(&refused, Reply::Array(items) if items[..3] == [Reply::Int(0), Reply::Int(1), Reply::Int(3)]),
        "{refused:?}"
    );
    assert_eq!(fields(&redis, RPM), before, "a refusal writes nothing");
    redis.command(&["CONFIG", "RESETSTAT"]);
    let out = batch(&redis, &[rpm_admission(RPM, "r2", 4)]);
    // TIME, HMGET of the bookkeeping, HMGET of the buckets that left the
    // window, HDEL, HINCRBY of the new bucket, its EXPIRE, and one HSET of
    // the new sum and lowest bucket (the sum's own HSET and HINCRBY were
    // two commands before).
    assert_eq!(commands_run(&redis), 7);
    let Reply::Array(items) = &out else {
        panic!("{out:?}")
    };
    assert_eq!(items[0], Reply::Int(1), "admitted: {out:?}");
    assert_eq!(items[2], Reply::Int(3), "the usage it saw: {out:?}");
    let Reply::Int(tick) = items[1] else {
        panic!("{out:?}")
    };
    let oldest = (tick - 60).to_string();
    let mut expected = vec![
        ("-1".to_string(), "4".to_string()),
        ("-2".to_string(), oldest),
        ("-3".to_string(), live.clone()),
        (live, "3".to_string()),
        (tick.to_string(), "1".to_string()),
    ];
    expected.sort();
    assert_eq!(fields(&redis, RPM), expected, "the dead bucket dropped");
}
