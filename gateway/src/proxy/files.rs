//! OpenAI's Files and Batch APIs (`/v1/files`, `/v1/batches`, also without
//! `/v1`) for `openai/` and `azure/` upstreams, as LiteLLM's proxy serves
//! them, with ownership: a file or batch is reachable only by the key that
//! created it (or an admin), through any replica (`managed`).
//!
//! The upstream is chosen as LiteLLM chooses it: a recorded object's own
//! upstream; else a `model` (form field, JSON field or query) naming a
//! model group with an `openai/` or `azure/` deployment (its base, key and
//! `api_version`; the key must be allowed the group); else
//! `custom_llm_provider` (the provider of LiteLLM's `/{provider}/v1/files…`
//! and `/{provider}/v1/batches…` paths, else the form or JSON field, the
//! query, or the `custom-llm-provider` header; `openai` when absent) and that
//! provider's pass-through credentials (`OPENAI_API_KEY`/`OPENAI_API_BASE`,
//! `AZURE_API_KEY`/`AZURE_API_BASE`/`AZURE_API_VERSION`, or a deployment
//! with `use_in_pass_through: true`).
//!
//! An upload is forwarded as received (the body is held once, never
//! copied), or, over `upload::STREAM_ABOVE` bytes with its `purpose` (and
//! any `model` or `custom_llm_provider`) before the file, streamed to the
//! upstream as it arrives through one buffer ([`upload`]); answers are
//! relayed with the upstream's status, lists filtered to the caller's
//! objects, file contents streamed. A batch polled as
//! `completed` has its output file read (line by line, never whole) and
//! its usage charged to the creating key once in the fleet, at the price
//! map's price halved (LiteLLM's batch price when no `*_batches` price is
//! known), with one spend row (call type `aretrieve_batch`, request id the
//! batch id). So is an expired or cancelled batch's output (the requests
//! that did complete). The batch poller (`batch_poll`) does the same for
//! batches nobody polls.
//!
//! A batch's creation holds its worst case against the creator's budgets
//! (`hold_batch`): its input file is read line by line and priced at its
//! bounds; the creation is refused when that, plus what the key's other
//! open batches hold, does not fit.

use super::relay::relay_as_is;
use super::upload::{self, StreamedBody};
use super::{headers, record, Caller};
use crate::auth::Principal;
use crate::deployment::ProviderKind;
use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::http1::RequestHead;
use crate::inbound::form;
use crate::providers::files::{self, FilesApi, FilesOp};
use crate::providers::passthrough::PassThroughProvider;
use crate::spend::{self, Usage};
use crate::state::Worker;
use crate::store::{ManagedKind, ManagedObject, SpendLogRow};
use crate::upstream::{UpstreamBase, UpstreamError};
use bytes::Bytes;
use chrono::Utc;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest the upstream may take for its head and each piece after
/// (LiteLLM's default request timeout).
pub(super) const TIMEOUT: Duration = Duration::from_secs(600);

/// Largest answer read whole (objects and lists; file contents stream).
const MAX_ANSWER: usize = 32 << 20;

/// Longest line of a batch output file read for its usage.
const MAX_OUTPUT_LINE: usize = 16 << 20;

/// Where one call goes.
pub(super) struct Upstream {
    /// OpenAI's or Azure's files API.
    pub(super) api: FilesApi,
    /// Its base URL.
    pub(super) base: UpstreamBase,
    key: String,
    /// Azure's `api-version`.
    pub(super) version: String,
    /// What a record of an object created here says of it.
    route: String,
}

/// Serves one Files or Batch API request (`scoped`: the provider a
/// `/{provider}/v1/…` path names); `caller` is the result of
/// authenticating its head.
pub async fn handle(
    worker: &Worker,
    head: &RequestHead,
    op: (FilesOp<'_>, Option<&str>),
    caller: Result<Principal, GatewayError>,
    body: Bytes,
    out: &mut Responder<'_>,
    received_at: Instant,
) {
    handle_streamed(worker, head, op, caller, (body, None), out, received_at).await;
}

/// Serves a `/v1/files` upload whose body (`length` bytes, `early` of them
/// read with the head) is still on the client's connection: streamed to
/// the upstream as it is read, or read whole (see `upload`). Returns
/// whether the whole body was read (else the connection cannot serve
/// another request).
pub async fn upload(
    worker: &Worker,
    head: &RequestHead,
    op: (FilesOp<'_>, Option<&str>),
    caller: Result<Principal, GatewayError>,
    (early, length): (Vec<u8>, u64),
    out: &mut Responder<'_>,
    received_at: Instant,
) -> bool {
    let limits = &worker.shared.limits;
    let plan = upload::Plan::FILE_UPLOAD;
    let received = upload::receive(out.request_stream(), head, plan, (early, length), limits);
    match received.await {
        Err(err) => {
            // The body was not read: answered, then the connection closes.
            out.close_after();
            let body = (Bytes::new(), None);
            handle_streamed(worker, head, op, Err(err), body, out, received_at).await;
            false
        }
        Ok(upload::Received::Whole(body)) => {
            handle(worker, head, op, caller, body, out, received_at).await;
            true
        }
        Ok(upload::Received::Streamed(prefix, rest)) => {
            let read_all = rest.read_all();
            let body = (prefix, Some(rest));
            handle_streamed(worker, head, op, caller, body, out, received_at).await;
            read_all.get()
        }
    }
}

/// [`handle`], for a body that may be a streamed upload's prefix and the
/// rest to stream.
async fn handle_streamed(
    worker: &Worker,
    head: &RequestHead,
    (op, scoped): (FilesOp<'_>, Option<&str>),
    caller: Result<Principal, GatewayError>,
    (body, mut rest): (Bytes, Option<Box<StreamedBody>>),
    out: &mut Responder<'_>,
    received_at: Instant,
) {
    let call_id = headers::call_id();
    let read_all = rest.as_deref().map(StreamedBody::read_all);
    let result = match caller {
        Ok(principal) => {
            let op = (op, scoped);
            let body = (body, rest.as_deref_mut());
            serve(worker, head, op, &principal, body, out, &call_id).await
        }
        Err(e) => Err(e),
    };
    if let Err(err) = &result {
        // An upload's unread rest stays on the connection: it closes.
        if read_all.as_ref().is_some_and(|read| !read.get()) {
            out.close_after();
        }
        if out.started() {
            out.abort_stream();
        } else {
            let mut h = HeadBuilder::new(err.status());
            h.header("x-litellm-call-id", &call_id);
            let _ = out.send_error(err, Some(h)).await;
        }
    }
    tracing::info!(
        target: "gateway::access",
        call_id = %call_id,
        method = head.method(),
        path = head.path(),
        call_type = op.call_type(),
        status = out.status().unwrap_or(0),
        duration_ms = received_at.elapsed().as_millis() as u64,
        error = result.as_ref().err().map(ToString::to_string).unwrap_or_default(),
        "files"
    );
}

/// The creating key's token: a virtual key's hash, the master key's.
fn owner_token(worker: &Worker, principal: &Principal) -> String {
    match principal {
        Principal::Key(k) => k.record.token.clone(),
        _ => worker
            .shared
            .auth
            .master_token()
            .unwrap_or_default()
            .to_string(),
    }
}

/// The JSON fields of a batch creation the gateway reads.
#[derive(serde::Deserialize, Default)]
struct BatchFields {
    #[serde(default)]
    input_file_id: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    completion_window: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    custom_llm_provider: Option<String>,
}

/// What the request asks for besides the operation: the upstream it names
/// (`model` or `custom_llm_provider`).
#[derive(Default)]
struct Asked {
    model: Option<String>,
    provider: Option<String>,
}

async fn serve(
    worker: &Worker,
    head: &RequestHead,
    (op, scoped): (FilesOp<'_>, Option<&str>),
    principal: &Principal,
    (body, rest): (Bytes, Option<&mut StreamedBody>),
    out: &mut Responder<'_>,
    call_id: &Arc<str>,
) -> Result<(), GatewayError> {
    let kind = if op.is_batch() {
        ManagedKind::Batch
    } else {
        ManagedKind::File
    };
    let query = head.query();
    let mut asked = Asked {
        model: files::query_param(query, "model").map(str::to_string),
        provider: files::query_param(query, "custom_llm_provider")
            .or_else(|| head.header("custom-llm-provider").map(str::trim))
            .map(str::to_string),
    };
    // The object named, when the operation names one.
    let mut known: Option<Arc<ManagedObject>> = None;
    if let Some(id) = op.id() {
        known = owned(worker, principal, kind, id).await?;
    }
    let mut content_type: Cow<'_, str> = Cow::Borrowed("application/json");
    // Parts of an upload left out, and a batch body rewritten.
    let mut dropped: Vec<std::ops::Range<usize>> = Vec::new();
    let mut forwarded: Option<Bytes> = None;
    // A batch's input file.
    let mut input_file: Option<String> = None;
    match op {
        FilesOp::Upload => {
            let ct = head.header("content-type").unwrap_or("");
            let checked = super::enforced_params::Body {
                bytes: &body,
                form: Some(ct),
                streamed: rest.is_some(),
            };
            super::enforced_params::check_upload(
                &worker.shared.enforced_params,
                principal,
                checked,
            )?;
            let boundary = form::boundary(ct)?;
            // A streamed upload's prefix: its fields before the file.
            let form = match &rest {
                Some(_) => match form::until_file(&body, boundary)? {
                    form::Prefix::File { form, .. } => *form,
                    _ => return Err(GatewayError::Internal("an upload's prefix holds no file")),
                },
                None => form::read(&body, boundary)?,
            };
            let field = |r: &Option<std::ops::Range<usize>>| {
                r.clone()
                    .map(|r| String::from_utf8_lossy(&body[r]).trim().to_string())
            };
            if form.file_bytes.is_none() {
                return Err(GatewayError::MissingParam("file"));
            }
            if field(&form.purpose).is_none_or(|p| p.is_empty()) {
                return Err(GatewayError::MissingParam("purpose"));
            }
            if let Some(m) = field(&form.model) {
                asked.model = Some(m);
            }
            if let Some(p) = field(&form.custom_llm_provider) {
                asked.provider = Some(p);
            }
            content_type = Cow::Owned(ct.to_string());
            dropped = form.routing_parts;
        }
        FilesOp::CreateBatch => {
            let fields: BatchFields = serde_json::from_slice(&body)
                .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
            super::enforced_params::check_batch(&worker.shared.enforced_params, principal, &body)?;
            // The gateway's own fields are not OpenAI's: left out.
            if fields.model.is_some() || fields.custom_llm_provider.is_some() {
                let mut object: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice(&body)
                        .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
                object.remove("model");
                object.remove("custom_llm_provider");
                forwarded = Some(Bytes::from(
                    serde_json::to_vec(&object)
                        .map_err(|e| GatewayError::MalformedJson(e.to_string()))?,
                ));
            }
            let input = fields
                .input_file_id
                .filter(|s| !s.is_empty())
                .ok_or(GatewayError::MissingParam("input_file_id"))?;
            if fields.endpoint.is_none_or(|s| s.is_empty()) {
                return Err(GatewayError::MissingParam("endpoint"));
            }
            if fields.completion_window.is_none_or(|s| s.is_empty()) {
                return Err(GatewayError::MissingParam("completion_window"));
            }
            // The batch goes where its input file is, and only the file's
            // owner may use it.
            known = owned(worker, principal, ManagedKind::File, &input).await?;
            input_file = Some(input);
            asked.model = fields.model.or(asked.model);
            asked.provider = fields.custom_llm_provider.or(asked.provider);
            let caller = Caller {
                principal,
                end_user: None,
                proxy_budget: worker.shared.auth.keys().proxy_budget(),
                model_windows: worker.shared.auth.keys().end_users().model_windows(),
                budget_windows: worker.shared.auth.keys().budget_windows(),
            };
            record::refuse_if_exhausted(caller, asked.model.as_deref().unwrap_or(""))?;
        }
        _ => {}
    }
    // LiteLLM's `/{provider}/v1/…` forms: the path's provider comes
    // before the header's, the query's and the body's.
    if let Some(provider) = scoped {
        asked.provider = Some(provider.to_string());
    }
    let upstream = match &known {
        Some(object) => upstream_of(worker, Some(principal), &object.route)?,
        None => match &asked.model {
            Some(model) => {
                let group = super::authorize_model(worker, principal, model)?;
                upstream_of(worker, Some(principal), &format!("model:{group}"))?
            }
            None => {
                let provider = asked.provider.as_deref().unwrap_or("openai");
                let api = FilesApi::parse(provider).ok_or_else(|| GatewayError::InvalidParam {
                    param: "custom_llm_provider",
                    message: format!(
                        "files and batches are served for openai and azure, not {provider:?}"
                    ),
                })?;
                upstream_of(worker, Some(principal), api.name())?
            }
        },
    };
    // Held until the batch is created, then released: the hold lives on
    // in the batch's record (`ManagedObject::hold`).
    let (hold, _reservation) = match &input_file {
        Some(input) => {
            let group = asked.model.as_deref().unwrap_or_default();
            Box::pin(hold_batch(
                worker, principal, &upstream, input, group, call_id,
            ))
            .await?
        }
        None => (0.0, None),
    };
    let query = match op {
        FilesOp::ListFiles | FilesOp::ListBatches => files::forwarded_query(query),
        _ => String::new(),
    };
    let target = upstream
        .api
        .target(&upstream.base.path, op, &query, &upstream.version);
    let pieces = match forwarded {
        Some(rewritten) => vec![rewritten],
        None => without(&body, &dropped),
    };
    let streamed = rest.as_deref().map_or(0, StreamedBody::len);
    let body_len = usize::try_from(streamed)
        .ok()
        .and_then(|n| n.checked_add(pieces.iter().map(Bytes::len).sum()))
        .ok_or(GatewayError::Internal("an upload's length"))?;
    let upstream_head = request_head(head.method(), &upstream, &target, &content_type, body_len);
    let deadline = Instant::now() + TIMEOUT;
    let unreachable = |e: UpstreamError| unreachable(&upstream, e);
    let sent = match rest {
        // The file goes as the client sends it.
        Some(rest) => {
            let mut source = rest.source(out.request_stream());
            let send = worker.upstream.send_streamed(
                &upstream.base,
                upstream_head,
                &pieces,
                &mut source,
                deadline,
            );
            let sent = Box::pin(send).await;
            if let Some(err) = rest.take_failure() {
                return Err(err);
            }
            sent
        }
        None => {
            let send = worker
                .upstream
                .send(&upstream.base, upstream_head, &pieces, deadline);
            Box::pin(send).await
        }
    };
    let mut resp = sent.map_err(unreachable)?;
    let status = resp.head.status;
    let mut h = HeadBuilder::new(status);
    h.header("x-litellm-call-id", call_id);
    let answer_type = resp
        .head
        .content_type
        .clone()
        .unwrap_or_else(|| "application/json".into());
    if matches!(op, FilesOp::FileContent(_)) && status < 400 {
        return relay_as_is(
            &mut resp,
            (h, &answer_type),
            out,
            TIMEOUT,
            |_| {},
            unreachable,
        )
        .await;
    }
    let answer = Box::pin(resp.read_to_end(MAX_ANSWER, TIMEOUT))
        .await
        .map_err(unreachable)?;
    let io = |_| GatewayError::Unavailable("client connection lost");
    if !(200..300).contains(&status) {
        return out.send(status, h, &answer_type, &answer).await.map_err(io);
    }
    let owner = || ManagedObject {
        id: String::new(),
        kind,
        key: owner_token(worker, principal),
        created_by: super::key_of(principal).and_then(|k| k.record.user_id.clone()),
        team_id: super::key_of(principal).and_then(|k| k.record.team_id.clone()),
        route: upstream.route.clone(),
        object: serde_json::Value::Null,
        created_at: Utc::now(),
        hold: 0.0,
    };
    let mut charge = None;
    let answer = match op {
        FilesOp::Upload | FilesOp::CreateBatch => {
            let object: serde_json::Value =
                serde_json::from_slice(&answer).map_err(|e| GatewayError::UpstreamProtocol {
                    provider: upstream.api.name().to_string(),
                    reason: format!("the created object is not JSON: {e}"),
                })?;
            let id = object["id"].as_str().filter(|id| files::valid_id(id));
            let Some(id) = id else {
                return Err(GatewayError::UpstreamProtocol {
                    provider: upstream.api.name().to_string(),
                    reason: "the created object has no valid id".to_string(),
                });
            };
            worker
                .shared
                .managed
                .record(ManagedObject {
                    id: id.to_string(),
                    object: object.clone(),
                    hold: if kind == ManagedKind::Batch {
                        hold
                    } else {
                        0.0
                    },
                    ..owner()
                })
                .await;
            answer
        }
        FilesOp::RetrieveBatch(_) | FilesOp::CancelBatch(_) => {
            let batch: serde_json::Value = serde_json::from_slice(&answer).unwrap_or_default();
            if let Some(object) = &known {
                charge = Box::pin(after_poll(worker, object, &batch))
                    .await
                    .map(|file| (object.clone(), file));
            }
            answer
        }
        FilesOp::ListFiles | FilesOp::ListBatches if !principal.is_admin() => {
            let mine = worker
                .shared
                .managed
                .ids_of(&owner_token(worker, principal), kind)
                .await
                .map_err(|e| GatewayError::Store(e.to_string()))?;
            filter_list(&answer, &mine)
        }
        _ => answer,
    };
    out.send(status, h, &answer_type, &answer)
        .await
        .map_err(io)?;
    // Charged after the answer went out: the client never waits for it.
    if let Some((batch, output)) = charge {
        let creator = Some(principal).filter(|p| owner_token(worker, p) == batch.key);
        Box::pin(charge_batch(worker, creator, &upstream, &batch, &output)).await;
    }
    Ok(())
}

/// The recorded object `id` of `kind`, when `principal` may reach it: its
/// creator or an admin. An admin may name an id the gateway has no record
/// of (`None`: the request says where it lives); anyone else gets a 404
/// for it, and a 403 for another key's object.
async fn owned(
    worker: &Worker,
    principal: &Principal,
    kind: ManagedKind,
    id: &str,
) -> Result<Option<Arc<ManagedObject>>, GatewayError> {
    if !files::valid_id(id) {
        return Err(GatewayError::InvalidParam {
            param: match kind {
                ManagedKind::File => "file_id",
                ManagedKind::Batch => "batch_id",
            },
            message: format!(
                "an id is 1 to {} letters, digits, '-', '_' or '.'",
                files::MAX_ID
            ),
        });
    }
    let found = worker
        .shared
        .managed
        .lookup(id)
        .await
        .map_err(|e| GatewayError::Store(e.to_string()))?;
    let not_found = || GatewayError::ManagedNotFound {
        kind: kind.as_str(),
        id: id.to_string(),
    };
    match found {
        Some(object) if object.kind != kind => Err(not_found()),
        Some(object) => {
            let mine = object.key == owner_token(worker, principal);
            if mine || principal.is_admin() {
                Ok(Some(object))
            } else {
                Err(GatewayError::ManagedForbidden(kind.as_str()))
            }
        }
        None if principal.is_admin() => Ok(None),
        None => Err(not_found()),
    }
}

/// A batch's statuses after which it changes no more.
const FINAL: [&str; 4] = ["completed", "failed", "expired", "cancelled"];

/// What a batch's answer (`batch`, as the upstream sent it) means for its
/// record `object`: its output and error files become its creator's, its
/// status is recorded (a final one ends its polls and its hold), and the
/// output file to charge is returned when the batch ended with one
/// (completed, or expired or cancelled after some requests completed:
/// those are billed). A batch to charge stays open until its charge is
/// claimed.
pub(super) async fn after_poll(
    worker: &Worker,
    object: &Arc<ManagedObject>,
    batch: &serde_json::Value,
) -> Option<String> {
    for field in ["output_file_id", "error_file_id"] {
        let Some(file) = batch[field].as_str().filter(|id| files::valid_id(id)) else {
            continue;
        };
        if !matches!(worker.shared.managed.lookup(file).await, Ok(Some(_))) {
            worker
                .shared
                .managed
                .record(ManagedObject {
                    id: file.to_string(),
                    kind: ManagedKind::File,
                    key: object.key.clone(),
                    created_by: object.created_by.clone(),
                    team_id: object.team_id.clone(),
                    route: object.route.clone(),
                    object: serde_json::Value::Null,
                    created_at: Utc::now(),
                    hold: 0.0,
                })
                .await;
        }
    }
    let status = batch["status"].as_str().filter(|s| s.len() <= 64)?;
    let output = batch["output_file_id"]
        .as_str()
        .filter(|id| files::valid_id(id));
    let billed = matches!(status, "completed" | "expired" | "cancelled");
    let charge = output.filter(|_| billed).map(str::to_string);
    let last = FINAL.contains(&status) && charge.is_none();
    worker.shared.managed.polled(&object.id, status, last);
    charge
}

/// Holds the worst case of a batch on input file `input` against the
/// creator's budgets (for model group `group`, else the lines' model),
/// with what the key's other open batches hold: the file is read line by
/// line and each line priced at its bounds (`files::input_line_bound`; a
/// line without an output cap at the model's, else 4096 tokens a
/// candidate), at the batch price (half the price map's). Returns the
/// batch's own worst case and the reservation, held until the batch is
/// created; a caller without a budget is not read for (holds 0).
async fn hold_batch<'w>(
    worker: &'w Worker,
    principal: &Principal,
    upstream: &Upstream,
    input: &str,
    group: &str,
    call_id: &str,
) -> Result<(f64, Option<crate::budget::Reservation<'w>>), GatewayError> {
    let caller = Caller {
        principal,
        end_user: None,
        proxy_budget: worker.shared.auth.keys().proxy_budget(),
        model_windows: worker.shared.auth.keys().end_users().model_windows(),
        budget_windows: worker.shared.auth.keys().budget_windows(),
    };
    let budgeted = |budgets: &[(&'static str, Arc<crate::budget::Budget>)]| {
        budgets.iter().any(|(_, b)| b.max_usd().is_some())
    };
    if !budgeted(&record::budgets_of(caller, group)) {
        return Ok((0.0, None));
    }
    let mut model: Option<String> = None;
    let (mut prompt, mut output, mut uncapped) = (0u64, 0u64, 0u64);
    Box::pin(each_line(worker, upstream, input, |line| {
        let Some(bound) = files::input_line_bound(line) else {
            return;
        };
        if model.is_none() {
            model = bound.model;
        }
        prompt = prompt.saturating_add(bound.prompt_tokens);
        match bound.output_tokens {
            Some(n) => output = output.saturating_add(n),
            None => uncapped = uncapped.saturating_add(bound.candidates),
        }
    }))
    .await?;
    let model = model.unwrap_or_else(|| group.to_string());
    let shipped = spend::shipped(&model);
    let cap = shipped
        .and_then(|m| m.max_output_tokens)
        .unwrap_or(record::DEFAULT_MAX_OUTPUT);
    let output = output.saturating_add(uncapped.saturating_mul(cap));
    let price = shipped.map(|m| m.price).unwrap_or_default();
    let worst = spend::worst_case_cost(prompt, output, price) / 2.0;
    let budget_group = if group.is_empty() { &model } else { group };
    let budgets = record::budgets_of(caller, budget_group);
    if !budgeted(&budgets) {
        return Ok((worst, None));
    }
    let others = worker
        .shared
        .managed
        .held_by(&owner_token(worker, principal))
        .await
        .map_err(|e| GatewayError::Store(e.to_string()))?;
    let total = worst + others;
    let reservation = record::hold(&worker.shared.limiter, &budgets, total, call_id)
        .await
        .map_err(|r| {
            record::refusal(caller, budget_group, r.scope, (r.spend, r.max), Some(total))
        })?;
    Ok((worst, reservation))
}

/// The upstream a route names: `openai` or `azure` (the pass-through
/// credentials), or `model:<group>` (the group's first `openai/` or
/// `azure/` deployment, which `principal`, when given, must be allowed).
pub(super) fn upstream_of(
    worker: &Worker,
    principal: Option<&Principal>,
    route: &str,
) -> Result<Upstream, GatewayError> {
    if let Some(group) = route.strip_prefix("model:") {
        if let Some(principal) = principal {
            super::check_access(worker, principal, group, group)?;
        }
        let router = worker.shared.models.router();
        let registry = router.registry();
        let dep = registry
            .deployments()
            .iter()
            .find(|d| {
                d.group == group
                    && (d.provider == ProviderKind::Azure
                        || (d.provider == ProviderKind::OpenAiCompatible
                            && d.provider_name == "openai"))
            })
            .ok_or_else(|| GatewayError::InvalidParam {
                param: "model",
                message: format!(
                    "model {group:?} has no openai/ or azure/ deployment to hold files and batches"
                ),
            })?;
        let api = if dep.provider == ProviderKind::Azure {
            FilesApi::Azure
        } else {
            FilesApi::OpenAi
        };
        let base = dep.base.clone().ok_or_else(|| GatewayError::InvalidParam {
            param: "model",
            message: format!("model {group:?} has no api_base"),
        })?;
        return Ok(Upstream {
            api,
            base,
            key: dep.api_key.clone().unwrap_or_default(),
            version: dep
                .api_version
                .clone()
                .unwrap_or_else(|| files::AZURE_DEFAULT_API_VERSION.to_string()),
            route: route.to_string(),
        });
    }
    let api = FilesApi::parse(route).ok_or(GatewayError::Internal("a managed object's route"))?;
    // LiteLLM's `files_settings` first, then the pass-through credentials.
    if let Some(setting) = worker
        .shared
        .pass_through
        .files
        .iter()
        .find(|s| s.api == api)
    {
        return Ok(Upstream {
            api,
            base: setting.base.clone(),
            key: setting.key.clone().unwrap_or_default(),
            version: setting
                .version
                .clone()
                .unwrap_or_else(|| files::AZURE_DEFAULT_API_VERSION.to_string()),
            route: route.to_string(),
        });
    }
    let provider = match api {
        FilesApi::OpenAi => PassThroughProvider::OpenAi,
        FilesApi::Azure => PassThroughProvider::Azure,
    };
    let target = worker.shared.pass_through.get(provider);
    let key = target.and_then(|t| t.key.clone());
    let (Some(target), Some(key)) = (target, key) else {
        return Err(GatewayError::InvalidParam {
            param: "custom_llm_provider",
            message: format!(
                "no {} credentials for files and batches: set {} and {}, pass a `model` with an {}/ deployment, or give one `use_in_pass_through: true`",
                api.name(),
                provider.key_env(),
                provider.base_env(),
                api.name()
            ),
        });
    };
    let mut base = target.base.clone();
    // The pass-through base is the host's (`https://api.openai.com`); the
    // Files API lives under `/v1` (an `OPENAI_API_BASE` may name it).
    if api == FilesApi::OpenAi && !base.path.ends_with("/v1") {
        base.path.push_str("/v1");
    }
    Ok(Upstream {
        api,
        base,
        key,
        version: std::env::var("AZURE_API_VERSION")
            .ok()
            .filter(|v| files::valid_id(v))
            .unwrap_or_else(|| files::AZURE_DEFAULT_API_VERSION.to_string()),
        route: api.name().to_string(),
    })
}

pub(super) fn unreachable(upstream: &Upstream, e: UpstreamError) -> GatewayError {
    let provider = upstream.api.name().to_string();
    match e {
        UpstreamError::Timeout => GatewayError::UpstreamTimeout {
            provider,
            deployment: "files".to_string(),
            after: TIMEOUT,
        },
        UpstreamError::Connect(reason) | UpstreamError::Io(reason) => {
            GatewayError::UpstreamUnreachable {
                provider,
                url: upstream.base.url.clone(),
                reason,
            }
        }
        UpstreamError::Protocol(reason) => GatewayError::UpstreamProtocol { provider, reason },
    }
}

/// The upstream request head: the gateway's own, never the client's
/// headers (its credential stays here).
pub(super) fn request_head(
    method: &str,
    upstream: &Upstream,
    target: &str,
    content_type: &str,
    body_len: usize,
) -> Vec<u8> {
    let base = &upstream.base;
    let mut h = Vec::with_capacity(256 + target.len() + content_type.len());
    h.extend_from_slice(method.as_bytes());
    h.push(b' ');
    h.extend_from_slice(target.as_bytes());
    h.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    h.extend_from_slice(base.host.as_bytes());
    let default_port = if base.tls { 443 } else { 80 };
    if base.port != default_port {
        h.push(b':');
        h.extend_from_slice(itoa::Buffer::new().format(base.port).as_bytes());
    }
    h.extend_from_slice(b"\r\naccept-encoding: identity\r\n");
    if method == "POST" {
        h.extend_from_slice(b"content-length: ");
        h.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
        h.extend_from_slice(b"\r\ncontent-type: ");
        h.extend_from_slice(content_type.as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    let (name, value) = upstream.api.credential(&upstream.key);
    if !upstream.key.bytes().any(|b| b == b'\r' || b == b'\n') {
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(b": ");
        h.extend_from_slice(value.as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    h.extend_from_slice(b"\r\n");
    h
}

/// `body` without the byte ranges `dropped` (in order, not overlapping),
/// as slices of it: nothing is copied.
fn without(body: &Bytes, dropped: &[std::ops::Range<usize>]) -> Vec<Bytes> {
    let mut pieces = Vec::with_capacity(dropped.len() + 1);
    let mut at = 0;
    for range in dropped {
        if range.start < at || range.end > body.len() {
            continue;
        }
        if range.start > at {
            pieces.push(body.slice(at..range.start));
        }
        at = range.end;
    }
    if at < body.len() {
        pieces.push(body.slice(at..));
    }
    pieces
}

/// A list answer (`{"object": "list", "data": [...]}`) with only the
/// objects whose ids are in `mine`.
fn filter_list(answer: &[u8], mine: &[String]) -> Vec<u8> {
    let Ok(mut list) = serde_json::from_slice::<serde_json::Value>(answer) else {
        return br#"{"object":"list","data":[],"has_more":false}"#.to_vec();
    };
    let mine: std::collections::HashSet<&str> = mine.iter().map(String::as_str).collect();
    if let Some(data) = list.get_mut("data").and_then(|d| d.as_array_mut()) {
        data.retain(|o| o["id"].as_str().is_some_and(|id| mine.contains(id)));
        let first = data.first().map(|o| o["id"].clone());
        let last = data.last().map(|o| o["id"].clone());
        if list.get("first_id").is_some() {
            list["first_id"] = first.unwrap_or(serde_json::Value::Null);
        }
        if list.get("last_id").is_some() {
            list["last_id"] = last.unwrap_or(serde_json::Value::Null);
        }
    } else {
        list = serde_json::json!({"object": "list", "data": [], "has_more": false});
    }
    serde_json::to_vec(&list).unwrap_or_default()
}

/// Charges a completed batch to the key that created it, once in the
/// fleet: its output file read line by line for the usage, the charge
/// claimed in the store, a spend row written and, when the creator is
/// known here (`creator`), its budgets settled. Failures are logged (the
/// client has its answer already); an unread output leaves the charge for
/// the next poll.
pub(super) async fn charge_batch(
    worker: &Worker,
    creator: Option<&Principal>,
    upstream: &Upstream,
    batch: &Arc<ManagedObject>,
    output_file: &str,
) {
    if !files::valid_id(output_file) {
        return;
    }
    let started = Utc::now();
    let used = match Box::pin(output_usage(worker, upstream, output_file)).await {
        Ok(used) => used,
        Err(e) => {
            tracing::error!(batch = %batch.id, error = %e, "could not read a batch's output to charge it");
            return;
        }
    };
    match worker.shared.managed.claim_charge(batch).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::error!(batch = %batch.id, error = %e, "could not claim a batch's charge");
            return;
        }
    }
    let model = used.model.unwrap_or_default();
    let price = spend::shipped(&model).map(|m| m.price).unwrap_or_default();
    // LiteLLM's batch price without a `*_batches` entry: half the price.
    let cost = spend::cost(used.usage, price) / 2.0;
    if let Some(principal) = creator.filter(|_| cost > 0.0) {
        let caller = Caller {
            principal,
            end_user: None,
            proxy_budget: worker.shared.auth.keys().proxy_budget(),
            model_windows: worker.shared.auth.keys().end_users().model_windows(),
            budget_windows: worker.shared.auth.keys().budget_windows(),
        };
        let budgets = record::budgets_of(caller, &model);
        let held = if budgets.is_empty() {
            None
        } else {
            Box::pin(crate::budget::Reservation::acquire_shared(
                &worker.shared.limiter,
                &budgets,
                0.0,
                &batch.id,
            ))
            .await
            .ok()
        };
        // A key that opted in to throttling counts the batch on its own
        // budget too, as its LLM calls count.
        let limiter = &worker.shared.limiter;
        let held = record::count_throttled(limiter, super::key_of(principal), held);
        record::settle(&worker.shared.alerts, held, cost, principal);
    }
    record::submit(
        worker,
        batch_row(worker, upstream, batch, &model, used.usage, cost, started),
    );
}

/// The usage of output file `id`, read as it arrives (one line held at a
/// time).
async fn output_usage(
    worker: &Worker,
    upstream: &Upstream,
    id: &str,
) -> Result<files::BatchUsage, GatewayError> {
    let mut total = files::BatchUsage::default();
    Box::pin(each_line(worker, upstream, id, |line| {
        let u = files::batch_usage(line);
        if total.model.is_none() {
            total.model = u.model;
        }
        total.usage = add_usage(total.usage, u.usage);
        total.lines = total.lines.saturating_add(u.lines);
    }))
    .await?;
    Ok(total)
}

/// Calls `f` with each line of file `id`'s content as it arrives (one line
/// held at a time, at most [`MAX_OUTPUT_LINE`] bytes).
async fn each_line(
    worker: &Worker,
    upstream: &Upstream,
    id: &str,
    mut f: impl FnMut(&[u8]),
) -> Result<(), GatewayError> {
    let op = FilesOp::FileContent(id);
    let target = upstream
        .api
        .target(&upstream.base.path, op, "", &upstream.version);
    let head = request_head("GET", upstream, &target, "", 0);
    let deadline = Instant::now() + TIMEOUT;
    let mut resp = Box::pin(worker.upstream.send(&upstream.base, head, &[], deadline))
        .await
        .map_err(|e| unreachable(upstream, e))?;
    if resp.head.status != 200 {
        return Err(GatewayError::UpstreamProtocol {
            provider: upstream.api.name().to_string(),
            reason: format!("the file {id} answered {}", resp.head.status),
        });
    }
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let more = resp
            .next_piece(&mut pending, TIMEOUT)
            .await
            .map_err(|e| unreachable(upstream, e))?;
        let mut start = 0;
        while let Some(end) = memchr::memchr(b'\n', &pending[start..]) {
            f(&pending[start..start + end]);
            start += end + 1;
        }
        pending.drain(..start);
        if pending.len() > MAX_OUTPUT_LINE {
            return Err(GatewayError::UpstreamProtocol {
                provider: upstream.api.name().to_string(),
                reason: format!("a line of file {id} is over {MAX_OUTPUT_LINE} bytes"),
            });
        }
        if !more {
            break;
        }
    }
    f(&pending);
    Ok(())
}

fn add_usage(a: Usage, b: Usage) -> Usage {
    Usage {
        prompt_tokens: a.prompt_tokens.saturating_add(b.prompt_tokens),
        completion_tokens: a.completion_tokens.saturating_add(b.completion_tokens),
        cached_tokens: a.cached_tokens.saturating_add(b.cached_tokens),
        ..a
    }
}

/// The spend row of a batch's charge.
fn batch_row(
    worker: &Worker,
    upstream: &Upstream,
    batch: &ManagedObject,
    model: &str,
    usage: Usage,
    cost: f64,
    started: chrono::DateTime<Utc>,
) -> SpendLogRow {
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let id: Arc<str> = Arc::from(batch.id.as_str());
    let model: Arc<str> = Arc::from(model);
    SpendLogRow {
        request_id: id.clone(),
        call_id: id,
        attempt: 1,
        call_type: Cow::Borrowed("aretrieve_batch"),
        api_key: batch.key.as_str().into(),
        spend: cost,
        total_tokens: tokens(usage.prompt_tokens.saturating_add(usage.completion_tokens)),
        prompt_tokens: tokens(usage.prompt_tokens),
        completion_tokens: tokens(usage.completion_tokens),
        start_time: started,
        completion_start_time: None,
        end_time: Utc::now(),
        model: model.clone(),
        model_id: Arc::from(""),
        model_group: match batch.route.strip_prefix("model:") {
            Some(group) => Arc::from(group),
            None => model,
        },
        custom_llm_provider: Arc::from(upstream.api.name()),
        api_base: Arc::from(upstream.base.url.as_str()),
        region: None,
        user: batch.created_by.clone(),
        team_id: batch.team_id.clone(),
        status: Cow::Borrowed("success"),
        status_code: 200,
        error_class: None,
        error_message: None,
        end_user: None,
        response_id: None,
        proxy_budget: worker.shared.auth.keys().proxy_budget().is_some(),
        cache_hit: false,
        cache_key: None,
        request_tags: None,
        guardrail_information: None,
        proxy_server_request: None,
        response: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateways_form_fields_are_left_out_without_copying() {
        let body = Bytes::from_static(b"--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt\r\n--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--B\r\nContent-Disposition: form-data; name=\"custom_llm_provider\"\r\n\r\nopenai\r\n--B--\r\n");
        let form = form::read(&body, "B").unwrap();
        assert_eq!(form.routing_parts.len(), 2);
        let kept: Vec<u8> = without(&body, &form.routing_parts).concat();
        assert_eq!(
            kept,
            b"--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--B--\r\n"
        );
        let again = form::read(&kept, "B").unwrap();
        assert!(again.model.is_none() && again.purpose.is_some());
    }

    #[test]
    fn lists_keep_only_the_callers_objects() {
        let answer = br#"{"object":"list","data":[{"id":"file-a"},{"id":"file-b"},{"id":"file-c"}],"first_id":"file-a","last_id":"file-c","has_more":false}"#;
        let mine = vec!["file-b".to_string(), "file-c".to_string()];
        let kept: serde_json::Value = serde_json::from_slice(&filter_list(answer, &mine)).unwrap();
        assert_eq!(kept["data"].as_array().unwrap().len(), 2);
        assert_eq!(kept["first_id"], "file-b");
        assert_eq!(kept["last_id"], "file-c");
        let none: serde_json::Value = serde_json::from_slice(&filter_list(b"oops", &mine)).unwrap();
        assert_eq!(none["data"].as_array().unwrap().len(), 0);
    }
}
