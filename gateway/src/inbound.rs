//! The client's LLM request: which endpoint, and the few body fields routing
//! needs, read through a borrowed view so the body is never re-serialized.

use crate::error::GatewayError;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::ops::Range;

pub mod form;
pub mod form_tail;
mod media;
pub(crate) mod prompt_chars;
mod skim;

pub use media::{ImageAsk, MediaAsk};

/// The OpenAI endpoints the gateway proxies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/chat/completions`.
    ChatCompletions,
    /// `/v1/completions`.
    Completions,
    /// `/v1/embeddings`.
    Embeddings,
    /// `/v1/messages`: Anthropic's Messages API.
    Messages,
    /// `/v1/responses`: OpenAI's Responses API.
    Responses,
    /// `/v1/rerank` (also `/rerank`, `/v2/rerank`): LiteLLM's rerank API,
    /// which is Cohere's.
    Rerank,
    /// `/v1/moderations`: OpenAI's moderation API.
    Moderations,
    /// `/v1/images/generations`: OpenAI's image generation API.
    ImageGenerations,
    /// `/v1/audio/speech`: OpenAI's text to speech API.
    AudioSpeech,
    /// `/v1/audio/transcriptions`: OpenAI's speech to text API (a
    /// multipart form).
    AudioTranscriptions,
    /// `/v1/audio/translations`: OpenAI's speech to English text API (a
    /// multipart form, as transcriptions).
    AudioTranslations,
    /// `/v1/images/edits`: OpenAI's image edit API (a multipart form).
    ImageEdits,
}

impl Endpoint {
    /// Path of this endpoint below a provider's OpenAI-style base URL.
    pub fn path_suffix(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Completions => "/completions",
            Endpoint::Embeddings => "/embeddings",
            Endpoint::Messages => "/messages",
            Endpoint::Responses => "/responses",
            Endpoint::Rerank => "/rerank",
            Endpoint::Moderations => "/moderations",
            Endpoint::ImageGenerations => "/images/generations",
            Endpoint::AudioSpeech => "/audio/speech",
            Endpoint::AudioTranscriptions => "/audio/transcriptions",
            Endpoint::AudioTranslations => "/audio/translations",
            Endpoint::ImageEdits => "/images/edits",
        }
    }

    /// Whether the body is a `multipart/form-data` form (audio uploads,
    /// image edits) rather than JSON.
    pub fn takes_form(self) -> bool {
        matches!(
            self,
            Endpoint::AudioTranscriptions | Endpoint::AudioTranslations | Endpoint::ImageEdits
        )
    }

    /// Whether its answer has no completion tokens to reserve (embeddings,
    /// rerank, moderations, images, audio): only the input counts.
    pub fn writes_no_tokens(self) -> bool {
        matches!(
            self,
            Endpoint::Embeddings
                | Endpoint::Rerank
                | Endpoint::Moderations
                | Endpoint::ImageGenerations
                | Endpoint::AudioSpeech
                | Endpoint::AudioTranscriptions
                | Endpoint::AudioTranslations
                | Endpoint::ImageEdits
        )
    }

    /// The format the client speaks on this endpoint.
    pub fn format(self) -> crate::formats::Format {
        match self {
            Endpoint::Messages => crate::formats::Format::Anthropic,
            Endpoint::Responses => crate::formats::Format::Responses,
            // LiteLLM's rerank request and answer are Cohere's.
            Endpoint::Rerank => crate::formats::Format::Cohere,
            _ => crate::formats::Format::OpenAi,
        }
    }

    /// The body field that carries the input, required on this endpoint.
    fn input_field(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions | Endpoint::Messages => "messages",
            Endpoint::Completions | Endpoint::ImageGenerations => "prompt",
            Endpoint::Embeddings
            | Endpoint::Responses
            | Endpoint::Moderations
            | Endpoint::AudioSpeech => "input",
            Endpoint::AudioTranscriptions | Endpoint::AudioTranslations => "file",
            Endpoint::ImageEdits => "image",
            Endpoint::Rerank => "query",
        }
    }
}

/// A validated LLM request whose body is kept as received.
#[derive(Debug)]
pub struct LlmRequest {
    /// The endpoint called.
    pub endpoint: Endpoint,
    /// The body as received.
    pub body: Bytes,
    /// Byte range of the `model` value (with its quotes) inside `body`.
    pub model_span: Range<usize>,
    /// The requested model (group) name.
    pub model: String,
    /// `stream: true`.
    pub stream: bool,
    /// The output the request may cost: `max_completion_tokens` (else
    /// `max_tokens`) times `n`, when the client set a cap.
    pub max_tokens: Option<u64>,
    /// LiteLLM's per-request `fallbacks` (removed from the forwarded body).
    pub fallbacks: Option<serde_json::Value>,
    /// LiteLLM's per-request `num_retries` (removed from the forwarded body).
    pub num_retries: Option<u32>,
    /// The body's `user` (`metadata.user_id` on Messages): LiteLLM's end
    /// user, a rate-limit scope.
    pub end_user: Option<String>,
    /// LiteLLM's per-request cache controls, `cache` (removed from the
    /// forwarded body; the response cache reads them).
    pub cache: Option<serde_json::Value>,
    /// LiteLLM's request tags: `tags` (removed from the forwarded body),
    /// else `metadata.tags`; tag-based routing reads them.
    pub tags: Vec<String>,
    /// The request's own `turn_off_message_logging` (top level, else in
    /// `metadata`, else in `litellm_metadata`), which redacts its spend-log
    /// row; removed from the forwarded body wherever it stands.
    pub message_logging_off: Option<bool>,
    /// Headers of the client's request that a provider of the client's own
    /// format receives too (`anthropic-version`, `anthropic-beta`).
    pub forward_headers: Vec<(&'static str, String)>,
    /// What a media request asks for, which its price depends on (`None`
    /// on other endpoints).
    pub media: Option<MediaAsk>,
    /// LiteLLM's mock testing parameters the body carried, each with its
    /// JSON text (cut out of the forwarded body; refused unless
    /// `general_settings.dangerously_allow_mock_testing_request_params`).
    pub mock_testing_params: Vec<(&'static str, String)>,
    /// The body's `mock_response`, as JSON text (LiteLLM's canned answer,
    /// see `proxy::mock_params`).
    pub mock_response: Option<String>,
    /// An image edit form's `prompt` field, for the guardrails (a JSON
    /// body's text is read by them directly).
    pub form_prompt: Option<Range<usize>>,
    /// Whether the body's `metadata` stays out of the upstream call: on
    /// every endpoint but Messages and Responses (whose APIs define it),
    /// LiteLLM reads `metadata` for itself and never sends it on (its
    /// `enable_preview_features` aside). The gateway's own readers (tags,
    /// trace ids, guardrails) still see it in `body`.
    pub metadata_stays: bool,
    /// The characters of `body`'s messages' contents and `system` that
    /// `spend::estimate_prompt_tokens` counts, when the routing read
    /// counted them and they are all the estimate reads (a JSON body
    /// without `prompt` or `input`); `None`: the estimate reads the body.
    pub prompt_chars: Option<u64>,
}

/// The routing fields of a body. The raw members are their JSON text as it
/// stands in the body (a `null` member counts as absent, except for the
/// gateway's own). Read by [`skim::routing_view`], else by serde_json.
#[derive(Deserialize, Default, Debug, PartialEq)]
struct RoutingView<'a> {
    #[serde(borrow, default, deserialize_with = "raw_value")]
    model: Option<&'a str>,
    stream: Option<serde_json::Value>,
    #[serde(borrow, default, deserialize_with = "raw_value")]
    messages: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_value")]
    prompt: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_value")]
    input: Option<&'a str>,
    max_tokens: Option<serde_json::Value>,
    max_completion_tokens: Option<serde_json::Value>,
    max_output_tokens: Option<serde_json::Value>,
    n: Option<serde_json::Value>,
    /// The gateway's own members, `null` included (a plain `Option` reads
    /// a null member as absent, and it would then be forwarded).
    #[serde(borrow, default, deserialize_with = "raw_member")]
    fallbacks: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_member")]
    num_retries: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_member")]
    tags: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_member")]
    cache: Option<&'a str>,
    user: Option<serde_json::Value>,
    #[serde(borrow, default, deserialize_with = "raw_value")]
    metadata: Option<&'a str>,
    /// LiteLLM's mock testing parameters ([`MOCK_TESTING_PARAMS`]), only
    /// noted as present.
    #[serde(borrow, default, deserialize_with = "raw_member")]
    mock_testing_fallbacks: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_member")]
    mock_testing_context_fallbacks: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_member")]
    mock_testing_content_policy_fallbacks: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_member")]
    mock_testing_rate_limit_error: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_member")]
    mock_timeout: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_member")]
    mock_delay: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_value")]
    mock_response: Option<&'a str>,
    /// LiteLLM's proxy-only members the gateway reads, never forwarded
    /// (LiteLLM keeps them out of the provider call too).
    #[serde(borrow, default, deserialize_with = "raw_member")]
    turn_off_message_logging: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_member")]
    litellm_trace_id: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_member")]
    litellm_metadata: Option<&'a str>,
    /// The raw values of the members named in [`LITELLM_ONLY_PARAMS`]
    /// (filled by [`Fields::read`]).
    #[serde(skip)]
    litellm_only: Vec<&'a str>,
    /// The characters of the messages' contents and `system` that the
    /// prompt estimate counts, when [`skim::routing_view`] read them as the
    /// estimate's own reader would (`None`: the estimate reads the body).
    #[serde(skip)]
    prompt_chars: Option<u64>,
}

/// LiteLLM's own request parameters that its proxy takes out of the body
/// (`_UNTRUSTED_ROOT_CONTROL_FIELDS`, the per-request pricing fields) or
/// that `litellm.completion` consumes as its own (`all_litellm_params`), so
/// that they never reach a provider; the gateway acts on none of them
/// (those it reads, such as `fallbacks` or `tags`, are cut on their own)
/// and cuts them from the body too, so that an upstream does not refuse
/// or act on a name it was never meant to see. `mock_response` is cut
/// as well (see `proxy::mock_params`).
pub const LITELLM_ONLY_PARAMS: &[&str] = &[
    "caching",
    "ttl",
    "no-log",
    "mock_tool_calls",
    "context_window_fallback_dict",
    "max_fallbacks",
    "litellm_session_id",
    "litellm_call_id",
    "litellm_disabled_callbacks",
    "litellm_request_debug",
    "prompt_id",
    "prompt_variables",
    "prompt_version",
    "prompt_label",
    "proxy_server_request",
    "secret_fields",
    "standard_logging_object",
    "model_info",
    "base_model",
    "input_cost_per_token",
    "output_cost_per_token",
    "input_cost_per_second",
    "output_cost_per_second",
    "disable_global_guardrails",
    "enable_prompt_caching",
    "applied_guardrails",
    "callbacks",
    "service_callback",
    "logger_fn",
    "weights",
    "fallback_depth",
];

/// Whether a member name (as raw JSON text without its quotes) is one of
/// [`LITELLM_ONLY_PARAMS`].
fn is_litellm_only(key: &[u8]) -> bool {
    LITELLM_ONLY_PARAMS.iter().any(|n| n.as_bytes() == key)
}

/// The raw values of `body`'s top-level members named in
/// [`LITELLM_ONLY_PARAMS`], duplicates included, read by serde_json (for
/// bodies the skim leaves to it).
fn litellm_only_members(body: &[u8]) -> Result<Vec<&str>, GatewayError> {
    /// The visitor collecting them.
    struct Members;
    impl<'de> serde::de::Visitor<'de> for Members {
        type Value = Vec<&'de str>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut found = Vec::new();
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                // Other values are skipped as the routing view skips them.
                if is_litellm_only(key.as_bytes()) {
                    let value: &'de RawValue = map.next_value()?;
                    found.push(value.get());
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    serde::Deserializer::deserialize_map(&mut de, Members)
        .map_err(|e| GatewayError::MalformedJson(e.to_string()))
}

/// LiteLLM's mock testing request parameters, which its proxy refuses
/// unless `general_settings.dangerously_allow_mock_testing_request_params`
/// (`GATED_MOCK_PARAM_NAMES`).
pub const MOCK_TESTING_PARAMS: [&str; 6] = [
    "mock_testing_fallbacks",
    "mock_testing_context_fallbacks",
    "mock_testing_content_policy_fallbacks",
    "mock_testing_rate_limit_error",
    "mock_timeout",
    "mock_delay",
];

impl<'a> RoutingView<'a> {
    /// The mock testing parameters present with their JSON text, in
    /// [`MOCK_TESTING_PARAMS`]'s order.
    fn mock_testing_params(&self) -> Vec<(&'static str, &'a str)> {
        let present = [
            self.mock_testing_fallbacks,
            self.mock_testing_context_fallbacks,
            self.mock_testing_content_policy_fallbacks,
            self.mock_testing_rate_limit_error,
            self.mock_timeout,
            self.mock_delay,
        ];
        MOCK_TESTING_PARAMS
            .into_iter()
            .zip(present)
            .filter_map(|(name, raw)| raw.map(|raw| (name, raw)))
            .collect()
    }
}

/// A member's raw text, `None` when it is `null`.
fn raw_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de str>, D::Error> {
    Option::<&RawValue>::deserialize(d).map(|raw| raw.map(RawValue::get))
}

/// A member's raw text, present even when it is `null`.
fn raw_member<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de str>, D::Error> {
    <&RawValue>::deserialize(d).map(|raw| Some(raw.get()))
}

/// `metadata.user_id` of a Messages request.
#[derive(Deserialize)]
struct MetadataView {
    user_id: Option<serde_json::Value>,
}

/// `metadata.tags` of a request.
#[derive(Deserialize)]
struct MetadataTags {
    tags: Option<serde_json::Value>,
}

/// Most tags one request may carry.
pub const MAX_TAGS: usize = 64;

/// A request's tags: a list of at most [`MAX_TAGS`] strings, each a valid
/// name of at most [`MAX_MODEL_BYTES`]; `null` is none.
fn read_tags(param: &'static str, v: &serde_json::Value) -> Result<Vec<String>, GatewayError> {
    let bad = |message: &str| GatewayError::InvalidParam {
        param,
        message: message.to_string(),
    };
    let items = match v {
        serde_json::Value::Null => return Ok(Vec::new()),
        serde_json::Value::Array(items) => items,
        _ => return Err(bad("must be a list of strings")),
    };
    if items.len() > MAX_TAGS {
        return Err(bad(&format!("at most {MAX_TAGS} tags are accepted")));
    }
    items
        .iter()
        .map(|t| {
            let t = t.as_str().ok_or_else(|| bad("must be a list of strings"))?;
            check_name(param, t, MAX_MODEL_BYTES)?;
            Ok(t.to_string())
        })
        .collect()
}

/// Largest `max_tokens` / `max_completion_tokens` accepted: above any
/// model's output window, small enough that reservations cannot overflow.
pub const MAX_OUTPUT_TOKENS: u64 = 10_000_000;
/// Largest `n` (OpenAI's own cap).
pub const MAX_CHOICES: u64 = 128;
/// Largest `num_retries` any body may ask for; the configured maximum
/// (`gateway_settings.max_request_retries`) is at most this.
pub const MAX_REQUEST_RETRIES: u32 = 100;
/// Most model groups a body's `fallbacks` may name.
pub const MAX_REQUEST_FALLBACKS: usize = 16;
/// Longest model name, in bytes.
pub const MAX_MODEL_BYTES: usize = 256;
/// Longest `user` (end-user id), in bytes.
pub const MAX_USER_BYTES: usize = 256;
/// Deepest nesting of arrays and objects accepted in a body (serde_json's
/// own limit for the values it builds).
pub const MAX_JSON_DEPTH: usize = 128;

/// The routing fields of one body, as read (before any checks).
struct Fields<'a> {
    view: RoutingView<'a>,
    /// Value spans of the gateway's own members (`fallbacks`, `num_retries`,
    /// ...), cut from the forwarded body.
    own: Vec<Range<usize>>,
}

impl<'a> Fields<'a> {
    fn read(body: &'a [u8]) -> Result<Fields<'a>, GatewayError> {
        if body.is_empty() {
            return Err(GatewayError::MalformedJson(
                "the body is empty; expected a JSON object".into(),
            ));
        }
        check_depth(body)?;
        let view = match skim::routing_view(body) {
            Some(view) => view,
            None => {
                let mut view: RoutingView<'_> = serde_json::from_slice(body)
                    .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
                view.litellm_only = litellm_only_members(body)?;
                view
            }
        };
        let own = [
            view.fallbacks,
            view.num_retries,
            view.tags,
            view.cache,
            view.turn_off_message_logging,
            view.litellm_trace_id,
            view.litellm_metadata,
            view.mock_response,
        ]
        .into_iter()
        .flatten()
        .chain(view.mock_testing_params().into_iter().map(|(_, raw)| raw))
        .chain(view.litellm_only.iter().copied())
        .map(|raw| span_in(body, raw))
        .collect();
        Ok(Fields { view, own })
    }
}

/// Byte range of `raw` inside `body`, which it borrows from.
fn span_in(body: &[u8], raw: &str) -> Range<usize> {
    let start = raw.as_ptr() as usize - body.as_ptr() as usize;
    start..start + raw.len()
}

impl LlmRequest {
    /// Reads the routing fields of `body` for `endpoint`. Every field the
    /// gateway reads is type- and range-checked: a wrong one is a 400 naming
    /// it. The gateway's own members (`fallbacks`, `num_retries`, `tags`,
    /// `cache`, `turn_off_message_logging`, ...) are cut out of the
    /// forwarded body, and `turn_off_message_logging` and LiteLLM's
    /// reserved `user_api_key_*` names out of its `metadata`.
    pub fn parse(endpoint: Endpoint, body: Bytes) -> Result<LlmRequest, GatewayError> {
        let fields = Fields::read(&body)?;
        let flagged_metadata = fields.view.metadata.is_some_and(may_hold_litellm_names);
        if fields.own.is_empty() && !flagged_metadata {
            return Self::checked(endpoint, &fields.view, body.clone());
        }
        // Rare: read the gateway's own fields, then re-read the body without
        // them so the provider never sees them.
        let fallbacks = read_fallbacks(fields.view.fallbacks)?;
        let num_retries = read_num_retries(fields.view.num_retries)?;
        let tags = match fields.view.tags {
            Some(raw) => {
                let v: serde_json::Value = serde_json::from_str(raw)
                    .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
                read_tags("tags", &v)?
            }
            None => Vec::new(),
        };
        let cache = match fields.view.cache {
            Some(raw) => Some(
                serde_json::from_str::<serde_json::Value>(raw)
                    .map_err(|e| GatewayError::MalformedJson(e.to_string()))?,
            ),
            None => None,
        };
        let mock_testing_params = fields
            .view
            .mock_testing_params()
            .into_iter()
            .map(|(name, raw)| (name, raw.to_string()))
            .collect();
        let message_logging_off = message_logging_flag(&fields.view)?;
        let mut stripped = Bytes::from(strip_members(&body, &fields.own));
        let mut again = Fields::read(&stripped)?;
        let flagged = again.view.metadata.and_then(|raw| {
            Some((
                span_in(&stripped, raw),
                metadata_without_litellm_names(raw)?,
            ))
        });
        if let Some((span, cleaned)) = flagged {
            let mut spliced = Vec::with_capacity(stripped.len());
            spliced.extend_from_slice(&stripped[..span.start]);
            spliced.extend_from_slice(&cleaned);
            spliced.extend_from_slice(&stripped[span.end..]);
            stripped = Bytes::from(spliced);
            again = Fields::read(&stripped)?;
        }
        if !again.own.is_empty() {
            // Cannot happen for a body serde accepted (duplicates are refused).
            return Err(GatewayError::MalformedJson(
                "fallbacks / num_retries could not be removed from the body".into(),
            ));
        }
        let mut req = Self::checked(endpoint, &again.view, stripped.clone())?;
        req.fallbacks = fallbacks;
        req.num_retries = num_retries;
        req.cache = cache;
        req.mock_testing_params = mock_testing_params;
        req.mock_response = fields.view.mock_response.map(str::to_string);
        req.message_logging_off = message_logging_off;
        if fields.view.tags.is_some() {
            req.tags = tags;
        }
        Ok(req)
    }

    /// Checks every routing field of `view` (read from `body`) except the
    /// gateway's own, which the caller fills in.
    fn checked(
        endpoint: Endpoint,
        view: &RoutingView<'_>,
        body: Bytes,
    ) -> Result<LlmRequest, GatewayError> {
        let raw_model = view.model.ok_or(GatewayError::MissingParam("model"))?;
        let model: String =
            serde_json::from_str(raw_model).map_err(|_| GatewayError::InvalidParam {
                param: "model",
                message: "must be a string".into(),
            })?;
        check_name("model", &model, MAX_MODEL_BYTES)?;
        let model_span = span_in(&body, raw_model);
        let input = match endpoint {
            Endpoint::ChatCompletions | Endpoint::Messages => view.messages,
            Endpoint::Completions => view.prompt,
            Endpoint::ImageGenerations => view.prompt.filter(|p| p.starts_with('"')),
            Endpoint::Embeddings | Endpoint::Responses | Endpoint::Moderations => view.input,
            Endpoint::AudioSpeech => view.input.filter(|i| i.starts_with('"')),
            // A form is read by `parse_form`, never here.
            Endpoint::AudioTranscriptions | Endpoint::AudioTranslations | Endpoint::ImageEdits => {
                None
            }
            // `query` and `documents` are read and checked by the
            // provider's translation.
            Endpoint::Rerank => Some(""),
        };
        // A `null` input reads as absent (see `RoutingView`).
        let not_text = match endpoint {
            Endpoint::ImageGenerations => view.prompt.is_some(),
            Endpoint::AudioSpeech => view.input.is_some(),
            _ => false,
        };
        if input.is_none() && not_text {
            return Err(GatewayError::InvalidParam {
                param: endpoint.input_field(),
                message: "must be a string".into(),
            });
        }
        if input.is_none() {
            return Err(GatewayError::MissingParam(endpoint.input_field()));
        }
        if matches!(endpoint, Endpoint::ChatCompletions | Endpoint::Messages)
            && !view.messages.is_some_and(|m| m.starts_with('['))
        {
            return Err(GatewayError::InvalidParam {
                param: "messages",
                message: "must be an array of messages".into(),
            });
        }
        let stream = match &view.stream {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(b)) => *b,
            Some(_) => {
                return Err(GatewayError::InvalidParam {
                    param: "stream",
                    message: "must be a boolean".into(),
                })
            }
        };
        // None streams here; a stream would also be read for usage as one
        // (an image stream's partial images are not relayed yet).
        if stream
            && matches!(
                endpoint,
                Endpoint::Rerank
                    | Endpoint::Moderations
                    | Endpoint::ImageGenerations
                    | Endpoint::AudioSpeech
            )
        {
            return Err(GatewayError::InvalidParam {
                param: "stream",
                message: format!("{} does not stream", endpoint.path_suffix()),
            });
        }
        let cap = match (
            bounded_int(
                "max_completion_tokens",
                &view.max_completion_tokens,
                0,
                MAX_OUTPUT_TOKENS,
            )?,
            match endpoint {
                Endpoint::Responses => bounded_int(
                    "max_output_tokens",
                    &view.max_output_tokens,
                    0,
                    MAX_OUTPUT_TOKENS,
                )?,
                _ => bounded_int("max_tokens", &view.max_tokens, 0, MAX_OUTPUT_TOKENS)?,
            },
        ) {
            (Some(c), _) | (None, Some(c)) => Some(c),
            (None, None) => None,
        };
        let n = bounded_int("n", &view.n, 1, MAX_CHOICES)?;
        let choices = n.unwrap_or(1);
        let media = match (endpoint, input) {
            (Endpoint::ImageGenerations, _) => Some(MediaAsk::Image(media::read(&body, n)?)),
            (Endpoint::AudioSpeech, Some(raw)) => Some(media::speech(raw)?),
            _ => None,
        };
        // n choices may each use the cap: the output the request can cost.
        let max_tokens = cap.map(|c| c.saturating_mul(choices));
        let user = match (endpoint, view.metadata) {
            (Endpoint::Messages, Some(raw)) => serde_json::from_str::<Option<MetadataView>>(raw)
                .map_err(|_| GatewayError::InvalidParam {
                    param: "metadata",
                    message: "must be an object".into(),
                })?
                .and_then(|m| m.user_id),
            (Endpoint::Messages, None) => None,
            _ => view.user.clone(),
        };
        let tags = match (endpoint, view.metadata) {
            (Endpoint::Messages, _) | (_, None) => Vec::new(),
            (_, Some(raw)) => match serde_json::from_str::<MetadataTags>(raw) {
                Ok(MetadataTags { tags: Some(v) }) => read_tags("metadata.tags", &v)?,
                _ => Vec::new(),
            },
        };
        let end_user = match &user {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => {
                check_name("user", s, MAX_USER_BYTES)?;
                Some(s.clone())
            }
            Some(_) => {
                return Err(GatewayError::InvalidParam {
                    param: "user",
                    message: "must be a string".into(),
                })
            }
        };
        Ok(LlmRequest {
            endpoint,
            body,
            model_span,
            model,
            stream,
            max_tokens,
            fallbacks: None,
            num_retries: None,
            cache: None,
            end_user,
            tags,
            message_logging_off: None,
            forward_headers: Vec::new(),
            media,
            mock_testing_params: Vec::new(),
            mock_response: view.mock_response.map(str::to_string),
            form_prompt: None,
            metadata_stays: view.metadata.is_some()
                && !matches!(endpoint, Endpoint::Messages | Endpoint::Responses),
            prompt_chars: view
                .prompt_chars
                .filter(|_| view.prompt.is_none() && view.input.is_none()),
        })
    }

    /// Whether the body is a multipart form rather than JSON.
    pub fn is_form(&self) -> bool {
        self.endpoint.takes_form()
    }

    /// Reads a `multipart/form-data` body of `content_type` for `endpoint`:
    /// `model` and a `file` part required, `stream` and `user` read as on
    /// JSON bodies; the body is kept as received.
    pub fn parse_form(
        endpoint: Endpoint,
        content_type: &str,
        body: Bytes,
    ) -> Result<LlmRequest, GatewayError> {
        let form = form::read(&body, form::boundary(content_type)?)?;
        Self::of_form(endpoint, body, form)
    }

    /// Reads the first bytes of a streamed upload's form (`prefix`, up to
    /// its first file part's content; see [`form::until_file`]) as
    /// [`LlmRequest::parse_form`] reads a whole one: the file counts as
    /// present, the fields after it are the stream's to check.
    pub fn parse_form_prefix(
        endpoint: Endpoint,
        content_type: &str,
        prefix: Bytes,
    ) -> Result<LlmRequest, GatewayError> {
        match form::until_file(&prefix, form::boundary(content_type)?)? {
            form::Prefix::File { form, .. } => Self::of_form(endpoint, prefix, *form),
            _ => Err(GatewayError::Internal(
                "a streamed upload's prefix holds no file part",
            )),
        }
    }

    /// The request a form's fields make, `body` the bytes they index.
    fn of_form(
        endpoint: Endpoint,
        body: Bytes,
        form: form::Form,
    ) -> Result<LlmRequest, GatewayError> {
        let text = |range: &Option<Range<usize>>, param: &'static str| {
            range
                .clone()
                .map(|r| {
                    std::str::from_utf8(&body[r.clone()])
                        .map(|s| (s.to_string(), r))
                        .map_err(|_| GatewayError::InvalidParam {
                            param,
                            message: "must be UTF-8 text".into(),
                        })
                })
                .transpose()
        };
        let (model, model_span) =
            text(&form.model, "model")?.ok_or(GatewayError::MissingParam("model"))?;
        check_name("model", &model, MAX_MODEL_BYTES)?;
        let media = match endpoint {
            Endpoint::ImageEdits => {
                if form.image_bytes.is_none() {
                    return Err(GatewayError::MissingParam("image"));
                }
                if form.prompt.is_none() {
                    return Err(GatewayError::MissingParam("prompt"));
                }
                let n = match text(&form.n, "n")? {
                    None => None,
                    Some((n, _)) => Some(
                        n.trim()
                            .parse::<u64>()
                            .ok()
                            .filter(|n| (1..=MAX_CHOICES).contains(n))
                            .ok_or_else(|| GatewayError::InvalidParam {
                                param: "n",
                                message: format!("must be an integer from 1 to {MAX_CHOICES}"),
                            })?,
                    ),
                };
                let size = text(&form.size, "size")?.map(|(s, _)| s);
                let quality = text(&form.quality, "quality")?.map(|(q, _)| q);
                Some(MediaAsk::Image(media::form_image(
                    n,
                    size.as_deref(),
                    quality.as_deref(),
                )?))
            }
            _ => {
                if form.file_bytes.is_none() {
                    return Err(GatewayError::MissingParam("file"));
                }
                None
            }
        };
        let stream = match text(&form.stream, "stream")? {
            None => false,
            Some((s, _)) => match s.as_str() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(GatewayError::InvalidParam {
                        param: "stream",
                        message: "must be true or false".into(),
                    })
                }
            },
        };
        // Partial images are not relayed yet, as on image generations.
        if stream && endpoint == Endpoint::ImageEdits {
            return Err(GatewayError::InvalidParam {
                param: "stream",
                message: format!("{} does not stream", endpoint.path_suffix()),
            });
        }
        let end_user = match text(&form.user, "user")? {
            Some((u, _)) => {
                check_name("user", &u, MAX_USER_BYTES)?;
                Some(u)
            }
            None => None,
        };
        Ok(LlmRequest {
            endpoint,
            body,
            model_span,
            model,
            stream,
            max_tokens: None,
            fallbacks: None,
            num_retries: None,
            cache: None,
            end_user,
            tags: Vec::new(),
            message_logging_off: None,
            forward_headers: Vec::new(),
            media,
            mock_testing_params: Vec::new(),
            mock_response: None,
            form_prompt: form.prompt.clone(),
            metadata_stays: false,
            prompt_chars: None,
        })
    }

    /// The same request with another body whose `model` sits at the same
    /// place (an addition after it, such as `stream_options`).
    pub fn with_body(&self, body: Bytes) -> LlmRequest {
        LlmRequest {
            endpoint: self.endpoint,
            body,
            model_span: self.model_span.clone(),
            model: self.model.clone(),
            stream: self.stream,
            max_tokens: self.max_tokens,
            fallbacks: self.fallbacks.clone(),
            num_retries: self.num_retries,
            cache: self.cache.clone(),
            end_user: self.end_user.clone(),
            tags: self.tags.clone(),
            message_logging_off: self.message_logging_off,
            forward_headers: self.forward_headers.clone(),
            media: self.media.clone(),
            mock_testing_params: self.mock_testing_params.clone(),
            mock_response: self.mock_response.clone(),
            form_prompt: self.form_prompt.clone(),
            metadata_stays: self.metadata_stays,
            prompt_chars: None,
        }
    }

    /// The body with `model` replaced by `new_model`, as up to three slices that
    /// share the original buffer: nothing else is re-serialized.
    /// The usual case, a model sent on as the client wrote it, copies and
    /// allocates nothing.
    pub fn body_with_model(&self, new_model: &str) -> [Bytes; 3] {
        let span = self.model_span.clone();
        // A form field's value is its raw text; the file is never copied.
        if self.is_form() {
            let unchanged = &self.body[span.clone()] == new_model.as_bytes();
            return [
                self.body.slice(..span.start),
                if unchanged {
                    self.body.slice(span.clone())
                } else {
                    Bytes::copy_from_slice(new_model.as_bytes())
                },
                self.body.slice(span.end..),
            ];
        }
        if self.metadata_stays {
            // Rare: the body as sent upstream is a copy without `metadata`.
            let sent = Fields::read(&self.body).ok().and_then(|f| {
                let cut = strip_members(&self.body, &[span_in(&self.body, f.view.metadata?)]);
                let cut = Bytes::from(cut);
                let model = span_in(&cut, Fields::read(&cut).ok()?.view.model?);
                Some((cut, model))
            });
            if let Some((body, model)) = sent {
                return with_model(&body, model, new_model);
            }
        }
        with_model(&self.body, span, new_model)
    }
}

/// `body` with the JSON string at `span` replaced by `new_model`, as three
/// slices of `body` (the middle one new when the name differs).
fn with_model(body: &Bytes, span: Range<usize>, new_model: &str) -> [Bytes; 3] {
    // The body's text reads `new_model` when it is the same bytes with
    // no escape in them (a valid string holds no bare quote or control
    // character, so a backslash is the only escape to rule out).
    let unchanged = !new_model.contains('\\')
        && body[span.clone()]
            .strip_prefix(b"\"")
            .and_then(|s| s.strip_suffix(b"\""))
            == Some(new_model.as_bytes());
    let quoted = if unchanged {
        body.slice(span.clone())
    } else {
        Bytes::from(serde_json::to_vec(new_model).expect("string serializes"))
    };
    [body.slice(..span.start), quoted, body.slice(span.end..)]
}

/// Refuses bodies nested deeper than [`MAX_JSON_DEPTH`]: the values the
/// gateway skips unread are not depth-checked by serde, and whatever reads
/// them later (a provider's translation, the upstream) must not recurse
/// without bound. One pass, strings skipped.
fn check_depth(body: &[u8]) -> Result<(), GatewayError> {
    // The nesting cannot exceed the number of opening brackets; counting
    // them is a SIMD pass, so only bodies with that many brackets
    // pay for the exact scan below.
    let opening = memchr::memchr2_iter(b'[', b'{', body).count();
    if opening <= MAX_JSON_DEPTH {
        return Ok(());
    }
    let mut depth = 0usize;
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'"' => {
                i += 1;
                while i < body.len() {
                    match body[i] {
                        b'\\' => i += 2,
                        b'"' => break,
                        _ => i += 1,
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return Err(GatewayError::MalformedJson(format!(
                        "nested deeper than {MAX_JSON_DEPTH} levels"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// An integer field in `min..=max`, or `None` when absent or null; any
/// other value (string, negative, fractional, too large) is a 400 naming it.
fn bounded_int(
    param: &'static str,
    value: &Option<serde_json::Value>,
    min: u64,
    max: u64,
) -> Result<Option<u64>, GatewayError> {
    let v = match value {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(v) => v,
    };
    match v.as_u64() {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(GatewayError::InvalidParam {
            param,
            message: format!("must be an integer from {min} to {max}"),
        }),
    }
}

/// A name that becomes a limiter key, a log field or a header: at most
/// `max` bytes and no control characters.
fn check_name(param: &'static str, value: &str, max: usize) -> Result<(), GatewayError> {
    if value.len() > max {
        return Err(GatewayError::InvalidParam {
            param,
            message: format!("is {} bytes long; at most {max} are accepted", value.len()),
        });
    }
    if value.chars().any(char::is_control) {
        return Err(GatewayError::InvalidParam {
            param,
            message: "must not contain control characters".into(),
        });
    }
    Ok(())
}

/// The body's `fallbacks`: any JSON (the router reads its shape), at most
/// [`MAX_REQUEST_FALLBACKS`] entries.
fn read_fallbacks(raw: Option<&str>) -> Result<Option<serde_json::Value>, GatewayError> {
    let Some(raw) = raw else { return Ok(None) };
    let value: serde_json::Value =
        serde_json::from_str(raw).map_err(|e| GatewayError::InvalidParam {
            param: "fallbacks",
            message: e.to_string(),
        })?;
    if value.is_null() {
        return Ok(None);
    }
    if value
        .as_array()
        .is_some_and(|a| a.len() > MAX_REQUEST_FALLBACKS)
    {
        return Err(GatewayError::InvalidParam {
            param: "fallbacks",
            message: format!("at most {MAX_REQUEST_FALLBACKS} fallback groups are accepted"),
        });
    }
    Ok(Some(value))
}

/// The body's `num_retries`: an integer from 0 to [`MAX_REQUEST_RETRIES`].
fn read_num_retries(raw: Option<&str>) -> Result<Option<u32>, GatewayError> {
    let Some(raw) = raw else { return Ok(None) };
    let value = serde_json::from_str(raw).map_err(|e| GatewayError::InvalidParam {
        param: "num_retries",
        message: e.to_string(),
    })?;
    let n = bounded_int(
        "num_retries",
        &Some(value),
        0,
        u64::from(MAX_REQUEST_RETRIES),
    )?;
    Ok(n.and_then(|n| u32::try_from(n).ok()))
}

/// LiteLLM's request field that redacts the request's spend-log row.
const LOGGING_FLAG: &str = "turn_off_message_logging";

/// The prefix of LiteLLM's reserved metadata names (`user_api_key_hash`,
/// `user_api_key_team_id`, ...): LiteLLM's proxy deletes a client's from
/// `metadata` before it sets its own (`add_litellm_data_to_request`), so
/// they never reach a provider.
const RESERVED_PREFIX: &str = "user_api_key_";

/// Whether a raw `metadata` value may hold [`LOGGING_FLAG`] or a name
/// with [`RESERVED_PREFIX`]: it names one, or holds an escape that could
/// spell one.
fn may_hold_litellm_names(raw: &str) -> bool {
    let has = |needle: &str| memchr::memmem::find(raw.as_bytes(), needle.as_bytes()).is_some();
    has(LOGGING_FLAG) || has(RESERVED_PREFIX) || has("\\u")
}

/// A raw `metadata` object re-written without [`LOGGING_FLAG`] and the
/// names LiteLLM reserves ([`RESERVED_PREFIX`]), or `None` when it holds
/// none (or is not an object).
fn metadata_without_litellm_names(raw: &str) -> Option<Vec<u8>> {
    if !may_hold_litellm_names(raw) {
        return None;
    }
    let mut map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(raw).ok()?;
    let before = map.len();
    map.retain(|name, _| name != LOGGING_FLAG && !name.starts_with(RESERVED_PREFIX));
    if map.len() == before {
        return None;
    }
    serde_json::to_vec(&map).ok()
}

/// The request's `turn_off_message_logging`: at the top level, else in
/// `metadata`, else in `litellm_metadata` (LiteLLM's order); `true` /
/// `false` or a string LiteLLM's `str_to_bool` reads, anything else none.
fn message_logging_flag(view: &RoutingView<'_>) -> Result<Option<bool>, GatewayError> {
    let read = |v: &serde_json::Value| match v {
        serde_json::Value::Bool(b) => Some(*b),
        serde_json::Value::String(s) => match s.trim().to_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Some(true),
            "false" | "0" | "no" | "off" => Some(false),
            _ => None,
        },
        _ => None,
    };
    let value = |raw: &str| {
        serde_json::from_str::<serde_json::Value>(raw)
            .map_err(|e| GatewayError::MalformedJson(e.to_string()))
    };
    if let Some(raw) = view.turn_off_message_logging {
        if let Some(on) = read(&value(raw)?) {
            return Ok(Some(on));
        }
    }
    for raw in [view.metadata, view.litellm_metadata].into_iter().flatten() {
        if let Some(on) = value(raw)?.get(LOGGING_FLAG).and_then(read) {
            return Ok(Some(on));
        }
    }
    Ok(None)
}

/// `body` without the top-level members whose values span `values`. The
/// members are cut as runs (members next to each other, separated by one
/// comma), and each run takes one adjacent comma with it, the following
/// one else the preceding one, so the cuts never overlap and the rest is
/// untouched, valid JSON.
fn strip_members(body: &[u8], values: &[Range<usize>]) -> Vec<u8> {
    let mut members: Vec<Range<usize>> = values
        .iter()
        .map(|v| member_bounds(body, v.clone()))
        .collect();
    members.sort_by_key(|m| m.start);
    let mut runs: Vec<Range<usize>> = Vec::with_capacity(members.len());
    for m in members {
        match runs.last_mut() {
            Some(last) if last.end <= m.start && is_separator(&body[last.end..m.start]) => {
                last.end = m.end
            }
            _ => runs.push(m),
        }
    }
    let mut out = Vec::with_capacity(body.len());
    let mut at = 0;
    for run in runs {
        let cut = with_comma(body, run);
        if cut.start < at {
            // Overlapping cuts cannot come from distinct members; keep the
            // body whole rather than slice backwards.
            continue;
        }
        out.extend_from_slice(&body[at..cut.start]);
        at = cut.end;
    }
    out.extend_from_slice(&body[at..]);
    out
}

/// Whitespace, one comma, whitespace: what separates two members.
fn is_separator(between: &[u8]) -> bool {
    let mut commas = 0;
    for b in between {
        match b {
            b',' => commas += 1,
            b if b.is_ascii_whitespace() => {}
            _ => return false,
        }
    }
    commas == 1
}

/// `run` widened over the comma that follows it, else the one before it.
fn with_comma(body: &[u8], run: Range<usize>) -> Range<usize> {
    let mut end = run.end;
    while end < body.len() && body[end].is_ascii_whitespace() {
        end += 1;
    }
    if end < body.len() && body[end] == b',' {
        return run.start..end + 1;
    }
    let mut before = run.start;
    while before > 0 && body[before - 1].is_ascii_whitespace() {
        before -= 1;
    }
    if before > 0 && body[before - 1] == b',' {
        return before - 1..run.end;
    }
    run
}

/// The span of a member, `"key"` to the end of its value, given its
/// value's span: back over the colon and the key.
fn member_bounds(body: &[u8], value: Range<usize>) -> Range<usize> {
    let skip_back = |mut i: usize| {
        while i > 0 && body[i - 1].is_ascii_whitespace() {
            i -= 1;
        }
        i
    };
    let mut start = skip_back(value.start);
    if start > 0 && body[start - 1] == b':' {
        start = skip_back(start - 1);
    }
    if start > 0 && body[start - 1] == b'"' {
        // The key: the names we cut decode to no quote, so the raw key
        // holds none (an escaped quote would decode to one).
        start -= 1;
        while start > 0 && body[start - 1] != b'"' {
            start -= 1;
        }
        start = start.saturating_sub(1);
    }
    start..value.end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(endpoint: Endpoint, body: &str) -> Result<LlmRequest, GatewayError> {
        LlmRequest::parse(endpoint, Bytes::copy_from_slice(body.as_bytes()))
    }

    #[test]
    fn cache_controls_are_read_and_cut_from_the_body() {
        for body in [
            r#"{"model":"a","cache":{"no-cache":true},"messages":[]}"#,
            r#"{"model":"a","messages":[],"cache" : {"no-cache":true}}"#,
        ] {
            let r = parse(Endpoint::ChatCompletions, body).unwrap();
            assert_eq!(r.cache, Some(serde_json::json!({"no-cache": true})));
            let sent: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(sent, serde_json::json!({"model": "a", "messages": []}));
        }
        let r = parse(
            Endpoint::ChatCompletions,
            r#"{"model":"a","messages":[],"cache":null}"#,
        )
        .unwrap();
        assert_eq!(r.cache, Some(serde_json::Value::Null));
        assert!(!String::from_utf8_lossy(&r.body).contains("cache"));
    }

    #[test]
    fn tags_are_read_from_the_body_or_metadata_and_cut_from_the_body() {
        let r = parse(
            Endpoint::ChatCompletions,
            r#"{"model":"a","messages":[],"tags":["x","y"],"metadata":{"tags":["z"]}}"#,
        )
        .unwrap();
        assert_eq!(r.tags, ["x", "y"]);
        let sent: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            sent,
            serde_json::json!({"model": "a", "messages": [], "metadata": {"tags": ["z"]}})
        );
        let r = parse(
            Endpoint::ChatCompletions,
            r#"{"model":"a","messages":[],"metadata":{"tags":["z"]}}"#,
        )
        .unwrap();
        assert_eq!(r.tags, ["z"]);
        let r = parse(
            Endpoint::ChatCompletions,
            r#"{"model":"a","messages":[],"metadata":"m"}"#,
        );
        assert!(r.unwrap().tags.is_empty());
        for (body, param) in [
            (r#"{"model":"a","messages":[],"tags":"x"}"#, "tags"),
            (r#"{"model":"a","messages":[],"tags":[1]}"#, "tags"),
            (
                r#"{"model":"a","messages":[],"metadata":{"tags":{}}}"#,
                "metadata.tags",
            ),
        ] {
            let err = parse(Endpoint::ChatCompletions, body).unwrap_err();
            assert_eq!(err.param(), Some(param), "{body}");
        }
        let many = vec!["\"t\""; MAX_TAGS + 1].join(",");
        let body = format!(r#"{{"model":"a","messages":[],"tags":[{many}]}}"#);
        assert!(parse(Endpoint::ChatCompletions, &body).is_err());
    }

    #[test]
    fn an_unchanged_model_is_sent_from_the_body_itself() {
        let body = r#"{"model":"gpt-4o","messages":[]}"#;
        let r = parse(Endpoint::ChatCompletions, body).unwrap();
        let parts = r.body_with_model("gpt-4o");
        let joined: Vec<u8> = parts.iter().flat_map(|b| b.to_vec()).collect();
        assert_eq!(joined, body.as_bytes());
        let within = r.body.as_ptr_range();
        assert!(within.contains(&parts[1].as_ptr()), "no copy of the model");
        let renamed: Vec<u8> = r
            .body_with_model("gpt-4o-2024-08-06")
            .iter()
            .flat_map(|b| b.to_vec())
            .collect();
        assert_eq!(renamed, br#"{"model":"gpt-4o-2024-08-06","messages":[]}"#);
        // A model written with an escape is rewritten, not compared raw.
        let r = parse(
            Endpoint::ChatCompletions,
            r#"{"model":"gpt\u002d4o","messages":[]}"#,
        )
        .unwrap();
        let joined: Vec<u8> = r
            .body_with_model("gpt-4o")
            .iter()
            .flat_map(|b| b.to_vec())
            .collect();
        assert_eq!(joined, br#"{"model":"gpt-4o","messages":[]}"#);
    }

    #[test]
    fn rewrites_only_the_model() {
        let r = parse(
            Endpoint::ChatCompletions,
            r#"{"messages":[{"role":"user","content":"hi \"model\": x"}], "model" : "gpt-4o","stream":true}"#,
        )
        .unwrap();
        assert_eq!(r.model, "gpt-4o");
        assert!(r.stream);
        let joined: Vec<u8> = r
            .body_with_model("up/\"x\"")
            .iter()
            .flat_map(|b| b.to_vec())
            .collect();
        assert_eq!(
            String::from_utf8(joined).unwrap(),
            r#"{"messages":[{"role":"user","content":"hi \"model\": x"}], "model" : "up/\"x\"","stream":true}"#
        );
    }

    #[test]
    fn gateway_only_fields_are_read_and_never_forwarded() {
        for body in [
            r#"{"fallbacks": ["b"], "model":"a","messages":[],"num_retries":3}"#,
            r#"{"model":"a", "num_retries" : 3 ,"messages":[], "fallbacks":[{"a":["b"]}]}"#,
        ] {
            let r = parse(Endpoint::ChatCompletions, body).unwrap();
            assert_eq!(r.num_retries, Some(3));
            assert!(r.fallbacks.is_some());
            let sent: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(
                sent,
                serde_json::json!({"model": "a", "messages": []}),
                "{body}"
            );
            assert_eq!(&r.body[r.model_span.clone()], b"\"a\"");
        }
        let e = parse(
            Endpoint::ChatCompletions,
            r#"{"model":"a","messages":[],"num_retries":-1}"#,
        )
        .unwrap_err();
        assert_eq!(e.param(), Some("num_retries"));
    }

    #[test]
    fn litellms_logging_and_trace_fields_are_read_and_never_forwarded() {
        use serde_json::json;
        // Members after the input, what of them is forwarded, the flag read.
        let cases = [
            (
                r#""turn_off_message_logging":true, "litellm_trace_id":"t-1""#,
                json!({}),
                Some(true),
            ),
            (
                r#""metadata":{"turn_off_message_logging":"false","user_id":"u"}"#,
                json!({"metadata": {"user_id": "u"}}),
                Some(false),
            ),
            (
                r#""metadata":{"\u0074urn_off_message_logging":1},"litellm_metadata":{"turn_off_message_logging":"yes"}"#,
                json!({"metadata": {}}),
                Some(true),
            ),
            (
                r#""turn_off_message_logging":null,"metadata":{"note":"turn_off_message_logging"}"#,
                json!({"metadata": {"note": "turn_off_message_logging"}}),
                None,
            ),
            (
                r#""metadata":{"user_api_key_team_id":"t","\u0075ser_api_key_alias":"k","user_api_key":"kept","note":"user_api_key_"}"#,
                json!({"metadata": {"user_api_key": "kept", "note": "user_api_key_"}}),
                None,
            ),
        ];
        for endpoint in [
            Endpoint::ChatCompletions,
            Endpoint::Responses,
            Endpoint::Messages,
            Endpoint::Embeddings,
        ] {
            let base = match endpoint {
                Endpoint::ChatCompletions | Endpoint::Messages => r#"{"model":"a","messages":[]"#,
                _ => r#"{"model":"a","input":"x""#,
            };
            for (members, kept, flag) in &cases {
                let body = format!("{base},{members}}}");
                let mut sent: serde_json::Value =
                    serde_json::from_str(&format!("{base}}}")).unwrap();
                if let (Some(sent), Some(kept)) = (sent.as_object_mut(), kept.as_object()) {
                    sent.extend(kept.clone());
                }
                let r = parse(endpoint, &body).unwrap();
                assert_eq!(forwarded(&r), sent, "{endpoint:?} {body}");
                assert_eq!(r.message_logging_off, *flag, "{endpoint:?} {body}");
                assert_eq!(&r.body[r.model_span.clone()], b"\"a\"");
            }
        }
    }

    #[test]
    fn messages_requests_read_their_end_user_from_metadata() {
        let r = parse(
            Endpoint::Messages,
            r#"{"model":"claude","max_tokens":3,"messages":[],"user":"ignored","metadata":{"user_id":"u-1"},"stream":true}"#,
        )
        .unwrap();
        assert_eq!((r.end_user.as_deref(), r.stream), (Some("u-1"), true));
        assert_eq!(r.max_tokens, Some(3));
        let e = parse(Endpoint::Messages, r#"{"model":"c","messages":{}}"#).unwrap_err();
        assert_eq!(e.param(), Some("messages"));
        let e = parse(
            Endpoint::Messages,
            r#"{"model":"c","messages":[],"metadata":[]}"#,
        )
        .unwrap_err();
        assert_eq!(e.param(), Some("metadata"));
        // metadata.user_id becomes the end user: capped like `user`.
        let long = format!(
            r#"{{"model":"c","messages":[],"metadata":{{"user_id":"{}"}}}}"#,
            "u".repeat(MAX_USER_BYTES + 1)
        );
        let e = parse(Endpoint::Messages, &long).unwrap_err();
        assert_eq!(e.param(), Some("user"));
    }

    #[test]
    fn names_what_is_wrong() {
        let e = parse(
            Endpoint::ChatCompletions,
            "{\"model\": \"a\",\n \"messages\": [}",
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 2 column"), "{e}");
        let e = parse(Endpoint::ChatCompletions, r#"{"model":"a"}"#).unwrap_err();
        assert_eq!(e.param(), Some("messages"));
        let e = parse(Endpoint::Embeddings, r#"{"input":"a"}"#).unwrap_err();
        assert_eq!(e.param(), Some("model"));
        let e = parse(Endpoint::ChatCompletions, r#"{"model":1,"messages":[]}"#).unwrap_err();
        assert_eq!(e.param(), Some("model"));
        assert!(parse(Endpoint::Embeddings, r#"{"model":"e","input":["a","b"]}"#).is_ok());
        let capped = parse(
            Endpoint::ChatCompletions,
            r#"{"model":"a","messages":[],"max_completion_tokens":120}"#,
        )
        .unwrap();
        assert_eq!(capped.max_tokens, Some(120));
        let e = parse(
            Endpoint::ChatCompletions,
            r#"{"model":"a","messages":[],"max_tokens":-1}"#,
        )
        .unwrap_err();
        assert_eq!(e.param(), Some("max_tokens"));
    }

    /// A `null` input or model is a missing one, whichever reader read the
    /// body (the one-pass reader, or serde_json after a `\u` escape).
    #[test]
    fn null_inputs_are_missing() {
        for (endpoint, field) in [
            (Endpoint::ChatCompletions, "messages"),
            (Endpoint::Messages, "messages"),
            (Endpoint::Completions, "prompt"),
            (Endpoint::Embeddings, "input"),
            (Endpoint::Responses, "input"),
        ] {
            for extra in ["", r#","x":"\u00e9""#] {
                let body = format!(r#"{{"model":"a","{field}": null{extra}}}"#);
                let e = parse(endpoint, &body).unwrap_err();
                assert_eq!(e.param(), Some(field), "{body}");
                let body = format!(r#"{{"model":null,"{field}":[]{extra}}}"#);
                let e = parse(endpoint, &body).unwrap_err();
                assert_eq!(e.param(), Some("model"), "{body}");
            }
        }
    }

    /// Rerank and moderation requests: their inputs are the provider's to
    /// check (rerank) or `input` (moderations); neither may stream.
    #[test]
    fn rerank_and_moderations_read_their_fields_and_never_stream() {
        let r = parse(
            Endpoint::Rerank,
            r#"{"model":"r","query":"q","documents":["a"]}"#,
        )
        .unwrap();
        assert_eq!((r.model.as_str(), r.stream), ("r", false));
        let e = parse(Endpoint::Moderations, r#"{"model":"m"}"#).unwrap_err();
        assert_eq!(e.param(), Some("input"));
        for endpoint in [Endpoint::Rerank, Endpoint::Moderations] {
            let body = r#"{"model":"m","input":"x","query":"q","documents":["a"],"stream":true}"#;
            let e = parse(endpoint, body).unwrap_err();
            assert_eq!(
                (e.status(), e.param()),
                (400, Some("stream")),
                "{endpoint:?}"
            );
        }
    }

    #[test]
    fn image_generations_need_a_string_prompt_and_never_stream() {
        let r = parse(
            Endpoint::ImageGenerations,
            r#"{"model":"i","prompt":"a cat","n":2,"size":"1024x1536","quality":"low"}"#,
        )
        .unwrap();
        let Some(MediaAsk::Image(ask)) = r.media else {
            panic!("an image request reads its ask")
        };
        assert_eq!((ask.n, ask.size), (2, Some((1024, 1536))));
        assert_eq!(ask.quality.as_deref(), Some("low"));
        for (body, param) in [
            (r#"{"model":"i"}"#, "prompt"),
            (r#"{"model":"i","prompt":["a"]}"#, "prompt"),
            (r#"{"model":"i","prompt":"a","stream":true}"#, "stream"),
            (r#"{"model":"i","prompt":"a","n":0}"#, "n"),
            (r#"{"model":"i","prompt":"a","size":7}"#, "size"),
        ] {
            let e = parse(Endpoint::ImageGenerations, body).unwrap_err();
            assert_eq!((e.status(), e.param()), (400, Some(param)), "{body}");
        }
        let chat = parse(Endpoint::ChatCompletions, r#"{"model":"c","messages":[]}"#).unwrap();
        assert_eq!(chat.media, None);
        let speech = parse(
            Endpoint::AudioSpeech,
            r#"{"model":"t","input":"a b","voice":"alloy"}"#,
        )
        .unwrap();
        assert_eq!(speech.media, Some(MediaAsk::Speech { characters: 2 }));
        let e = parse(Endpoint::AudioSpeech, r#"{"model":"t","input":7}"#).unwrap_err();
        assert_eq!(e.param(), Some("input"));
    }

    fn forwarded(r: &LlmRequest) -> serde_json::Value {
        serde_json::from_slice(&r.body).expect("the forwarded body is JSON")
    }

    #[test]
    fn adjacent_gateway_fields_at_the_end_are_cut_cleanly() {
        // The OpenAI SDK's extra_body puts both fields last: the two cuts
        // used to overlap and panic the core.
        for body in [
            r#"{"model":"a","messages":[],"fallbacks":["gpt-4o"],"num_retries":1}"#,
            r#"{"model":"a","messages":[], "num_retries" : 1 , "fallbacks":["gpt-4o"] }"#,
            r#"{"fallbacks":["gpt-4o"],"num_retries":1,"model":"a","messages":[]}"#,
            r#"{"fallbacks":["gpt-4o"],"model":"a","num_retries":1,"messages":[]}"#,
        ] {
            let r = parse(Endpoint::ChatCompletions, body).unwrap();
            assert_eq!(r.num_retries, Some(1), "{body}");
            assert_eq!(r.fallbacks, Some(serde_json::json!(["gpt-4o"])));
            assert_eq!(
                forwarded(&r),
                serde_json::json!({"model": "a", "messages": []}),
                "{body}"
            );
            assert_eq!(&r.body[r.model_span.clone()], b"\"a\"");
        }
        let only = parse(
            Endpoint::Embeddings,
            r#"{"num_retries":0,"fallbacks":[],"model":"e","input":"x"}"#,
        )
        .unwrap();
        assert_eq!(
            forwarded(&only),
            serde_json::json!({"model": "e", "input": "x"})
        );
    }

    #[test]
    fn null_gateway_fields_are_cut_too() {
        // Found by the fuzzer: a null member was read as absent and forwarded.
        for body in [
            r#"{"model":"a","messages":[],"num_retries":null}"#,
            r#"{"model":"a","fallbacks":null,"messages":[]}"#,
            r#"{"model":"a","messages":[],"fallbacks":null,"num_retries":null}"#,
        ] {
            let r = parse(Endpoint::ChatCompletions, body).unwrap();
            assert_eq!(
                (r.num_retries, r.fallbacks.is_some()),
                (None, false),
                "{body}"
            );
            assert_eq!(
                forwarded(&r),
                serde_json::json!({"model": "a", "messages": []}),
                "{body}"
            );
        }
    }

    #[test]
    fn numbers_from_the_client_are_range_checked() {
        let cases = [
            (r#""max_tokens":18446744071562067968"#, "max_tokens"),
            (r#""max_tokens":10000001"#, "max_tokens"),
            (r#""max_tokens":1.5"#, "max_tokens"),
            (r#""max_tokens":"5""#, "max_tokens"),
            (r#""max_completion_tokens":-3"#, "max_completion_tokens"),
            (r#""n":0"#, "n"),
            (r#""n":129"#, "n"),
            (r#""n":true"#, "n"),
            (r#""num_retries":101"#, "num_retries"),
            (r#""num_retries":1.5"#, "num_retries"),
            (r#""num_retries":"2""#, "num_retries"),
            (r#""num_retries":4294967296"#, "num_retries"),
            (r#""user":"a\nb""#, "user"),
            (r#""stream":"yes""#, "stream"),
        ];
        for (field, param) in cases {
            let body = format!(r#"{{"model":"a","messages":[],{field}}}"#);
            let e = parse(Endpoint::ChatCompletions, &body).unwrap_err();
            assert_eq!(e.param(), Some(param), "{body}: {e}");
            assert_eq!(e.status(), 400);
        }
        let long_user = format!(
            r#"{{"model":"a","messages":[],"user":"{}"}}"#,
            "u".repeat(MAX_USER_BYTES + 1)
        );
        let e = parse(Endpoint::ChatCompletions, &long_user).unwrap_err();
        assert_eq!(e.param(), Some("user"));
        let long_model = format!(r#"{{"model":"{}","messages":[]}}"#, "m".repeat(300));
        let e = parse(Endpoint::ChatCompletions, &long_model).unwrap_err();
        assert_eq!(e.param(), Some("model"));
        let many = format!(
            r#"{{"model":"a","messages":[],"fallbacks":[{}]}}"#,
            vec!["\"b\""; MAX_REQUEST_FALLBACKS + 1].join(",")
        );
        let e = parse(Endpoint::ChatCompletions, &many).unwrap_err();
        assert_eq!(e.param(), Some("fallbacks"));
        // n multiplies the output the request may cost.
        let r = parse(
            Endpoint::ChatCompletions,
            r#"{"model":"a","messages":[],"max_tokens":100,"n":3}"#,
        )
        .unwrap();
        assert_eq!(r.max_tokens, Some(300));
    }

    #[test]
    fn hostile_json_is_a_400_not_a_crash() {
        let deep = format!(
            r#"{{"model":"a","messages":{}{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(
            parse(Endpoint::ChatCompletions, &deep)
                .unwrap_err()
                .status(),
            400
        );
        let mut bad_utf8 = br#"{"model":"a","messages":[{"role":"user","content":"x"#.to_vec();
        bad_utf8.extend_from_slice(&[0xff, 0xfe]);
        bad_utf8.extend_from_slice(br#""}]}"#);
        let e = LlmRequest::parse(Endpoint::ChatCompletions, Bytes::from(bad_utf8)).unwrap_err();
        assert_eq!(e.status(), 400);
        let dup = r#"{"model":"a","messages":[],"num_retries":1,"num_retries":2}"#;
        assert_eq!(
            parse(Endpoint::ChatCompletions, dup).unwrap_err().status(),
            400
        );
    }

    mod property {
        use super::*;
        use proptest::prelude::*;

        /// A JSON value of a few kinds, rendered with random spacing.
        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("1".to_string()),
                Just("null".to_string()),
                Just(r#""s,\"x\":""#.to_string()),
                Just(r#"["a", {"b": [1, 2]}]"#.to_string()),
                Just(r#"{"fallbacks": 1, "num_retries": 2}"#.to_string()),
            ]
        }

        fn ws() -> impl Strategy<Value = &'static str> {
            prop_oneof![Just(""), Just(" "), Just("\n\t "), Just("  ")]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(4000))]
            /// Whatever order and spacing the members come in, the forwarded
            /// body is valid JSON equal to the parsed body without the
            /// gateway's fields, and the model span still names the model.
            #[test]
            fn the_splice_removes_exactly_the_gateway_fields(
                extra in proptest::collection::vec(value(), 0..3),
                with_fallbacks in any::<bool>(),
                with_retries in any::<bool>(),
                order in proptest::collection::vec(any::<u8>(), 8),
                spaces in proptest::collection::vec(ws(), 12),
                new_model in "[a-z/\"]{0,8}",
            ) {
                let mut members: Vec<String> = vec![
                    r#""model":"m""#.to_string(),
                    r#""messages":[{"role":"user","content":"hi"}]"#.to_string(),
                ];
                for (i, v) in extra.iter().enumerate() {
                    members.push(format!(r#""x{i}":{v}"#));
                }
                if with_fallbacks {
                    members.push(r#""fallbacks":["b"]"#.to_string());
                }
                if with_retries {
                    members.push(r#""num_retries":2"#.to_string());
                }
                // A permutation from the random bytes.
                let mut keyed: Vec<(u8, String)> = members
                    .into_iter()
                    .enumerate()
                    .map(|(i, m)| (order[i % order.len()].wrapping_add(i as u8), m))
                    .collect();
                keyed.sort_by_key(|(k, _)| *k);
                let mut body = String::from("{");
                for (i, (_, m)) in keyed.iter().enumerate() {
                    if i > 0 {
                        body.push_str(spaces[i % spaces.len()]);
                        body.push(',');
                    }
                    body.push_str(spaces[(i + 5) % spaces.len()]);
                    body.push_str(&m.replacen(':', &format!("{}:{}", spaces[i % 3], spaces[(i + 1) % 4]), 1));
                }
                body.push_str(spaces[11]);
                body.push('}');

                let r = parse(Endpoint::ChatCompletions, &body).unwrap();
                let mut expected: serde_json::Value = serde_json::from_str(&body).unwrap();
                let obj = expected.as_object_mut().unwrap();
                obj.remove("fallbacks");
                obj.remove("num_retries");
                prop_assert_eq!(forwarded(&r), expected.clone());
                prop_assert_eq!(r.num_retries, with_retries.then_some(2));
                prop_assert_eq!(r.fallbacks.is_some(), with_fallbacks);
                let joined: Vec<u8> = r
                    .body_with_model(&new_model)
                    .iter()
                    .flat_map(|b| b.to_vec())
                    .collect();
                let rewritten: serde_json::Value = serde_json::from_slice(&joined).unwrap();
                expected["model"] = serde_json::Value::String(new_model.clone());
                prop_assert_eq!(rewritten, expected);
            }

            /// Arbitrary bytes never panic the reader.
            #[test]
            fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
                let _ = LlmRequest::parse(Endpoint::ChatCompletions, Bytes::from(body));
            }
        }
    }
}
