//! Group commit of other modules' scripts: the runs of one batchable
//! script ([`LuaScript::batchable`]: `slot_lease.lua`, `slice.lua`) that a
//! flush to one server carries go to Redis as one `EVALSHA` of its batch
//! form (`grouped.lua` around the script), each run with its own keys,
//! arguments and reply, in the flush's order. What a run does is the same
//! as alone; what is shared is the call's fixed cost in Redis (command
//! dispatch, the script's entry, the reply's framing).

use super::call::{Call, LuaScript, ScriptCall};
use super::script;
use crate::redis::clock::RedisClock;
use crate::redis::resp::{ArgSink, Command, Reply};

/// Most runs one batch carries (a batch is one script run in Redis, which
/// serves no other client meanwhile).
pub const MAX_RUNS: usize = 128;

/// The batch script of `call`, when it is a run of a batchable script.
pub fn batch_of(call: &Call) -> Option<&'static LuaScript> {
    match call {
        Call::Script { call, .. } => call.script.batch(),
        _ => None,
    }
}

/// Splits the reply of a command carrying `count` runs into one reply per
/// run: a lone run's reply is its own; a batch's is an array of them, or
/// an error that fails every run.
pub fn split(reply: Reply, count: usize) -> Vec<Reply> {
    if count == 1 {
        return vec![reply];
    }
    match reply {
        Reply::Array(Some(items)) if items.len() == count => items,
        Reply::Error(e) => vec![Reply::Error(e); count],
        other => vec![Reply::Error(format!("unexpected batch reply {other:?}")); count],
    }
}

/// Appends `runs` (calls of one batchable script, at least one) to `out`
/// as one `EVALSHA` of its batch form; each run's deadline is written in
/// Redis time by `clock`, as it is alone.
pub fn encode(runs: &[&Call], clock: Option<&RedisClock>, out: &mut Vec<u8>) {
    let scripts: Vec<(&ScriptCall, Option<(usize, std::time::Instant)>)> = runs
        .iter()
        .filter_map(|c| match c {
            Call::Script { call, deadline, .. } => Some((call, *deadline)),
            _ => None,
        })
        .collect();
    let Some(batch) = scripts.first().and_then(|(c, _)| c.script.batch()) else {
        return;
    };
    let keys: usize = scripts.iter().map(|(c, _)| c.keys.len()).sum();
    let args: usize = scripts.iter().map(|(c, _)| 2 + c.args.len()).sum();
    let mut command = Command::start(out, 4 + keys + args);
    command.arg(b"EVALSHA");
    command.arg(batch.sha().as_bytes());
    command.int(keys as u64);
    for (c, _) in &scripts {
        for k in &c.keys {
            command.arg(k.as_bytes());
        }
    }
    command.int(scripts.len() as u64);
    for (c, _) in &scripts {
        command.int(c.keys.len() as u64);
        command.int(c.args.len() as u64);
    }
    for (c, deadline) in &scripts {
        script::write_script_args(&c.args, *deadline, clock, &mut command);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::call::ScriptDone;

    static PLAIN: LuaScript = LuaScript::new("return {1}");
    static GROUPED: LuaScript = LuaScript::batchable("return {tonumber(ARGV[1]) + 1}");

    fn run(script: &'static LuaScript, keys: &[&str], args: &[&str]) -> Call {
        Call::Script {
            call: ScriptCall {
                script,
                keys: keys.iter().map(|k| k.to_string()).collect(),
                args: args.iter().map(|a| a.to_string()).collect(),
            },
            deadline: None,
            done: ScriptDone(Box::new(|_| None)),
            undo: None,
        }
    }

    #[test]
    fn only_batchable_scripts_have_a_batch_form_made_once() {
        assert!(batch_of(&run(&PLAIN, &[], &[])).is_none());
        let batch = batch_of(&run(&GROUPED, &[], &[])).unwrap();
        assert!(std::ptr::eq(batch, GROUPED.batch().unwrap()), "made once");
        assert!(batch
            .body()
            .starts_with("local function one(KEYS, ARGV)\nreturn {tonumber"));
        assert_ne!(batch.sha(), GROUPED.sha());
    }

    #[test]
    fn a_batch_reply_splits_into_its_runs_replies() {
        let ints = |n| Reply::Array(Some(vec![Reply::Int(n)]));
        assert_eq!(split(ints(1), 1), [ints(1)]);
        assert_eq!(
            split(Reply::Array(Some(vec![ints(1), ints(2)])), 2),
            [ints(1), ints(2)]
        );
        let failed = Reply::Error("ERR busy".into());
        assert_eq!(split(failed.clone(), 2), [failed.clone(), failed]);
        assert!(matches!(
            &split(ints(1), 2)[..],
            [Reply::Error(_), Reply::Error(_)]
        ));
    }

    #[test]
    fn a_batch_carries_each_runs_keys_and_arguments_in_order() {
        let a = run(&GROUPED, &["{a}:x", "{a}:y"], &["1", "2", "3"]);
        let b = run(&GROUPED, &["{b}:x"], &["4"]);
        let mut out = Vec::new();
        encode(&[&a, &b], None, &mut out);
        let text = String::from_utf8(out).unwrap();
        let words: Vec<&str> = text
            .split("\r\n")
            .filter(|w| !w.is_empty() && !w.starts_with('$'))
            .collect();
        let sha = GROUPED.batch().unwrap().sha();
        assert_eq!(
            words,
            [
                "*15", "EVALSHA", sha, "3", "{a}:x", "{a}:y", "{b}:x", "2", "2", "3", "1", "1",
                "1", "2", "3", "4"
            ]
        );
    }
}
