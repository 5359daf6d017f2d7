//! Minimal server-side HTTP/1.1 framing for the mock provider.
//!
//! Parses one request at a time from the front of a connection buffer (so
//! pipelined requests are handled by calling [`parse_request`] repeatedly),
//! decodes `Content-Length` and `chunked` request bodies, and encodes response
//! heads and chunked-transfer frames. No I/O happens here.

use std::fmt::Write as _;

/// Largest accepted request head (request line plus headers), in bytes.
pub const MAX_HEAD: usize = 64 * 1024;
/// Largest accepted request body, in bytes.
pub const MAX_BODY: usize = 64 * 1024 * 1024;
/// Most headers accepted in one request.
const MAX_HEADERS: usize = 96;

/// The terminating frame of a chunked response body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";
/// Interim response sent to clients that wait on `Expect: 100-continue`.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A fully received HTTP request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Request method, e.g. `POST`.
    pub method: String,
    /// Request target as sent, including any query string.
    pub target: String,
    /// Minor HTTP version: `1` for HTTP/1.1, `0` for HTTP/1.0.
    pub minor_version: u8,
    /// Headers in arrival order; names are lower-cased.
    pub headers: Vec<(String, String)>,
    /// The decoded body (chunked framing removed).
    pub body: Vec<u8>,
}

impl Request {
    /// First value of the header `name` (which must be given in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The request path without its query string.
    pub fn path(&self) -> &str {
        match self.target.find('?') {
            Some(i) => &self.target[..i],
            None => &self.target,
        }
    }

    /// Whether the connection may be reused after this request.
    pub fn keep_alive(&self) -> bool {
        let conn = self.header("connection").map(str::to_ascii_lowercase);
        match conn.as_deref() {
            Some(v) if has_token(v, "close") => false,
            Some(v) if has_token(v, "keep-alive") => true,
            _ => self.minor_version >= 1,
        }
    }
}

/// Outcome of trying to parse a request from the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parse {
    /// A whole request, and how many buffer bytes it used.
    Complete(Request, usize),
    /// More bytes are needed. `expect_continue` is true once the head has
    /// arrived and asked for `100 Continue` before its body is sent.
    Partial {
        /// The head is complete and carries `Expect: 100-continue`.
        expect_continue: bool,
    },
}

/// Why a request could not be parsed; the connection must be closed after
/// answering with [`HttpError::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpError {
    /// Malformed request line, headers or body framing.
    BadRequest(&'static str),
    /// The request head exceeds [`MAX_HEAD`] or has too many headers.
    HeadTooLarge,
    /// The body exceeds [`MAX_BODY`].
    BodyTooLarge,
}

impl HttpError {
    /// The HTTP status to answer with.
    pub fn status(self) -> u16 {
        match self {
            HttpError::BadRequest(_) => 400,
            HttpError::HeadTooLarge => 431,
            HttpError::BodyTooLarge => 413,
        }
    }

    /// A human-readable description.
    pub fn message(self) -> &'static str {
        match self {
            HttpError::BadRequest(m) => m,
            HttpError::HeadTooLarge => "request head too large",
            HttpError::BodyTooLarge => "request body too large",
        }
    }
}

/// How the request body is delimited.
enum Framing {
    Length(usize),
    Chunked,
}

/// Parses the request at the front of `buf`.
pub fn parse_request(buf: &[u8]) -> Result<Parse, HttpError> {
    let mut raw_headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut raw_headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() > MAX_HEAD {
                return Err(HttpError::HeadTooLarge);
            }
            return Ok(Parse::Partial {
                expect_continue: false,
            });
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::HeadTooLarge),
        Err(_) => return Err(HttpError::BadRequest("malformed request head")),
    };
    if head_len > MAX_HEAD {
        return Err(HttpError::HeadTooLarge);
    }

    let mut framing = Framing::Length(0);
    let mut content_length: Option<usize> = None;
    let mut expect_continue = false;
    let mut headers = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let value = String::from_utf8_lossy(h.value).into_owned();
        match name.as_str() {
            "content-length" => {
                let n: usize = value
                    .trim()
                    .parse()
                    .map_err(|_| HttpError::BadRequest("invalid content-length"))?;
                if content_length.is_some_and(|old| old != n) {
                    return Err(HttpError::BadRequest("conflicting content-length"));
                }
                content_length = Some(n);
            }
            "transfer-encoding" => {
                let last = value.rsplit(',').next().unwrap_or("").trim();
                if last.eq_ignore_ascii_case("chunked") {
                    framing = Framing::Chunked;
                } else {
                    return Err(HttpError::BadRequest("unsupported transfer-encoding"));
                }
            }
            "expect" => expect_continue = value.trim().eq_ignore_ascii_case("100-continue"),
            _ => {}
        }
        headers.push((name, value));
    }
    if let (Framing::Length(_), Some(n)) = (&framing, content_length) {
        framing = Framing::Length(n);
    }

    let rest = &buf[head_len..];
    let (body, body_len) = match framing {
        Framing::Length(n) => {
            if n > MAX_BODY {
                return Err(HttpError::BodyTooLarge);
            }
            if rest.len() < n {
                return Ok(Parse::Partial { expect_continue });
            }
            (rest[..n].to_vec(), n)
        }
        Framing::Chunked => match decode_chunked(rest)? {
            Some(done) => done,
            None => return Ok(Parse::Partial { expect_continue }),
        },
    };

    let request = Request {
        method: req.method.unwrap_or("").to_string(),
        target: req.path.unwrap_or("").to_string(),
        minor_version: req.version.unwrap_or(1),
        headers,
        body,
    };
    Ok(Parse::Complete(request, head_len + body_len))
}

/// Decodes a chunked body from the front of `buf`. Returns the body and the
/// number of bytes used (including trailers), or `None` if incomplete.
pub fn decode_chunked(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, HttpError> {
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let Some(line_end) = find_crlf(&buf[pos..]) else {
            if buf.len() - pos > 1024 {
                return Err(HttpError::BadRequest("chunk size line too long"));
            }
            return Ok(None);
        };
        let line = &buf[pos..pos + line_end];
        let size_part = match line.iter().position(|&b| b == b';') {
            Some(i) => &line[..i],
            None => line,
        };
        let size =
            parse_hex(trim_ascii(size_part)).ok_or(HttpError::BadRequest("invalid chunk size"))?;
        pos += line_end + 2;
        if size == 0 {
            // Trailer section: header lines until an empty line.
            loop {
                let Some(end) = find_crlf(&buf[pos..]) else {
                    return Ok(None);
                };
                pos += end + 2;
                if end == 0 {
                    return Ok(Some((body, pos)));
                }
            }
        }
        if body.len() + size > MAX_BODY {
            return Err(HttpError::BodyTooLarge);
        }
        if buf.len() < pos + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&buf[pos..pos + size]);
        pos += size;
        if &buf[pos..pos + 2] != b"\r\n" {
            return Err(HttpError::BadRequest("missing CRLF after chunk data"));
        }
        pos += 2;
    }
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLen {
    /// `Content-Length` with this many bytes.
    Fixed(usize),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// Encodes a response head. Header values are stripped of control
/// characters so echoed request data cannot break the framing.
pub fn response_head(
    status: u16,
    content_type: &str,
    len: BodyLen,
    keep_alive: bool,
    headers: &[(&str, &str)],
) -> Vec<u8> {
    let mut s = String::with_capacity(256);
    let _ = write!(s, "HTTP/1.1 {} {}\r\n", status, reason(status));
    let _ = write!(s, "content-type: {content_type}\r\n");
    match len {
        BodyLen::Fixed(n) => {
            let _ = write!(s, "content-length: {n}\r\n");
        }
        BodyLen::Chunked => s.push_str("transfer-encoding: chunked\r\ncache-control: no-cache\r\n"),
    }
    s.push_str(if keep_alive {
        "connection: keep-alive\r\n"
    } else {
        "connection: close\r\n"
    });
    for (name, value) in headers {
        s.push_str(name);
        s.push_str(": ");
        s.extend(value.chars().filter(|c| *c == '\t' || !c.is_control()));
        s.push_str("\r\n");
    }
    s.push_str("\r\n");
    s.into_bytes()
}

/// Frames `data` as one chunk of a chunked response body.
pub fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 12);
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// The canonical reason phrase for common status codes.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        529 => "Overloaded",
        _ => "Unknown",
    }
}

fn has_token(list: &str, token: &str) -> bool {
    list.split(',').any(|t| t.trim() == token)
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

fn trim_ascii(mut b: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = b {
        if first.is_ascii_whitespace() {
            b = rest;
        } else {
            break;
        }
    }
    while let [rest @ .., last] = b {
        if last.is_ascii_whitespace() {
            b = rest;
        } else {
            break;
        }
    }
    b
}

fn parse_hex(b: &[u8]) -> Option<usize> {
    if b.is_empty() || b.len() > 15 {
        return None;
    }
    let mut n = 0usize;
    for &c in b {
        let d = (c as char).to_digit(16)?;
        n = n * 16 + d as usize;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(buf: &[u8]) -> (Request, usize) {
        match parse_request(buf).expect("parse ok") {
            Parse::Complete(r, n) => (r, n),
            other => panic!("expected complete, got {other:?}"),
        }
    }

    #[test]
    fn simple_get() {
        let buf = b"GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k\r\n\r\n";
        let (req, used) = complete(buf);
        assert_eq!(used, buf.len());
        assert_eq!(req.method, "GET");
        assert_eq!(req.path(), "/v1/models");
        assert_eq!(req.target, "/v1/models?x=1");
        assert_eq!(req.header("authorization"), Some("Bearer k"));
        assert!(req.keep_alive());
        assert!(req.body.is_empty());
    }

    #[test]
    fn content_length_body_and_partial() {
        let buf = b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
        for cut in 0..buf.len() {
            assert!(
                matches!(parse_request(&buf[..cut]), Ok(Parse::Partial { .. })),
                "cut {cut}"
            );
        }
        let (req, used) = complete(buf);
        assert_eq!(used, buf.len());
        assert_eq!(req.body, b"hello");
    }

    #[test]
    fn pipelined_requests_parse_sequentially() {
        let mut buf = Vec::new();
        buf.extend_from_slice(b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\none");
        buf.extend_from_slice(
            b"POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n",
        );
        buf.extend_from_slice(b"GET /c HTTP/1.1\r\n\r\n");
        buf.extend_from_slice(b"GET /d HT");
        let mut off = 0;
        let mut seen = Vec::new();
        while let Parse::Complete(req, used) = parse_request(&buf[off..]).unwrap() {
            seen.push((req.path().to_string(), req.body.clone()));
            off += used;
        }
        assert_eq!(
            seen,
            vec![
                ("/a".to_string(), b"one".to_vec()),
                ("/b".to_string(), b"two".to_vec()),
                ("/c".to_string(), Vec::new()),
            ]
        );
        assert_eq!(&buf[off..], b"GET /d HT");
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let buf = b"POST /x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n\
            4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: y\r\n\r\nNEXT";
        let (req, used) = complete(buf);
        assert_eq!(req.body, b"Wikipedia in\r\n\r\nchunks.");
        assert_eq!(&buf[used..], b"NEXT");
    }

    #[test]
    fn chunked_body_partial_at_every_cut() {
        let buf =
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n0\r\n\r\n";
        for cut in 0..buf.len() {
            assert!(
                matches!(parse_request(&buf[..cut]), Ok(Parse::Partial { .. })),
                "cut {cut}"
            );
        }
        assert_eq!(complete(buf).0.body, b"0123456789");
    }

    #[test]
    fn invalid_chunk_is_rejected() {
        let buf = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert!(matches!(parse_request(buf), Err(HttpError::BadRequest(_))));
        let buf = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXX0\r\n\r\n";
        assert!(matches!(parse_request(buf), Err(HttpError::BadRequest(_))));
    }

    #[test]
    fn expect_continue_reported_before_body() {
        let buf = b"POST /x HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n";
        assert_eq!(
            parse_request(buf),
            Ok(Parse::Partial {
                expect_continue: true
            })
        );
    }

    #[test]
    fn connection_semantics() {
        let (r, _) = complete(b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(!r.keep_alive());
        let (r, _) = complete(b"GET / HTTP/1.0\r\n\r\n");
        assert!(!r.keep_alive());
        let (r, _) = complete(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(r.keep_alive());
    }

    #[test]
    fn errors() {
        assert_eq!(
            parse_request(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Err(HttpError::BadRequest("invalid content-length"))
        );
        assert_eq!(
            parse_request(b"POST / HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n"),
            Err(HttpError::BodyTooLarge)
        );
        assert!(parse_request(b"\x01\x02 nonsense\r\n\r\n").is_err());
        let mut huge = b"GET /".to_vec();
        huge.extend(vec![b'a'; MAX_HEAD]);
        assert_eq!(parse_request(&huge), Err(HttpError::HeadTooLarge));
    }

    #[test]
    fn head_and_chunk_encoding() {
        let head = response_head(
            429,
            "application/json",
            BodyLen::Fixed(2),
            true,
            &[("retry-after", "3"), ("x-echo", "a\r\nb")],
        );
        let text = String::from_utf8(head).unwrap();
        assert!(text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
        assert!(text.contains("content-length: 2\r\n"));
        assert!(text.contains("retry-after: 3\r\n"));
        assert!(text.contains("x-echo: ab\r\n"));
        assert!(text.ends_with("\r\n\r\n"));
        assert_eq!(chunk(b"hello world, hi!!"), b"11\r\nhello world, hi!!\r\n");
    }
}
