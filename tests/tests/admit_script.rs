//! The limiter's `limiter.lua` on a private `redis-server`: for a parallel
//! counter, a steady admission reads the slot set once (lapsed slots are
//! dropped only when the set looks full, where they could change the
//! verdict), and a crashed replica's lapsed slot never refuses a request;
//! a batch of operations (group commit) runs them in order, each all or
//! none, with one reply each and one reading of the clock; operations in a
//! row on the same counters run on a copy written once, with the outcomes
//! and counters of running them one by one.

use e2e::redis::Reply;
use e2e::PrivateRedis;

const LIMITER: &str = include_str!("../../gateway/src/limits/limiter.lua");
const COUNTER: &str = "{api_key:t}:parallel";

/// Numbers packed as the gateway packs them (little-endian doubles).
fn packed(numbers: &[f64]) -> Vec<u8> {
    numbers.iter().flat_map(|n| n.to_le_bytes()).collect()
}

/// One operation of a batch: its keys, its numbers (in the batch's one
/// numbers argument) and its other arguments.
struct Op {
    keys: Vec<&'static str>,
    numbers: Vec<f64>,
    args: Vec<Vec<u8>>,
    letter: u8,
}

/// An admission of request `rid` charging one unit of `kind` on `key` with
/// `limit`, as the gateway sends it (numbers: the deadline in Redis
/// milliseconds or 0, then limit, amount, need; arguments: the kinds, the
/// request id, the amount in decimal).
fn admission(key: &'static str, kind: &str, rid: &str, limit: u64, deadline_ms: f64) -> Op {
    Op {
        keys: vec![key],
        letter: b'a',
        numbers: vec![deadline_ms, limit as f64, 1.0, 1.0],
        args: vec![kind.into(), rid.into(), b"1".to_vec()],
    }
}

/// The settlement of request `rid`'s parallel slot on `key` whose form is
/// not known (numbers: the tokens used, 0 for the slot; arguments: the
/// kinds, the request id, the bucket): as after an admission that got no
/// reply.
fn settlement(key: &'static str, rid: &str) -> Op {
    Op {
        keys: vec![key],
        letter: b'f',
        numbers: vec![0.0, 0.0],
        args: vec![b"p".to_vec(), rid.into(), b"0".to_vec()],
    }
}

/// [`settlement`] of a slot taken when its set held `held` slots (its
/// admission's `used`), as the gateway sends it: the slot's number is
/// `held + 1`.
fn settlement_of(key: &'static str, rid: &str, held: u32) -> Op {
    Op {
        numbers: vec![0.0, f64::from(held) + 1.0],
        ..settlement(key, rid)
    }
}

/// `limiter.lua` run on `ops` as one call: the keys, the letters, every
/// number of the batch in one argument (the window, 61 buckets of a second,
/// and the slot lifetime, 600 s, first), the slot lifetime in decimal, then
/// each operation's arguments.
fn batch(redis: &PrivateRedis, ops: &[Op]) -> Reply {
    let count = ops.iter().map(|o| o.keys.len()).sum::<usize>().to_string();
    let letters: Vec<u8> = ops.iter().map(|o| o.letter).collect();
    let mut numbers = vec![1.0, 61.0, 600_000.0];
    numbers.extend(ops.iter().flat_map(|o| o.numbers.iter().copied()));
    let numbers = packed(&numbers);
    let mut args: Vec<&[u8]> = vec![b"EVAL", LIMITER.as_bytes(), count.as_bytes()];
    args.extend(ops.iter().flat_map(|o| o.keys.iter().map(|k| k.as_bytes())));
    args.push(&letters);
    args.push(&numbers);
    args.push(b"600000");
    for op in ops {
        args.extend(op.args.iter().map(Vec::as_slice));
    }
    redis.command_bytes(&args)
}

/// `limiter.lua` run on `ops` as one call, its reply (one flat array of
/// integers) split into each operation's as the gateway splits it: an
/// admission's array (`1, tick, used...`, `0, index, used, reset_at` or
/// `2`), a settlement's `1`.
fn run(redis: &PrivateRedis, ops: &[Op]) -> Vec<Reply> {
    let reply = batch(redis, ops);
    let Reply::Array(items) = &reply else {
        panic!("a batch answers an array: {reply:?}");
    };
    let int = |r: &Reply| match r {
        Reply::Int(n) => *n,
        other => panic!("a flat array of integers: {reply:?} ({other:?})"),
    };
    let mut at = 0;
    let mut out = Vec::new();
    for op in ops {
        let len = match (op.letter, int(&items[at])) {
            (b'f', 1) => {
                out.push(Reply::Int(1));
                at += 1;
                continue;
            }
            (b'a', 1) => 2 + op.keys.len(),
            (b'a', 0) => 4,
            (b'a', 2) => 1,
            other => panic!("unexpected reply {other:?} in {reply:?}"),
        };
        out.push(Reply::Array(items[at..at + len].to_vec()));
        at += len;
    }
    assert_eq!(
        at,
        items.len(),
        "nothing past the last operation's: {reply:?}"
    );
    out
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

#[test]
fn a_batch_runs_its_operations_in_order_each_all_or_none() {
    let redis = PrivateRedis::start();
    const RPM: &str = "{api_key:t}:requests";
    redis.command(&["CONFIG", "RESETSTAT"]);
    let out = run(
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
    );
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

/// The reply is one flat array of integers (no table per operation, which
/// costs Redis's Lua as much as a few hundred bytecodes): an admitted
/// request's 1, tick and usages, a refusal's four integers, a settlement's 1.
#[test]
fn a_batch_answers_one_flat_array_of_integers() {
    let redis = PrivateRedis::start();
    let reply = batch(
        &redis,
        &[
            admission(COUNTER, "p", "r1", 1, 0.0),
            admission(COUNTER, "p", "r2", 1, 0.0),
            settlement(COUNTER, "r1"),
        ],
    );
    let Reply::Array(items) = &reply else {
        panic!("{reply:?}")
    };
    assert_eq!(items.len(), 3 + 4 + 1, "{reply:?}");
    assert!(
        items.iter().all(|i| matches!(i, Reply::Int(_))),
        "{reply:?}"
    );
    assert_eq!(items[0], Reply::Int(1));
    assert_eq!(items[2], Reply::Int(0), "r1 saw no slot taken");
    assert_eq!(
        items[3..],
        [
            Reply::Int(0),
            Reply::Int(1),
            Reply::Int(1),
            items[6].clone(),
            Reply::Int(1)
        ],
        "r2 refused (its counter full), then r1 settled"
    );
}

/// A batch whose numbers do not fit Lua's stack in one `struct.unpack`
/// (about 8,000 values; one unpack of these 8,403 fails with "too many
/// results") is read in parts, each number where it belongs: 2,100
/// admissions on one rpm counter, the last with a limit it finds full.
#[test]
fn a_long_batch_reads_all_its_numbers() {
    let redis = PrivateRedis::start();
    const RPM: &str = "{api_key:long}:requests";
    let n = 2_100;
    let ops: Vec<Op> = (0..n)
        .map(|i| {
            let limit = if i + 1 == n { n - 1 } else { 1_000_000 };
            admission(RPM, "r", &format!("r{i}"), limit, 0.0)
        })
        .collect();
    assert!(3 + ops.iter().map(|o| o.numbers.len()).sum::<usize>() > 8_000);
    let out = run(&redis, &ops);
    for (i, reply) in out[..n as usize - 1].iter().enumerate() {
        let Reply::Array(items) = reply else {
            panic!("{reply:?}")
        };
        assert_eq!(items[0], Reply::Int(1), "op {i}: {reply:?}");
        assert_eq!(items[2], Reply::Int(i as i64), "op {i} saw those before");
    }
    let Reply::Array(last) = &out[n as usize - 1] else {
        panic!("{:?}", out.last())
    };
    assert_eq!(
        last[..3],
        [Reply::Int(0), Reply::Int(1), Reply::Int(n as i64 - 1)],
        "the last one's limit, read from the blob's end, refuses it"
    );
}

#[test]
fn an_admission_past_its_deadline_charges_nothing_and_the_batch_goes_on() {
    let redis = PrivateRedis::start();
    let out = run(
        &redis,
        &[
            // A deadline long past (1 ms after the epoch, in Redis time).
            admission(COUNTER, "p", "late", 5, 1.0),
            admission(COUNTER, "p", "on-time", 5, 0.0),
        ],
    );
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
    let out = run(
        &redis,
        &[settlement(COUNTER, "r1"), settlement(COUNTER, "r2")],
    );
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
    admission(key, "r", rid, limit, 0.0)
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

/// The units of a counter's buckets (its fields but the bookkeeping ones).
fn bucket_sum(fields: &[(String, String)]) -> i64 {
    fields
        .iter()
        .filter(|(k, _)| !k.starts_with('-'))
        .map(|(_, v)| v.parse::<i64>().unwrap())
        .sum()
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
    // TIME, HMGET of the bookkeeping and the current bucket, HMGET of the
    // buckets that left the window, HDEL, one HSET of the new bucket, the
    // new sum and lowest bucket, and the new bucket's EXPIRE (the bucket's
    // HINCRBY and the sum's HSET were two commands before).
    assert_eq!(commands_run(&redis), 6);
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

/// Runs `attempt` on the fresh counters `keys` in turn until one attempt
/// runs within one Redis second (its calls then share a bucket and the
/// window does not move): that key, the second and what it returned.
fn within_one_second<T>(
    redis: &PrivateRedis,
    keys: &[&'static str],
    mut attempt: impl FnMut(&'static str) -> T,
) -> (&'static str, i64, T) {
    for &key in keys {
        let second = redis_second(redis);
        let out = attempt(key);
        if redis_second(redis) == second {
            return (key, second, out);
        }
    }
    panic!(
        "no attempt fell in one Redis second in {} tries",
        keys.len()
    );
}

#[test]
fn a_steady_window_admission_writes_its_bucket_and_sum_in_one_command() {
    let redis = PrivateRedis::start();
    // A fresh counter per attempt, until a first admission and a second
    // one fall in the same Redis second (the second's bucket then exists
    // and the window has not moved).
    const KEYS: [&str; 5] = [
        "{api_key:s0}:requests",
        "{api_key:s1}:requests",
        "{api_key:s2}:requests",
        "{api_key:s3}:requests",
        "{api_key:s4}:requests",
    ];
    let (key, second, commands) = within_one_second(&redis, &KEYS, |key| {
        assert!(admitted(&batch(&redis, &[rpm_admission(key, "r1", 100)])));
        redis.command(&["CONFIG", "RESETSTAT"]);
        assert!(admitted(&batch(&redis, &[rpm_admission(key, "r2", 100)])));
        commands_run(&redis)
    });
    // TIME, HMGET of the bookkeeping and the bucket, one HSET of both
    // (the bucket's and the sum's HINCRBY were two commands before).
    assert_eq!(commands, 3);
    let Reply::Bulk(Some(sum)) = redis.command(&["HGET", key, "-1"]) else {
        panic!("the sum")
    };
    assert_eq!(sum, "2", "both admissions counted");
    let Reply::Bulk(Some(bucket)) = redis.command(&["HGET", key, &second.to_string()]) else {
        panic!("the bucket")
    };
    assert_eq!(bucket, "2");
}

#[test]
fn two_counters_of_one_admission_on_the_same_key_both_count() {
    let redis = PrivateRedis::start();
    const RPM: &str = "{api_key:d}:requests";
    assert!(admitted(&batch(&redis, &[rpm_admission(RPM, "r1", 100)])));
    let twice = Op {
        keys: vec![RPM, RPM],
        letter: b'a',
        numbers: vec![0.0, 100.0, 1.0, 1.0, 100.0, 1.0, 1.0],
        args: vec![b"rr".to_vec(), b"r2".to_vec(), b"1".to_vec(), b"1".to_vec()],
    };
    let out = batch(&redis, &[twice]);
    let Reply::Array(items) = &out else {
        panic!("{out:?}")
    };
    assert_eq!(items[0], Reply::Int(1), "admitted: {out:?}");
    let Reply::Int(tick) = items[1] else {
        panic!("{out:?}")
    };
    let values: Vec<(String, String)> = fields(&redis, RPM)
        .into_iter()
        .filter(|(f, _)| !f.starts_with('-'))
        .collect();
    let total: u64 = values.iter().map(|(_, v)| v.parse::<u64>().unwrap()).sum();
    assert_eq!(total, 3, "buckets {values:?}");
    assert!(
        values.iter().any(|(f, _)| *f == tick.to_string()),
        "{values:?}"
    );
    let Reply::Bulk(Some(sum)) = redis.command(&["HGET", RPM, "-1"]) else {
        panic!("the sum")
    };
    assert_eq!(sum, "3", "the sum counts both");
}

#[test]
fn a_leases_end_is_read_once_and_written_once() {
    let redis = PrivateRedis::start();
    // Fresh counters until the grant and its end fall in one Redis second.
    const KEYS: [&str; 5] = [
        "{api_key:l0}:requests",
        "{api_key:l1}:requests",
        "{api_key:l2}:requests",
        "{api_key:l3}:requests",
        "{api_key:l4}:requests",
    ];
    let (key, _, (tick, commands)) = within_one_second(&redis, &KEYS, |key| {
        assert!(admitted(&batch(&redis, &[rpm_admission(key, "r1", 100)])));
        let lease = Op {
            keys: vec![key],
            letter: b'a',
            numbers: vec![0.0, 100.0, 10.0, 1.0],
            args: vec![b"l".to_vec(), b"lease".to_vec(), b"10".to_vec()],
        };
        let granted = batch(&redis, &[lease]);
        assert!(admitted(&granted), "{granted:?}");
        let Reply::Array(items) = &granted else {
            panic!("{granted:?}")
        };
        let Reply::Int(tick) = items[1] else {
            panic!("{granted:?}")
        };
        redis.command(&["CONFIG", "RESETSTAT"]);
        // The lease ends having spent 4 of its 10 units.
        let end = Op {
            keys: vec![key],
            letter: b'f',
            numbers: vec![4.0, 10.0],
            args: vec![b"l".to_vec(), Vec::new(), tick.to_string().into_bytes()],
        };
        assert_eq!(run(&redis, &[end]), [Reply::Int(1)]);
        (tick, commands_run(&redis))
    });
    // TIME, one HMGET of the sum and both buckets (here one), one HSET
    // (a HINCRBY for the grant's bucket, the current one and each change
    // of the sum before: four).
    assert_eq!(commands, 3);
    let bucket = tick.to_string();
    let values: Vec<(String, String)> = fields(&redis, key)
        .into_iter()
        .filter(|(f, _)| *f == bucket || f == "-1")
        .collect();
    // The request's unit, the grant gone, the 4 spent charged again.
    assert_eq!(
        values,
        [
            ("-1".to_string(), "5".to_string()),
            (bucket, "5".to_string())
        ]
    );
}

const TPM: &str = "{api_key:h}:tokens";
const PAR: &str = "{api_key:h}:parallel";

/// An admission of request `rid` charging `tokens` on [`TPM`] (limit 100)
/// and a slot on [`PAR`] (limit 3).
fn tokens_and_slot(rid: &str, tokens: u64) -> Op {
    Op {
        keys: vec![TPM, PAR],
        letter: b'a',
        numbers: vec![0.0, 100.0, tokens as f64, tokens as f64, 3.0, 1.0, 1.0],
        args: vec![
            b"tp".to_vec(),
            rid.into(),
            tokens.to_string().into_bytes(),
            b"1".to_vec(),
        ],
    }
}

/// The settlement of [`tokens_and_slot`]'s request `rid`, admitted in
/// `tick` with `reserved` tokens, of which it used `used`.
fn settle_tokens_and_slot(rid: &str, tick: i64, reserved: u64, used: u64) -> Op {
    Op {
        keys: vec![TPM, PAR],
        letter: b'f',
        numbers: vec![used as f64, reserved as f64, 1.0],
        args: vec![b"tp".to_vec(), rid.into(), tick.to_string().into_bytes()],
    }
}

/// The slots' members, sorted.
fn members(redis: &PrivateRedis, key: &str) -> Vec<String> {
    let Reply::Array(items) = redis.command(&["ZRANGE", key, "0", "-1"]) else {
        panic!("ZRANGE {key}");
    };
    let mut out: Vec<String> = items
        .iter()
        .map(|r| match r {
            Reply::Bulk(Some(s)) => s.clone(),
            other => panic!("a member: {other:?}"),
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_run_on_one_key_with_a_refusal_in_the_middle_counts_as_one_by_one() {
    // The settlement names the second r1 is admitted in, read before the
    // batch runs: tried again on a fresh server when a second began between.
    let (redis, out) = loop {
        let redis = PrivateRedis::start();
        // The counters exist (sum stored, window current): 10 tokens, a slot.
        assert!(admitted(&batch(&redis, &[tokens_and_slot("w", 10)])));
        let tick = redis_second(&redis);
        redis.command(&["CONFIG", "RESETSTAT"]);
        let out = run(
            &redis,
            &[
                tokens_and_slot("r1", 50),
                // 60 + 50 > 100: refused, charges nothing.
                tokens_and_slot("r2", 50),
                // A smaller one still fits: 60 + 30.
                tokens_and_slot("r3", 30),
                // r1 used 20 of its 50: 30 back, its slot freed.
                settle_tokens_and_slot("r1", tick, 50, 20),
                // 60 + 40 = 100, and a slot (w, r3 and r4 of 3).
                tokens_and_slot("r4", 40),
                // Full on tokens.
                tokens_and_slot("r5", 1),
            ],
        );
        if matches!(&out[0], Reply::Array(items) if items[1] == Reply::Int(tick)) {
            break (redis, out);
        }
    };
    let commands = commands_run(&redis);
    let used = |i: usize| match &out[i] {
        Reply::Array(items) => items.clone(),
        other => panic!("{other:?}"),
    };
    assert!(admitted(&out[0]), "{out:?}");
    assert_eq!(used(0)[2..], [Reply::Int(10), Reply::Int(1)], "{out:?}");
    assert_eq!(
        used(1)[..3],
        [Reply::Int(0), Reply::Int(1), Reply::Int(60)],
        "refused on tokens with the usage it saw: {out:?}"
    );
    assert!(admitted(&out[2]), "{out:?}");
    assert_eq!(used(2)[2..], [Reply::Int(60), Reply::Int(2)], "{out:?}");
    assert_eq!(out[3], Reply::Int(1));
    assert!(admitted(&out[4]), "{out:?}");
    assert_eq!(used(4)[2..], [Reply::Int(60), Reply::Int(2)], "{out:?}");
    assert_eq!(
        used(5)[..3],
        [Reply::Int(0), Reply::Int(1), Reply::Int(100)],
        "{out:?}"
    );
    // Exact counters: the sum is the buckets' sum, 100, and the slots are
    // w's, r3's and r4's.
    let f = fields(&redis, TPM);
    let sum = bucket_sum(&f);
    assert_eq!(sum, 100, "{f:?}");
    assert!(f.contains(&("-1".to_string(), "100".to_string())), "{f:?}");
    assert_eq!(members(&redis, PAR), ["r3", "r4", "w"]);
    // Each counter is read and written once a run, not once an operation:
    // TIME; r1 reads both (HMGET, ZCARD); r2's refusal writes the run
    // (HSET, ZADD, PEXPIRE) and is refused one by one (HMGET, HGETALL);
    // r3 reads both again; r4 frees r1's slot (ZREM); r5's refusal writes
    // the run (HSET, ZADD, PEXPIRE) and is refused (HMGET, HGETALL). One
    // by one, these six operations ran 26 commands.
    assert_eq!(commands, 16);
}

/// Calls of one command run inside the script (`hget`, ...), from `INFO
/// commandstats`.
fn calls_of(redis: &PrivateRedis, command: &str) -> i64 {
    let Reply::Bulk(Some(info)) = redis.command(&["INFO", "commandstats"]) else {
        panic!("INFO commandstats");
    };
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_runs_refunds_to_an_older_bucket_read_it_once_and_write_it_with_the_run() {
    let redis = PrivateRedis::start();
    // The counters exist (sum stored, window current): 10 tokens, a slot;
    // and 60 tokens of requests admitted five seconds ago, still running.
    assert!(admitted(&batch(&redis, &[tokens_and_slot("w", 10)])));
    let old = redis_second(&redis) - 5;
    redis.command(&["HSET", TPM, &old.to_string(), "60"]);
    redis.command(&["HINCRBY", TPM, "-1", "60"]);
    redis.command(&["CONFIG", "RESETSTAT"]);
    let out = run(
        &redis,
        &[
            tokens_and_slot("a1", 10),
            // Reserved 50, used 20: 30 back to the older bucket.
            settle_tokens_and_slot("o1", old, 50, 20),
            // Used 10 of 50: 40 back, of which only 30 are left there.
            settle_tokens_and_slot("o2", old, 50, 10),
            tokens_and_slot("a2", 10),
        ],
    );
    let used = |i: usize| match &out[i] {
        Reply::Array(items) => items[2].clone(),
        other => panic!("{other:?}"),
    };
    assert!(admitted(&out[0]) && admitted(&out[3]), "{out:?}");
    assert_eq!(used(0), Reply::Int(70), "w's 10 and the older 60: {out:?}");
    assert_eq!(
        used(3),
        Reply::Int(20),
        "80 less the 60 given back: {out:?}"
    );
    // The emptied bucket is gone, the sum is the buckets' (w's, a1's and
    // a2's 10 each).
    let f = fields(&redis, TPM);
    assert!(f.iter().all(|(k, _)| k != &old.to_string()), "{f:?}");
    let sum = bucket_sum(&f);
    assert_eq!(sum, 30, "{f:?}");
    assert!(f.contains(&("-1".to_string(), "30".to_string())), "{f:?}");
    // The older bucket was read once (HGET) and written with the run's
    // HSET and HDEL, not a HINCRBY for each refund and each sum change.
    assert_eq!(calls_of(&redis, "hget"), 1);
    assert_eq!(calls_of(&redis, "hincrby"), 0);
}

/// `OBJECT ENCODING` of `key`.
fn encoding(redis: &PrivateRedis, key: &str) -> String {
    match redis.command(&["OBJECT", "ENCODING", key]) {
        Reply::Bulk(Some(e)) => e,
        other => panic!("OBJECT ENCODING {key}: {other:?}"),
    }
}

/// A call id as the gateway makes them (36 bytes), the `n`-th.
fn call_id(n: usize) -> String {
    format!("0193a4c2-7b1e-7c3d-9f00-{n:012}")
}

#[test]
fn a_slot_set_holding_many_slots_becomes_a_skip_list_and_settlements_free_the_form_taken() {
    let redis = PrivateRedis::start();
    // 32 slots held: still a listpack, every member the request id.
    for n in 0..32 {
        assert!(admitted(&admit(&redis, &call_id(n), 100)));
    }
    assert_eq!(encoding(&redis, COUNTER), "listpack");
    // The 33rd finds 32 held: its member is padded past 64 bytes, and the
    // set is a skip list from then on.
    assert!(admitted(&admit(&redis, &call_id(32), 100)));
    assert_eq!(encoding(&redis, COUNTER), "skiplist");
    let padded: Vec<String> = members(&redis, COUNTER)
        .into_iter()
        .filter(|m| m.len() > 64)
        .collect();
    assert_eq!(padded.len(), 1, "{padded:?}");
    assert!(padded[0].starts_with(&call_id(32)));
    // Settled one by one, each naming the form its admission took (the
    // slots held then): the padded slot and a plain one are freed.
    run(
        &redis,
        &[
            settlement_of(COUNTER, &call_id(32), 32),
            settlement_of(COUNTER, &call_id(0), 0),
        ],
    );
    assert_eq!(redis.slots(COUNTER), 31);
    // In a run: a slot taken and freed in the same call, one taken before,
    // and one taken now and kept (32 held before it: padded).
    let out = run(
        &redis,
        &[
            admission(COUNTER, "p", &call_id(40), 100, 0.0),
            settlement(COUNTER, &call_id(40)),
            admission(COUNTER, "p", &call_id(41), 100, 0.0),
            admission(COUNTER, "p", &call_id(42), 100, 0.0),
            settlement_of(COUNTER, &call_id(1), 1),
        ],
    );
    assert!(
        admitted(&out[0]) && admitted(&out[2]) && admitted(&out[3]),
        "{out:?}"
    );
    let held = members(&redis, COUNTER);
    assert_eq!(held.len(), 32, "{held:?}");
    assert!(
        !held.iter().any(|m| m.starts_with(&call_id(40))),
        "{held:?}"
    );
    assert!(!held.iter().any(|m| m.starts_with(&call_id(1))), "{held:?}");
    assert!(held.contains(&call_id(41)), "31 held before it: plain");
    assert!(
        held.iter()
            .any(|m| m.starts_with(&call_id(42)) && m.len() > 64),
        "32 held before it: padded: {held:?}"
    );
}

/// The run path against the script before it (`benches/limiter_ab/
/// one_by_one.lua`, which runs every operation on its own): random batches
/// of admissions, leases and settlements on a few keys with small limits,
/// under a clock `diff.py` moves so windows roll over; after each batch the
/// replies and every key must be equal (`diff.py`, on its own private
/// `redis-server`).
#[test]
fn the_run_path_gives_the_replies_and_counters_of_one_by_one_on_random_batches() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let script = root.join("benches/limiter_ab/diff.py");
    let scratch = tempfile::tempdir().expect("temp dir");
    for seed in ["1", "2", "3", "4"] {
        let mut cmd = std::process::Command::new("python3");
        cmd.arg(&script)
            .args([seed, "3", "300"])
            .current_dir(scratch.path());
        let run = e2e::python::run_with_deadline(&mut cmd, std::time::Duration::from_secs(120));
        assert!(
            run.status.is_some_and(|s| s.success()) && run.output.contains("mismatches 0"),
            "seed {seed}: {}",
            run.output
        );
    }
}

/// A rolling upgrade: replicas of the version before the packed protocol
/// (`benches/limiter_ab/shipped_unpacked.lua`, its own arguments and
/// replies) and of this one run by turns on the same counters, and every
/// reply and key is what running all of it one by one gives (`diff.py`
/// with two candidates).
#[test]
fn the_previous_protocols_script_and_this_one_share_counters() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root");
    let script = root.join("benches/limiter_ab/diff.py");
    let both = format!(
        "{}+{}",
        root.join("benches/limiter_ab/shipped_unpacked.lua")
            .display(),
        root.join("gateway/src/limits/limiter.lua").display()
    );
    let scratch = tempfile::tempdir().expect("temp dir");
    for seed in ["1", "2"] {
        let mut cmd = std::process::Command::new("python3");
        cmd.arg(&script)
            .arg(&both)
            .args([seed, "3", "300"])
            .current_dir(scratch.path());
        let run = e2e::python::run_with_deadline(&mut cmd, std::time::Duration::from_secs(120));
        assert!(
            run.status.is_some_and(|s| s.success()) && run.output.contains("mismatches 0"),
            "seed {seed}: {}",
            run.output
        );
    }
}

/// A settlement removes the form of the request id its admission took, as
/// the slot's number says, and no other (the absent form of a listpack
/// set is a walk of every member); with no number (0), either form.
#[test]
fn a_settlement_removes_the_slot_form_its_admission_took() {
    let redis = PrivateRedis::start();
    for n in 0..33 {
        assert!(admitted(&admit(&redis, &call_id(n), 100)));
    }
    let padded = format!("{}|{}", call_id(32), "~".repeat(64));
    assert!(members(&redis, COUNTER).contains(&padded));
    // Named plain (taken at 0 held): the padded member is not that slot.
    for (ops, left) in [
        (vec![settlement_of(COUNTER, &call_id(32), 0)], 33),
        (vec![settlement_of(COUNTER, &call_id(32), 32)], 32),
        // Named padded: the plain member of call 3 is not that slot.
        (vec![settlement_of(COUNTER, &call_id(3), 40)], 32),
        (vec![settlement_of(COUNTER, &call_id(3), 3)], 31),
        // Not known: either form goes, alone and in a run.
        (vec![settlement(COUNTER, &call_id(4))], 30),
        (
            vec![
                admission(COUNTER, "p", &call_id(50), 100, 0.0),
                settlement(COUNTER, &call_id(5)),
                settlement_of(COUNTER, &call_id(6), 40),
                settlement_of(COUNTER, &call_id(7), 7),
            ],
            29,
        ),
    ] {
        run(&redis, &ops);
        assert_eq!(redis.slots(COUNTER), left, "{:?}", members(&redis, COUNTER));
    }
    let held = members(&redis, COUNTER);
    assert!(
        held.contains(&call_id(6)),
        "named padded, held plain: {held:?}"
    );
    for gone in [3, 4, 5, 7, 32] {
        assert!(
            !held.iter().any(|m| m.starts_with(&call_id(gone))),
            "{gone}: {held:?}"
        );
    }
}
