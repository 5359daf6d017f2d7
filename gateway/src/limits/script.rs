//! The limiter's Lua script and how limiter calls become its arguments
//! (one call, or a batch of them in one `EVALSHA`: group commit) and its
//! reply a [`Verdict`]: shared by the per-core Redis links
//! ([`super::direct`]) and the control plane's runner ([`super::remote`]).

use super::call::{Call, Entry, ScriptCall};
use super::descriptor::Kind;
use super::verdict::Verdict;
use super::window::Window;
use crate::redis::clock::RedisClock;
use crate::redis::resp::{ArgSink, Command, Reply};
use crate::redis::RemoteError;
use sha1_smol::Sha1;
use smallvec::SmallVec;
use std::sync::OnceLock;
use std::time::Duration;

/// `limiter.lua`: a batch of admissions (check and charge every
/// descriptor, all or none) and settlements (settle reservations, free
/// slots, end leases), in order.
pub const LIMITER_LUA: &str = include_str!("limiter.lua");

/// The scripts a limiter connection loads when it opens.
pub const LIMITER_SCRIPTS: &[&str] = &[LIMITER_LUA];

/// The SHA1 digest `EVALSHA` names [`LIMITER_LUA`] by, computed once.
pub fn sha() -> &'static str {
    static SHA: OnceLock<String> = OnceLock::new();
    SHA.get_or_init(|| Sha1::from(LIMITER_LUA).digest().to_string())
}

fn kind_code(e: &Entry) -> u8 {
    if e.lease {
        return b'l';
    }
    match e.kind {
        Kind::Requests => b'r',
        Kind::Tokens => b't',
        Kind::Parallel => b'p',
    }
}

/// The scripts' kinds argument: one letter per entry.
fn kinds(entries: &[Entry]) -> SmallVec<[u8; 16]> {
    entries.iter().map(kind_code).collect()
}

/// A batch's numbers, sent as one argument of little-endian doubles
/// ([`ArgSink::doubles`]), which the script reads with one `struct.unpack`
/// a batch instead of a `tonumber` (strtod) per number, or a table per
/// operation. Integers above 2^53 round, as `tonumber` rounded them.
#[derive(Default)]
struct Numbers(SmallVec<[f64; 64]>);

impl Numbers {
    fn push(&mut self, n: u64) {
        self.0.push(n as f64);
    }
}

/// Arguments of a limiter batch besides its operations': `EVALSHA`, the
/// digest, the number of keys, the letters, the numbers and the slot
/// lifetime.
const BATCH_ARGS: usize = 6;

/// The number of arguments [`evalsha`] gives `call`, `EVALSHA` included.
pub fn arg_count(call: &Call) -> usize {
    match call {
        Call::Admit { .. } | Call::Finish { .. } => BATCH_ARGS + op_arg_count(call),
        Call::Script {
            call: ScriptCall { keys, args, .. },
            ..
        } => 3 + keys.len() + args.len(),
    }
}

/// The keys and arguments a limiter operation adds to a batch.
fn op_arg_count(call: &Call) -> usize {
    match call {
        Call::Admit { entries, .. } => entries.len() + 2 + entries.len(),
        Call::Finish { entries, .. } => entries.len() + 3,
        Call::Script { .. } => 0,
    }
}

/// The entries of a limiter operation (none for another script).
fn op_entries(call: &Call) -> &[Entry] {
    match call {
        Call::Admit { entries, .. } | Call::Finish { entries, .. } => entries,
        Call::Script { .. } => &[],
    }
}

/// Appends `ops` (admissions and settlements only) to `out` as one
/// `EVALSHA` of [`LIMITER_LUA`], run in order; its reply is one flat array
/// of every operation's integers in turn ([`split_batch`] cuts it), which
/// for a batch of one admission is that admission's reply.
pub fn encode_batch(
    ops: &[&Call],
    window: &Window,
    slot_ttl: Duration,
    clock: Option<&RedisClock>,
    out: &mut Vec<u8>,
) {
    let args = BATCH_ARGS + ops.iter().map(|c| op_arg_count(c)).sum::<usize>();
    let mut command = Command::start(out, args);
    write_batch(ops, window, slot_ttl, clock, &mut command);
}

/// Writes the `EVALSHA` of a batch of limiter operations.
fn write_batch(
    ops: &[&Call],
    window: &Window,
    slot_ttl: Duration,
    clock: Option<&RedisClock>,
    out: &mut impl ArgSink,
) {
    out.arg(b"EVALSHA");
    out.arg(sha().as_bytes());
    out.int(ops.iter().map(|c| op_entries(c).len() as u64).sum());
    for op in ops {
        for e in op_entries(op) {
            out.arg(e.key.as_bytes());
        }
    }
    let letters: SmallVec<[u8; 16]> = ops
        .iter()
        .map(|c| match c {
            Call::Admit { .. } => b'a',
            _ => b'f',
        })
        .collect();
    out.arg(&letters);
    let ttl_ms = u64::try_from(slot_ttl.as_millis()).unwrap_or(u64::MAX);
    let mut numbers = Numbers::default();
    numbers.push(window.bucket_secs);
    numbers.push(window.buckets);
    numbers.push(ttl_ms);
    for op in ops {
        op_numbers(op, clock, &mut numbers);
    }
    out.doubles(&numbers.0);
    out.int(ttl_ms);
    for op in ops {
        write_op(op, out);
    }
}

/// Splits a batch's reply (one flat array of integers, each operation's in
/// turn) into one reply per operation of `ops`: an admission's array
/// (`{1, tick, used...}`, `{0, index, used, reset_at}` or `{2}`), a
/// settlement's `1`; or the batch's error for each.
pub fn split_batch(reply: Reply, ops: &[&Call]) -> Vec<Reply> {
    let count = ops.len();
    let failed = |e: String| vec![Reply::Error(e); count];
    let items = match reply {
        Reply::Array(Some(items)) => items,
        Reply::Error(e) => return failed(e),
        other => return failed(format!("unexpected batch reply {other:?}")),
    };
    let mut out = Vec::with_capacity(count);
    let mut items = items.into_iter();
    for (i, op) in ops.iter().enumerate() {
        let Some(first) = items.next() else {
            return failed(format!("batch reply ended before operation {i}"));
        };
        let len = match (op, &first) {
            (Call::Admit { entries, .. }, Reply::Int(1)) => 2 + entries.len(),
            (Call::Admit { .. }, Reply::Int(0)) => 4,
            (Call::Admit { .. }, Reply::Int(2)) => 1,
            (Call::Finish { .. }, Reply::Int(1)) => {
                out.push(first);
                continue;
            }
            _ => {
                return failed(format!(
                    "unexpected batch reply at operation {i}: {first:?}"
                ))
            }
        };
        let mut reply = Vec::with_capacity(len);
        reply.push(first);
        reply.extend(items.by_ref().take(len - 1));
        if reply.len() < len {
            return failed(format!("batch reply ended inside operation {i}"));
        }
        out.push(Reply::Array(Some(reply)));
    }
    if items.next().is_some() {
        return failed("batch reply longer than its operations'".into());
    }
    out
}

/// `EVALSHA <sha> <numkeys> <keys...> <argv...>` for `call`, each argument
/// on its own; an admission's deadline is written in Redis time by `clock`
/// (without a reading, it has none). The tests compare [`encode_evalsha`]
/// with it.
/// Reads `limiter.lua`'s reply.
pub(super) fn read_verdict(reply: &Reply) -> Result<Verdict, RemoteError> {
    read_numbers(reply).and_then(|n| verdict(&n))
}

/// Reads a script's reply: an array of integers.
pub(super) fn read_numbers(reply: &Reply) -> Result<Vec<i64>, RemoteError> {
    match reply {
        Reply::Error(e) => Err(RemoteError::Failed(e.clone())),
        r => r
            .integers()
            .ok_or_else(|| RemoteError::Failed(format!("unexpected script reply {r:?}"))),
    }
}

#[cfg(test)]
pub fn evalsha(
    call: &Call,
    window: &Window,
    slot_ttl: Duration,
    clock: Option<&RedisClock>,
) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(arg_count(call));
    write_evalsha(call, window, slot_ttl, clock, &mut out);
    out
}

/// Appends `call` to `out` as one RESP command, [`evalsha`]'s arguments.
pub fn encode_evalsha(
    call: &Call,
    window: &Window,
    slot_ttl: Duration,
    clock: Option<&RedisClock>,
    out: &mut Vec<u8>,
) {
    let mut command = Command::start(out, arg_count(call));
    write_evalsha(call, window, slot_ttl, clock, &mut command);
}

/// Writes [`evalsha`]'s arguments, in order, into `out`.
fn write_evalsha(
    call: &Call,
    window: &Window,
    slot_ttl: Duration,
    clock: Option<&RedisClock>,
    out: &mut impl ArgSink,
) {
    match call {
        Call::Admit { .. } | Call::Finish { .. } => {
            write_batch(&[call], window, slot_ttl, clock, out);
        }
        Call::Script {
            call: ScriptCall { script, keys, args },
            deadline,
            ..
        } => {
            out.arg(b"EVALSHA");
            out.arg(script.sha().as_bytes());
            out.int(keys.len() as u64);
            for k in keys {
                out.arg(k.as_bytes());
            }
            write_script_args(args, *deadline, clock, out);
        }
    }
}

/// Writes a script run's arguments in order, the one at the deadline's
/// place (if any) replaced by the deadline in Redis time (0 without a
/// clock reading).
pub fn write_script_args(
    args: &[String],
    deadline: Option<(usize, std::time::Instant)>,
    clock: Option<&RedisClock>,
    out: &mut impl ArgSink,
) {
    for (i, a) in args.iter().enumerate() {
        match deadline {
            Some((at, instant)) if at == i => out.int(clock.map_or(0, |c| c.deadline_ms(instant))),
            _ => out.arg(a.as_bytes()),
        }
    }
}

/// Appends one limiter operation's numbers to its batch's, as
/// `limiter.lua` reads them: an admission's deadline in Redis time (0
/// without a clock reading) and per entry its limit, amount and need; a
/// settlement's tokens used and per entry its amount.
fn op_numbers(call: &Call, clock: Option<&RedisClock>, numbers: &mut Numbers) {
    match call {
        Call::Admit {
            entries, deadline, ..
        } => {
            numbers.push(clock.map_or(0, |c| c.deadline_ms(*deadline)));
            for e in entries {
                numbers.push(e.limit);
                numbers.push(e.amount);
                numbers.push(e.need);
            }
        }
        Call::Finish {
            entries,
            tokens_used,
            ..
        } => {
            numbers.push(*tokens_used);
            for e in entries {
                numbers.push(e.amount);
            }
        }
        Call::Script { .. } => {}
    }
}

/// Writes one limiter operation's arguments (after the batch's keys and
/// numbers), as `limiter.lua` reads them: an admission's kinds, request id
/// and amounts in decimal; a settlement's kinds, request id and bucket.
fn write_op(call: &Call, out: &mut impl ArgSink) {
    match call {
        Call::Admit {
            entries,
            request_id,
            ..
        } => {
            out.arg(&kinds(entries));
            out.arg(request_id.as_bytes());
            for e in entries {
                out.int(e.amount);
            }
        }
        Call::Finish {
            entries,
            request_id,
            tick,
            ..
        } => {
            out.arg(&kinds(entries));
            out.arg(request_id.as_bytes());
            out.int(*tick);
        }
        Call::Script { .. } => {}
    }
}

/// Reads an admission's reply: `{1, tick, used...}`, `{0, index, used,
/// reset_at}`, or `{2}` (run after its deadline: nothing charged).
pub fn verdict(numbers: &[i64]) -> Result<Verdict, RemoteError> {
    let verdict = match numbers {
        [2] => {
            return Err(RemoteError::Failed(
                "Redis ran the admission after its deadline; nothing was charged".into(),
            ))
        }
        [1, tick, used @ ..] => Some(Verdict::Admitted {
            tick: *tick as u64,
            used: used.iter().map(|u| (*u).max(0) as u64).collect(),
            ticks: Vec::new(),
        }),
        [0, index, used, reset_at] => Some(Verdict::Denied {
            index: (*index as usize).saturating_sub(1),
            used: (*used).max(0) as u64,
            limit: 0,
            reset_at: (*reset_at).max(0) as u64,
        }),
        _ => None,
    };
    verdict.ok_or_else(|| RemoteError::Failed(format!("unexpected admit reply {numbers:?}")))
}

/// The settlement that gives back what an admission charged when nobody
/// waits for its verdict any more (the core gave up at its deadline and
/// limited the request locally), so nothing is held twice; its request
/// units stay counted, as the request was served.
pub fn give_back(
    entries: Vec<Entry>,
    request_id: String,
    tick: u64,
    used: Vec<u64>,
    ticks: Vec<u64>,
) -> Call {
    undo(entries, request_id, tick, used, ticks, false)
}

/// The settlement that takes back everything a part of a refused
/// admission charged (a Redis Cluster admits each slot on its own; when
/// another slot refuses, the slots that admitted are compensated).
pub fn compensate(entries: Vec<Entry>, request_id: String, tick: u64, used: Vec<u64>) -> Call {
    undo(entries, request_id, tick, used, Vec::new(), true)
}

fn undo(
    entries: Vec<Entry>,
    request_id: String,
    tick: u64,
    used: Vec<u64>,
    ticks: Vec<u64>,
    requests_too: bool,
) -> Call {
    let mut kept_ticks = Vec::new();
    let entries = entries
        .into_iter()
        .zip(used.into_iter().map(Some).chain(std::iter::repeat(None)))
        .enumerate()
        .filter(|(_, (e, _))| requests_too || e.lease || e.kind != Kind::Requests)
        .map(|(i, (e, used))| {
            if let Some(t) = ticks.get(i) {
                kept_ticks.push(*t);
            }
            match e.lease {
                true => Entry {
                    amount: e.granted(used.unwrap_or(0)),
                    ..e
                },
                false => e.settling(used),
            }
        })
        .collect();
    Call::Finish {
        entries,
        request_id,
        tick,
        ticks: kept_ticks,
        tokens_used: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::descriptor::{Descriptor, Scope};

    #[test]
    fn digests_are_sha1_hex_as_redis_names_scripts() {
        // `SCRIPT LOAD "return 1"` answers this digest.
        static ONE: crate::limits::call::LuaScript =
            crate::limits::call::LuaScript::new("return 1");
        assert_eq!(ONE.sha(), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        assert_eq!(sha(), Sha1::from(LIMITER_LUA).digest().to_string());
        assert_eq!(sha().len(), 40);
    }

    #[test]
    fn admit_arguments_follow_the_script() {
        let d = Descriptor::new(Scope::ApiKey, "k", Kind::Tokens, 200);
        let (reply, _rx) = tokio::sync::oneshot::channel();
        let sent = std::time::Instant::now();
        let call = Call::Admit {
            entries: vec![Entry::charge(&d, 200, 125)],
            request_id: "r1".into(),
            deadline: sent + Duration::from_millis(100),
            reply,
        };
        let clock = RedisClock::from_time(5, 0, sent, sent);
        let args = evalsha(
            &call,
            &Window::new(60),
            Duration::from_secs(600),
            Some(&clock),
        );
        let text = |a: &[u8]| String::from_utf8(a.to_vec()).unwrap();
        let strings: Vec<String> = args[2..5].iter().map(|a| text(a)).collect();
        assert_eq!(strings, ["1", "{api_key:k}:tokens", "a"]);
        assert_eq!(
            doubles(&args[5]),
            [1.0, 61.0, 600_000.0, 5100.0, 200.0, 125.0, 125.0],
            "bucket_secs, buckets, slot ttl, then the deadline, limit, amount, need"
        );
        let strings: Vec<String> = args[6..].iter().map(|a| text(a)).collect();
        assert_eq!(
            strings,
            ["600000", "t", "r1", "125"],
            "the slot ttl, then the kinds, request id and amount in decimal"
        );
        assert_eq!(args.len(), arg_count(&call));
    }

    #[test]
    fn finish_arguments_follow_the_script() {
        let t = Descriptor::new(Scope::ApiKey, "k", Kind::Tokens, 200);
        let p = Descriptor::new(Scope::ApiKey, "k", Kind::Parallel, 2);
        let call = Call::Finish {
            entries: vec![Entry::charge(&t, 200, 125), Entry::charge(&p, 2, 1)],
            request_id: "r1".into(),
            tick: 29_412_166,
            ticks: Vec::new(),
            tokens_used: 40,
        };
        let args = evalsha(&call, &Window::new(60), Duration::from_secs(600), None);
        let text = |a: &[u8]| String::from_utf8(a.to_vec()).unwrap();
        let strings: Vec<String> = args[2..6].iter().map(|a| text(a)).collect();
        assert_eq!(
            strings,
            ["2", "{api_key:k}:tokens", "{api_key:k}:parallel", "f"]
        );
        assert_eq!(doubles(&args[6]), [1.0, 61.0, 600_000.0, 40.0, 125.0, 1.0]);
        let strings: Vec<String> = args[7..].iter().map(|a| text(a)).collect();
        assert_eq!(strings, ["600000", "tp", "r1", "29412166"]);
        assert_eq!(args.len(), arg_count(&call));
    }

    /// A batch's operations share one numbers argument: each operation's
    /// numbers follow the window's and the slot lifetime, in the batch's
    /// order, and each operation's own arguments follow the slot lifetime.
    #[test]
    fn a_batchs_numbers_go_in_one_argument_in_the_operations_order() {
        let t = Descriptor::new(Scope::ApiKey, "k", Kind::Tokens, 200);
        let r = Descriptor::new(Scope::ApiKey, "k", Kind::Requests, 9);
        let (reply, _rx) = tokio::sync::oneshot::channel();
        let finish = Call::Finish {
            entries: vec![Entry::charge(&t, 200, 30)],
            request_id: "r0".into(),
            tick: 7,
            ticks: Vec::new(),
            tokens_used: 12,
        };
        let admit = Call::Admit {
            entries: vec![Entry::charge(&r, 9, 1), Entry::charge(&t, 200, 50)],
            request_id: "r1".into(),
            deadline: std::time::Instant::now(),
            reply,
        };
        let mut out = Vec::new();
        write_batch(
            &[&finish, &admit],
            &Window::new(60),
            Duration::from_secs(2),
            None,
            &mut out,
        );
        let text = |a: &[u8]| String::from_utf8(a.to_vec()).unwrap();
        let strings: Vec<String> = out[2..6].iter().map(|a| text(a)).collect();
        assert_eq!(
            strings,
            [
                "3",
                "{api_key:k}:tokens",
                "{api_key:k}:requests",
                "{api_key:k}:tokens"
            ]
        );
        assert_eq!(text(&out[6]), "fa");
        assert_eq!(
            doubles(&out[7]),
            [1.0, 61.0, 2000.0, 12.0, 30.0, 0.0, 9.0, 1.0, 1.0, 200.0, 50.0, 50.0]
        );
        let strings: Vec<String> = out[8..].iter().map(|a| text(a)).collect();
        assert_eq!(strings, ["2000", "t", "r0", "7", "rt", "r1", "1", "50"]);
        let mut direct = Vec::new();
        encode_batch(
            &[&finish, &admit],
            &Window::new(60),
            Duration::from_secs(2),
            None,
            &mut direct,
        );
        let mut expected = Vec::new();
        crate::redis::resp::encode(&out, &mut expected);
        assert_eq!(direct, expected, "the count announced is the count written");
    }

    fn ints(v: &[i64]) -> Reply {
        Reply::Array(Some(v.iter().map(|n| Reply::Int(*n)).collect()))
    }

    /// The script answers one flat array; each operation gets its own
    /// part, its length told by its first integer and its keys.
    #[test]
    fn a_flat_batch_reply_splits_into_each_operations_reply() {
        let d = |kind| Descriptor::new(Scope::ApiKey, "k", kind, 9);
        let admit = |n: usize| Call::Admit {
            entries: vec![Entry::charge(&d(Kind::Requests), 9, 1); n],
            request_id: "r".into(),
            deadline: std::time::Instant::now(),
            reply: tokio::sync::oneshot::channel().0,
        };
        let finish = Call::Finish {
            entries: vec![Entry::charge(&d(Kind::Tokens), 9, 1)],
            request_id: "r".into(),
            tick: 7,
            ticks: Vec::new(),
            tokens_used: 1,
        };
        let (a3, f, a1, a2, a4) = (admit(3), finish, admit(1), admit(2), admit(4));
        let ops = [&a3, &f, &a1, &a2, &a4];
        let flat = [
            1, 70, 5, 6, 7, // admitted, three counters
            1, // settled
            0, 1, 9, 99, // refused on its first counter
            2,  // past its deadline
            1, 70, 1, 2, 3, 4, // admitted, four counters
        ];
        assert_eq!(
            split_batch(ints(&flat), &ops),
            [
                ints(&[1, 70, 5, 6, 7]),
                Reply::Int(1),
                ints(&[0, 1, 9, 99]),
                ints(&[2]),
                ints(&[1, 70, 1, 2, 3, 4]),
            ]
        );
        // Every operation gets the error (one reply per operation).
        let failed = |r: &[Reply]| {
            [1, 5].contains(&r.len()) && r.iter().all(|r| matches!(r, Reply::Error(_)))
        };
        assert!(failed(&split_batch(ints(&flat[..15]), &ops)), "short");
        assert!(
            failed(&split_batch(ints(&[&flat[..], &[1]].concat()), &ops)),
            "long"
        );
        assert!(failed(&split_batch(ints(&[7]), &ops[..1])), "unknown reply");
        assert!(failed(&split_batch(Reply::Error("ERR x".into()), &ops)));
        assert_eq!(
            split_batch(ints(&[1]), &[&f]),
            [Reply::Int(1)],
            "one settlement"
        );
    }

    /// The numbers argument read back as `struct.unpack('<d...')` reads it.
    fn doubles(arg: &[u8]) -> Vec<f64> {
        assert_eq!(arg.len() % 8, 0, "whole doubles");
        arg.chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn resp_encoding_equals_the_strings_encoded() {
        let d = Descriptor::new(Scope::ApiKey, "k", Kind::Tokens, 200);
        let p = Descriptor::new(Scope::Team, "t", Kind::Parallel, 2);
        let (reply, _rx) = tokio::sync::oneshot::channel();
        let sent = std::time::Instant::now();
        let clock = RedisClock::from_time(5, 0, sent, sent);
        static LUA: crate::limits::call::LuaScript =
            crate::limits::call::LuaScript::new("return 1");
        let calls = [
            Call::Admit {
                entries: vec![Entry::charge(&d, 200, 125), Entry::charge(&p, 2, 1)],
                request_id: "r1".into(),
                deadline: sent + Duration::from_millis(100),
                reply,
            },
            Call::Finish {
                entries: vec![Entry::charge(&d, 200, 125)],
                request_id: "r1".into(),
                tick: 9,
                ticks: Vec::new(),
                tokens_used: 40,
            },
            Call::Script {
                call: ScriptCall {
                    script: &LUA,
                    keys: vec!["{b:1}:spend".into()],
                    args: vec!["a".into(), "0".into(), "c".into()],
                },
                deadline: Some((1, sent + Duration::from_millis(50))),
                done: crate::limits::call::ScriptDone(Box::new(|_| None)),
                undo: None,
            },
        ];
        for call in &calls {
            let window = Window::new(60);
            let ttl = Duration::from_secs(600);
            let strings = evalsha(call, &window, ttl, Some(&clock));
            assert_eq!(strings.len(), arg_count(call));
            let mut expected = Vec::new();
            crate::redis::resp::encode(&strings, &mut expected);
            let mut direct = Vec::new();
            encode_evalsha(call, &window, ttl, Some(&clock), &mut direct);
            assert_eq!(direct, expected);
        }
        let script_args = evalsha(
            &calls[2],
            &Window::new(60),
            Duration::from_secs(1),
            Some(&clock),
        );
        assert_eq!(
            script_args[4..],
            [&b"a"[..], b"5050", b"c"],
            "the deadline replaces its argument"
        );
    }

    #[test]
    fn replies_become_verdicts() {
        assert_eq!(
            verdict(&[1, 7, 3, 4]).ok(),
            Some(Verdict::Admitted {
                tick: 7,
                used: vec![3, 4],
                ticks: Vec::new(),
            })
        );
        assert_eq!(
            verdict(&[0, 2, 150, 99]).ok(),
            Some(Verdict::Denied {
                index: 1,
                used: 150,
                limit: 0,
                reset_at: 99
            })
        );
        assert!(verdict(&[5]).is_err());
        assert!(verdict(&[2]).is_err(), "expired: no verdict");
    }
}
