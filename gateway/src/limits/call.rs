//! What the limiter (and other modules, through it) sends to Redis: a
//! request's counters ([`Entry`]), admissions, settlements and other
//! modules' scripts ([`Call`]), each known by its script.

use super::descriptor::{Descriptor, Kind};
use super::verdict::Verdict;
use crate::redis::RemoteError;
use tokio::sync::oneshot;

/// One counter of a call: its key, kind, limit and the amount charged.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `{scope:value}:kind`.
    pub key: String,
    /// What it counts.
    pub kind: Kind,
    /// The limit (already scaled by the fallback policy where relevant).
    pub limit: u64,
    /// Units charged at admission (reserved tokens, 1 request, 1 slot, the
    /// lease's size); at a lease's end, the units granted.
    pub amount: u64,
    /// Units that must fit for the admission to pass (`max(amount, 1)`, or
    /// the request's own amount for a lease).
    pub need: u64,
    /// A lease of rpm/tpm units rather than one request's charge.
    pub lease: bool,
}

impl Entry {
    /// The entry charging `amount` to `d` under `limit`.
    pub fn charge(d: &Descriptor, limit: u64, amount: u64) -> Entry {
        Entry {
            key: d.key.to_string(),
            kind: d.kind,
            limit,
            amount,
            need: amount.max(1),
            lease: false,
        }
    }

    /// This entry in a settlement: a parallel slot's amount tells
    /// `limiter.lua` which form of the request id the slot took, as the
    /// slots its set held when it was taken (`held`: the admission's
    /// `used`) plus one, or 0 when that is not known (an admission that got
    /// no reply), and both forms are removed. Other entries are unchanged.
    pub fn settling(self, held: Option<u64>) -> Entry {
        match self.kind == Kind::Parallel && !self.lease {
            true => Entry {
                amount: held.map_or(0, |h| h.saturating_add(1)),
                ..self
            },
            false => self,
        }
    }

    /// Units a lease admission charged, given the usage Redis reported:
    /// what `limiter.lua` computes.
    pub fn granted(&self, used: u64) -> u64 {
        self.amount.min(self.limit.saturating_sub(used))
    }
}

/// A limiter call from a core.
#[derive(Debug)]
pub enum Call {
    /// Check and charge; the verdict goes back through `reply`.
    Admit {
        /// The request's counters.
        entries: Vec<Entry>,
        /// Names the request's parallel slots.
        request_id: String,
        /// When the caller stops waiting; Redis refuses to run the call
        /// after it, so a late run charges nothing.
        deadline: std::time::Instant,
        /// Where the verdict goes.
        reply: oneshot::Sender<Result<Verdict, RemoteError>>,
    },
    /// Settle an admitted request; nobody waits for it.
    Finish {
        /// The request's tokens and parallel counters.
        entries: Vec<Entry>,
        /// Names the request's parallel slots.
        request_id: String,
        /// The bucket of the admission.
        tick: u64,
        /// The bucket of each entry when they differ (see
        /// [`Verdict::Admitted`]); empty when all are `tick`.
        ticks: Vec<u64>,
        /// Tokens the request really used.
        tokens_used: u64,
    },
    /// Another module's script (budgets), run on the same links.
    Script {
        /// What to run.
        call: ScriptCall,
        /// Where the caller's deadline goes in the arguments, and the
        /// deadline: Redis refuses to run the script after it.
        deadline: Option<(usize, std::time::Instant)>,
        /// Told the outcome; may return a call to send next (a give-back).
        done: ScriptDone,
        /// Sent again once Redis answers (after the deadline) when the round
        /// trip failed: undoes what the call may have done; idempotent.
        undo: Option<Box<ScriptCall>>,
    },
}

/// A Lua script of another module, known by its body and digest.
#[derive(Debug)]
pub struct LuaScript {
    body: &'static str,
    sha: std::sync::OnceLock<String>,
    /// Whether the runs of it one flush carries may go to Redis as one
    /// `EVALSHA` of its batch form ([`super::grouped`]).
    batchable: bool,
    /// The batch form, made on first use.
    batch: std::sync::OnceLock<&'static LuaScript>,
}

impl LuaScript {
    /// The script `body`.
    pub const fn new(body: &'static str) -> LuaScript {
        LuaScript {
            body,
            sha: std::sync::OnceLock::new(),
            batchable: false,
            batch: std::sync::OnceLock::new(),
        }
    }

    /// The script `body`, whose runs in one flush go to Redis as one
    /// `EVALSHA` of its batch form (group commit across keys): every run
    /// still does exactly what it does alone, in the flush's order, and
    /// gets its own reply (an error in one run fails that run only). For
    /// scripts whose reply is an array and that take no lock across
    /// calls; never on a Cluster, where keys of one call share a slot.
    pub const fn batchable(body: &'static str) -> LuaScript {
        LuaScript {
            body,
            sha: std::sync::OnceLock::new(),
            batchable: true,
            batch: std::sync::OnceLock::new(),
        }
    }

    /// The batch form of a batchable script, `None` for another.
    pub fn batch(&'static self) -> Option<&'static LuaScript> {
        self.batchable.then(|| {
            *self.batch.get_or_init(|| {
                let body: &'static str = Box::leak(batch_body(self.body).into_boxed_str());
                Box::leak(Box::new(LuaScript::new(body)))
            })
        })
    }

    /// Its text, for `SCRIPT LOAD`.
    pub fn body(&self) -> &'static str {
        self.body
    }

    /// Its SHA1, for `EVALSHA`.
    pub fn sha(&self) -> &str {
        self.sha
            .get_or_init(|| sha1_smol::Sha1::from(self.body).digest().to_string())
    }
}

/// The batch form of script `body`: the body as a function of its keys
/// and arguments, run once per call the batch carries, in order, each in
/// `pcall` so an error fails its own call only. Arguments: the number of
/// runs, each run's key and argument counts, then every run's arguments in
/// order (its keys in order in `KEYS`); the reply holds each run's reply.
fn batch_body(body: &str) -> String {
    format!(
        "local function one(KEYS, ARGV)\n{body}\nend\n{}",
        include_str!("grouped.lua")
    )
}

/// One run of a [`LuaScript`]: its keys and arguments.
#[derive(Debug, Clone)]
pub struct ScriptCall {
    /// The script.
    pub script: &'static LuaScript,
    /// `KEYS`.
    pub keys: Vec<String>,
    /// `ARGV`.
    pub args: Vec<String>,
}

/// What a script call's sender is told: the script's integers or the
/// error; it may hand back a call to send next.
pub struct ScriptDone(pub Box<DoneFn>);

/// The callback inside a [`ScriptDone`].
pub type DoneFn = dyn FnOnce(Result<Vec<i64>, RemoteError>) -> Option<Call> + Send + Sync;

impl std::fmt::Debug for ScriptDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScriptDone")
    }
}

impl Call {
    /// An undo sent on its own: nobody waits for it, and a failed round
    /// trip keeps it for the next.
    pub fn undo(undo: ScriptCall) -> Call {
        Call::Script {
            call: undo.clone(),
            deadline: None,
            done: ScriptDone(Box::new(|_| None)),
            undo: Some(Box::new(undo)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::descriptor::Scope;

    #[test]
    fn a_settled_slot_names_the_slots_held_when_taken_plus_one_and_0_when_not_known() {
        let p = Descriptor::new(Scope::ApiKey, "k", Kind::Parallel, 64);
        let t = Descriptor::new(Scope::ApiKey, "k", Kind::Tokens, 100);
        assert_eq!(Entry::charge(&p, 64, 1).settling(Some(0)).amount, 1);
        assert_eq!(Entry::charge(&p, 64, 1).settling(Some(32)).amount, 33);
        assert_eq!(Entry::charge(&p, 64, 1).settling(None).amount, 0);
        // Other counters keep their amounts (a reservation to reconcile).
        assert_eq!(Entry::charge(&t, 100, 40).settling(Some(7)).amount, 40);
    }
}
