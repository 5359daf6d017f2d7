//! The limiter's `limiter.lua` on a private `redis-server`: every counter
//! of a scope lives in one hash, so an admission reads a scope with one
//! `HMGET` and writes it with one `HSET` (lapsed slots are swept only when
//! the counter looks full, where they could change the verdict), a
//! crashed replica's lapsed slot never refuses a request, and freeing a
//! slot twice frees it once; a batch of operations (group commit) runs
//! them in order, each all or none, with one reply each and one reading
//! of the clock.

use e2e::redis::Reply;
use e2e::PrivateRedis;

const LIMITER: &str = include_str!("../../gateway/src/limits/limiter.lua");
/// The scope's hash, and its parallel counter's name as the harness reads it.
const SCOPE: &str = "{api_key:t}";
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
            kind.into(),
            packed(&[1.0, 61.0, 600_000.0, deadline_ms, limit as f64, 1.0, 1.0]),
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
    batch(redis, &[admission(SCOPE, "p", rid, limit, 0.0)])
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
    // TIME, HMGET, HSET: the key's expiry was set by the first admission
    // for twice a slot's life (the sorted set of the previous layout took
    // TIME, ZCARD, ZADD, PEXPIRE).
    assert_eq!(commands_run(&redis), 3);
    assert_eq!(redis.slots(COUNTER), 2);
}

/// An admission of request `rid` charging one request, `tokens` tokens and
/// one slot on the scope's rpm, tpm and parallel limits.
fn admission_of_three(rid: &str, rpm: u64, tpm: u64, tokens: u64, parallel: u64) -> Op {
    Op {
        key: SCOPE,
        letter: b'a',
        args: vec![
            rid.into(),
            b"rtp".to_vec(),
            packed(&[
                1.0,
                61.0,
                600_000.0,
                0.0,
                rpm as f64,
                1.0,
                1.0,
                tpm as f64,
                tokens as f64,
                tokens as f64,
                parallel as f64,
                1.0,
                1.0,
            ]),
        ],
    }
}

/// Runs `op` (whose keys are all the scope's hash) on its own.
fn alone(redis: &PrivateRedis, op: Op) -> Reply {
    let kinds = op.args[if op.letter == b'a' { 1 } else { 2 }].len();
    let count = kinds.to_string();
    let letter = [op.letter];
    let mut args: Vec<&[u8]> = vec![b"EVAL", LIMITER.as_bytes(), count.as_bytes()];
    args.extend(std::iter::repeat_n(op.key.as_bytes(), kinds));
    args.push(&letter);
    args.extend(op.args.iter().map(Vec::as_slice));
    redis.command_bytes(&args)
}

#[test]
fn a_scopes_three_counters_are_read_and_written_once_each_admission() {
    let redis = PrivateRedis::start();
    assert!(admitted(&alone(
        &redis,
        admission_of_three("warm", 10, 1000, 100, 10)
    )));
    redis.command(&["CONFIG", "RESETSTAT"]);
    let reply = alone(&redis, admission_of_three("r1", 10, 1000, 100, 10));
    let Reply::Array(items) = &reply else {
        panic!("{reply:?}");
    };
    // Admitted, the tick, then the usage each counter had: 1 request, 100
    // tokens, 1 slot.
    assert_eq!(items[0], Reply::Int(1), "{reply:?}");
    assert_eq!(items[2..], [Reply::Int(1), Reply::Int(100), Reply::Int(1)]);
    // TIME, one HMGET and one HSET for the three counters (nine
    // redis.calls a key per scope in the previous layout).
    assert_eq!(commands_run(&redis), 3);
    assert_eq!(redis.window_total("{api_key:t}:requests"), 2);
    assert_eq!(redis.window_total("{api_key:t}:tokens"), 200);
    assert_eq!(redis.slots(COUNTER), 2);
    // Over the tpm limit: refused at the second counter, nothing charged.
    let refused = alone(&redis, admission_of_three("r2", 10, 250, 100, 10));
    assert!(
        matches!(&refused, Reply::Array(items) if items[..3] == [Reply::Int(0), Reply::Int(2), Reply::Int(200)]),
        "{refused:?}"
    );
    assert_eq!(redis.window_total("{api_key:t}:requests"), 2);
    assert_eq!(redis.slots(COUNTER), 2);
    let ttl = match redis.command(&["TTL", SCOPE]) {
        Reply::Int(n) => n,
        other => panic!("TTL: {other:?}"),
    };
    assert!(
        (600..=1200).contains(&ttl),
        "the hash outlives a slot's life: {ttl}"
    );
}

#[test]
fn a_slot_freed_twice_or_admitted_twice_counts_once() {
    let redis = PrivateRedis::start();
    assert!(admitted(&admit(&redis, "r1", 5)));
    assert!(admitted(&admit(&redis, "r1", 5)), "the same request again");
    assert_eq!(redis.slots(COUNTER), 1, "one slot for one request");
    assert!(admitted(&admit(&redis, "r2", 5)));
    let out = replies(batch(
        &redis,
        &[settlement(SCOPE, "r1"), settlement(SCOPE, "r1")],
    ));
    assert_eq!(out, [Reply::Int(1), Reply::Int(1)]);
    // `slots` also checks that the count kept equals the slots held.
    assert_eq!(redis.slots(COUNTER), 1, "r2 still holds its slot");
    assert_eq!(
        redis.slot_ids(COUNTER),
        ["r2"],
        "a release retried after an outage frees nothing more"
    );
}

#[test]
fn a_lapsed_slot_never_refuses_a_request() {
    let redis = PrivateRedis::start();
    // A crashed replica's slot, lapsed at 1 ms after the epoch.
    redis.command(&["HSET", SCOPE, "p", "1", "p:gone", "1"]);
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
    const RPM: &str = "{api_key:r}";
    redis.command(&["CONFIG", "RESETSTAT"]);
    let out = replies(batch(
        &redis,
        &[
            admission(SCOPE, "p", "r1", 2, 0.0),
            admission(SCOPE, "p", "r2", 2, 0.0),
            // Full: refused, and charges nothing.
            admission(SCOPE, "p", "r3", 2, 0.0),
            // r1 leaves, so the next admission has room.
            settlement(SCOPE, "r1"),
            admission(SCOPE, "p", "r4", 2, 0.0),
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
            admission(SCOPE, "p", "late", 5, 1.0),
            admission(SCOPE, "p", "on-time", 5, 0.0),
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
        &[settlement(SCOPE, "r1"), settlement(SCOPE, "r2")],
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

/// The settlement of request `rid` admitted at `tick` by
/// [`admission_of_three`]: `used` of its `reserved` tokens, and its slot.
fn settlement_of_two(rid: &str, tick: i64, used: u64, reserved: u64) -> Op {
    Op {
        key: SCOPE,
        letter: b'f',
        args: vec![
            rid.into(),
            tick.to_string().into_bytes(),
            b"tp".to_vec(),
            packed(&[1.0, 61.0, used as f64, reserved as f64, 1.0]),
        ],
    }
}

#[test]
fn operations_on_one_scope_in_one_batch_share_its_read_and_its_write() {
    let redis = PrivateRedis::start();
    let warm = alone(&redis, admission_of_three("warm", 10, 1000, 100, 10));
    let Reply::Array(items) = &warm else {
        panic!("{warm:?}");
    };
    let Reply::Int(tick) = items[1] else {
        panic!("{warm:?}");
    };
    redis.command(&["CONFIG", "RESETSTAT"]);
    // Keys: three for each admission, two for the settlement.
    let ops = [
        admission_of_three("r1", 10, 1000, 100, 10),
        admission_of_three("r2", 10, 1000, 100, 10),
        settlement_of_two("warm", tick, 40, 100),
        admission_of_three("r3", 10, 1000, 100, 10),
    ];
    let count = (3 * 3 + 2).to_string();
    let letters = b"aafa";
    let mut args: Vec<&[u8]> = vec![b"EVAL", LIMITER.as_bytes(), count.as_bytes()];
    args.extend(std::iter::repeat_n(SCOPE.as_bytes(), 3 * 3 + 2));
    args.push(letters);
    for op in &ops {
        args.extend(op.args.iter().map(Vec::as_slice));
    }
    let out = replies(redis.command_bytes(&args));
    assert_eq!(out.len(), 4, "{out:?}");
    assert!(
        admitted(&out[0]) && admitted(&out[1]) && admitted(&out[3]),
        "{out:?}"
    );
    assert_eq!(out[2], Reply::Int(1));
    // Each admission saw the ones before it: r3 saw 3 requests, 240
    // tokens (the warm request's 100 reserved became 40) and 2 slots.
    let Reply::Array(r3) = &out[3] else {
        panic!("{out:?}");
    };
    assert_eq!(r3[2..], [Reply::Int(3), Reply::Int(240), Reply::Int(2)]);
    // TIME, then one HMGET, one HSET and one HDEL (the freed slot) for
    // the four operations together.
    assert_eq!(commands_run(&redis), 4);
    assert_eq!(redis.window_total("{api_key:t}:requests"), 4);
    assert_eq!(redis.window_total("{api_key:t}:tokens"), 340);
    assert_eq!(redis.slot_ids(COUNTER), ["r1", "r2", "r3"]);
}
