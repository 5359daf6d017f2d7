//! The client's LLM request: which endpoint, and the few body fields routing
//! needs, read through a borrowed view so the body is never re-serialized.

use crate::error::GatewayError;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::ops::Range;

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
}

impl Endpoint {
    /// Path of this endpoint below a provider's OpenAI-style base URL.
    pub fn path_suffix(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Completions => "/completions",
            Endpoint::Embeddings => "/embeddings",
            Endpoint::Messages => "/messages",
        }
    }

    /// The format the client speaks on this endpoint.
    pub fn format(self) -> crate::formats::Format {
        match self {
            Endpoint::Messages => crate::formats::Format::Anthropic,
            _ => crate::formats::Format::OpenAi,
        }
    }

    /// The body field that carries the input, required on this endpoint.
    fn input_field(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions | Endpoint::Messages => "messages",
            Endpoint::Completions => "prompt",
            Endpoint::Embeddings => "input",
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
    /// `max_tokens` or `max_completion_tokens`: the output cap the client set.
    pub max_tokens: Option<u64>,
    /// LiteLLM's per-request `fallbacks` (removed from the forwarded body).
    pub fallbacks: Option<serde_json::Value>,
    /// LiteLLM's per-request `num_retries` (removed from the forwarded body).
    pub num_retries: Option<u32>,
    /// The body's `user` (`metadata.user_id` on Messages): LiteLLM's end
    /// user, a rate-limit scope.
    pub end_user: Option<String>,
    /// Headers of the client's request that a provider of the client's own
    /// format receives too (`anthropic-version`, `anthropic-beta`).
    pub forward_headers: Vec<(&'static str, String)>,
}

#[derive(Deserialize)]
struct RoutingView<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    stream: Option<serde_json::Value>,
    #[serde(borrow)]
    messages: Option<&'a RawValue>,
    #[serde(borrow)]
    prompt: Option<&'a RawValue>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    max_tokens: Option<serde_json::Value>,
    max_completion_tokens: Option<serde_json::Value>,
    #[serde(borrow)]
    fallbacks: Option<&'a RawValue>,
    #[serde(borrow)]
    num_retries: Option<&'a RawValue>,
    user: Option<serde_json::Value>,
    #[serde(borrow)]
    metadata: Option<&'a RawValue>,
}

/// `metadata.user_id` of a Messages request.
#[derive(Deserialize)]
struct MetadataView {
    user_id: Option<serde_json::Value>,
}

impl LlmRequest {
    /// Reads the routing fields of `body` for `endpoint`.
    pub fn parse(endpoint: Endpoint, body: Bytes) -> Result<LlmRequest, GatewayError> {
        if body.is_empty() {
            return Err(GatewayError::MalformedJson(
                "the body is empty; expected a JSON object".into(),
            ));
        }
        let view: RoutingView = serde_json::from_slice(&body)
            .map_err(|e| GatewayError::MalformedJson(e.to_string()))?;
        let raw_model = view.model.ok_or(GatewayError::MissingParam("model"))?;
        let model: String =
            serde_json::from_str(raw_model.get()).map_err(|_| GatewayError::InvalidParam {
                param: "model",
                message: "must be a string".into(),
            })?;
        let start = raw_model.get().as_ptr() as usize - body.as_ptr() as usize;
        let model_span = start..start + raw_model.get().len();
        let input = match endpoint {
            Endpoint::ChatCompletions | Endpoint::Messages => view.messages,
            Endpoint::Completions => view.prompt,
            Endpoint::Embeddings => view.input,
        };
        match input {
            None => return Err(GatewayError::MissingParam(endpoint.input_field())),
            Some(v) if v.get() == "null" => {
                return Err(GatewayError::MissingParam(endpoint.input_field()))
            }
            Some(_) => {}
        }
        if matches!(endpoint, Endpoint::ChatCompletions | Endpoint::Messages)
            && !view.messages.is_some_and(|m| m.get().starts_with('['))
        {
            return Err(GatewayError::InvalidParam {
                param: "messages",
                message: "must be an array of messages".into(),
            });
        }
        let stream = match view.stream {
            None | Some(serde_json::Value::Null) => false,
            Some(serde_json::Value::Bool(b)) => b,
            Some(_) => {
                return Err(GatewayError::InvalidParam {
                    param: "stream",
                    message: "must be a boolean".into(),
                })
            }
        };
        let max_tokens = match view.max_completion_tokens.or(view.max_tokens) {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| GatewayError::InvalidParam {
                param: "max_tokens",
                message: "must be a non-negative integer".into(),
            })?),
        };
        let fallbacks =
            match view.fallbacks {
                None => None,
                Some(raw) => Some(serde_json::from_str(raw.get()).map_err(|e| {
                    GatewayError::InvalidParam {
                        param: "fallbacks",
                        message: e.to_string(),
                    }
                })?),
            };
        let num_retries = match view.num_retries.map(|r| r.get()) {
            None | Some("null") => None,
            Some(raw) => Some(raw.parse::<u32>().map_err(|_| GatewayError::InvalidParam {
                param: "num_retries",
                message: "must be a non-negative integer".into(),
            })?),
        };
        let user = match (endpoint, view.metadata) {
            (Endpoint::Messages, Some(raw)) => {
                serde_json::from_str::<Option<MetadataView>>(raw.get())
                    .map_err(|_| GatewayError::InvalidParam {
                        param: "metadata",
                        message: "must be an object".into(),
                    })?
                    .and_then(|m| m.user_id)
            }
            (Endpoint::Messages, None) => None,
            _ => view.user,
        };
        let end_user = match user {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s),
            Some(_) => {
                return Err(GatewayError::InvalidParam {
                    param: "user",
                    message: "must be a string".into(),
                })
            }
        };
        let own: Vec<std::ops::Range<usize>> = [view.fallbacks, view.num_retries]
            .into_iter()
            .flatten()
            .map(|raw| {
                let start = raw.get().as_ptr() as usize - body.as_ptr() as usize;
                start..start + raw.get().len()
            })
            .collect();
        if !own.is_empty() {
            // Rare: re-read the body without the gateway's own fields so the
            // provider never sees them.
            let stripped = strip_members(&body, &own);
            let mut again = LlmRequest::parse(endpoint, Bytes::from(stripped))?;
            again.fallbacks = fallbacks;
            again.num_retries = num_retries;
            return Ok(again);
        }
        Ok(LlmRequest {
            endpoint,
            body,
            model_span,
            model,
            stream,
            max_tokens,
            fallbacks,
            num_retries,
            end_user,
            forward_headers: Vec::new(),
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
            end_user: self.end_user.clone(),
            forward_headers: self.forward_headers.clone(),
        }
    }

    /// The body with `model` replaced by `new_model`, as up to three slices that
    /// share the original buffer: nothing else is re-serialized.
    pub fn body_with_model(&self, new_model: &str) -> [Bytes; 3] {
        let quoted = serde_json::to_vec(new_model).expect("string serializes");
        [
            self.body.slice(..self.model_span.start),
            Bytes::from(quoted),
            self.body.slice(self.model_span.end..),
        ]
    }
}

/// `body` without the top-level members whose values span `values`: each
/// member's key, colon, value and one adjacent comma are cut out; nothing
/// else changes.
fn strip_members(body: &[u8], values: &[std::ops::Range<usize>]) -> Vec<u8> {
    let mut cuts: Vec<std::ops::Range<usize>> = values
        .iter()
        .map(|v| member_span(body, v.clone()))
        .collect();
    cuts.sort_by_key(|c| c.start);
    let mut out = Vec::with_capacity(body.len());
    let mut at = 0;
    for cut in cuts {
        out.extend_from_slice(&body[at..cut.start]);
        at = cut.end;
    }
    out.extend_from_slice(&body[at..]);
    out
}

/// The span of a member given its value's span: back over `"key" :`, then
/// forward over a following comma, else back over a preceding one.
fn member_span(body: &[u8], value: std::ops::Range<usize>) -> std::ops::Range<usize> {
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
        // The key: our field names hold no escaped quotes.
        start -= 1;
        while start > 0 && body[start - 1] != b'"' {
            start -= 1;
        }
        start = start.saturating_sub(1);
    }
    let mut end = value.end;
    while end < body.len() && body[end].is_ascii_whitespace() {
        end += 1;
    }
    if end < body.len() && body[end] == b',' {
        return start..end + 1;
    }
    let before = skip_back(start);
    if before > 0 && body[before - 1] == b',' {
        return before - 1..value.end;
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
}
