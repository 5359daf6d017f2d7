//! Guardrails: LiteLLM's top-level `guardrails:` list, chosen per request
//! and applied to the text of requests (`pre_call`, `during_call`) and of
//! answers (`post_call`). Types built: `litellm_content_filter`
//! ([`filter`], run here; on streams through [`stream`]), and the services
//! `generic_guardrail_api` ([`api`]), `lakera_v2` ([`lakera`]),
//! `presidio` ([`presidio`]), `openai_moderation` ([`moderation`]) and
//! `bedrock` ([`bedrock`]), whose calls the proxy makes; every other type
//! stops start-up.
//!
//! Which run: every `default_on` guardrail (unless the key's or team's
//! `metadata.disable_global_guardrails`), and those named by the request's
//! `guardrails` (a list of names, or an object keyed by them, in the body
//! or in its `metadata`) or by the key's or team's `metadata.guardrails`.
//! A name that is not configured is a 400.

pub mod api;
pub mod bedrock;
mod config;
pub mod filter;
mod gate;
pub mod lakera;
pub mod log;
pub mod moderation;
mod params;
pub mod patterns;
pub mod presidio;
pub mod skim;
pub mod stream;
mod walk;

use crate::error::GatewayError;
use bytes::Bytes;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

/// Finds a request's own `"guardrails"` member; built once, not per request.
static GUARDRAILS_MEMBER: LazyLock<memchr::memmem::Finder<'static>> =
    LazyLock::new(|| memchr::memmem::Finder::new(b"\"guardrails\""));

/// When a guardrail runs (LiteLLM's `mode`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// On the request, before it is routed.
    pub pre: bool,
    /// Beside the upstream call: a service's verdict is awaited before the
    /// answer goes out (a content filter runs before the call, so its mask
    /// is what the model sees).
    pub during: bool,
    /// On the answer.
    pub post: bool,
}

/// One configured guardrail.
#[derive(Debug)]
pub struct Guardrail {
    /// `guardrail_name`.
    pub name: String,
    /// `mode`.
    pub modes: Modes,
    /// `default_on`.
    pub default_on: bool,
    /// What it runs.
    pub kind: Kind,
}

/// What a guardrail runs.
#[derive(Debug)]
pub enum Kind {
    /// `litellm_content_filter`, in process.
    Filter(filter::ContentFilter),
    /// `generic_guardrail_api`: a call to a guardrail service.
    Api(api::GenericApi),
    /// `lakera_v2`: a call to Lakera Guard.
    Lakera(lakera::LakeraV2),
    /// `presidio`: calls to Presidio's analyzer and anonymizer.
    Presidio(presidio::Presidio),
    /// `openai_moderation`: a call to OpenAI's moderation endpoint.
    Moderation(moderation::OpenAiModeration),
    /// `bedrock`: a call to Bedrock's ApplyGuardrail API.
    Bedrock(bedrock::BedrockGuard),
}

impl Guardrail {
    /// Its content filter, when it is one.
    pub fn filter(&self) -> Option<&filter::ContentFilter> {
        match &self.kind {
            Kind::Filter(f) => Some(f),
            _ => None,
        }
    }

    /// Whether it calls a service (which the proxy does).
    pub fn is_service(&self) -> bool {
        !matches!(self.kind, Kind::Filter(_))
    }
}

/// A guardrail service to call and the request's `extra_body` for it.
pub type Service = (Arc<Guardrail>, Option<Value>);

/// Every configured guardrail.
#[derive(Debug, Default)]
pub struct Guardrails {
    list: Vec<Arc<Guardrail>>,
    /// The `guardrails:` section as written, to tell a reload it changed.
    source: String,
}

/// The caller's stored settings: the key's and its team's `metadata`.
#[derive(Default, Clone, Copy)]
pub struct Scope<'a> {
    /// The key's `metadata`.
    pub key: Option<&'a Map<String, Value>>,
    /// Its team's `metadata`.
    pub team: Option<&'a Map<String, Value>>,
}

/// The `post_call` guardrails a request chose, for its answer, and the
/// request's `extra_body` for its services.
#[derive(Debug)]
pub struct PostCall(Vec<Arc<Guardrail>>, Map<String, Value>);

/// What a request's guardrails leave for the rest of its life.
#[derive(Debug, Default)]
pub struct Checked {
    /// Its `post_call` guardrails, for the answer.
    pub post: Option<PostCall>,
    /// The names of every guardrail it runs, comma-separated, in the order
    /// they were chosen (LiteLLM's `x-litellm-applied-guardrails`).
    pub applied: Option<Arc<str>>,
    /// Its `pre_call` guardrail services, in order, to call on the request
    /// before it is routed.
    pub services: Vec<Service>,
    /// Its `during_call` guardrail services (those not also `pre_call`),
    /// in order, to call on the request beside the upstream call.
    pub during: Vec<Service>,
    /// The refusal of a `during_call` content filter (one not also
    /// `pre_call`): LiteLLM runs `during_call` hooks after its rate
    /// limiter admitted the request, so the request is refused only once
    /// the limiter has admitted it (and counts toward its limits).
    pub deferred: Option<GatewayError>,
}

/// Largest number of guardrail names one request may carry.
const MAX_NAMES: usize = 64;

impl Guardrails {
    /// The top-level `guardrails:` section; the error is `(entry, problem)`.
    pub fn from_config(
        section: Option<&serde_yaml::Value>,
    ) -> Result<Guardrails, (String, String)> {
        let Some(section) = section.filter(|v| !v.is_null()) else {
            return Ok(Guardrails::default());
        };
        let entries = section
            .as_sequence()
            .ok_or(("guardrails".to_string(), "must be a list".to_string()))?;
        let mut list: Vec<Arc<Guardrail>> = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let label = match entry.get("guardrail_name").and_then(|n| n.as_str()) {
                Some(name) => format!("guardrails[{i}] (guardrail_name {name:?})"),
                None => format!("guardrails[{i}]"),
            };
            let g = config::guardrail(entry).map_err(|p| (label.clone(), p))?;
            if list.iter().any(|o| o.name == g.name) {
                return Err((label, "guardrail_name is used twice".into()));
            }
            list.push(Arc::new(g));
        }
        Ok(Guardrails {
            list,
            source: serde_yaml::to_string(section).unwrap_or_default(),
        })
    }

    /// Whether no guardrail is configured.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether a guardrail service (not an in-process filter) may run on a
    /// request before its call (`pre_call`).
    pub fn has_pre_call_services(&self) -> bool {
        self.list.iter().any(|g| g.modes.pre && g.is_service())
    }

    /// The `guardrails:` section as written (a reload compares it).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The guardrail named `name`.
    fn named(&self, name: &str) -> Result<&Arc<Guardrail>, GatewayError> {
        self.list
            .iter()
            .find(|g| g.name == name)
            .ok_or_else(|| GatewayError::UnknownGuardrail(name.to_string()))
    }

    /// Runs the request's `pre_call` and `during_call` guardrails on
    /// `body`: the body to send on (masked, without the gateway's own
    /// `guardrails` member) and what the rest of the request needs of them
    /// ([`Checked`]). Each content filter's run goes to `log`.
    /// A `BLOCK` or an unknown name is an error.
    pub fn pre_call(
        &self,
        scope: Scope<'_>,
        body: Bytes,
        log: &mut log::Log,
    ) -> Result<(Bytes, Checked), GatewayError> {
        let stored =
            |m: Option<&Map<String, Value>>| m.is_some_and(|m| m.contains_key("guardrails"));
        let asked = GUARDRAILS_MEMBER.find(&body).is_some();
        if self.list.is_empty() && !asked && !stored(scope.key) && !stored(scope.team) {
            return Ok((body, Checked::default()));
        }
        if !asked {
            // Nothing to read from the body but its texts: they are found
            // in place and only a masked one is written anew.
            let chosen = self.choose(&[], scope)?;
            let (before, mut checked) = plan(&chosen, Map::new());
            if before.is_empty() {
                return Ok((body, checked));
            }
            if let Some(mut texts) = skim::request(&body) {
                for g in &before {
                    let result = filter_in_place(g, pre_hook(g), &mut texts, log);
                    if defer(g, result, &mut checked)? {
                        break;
                    }
                }
                return Ok(match skim::rewritten(&body, &texts) {
                    Some(masked) => (Bytes::from(masked), checked),
                    None => (body, checked),
                });
            }
        }
        let mut doc: Value = serde_json::from_slice(&body)
            .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
        let Some(obj) = doc.as_object_mut() else {
            return Ok((body, Checked::default()));
        };
        let from_body = obj.remove("guardrails");
        let mut extra = Map::new();
        collect_extra(from_body.as_ref(), &mut extra);
        collect_extra(
            obj.get("metadata").and_then(|m| m.get("guardrails")),
            &mut extra,
        );
        let asked = [
            (from_body.as_ref(), "guardrails"),
            (
                obj.get("metadata").and_then(|m| m.get("guardrails")),
                "metadata.guardrails",
            ),
        ];
        let chosen = self.choose(&asked, scope)?;
        let mut changed = from_body.is_some();
        let (before, mut checked) = plan(&chosen, extra);
        // Each filter over the whole request in turn, as LiteLLM runs each
        // guardrail's hook, so each run has its own outcome and time.
        for g in &before {
            let result = logged(g, pre_hook(g), log, |visit| walk::request(&mut doc, visit));
            changed |= result.as_ref().is_ok_and(|&masked| masked);
            if defer(g, result, &mut checked)? {
                break;
            }
        }
        if !changed {
            return Ok((body, checked));
        }
        let rewritten = serde_json::to_vec(&doc)
            .map_err(|_| GatewayError::Internal("re-encoding a guarded body failed"))?;
        Ok((Bytes::from(rewritten), checked))
    }
}

/// What the guardrails `chosen` for a request do to it: its content
/// filters to run before it is routed (the `pre_call` ones first, then
/// the `during_call` ones, as LiteLLM's hooks come one after the other),
/// and the rest ([`Checked`]), with the request's `extra_body` for each
/// service.
fn plan<'g>(
    chosen: &[&'g Arc<Guardrail>],
    extra: Map<String, Value>,
) -> (Vec<&'g Arc<Guardrail>>, Checked) {
    let filters = || chosen.iter().copied().filter(|g| g.filter().is_some());
    let before: Vec<&Arc<Guardrail>> = filters()
        .filter(|g| g.modes.pre)
        .chain(filters().filter(|g| g.modes.during && !g.modes.pre))
        .collect();
    let services: Vec<Service> = chosen
        .iter()
        .filter(|g| g.modes.pre && g.is_service())
        .map(|g| (Arc::clone(g), extra_body(&extra, &g.name)))
        .collect();
    let during: Vec<Service> = chosen
        .iter()
        .filter(|g| g.modes.during && !g.modes.pre && g.is_service())
        .map(|g| (Arc::clone(g), extra_body(&extra, &g.name)))
        .collect();
    let post: Vec<Arc<Guardrail>> = chosen
        .iter()
        .filter(|g| g.modes.post)
        .map(|g| Arc::clone(g))
        .collect();
    let checked = Checked {
        services,
        during,
        post: (!post.is_empty()).then_some(PostCall(post, extra)),
        applied: applied(chosen),
        deferred: None,
    };
    (before, checked)
}

/// The outcome of content filter `g` on the request: a `pre_call` one's
/// refusal is the error; a `during_call` one's is kept in `checked` for
/// after the limiter's admission, and `true` says no later filter runs
/// (LiteLLM's `during_call` hooks end with the first refusal).
fn defer(
    g: &Guardrail,
    result: Result<impl Sized, GatewayError>,
    checked: &mut Checked,
) -> Result<bool, GatewayError> {
    match result {
        Ok(_) => Ok(false),
        Err(refusal) if pre_hook(g) == log::Hook::During => {
            checked.deferred = Some(refusal);
            Ok(true)
        }
        Err(refusal) => Err(refusal),
    }
}

/// The hook a request's content filter runs in: `pre_call`, else
/// `during_call` (which runs before the call too; its refusal waits for
/// the limiter's admission, see [`Checked::deferred`]).
fn pre_hook(g: &Guardrail) -> log::Hook {
    match g.modes.pre {
        true => log::Hook::Pre,
        false => log::Hook::During,
    }
}

/// Runs content filter `g` on `texts` found in place, marking those it
/// masks, its run in `log`; its refusal on a `BLOCK`.
fn filter_in_place(
    g: &Arc<Guardrail>,
    hook: log::Hook,
    texts: &mut [skim::Text<'_>],
    log: &mut log::Log,
) -> Result<(), GatewayError> {
    let Some(f) = g.filter() else {
        return Ok(());
    };
    let began = std::time::Instant::now();
    let mut result = Ok(false);
    for t in texts.iter_mut() {
        match f.apply(&t.text) {
            Ok(Cow::Owned(new)) => {
                t.text = Cow::Owned(new);
                t.changed = true;
                result = Ok(true);
            }
            Ok(Cow::Borrowed(_)) => {}
            Err(err) => {
                result = Err(err);
                break;
            }
        }
    }
    log.push(log::Run::ended(g, hook, log::outcome_of(&result), began));
    result.map(drop)
}

impl Guardrails {
    /// The guardrails a request runs: those the request names (`asked`:
    /// its lists and the parameter each is read from), its key's and its
    /// team's, then every `default_on` one unless the key or team has
    /// `disable_global_guardrails`; each once, in that order.
    fn choose<'g>(
        &'g self,
        asked: &[(Option<&Value>, &'static str)],
        scope: Scope<'_>,
    ) -> Result<Vec<&'g Arc<Guardrail>>, GatewayError> {
        let mut names: Vec<&str> = Vec::new();
        let stored = [
            (
                scope.key.and_then(|m| m.get("guardrails")),
                "key metadata.guardrails",
            ),
            (
                scope.team.and_then(|m| m.get("guardrails")),
                "team metadata.guardrails",
            ),
        ];
        for &(list, param) in asked.iter().chain(stored.iter()) {
            read_names(list, param, &mut names)?;
        }
        let disabled = [scope.key, scope.team]
            .iter()
            .flatten()
            .any(|m| m.get("disable_global_guardrails") == Some(&Value::Bool(true)));
        let mut chosen: Vec<&Arc<Guardrail>> = Vec::new();
        for name in &names {
            let g = self.named(name)?;
            if !chosen.iter().any(|c| Arc::ptr_eq(c, g)) {
                chosen.push(g);
            }
        }
        if !disabled {
            for g in self.list.iter().filter(|g| g.default_on) {
                if !chosen.iter().any(|c| Arc::ptr_eq(c, g)) {
                    chosen.push(g);
                }
            }
        }
        Ok(chosen)
    }

    /// The guardrails of a realtime session (`/v1/realtime`): its key's
    /// and team's and the `default_on` ones; `None` when none applies.
    pub fn session(&self, scope: Scope<'_>) -> Result<Option<SessionRails>, GatewayError> {
        let chosen = self.choose(&[], scope)?;
        if chosen.is_empty() {
            return Ok(None);
        }
        let no_extra = Map::new();
        let services = |on: fn(&Modes) -> bool| -> Vec<Service> {
            chosen
                .iter()
                .filter(|g| on(&g.modes) && g.is_service())
                .map(|g| (Arc::clone(g), extra_body(&no_extra, &g.name)))
                .collect()
        };
        let post: Vec<Arc<Guardrail>> = chosen
            .iter()
            .filter(|g| g.modes.post)
            .map(|g| Arc::clone(g))
            .collect();
        Ok(Some(SessionRails {
            before: chosen
                .iter()
                .filter(|g| (g.modes.pre || g.modes.during) && g.filter().is_some())
                .map(|g| Arc::clone(g))
                .collect(),
            services: services(|m| m.pre || m.during),
            post: (!post.is_empty()).then_some(PostCall(post, Map::new())),
            applied: applied(&chosen),
        }))
    }
}

/// The guardrails of a realtime session. A session has no body to name
/// them in: they come from its key, its team and `default_on`.
#[derive(Debug)]
pub struct SessionRails {
    /// Its `pre_call` and `during_call` content filters, run on the
    /// client's texts before they are sent on.
    before: Vec<Arc<Guardrail>>,
    /// Its `pre_call` and `during_call` guardrail services, called on the
    /// client's texts before they are sent on (a session's texts have no
    /// call to run beside).
    pub services: Vec<Service>,
    /// Its `post_call` guardrails, for the model's text.
    pub post: Option<PostCall>,
    /// The names of every guardrail it runs, comma-separated.
    pub applied: Option<Arc<str>>,
}

impl SessionRails {
    /// Runs the content filters on a client event's `texts`, each filter
    /// over all of them in turn with its run in `log`: whether they masked
    /// one, or the refusal of a `BLOCK`.
    pub fn client_texts(
        &self,
        texts: &mut [String],
        log: &mut log::Log,
    ) -> Result<bool, GatewayError> {
        let mut changed = false;
        for g in &self.before {
            let hook = match g.modes.pre {
                true => log::Hook::Pre,
                false => log::Hook::During,
            };
            changed |= logged(g, hook, log, |visit| texts.iter_mut().try_for_each(visit))?;
        }
        Ok(changed)
    }
}

/// The `x-litellm-applied-guardrails` value naming `chosen`.
fn applied(chosen: &[&Arc<Guardrail>]) -> Option<Arc<str>> {
    (!chosen.is_empty()).then(|| {
        let names: Vec<&str> = chosen.iter().map(|g| g.name.as_str()).collect();
        Arc::from(names.join(","))
    })
}

impl PostCall {
    /// The window that checks a streamed answer.
    pub fn stream(&self) -> stream::StreamCheck {
        stream::StreamCheck::new(self.0.clone())
    }

    /// Its guardrail services, in order, for a whole answer.
    pub fn services(&self) -> Vec<Service> {
        self.0
            .iter()
            .filter(|g| g.is_service())
            .map(|g| (Arc::clone(g), extra_body(&self.1, &g.name)))
            .collect()
    }

    /// Runs the content filters on a whole answer: `Borrowed` when nothing
    /// changed, the masked answer, or the refusal. Each run goes to `log`.
    pub fn answer<'b>(
        &self,
        body: &'b [u8],
        log: &mut log::Log,
    ) -> Result<Cow<'b, [u8]>, GatewayError> {
        if self.0.iter().all(|g| g.filter().is_none()) {
            return Ok(Cow::Borrowed(body));
        }
        // Its texts found in place; only a masked one is written anew.
        if let Some(mut texts) = skim::answer(body) {
            for g in self.0.iter().filter(|g| g.filter().is_some()) {
                filter_in_place(g, log::Hook::Post, &mut texts, log)?;
            }
            return Ok(match skim::rewritten(body, &texts) {
                Some(masked) => Cow::Owned(masked),
                None => Cow::Borrowed(body),
            });
        }
        let Ok(mut doc) = serde_json::from_slice::<Value>(body) else {
            return Err(GatewayError::Internal(
                "the answer could not be read for its post_call guardrails",
            ));
        };
        let mut changed = false;
        for g in self.0.iter().filter(|g| g.filter().is_some()) {
            changed |= logged(g, log::Hook::Post, log, |visit| {
                walk::answer(&mut doc, visit)
            })?;
        }
        if !changed {
            return Ok(Cow::Borrowed(body));
        }
        serde_json::to_vec(&doc)
            .map(Cow::Owned)
            .map_err(|_| GatewayError::Internal("re-encoding a guarded answer failed"))
    }
}

/// The texts of a request body, in the order [`set_request_texts`] takes
/// them back.
pub fn request_texts(doc: &mut Value) -> Vec<String> {
    let mut texts = Vec::new();
    let _ = walk::request(doc, &mut |t| {
        texts.push(t.clone());
        Ok(())
    });
    texts
}

/// Puts `texts` back into a request body, in [`request_texts`]' order.
pub fn set_request_texts(doc: &mut Value, texts: Vec<String>) {
    let mut texts = texts.into_iter();
    let _ = walk::request(doc, &mut |t| {
        if let Some(new) = texts.next() {
            *t = new;
        }
        Ok(())
    });
}

/// The texts of a whole answer, in the order [`set_answer_texts`] takes
/// them back.
pub fn answer_texts(doc: &mut Value) -> Vec<String> {
    let mut texts = Vec::new();
    let _ = walk::answer(doc, &mut |t| {
        texts.push(t.clone());
        Ok(())
    });
    texts
}

/// Puts `texts` back into a whole answer, in [`answer_texts`]' order.
pub fn set_answer_texts(doc: &mut Value, texts: Vec<String>) {
    let mut texts = texts.into_iter();
    let _ = walk::answer(doc, &mut |t| {
        if let Some(new) = texts.next() {
            *t = new;
        }
        Ok(())
    });
}

/// The `extra_body` a request gives guardrail `name`.
fn extra_body(extra: &Map<String, Value>, name: &str) -> Option<Value> {
    extra.get(name).and_then(|e| e.get("extra_body")).cloned()
}

/// The `{name: {extra_body}}` entries of a request's `guardrails` (an
/// object, or a list whose items may be such objects).
fn collect_extra(list: Option<&Value>, extra: &mut Map<String, Value>) {
    let objects: Vec<&Map<String, Value>> = match list {
        Some(Value::Object(o)) => vec![o],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_object).collect(),
        _ => Vec::new(),
    };
    for o in objects {
        for (name, v) in o {
            if extra.len() < MAX_NAMES {
                extra.insert(name.clone(), v.clone());
            }
        }
    }
}

/// Runs content filter `g` on every text `walk` visits, its run in
/// `log`: whether it masked one, or its refusal.
fn logged(
    g: &Arc<Guardrail>,
    hook: log::Hook,
    log: &mut log::Log,
    walk: impl FnOnce(&mut walk::Visit<'_>) -> Result<(), GatewayError>,
) -> Result<bool, GatewayError> {
    let Some(f) = g.filter() else {
        return Ok(false);
    };
    let began = std::time::Instant::now();
    let mut masked = false;
    let result = walk(&mut |text: &mut String| {
        if let Cow::Owned(new) = f.apply(text)? {
            *text = new;
            masked = true;
        }
        Ok(())
    })
    .map(|()| masked);
    log.push(log::Run::ended(g, hook, log::outcome_of(&result), began));
    result
}

/// Appends the guardrail names of `list`: a list of names, or an object
/// keyed by them (LiteLLM's `{name: {extra_body}}`).
fn read_names<'a>(
    list: Option<&'a Value>,
    param: &'static str,
    names: &mut Vec<&'a str>,
) -> Result<(), GatewayError> {
    let bad = |message: &str| GatewayError::InvalidParam {
        param,
        message: message.to_string(),
    };
    match list {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for item in items {
                match item {
                    Value::String(name) => names.push(name),
                    // LiteLLM's `[{name: {extra_body}}]`.
                    Value::Object(by_name) => names.extend(by_name.keys().map(String::as_str)),
                    _ => return Err(bad("must be a list of guardrail names")),
                }
            }
        }
        Some(Value::Object(by_name)) => names.extend(by_name.keys().map(String::as_str)),
        Some(_) => return Err(bad("must be a list of guardrail names")),
    }
    if names.len() > MAX_NAMES {
        return Err(bad("names too many guardrails"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rails(yaml: &str) -> Guardrails {
        Guardrails::from_config(Some(&serde_yaml::from_str(yaml).unwrap())).unwrap()
    }

    const CONFIG: &str = r#"
- guardrail_name: pii-mask
  litellm_params: {guardrail: litellm_content_filter, mode: pre_call, default_on: true,
    patterns: [{pattern_type: prebuilt, pattern_name: email, action: MASK}]}
- guardrail_name: no-ssn
  litellm_params: {guardrail: litellm_content_filter, mode: pre_call,
    patterns: [{pattern_type: prebuilt, pattern_name: us_ssn, action: BLOCK}]}
- guardrail_name: out
  litellm_params: {guardrail: litellm_content_filter, mode: post_call,
    blocked_words: [{keyword: secret, action: MASK}]}
"#;

    fn pre(g: &Guardrails, scope: Scope<'_>, body: &str) -> Result<(String, bool), GatewayError> {
        let mut log = log::Log::default();
        let (b, checked) = g.pre_call(scope, Bytes::from(body.to_string()), &mut log)?;
        Ok((
            String::from_utf8(b.to_vec()).unwrap(),
            checked.post.is_some(),
        ))
    }

    #[test]
    fn default_on_masks_and_named_ones_join_by_body_or_key() {
        let g = rails(CONFIG);
        let (body, post) = pre(
            &g,
            Scope::default(),
            r#"{"model":"m","messages":[{"role":"user","content":"a@b.io 123-45-6789"}]}"#,
        )
        .unwrap();
        assert!(
            body.contains("[EMAIL_REDACTED] 123-45-6789") && !post,
            "{body}"
        );
        let err = pre(&g, Scope::default(), r#"{"model":"m","guardrails":["no-ssn"],"messages":[{"role":"user","content":"123-45-6789"}]}"#).unwrap_err();
        assert_eq!(err.status(), 400);
        let mut key = Map::new();
        key.insert("guardrails".into(), serde_json::json!(["no-ssn", "out"]));
        let scope = Scope {
            key: Some(&key),
            team: None,
        };
        assert!(pre(
            &g,
            scope,
            r#"{"model":"m","messages":[{"role":"user","content":"123-45-6789"}]}"#
        )
        .is_err());
        let (_, post) = pre(&g, scope, r#"{"model":"m","messages":[]}"#).unwrap();
        assert!(post);
    }

    #[test]
    fn the_gateways_own_member_is_cut_and_unknown_names_refused() {
        let g = rails(CONFIG);
        let (body, _) = pre(
            &g,
            Scope::default(),
            r#"{"model":"m","guardrails":{"pii-mask":{}},"messages":[]}"#,
        )
        .unwrap();
        assert!(!body.contains("guardrails"), "{body}");
        let err = pre(
            &g,
            Scope::default(),
            r#"{"model":"m","metadata":{"guardrails":["nope"]},"messages":[]}"#,
        )
        .unwrap_err();
        assert!(err.to_string().contains("nope"));
        let none = Guardrails::default();
        assert!(pre(
            &none,
            Scope::default(),
            r#"{"model":"m","guardrails":["x"]}"#
        )
        .is_err());
        let (body, _) = pre(&none, Scope::default(), r#"{"model":"m" , "messages":[]}"#).unwrap();
        assert_eq!(
            body, r#"{"model":"m" , "messages":[]}"#,
            "untouched when nothing applies"
        );
    }

    #[test]
    fn a_masked_body_keeps_every_byte_but_the_masked_text() {
        let g = rails(CONFIG);
        let body = r#"{ "model": "m", "stream": false, "messages": [ {"role": "user", "content": "write a@b.io"}, {"role": "user", "content": "keep \"this\""} ] }"#;
        let (out, _) = pre(&g, Scope::default(), body).unwrap();
        assert_eq!(
            out,
            r#"{ "model": "m", "stream": false, "messages": [ {"role": "user", "content": "write [EMAIL_REDACTED]"}, {"role": "user", "content": "keep \"this\""} ] }"#
        );
        let (_, checked) = g
            .pre_call(
                Scope::default(),
                Bytes::from_static(br#"{"model":"m","guardrails":["out"],"messages":[]}"#),
                &mut log::Log::default(),
            )
            .unwrap();
        let answer = br#"{"id": "c", "choices": [{"message": {"role": "assistant", "content": "the secret"}, "index": 0}]}"#;
        let out = checked
            .post
            .unwrap()
            .answer(answer, &mut log::Log::default())
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out),
            r#"{"id": "c", "choices": [{"message": {"role": "assistant", "content": "the [KEYWORD_REDACTED]"}, "index": 0}]}"#
        );
    }

    #[test]
    fn a_during_call_filters_block_waits_for_admission_and_a_pre_calls_does_not() {
        let g = rails(
            r#"
- guardrail_name: during
  litellm_params: {guardrail: litellm_content_filter, mode: during_call,
    blocked_words: [{keyword: falcon, action: BLOCK}]}
- guardrail_name: pre
  litellm_params: {guardrail: litellm_content_filter, mode: pre_call,
    patterns: [{pattern_type: prebuilt, pattern_name: email, action: MASK}],
    blocked_words: [{keyword: eagle, action: BLOCK}]}
"#,
        );
        let body = |text: &str, names: &str| {
            format!(
                r#"{{"model":"m","guardrails":{names},"messages":[{{"role":"user","content":"{text}"}}]}}"#
            )
        };
        let key = |names: Value| {
            let mut m = Map::new();
            m.insert("guardrails".into(), names);
            m
        };
        let stored = key(serde_json::json!(["during", "pre"]));
        let scopes = [
            Scope::default(),
            Scope {
                key: Some(&stored),
                team: None,
            },
        ];
        for (scope, names) in scopes.into_iter().zip([r#"["during","pre"]"#, "[]"]) {
            // The body read in place (names on the key) and parsed
            // (names in the body) alike.
            let names = if scope.key.is_some() {
                None
            } else {
                Some(names)
            };
            let text = |t: &str| match names {
                Some(n) => body(t, n),
                None => {
                    format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{t}"}}]}}"#)
                }
            };
            let mut log = log::Log::default();
            let (sent, checked) = g
                .pre_call(scope, Bytes::from(text("falcon a@b.io")), &mut log)
                .unwrap();
            // The pre_call mask ran first and the body goes on; the
            // during_call refusal is kept for after admission.
            assert!(
                String::from_utf8_lossy(&sent).contains("falcon [EMAIL_REDACTED]"),
                "{sent:?}"
            );
            let refusal = checked.deferred.expect("the during_call block is kept");
            assert_eq!(refusal.status(), 400);
            let runs: Value = serde_json::from_str(&log.information().unwrap()).unwrap();
            let modes: Vec<_> = runs
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["guardrail_mode"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(modes, ["pre_call", "during_call"]);
            // A pre_call block is the error at once.
            let err = g
                .pre_call(scope, Bytes::from(text("eagle falcon")), &mut log)
                .unwrap_err();
            assert!(err.to_string().contains("eagle"), "{err}");
        }
    }

    #[test]
    fn disable_global_guardrails_skips_default_on_ones() {
        let g = rails(CONFIG);
        let mut key = Map::new();
        key.insert("disable_global_guardrails".into(), Value::Bool(true));
        let scope = Scope {
            key: Some(&key),
            team: None,
        };
        let (body, _) = pre(
            &g,
            scope,
            r#"{"model":"m","messages":[{"role":"user","content":"a@b.io"}]}"#,
        )
        .unwrap();
        assert!(body.contains("a@b.io"));
    }

    #[test]
    fn post_call_on_a_stream_is_kept_and_on_an_answer_masks() {
        let g = rails(CONFIG);
        let (_, post) = pre(
            &g,
            Scope::default(),
            r#"{"model":"m","stream":true,"guardrails":["out"],"messages":[]}"#,
        )
        .unwrap();
        assert!(post, "a stream keeps its post_call guardrails");
        let (_, checked) = g
            .pre_call(
                Scope::default(),
                Bytes::from_static(br#"{"model":"m","guardrails":["out"],"messages":[]}"#),
                &mut log::Log::default(),
            )
            .unwrap();
        // Every guardrail that runs is named, in the order chosen: the
        // request's, then the default-on ones.
        assert_eq!(checked.applied.as_deref(), Some("out,pii-mask"));
        let post = checked.post.unwrap();
        let answer = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"the Secret is"}}]}"#;
        let mut log = log::Log::default();
        let out = post.answer(answer, &mut log).unwrap();
        let runs: Value = serde_json::from_str(&log.information().unwrap()).unwrap();
        assert_eq!(runs[0]["guardrail_name"], "out");
        assert_eq!(runs[0]["guardrail_mode"], "post_call");
        assert_eq!(runs[0]["guardrail_response"], "mask");
        assert!(String::from_utf8_lossy(&out).contains("the [KEYWORD_REDACTED] is"));
        let clean = br#"{"choices":[{"message":{"content":"fine"}}]}"#;
        assert!(matches!(
            post.answer(clean, &mut log).unwrap(),
            Cow::Borrowed(_)
        ));
    }
}
