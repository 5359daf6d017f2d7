//! Request heads: parsed once with `httparse`, headers kept as ranges into the
//! head's own bytes so lookups borrow instead of allocating per header.

use std::mem::MaybeUninit;
use std::ops::Range;

/// How the request body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body.
    None,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Why a head could not be parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum HeadError {
    /// More bytes are needed.
    Partial,
    /// The head is larger than the byte limit.
    TooLarge,
    /// More headers than the count limit.
    TooManyHeaders,
    /// Not valid HTTP/1.x.
    Invalid(String),
}

/// A parsed request head.
#[derive(Debug)]
pub struct RequestHead {
    raw: Vec<u8>,
    method: Range<usize>,
    /// The request target, copied once: path and query are borrowed from
    /// it without validating UTF-8 and searching for `?` on every read.
    target: String,
    /// Where the target's first `?` is (its length when there is none).
    query_at: usize,
    headers: Vec<(Range<usize>, Range<usize>)>,
    /// HTTP/1.x minor version.
    pub minor_version: u8,
    /// Body delimitation.
    pub framing: BodyFraming,
    /// Whether the connection may serve another request after this one.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent.
    pub expect_continue: bool,
}

impl RequestHead {
    /// The request method.
    pub fn method(&self) -> &str {
        std::str::from_utf8(&self.raw[self.method.clone()]).unwrap_or("")
    }

    /// The path without the query string.
    pub fn path(&self) -> &str {
        &self.target[..self.query_at]
    }

    /// The query string after `?`, empty when there is none.
    pub fn query(&self) -> &str {
        self.target.get(self.query_at + 1..).unwrap_or("")
    }

    /// First value of a header (case-insensitive name), if valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| self.raw[n.clone()].eq_ignore_ascii_case(name.as_bytes()))
            .and_then(|(_, v)| std::str::from_utf8(&self.raw[v.clone()]).ok())
    }

    /// Every header in order, as name and value; those not valid UTF-8
    /// are left out.
    pub fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.headers.iter().filter_map(|(n, v)| {
            let name = std::str::from_utf8(&self.raw[n.clone()]).ok()?;
            Some((name, std::str::from_utf8(&self.raw[v.clone()]).ok()?))
        })
    }
}

/// Header slots kept on the stack while parsing.
const STACK_HEADERS: usize = 128;

/// Parses a request head from the start of `buf`; returns it with its length.
pub fn parse_request_head(
    buf: &[u8],
    max_headers: usize,
    max_bytes: usize,
) -> Result<(RequestHead, usize), HeadError> {
    // Header slots live on the stack for the usual limit; only a raised
    // limit costs an allocation. Left uninitialized: httparse writes the
    // slots it uses (filling all 128 cost more than parsing a head).
    let mut stack = [const { MaybeUninit::<httparse::Header>::uninit() }; STACK_HEADERS];
    let mut heap = Vec::new();
    let storage = if max_headers <= STACK_HEADERS {
        &mut stack[..max_headers]
    } else {
        heap.resize_with(max_headers, MaybeUninit::uninit);
        &mut heap[..]
    };
    let mut req = httparse::Request::new(&mut []);
    let parsed =
        httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut req, buf, storage);
    let len = match parsed {
        Ok(httparse::Status::Complete(n)) if n > max_bytes => return Err(HeadError::TooLarge),
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > max_bytes => return Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => return Err(HeadError::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(e) => return Err(HeadError::Invalid(e.to_string())),
    };
    let base = buf.as_ptr() as usize;
    let span = |s: &[u8]| {
        let start = s.as_ptr() as usize - base;
        start..start + s.len()
    };
    let method = span(req.method.unwrap_or("").as_bytes());
    let target = req.path.unwrap_or("").to_string();
    let query_at = memchr::memchr(b'?', target.as_bytes()).unwrap_or(target.len());
    let minor_version = req.version.unwrap_or(1);
    let mut framing = BodyFraming::None;
    let mut keep_alive = minor_version >= 1;
    let mut expect_continue = false;
    let mut saw_length = false;
    let mut headers = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_content_length(h.value)
                .ok_or_else(|| HeadError::Invalid("invalid Content-Length".into()))?;
            saw_length = true;
            if matches!(framing, BodyFraming::Length(m) if m != n) {
                return Err(HeadError::Invalid(
                    "conflicting Content-Length headers".into(),
                ));
            }
            if framing != BodyFraming::Chunked {
                framing = BodyFraming::Length(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // Only `chunked`, once: other codings (gzip, chunked) are not
            // decoded here, and a repeated or disguised `chunked` is a
            // request-smuggling vector, so both are refused.
            if framing == BodyFraming::Chunked
                || !h.value.trim_ascii().eq_ignore_ascii_case(b"chunked")
            {
                return Err(HeadError::Invalid("unsupported Transfer-Encoding".into()));
            }
            framing = BodyFraming::Chunked;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in h.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"expect") {
            expect_continue = h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue");
        }
        headers.push((span(name), span(h.value)));
    }
    if framing == BodyFraming::Chunked && saw_length {
        // RFC 9112 §6.1: a request with both is read as chunked and the
        // connection closed after the response (request smuggling guard).
        keep_alive = false;
    }
    if framing == BodyFraming::Length(0) {
        framing = BodyFraming::None;
    }
    let raw = buf[..len].to_vec();
    Ok((
        RequestHead {
            raw,
            method,
            target,
            query_at,
            headers,
            minor_version,
            framing,
            keep_alive,
            expect_continue,
        },
        len,
    ))
}

/// A Content-Length value: ASCII digits only (no sign, no spaces inside).
pub(crate) fn parse_content_length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // At most 19 digits: below u64::MAX, no overflow.
    Some(digits.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_is_plain_digits_up_to_19() {
        assert_eq!(parse_content_length(b" 0 "), Some(0));
        assert_eq!(parse_content_length(b"0042"), Some(42));
        assert_eq!(
            parse_content_length(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        for bad in [
            &b""[..],
            b" ",
            b"10000000000000000000",
            b"+5",
            b"-1",
            b"1 2",
            b"0x10",
            b"\xd9\xa1",
        ] {
            assert_eq!(parse_content_length(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parses_pipelined_heads_one_at_a_time() {
        let wire = b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nAuthorization: Bearer sk-1\r\n\r\n{}GET /health/liveliness HTTP/1.1\r\nConnection: close\r\n\r\n";
        let (h, n) = parse_request_head(wire, 100, 65536).unwrap();
        assert_eq!((h.method(), h.path()), ("POST", "/v1/chat/completions"));
        assert_eq!(h.query(), "x=1");
        assert_eq!(h.header("authorization"), Some("Bearer sk-1"));
        assert_eq!(h.framing, BodyFraming::Length(2));
        assert!(h.keep_alive);
        let (h2, _) = parse_request_head(&wire[n + 2..], 100, 65536).unwrap();
        assert_eq!((h2.path(), h2.query()), ("/health/liveliness", ""));
        assert!(!h2.keep_alive);
    }

    #[test]
    fn enforces_limits_and_framing() {
        assert_eq!(
            parse_request_head(b"GET / HTTP/1.1\r\nA: b", 100, 65536).unwrap_err(),
            HeadError::Partial
        );
        assert_eq!(
            parse_request_head(b"GET / HTTP/1.1\r\nA: bbbbbbbbbbbbbbbbbbbb", 100, 16).unwrap_err(),
            HeadError::TooLarge
        );
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "A: b\r\n".repeat(5));
        assert_eq!(
            parse_request_head(many.as_bytes(), 4, 65536).unwrap_err(),
            HeadError::TooManyHeaders
        );
        let chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
        let (h, _) = parse_request_head(chunked, 100, 65536).unwrap();
        assert_eq!(h.framing, BodyFraming::Chunked);
        assert!(h.expect_continue);
        assert!(matches!(
            parse_request_head(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 100, 65536),
            Err(HeadError::Invalid(_))
        ));
        for te in [
            "gzip, chunked",
            "chunked, chunked",
            "chunked\r\nTransfer-Encoding: chunked",
            "identity",
            "\x0bchunked",
            "chunked;q=1",
        ] {
            let head = format!("POST / HTTP/1.1\r\nTransfer-Encoding: {te}\r\n\r\n");
            assert!(
                matches!(
                    parse_request_head(head.as_bytes(), 100, 65536),
                    Err(HeadError::Invalid(_))
                ),
                "{te:?}"
            );
        }
        let (h, _) = parse_request_head(
            b"POST / HTTP/1.1\r\nTransfer-Encoding:  Chunked \r\n\r\n",
            100,
            65536,
        )
        .unwrap();
        assert_eq!(h.framing, BodyFraming::Chunked);
        let (h10, _) = parse_request_head(b"GET / HTTP/1.0\r\n\r\n", 100, 65536).unwrap();
        assert!(!h10.keep_alive);
    }
}
