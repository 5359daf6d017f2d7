//! OpenAI-style error bodies.

use serde::Serialize;

use super::{to_json, Reply};

#[derive(Serialize)]
struct Envelope<'a> {
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: String,
}

/// `{"error":{"message":…,"type":…,"param":null,"code":"<status>"}}`.
pub fn body(status: u16, kind: &str, message: &str) -> Vec<u8> {
    to_json(&Envelope {
        error: Detail {
            message,
            kind,
            param: None,
            code: status.to_string(),
        },
    })
}

/// A reply with status `status` and an OpenAI error body.
pub fn reply(status: u16, kind: &str, message: &str) -> Reply {
    Reply::json(status, body(status, kind, message))
}

/// A `400 invalid_request_error` reply.
pub fn bad_request(message: &str) -> Reply {
    reply(400, "invalid_request_error", message)
}

/// A `404` reply for an unknown endpoint.
pub fn not_found(method: &str, path: &str) -> Reply {
    let message = format!("Unknown request URL: {method} {path}");
    reply(404, "invalid_request_error", &message)
}

/// An injected error (`x-mock-status` or `--error-rate`).
pub fn injected(status: u16, message: Option<&str>) -> Reply {
    reply(status, "mock_error", message.unwrap_or("mock error"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::Body;

    #[test]
    fn error_shape() {
        let r = not_found("GET", "/nope");
        assert_eq!(r.status, 404);
        let Body::Full(b) = r.body else { panic!() };
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "404");
        assert!(v["error"]["param"].is_null());
        let Body::Full(b) = injected(429, None).body else {
            panic!()
        };
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["error"]["message"], "mock error");
        assert_eq!(v["error"]["type"], "mock_error");
        assert_eq!(v["error"]["code"], "429");
    }
}
