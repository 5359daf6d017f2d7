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
}

impl Endpoint {
    /// Path of this endpoint below a provider's OpenAI-style base URL.
    pub fn path_suffix(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Completions => "/completions",
            Endpoint::Embeddings => "/embeddings",
        }
    }

    /// The body field that carries the input, required on this endpoint.
    fn input_field(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "messages",
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
            Endpoint::ChatCompletions => view.messages,
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
        if endpoint == Endpoint::ChatCompletions
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
        Ok(LlmRequest {
            endpoint,
            body,
            model_span,
            model,
            stream,
            max_tokens,
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
