//! The guardrails' places in a request's life: on its body before it is
//! read (`pre_call`, `during_call`), on a whole answer before the client
//! sees it and on a streamed one as it goes (`post_call`).

use super::guard_api;
use super::{headers::litellm_headers, key_of, Outcome};
use crate::auth::Principal;
use crate::downstream::HeadBuilder;
use crate::downstream::Responder;
use crate::error::GatewayError;
use crate::formats::{Format, TranslateError};
use crate::guardrails::log::Log;
use crate::guardrails::stream::StreamCheck;
use crate::guardrails::{self, Scope};
use crate::inbound::Endpoint;
use crate::sse::EventReader;
use crate::state::Worker;
use bytes::Bytes;
use serde_json::{json, Value};
use std::borrow::Cow;

/// The body after every `pre_call` and `during_call` guardrail: the
/// content filters, then the guardrail services (only a request that has
/// some waits for them, in a boxed future); keeps its `post_call`
/// guardrails in `outcome`. For a fallback's own body and a form's
/// prompt: the request's `during_call` services run here, before the call.
pub(super) async fn checked_body(
    worker: &Worker,
    (principal, endpoint): (&Principal, Endpoint),
    body: Bytes,
    outcome: &mut Outcome,
) -> Result<Bytes, GatewayError> {
    let (body, mut pending, during) = pre_call(worker, (principal, endpoint), body, outcome)?;
    pending.extend(during);
    if pending.is_empty() {
        return Ok(body);
    }
    Box::pin(services(worker, body, &pending, outcome)).await
}

/// [`checked_body`] for the request itself: its `during_call` services
/// are not called but returned, as a check to run beside the upstream
/// call ([`Beside`]).
pub(super) async fn checked_body_beside(
    worker: &Worker,
    (principal, endpoint): (&Principal, Endpoint),
    body: Bytes,
    outcome: &mut Outcome,
) -> Result<(Bytes, Option<Box<Beside>>), GatewayError> {
    let (body, pending, during) = pre_call(worker, (principal, endpoint), body, outcome)?;
    let body = if pending.is_empty() {
        body
    } else {
        Box::pin(services(worker, body, &pending, outcome)).await?
    };
    if during.is_empty() {
        return Ok((body, None));
    }
    let mut doc: Value =
        serde_json::from_slice(&body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    let texts = guardrails::request_texts(&mut doc);
    let beside = Box::new(Beside {
        services: during,
        texts,
        doc,
        call_id: outcome.call_id.to_string(),
        caller: outcome.guard_caller.clone(),
        log: outcome.guard_log.clone(),
    });
    // Boxed: it waits in the request's future until the call.
    Ok((body, Some(beside)))
}

/// A caller that may not use the body's model, or is over a budget for
/// it, is refused before the guardrails run, as LiteLLM's key check
/// (model access; budgets of the key, its team, user and organization,
/// the model's, the end user's, the proxy's) answers before its
/// `pre_call` hooks: a request both refused there and blocked by a
/// guardrail gets the key check's error. Only with guardrails configured
/// (otherwise the request's own checks answer alone); a body whose
/// `model` is not a plain string is left to those checks.
pub(super) async fn refuse_as_key_check(
    worker: &Worker,
    principal: &Principal,
    body: &[u8],
) -> Result<(), GatewayError> {
    if worker.shared.guardrails.is_empty() {
        return Ok(());
    }
    let Some((model, user)) = model_and_user(body) else {
        return Ok(());
    };
    let group = super::authorize_model(worker, principal, model)?;
    let end_user = worker
        .shared
        .auth
        .end_user(user, super::end_user_default(principal))
        .await?;
    let caller = super::Caller {
        principal,
        end_user: end_user.as_deref(),
        proxy_budget: worker.shared.auth.keys().proxy_budget(),
        model_windows: worker.shared.auth.keys().end_users().model_windows(),
        budget_windows: worker.shared.auth.keys().budget_windows(),
    };
    super::record::refuse_if_exhausted(caller, &group)
}

/// A body's top-level `model` and `user` when they are plain strings (no
/// escapes), read in one pass without a parse.
fn model_and_user(body: &[u8]) -> Option<(&str, Option<&str>)> {
    let mut r = crate::json_skim::Reader::with_long_strings(body);
    let (mut model, mut user) = (None, None);
    r.object(0, |r, key| match key {
        b"model" | b"user" if r.peek() == Some(b'"') => {
            let raw = r.string()?;
            let text = std::str::from_utf8(raw).ok().filter(|t| !t.contains('\\'));
            match key {
                b"model" => model = text,
                _ => user = text,
            }
            Some(())
        }
        _ => r.skip_value(1),
    })?;
    Some((model?, user))
}

/// A request's `during_call` guardrail services and what they are given,
/// owned, to run beside its upstream call.
pub(super) struct Beside {
    services: Vec<guardrails::Service>,
    texts: Vec<String>,
    doc: Value,
    call_id: String,
    caller: serde_json::Map<String, Value>,
    /// The request's guardrail log (shared).
    log: Log,
}

impl Beside {
    /// Runs the services on the request's texts: nothing, or the refusal
    /// (a rewrite comes too late for the model, and is not applied, as in
    /// LiteLLM).
    pub(super) async fn check(self: Box<Self>, worker: &Worker) -> Result<(), GatewayError> {
        let Beside {
            services,
            mut texts,
            doc,
            call_id,
            caller,
            log,
        } = *self;
        let round = guard_api::Round {
            input_type: "request",
            call_id: &call_id,
            caller: &caller,
            doc: &doc,
            log,
        };
        guard_api::check(worker, &services, &mut texts, &round)
            .await
            .map(|_| ())
    }
}

/// The body after the request's content filters, and the guardrail
/// services still to call on it ([`services`]); keeps its `post_call`
/// guardrails in `outcome`.
#[allow(clippy::type_complexity)]
fn pre_call(
    worker: &Worker,
    (principal, _): (&Principal, Endpoint),
    body: Bytes,
    outcome: &mut Outcome,
) -> Result<(Bytes, Vec<guardrails::Service>, Vec<guardrails::Service>), GatewayError> {
    let (body, checked) =
        worker
            .shared
            .guardrails
            .pre_call(scope_of(principal), body, &mut outcome.guard_log)?;
    if checked.applied.is_some() {
        // One log for the request, whichever part runs a guardrail.
        outcome.guard_log.share();
    }
    outcome.post_call = checked.post;
    outcome.applied_guardrails = checked.applied;
    if outcome.deferred_refusal.is_none() {
        outcome.deferred_refusal = checked.deferred.map(Box::new);
    }
    let answer_services = outcome
        .post_call
        .as_ref()
        .is_some_and(|p| !p.services().is_empty());
    if answer_services || !checked.services.is_empty() || !checked.during.is_empty() {
        outcome.guard_caller = guard_api::caller(principal);
    }
    Ok((body, checked.services, checked.during))
}

/// The caller's stored guardrail settings: its key's and team's metadata.
pub(super) fn scope_of(principal: &Principal) -> Scope<'_> {
    let key = key_of(principal);
    Scope {
        key: key.map(|k| &k.record.metadata),
        team: key
            .and_then(|k| k.team.as_ref())
            .map(|t| &t.record.metadata),
    }
}

/// The body to read and send on after the request's `pre_call` and
/// `during_call` guardrail services: rewritten, or their refusal.
async fn services(
    worker: &Worker,
    body: Bytes,
    services: &[guardrails::Service],
    outcome: &Outcome,
) -> Result<Bytes, GatewayError> {
    let mut doc: Value =
        serde_json::from_slice(&body).map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
    let mut texts = guardrails::request_texts(&mut doc);
    let round = guard_api::Round {
        input_type: "request",
        call_id: &outcome.call_id,
        caller: &outcome.guard_caller,
        doc: &doc,
        log: outcome.guard_log.clone(),
    };
    if !guard_api::check(worker, services, &mut texts, &round).await? {
        return Ok(body);
    }
    guardrails::set_request_texts(&mut doc, texts);
    serde_json::to_vec(&doc)
        .map(Bytes::from)
        .map_err(|_| GatewayError::Internal("re-encoding a guarded body failed"))
}

/// Runs `call` (the request's attempts, whose writes wait on `gate`)
/// and `beside`'s services side by side: when the services pass, `gate`
/// opens and the call's result is returned; when they refuse, the call is
/// dropped where it stands (its upstream connection closes) and the
/// refusal is the error.
pub(super) async fn beside_the_call<F>(
    worker: &Worker,
    beside: Box<Beside>,
    call: F,
    gate: &crate::local_signal::LocalSignal,
) -> Result<Result<(), GatewayError>, GatewayError>
where
    F: std::future::Future<Output = Result<(), GatewayError>> + Unpin,
{
    use futures_util::future::{select, Either};
    let check = Box::pin(beside.check(worker));
    match select(check, call).await {
        Either::Left((Ok(()), call)) => {
            gate.fire();
            Ok(call.await)
        }
        Either::Left((Err(refusal), call)) => {
            drop(call);
            Err(refusal)
        }
        // The call ended first: it failed, or its last write is held.
        Either::Right((result, check)) => {
            check.await?;
            gate.fire();
            Ok(result)
        }
    }
}

/// The guardrails on an image edit form's `prompt` (an audio form has no
/// text): run as on a JSON body holding it; a prompt they would mask is
/// refused, as the form is forwarded as received.
pub(super) async fn form_prompt(
    worker: &Worker,
    principal: &Principal,
    form: &crate::inbound::LlmRequest,
    outcome: &mut Outcome,
) -> Result<(), GatewayError> {
    let Some(range) = form.form_prompt.clone() else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(&form.body[range]);
    let json = serde_json::json!({ "prompt": text }).to_string();
    let sent = Bytes::from(json);
    let checked = checked_body(worker, (principal, form.endpoint), sent.clone(), outcome).await?;
    if checked != sent {
        return Err(GatewayError::InvalidParam {
            param: "prompt",
            message: "a guardrail masks this prompt; an image edit's form is forwarded as received, so it is refused".into(),
        });
    }
    Ok(())
}

/// Sends a whole 2xx answer `body` in the `client`'s format after its
/// `post_call` guardrails (content filters, then services): masked, or
/// replaced by their refusal (the answer was generated, so the attempt is
/// still billed as a success).
pub(super) async fn send_answer(
    out: &mut Responder<'_>,
    client: Format,
    (worker, outcome): (&Worker, &Outcome),
    (status, headers, content_type): (u16, HeadBuilder, &str),
    body: &[u8],
) -> Result<(), GatewayError> {
    let io = |_| GatewayError::Unavailable("client connection lost");
    let checked = match &outcome.post_call {
        None => Ok(Cow::Borrowed(body)),
        Some(post) => match post.answer(body, &mut outcome.guard_log.clone()) {
            Ok(answer) => {
                let services = post.services();
                if services.is_empty() {
                    Ok(answer)
                } else {
                    let checking = answer_services(worker, outcome, &services, answer);
                    Box::pin(checking).await
                }
            }
            Err(err) => Err(err),
        },
    };
    match checked {
        Ok(body) => out
            .send(status, headers, content_type, &body)
            .await
            .map_err(io),
        Err(err) => {
            let headers = litellm_headers(err.status(), outcome);
            super::convert::send_error(out, client, &err, headers).await;
            Ok(())
        }
    }
}

/// A whole answer after the request's `post_call` guardrail services.
async fn answer_services<'b>(
    worker: &Worker,
    outcome: &Outcome,
    services: &[crate::guardrails::Service],
    answer: Cow<'b, [u8]>,
) -> Result<Cow<'b, [u8]>, GatewayError> {
    let Ok(mut doc) = serde_json::from_slice::<Value>(&answer) else {
        return Err(GatewayError::Internal(
            "the answer could not be read for its post_call guardrails",
        ));
    };
    let mut texts = guardrails::answer_texts(&mut doc);
    let round = guard_api::Round {
        input_type: "response",
        call_id: &outcome.call_id,
        caller: &outcome.guard_caller,
        doc: &doc,
        log: outcome.guard_log.clone(),
    };
    if !guard_api::check(worker, services, &mut texts, &round).await? {
        return Ok(answer);
    }
    guardrails::set_answer_texts(&mut doc, texts);
    serde_json::to_vec(&doc)
        .map(Cow::Owned)
        .map_err(|_| GatewayError::Internal("re-encoding a guarded answer failed"))
}

/// Content events between two checks of a stream by its guardrail
/// services (LiteLLM's default `streaming_sampling_rate`).
const SAMPLING_RATE: u32 = 5;
/// Most text of one stream its guardrail services are given: beyond, the
/// stream ends with an error (the services could not see it all).
const MAX_SERVICE_TEXT: usize = 4 << 20;

/// A streamed answer in the client's framing after its `post_call`
/// guardrails: the text of each choice (OpenAI `delta.content` or `text`,
/// Anthropic `text_delta`) passes [`StreamCheck`]; a `BLOCK` ends the
/// stream with an error event in the client's framing, as LiteLLM does.
/// Guardrail services see the text released so far every
/// [`SAMPLING_RATE`] content events and at the end, before the events
/// that carry it go out (LiteLLM's `block_only` streaming: a block ends the
/// stream, a rewrite is not applied). Tool-call arguments and reasoning
/// pass unchecked.
pub(super) struct StreamGuard {
    check: StreamCheck,
    /// The services to call on the text, and what their calls say of the
    /// request; `None` without services.
    services: Option<Box<StreamServices>>,
    reader: EventReader,
    anthropic: bool,
    /// For a Responses stream, the text released of each output text part.
    responses: Option<Vec<ResponsesPart>>,
    /// For a Responses stream, the `sequence_number` of the next event the
    /// client gets: the events this guard adds (a held text's delta, the
    /// error) take numbers too, so the ones after them are renumbered and
    /// every event's number is one more than the last.
    seq: Option<u64>,
    /// The first OpenAI chunk (whose text was checked, when the stream
    /// has one), for its `id`, `object`, `created` and `model` in the
    /// chunk that releases text held at the end (every chunk of a stream
    /// carries the same ones).
    last: Vec<u8>,
    /// The stream ended: refused, or its `[DONE]` sent.
    ended: bool,
    /// A `BLOCK` refused it.
    blocked: bool,
    /// The request's guardrail log (shared): the window's runs go to it
    /// when the stream ends.
    log: Log,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.check.log_into(&mut self.log);
    }
}

impl StreamGuard {
    /// A guard for a stream in the `client`'s format; `None` when the
    /// request has no `post_call` guardrails or the format is not checked.
    pub(super) fn new(outcome: &Outcome, client: Format) -> Option<StreamGuard> {
        let (anthropic, responses) = match client {
            Format::OpenAi => (false, None),
            Format::Anthropic => (true, None),
            Format::Responses => (false, Some(Vec::new())),
            _ => return None,
        };
        let post = outcome.post_call.as_ref()?;
        let services = post.services();
        let services = (!services.is_empty()).then(|| {
            Box::new(StreamServices {
                services,
                call_id: outcome.call_id.to_string(),
                caller: outcome.guard_caller.clone(),
                text: String::new(),
                events: 0,
                checked: 0,
            })
        });
        let mut guard = StreamGuard::of_window(post.stream(), anthropic, outcome.guard_log.clone());
        guard.services = services;
        guard.responses = responses;
        Some(guard)
    }

    /// A guard of window `check` alone (no services), for an OpenAI
    /// (`anthropic`: an Anthropic Messages) stream; its runs go to `log`.
    pub(super) fn of_window(check: StreamCheck, anthropic: bool, log: Log) -> StreamGuard {
        StreamGuard {
            check,
            services: None,
            reader: EventReader::new(crate::formats::MAX_EVENT_BYTES),
            anthropic,
            responses: None,
            seq: None,
            last: Vec::new(),
            ended: false,
            blocked: false,
            log,
        }
    }

    /// Whether a `BLOCK` ended the stream (nothing more is sent).
    pub(super) fn blocked(&self) -> bool {
        self.blocked
    }

    /// Text released to the client, for the services.
    fn released(&mut self, text: &str) {
        if let Some(s) = &mut self.services {
            if !text.is_empty() {
                s.events = s.events.saturating_add(1);
                s.text.push_str(text);
            }
        }
    }

    /// A choice's (or content block's) text ended: the services check it
    /// before the event that ends it goes out.
    fn closing(&mut self) {
        if let Some(s) = &mut self.services {
            s.events = SAMPLING_RATE;
        }
    }

    /// The text for the guardrail services when a check is due: every
    /// [`SAMPLING_RATE`] content events and at the `end` (or once the
    /// stream's own end was seen), when text came since the last check.
    fn due(&mut self, end: bool) -> Option<String> {
        let end = end || self.ended;
        let s = self.services.as_mut()?;
        if self.blocked || s.text.len() == s.checked || !(end || s.events >= SAMPLING_RATE) {
            return None;
        }
        s.events = 0;
        s.checked = s.text.len();
        Some(s.text.clone())
    }

    /// Appends to `out` what the client gets of the events `input` completes.
    pub(super) fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), TranslateError> {
        if self.ended {
            return Ok(());
        }
        let mut reader = std::mem::replace(&mut self.reader, EventReader::new(0));
        let result = reader.feed(input, &mut |name, data| self.event(name, data, out));
        self.reader = reader;
        result
    }

    /// The end of the stream: releases what is still held.
    pub(super) fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError> {
        if !self.ended {
            let mut reader = std::mem::replace(&mut self.reader, EventReader::new(0));
            let result = reader.finish(&mut |name, data| self.event(name, data, out));
            self.reader = reader;
            result?;
        }
        if !self.ended {
            self.flush_all(out);
        }
        Ok(())
    }

    fn event(&mut self, name: &[u8], data: &[u8], out: &mut Vec<u8>) -> Result<(), TranslateError> {
        if self.ended {
            return Ok(());
        }
        if data == b"[DONE]" {
            self.flush_all(out);
            if !self.ended {
                out.extend_from_slice(crate::formats::DONE);
                self.ended = true;
            }
            return Ok(());
        }
        if self.anthropic && self.responses.is_none() {
            if let Some(result) = self.anthropic_delta_in_place(name, data, out) {
                if let Err(err) = result {
                    self.refuse(&err, out);
                }
                return Ok(());
            }
        }
        if self.responses.is_none() && !self.anthropic {
            if let Some(result) = self.openai_chunk_in_place(name, data, out) {
                if let Err(err) = result {
                    self.refuse(&err, out);
                }
                return Ok(());
            }
        }
        let checked = match serde_json::from_slice::<Value>(data) {
            Ok(mut event) => {
                let checked = if self.responses.is_some() {
                    let given = event.get("sequence_number").and_then(Value::as_u64);
                    self.seq = self.seq.or(given);
                    self.responses_event(&mut event, out).map(|changed| {
                        let n = self.next_seq();
                        let renumber = given.is_some() && given != Some(n);
                        if renumber {
                            event["sequence_number"] = json!(n);
                        }
                        changed || renumber
                    })
                } else if self.anthropic {
                    self.anthropic_event(&mut event, out)
                } else {
                    self.openai_chunk(&mut event).inspect(|&changed| {
                        if changed || self.last.is_empty() {
                            self.remember(data);
                        }
                    })
                };
                checked.map(|changed| changed.then_some(event))
            }
            // Not JSON: not text to check, relayed as it came.
            Err(_) => Ok(None),
        };
        match checked {
            Ok(Some(event)) => {
                write_event(out, name, &serde_json::to_vec(&event).unwrap_or_default())
            }
            Ok(None) => write_event(out, name, data),
            Err(err) => self.refuse(&err, out),
        }
        Ok(())
    }

    /// Checks the text of an OpenAI chunk in place; whether it changed.
    fn openai_chunk(&mut self, chunk: &mut Value) -> Result<bool, GatewayError> {
        let Some(choices) = chunk.get_mut("choices").and_then(Value::as_array_mut) else {
            return Ok(false);
        };
        let mut changed = false;
        for choice in choices.iter_mut() {
            let index = choice.get("index").and_then(Value::as_u64).unwrap_or(0);
            let finished = choice.get("finish_reason").is_some_and(|f| !f.is_null());
            let slot = if choice.get("text").is_some_and(Value::is_string) {
                choice.get_mut("text")
            } else {
                choice
                    .get_mut("delta")
                    .and_then(Value::as_object_mut)
                    .map(|delta| delta.entry("content").or_insert(Value::Null))
            };
            let Some(slot) = slot else { continue };
            let mut text = match slot.as_str() {
                Some(text) => {
                    changed = true;
                    self.check.feed(index, text)?
                }
                None => String::new(),
            };
            if finished {
                text.push_str(&self.check.flush(index)?);
                self.closing();
            }
            self.released(&text);
            if !text.is_empty() || slot.is_string() {
                *slot = Value::String(text);
                changed = true;
            } else if slot.is_null() {
                // The member this guard added for nothing.
                if let Some(delta) = choice.get_mut("delta").and_then(Value::as_object_mut) {
                    delta.remove("content");
                }
            }
        }
        Ok(changed)
    }

    /// [`Self::openai_chunk`] on the common chunk, found in place: one
    /// choice whose `delta.content` is a string, the released text written
    /// in place of it and the rest of the chunk as it came (or a chunk of
    /// no choice, relayed). `None` for any other chunk, which then takes
    /// the parse (nothing is checked before that is known).
    fn openai_chunk_in_place(
        &mut self,
        name: &[u8],
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<Result<(), GatewayError>> {
        let Some(choice) = guardrails::skim::openai_chunk(data)? else {
            if self.last.is_empty() {
                self.remember(data);
            }
            write_event(out, name, data);
            return Some(Ok(()));
        };
        let Some((span, given)) = &choice.content else {
            // A choice's end without text of its own releases what it
            // holds as its `delta.content`, written into the delta (or
            // through the parse when its `content` is there as `null`).
            if choice.finished {
                let (at, members) = choice.delta?;
                return Some(self.release_at_end(name, data, (at, members), choice.index, out));
            }
            if self.last.is_empty() {
                self.remember(data);
            }
            write_event(out, name, data);
            return Some(Ok(()));
        };
        let index = choice.index;
        let mut released = match self.check.feed(index, given) {
            Ok(text) => text,
            Err(err) => return Some(Err(err)),
        };
        if choice.finished {
            match self.check.flush(index) {
                Ok(rest) => released.push_str(&rest),
                Err(err) => return Some(Err(err)),
            }
            self.closing();
        }
        self.released(&released);
        write_spliced(out, name, data, *span, (b"", &released, b""));
        if self.last.is_empty() {
            self.remember(data);
        }
        Some(Ok(()))
    }

    /// The end of choice `index` in chunk `data` that has no text: what
    /// the choice still holds goes out as its `delta.content`, a member
    /// written just inside the delta (at `at`; `members`: the delta has
    /// others), the rest of the chunk as it came.
    fn release_at_end(
        &mut self,
        name: &[u8],
        data: &[u8],
        (at, members): (usize, bool),
        index: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), GatewayError> {
        let released = self.check.flush(index)?;
        self.closing();
        self.released(&released);
        if released.is_empty() {
            if self.last.is_empty() {
                self.remember(data);
            }
            write_event(out, name, data);
            return Ok(());
        }
        let after: &[u8] = if members { b"," } else { b"" };
        write_spliced(
            out,
            name,
            data,
            (at, at),
            (b"\"content\":", &released, after),
        );
        self.remember(data);
        Ok(())
    }

    /// [`Self::anthropic_event`] on a `content_block_delta` of text, found
    /// in place: the released text written in place of its `delta.text`.
    /// `None` for any other event, which then takes the parse.
    fn anthropic_delta_in_place(
        &mut self,
        name: &[u8],
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> Option<Result<(), GatewayError>> {
        let (index, span, given) = guardrails::skim::anthropic_text_delta(data)?;
        let released = match self.check.feed(index, &given) {
            Ok(text) => text,
            Err(err) => return Some(Err(err)),
        };
        self.released(&released);
        write_spliced(out, name, data, span, (b"", &released, b""));
        Some(Ok(()))
    }

    /// Keeps `chunk` as the last OpenAI chunk.
    fn remember(&mut self, chunk: &[u8]) {
        self.last.clear();
        self.last.extend_from_slice(chunk);
    }

    /// Checks the text of an Anthropic event in place (a text held at a
    /// block's end goes out as one more delta before its stop); whether it
    /// changed.
    fn anthropic_event(
        &mut self,
        event: &mut Value,
        out: &mut Vec<u8>,
    ) -> Result<bool, GatewayError> {
        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
        match event.get("type").and_then(Value::as_str) {
            Some("content_block_delta") => {
                let Some(text) = event.pointer_mut("/delta/text") else {
                    return Ok(false);
                };
                let Some(given) = text.as_str() else {
                    return Ok(false);
                };
                let released = self.check.feed(index, given)?;
                self.released(&released);
                *text = Value::String(released);
                Ok(true)
            }
            Some("content_block_stop") => {
                let rest = self.check.flush(index)?;
                self.released(&rest);
                self.closing();
                if !rest.is_empty() {
                    write_event(out, b"content_block_delta", &text_delta(index, rest));
                }
                Ok(false)
            }
            Some("message_delta") => {
                self.flush_all(out);
                Ok(false)
            }
            Some("message_stop") => {
                self.flush_all(out);
                // The stream's end: what it carries waits for the final
                // check by the services.
                self.ended = self.services.is_some() || self.ended;
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// Checks the text of a Responses event in place: each output text
    /// part's deltas pass the window; its `done` events (and the final
    /// response's output) carry the text as released; whether it changed.
    fn responses_event(
        &mut self,
        event: &mut Value,
        out: &mut Vec<u8>,
    ) -> Result<bool, GatewayError> {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let at = |e: &Value, k: &str| e.get(k).and_then(Value::as_u64).unwrap_or(0);
        let key = |oi: u64, ci: u64| oi.saturating_mul(1024).saturating_add(ci.min(1023));
        match kind.as_str() {
            "response.output_text.delta" => {
                let index = key(at(event, "output_index"), at(event, "content_index"));
                let Some(given) = event.get("delta").and_then(Value::as_str) else {
                    return Ok(false);
                };
                let released = self.check.feed(index, given)?;
                self.released(&released);
                let parts = self.responses.get_or_insert_with(Vec::new);
                if part_of(parts, index).is_none() {
                    if parts.len() >= MAX_PARTS {
                        return Err(GatewayError::Internal(
                            "too many output text parts in one stream",
                        ));
                    }
                    parts.push(ResponsesPart {
                        index,
                        item_id: event.get("item_id").cloned().unwrap_or(Value::Null),
                        output_index: at(event, "output_index"),
                        content_index: at(event, "content_index"),
                        text: String::new(),
                    });
                }
                if let Some(part) = part_of(parts, index) {
                    if part.text.len().saturating_add(released.len()) > MAX_SERVICE_TEXT {
                        return Err(GatewayError::Internal(
                            "a streamed output text is too long to check",
                        ));
                    }
                    part.text.push_str(&released);
                }
                event["delta"] = Value::String(released);
                Ok(true)
            }
            "response.output_text.done" => {
                let index = key(at(event, "output_index"), at(event, "content_index"));
                let rest = self.check.flush(index)?;
                self.released(&rest);
                self.closing();
                // The held text's delta takes its own number, before this
                // event's.
                let seq = (!rest.is_empty()).then(|| self.next_seq());
                let Some(part) = self.responses.as_mut().and_then(|p| part_of(p, index)) else {
                    return Ok(false);
                };
                part.text.push_str(&rest);
                if let Some(seq) = seq {
                    write_event(out, b"response.output_text.delta", &part.delta(&rest, seq));
                }
                event["text"] = Value::String(part.text.clone());
                Ok(true)
            }
            "response.content_part.done" => {
                let index = key(at(event, "output_index"), at(event, "content_index"));
                let Some(part) = self.responses.as_mut().and_then(|p| part_of(p, index)) else {
                    return Ok(false);
                };
                match event.pointer_mut("/part/text") {
                    Some(text) => *text = Value::String(part.text.clone()),
                    None => return Ok(false),
                }
                Ok(true)
            }
            "response.output_item.done" => {
                let oi = at(event, "output_index");
                Ok(self.set_item(oi, event.get_mut("item")))
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                self.flush_all(out);
                let mut changed = false;
                if let Some(output) = event
                    .pointer_mut("/response/output")
                    .and_then(Value::as_array_mut)
                {
                    for (oi, item) in output.iter_mut().enumerate() {
                        changed |= self.set_item(oi as u64, Some(item));
                    }
                }
                self.ended = self.services.is_some() || self.ended;
                Ok(changed)
            }
            _ => Ok(false),
        }
    }

    /// The `sequence_number` of the next event of a Responses stream.
    fn next_seq(&mut self) -> u64 {
        let n = self.seq.unwrap_or(0);
        self.seq = Some(n.saturating_add(1));
        n
    }

    /// Puts the released text of output item `oi`'s text parts into `item`
    /// (a `message` with `content`); whether one was set.
    fn set_item(&mut self, oi: u64, item: Option<&mut Value>) -> bool {
        let (Some(parts), Some(item)) = (self.responses.as_ref(), item) else {
            return false;
        };
        let Some(content) = item.get_mut("content").and_then(Value::as_array_mut) else {
            return false;
        };
        let mut changed = false;
        for part in parts.iter().filter(|p| p.output_index == oi) {
            let slot = usize::try_from(part.content_index)
                .ok()
                .and_then(|ci| content.get_mut(ci));
            if let Some(text) = slot.and_then(|c| c.get_mut("text")) {
                *text = Value::String(part.text.clone());
                changed = true;
            }
        }
        changed
    }

    /// Releases the text every choice still holds, in one closing event
    /// per choice.
    fn flush_all(&mut self, out: &mut Vec<u8>) {
        for index in self.check.pending() {
            let rest = match self.check.flush(index) {
                Ok(rest) => rest,
                Err(err) => return self.refuse(&err, out),
            };
            self.released(&rest);
            if self.responses.is_some() {
                let seq = self.next_seq();
                if let Some(part) = self.responses.as_mut().and_then(|p| part_of(p, index)) {
                    part.text.push_str(&rest);
                    write_event(out, b"response.output_text.delta", &part.delta(&rest, seq));
                }
                continue;
            }
            if self.anthropic {
                write_event(out, b"content_block_delta", &text_delta(index, rest));
                continue;
            }
            let mut chunk = match serde_json::from_slice::<Value>(&self.last) {
                Ok(last) => {
                    let field = |k: &str| last.get(k).cloned().unwrap_or(Value::Null);
                    json!({
                        "id": field("id"),
                        "object": field("object"),
                        "created": field("created"),
                        "model": field("model"),
                    })
                }
                Err(_) => json!({}),
            };
            chunk["choices"] =
                json!([{"index": index, "delta": {"content": rest}, "finish_reason": null}]);
            write_event(out, b"", &serde_json::to_vec(&chunk).unwrap_or_default());
        }
    }

    /// Ends the stream with `err` in the client's framing: OpenAI's
    /// `data: {"error": ...}` then `[DONE]`, Anthropic's `error` event.
    fn refuse(&mut self, err: &GatewayError, out: &mut Vec<u8>) {
        if self.responses.is_some() {
            // The Responses API's `error` event.
            let body: Value = serde_json::from_slice(&err.body()).unwrap_or_default();
            let e = &body["error"];
            let event = json!({"type": "error", "code": e["code"], "message": e["message"],
                "param": e["param"], "sequence_number": self.next_seq()});
            write_event(
                out,
                b"error",
                &serde_json::to_vec(&event).unwrap_or_default(),
            );
        } else if self.anthropic {
            write_event(out, b"error", &crate::formats::anthropic::error_body(err));
        } else {
            write_event(out, b"", &err.body());
            out.extend_from_slice(crate::formats::DONE);
        }
        self.ended = true;
        self.blocked = true;
    }
}

/// The guardrail services of a stream and the text they have seen.
struct StreamServices {
    services: Vec<guardrails::Service>,
    call_id: String,
    caller: serde_json::Map<String, Value>,
    /// Every text released to the client so far, choices one after another.
    text: String,
    /// Content events since the last check.
    events: u32,
    /// How much of `text` the last check saw.
    checked: usize,
}

/// Runs a stream's guardrail services on its text when a check is due
/// (before `piece`, which carries the newest text, goes out): a block or a
/// failure replaces `piece` with the stream's error event and ends it.
pub(super) async fn check_stream(
    worker: &Worker,
    guard: &mut StreamGuard,
    piece: &mut Vec<u8>,
    end: bool,
) {
    let Some(text) = guard.due(end) else {
        return;
    };
    let Some(s) = guard.services.as_ref() else {
        return;
    };
    let result = if text.len() > MAX_SERVICE_TEXT {
        Err(GatewayError::InvalidParam {
            param: "stream",
            message: format!(
                "the streamed answer is longer than the {MAX_SERVICE_TEXT} bytes its post_call guardrail services are given; send stream: false"
            ),
        })
    } else {
        let mut texts = vec![text];
        let round = guard_api::Round {
            input_type: "response",
            call_id: &s.call_id,
            caller: &s.caller,
            doc: &Value::Null,
            log: guard.log.clone(),
        };
        Box::pin(guard_api::check(worker, &s.services, &mut texts, &round))
            .await
            .map(|_| ())
    };
    if let Err(err) = result {
        piece.clear();
        guard.refuse(&err, piece);
    }
}

/// Most output text parts of one Responses stream that are checked.
const MAX_PARTS: usize = 256;

/// One output text part of a Responses stream and the text released of it.
struct ResponsesPart {
    /// The window's index for it (output and content index).
    index: u64,
    item_id: Value,
    output_index: u64,
    content_index: u64,
    /// Released so far (masked).
    text: String,
}

impl ResponsesPart {
    /// A `response.output_text.delta` event's data releasing `text`.
    fn delta(&self, text: &str, sequence_number: u64) -> Vec<u8> {
        let event = json!({"type": "response.output_text.delta", "item_id": self.item_id,
            "output_index": self.output_index, "content_index": self.content_index,
            "delta": text, "sequence_number": sequence_number});
        serde_json::to_vec(&event).unwrap_or_default()
    }
}

/// The part with window index `index`.
fn part_of(parts: &mut [ResponsesPart], index: u64) -> Option<&mut ResponsesPart> {
    parts.iter_mut().find(|p| p.index == index)
}

/// One Anthropic `text_delta` event's data.
fn text_delta(index: u64, text: String) -> Vec<u8> {
    let event = json!({
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    });
    serde_json::to_vec(&event).unwrap_or_default()
}

/// Appends the event `data` with `before`, `text` JSON-encoded and
/// `after` in place of its bytes at `span`: written straight into `out`
/// when the event is one line (as streams send them), else through
/// [`write_event`].
fn write_spliced(
    out: &mut Vec<u8>,
    name: &[u8],
    data: &[u8],
    span: (usize, usize),
    text: (&[u8], &str, &[u8]),
) {
    if memchr::memchr(b'\n', data).is_some() {
        let mut event = Vec::with_capacity(data.len() + text.1.len() + 16);
        splice_into(&mut event, data, span, text);
        return write_event(out, name, &event);
    }
    if !name.is_empty() {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name);
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    splice_into(out, data, span, text);
    out.extend_from_slice(b"\n\n");
}

/// Appends `event` with `before`, `text` JSON-encoded and `after` in
/// place of its bytes at `span`.
fn splice_into(
    out: &mut Vec<u8>,
    event: &[u8],
    span: (usize, usize),
    (before, text, after): (&[u8], &str, &[u8]),
) {
    out.extend_from_slice(&event[..span.0]);
    out.extend_from_slice(before);
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
    out.extend_from_slice(after);
    out.extend_from_slice(&event[span.1..]);
}

/// Appends one event: its `event:` line when named, a `data:` line per
/// line of `data`, a blank line.
fn write_event(out: &mut Vec<u8>, name: &[u8], data: &[u8]) {
    if !name.is_empty() {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name);
        out.push(b'\n');
    }
    for line in data.split(|&b| b == b'\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.push(b'\n');
}
