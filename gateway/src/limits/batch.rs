//! Limiter calls as Redis commands: a flush to one server as one
//! `EVALSHA` of `limiter.lua` carrying every admission and settlement in
//! order (group commit) and one `EVALSHA` per other module's script
//! ([`GroupedCalls`]), or a Cluster's parts, one `EVALSHA` each
//! ([`ScriptCalls`]).

use super::call::{Call, LuaScript};
use super::grouped;
use super::script;
use super::split::Part;
use super::window::Window;
use crate::redis::clock::RedisClock;
use crate::redis::resp::Reply;
use crate::redis::Commands;
use smallvec::SmallVec;
use std::time::Duration;

/// Something that is sent as one limiter call, on a slot.
pub trait AsCall: Sync {
    /// The call.
    fn call(&self) -> &Call;
    /// Its slot (unused on one server).
    fn slot(&self) -> u16;
}

impl AsCall for Call {
    fn call(&self) -> &Call {
        self
    }

    fn slot(&self) -> u16 {
        0
    }
}

impl AsCall for Part {
    fn call(&self) -> &Call {
        &self.sub
    }

    fn slot(&self) -> u16 {
        self.slot
    }
}

/// Limiter calls (a batch, or a batch's parts by slot), each one
/// `EVALSHA`.
pub struct ScriptCalls<'a, T> {
    /// The calls.
    pub calls: &'a [T],
    /// The window the scripts count in.
    pub window: &'a Window,
    /// Lifetime of a parallel slot.
    pub slot_ttl: Duration,
}

impl<T: AsCall> Commands for ScriptCalls<'_, T> {
    fn len(&self) -> usize {
        self.calls.len()
    }

    fn slot(&self, i: usize) -> u16 {
        self.calls[i].slot()
    }

    fn encode(&self, i: usize, clock: Option<&RedisClock>, out: &mut Vec<u8>) {
        script::encode_evalsha(self.calls[i].call(), self.window, self.slot_ttl, clock, out);
    }

    fn script(&self, i: usize) -> Option<&'static str> {
        Some(script_of(self.calls[i].call()))
    }
}

/// A batch to one server, its limiter operations (admissions and
/// settlements) sent as one `EVALSHA` in their order (group commit), the
/// other scripts after it: the runs of one batchable script together as
/// one `EVALSHA` of its batch form ([`grouped`]), any other one each.
pub struct GroupedCalls<'a> {
    calls: &'a [Call],
    /// The limiter operations, by index in `calls`.
    ops: Vec<usize>,
    /// The other scripts, by index in `calls`: one command each group.
    others: Vec<SmallVec<[usize; 1]>>,
    window: &'a Window,
    slot_ttl: Duration,
}

impl<'a> GroupedCalls<'a> {
    /// Groups `calls`.
    pub fn new(calls: &'a [Call], window: &'a Window, slot_ttl: Duration) -> GroupedCalls<'a> {
        let (ops, scripts): (Vec<usize>, Vec<usize>) =
            (0..calls.len()).partition(|&i| !matches!(calls[i], Call::Script { .. }));
        let mut others: Vec<SmallVec<[usize; 1]>> = Vec::with_capacity(scripts.len());
        // The open group of each batchable script (by its batch form).
        let mut open: SmallVec<[(&LuaScript, usize); 2]> = SmallVec::new();
        for i in scripts {
            let Some(batch) = grouped::batch_of(&calls[i]) else {
                others.push(SmallVec::from_elem(i, 1));
                continue;
            };
            match open
                .iter()
                .find(|(s, g)| std::ptr::eq(*s, batch) && others[*g].len() < grouped::MAX_RUNS)
            {
                Some(&(_, g)) => others[g].push(i),
                None => {
                    open.retain(|(s, _)| !std::ptr::eq(*s, batch));
                    open.push((batch, others.len()));
                    others.push(SmallVec::from_elem(i, 1));
                }
            }
        }
        GroupedCalls {
            calls,
            ops,
            others,
            window,
            slot_ttl,
        }
    }

    /// Commands before the other scripts: the batch, when there is one.
    fn lead(&self) -> usize {
        usize::from(!self.ops.is_empty())
    }

    /// One reply per call, in the calls' order, from one reply per command.
    pub fn replies(&self, replies: Vec<Reply>) -> Vec<Reply> {
        let mut out = vec![Reply::Array(None); self.calls.len()];
        let mut replies = replies.into_iter();
        if let Some(batch) = (self.lead() == 1).then(|| replies.next()).flatten() {
            let ops: SmallVec<[&Call; 16]> = self.ops.iter().map(|&j| &self.calls[j]).collect();
            for (i, reply) in self.ops.iter().zip(script::split_batch(batch, &ops)) {
                out[*i] = reply;
            }
        }
        for (group, reply) in self.others.iter().zip(replies) {
            for (i, reply) in group.iter().zip(grouped::split(reply, group.len())) {
                out[*i] = reply;
            }
        }
        out
    }
}

impl Commands for GroupedCalls<'_> {
    fn len(&self) -> usize {
        self.lead() + self.others.len()
    }

    fn slot(&self, _i: usize) -> u16 {
        0
    }

    fn encode(&self, i: usize, clock: Option<&RedisClock>, out: &mut Vec<u8>) {
        if i < self.lead() {
            let ops: SmallVec<[&Call; 16]> = self.ops.iter().map(|&j| &self.calls[j]).collect();
            script::encode_batch(&ops, self.window, self.slot_ttl, clock, out);
        } else {
            match self.others[i - self.lead()].as_slice() {
                [one] => script::encode_evalsha(
                    &self.calls[*one],
                    self.window,
                    self.slot_ttl,
                    clock,
                    out,
                ),
                group => {
                    let runs: SmallVec<[&Call; 16]> =
                        group.iter().map(|&j| &self.calls[j]).collect();
                    grouped::encode(&runs, clock, out);
                }
            }
        }
    }

    fn script(&self, i: usize) -> Option<&'static str> {
        match i.checked_sub(self.lead()) {
            None => Some(script::LIMITER_LUA),
            Some(other) => match self.others.get(other)?.as_slice() {
                [one] => Some(script_of(&self.calls[*one])),
                group => grouped::batch_of(&self.calls[*group.first()?]).map(|b| b.body()),
            },
        }
    }
}

/// The body of the script `call` runs (to load after `NOSCRIPT`): another
/// module's, or the limiter's own.
fn script_of(call: &Call) -> &'static str {
    match call {
        Call::Script { call, .. } => call.script.body(),
        _ => script::LIMITER_LUA,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::call::{LuaScript, ScriptCall, ScriptDone};
    use crate::redis::resp::Reply;
    use crate::redis::tokio_wire::tests::{endpoint, fake_redis, text};
    use crate::redis::{round_trip, TokioWire};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    static MISSING: LuaScript = LuaScript::new("return {7}");
    static CACHED: LuaScript = LuaScript::new("return {1}");
    static GROUPED: LuaScript = LuaScript::batchable("return {3}");

    fn call(script: &'static LuaScript) -> Call {
        Call::Script {
            call: ScriptCall {
                script,
                keys: vec!["{k}:a".into()],
                args: Vec::new(),
            },
            deadline: None,
            done: ScriptDone(Box::new(|_| None)),
            undo: None,
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn noscript_loads_the_scripts_and_resends_only_those_calls() {
        let sent = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = sent.clone();
        let addr = fake_redis(Arc::new(move |args| {
            let mut sent = log.lock().unwrap();
            let loaded = sent.iter().any(|c| c == "SCRIPT LOAD return {7}");
            let command = text(args);
            sent.push(command.clone());
            match args[0].as_slice() {
                b"TIME" => b"*2\r\n$10\r\n1700000000\r\n$1\r\n5\r\n".to_vec(),
                b"EVALSHA" if command.contains(MISSING.sha()) && !loaded => {
                    b"-NOSCRIPT No matching script.\r\n".to_vec()
                }
                b"EVALSHA" if command.contains(MISSING.sha()) => b"*1\r\n:7\r\n".to_vec(),
                b"EVALSHA" => b"*1\r\n:1\r\n".to_vec(),
                _ => b"+OK\r\n".to_vec(),
            }
        }))
        .await;
        let batch = [call(&CACHED), call(&MISSING)];
        let window = Window::new(60);
        let calls = ScriptCalls {
            calls: &batch,
            window: &window,
            slot_ttl: Duration::from_secs(1),
        };
        let mut conn = None;
        let replies =
            round_trip::<TokioWire>(&mut conn, &endpoint(&addr), script::LIMITER_SCRIPTS, &calls)
                .await
                .unwrap();
        let one = |n| Reply::Array(Some(vec![Reply::Int(n)]));
        assert_eq!(replies, [one(1), one(7)]);
        assert!(conn.as_ref().unwrap().clock.is_some(), "TIME was read");
        let sent = sent.lock().unwrap();
        let evals = |sha: &str| {
            sent.iter()
                .filter(|c| c.starts_with("EVALSHA") && c.contains(sha))
                .count()
        };
        assert_eq!(evals(CACHED.sha()), 1, "not resent: {sent:?}");
        assert_eq!(evals(MISSING.sha()), 2, "resent once: {sent:?}");
        let loads: Vec<&String> = sent
            .iter()
            .filter(|c| c.starts_with("SCRIPT LOAD"))
            .collect();
        assert_eq!(
            loads.len(),
            2,
            "the limiter's at open, then the missing one"
        );
        assert_eq!(loads[1], "SCRIPT LOAD return {7}");
    }

    /// Group commit across keys: the runs of a batchable script a flush
    /// carries go as one `EVALSHA` of its batch form (loaded after
    /// `NOSCRIPT` like any script), each run getting its own reply back;
    /// other scripts still go one call each.
    #[tokio::test(flavor = "current_thread")]
    async fn a_flushs_runs_of_a_batchable_script_share_one_evalsha() {
        let sent = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = sent.clone();
        let batch_sha = GROUPED.batch().unwrap().sha();
        let addr = fake_redis(Arc::new(move |args| {
            let mut sent = log.lock().unwrap();
            let loaded = sent
                .iter()
                .any(|c| c.starts_with("SCRIPT LOAD local function one"));
            let command = text(args);
            sent.push(command.clone());
            match args[0].as_slice() {
                b"TIME" => b"*2\r\n$10\r\n1700000000\r\n$1\r\n5\r\n".to_vec(),
                b"EVALSHA" if command.contains(batch_sha) && !loaded => {
                    b"-NOSCRIPT No matching script.\r\n".to_vec()
                }
                b"EVALSHA" if command.contains(batch_sha) => {
                    b"*2\r\n*1\r\n:3\r\n-ERR one run failed\r\n".to_vec()
                }
                b"EVALSHA" => b"*1\r\n:1\r\n".to_vec(),
                _ => b"+OK\r\n".to_vec(),
            }
        }))
        .await;
        let batch = [call(&GROUPED), call(&CACHED), call(&GROUPED)];
        let window = Window::new(60);
        let calls = GroupedCalls::new(&batch, &window, Duration::from_secs(1));
        let mut conn = None;
        let replies =
            round_trip::<TokioWire>(&mut conn, &endpoint(&addr), script::LIMITER_SCRIPTS, &calls)
                .await
                .unwrap();
        let one = |n| Reply::Array(Some(vec![Reply::Int(n)]));
        assert_eq!(
            calls.replies(replies),
            [one(3), one(1), Reply::Error("ERR one run failed".into())],
            "each run its own reply, in the calls' order"
        );
        let sent = sent.lock().unwrap();
        let evals: Vec<&String> = sent.iter().filter(|c| c.starts_with("EVALSHA")).collect();
        assert_eq!(
            evals.len(),
            3,
            "the two runs together (sent again after NOSCRIPT) and the other script: {evals:?}"
        );
        assert!(evals[0].contains(batch_sha) && evals[2].contains(batch_sha));
    }

    fn admission(rid: &str) -> Call {
        let d = crate::limits::Descriptor::new(
            crate::limits::Scope::ApiKey,
            "k",
            crate::limits::Kind::Requests,
            10,
        );
        Call::Admit {
            entries: vec![crate::limits::call::Entry::charge(&d, 10, 1)],
            request_id: rid.into(),
            deadline: Instant::now() + Duration::from_secs(5),
            reply: tokio::sync::oneshot::channel().0,
        }
    }

    /// Group commit: a flush's admissions and settlements go out as one
    /// `EVALSHA` of the limiter's script (other scripts one each), and the
    /// batch's replies come back to their calls in the calls' order.
    #[tokio::test(flavor = "current_thread")]
    async fn a_flushs_limiter_calls_share_one_evalsha_and_get_their_own_replies() {
        let sent = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = sent.clone();
        let addr = fake_redis(Arc::new(move |args| {
            let command = text(args);
            log.lock().unwrap().push(command.clone());
            match args[0].as_slice() {
                b"TIME" => b"*2\r\n$10\r\n1700000000\r\n$1\r\n5\r\n".to_vec(),
                b"EVALSHA" if command.contains(script::sha()) => {
                    // One flat array: r1 admitted, r2 refused.
                    b"*7\r\n:1\r\n:7\r\n:0\r\n:0\r\n:1\r\n:10\r\n:60\r\n".to_vec()
                }
                b"EVALSHA" => b"*1\r\n:9\r\n".to_vec(),
                _ => b"+OK\r\n".to_vec(),
            }
        }))
        .await;
        let batch = [admission("r1"), call(&CACHED), admission("r2")];
        let window = Window::new(60);
        let calls = GroupedCalls::new(&batch, &window, Duration::from_secs(1));
        let mut conn = None;
        let replies =
            round_trip::<TokioWire>(&mut conn, &endpoint(&addr), script::LIMITER_SCRIPTS, &calls)
                .await
                .unwrap();
        let ints = |v: &[i64]| Reply::Array(Some(v.iter().map(|n| Reply::Int(*n)).collect()));
        assert_eq!(
            calls.replies(replies),
            [ints(&[1, 7, 0]), ints(&[9]), ints(&[0, 1, 10, 60])],
            "each call its own reply, in order"
        );
        let sent = sent.lock().unwrap();
        let evals: Vec<&String> = sent.iter().filter(|c| c.starts_with("EVALSHA")).collect();
        assert_eq!(evals.len(), 2, "one batch and the other script: {evals:?}");
        assert!(
            evals[0].contains(script::sha()) && evals[0].contains(" aa "),
            "both admissions in the first: {}",
            evals[0]
        );
    }
}
