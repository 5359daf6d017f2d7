//! Limiter calls as Redis commands: a flush to one server as one
//! `EVALSHA` of `limiter.lua` carrying every admission and settlement in
//! order (group commit) and one `EVALSHA` per other module's script
//! ([`GroupedCalls`]), or a Cluster's parts, the limiter operations of one
//! slot as one `EVALSHA` ([`SlotBatches`]).

use super::call::{Call, LuaScript};
use super::grouped;
use super::script;
use super::split::Part;
use super::window::Window;
use crate::redis::clock::RedisClock;
use crate::redis::cluster::Replies;
use crate::redis::resp::Reply;
use crate::redis::{Commands, RemoteError};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::time::Duration;

/// A Cluster flush's parts ([`super::split::split`]) as commands: the
/// limiter operations (admission and settlement parts) of one slot as one
/// `EVALSHA` of the batch, in the parts' order (group commit per slot, as
/// [`GroupedCalls`] does on one server); another module's script one
/// `EVALSHA` each.
pub struct SlotBatches<'a> {
    parts: &'a [Part],
    /// Per command, the parts it carries (indices into `parts`).
    commands: Vec<SmallVec<[usize; 4]>>,
    window: &'a Window,
    slot_ttl: Duration,
}

impl<'a> SlotBatches<'a> {
    /// Groups `parts` by slot.
    pub fn new(parts: &'a [Part], window: &'a Window, slot_ttl: Duration) -> SlotBatches<'a> {
        let mut commands: Vec<SmallVec<[usize; 4]>> = Vec::new();
        // The command of each slot's limiter operations.
        let mut by_slot: HashMap<u16, usize> = HashMap::new();
        for (i, part) in parts.iter().enumerate() {
            if matches!(part.sub, Call::Script { .. }) {
                commands.push(SmallVec::from_elem(i, 1));
                continue;
            }
            match by_slot.get(&part.slot) {
                Some(&c) => commands[c].push(i),
                None => {
                    by_slot.insert(part.slot, commands.len());
                    commands.push(SmallVec::from_elem(i, 1));
                }
            }
        }
        SlotBatches {
            parts,
            commands,
            window,
            slot_ttl,
        }
    }

    /// Whether command `i` is another module's script (not a batch).
    fn is_script(&self, i: usize) -> bool {
        matches!(
            self.commands[i].as_slice(),
            [one] if matches!(self.parts[*one].sub, Call::Script { .. })
        )
    }

    /// The limiter operations command `i` carries.
    fn ops(&self, i: usize) -> SmallVec<[&Call; 16]> {
        self.commands[i]
            .iter()
            .map(|&p| &self.parts[p].sub)
            .collect()
    }

    /// One reply per part, in the parts' order, from one reply per
    /// command: a batch's reply cut into its operations' (its error, or
    /// the failure to get it, for each of them).
    pub fn replies(&self, replies: Replies) -> Replies {
        let mut out: Replies = (0..self.parts.len())
            .map(|_| Err(RemoteError::Failed("no reply for this part".into())))
            .collect();
        for (i, reply) in replies.into_iter().enumerate().take(self.commands.len()) {
            let group = &self.commands[i];
            match reply {
                Ok(reply) if !self.is_script(i) => {
                    for (&p, r) in group.iter().zip(script::split_batch(reply, &self.ops(i))) {
                        out[p] = Ok(r);
                    }
                }
                reply => {
                    for &p in group {
                        out[p] = reply.clone();
                    }
                }
            }
        }
        out
    }
}

impl Commands for SlotBatches<'_> {
    fn len(&self) -> usize {
        self.commands.len()
    }

    fn slot(&self, i: usize) -> u16 {
        self.commands[i].first().map_or(0, |&p| self.parts[p].slot)
    }

    fn encode(&self, i: usize, clock: Option<&RedisClock>, out: &mut Vec<u8>) {
        match self.is_script(i) {
            true => script::encode_evalsha(
                &self.parts[self.commands[i][0]].sub,
                self.window,
                self.slot_ttl,
                clock,
                out,
            ),
            false => script::encode_batch(&self.ops(i), self.window, self.slot_ttl, clock, out),
        }
    }

    fn script(&self, i: usize) -> Option<&'static str> {
        let first = *self.commands.get(i)?.first()?;
        Some(script_of(&self.parts[first].sub))
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
    use crate::limits::split;
    use crate::redis::key_slot;
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
        let parts = split::split(&batch);
        let calls = SlotBatches::new(&parts, &window, Duration::from_secs(1));
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

    /// A fake Redis that logs every command it gets (as text), answers
    /// `TIME` with a fixed clock, an `EVALSHA` with what `evalsha` gives
    /// for its text, and anything else `+OK`.
    async fn logging_redis(
        evalsha: impl Fn(&str) -> Vec<u8> + Send + Sync + 'static,
    ) -> (String, Arc<Mutex<Vec<String>>>) {
        let sent = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = sent.clone();
        let addr = fake_redis(Arc::new(move |args| {
            let command = text(args);
            log.lock().unwrap().push(command.clone());
            match args[0].as_slice() {
                b"TIME" => b"*2\r\n$10\r\n1700000000\r\n$1\r\n5\r\n".to_vec(),
                b"EVALSHA" => evalsha(&command),
                _ => b"+OK\r\n".to_vec(),
            }
        }))
        .await;
        (addr, sent)
    }

    fn admission(rid: &str) -> Call {
        admission_of("k", rid)
    }

    fn admission_of(key: &str, rid: &str) -> Call {
        let d = crate::limits::Descriptor::new(
            crate::limits::Scope::ApiKey,
            key,
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
        let (addr, sent) = logging_redis(|command| match command.contains(script::sha()) {
            // One flat array: r1 admitted, r2 refused.
            true => b"*7\r\n:1\r\n:7\r\n:0\r\n:0\r\n:1\r\n:10\r\n:60\r\n".to_vec(),
            false => b"*1\r\n:9\r\n".to_vec(),
        })
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

    /// Group commit on a Cluster: a flush's limiter parts on one slot go
    /// as one `EVALSHA` of the batch (in their order), parts on another
    /// slot as another, other modules' scripts one each; every part gets
    /// its own reply back, and a command's failure reaches each of its
    /// parts.
    #[tokio::test(flavor = "current_thread")]
    async fn a_cluster_flushs_limiter_parts_of_one_slot_share_one_evalsha() {
        let batch = [
            admission_of("k", "r1"),
            call(&CACHED),
            admission_of("j", "r2"),
            admission_of("k", "r3"),
        ];
        let parts = split::split(&batch);
        let slot = |i: usize| parts[i].slot;
        assert_eq!(slot(0), slot(3));
        assert_ne!(slot(0), slot(2), "two slots (keys k and j)");
        assert_eq!(slot(1), key_slot(b"{k}:a"));
        let window = Window::new(60);
        let calls = SlotBatches::new(&parts, &window, Duration::from_secs(1));
        assert_eq!(calls.len(), 3, "k's batch, the script, j's batch");
        assert_eq!(
            (calls.slot(0), calls.slot(1), calls.slot(2)),
            (slot(0), slot(1), slot(2))
        );
        let (addr, sent) = logging_redis(|command| {
            if command.contains(" aa ") {
                // r1 admitted, r3 refused.
                b"*7\r\n:1\r\n:7\r\n:0\r\n:0\r\n:1\r\n:10\r\n:60\r\n".to_vec()
            } else if command.contains(script::sha()) {
                b"-ERR busy\r\n".to_vec()
            } else {
                b"*1\r\n:9\r\n".to_vec()
            }
        })
        .await;
        let mut conn = None;
        let replies =
            round_trip::<TokioWire>(&mut conn, &endpoint(&addr), script::LIMITER_SCRIPTS, &calls)
                .await
                .unwrap();
        let replies = calls.replies(replies.into_iter().map(Ok).collect());
        let ints = |v: &[i64]| Reply::Array(Some(v.iter().map(|n| Reply::Int(*n)).collect()));
        let got: Vec<Reply> = replies.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            got,
            [
                ints(&[1, 7, 0]),
                ints(&[9]),
                Reply::Error("ERR busy".into()),
                ints(&[0, 1, 10, 60])
            ],
            "each part its own reply, in the parts' order"
        );
        let sent = sent.lock().unwrap();
        let evals: Vec<&String> = sent.iter().filter(|c| c.starts_with("EVALSHA")).collect();
        assert_eq!(evals.len(), 3, "{evals:?}");
        // A command that got no reply fails every part it carried.
        let lost = calls.replies(vec![
            Err(RemoteError::Unreachable("down".into())),
            Ok(ints(&[9])),
            Ok(ints(&[1, 7, 0])),
        ]);
        assert!(matches!(lost[0], Err(RemoteError::Unreachable(_))));
        assert!(matches!(lost[3], Err(RemoteError::Unreachable(_))));
        assert_eq!(lost[1].as_ref().unwrap(), &ints(&[9]));
        assert_eq!(lost[2].as_ref().unwrap(), &ints(&[1, 7, 0]));
        // Fewer replies than commands (a truncated exchange): the parts of
        // the commands without one fail, none is taken as answered.
        let short = calls.replies(vec![Ok(ints(&[1, 7, 0, 0, 1, 10, 60]))]);
        assert_eq!(short[0].as_ref().unwrap(), &ints(&[1, 7, 0]));
        assert!(short[1].is_err() && short[2].is_err());
    }
}
