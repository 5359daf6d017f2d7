//! Guardrails on a realtime session (`/v1/realtime`), as LiteLLM screens
//! one: the client's typed text (`conversation.item.create` message text
//! parts and `function_call_output` output, `session.update`'s and
//! `response.create`'s `instructions`) passes the session's `pre_call` and
//! `during_call` guardrails before it is sent on; a mask rewrites it, a
//! block answers LiteLLM's `error` event (`guardrail_violation`) and sends
//! nothing on (a refused tool output goes on as LiteLLM's placeholder, a
//! refused message also drops the `response.create` that follows it).
//! The model's text (text and audio transcript deltas) passes the
//! `post_call` content filters through the same window as a stream's
//! ([`StreamCheck`]); its `done` events, `response.output_item.done` and
//! `response.done` carry the text as released; `post_call` services see
//! each finished text before its `done` event goes out. A block there
//! sends the error event, cancels the response upstream
//! (`response.cancel`) and drops the rest of its text.

use super::guard_api;
use crate::error::GatewayError;
use crate::guardrails::log::Log;
use crate::guardrails::stream::StreamCheck;
use crate::guardrails::{Service, SessionRails};
use crate::state::Worker;
use crate::websocket::{self, Message};
use memchr::memmem::Finder;
use serde_json::{json, Map, Value};
use std::sync::LazyLock;

/// The output a refused tool result is replaced by (LiteLLM's).
const BLOCKED_TOOL_OUTPUT: &str = r#"{"error": "Tool output blocked by content policy"}"#;
/// Most text parts of a session held at once (each response's are
/// forgotten at its `response.done`).
const MAX_PARTS: usize = 256;
/// Most text one part may carry for the post_call services.
const MAX_PART_TEXT: usize = 4 << 20;
/// The `event_id` prefix of the `response.cancel`s a block sends: the
/// upstream's error about one (the response had already ended) is not
/// the client's business, and is not relayed.
const CANCEL_ID: &str = "gw_guardrail_cancel_";
/// What the type of an event that carries the model's text starts with,
/// quoted as in its JSON.
const TEXT_EVENTS: [&str; 7] = [
    "\"response.text.",
    "\"response.output_text.",
    "\"response.audio_transcript.",
    "\"response.output_audio_transcript.",
    "\"response.content_part.done\"",
    "\"response.output_item.done\"",
    "\"response.done\"",
];
/// Finders of [`CANCEL_ID`] and [`TEXT_EVENTS`], and of the client events
/// the guardrails read; built once, not per message.
static CANCEL_ID_FINDER: LazyLock<Finder<'static>> =
    LazyLock::new(|| Finder::new(CANCEL_ID.as_bytes()));
static TEXT_EVENT_FINDERS: LazyLock<[Finder<'static>; 7]> =
    LazyLock::new(|| TEXT_EVENTS.map(|k| Finder::new(k.as_bytes())));
static CLIENT_EVENTS: LazyLock<[Finder<'static>; 3]> = LazyLock::new(|| {
    [
        "conversation.item.create",
        "session.update",
        "response.create",
    ]
    .map(Finder::new)
});
/// The model's text deltas and the member that carries their text.
const DELTAS: [&str; 4] = [
    "response.text.delta",
    "response.output_text.delta",
    "response.audio_transcript.delta",
    "response.output_audio_transcript.delta",
];
/// The events that end a text part, with the member carrying its text and
/// the delta type of the same part.
const DONES: [(&str, &str, &str); 4] = [
    ("response.text.done", "text", "response.text.delta"),
    (
        "response.output_text.done",
        "text",
        "response.output_text.delta",
    ),
    (
        "response.audio_transcript.done",
        "transcript",
        "response.audio_transcript.delta",
    ),
    (
        "response.output_audio_transcript.done",
        "transcript",
        "response.output_audio_transcript.delta",
    ),
];

/// What becomes of a client message.
pub(super) enum FromClient {
    /// Sent on: as it came (`None`) or rewritten.
    Send(Option<Message>),
    /// Refused: the error event for the client, and what goes upstream in
    /// its place, if anything.
    Refuse(Message, Option<Message>),
    /// Not sent on, nothing said.
    Drop,
}

/// What a message of the upstream becomes.
#[derive(Default)]
pub(super) struct FromUpstream {
    /// The messages for the client in its place (`None`: it as it came).
    pub to_client: Option<Vec<Message>>,
    /// A message for the upstream (a `response.cancel`).
    pub to_upstream: Option<Message>,
}

/// One text part of the model's answer and the text released of it.
struct Part {
    /// Its window index.
    index: u64,
    response_id: String,
    item_id: String,
    content_index: u64,
    /// Released so far (masked).
    text: String,
    /// Whether a delta (or its `done` event) came.
    fed: bool,
}

impl Part {
    /// Whether `event` is of this part.
    fn is(&self, event: &Value) -> bool {
        event.get("item_id").and_then(Value::as_str) == Some(&*self.item_id)
            && content_index(event) == self.content_index
    }
}

fn content_index(event: &Value) -> u64 {
    event
        .get("content_index")
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

/// The guardrails of one realtime session and their state.
pub(super) struct RealtimeGuard {
    rails: SessionRails,
    caller: Map<String, Value>,
    call_id: String,
    /// The `post_call` window, when there are post_call content filters.
    window: Option<StreamCheck>,
    post_services: Vec<Service>,
    parts: Vec<Part>,
    next_index: u64,
    /// A client message was refused: the `response.create` after it is
    /// not sent on (the client's turn is withdrawn).
    refused_turn: bool,
    /// Responses whose text a guardrail blocked, until their
    /// `response.done`.
    blocked: Vec<String>,
    /// `response.cancel`s sent.
    cancels: u64,
    /// Every guardrail run of the session, for its spend row and metrics.
    log: Log,
}

impl RealtimeGuard {
    /// The guard of a session with `rails`, for the caller `caller`.
    pub(super) fn new(
        rails: SessionRails,
        caller: Map<String, Value>,
        call_id: &str,
    ) -> RealtimeGuard {
        let window = rails.post.as_ref().map(|p| p.stream());
        let post_services = rails.post.as_ref().map_or_else(Vec::new, |p| p.services());
        RealtimeGuard {
            rails,
            caller,
            call_id: call_id.to_string(),
            window,
            post_services,
            parts: Vec::new(),
            next_index: 0,
            refused_turn: false,
            blocked: Vec::new(),
            cancels: 0,
            log: Log::default().share(),
        }
    }

    /// The session's guardrail runs, once it has ended: the content
    /// filters' on the client's texts (one run per filter and event), the
    /// services' (one per call), and the `post_call` window's over the
    /// whole session (one per filter, as for a stream).
    pub(super) fn finish(&mut self) -> Log {
        if let Some(window) = &self.window {
            window.log_into(&mut self.log);
        }
        std::mem::take(&mut self.log)
    }

    /// The names of the session's guardrails, for the 101's
    /// `x-litellm-applied-guardrails`.
    pub(super) fn applied(&self) -> Option<&str> {
        self.rails.applied.as_deref()
    }

    /// Screens a text message of the client.
    pub(super) async fn client(&mut self, worker: &Worker, m: &Message) -> FromClient {
        let Message::Text(t) = m else {
            return FromClient::Send(None);
        };
        let bytes = t.as_bytes();
        let relevant = CLIENT_EVENTS.iter().any(|k| k.find(bytes).is_some());
        if !relevant {
            return FromClient::Send(None);
        }
        let Ok(mut event) = serde_json::from_slice::<Value>(bytes) else {
            return FromClient::Send(None);
        };
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let tool_output = kind == "conversation.item.create"
            && event.pointer("/item/type").and_then(Value::as_str) == Some("function_call_output");
        match kind.as_str() {
            "conversation.item.create" => self.refused_turn = false,
            "response.create" if self.refused_turn => {
                // The refused message's turn: no answer is asked for it.
                self.refused_turn = false;
                return FromClient::Drop;
            }
            "session.update" | "response.create" => {}
            _ => return FromClient::Send(None),
        }
        let mut texts = client_texts(&mut event);
        if texts.is_empty() {
            return FromClient::Send(None);
        }
        match self.screen(worker, &mut texts, &event).await {
            Ok(false) => FromClient::Send(None),
            Ok(true) => {
                set_client_texts(&mut event, texts);
                FromClient::Send(Some(websocket::text(event.to_string())))
            }
            Err(err) => {
                let refusal = violation(&err, event.get("event_id"));
                if tool_output {
                    // A tool call must be answered: with LiteLLM's
                    // placeholder.
                    event["item"]["output"] = Value::String(BLOCKED_TOOL_OUTPUT.into());
                    FromClient::Refuse(refusal, Some(websocket::text(event.to_string())))
                } else {
                    self.refused_turn = kind == "conversation.item.create";
                    FromClient::Refuse(refusal, None)
                }
            }
        }
    }

    /// The content filters, then the services, on a client's `texts`:
    /// whether they changed, or the refusal.
    async fn screen(
        &self,
        worker: &Worker,
        texts: &mut Vec<String>,
        event: &Value,
    ) -> Result<bool, GatewayError> {
        let changed = self.rails.client_texts(texts, &mut self.log.clone())?;
        if self.rails.services.is_empty() {
            return Ok(changed);
        }
        let round = guard_api::Round {
            input_type: "request",
            call_id: &self.call_id,
            caller: &self.caller,
            doc: event,
            log: self.log.clone(),
        };
        let rewritten = Box::pin(guard_api::check(
            worker,
            &self.rails.services,
            texts,
            &round,
        ));
        Ok(rewritten.await? || changed)
    }

    /// Screens a text message of the upstream.
    pub(super) async fn upstream(&mut self, worker: &Worker, m: &Message) -> FromUpstream {
        let Message::Text(t) = m else {
            return FromUpstream::default();
        };
        let bytes = t.as_bytes();
        let cancel_error = CANCEL_ID_FINDER.find(bytes).is_some();
        // Only events that carry the model's text are parsed (not, say,
        // the audio deltas, which are most of a voice session's bytes).
        let carries_text = || TEXT_EVENT_FINDERS.iter().any(|k| k.find(bytes).is_some());
        if !cancel_error
            && (self.window.is_none() && self.post_services.is_empty() || !carries_text())
        {
            return FromUpstream::default();
        }
        let Ok(mut event) = serde_json::from_slice::<Value>(bytes) else {
            return FromUpstream::default();
        };
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let response_id = event
            .get("response_id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let mut out = FromUpstream::default();
        if kind == "error" && cancel_error {
            let ours = event
                .pointer("/error/event_id")
                .and_then(Value::as_str)
                .is_some_and(|id| id.starts_with(CANCEL_ID));
            if ours {
                out.to_client = Some(Vec::new());
            }
            return out;
        }
        if DELTAS.contains(&kind.as_str()) {
            if self.is_blocked(&response_id) {
                out.to_client = Some(Vec::new());
                return out;
            }
            let given = event
                .get("delta")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            return match self.feed(&event, &given, false) {
                Ok(released) => {
                    event["delta"] = Value::String(released);
                    out.to_client = Some(vec![websocket::text(event.to_string())]);
                    out
                }
                Err(err) => self.block(&response_id, &err),
            };
        }
        if let Some(&(_, member, delta_kind)) = DONES.iter().find(|(k, _, _)| *k == kind) {
            if self.is_blocked(&response_id) {
                out.to_client = Some(Vec::new());
                return out;
            }
            let whole = event
                .get(member)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let rest = match self.feed(&event, &whole, true) {
                Ok(rest) => rest,
                Err(err) => return self.block(&response_id, &err),
            };
            let Some(part) = self.part(&event) else {
                return out;
            };
            let text = part.text.clone();
            if let Err(err) = self.check_services(worker, &text, &event).await {
                return self.block(&response_id, &err);
            }
            let mut msgs = Vec::new();
            if !rest.is_empty() {
                let mut delta = event.clone();
                if let Some(d) = delta.as_object_mut() {
                    d.remove(member);
                    d.remove("event_id");
                }
                delta["type"] = Value::String(delta_kind.into());
                delta["delta"] = Value::String(rest);
                msgs.push(websocket::text(delta.to_string()));
            }
            event[member] = Value::String(text);
            msgs.push(websocket::text(event.to_string()));
            out.to_client = Some(msgs);
            return out;
        }
        match kind.as_str() {
            "response.content_part.done" => {
                if self.is_blocked(&response_id) {
                    out.to_client = Some(Vec::new());
                } else if let Some(text) = self.part(&event).map(|p| p.text.clone()) {
                    if let Some(part) = event.get_mut("part") {
                        set_text(part, text);
                    }
                    out.to_client = Some(vec![websocket::text(event.to_string())]);
                }
            }
            "response.output_item.done" => {
                if self.is_blocked(&response_id) {
                    out.to_client = Some(Vec::new());
                } else if let Some(item) = event.get_mut("item") {
                    if self.set_item(item) {
                        out.to_client = Some(vec![websocket::text(event.to_string())]);
                    }
                }
            }
            "response.done" => {
                let id = event
                    .pointer("/response/id")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let mut changed = false;
                if let Some(output) = event
                    .pointer_mut("/response/output")
                    .and_then(Value::as_array_mut)
                {
                    for item in output.iter_mut() {
                        changed |= self.set_item(item);
                    }
                }
                self.forget(&id);
                if changed {
                    out.to_client = Some(vec![websocket::text(event.to_string())]);
                }
            }
            _ => {}
        }
        out
    }

    /// Passes `text` of the part `event` names through the window: the
    /// text released, or the refusal. At its `end` (a `done` event) the
    /// rest is released; a part that had no deltas is given its `done`
    /// event's whole text.
    fn feed(&mut self, event: &Value, text: &str, end: bool) -> Result<String, GatewayError> {
        let at = match self.parts.iter().position(|p| p.is(event)) {
            Some(at) => at,
            None if self.parts.len() >= MAX_PARTS => {
                return Err(GatewayError::Internal(
                    "too many text parts in one realtime session",
                ))
            }
            None => {
                let index = self.next_index;
                self.next_index = self.next_index.saturating_add(1);
                self.parts.push(Part {
                    index,
                    response_id: str_of(event, "response_id"),
                    item_id: str_of(event, "item_id"),
                    content_index: content_index(event),
                    text: String::new(),
                    fed: false,
                });
                self.parts.len() - 1
            }
        };
        let (index, fed) = (self.parts[at].index, self.parts[at].fed);
        let given = if end && fed { "" } else { text };
        let mut released = match self.window.as_mut() {
            Some(window) if !given.is_empty() => window.feed(index, given)?,
            Some(_) => String::new(),
            None => given.to_string(),
        };
        if end {
            if let Some(window) = self.window.as_mut() {
                released.push_str(&window.flush(index)?);
            }
        }
        let part = &mut self.parts[at];
        part.fed = true;
        if part.text.len().saturating_add(released.len()) > MAX_PART_TEXT {
            return Err(GatewayError::Internal(
                "a realtime text is too long for its post_call guardrails",
            ));
        }
        part.text.push_str(&released);
        Ok(released)
    }

    /// The part `event` names (`item_id` and `content_index`).
    fn part(&self, event: &Value) -> Option<&Part> {
        self.parts.iter().find(|p| p.is(event))
    }

    /// The post_call services on a finished text.
    async fn check_services(
        &self,
        worker: &Worker,
        text: &str,
        event: &Value,
    ) -> Result<(), GatewayError> {
        if self.post_services.is_empty() || text.is_empty() {
            return Ok(());
        }
        let mut texts = vec![text.to_string()];
        let round = guard_api::Round {
            input_type: "response",
            call_id: &self.call_id,
            caller: &self.caller,
            doc: event,
            log: self.log.clone(),
        };
        Box::pin(guard_api::check(
            worker,
            &self.post_services,
            &mut texts,
            &round,
        ))
        .await
        .map(|_| ())
    }

    /// Puts the released text of `item`'s parts into its `content`;
    /// whether one was set.
    fn set_item(&self, item: &mut Value) -> bool {
        let Some(id) = item.get("id").and_then(Value::as_str).map(str::to_string) else {
            return false;
        };
        let Some(content) = item.get_mut("content").and_then(Value::as_array_mut) else {
            return false;
        };
        let mut changed = false;
        for part in self.parts.iter().filter(|p| p.item_id == id) {
            let slot = usize::try_from(part.content_index)
                .ok()
                .and_then(|ci| content.get_mut(ci));
            if let Some(slot) = slot {
                changed |= set_text(slot, part.text.clone());
            }
        }
        changed
    }

    /// Refuses the model's text of response `id`: the error event for the
    /// client, a `response.cancel` for the upstream; its later text is
    /// dropped.
    fn block(&mut self, id: &str, err: &GatewayError) -> FromUpstream {
        if self.blocked.len() < MAX_PARTS {
            self.blocked.push(id.to_string());
        }
        self.cancels = self.cancels.saturating_add(1);
        let event_id = format!("{CANCEL_ID}{}", self.cancels);
        let mut cancel = json!({"type": "response.cancel", "event_id": event_id});
        if !id.is_empty() {
            cancel["response_id"] = Value::String(id.to_string());
        }
        FromUpstream {
            to_client: Some(vec![violation(err, None)]),
            to_upstream: Some(websocket::text(cancel.to_string())),
        }
    }

    fn is_blocked(&self, id: &str) -> bool {
        self.blocked.iter().any(|b| b == id)
    }

    /// Response `id` ended: its parts and its block are forgotten.
    fn forget(&mut self, id: &str) {
        let window = &mut self.window;
        self.parts.retain(|p| {
            if p.response_id != id {
                return true;
            }
            if let Some(w) = window.as_mut() {
                // What it still holds is never sent.
                let _ = w.flush(p.index);
            }
            false
        });
        self.blocked.retain(|b| b != id);
    }
}

/// LiteLLM's realtime guardrail `error` event; `event_id` is the client
/// event's, when it had one.
fn violation(err: &GatewayError, event_id: Option<&Value>) -> Message {
    let mut error = json!({"type": "guardrail_violation", "message": err.to_string(),
        "code": "content_policy_violation"});
    if let Some(id) = event_id.filter(|v| v.is_string()) {
        error["event_id"] = id.clone();
    }
    websocket::text(json!({"type": "error", "error": error}).to_string())
}

fn str_of(event: &Value, key: &str) -> String {
    event
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// Sets a content part's `text` or `transcript` (whichever it has);
/// whether it had one.
fn set_text(part: &mut Value, text: String) -> bool {
    for member in ["text", "transcript"] {
        if let Some(slot) = part.get_mut(member).filter(|v| v.is_string()) {
            *slot = Value::String(text);
            return true;
        }
    }
    false
}

/// The text slots of a client event that are screened, in order.
fn client_slots(event: &mut Value) -> Vec<&mut Value> {
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "conversation.item.create" => {
            let Some(item) = event.get_mut("item") else {
                return Vec::new();
            };
            if item.get("type").and_then(Value::as_str) == Some("function_call_output") {
                return item
                    .get_mut("output")
                    .filter(|o| o.is_string())
                    .into_iter()
                    .collect();
            }
            let Some(content) = item.get_mut("content").and_then(Value::as_array_mut) else {
                return Vec::new();
            };
            content
                .iter_mut()
                .filter(|p| {
                    matches!(
                        p.get("type").and_then(Value::as_str),
                        Some("input_text" | "output_text" | "text")
                    )
                })
                .filter_map(|p| p.get_mut("text").filter(|t| t.is_string()))
                .collect()
        }
        "session.update" => event
            .pointer_mut("/session/instructions")
            .filter(|t| t.is_string())
            .into_iter()
            .collect(),
        "response.create" => event
            .pointer_mut("/response/instructions")
            .filter(|t| t.is_string())
            .into_iter()
            .collect(),
        _ => Vec::new(),
    }
}

/// The texts of a client event that are screened.
fn client_texts(event: &mut Value) -> Vec<String> {
    client_slots(event)
        .into_iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// Puts screened `texts` back, in [`client_texts`]' order.
fn set_client_texts(event: &mut Value, texts: Vec<String>) {
    for (slot, text) in client_slots(event).into_iter().zip(texts) {
        *slot = Value::String(text);
    }
}
