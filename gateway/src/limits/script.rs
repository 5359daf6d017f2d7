//! The two Lua scripts and how a limiter call becomes their arguments and
//! their reply a [`Verdict`]: shared by the per-core Redis links
//! ([`super::direct`]) and the control plane's runner ([`super::remote`]).

use super::clock::RedisClock;
use super::descriptor::Kind;
use super::remote::{Call, Entry, RemoteError, ScriptCall};
use super::resp::{ArgSink, Command};
use super::window::Window;
use super::Verdict;
use sha1_smol::Sha1;
use smallvec::SmallVec;
use std::sync::OnceLock;
use std::time::Duration;

/// `admit.lua`: check and charge every descriptor, all or none.
pub const ADMIT_LUA: &str = include_str!("admit.lua");
/// `finish.lua`: settle reservations, free slots, end leases.
pub const FINISH_LUA: &str = include_str!("finish.lua");

/// The SHA1 digests `EVALSHA` names the scripts by.
pub struct Shas {
    /// Of [`ADMIT_LUA`].
    pub admit: String,
    /// Of [`FINISH_LUA`].
    pub finish: String,
}

/// The scripts' digests, computed once.
pub fn shas() -> &'static Shas {
    static SHAS: OnceLock<Shas> = OnceLock::new();
    SHAS.get_or_init(|| Shas {
        admit: Sha1::from(ADMIT_LUA).digest().to_string(),
        finish: Sha1::from(FINISH_LUA).digest().to_string(),
    })
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

/// The scripts' numbers, sent as one argument of little-endian doubles
/// ([`ArgSink::doubles`]), which the scripts read with one `struct.unpack`
/// instead of a `tonumber` (strtod) per number. Integers above 2^53 round,
/// as `tonumber` rounded them.
#[derive(Default)]
struct Numbers(SmallVec<[f64; 64]>);

impl Numbers {
    fn push(&mut self, n: u64) {
        self.0.push(n as f64);
    }
}

/// The number of arguments [`evalsha`] gives `call`, `EVALSHA` included.
pub fn arg_count(call: &Call) -> usize {
    match call {
        Call::Admit { entries, .. } => 3 + entries.len() + 4 + entries.len(),
        Call::Finish { entries, .. } => 3 + entries.len() + 4,
        Call::Script {
            call: ScriptCall { keys, args, .. },
            ..
        } => 3 + keys.len() + args.len(),
    }
}

/// `EVALSHA <sha> <numkeys> <keys...> <argv...>` for `call`, each argument
/// on its own; an admission's deadline is written in Redis time by `clock`
/// (without a reading, it has none). The tests compare [`encode_evalsha`]
/// with it.
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
    let shas = shas();
    out.arg(b"EVALSHA");
    match call {
        Call::Admit {
            entries,
            request_id,
            deadline,
            ..
        } => {
            out.arg(shas.admit.as_bytes());
            out.int(entries.len() as u64);
            for e in entries {
                out.arg(e.key.as_bytes());
            }
            let ttl_ms = u64::try_from(slot_ttl.as_millis()).unwrap_or(u64::MAX);
            out.arg(request_id.as_bytes());
            out.int(ttl_ms);
            out.arg(&kinds(entries));
            let mut numbers = Numbers::default();
            numbers.push(window.bucket_secs);
            numbers.push(window.buckets);
            numbers.push(ttl_ms);
            numbers.push(clock.map_or(0, |c| c.deadline_ms(*deadline)));
            for e in entries {
                numbers.push(e.limit);
                numbers.push(e.amount);
                numbers.push(e.need);
            }
            out.doubles(&numbers.0);
            for e in entries {
                out.int(e.amount);
            }
        }
        Call::Finish {
            entries,
            request_id,
            tick,
            tokens_used,
            ..
        } => {
            out.arg(shas.finish.as_bytes());
            out.int(entries.len() as u64);
            for e in entries {
                out.arg(e.key.as_bytes());
            }
            out.arg(request_id.as_bytes());
            out.int(*tick);
            out.arg(&kinds(entries));
            let mut numbers = Numbers::default();
            numbers.push(window.bucket_secs);
            numbers.push(window.buckets);
            numbers.push(*tokens_used);
            for e in entries {
                numbers.push(e.amount);
            }
            out.doubles(&numbers.0);
        }
        Call::Script {
            call: ScriptCall { script, keys, args },
            deadline,
            ..
        } => {
            out.arg(script.sha().as_bytes());
            out.int(keys.len() as u64);
            for k in keys {
                out.arg(k.as_bytes());
            }
            for (i, a) in args.iter().enumerate() {
                match deadline {
                    Some((at, instant)) if *at == i => {
                        out.int(clock.map_or(0, |c| c.deadline_ms(*instant)))
                    }
                    _ => out.arg(a.as_bytes()),
                }
            }
        }
    }
}

/// Reads `admit.lua`'s reply: `{1, tick, used...}`, `{0, index, used,
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
        .zip(used.into_iter().chain(std::iter::repeat(0)))
        .enumerate()
        .filter(|(_, (e, _))| requests_too || e.lease || e.kind != Kind::Requests)
        .map(|(i, (e, used))| {
            if let Some(t) = ticks.get(i) {
                kept_ticks.push(*t);
            }
            Entry {
                amount: if e.lease { e.granted(used) } else { e.amount },
                ..e
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
        static ONE: super::super::remote::LuaScript =
            super::super::remote::LuaScript::new("return 1");
        assert_eq!(ONE.sha(), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        assert_eq!(shas().admit, Sha1::from(ADMIT_LUA).digest().to_string());
        assert_eq!(shas().admit.len(), 40);
        assert_ne!(shas().admit, shas().finish);
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
        let strings: Vec<String> = args[2..7].iter().map(|a| text(a)).collect();
        assert_eq!(strings, ["1", "{api_key:k}:tokens", "r1", "600000", "t"]);
        assert_eq!(
            doubles(&args[7]),
            [1.0, 61.0, 600_000.0, 5100.0, 200.0, 125.0, 125.0],
            "bucket_secs, buckets, slot ttl, deadline, then limit, amount, need"
        );
        assert_eq!(text(&args[8]), "125", "the amount in decimal");
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
        let strings: Vec<String> = args[2..8].iter().map(|a| text(a)).collect();
        assert_eq!(
            strings,
            [
                "2",
                "{api_key:k}:tokens",
                "{api_key:k}:parallel",
                "r1",
                "29412166",
                "tp"
            ]
        );
        assert_eq!(doubles(&args[8]), [1.0, 61.0, 40.0, 125.0, 1.0]);
        assert_eq!(args.len(), arg_count(&call));
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
        static LUA: super::super::remote::LuaScript =
            super::super::remote::LuaScript::new("return 1");
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
                done: super::super::remote::ScriptDone(Box::new(|_| None)),
                undo: None,
            },
        ];
        for call in &calls {
            let window = Window::new(60);
            let ttl = Duration::from_secs(600);
            let strings = evalsha(call, &window, ttl, Some(&clock));
            assert_eq!(strings.len(), arg_count(call));
            let mut expected = Vec::new();
            crate::limits::resp::encode(&strings, &mut expected);
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
