//! The two Lua scripts and how a limiter call becomes their arguments and
//! their reply a [`Verdict`]: shared by the per-core Redis links
//! ([`super::direct`]) and the control plane's runner ([`super::remote`]).

use super::clock::RedisClock;
use super::descriptor::Kind;
use super::remote::{Call, Entry, RemoteError, ScriptCall};
use super::window::Window;
use super::Verdict;
use sha1_smol::Sha1;
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

fn kind_code(e: &Entry) -> &'static str {
    if e.lease {
        return "l";
    }
    match e.kind {
        Kind::Requests => "r",
        Kind::Tokens => "t",
        Kind::Parallel => "p",
    }
}

/// `EVALSHA <sha> <numkeys> <keys...> <argv...>` for `call`, as strings;
/// an admission's deadline is written in Redis time by `clock` (without a
/// reading, it has none).
pub fn evalsha(
    call: &Call,
    window: &Window,
    slot_ttl: Duration,
    clock: Option<&RedisClock>,
) -> Vec<String> {
    let shas = shas();
    let mut out = Vec::with_capacity(16);
    out.push("EVALSHA".to_string());
    match call {
        Call::Admit {
            entries,
            request_id,
            deadline,
            ..
        } => {
            out.push(shas.admit.clone());
            out.push(entries.len().to_string());
            out.extend(entries.iter().map(|e| e.key.clone()));
            out.push(window.bucket_secs.to_string());
            out.push(window.buckets.to_string());
            out.push((slot_ttl.as_millis() as u64).to_string());
            out.push(request_id.clone());
            out.push(clock.map_or(0, |c| c.deadline_ms(*deadline)).to_string());
            for e in entries {
                out.push(kind_code(e).to_string());
                out.push(e.limit.to_string());
                out.push(e.amount.to_string());
                out.push(e.need.to_string());
            }
        }
        Call::Finish {
            entries,
            request_id,
            tick,
            tokens_used,
            ..
        } => {
            out.push(shas.finish.clone());
            out.push(entries.len().to_string());
            out.extend(entries.iter().map(|e| e.key.clone()));
            out.push(window.bucket_secs.to_string());
            out.push(window.buckets.to_string());
            out.push(tick.to_string());
            out.push(request_id.clone());
            out.push(tokens_used.to_string());
            for e in entries {
                out.push(kind_code(e).to_string());
                out.push(e.amount.to_string());
            }
        }
        Call::Script {
            call: ScriptCall { script, keys, args },
            deadline,
            ..
        } => {
            out.push(script.sha().to_string());
            out.push(keys.len().to_string());
            out.extend(keys.iter().cloned());
            let at = out.len();
            out.extend(args.iter().cloned());
            if let Some((i, instant)) = deadline {
                if let Some(arg) = out.get_mut(at + i) {
                    *arg = clock.map_or(0, |c| c.deadline_ms(*instant)).to_string();
                }
            }
        }
    }
    out
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
    fn digests_match_redis_crate() {
        assert_eq!(shas().admit, redis::Script::new(ADMIT_LUA).get_hash());
        assert_eq!(shas().finish, redis::Script::new(FINISH_LUA).get_hash());
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
        assert_eq!(
            args[2..],
            [
                "1",
                "{api_key:k}:tokens",
                "1",
                "61",
                "600000",
                "r1",
                "5100",
                "t",
                "200",
                "125",
                "125"
            ]
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
