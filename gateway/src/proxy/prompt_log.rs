//! The request and answer an attempt's spend row keeps with
//! `store_prompts_in_spend_logs` (see [`crate::spend::prompts`]): the body
//! the client sent, and the answer it got, copied as it is written (a
//! stream put together into the whole answer it stands for), at most
//! [`MAX_CAPTURED_BYTES`] of it. Off, nothing is copied.

use crate::auth::Principal;
use crate::cache::stream::{collect, Tokens};
use crate::downstream::Responder;
use crate::inbound::Endpoint;
use crate::spend::prompt_privacy::{RedactionHeaders, DISABLE_HEADER, ENABLE_HEADERS};
use crate::spend::prompts::{PromptStorage, RowPrivacy, MAX_CAPTURED_BYTES};
use crate::state::Worker;
use crate::store::{JsonText, SpendLogRow};

/// An attempt whose row keeps its prompt: copying its answer began with
/// [`Keep::start`].
pub(super) struct Keep {
    storage: PromptStorage,
    privacy: RowPrivacy,
    /// This attempt started the copy (no response cache was copying).
    owns_copy: bool,
}

/// What a request's headers say about redacting its messages in its rows
/// (LiteLLM's redaction headers; a header is set when it has a value).
pub(super) fn redaction_headers(head: &crate::http1::RequestHead) -> RedactionHeaders {
    let set = |name: &str| head.header(name).is_some_and(|v| !v.trim().is_empty());
    RedactionHeaders {
        disable: set(DISABLE_HEADER),
        enable: ENABLE_HEADERS.iter().any(|h| set(h)),
    }
}

/// How `principal`'s request on `endpoint` with `headers` and its own
/// `turn_off_message_logging` (`asked`) keeps its prompt: may its key or
/// team opt out of redaction (LiteLLM's
/// `allow_client_message_redaction_opt_out` in either's metadata).
fn privacy_of(
    principal: &Principal,
    (endpoint, asked): (Endpoint, Option<bool>),
    headers: RedactionHeaders,
) -> RowPrivacy {
    let key = super::key_of(principal);
    let allows = |m: Option<&serde_json::Map<String, serde_json::Value>>| match m
        .and_then(|m| m.get("allow_client_message_redaction_opt_out"))
    {
        Some(serde_json::Value::Bool(b)) => *b,
        Some(serde_json::Value::String(s)) => s.trim().eq_ignore_ascii_case("true"),
        _ => false,
    };
    let team = key
        .and_then(|k| k.team.as_ref())
        .map(|t| &t.record.metadata);
    RowPrivacy {
        responses: endpoint == Endpoint::Responses,
        headers,
        may_opt_out: allows(key.map(|k| &k.record.metadata)) || allows(team),
        asked,
    }
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
/// of a response cache hit, when `principal`'s rows keep their prompt
/// (`asked`: the request's own `turn_off_message_logging`).
pub(super) fn keep_hit(
    worker: &Worker,
    (principal, asked, headers): (&Principal, (Endpoint, Option<bool>), RedactionHeaders),
    row: &mut SpendLogRow,
    request: &[u8],
    answer: &[u8],
) {
    if let Some(storage) = storage_for(worker, principal) {
        let privacy = privacy_of(principal, asked, headers);
        let (request, answer) = storage.columns(request, Some(answer), privacy);
        row.proxy_server_request = Some(JsonText(request.into()));
        row.response = answer.map(|a| JsonText(a.into()));
    }
}

impl Keep {
    /// Starts copying the answer when `principal`'s rows keep their
    /// prompt (`asked`: the request's own `turn_off_message_logging`);
    /// `None` (nothing copied) otherwise.
    pub fn start(
        worker: &Worker,
        (principal, asked, headers): (&Principal, (Endpoint, Option<bool>), RedactionHeaders),
        out: &mut Responder<'_>,
    ) -> Option<Keep> {
        let storage = storage_for(worker, principal)?;
        Some(Keep {
            storage,
            privacy: privacy_of(principal, asked, headers),
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
        let assembled;
        let answer = match out.captured() {
            Some(body) if stream => {
                assembled = collect(endpoint, body, tokens);
                assembled.as_deref()
            }
            Some(body) => Some(body),
            None => None,
        };
        let (request, answer) = self.storage.columns(request, answer, self.privacy);
        row.proxy_server_request = Some(JsonText(request.into()));
        row.response = Some(JsonText(answer.unwrap_or_else(|| "{}".into()).into()));
        if self.owns_copy {
            out.take_capture();
        }
    }
}
