//! The Anthropic Messages API as a client format (`/v1/messages`): requests
//! become internal chat completions requests, internal responses and
//! streams become Messages responses and event streams, errors take
//! Anthropic's shape. Used when a Messages request is served by a provider
//! that does not speak Messages itself; to an `anthropic/` deployment the
//! request passes through untranslated.

mod request;
mod response;
mod stream;

pub use request::to_chat;
pub use response::from_chat;
pub use stream::ChatToMessages;

use crate::error::GatewayError;
use serde_json::json;

/// Anthropic's error `type` for an HTTP status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 | 422 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        408 | 504 => "timeout_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 | 503 => "overloaded_error",
        _ => "api_error",
    }
}

/// The body of `err` in Anthropic's shape:
/// `{"type":"error","error":{"type":...,"message":...}}`.
pub fn error_body(err: &GatewayError) -> Vec<u8> {
    let body = json!({
        "type": "error",
        "error": {"type": error_type(err.status()), "message": err.to_string()},
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_take_anthropics_shape() {
        let body = error_body(&GatewayError::InvalidKey("sk-x".into()));
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "authentication_error");
        assert!(v["error"]["message"].as_str().unwrap().contains("sk-x"));
        assert_eq!(error_type(529), "overloaded_error");
        assert_eq!(error_type(500), "api_error");
    }
}
