//! Relaying a provider's response body to the client as it arrives, reading
//! usage on the side, and turning upstream failures into client errors.

use crate::config::Deployment;
use crate::error::GatewayError;
use crate::server::Responder;
use crate::spend::{self, StreamUsage, Usage};
use crate::sse::UsageChunkFilter;
use crate::upstream::{UpstreamError, UpstreamResponse};
use std::time::{Duration, Instant};

/// Largest non-streamed body kept to read its `usage`.
const MAX_TAPPED_BODY: usize = 8 << 20;
/// Bytes kept of the end of a larger body, where its `usage` stands.
const TAPPED_TAIL: usize = 64 << 10;

/// Reads token usage from a response while it is relayed.
pub(super) enum UsageTap {
    /// A JSON body, kept whole up to [`MAX_TAPPED_BODY`], then only its last
    /// [`TAPPED_TAIL`] bytes (`overflowed`).
    Body { bytes: Vec<u8>, overflowed: bool },
    /// An SSE stream, parsed event by event.
    Stream { usage: StreamUsage },
}

impl UsageTap {
    /// A tap for a streamed or plain response.
    pub(super) fn new(stream: bool) -> Self {
        if stream {
            UsageTap::Stream {
                usage: StreamUsage::new(),
            }
        } else {
            UsageTap::Body {
                bytes: Vec::new(),
                overflowed: false,
            }
        }
    }

    /// Sees relayed bytes.
    pub(super) fn feed(&mut self, bytes: &[u8]) {
        match self {
            UsageTap::Body {
                bytes: kept,
                overflowed,
            } => {
                if !*overflowed && kept.len() + bytes.len() <= MAX_TAPPED_BODY {
                    kept.extend_from_slice(bytes);
                    return;
                }
                *overflowed = true;
                let piece = &bytes[bytes.len().saturating_sub(TAPPED_TAIL)..];
                let keep = TAPPED_TAIL - piece.len();
                kept.drain(..kept.len().saturating_sub(keep));
                kept.extend_from_slice(piece);
            }
            UsageTap::Stream { usage, .. } => usage.feed(bytes),
        }
    }

    /// The usage reported by the provider, else estimated (the prompt
    /// from `prompt`).
    pub(super) fn finish(self, prompt: &spend::PromptEstimate<'_>) -> Usage {
        let estimate = || Usage {
            prompt_tokens: prompt.get(),
            completion_tokens: 0,
        };
        match self {
            UsageTap::Body {
                bytes,
                overflowed: false,
            } => spend::from_response_body(&bytes).unwrap_or_else(estimate),
            UsageTap::Body {
                bytes,
                overflowed: true,
            } => spend::from_response_tail(&bytes).unwrap_or_else(estimate),
            UsageTap::Stream { usage } => usage.finish(|| prompt.get()).0,
        }
    }
}

/// Copies one response body from the provider to the client.
pub(super) struct Relay<'d> {
    dep: &'d Deployment,
    timeout: Duration,
    deadline: Instant,
    is_stream: bool,
    filter: Option<UsageChunkFilter>,
}

impl<'d> Relay<'d> {
    /// A relay for `dep`'s response; `strip_usage` drops the usage chunk the
    /// gateway asked for on the client's behalf.
    pub(super) fn new(
        dep: &'d Deployment,
        timeout: Duration,
        deadline: Instant,
        is_stream: bool,
        strip_usage: bool,
    ) -> Self {
        Relay {
            dep,
            timeout,
            deadline,
            is_stream,
            filter: strip_usage.then(UsageChunkFilter::default),
        }
    }

    /// Between pieces a stream may pause up to its timeout; a plain body must
    /// finish within the request's deadline.
    fn idle(&self) -> Duration {
        if self.is_stream {
            self.timeout
        } else {
            self.deadline.saturating_duration_since(Instant::now())
        }
    }

    /// Relays piece by piece, in chunked coding or raw under the provider's
    /// Content-Length.
    pub(super) async fn run(
        &mut self,
        resp: &mut UpstreamResponse,
        out: &mut Responder<'_>,
        chunked: bool,
        tap: &mut UsageTap,
    ) -> Result<(), GatewayError> {
        loop {
            let mut piece = Vec::new();
            let more = resp
                .next_piece(&mut piece, self.idle())
                .await
                .map_err(|e| upstream_error(e, self.dep, self.timeout))?;
            tap.feed(&piece);
            if let Some(filter) = &mut self.filter {
                let mut kept = Vec::with_capacity(piece.len());
                filter.filter(&piece, &mut kept);
                if !more {
                    filter.finish(&mut kept);
                }
                piece = kept;
            }
            if !piece.is_empty() {
                let written = if chunked {
                    out.send_chunk(&piece).await
                } else {
                    out.send_raw(piece).await
                };
                written.map_err(|_| GatewayError::Unavailable("client connection lost"))?;
            }
            if !more {
                return Ok(());
            }
        }
    }
}

pub(super) fn upstream_error(
    err: UpstreamError,
    dep: &Deployment,
    timeout: Duration,
) -> GatewayError {
    let provider = dep.provider_name.clone();
    let url = dep
        .base
        .as_ref()
        .map_or_else(String::new, |b| b.url.clone());
    match err {
        UpstreamError::Timeout => GatewayError::UpstreamTimeout {
            provider,
            deployment: dep.id.to_string(),
            after: timeout,
        },
        UpstreamError::Connect(reason) | UpstreamError::Io(reason) => {
            GatewayError::UpstreamUnreachable {
                provider,
                url,
                reason,
            }
        }
        UpstreamError::Protocol(reason) => GatewayError::UpstreamProtocol { provider, reason },
    }
}

/// The provider's error, with its status, message, type and `retry-after`.
pub(super) fn error_from_upstream(
    status: u16,
    body: &[u8],
    retry_after: Option<String>,
) -> GatewayError {
    let json: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let error = json.as_ref().and_then(|v| v.get("error"));
    let message = error
        .and_then(|e| e.get("message").and_then(|m| m.as_str()).or(e.as_str()))
        .or_else(|| {
            json.as_ref()
                .and_then(|v| v.get("message").or(v.get("detail")))
                .and_then(|m| m.as_str())
        })
        .map(str::to_string)
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text: String = text.chars().take(2000).collect();
            if text.trim().is_empty() {
                format!("upstream returned status {status}")
            } else {
                text
            }
        });
    let error_type = error
        .and_then(|e| e.get("type"))
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let provider_code = error
        .and_then(|e| e.get("code"))
        .and_then(|c| c.as_str())
        .map(str::to_string);
    GatewayError::Upstream {
        status,
        message,
        error_type,
        provider_code,
        retry_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_openai_style_upstream_errors() {
        let e = error_from_upstream(
            429,
            br#"{"error":{"message":"Rate limit reached","type":"requests","code":"429"}}"#,
            Some("7".into()),
        );
        assert_eq!(
            (e.status(), e.to_string(), e.error_type(), e.retry_after()),
            (429, "Rate limit reached".into(), "requests", Some("7"))
        );
        let e = error_from_upstream(502, b"<html>bad gateway</html>", None);
        assert_eq!(e.to_string(), "<html>bad gateway</html>");
        assert_eq!(e.error_type(), "api_error");
    }

    #[test]
    fn usage_of_a_body_larger_than_the_tap_is_still_read() {
        let mut tap = UsageTap::new(false);
        tap.feed(br#"{"choices":[{"message":{"content":""#);
        let filler = vec![b'x'; 1 << 20];
        for _ in 0..9 {
            tap.feed(&filler);
        }
        tap.feed(br#""}}],"usage":{"prompt_tokens":7,"completion_tokens":2400000}}"#);
        let body = b"{}";
        let usage = tap.finish(&spend::PromptEstimate::new(body));
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens),
            (7, 2_400_000)
        );
    }
}
