//! Upstream response heads: status, the few headers the gateway acts on, and
//! how the body is delimited.

use std::mem::MaybeUninit;

/// How an upstream response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body (HEAD, 204, 304).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the connection closes.
    UntilClose,
}

/// A parsed upstream response head.
#[derive(Debug)]
pub struct ResponseHead {
    /// Status code.
    pub status: u16,
    /// Body delimitation.
    pub framing: ResponseFraming,
    /// `Content-Type`, passed to the client.
    pub content_type: Option<String>,
    /// `Retry-After`, passed to the client.
    pub retry_after: Option<String>,
    /// `Location`, for redirects the gateway follows itself.
    pub location: Option<String>,
    /// Whether the connection can be reused after the body.
    pub keep_alive: bool,
    /// `x-ratelimit-remaining-requests`, when a whole number.
    pub ratelimit_remaining_requests: Option<u64>,
    /// `x-ratelimit-remaining-tokens`, when a whole number.
    pub ratelimit_remaining_tokens: Option<u64>,
}

impl ResponseHead {
    /// Whether the body is an event stream: SSE, or AWS's binary framing.
    pub fn is_event_stream(&self) -> bool {
        self.content_type.as_deref().is_some_and(|c| {
            c.starts_with("text/event-stream")
                || c.starts_with("application/vnd.amazon.eventstream")
        })
    }
}

/// Parses a response head; `Ok(None)` when more bytes are needed.
pub fn parse_response_head(buf: &[u8]) -> Result<Option<(ResponseHead, usize)>, String> {
    // Uninitialized: httparse writes the slots it uses.
    let mut storage = [const { MaybeUninit::<httparse::Header>::uninit() }; 96];
    let mut res = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut res,
        buf,
        &mut storage,
    );
    let len = match parsed {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > 256 * 1024 => {
            return Err("response head too large".into())
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let status = res.code.unwrap_or(0);
    let mut length = None;
    let mut transfer_coding = None;
    let mut content_type = None;
    let mut retry_after = None;
    let mut location = None;
    let mut remaining_requests = None;
    let mut remaining_tokens = None;
    let mut keep_alive = res.version == Some(1);
    for h in res.headers.iter() {
        let value = || String::from_utf8_lossy(h.value).trim().to_string();
        let is = |name: &str| h.name.eq_ignore_ascii_case(name);
        if is("content-length") {
            let n =
                super::request::parse_content_length(h.value).ok_or("invalid Content-Length")?;
            if length.is_some_and(|m| m != n) {
                return Err("conflicting Content-Length headers".into());
            }
            length = Some(n);
        } else if is("transfer-encoding") {
            // RFC 9112 §6.3: the final coding decides; several headers are
            // one comma-separated list.
            let last = h.value.rsplit(|&b| b == b',').next().unwrap_or(b"");
            transfer_coding = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        } else if is("content-type") {
            content_type = Some(value());
        } else if is("retry-after") {
            retry_after = Some(value());
        } else if is("location") {
            location = Some(value());
        } else if is("x-ratelimit-remaining-requests") {
            remaining_requests = whole_number(h.value);
        } else if is("x-ratelimit-remaining-tokens") {
            remaining_tokens = whole_number(h.value);
        } else if is("connection") {
            if contains_ignore_case(h.value, b"close") {
                keep_alive = false;
            } else if contains_ignore_case(h.value, b"keep-alive") {
                keep_alive = true;
            }
        }
    }
    let mut framing = match (transfer_coding, length) {
        (Some(true), _) => ResponseFraming::Chunked,
        (Some(false), _) | (None, None) => ResponseFraming::UntilClose,
        (None, Some(n)) => ResponseFraming::Length(n),
    };
    if transfer_coding.is_some() && length.is_some() {
        // Both: the coding wins, and the connection is not trusted again.
        keep_alive = false;
    }
    if status == 204 || status == 304 || (100..200).contains(&status) {
        framing = ResponseFraming::Empty;
    }
    if framing == ResponseFraming::UntilClose {
        keep_alive = false;
    }
    Ok(Some((
        ResponseHead {
            status,
            framing,
            content_type,
            retry_after,
            location,
            keep_alive,
            ratelimit_remaining_requests: remaining_requests,
            ratelimit_remaining_tokens: remaining_tokens,
        },
        len,
    )))
}

/// Whether `value` holds `token` (lowercase ASCII), in any case.
fn contains_ignore_case(value: &[u8], token: &[u8]) -> bool {
    value
        .windows(token.len())
        .any(|w| w.eq_ignore_ascii_case(token))
}

/// A header value that is a whole number (surrounding spaces allowed).
fn whole_number(value: &[u8]) -> Option<u64> {
    std::str::from_utf8(value).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_framing_and_passed_headers() {
        let (h, n) = parse_response_head(b"HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.status, h.framing, h.retry_after.as_deref()),
            (429, ResponseFraming::Length(2), Some("7"))
        );
        assert_eq!(n, 92, "the head ends before the body");
        let (s, _) = parse_response_head(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(s.is_event_stream() && s.keep_alive && s.framing == ResponseFraming::Chunked);
        assert!(parse_response_head(b"HTTP/1.1 200 OK\r\n")
            .unwrap()
            .is_none());
        let (c, _) = parse_response_head(b"HTTP/1.0 200 OK\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!c.keep_alive && c.framing == ResponseFraming::UntilClose);
    }

    #[test]
    fn the_connection_header_decides_reuse_in_any_case() {
        let reused = |version: &str, connection: &str| {
            let head = format!(
                "HTTP/{version} 200 OK\r\nContent-Length: 0\r\nConnection: {connection}\r\n\r\n"
            );
            parse_response_head(head.as_bytes())
                .unwrap()
                .unwrap()
                .0
                .keep_alive
        };
        assert!(!reused("1.1", "Close"));
        assert!(!reused("1.1", "keep-alive, CLOSE"));
        assert!(!reused("1.1", "\u{e9}close"));
        assert!(reused("1.1", "upgrade"));
        assert!(reused("1.0", "Keep-Alive"));
        assert!(!reused("1.0", "keep-aliv"));
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let framing = |headers: &str| {
            let head = format!("HTTP/1.1 200 OK\r\n{headers}\r\n");
            parse_response_head(head.as_bytes()).map(|h| h.map(|(h, _)| (h.framing, h.keep_alive)))
        };
        use ResponseFraming::*;
        assert_eq!(
            framing("Content-Length: 5\r\n"),
            Ok(Some((Length(5), true)))
        );
        assert!(framing("Content-Length: 5\r\nContent-Length: 6\r\n").is_err());
        assert_eq!(
            framing("Content-Length: 5\r\nContent-Length: 5\r\n"),
            Ok(Some((Length(5), true)))
        );
        assert_eq!(
            framing("Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"),
            Ok(Some((Chunked, false)))
        );
        assert_eq!(
            framing("Transfer-Encoding: gzip, chunked\r\n"),
            Ok(Some((Chunked, true)))
        );
        assert_eq!(
            framing("Transfer-Encoding: notchunked\r\n"),
            Ok(Some((UntilClose, false)))
        );
        assert_eq!(
            framing("Transfer-Encoding: chunked, gzip\r\n"),
            Ok(Some((UntilClose, false)))
        );
    }
}
