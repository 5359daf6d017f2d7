//! The request and answer an attempt's spend row keeps with
//! `store_prompts_in_spend_logs` (see [`crate::spend::prompts`]): the body
//! the client sent, and the answer it got, copied as it is written (a
//! stream put together into the whole answer it stands for), at most
//! [`MAX_CAPTURED_BYTES`] of it. Off, nothing is copied.

use crate::auth::Principal;
use crate::cache::stream::{collect, Tokens};
use crate::downstream::Responder;
use crate::inbound::Endpoint;
use crate::spend::prompts::{PromptStorage, MAX_CAPTURED_BYTES};
use crate::state::Worker;
use crate::store::{JsonText, SpendLogRow};

/// An attempt whose row keeps its prompt: copying its answer began with
/// [`Keep::start`].
pub(super) struct Keep {
    storage: PromptStorage,
    /// This attempt started the copy (no response cache was copying).
    owns_copy: bool,
}

/// The storage settings when `principal`'s rows keep their prompt.
fn storage_for(worker: &Worker, principal: &Principal) -> Option<PromptStorage> {
    let storage = worker.shared.spend_logs.prompts;
    if !storage.on {
        return None;
    }
    let key = super::key_of(principal);
    let key_metadata = key.map(|k| &k.record.metadata);
    let team_metadata = key
        .and_then(|k| k.team.as_ref())
        .map(|t| &t.record.metadata);
    storage
        .for_caller(key_metadata, team_metadata)
        .then_some(storage)
}

/// Puts `request` and the cached `answer` (a whole answer) into the row
/// of a response cache hit, when `principal`'s rows keep their prompt.
pub(super) fn keep_hit(
    worker: &Worker,
    principal: &Principal,
    row: &mut SpendLogRow,
    request: &[u8],
    answer: &[u8],
) {
    if let Some(storage) = storage_for(worker, principal) {
        row.proxy_server_request = Some(JsonText(storage.stored(request).into()));
        row.response = Some(JsonText(storage.stored(answer).into()));
    }
}

impl Keep {
    /// Starts copying the answer when `principal`'s rows keep their
    /// prompt; `None` (nothing copied) otherwise.
    pub fn start(worker: &Worker, principal: &Principal, out: &mut Responder<'_>) -> Option<Keep> {
        let storage = storage_for(worker, principal)?;
        Some(Keep {
            storage,
            owns_copy: out.capture_at_least(MAX_CAPTURED_BYTES),
        })
    }

    /// Puts `request` (the body the client sent) and the answer copied so
    /// far into `row`; a stream on `endpoint` is put together with `tokens`
    /// as its usage. Stops the copy this attempt started.
    pub fn finish(
        self,
        row: &mut SpendLogRow,
        request: &[u8],
        (out, stream, endpoint, tokens): (&mut Responder<'_>, bool, Endpoint, Tokens),
    ) {
        row.proxy_server_request = Some(JsonText(self.storage.stored(request).into()));
        let answer = match out.captured() {
            Some(body) if stream => {
                collect(endpoint, body, tokens).map(|whole| self.storage.stored(&whole))
            }
            Some(body) => Some(self.storage.stored(body)),
            None => None,
        };
        row.response = Some(JsonText(answer.unwrap_or_else(|| "{}".into()).into()));
        if self.owns_copy {
            out.take_capture();
        }
    }
}
