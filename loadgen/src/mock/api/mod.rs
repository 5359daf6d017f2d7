//! The mock's API surface: routing by path suffix and the response bodies of
//! each endpoint. Handlers are pure: they turn a parsed request into a
//! [`Reply`] and never touch the connection.

pub mod anthropic;
pub mod azure;
pub mod bedrock;
pub mod chat;
pub mod cloud_images;
pub mod cohere;
pub mod embed;
pub mod embeddings;
pub mod errors;
pub mod files;
pub mod gemini;
pub mod guardrail;
pub mod image_edits;
pub mod image_generations;
pub mod images;
pub mod moderations;
pub mod rerank;
pub mod responses;
pub mod speech;
pub mod text;
pub mod transcriptions;
pub mod vertex;

use serde::Serialize;

use super::controls::Controls;
use super::http::Request;

/// The endpoint a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST …/chat/completions` (OpenAI chat).
    ChatCompletions,
    /// `POST …/completions` (OpenAI legacy text completion).
    Completions,
    /// `POST …/embeddings`.
    Embeddings,
    /// `POST …/messages` (Anthropic Messages API).
    Messages,
    /// `POST …/messages/count_tokens` (Anthropic token counting).
    CountTokens,
    /// `POST …/model/{id}/converse` and `…/converse-stream` (AWS Bedrock).
    Converse,
    /// `POST …/models/{model}:generateContent` and
    /// `…:streamGenerateContent` (Gemini).
    GenerateContent,
    /// `POST …/publishers/anthropic/models/{model}:rawPredict` and
    /// `…:streamRawPredict` (Anthropic on Vertex AI).
    RawPredict,
    /// `POST …/models/{m}:batchEmbedContents` (Gemini) and
    /// `…/publishers/google/models/{m}:predict` (Vertex AI embeddings).
    GoogleEmbed,
    /// `POST …/model/{id}/invoke` (Bedrock InvokeModel: embeddings).
    Invoke,
    /// `POST …/responses` (OpenAI's Responses API).
    Responses,
    /// `POST …/guardrail/{id}/version/{v}/apply` (Bedrock ApplyGuardrail).
    ApplyGuardrail,
    /// `POST …/v2/chat`, `…/v2/embed`, `…/v2/rerank` (Cohere's v2 API).
    Cohere,
    /// `POST …/v1/rerank` (Jina's, Voyage's), `…/rerank` (Bedrock's agent
    /// runtime), `…/rankingConfigs/{c}:rank` (Vertex AI's ranking API).
    Rerank,
    /// `POST …/moderations` (OpenAI's moderation API).
    Moderations,
    /// `POST …/images/generations` (OpenAI's image generation API).
    ImageGenerations,
    /// `POST …/audio/speech` (OpenAI's text to speech API).
    Speech,
    /// `POST …/audio/transcriptions` (OpenAI's speech to text API; a
    /// multipart form, not JSON).
    Transcriptions,
    /// `POST …/audio/translations` (OpenAI's speech to English text API;
    /// a multipart form).
    Translations,
    /// `POST …/images/edits` (OpenAI's image edit API; a multipart form).
    ImageEdits,
    /// OpenAI's Files and Batch APIs (`…/files…`, `…/batches…`).
    Files,
    /// `POST …/token` (Google's OAuth token endpoint).
    Token,
    /// `POST /v1/traces` (an OpenTelemetry collector's OTLP/HTTP sink: the
    /// spans are accepted and dropped).
    Traces,
    /// `GET …/models`.
    Models,
    /// `GET /_stats`.
    Stats,
    /// `POST /_stats/reset`.
    StatsReset,
    /// Anything else.
    NotFound,
}

impl Route {
    /// Whether the endpoint is a model call whose body is JSON.
    pub fn is_llm(self) -> bool {
        matches!(
            self,
            Route::ChatCompletions
                | Route::Completions
                | Route::Embeddings
                | Route::Messages
                | Route::CountTokens
                | Route::Converse
                | Route::GenerateContent
                | Route::RawPredict
                | Route::GoogleEmbed
                | Route::Invoke
                | Route::Responses
                | Route::ApplyGuardrail
                | Route::Cohere
                | Route::Rerank
                | Route::Moderations
                | Route::ImageGenerations
                | Route::Speech
        )
    }

    /// Whether the endpoint is a model call whose body is a multipart form.
    pub fn is_form(self) -> bool {
        matches!(
            self,
            Route::Transcriptions | Route::Translations | Route::ImageEdits
        )
    }

    /// Whether the endpoint is a call of the provider's API (a model call,
    /// JSON or form, or the Files and Batch APIs), counted in the stats'
    /// `received` whatever its answer.
    pub fn is_api_call(self) -> bool {
        self.is_llm() || self.is_form() || self == Route::Files
    }
}

/// Picks the route for `method` and `path` (without query string). LLM
/// endpoints match on the path suffix, so any prefix (`/v1`, `/custom/v1`,
/// Azure deployments) works.
pub fn route(method: &str, path: &str) -> Route {
    let path = path.trim_end_matches('/');
    match method {
        "GET" if path == "/_stats" => Route::Stats,
        "POST" if path == "/_stats/reset" => Route::StatsReset,
        m if files::is_files_path(m, path) => Route::Files,
        "POST" if path.ends_with("/chat/completions") => Route::ChatCompletions,
        "POST" if path.ends_with("/completions") => Route::Completions,
        "POST" if path.ends_with("/embeddings") => Route::Embeddings,
        "POST" if path.ends_with("/messages") => Route::Messages,
        "POST" if path.ends_with("/messages/count_tokens") => Route::CountTokens,
        "POST" if bedrock::parse_path(path).is_some() => Route::Converse,
        "POST" if gemini::parse_path(path).is_some() => Route::GenerateContent,
        "POST" if vertex::raw_predict_path(path).is_some() => Route::RawPredict,
        "POST" if embed::google_path(path).is_some() => Route::GoogleEmbed,
        "POST" if embed::invoke_path(path).is_some() => Route::Invoke,
        "POST" if path.ends_with("/responses") => Route::Responses,
        "POST" if guardrail::parse_path(path).is_some() => Route::ApplyGuardrail,
        "POST" if cohere::endpoint(path).is_some() => Route::Cohere,
        "POST" if rerank::api(path).is_some() => Route::Rerank,
        "POST" if path.ends_with("/moderations") => Route::Moderations,
        "POST" if path.ends_with("/images/generations") => Route::ImageGenerations,
        "POST" if path.ends_with("/audio/speech") => Route::Speech,
        "POST" if path.ends_with("/audio/transcriptions") => Route::Transcriptions,
        "POST" if path.ends_with("/audio/translations") => Route::Translations,
        "POST" if path.ends_with("/images/edits") => Route::ImageEdits,
        "POST" if path.ends_with("/token") => Route::Token,
        "POST" if path == "/v1/traces" => Route::Traces,
        "GET" if path.ends_with("/models") => Route::Models,
        _ => Route::NotFound,
    }
}

/// Answers a request for an LLM endpoint (see [`Route::is_llm`]) whose
/// body is the JSON object `body`. Azure OpenAI paths
/// (`/openai/deployments/<name>/…`) get Azure's checks and extras.
pub fn handle(route: Route, ctx: &Ctx<'_>, body: &serde_json::Value) -> Reply {
    let azure = azure::deployment(ctx.req.path());
    if azure.is_some() {
        if let Err(refusal) = azure::check(ctx, body) {
            return refusal;
        }
    }
    let reply = match route {
        Route::ChatCompletions => chat::handle(ctx, body),
        Route::Completions => text::handle(ctx, body),
        Route::Embeddings => embeddings::handle(ctx, body),
        Route::Messages => anthropic::handle(ctx, body),
        Route::CountTokens => anthropic::count_tokens(ctx, body),
        Route::Converse => bedrock::handle(ctx, body),
        Route::GenerateContent => gemini::handle(ctx, body),
        Route::RawPredict => vertex::raw_predict(ctx, body),
        Route::GoogleEmbed => embed::google(ctx, body),
        Route::Invoke => embed::bedrock_invoke(ctx, body),
        Route::Responses => responses::handle(ctx, body),
        Route::ApplyGuardrail => guardrail::handle(ctx, body),
        Route::Cohere => cohere::handle(ctx, body),
        Route::Rerank => rerank::handle(ctx, body),
        Route::Moderations => moderations::handle(ctx, body),
        Route::ImageGenerations => image_generations::handle(ctx, body),
        Route::Speech => speech::handle(ctx, body),
        Route::Models
        | Route::Transcriptions
        | Route::Translations
        | Route::ImageEdits
        | Route::Files
        | Route::Token
        | Route::Traces
        | Route::Stats
        | Route::StatsReset
        | Route::NotFound => errors::bad_request("not an LLM endpoint"),
    };
    match azure {
        Some(_) if route != Route::Embeddings => azure::decorate(reply),
        _ => reply,
    }
}

/// What a handler needs besides the request body.
pub struct Ctx<'a> {
    /// Process-wide sequence number, used in response ids.
    pub id: u64,
    /// Unix time of the response.
    pub created: u64,
    /// The request's model, echoed in the response (`"mock"` if absent).
    pub model: &'a str,
    /// Effective per-request controls.
    pub controls: &'a Controls,
    /// The request: path, query and headers, for the checks a real
    /// endpoint makes.
    pub req: &'a Request,
}

impl Ctx<'_> {
    /// Delay before streamed token `i`: time-to-first-token for the first,
    /// the inter-chunk delay for the rest.
    pub fn token_delay(&self, i: u64) -> u64 {
        if i == 0 {
            self.controls.ttft_ms
        } else {
            self.controls.chunk_delay_ms
        }
    }
}

/// One server-sent event, written to the wire as its own chunk.
#[derive(Debug)]
pub struct Event {
    /// Milliseconds to wait before sending it.
    pub delay_ms: u64,
    /// The complete SSE text, ending in a blank line.
    pub data: Vec<u8>,
}

/// A response body.
#[derive(Debug)]
pub enum Body {
    /// Sent in one write with `Content-Length`.
    Full(Vec<u8>),
    /// Sent as `text/event-stream` with chunked encoding, one event per write.
    Stream(Vec<Event>),
    /// Sent as `application/vnd.amazon.eventstream` (binary messages) with
    /// chunked encoding, one message per write.
    EventStream(Vec<Event>),
    /// Binary data of `content_type` (generated audio) with chunked
    /// encoding, one piece per write.
    Binary {
        /// The content type.
        content_type: &'static str,
        /// The pieces, in order.
        pieces: Vec<Event>,
    },
}

/// Tokens to record in the stats once the reply has been fully sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt: u64,
    /// Completion tokens.
    pub completion: u64,
}

/// A handler's response.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// The body.
    pub body: Body,
    /// Set for successfully served LLM requests.
    pub usage: Option<Usage>,
}

impl Reply {
    /// A JSON reply.
    pub fn json(status: u16, body: Vec<u8>) -> Self {
        Reply {
            status,
            body: Body::Full(body),
            usage: None,
        }
    }

    /// A `200` JSON reply serialized from `value`, counted with `usage`.
    pub fn ok<T: Serialize>(value: &T, usage: Usage) -> Self {
        Reply {
            status: 200,
            body: Body::Full(to_json(value)),
            usage: Some(usage),
        }
    }

    /// A `200` event-stream reply, counted with `usage`.
    pub fn stream(events: Vec<Event>, usage: Usage) -> Self {
        Reply {
            status: 200,
            body: Body::Stream(events),
            usage: Some(usage),
        }
    }

    /// A `200` AWS event-stream reply, counted with `usage`.
    pub fn event_stream(events: Vec<Event>, usage: Usage) -> Self {
        Reply {
            status: 200,
            body: Body::EventStream(events),
            usage: Some(usage),
        }
    }

    /// The `Content-Type` of the body.
    pub fn content_type(&self) -> &'static str {
        match self.body {
            Body::Full(_) => "application/json",
            Body::Stream(_) => "text/event-stream",
            Body::EventStream(_) => "application/vnd.amazon.eventstream",
            Body::Binary { content_type, .. } => content_type,
        }
    }
}

/// Serializes `value` to JSON bytes.
pub fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).expect("mock response serializes")
}

/// An SSE event `data: <json>\n\n`, optionally preceded by `event: <name>`.
pub fn sse<T: Serialize>(event: Option<&str>, value: &T, delay_ms: u64) -> Event {
    let mut data = Vec::with_capacity(256);
    if let Some(name) = event {
        data.extend_from_slice(b"event: ");
        data.extend_from_slice(name.as_bytes());
        data.push(b'\n');
    }
    data.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut data, value).expect("mock event serializes");
    data.extend_from_slice(b"\n\n");
    Event { delay_ms, data }
}

/// The OpenAI stream terminator `data: [DONE]`.
pub fn sse_done() -> Event {
    Event {
        delay_ms: 0,
        data: b"data: [DONE]\n\n".to_vec(),
    }
}

/// OpenAI `usage` object.
#[derive(Debug, Serialize)]
pub struct OpenAiUsage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Their sum.
    pub total_tokens: u64,
}

impl From<Usage> for OpenAiUsage {
    fn from(u: Usage) -> Self {
        OpenAiUsage {
            prompt_tokens: u.prompt,
            completion_tokens: u.completion,
            total_tokens: u.prompt + u.completion,
        }
    }
}

/// Whether the request asked for a stream (`"stream": true`).
pub fn wants_stream(body: &serde_json::Value) -> bool {
    body.get("stream")
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// Whether an OpenAI stream should end with a usage chunk
/// (`stream_options.include_usage`).
pub fn wants_stream_usage(body: &serde_json::Value) -> bool {
    body.get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// The static `GET …/models` body.
pub const MODELS_BODY: &[u8] =
    br#"{"object":"list","data":[{"id":"mock","object":"model","created":0,"owned_by":"mock"}]}"#;

/// A request to `target` with `headers`, for handler tests.
#[cfg(test)]
pub(crate) fn test_request(target: &str, headers: &[(&str, &str)]) -> Request {
    Request {
        method: "POST".into(),
        target: target.into(),
        minor_version: 1,
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        body: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_suffix() {
        assert_eq!(
            route("POST", "/v1/chat/completions"),
            Route::ChatCompletions
        );
        assert_eq!(
            route("POST", "/custom/v1/chat/completions/"),
            Route::ChatCompletions
        );
        assert_eq!(route("POST", "/chat/completions"), Route::ChatCompletions);
        assert_eq!(route("POST", "/v1/completions"), Route::Completions);
        assert_eq!(
            route("POST", "/openai/deployments/d/embeddings"),
            Route::Embeddings
        );
        assert_eq!(route("POST", "/anthropic/v1/messages"), Route::Messages);
        assert_eq!(
            route("POST", "/v1/messages/count_tokens"),
            Route::CountTokens
        );
        assert_eq!(
            route("POST", "/model/us.anthropic.claude%3A0/converse-stream"),
            Route::Converse
        );
        assert_eq!(route("GET", "/v1/models"), Route::Models);
        assert_eq!(route("POST", "/v1/traces"), Route::Traces);
        assert_eq!(route("POST", "/token"), Route::Token);
        for (path, form) in [
            ("/v1/audio/transcriptions", Route::Transcriptions),
            ("/v1/audio/translations", Route::Translations),
            ("/openai/deployments/d/images/edits", Route::ImageEdits),
        ] {
            assert_eq!(route("POST", path), form);
            assert!(form.is_form() && form.is_api_call() && !form.is_llm());
        }
        assert!(Route::Speech.is_api_call() && !Route::Speech.is_form());
        assert!(Route::Files.is_api_call());
        for other in [Route::Models, Route::Token, Route::Traces, Route::Stats] {
            assert!(!other.is_api_call());
        }
        assert_eq!(
            route(
                "POST",
                "/v1/projects/p/locations/l/publishers/google/models/m:streamGenerateContent"
            ),
            Route::GenerateContent
        );
        assert_eq!(route("POST", "/v2/chat"), Route::Cohere);
        assert_eq!(route("POST", "/v1/moderations"), Route::Moderations);
        assert_eq!(
            route("POST", "/openai/deployments/d/images/generations"),
            Route::ImageGenerations
        );
        assert_eq!(route("POST", "/cohere/v2/rerank"), Route::Cohere);
        assert_eq!(route("GET", "/_stats"), Route::Stats);
        assert_eq!(route("POST", "/_stats/reset"), Route::StatsReset);
        assert_eq!(route("GET", "/v1/chat/completions"), Route::NotFound);
        assert_eq!(route("POST", "/v1/other"), Route::NotFound);
    }

    #[test]
    fn models_body_is_json() {
        let v: serde_json::Value = serde_json::from_slice(MODELS_BODY).unwrap();
        assert_eq!(v["data"][0]["id"], "mock");
    }
}
