//! What a request keeps between its attempts: the body as received, the
//! forms of it made for some providers, and the body for its prompt
//! estimate. All of it is let go once an answer streams to the client, as
//! no attempt can follow then and a stream may stay open for minutes.

use super::images::{self, Inlined};
use crate::deployment::Deployment;
use crate::error::GatewayError;
use crate::formats::Format;
use crate::inbound::LlmRequest;
use crate::providers;
use crate::spend::{self, PromptEstimate};
use crate::state::Worker;
use bytes::Bytes;

/// Which form of the request an attempt sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// The request as received.
    Received,
    /// The request translated to the internal form (see
    /// `convert::make_internal`).
    Internal,
    /// The request with its images by URL inlined (see `images::inline`).
    Inlined,
}

/// A request and what its attempts make of it, made once and reused.
pub(super) struct Held {
    /// The request as received.
    pub req: LlmRequest,
    /// Its prompt estimate.
    pub prompt: PromptEstimate,
    /// The body with `stream_options.include_usage` added, for a streamed
    /// request in OpenAI's format (see `spend::inject_include_usage`).
    with_usage: Option<Bytes>,
    /// The request in the internal form, when a provider needed it (boxed,
    /// as the next: rare, and large in a future's state).
    internal: Option<Box<LlmRequest>>,
    /// The request with images by URL inlined, when a provider needed it.
    inlined: Option<Box<Inlined>>,
    /// The other requests an attempt may send: those of the fallbacks that
    /// bring their own parameters, by group, and the one received (`None`)
    /// while one of those is in `req`.
    parked: Vec<(Option<String>, LlmRequest)>,
    /// The group whose own request is in `req` (`None`: the one received).
    current: Option<String>,
    /// What LiteLLM's mock testing parameters ask for (see `mock_params`).
    pub mock: Option<super::mock_params::Ask>,
    /// The rest of a streamed upload, whose `req.body` is only the form's
    /// first bytes (see `upload`).
    pub upload: Option<Box<super::upload::StreamedBody>>,
}

impl Held {
    /// Holds `req` for the attempts to come.
    pub fn new(req: LlmRequest) -> Held {
        let prompt = PromptEstimate::new(req.body.clone());
        // A form's file is audio, not a prompt.
        if req.is_form() {
            prompt.know(0);
        }
        // Counted when the body was read for routing.
        if let Some(chars) = req.prompt_chars {
            prompt.know(spend::estimate_of_read_input(chars, None, None));
        }
        Held {
            prompt,
            req,
            with_usage: None,
            internal: None,
            inlined: None,
            parked: Vec::new(),
            current: None,
            mock: None,
            upload: None,
        }
    }

    /// Keeps `req`, the request a fallback entry of the request's
    /// `fallbacks` brings, for the attempts in `group`.
    pub fn park(&mut self, group: String, req: LlmRequest) {
        self.parked.push((Some(group), req));
    }

    /// Puts in place the request an attempt in `group` sends: its fallback
    /// entry's own one (see [`Held::park`]) when it has one, else the one
    /// received. The forms made of the one it replaces are let go.
    pub fn use_for(&mut self, group: Option<&str>) {
        let wanted = group.filter(|g| self.parked.iter().any(|(p, _)| p.as_deref() == Some(*g)));
        if wanted == self.current.as_deref() {
            return;
        }
        let Some(at) = self.parked.iter().position(|(p, _)| p.as_deref() == wanted) else {
            return;
        };
        let (name, req) = &mut self.parked[at];
        std::mem::swap(req, &mut self.req);
        let now = name.take();
        *name = std::mem::replace(&mut self.current, now);
        self.with_usage = None;
        self.internal = None;
        self.inlined = None;
        self.ask_for_usage();
    }

    /// Makes the body with `stream_options.include_usage` added, for a
    /// streamed request in OpenAI's format; before the first attempt. The
    /// same pass over the body gives the prompt estimate, which
    /// [`Held::release`] would otherwise compute in one more.
    pub fn ask_for_usage(&mut self) {
        // A Messages request gets its usage chunk from its translation.
        let req = &self.req;
        if !(req.stream && req.endpoint.format() == Format::OpenAi) {
            return;
        }
        let (with_usage, estimate) = spend::inject_include_usage_estimating(&req.body);
        self.with_usage = with_usage.map(Bytes::from);
        if let Some(tokens) = estimate {
            self.prompt.know(tokens);
        }
    }

    /// Makes the form of the request `dep` takes, when not made yet, and
    /// says which it is.
    pub async fn prepare(
        &mut self,
        worker: &Worker,
        dep: &Deployment,
    ) -> Result<Form, GatewayError> {
        let internal = super::convert::make_internal(&self.req, dep, &mut self.internal)?;
        let Some(provider) = providers::http_provider(dep.provider) else {
            return Ok(internal);
        };
        let sent = match internal {
            Form::Internal => self.internal.as_deref().unwrap_or(&self.req),
            _ => &self.req,
        };
        let usage_chunk = self.with_usage.is_some();
        let kind = (provider, dep.provider);
        let inline = images::inline(worker, kind, sent, usage_chunk, &mut self.inlined);
        Ok(match inline.await? {
            Some(_) => Form::Inlined,
            None => internal,
        })
    }

    /// The request in `form`, with its body with
    /// `stream_options.include_usage` added when there is one; an error
    /// when that form was not made (see [`Held::prepare`]) or was let go.
    pub fn sent(&self, form: Form) -> Result<(&LlmRequest, Option<&Bytes>), GatewayError> {
        let missing = GatewayError::Internal("the request's form for this attempt is missing");
        match form {
            Form::Received => Ok((&self.req, self.with_usage.as_ref())),
            Form::Internal => self
                .internal
                .as_deref()
                .map(|req| (req, self.with_usage.as_ref()))
                .ok_or(missing),
            Form::Inlined => self
                .inlined
                .as_ref()
                .map(|done| (&done.req, done.with_usage.as_ref()))
                .ok_or(missing),
        }
    }

    /// Lets go of every body kept for another attempt, once none can
    /// follow: the prompt estimate is computed first if it was not yet.
    /// The request's other fields stay.
    pub fn release(&mut self) {
        self.prompt.release();
        self.req.body = Bytes::new();
        self.with_usage = None;
        self.internal = None;
        self.inlined = None;
        self.parked = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbound::Endpoint;

    fn streamed_chat() -> (Bytes, Held) {
        let body = Bytes::from(
            br#"{"model":"g","stream":true,"messages":[{"role":"user","content":"hello there"}]}"#
                .to_vec(),
        );
        let req = LlmRequest::parse(Endpoint::ChatCompletions, body.clone()).unwrap();
        let mut held = Held::new(req);
        held.ask_for_usage();
        (body, held)
    }

    #[test]
    fn a_streamed_request_keeps_both_bodies_for_another_attempt() {
        let (body, held) = streamed_chat();
        assert!(!body.is_unique());
        let (sent, with_usage) = held.sent(Form::Received).unwrap();
        assert_eq!(sent.body, body);
        let with_usage = with_usage.expect("stream_options added");
        assert!(with_usage.ends_with(br#""stream_options":{"include_usage":true}}"#));
        // Forms never made are an error, not another form.
        assert!(held.sent(Form::Internal).is_err());
        assert!(held.sent(Form::Inlined).is_err());
    }

    #[test]
    fn released_the_request_holds_no_body_and_its_estimate_stays() {
        let (body, mut held) = streamed_chat();
        held.release();
        // The caller's handle is the last one: the request let go of it.
        assert!(body.is_unique());
        let (sent, with_usage) = held.sent(Form::Received).unwrap();
        assert!(sent.body.is_empty() && with_usage.is_none());
        assert_eq!(sent.model, "g");
        assert!(sent.stream);
        // "hello there": 11 characters, a quarter rounded up.
        assert_eq!(held.prompt.get(), 3);
    }
}
