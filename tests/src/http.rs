//! A tiny blocking HTTP/1.1 client over [`TcpStream`] with raw control of
//! the bytes sent: pipelining, partial heads, chunked uploads, interim
//! responses and incremental reading of streamed (SSE) bodies.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The read timeout a new [`Conn`] starts with.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(15);

const MAX_HEAD: usize = 1 << 20;

/// Builds a raw HTTP/1.1 request. Adds `Host` unless given, and
/// `Content-Length` unless given or `Transfer-Encoding` is set (for a
/// non-empty body or a POST/PUT/PATCH).
pub fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let mut out = format!("{method} {path} HTTP/1.1\r\n");
    if !has("host") {
        out.push_str("Host: 127.0.0.1\r\n");
    }
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    let wants_length = !body.is_empty() || matches!(method, "POST" | "PUT" | "PATCH");
    if wants_length && !has("content-length") && !has("transfer-encoding") {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Encodes `parts` as a chunked body (each part one chunk, then the last chunk).
pub fn chunked(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for part in parts.iter().filter(|p| !p.is_empty()) {
        out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// Whether a `Connection` header value holds the `close` token.
fn says_close(connection: Option<&str>) -> bool {
    connection.is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")))
}

/// A status line and headers.
#[derive(Debug, Clone)]
pub struct Head {
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// Headers in order; names as sent.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the response says `Connection: close`.
    pub fn connection_close(&self) -> bool {
        says_close(self.header("connection"))
    }

    fn body_kind(&self) -> BodyKind {
        if (100..200).contains(&self.status) || self.status == 204 || self.status == 304 {
            return BodyKind::Length(0);
        }
        if self
            .header("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
        {
            return BodyKind::Chunked {
                left: 0,
                done: false,
            };
        }
        match self.header("content-length") {
            Some(v) => BodyKind::Length(v.trim().parse().unwrap_or(0)),
            None => BodyKind::UntilClose,
        }
    }
}

/// A whole response.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Reason phrase.
    pub reason: String,
    /// Headers in order; names as sent.
    pub headers: Vec<(String, String)>,
    /// The decoded body (chunked framing removed).
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the response says `Connection: close`.
    pub fn connection_close(&self) -> bool {
        says_close(self.header("connection"))
    }

    /// The body as (lossy) UTF-8.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON; panics with the status and body if it is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response body is not JSON ({e}); status {} headers {:?} body {:?}",
                self.status,
                self.headers,
                self.text()
            )
        })
    }

    /// Panics with the body unless the status is `status`; returns self.
    pub fn expect_status(self, status: u16) -> Self {
        assert_eq!(
            self.status,
            status,
            "expected status {status}, got {} with headers {:?} and body {}",
            self.status,
            self.headers,
            self.text()
        );
        self
    }
}

#[derive(Debug, Clone, Copy)]
enum BodyKind {
    Length(u64),
    Chunked { left: u64, done: bool },
    UntilClose,
}

/// One client connection with a read buffer, for raw request/response I/O.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    /// Connects to `127.0.0.1:port`; panics on failure.
    pub fn connect(port: u16) -> Conn {
        Self::try_connect(port).unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"))
    }

    /// Connects to `127.0.0.1:port`.
    pub fn try_connect(port: u16) -> io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(DEFAULT_READ_TIMEOUT))?;
        stream.set_write_timeout(Some(DEFAULT_READ_TIMEOUT))?;
        Ok(Conn {
            stream,
            buf: Vec::new(),
        })
    }

    /// Sets the read timeout for the following reads.
    pub fn set_read_timeout(&self, timeout: Duration) {
        self.stream
            .set_read_timeout(Some(timeout))
            .expect("set read timeout");
    }

    /// The underlying socket.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Writes all of `bytes`; panics on failure.
    pub fn send(&mut self, bytes: &[u8]) {
        self.try_send(bytes).expect("write request");
    }

    /// Writes all of `bytes`.
    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Half-closes the write side.
    pub fn shutdown_write(&self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// Reads the next response (interim 1xx responses included) whole;
    /// panics on failure.
    pub fn read_response(&mut self) -> Response {
        self.try_read_response()
            .unwrap_or_else(|e| panic!("reading response: {e}"))
    }

    /// Reads the next response (interim 1xx responses included) whole.
    pub fn try_read_response(&mut self) -> io::Result<Response> {
        let head = self.read_head()?;
        let mut kind = head.body_kind();
        let mut body = Vec::new();
        while let Some(piece) = self.read_body_piece(&mut kind)? {
            body.extend_from_slice(&piece);
        }
        Ok(Response {
            status: head.status,
            reason: head.reason,
            headers: head.headers,
            body,
        })
    }

    /// Reads the whole body of a response whose head was read; an error
    /// when it ends early (framing unfinished) or times out.
    pub fn try_read_body(&mut self, head: &Head) -> io::Result<Vec<u8>> {
        let mut kind = head.body_kind();
        let mut body = Vec::new();
        while let Some(piece) = self.read_body_piece(&mut kind)? {
            body.extend_from_slice(&piece);
        }
        Ok(body)
    }

    /// Sends `bytes` and reads one response; panics on failure.
    pub fn roundtrip(&mut self, bytes: &[u8]) -> Response {
        self.send(bytes);
        self.read_response()
    }

    /// Reads a status line and headers.
    pub fn read_head(&mut self) -> io::Result<Head> {
        let end = loop {
            if let Some(pos) = find(&self.buf, b"\r\n\r\n") {
                break pos;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "head too large"));
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "connection closed before a complete response head (got {:?})",
                        String::from_utf8_lossy(&self.buf)
                    ),
                ));
            }
        };
        let head_bytes: Vec<u8> = self.buf.drain(..end + 4).collect();
        let text = String::from_utf8_lossy(&head_bytes[..end]).into_owned();
        let mut lines = text.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        if !version.starts_with("HTTP/1.") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad status line {status_line:?}"),
            ));
        }
        let status = parts.next().and_then(|s| s.parse().ok()).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad status line {status_line:?}"),
            )
        })?;
        let reason = parts.next().unwrap_or_default().to_string();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        Ok(Head {
            status,
            reason,
            headers,
        })
    }

    /// Reads the streamed body of `head` as server-sent events.
    pub fn sse<'a>(&'a mut self, head: &Head) -> SseReader<'a> {
        SseReader {
            kind: head.body_kind(),
            conn: self,
            pending: Vec::new(),
            finished: false,
        }
    }

    /// Whether the peer closes the connection (EOF or reset) within `wait`
    /// with no further bytes. Panics if bytes arrive instead.
    pub fn closed_within(&mut self, wait: Duration) -> bool {
        if !self.buf.is_empty() {
            panic!(
                "unexpected bytes on connection: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        }
        self.set_read_timeout(wait);
        let mut tmp = [0u8; 4096];
        match self.stream.read(&mut tmp) {
            Ok(0) => true,
            Ok(n) => panic!(
                "unexpected bytes on connection: {:?}",
                String::from_utf8_lossy(&tmp[..n])
            ),
            Err(e) if is_timeout(&e) => false,
            Err(_) => true,
        }
    }

    fn fill(&mut self) -> io::Result<usize> {
        let mut tmp = [0u8; 65536];
        let n = self.stream.read(&mut tmp)?;
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n)
    }

    /// Takes up to `max` bytes from the buffer, reading if it is empty.
    fn take(&mut self, max: usize) -> io::Result<Vec<u8>> {
        if self.buf.is_empty() && self.fill()? == 0 {
            return Ok(Vec::new());
        }
        let n = max.min(self.buf.len());
        Ok(self.buf.drain(..n).collect())
    }

    fn take_line(&mut self) -> io::Result<String> {
        loop {
            if let Some(pos) = find(&self.buf, b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..pos + 2).collect();
                return Ok(String::from_utf8_lossy(&line[..pos]).into_owned());
            }
            if self.fill()? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed inside chunked framing",
                ));
            }
        }
    }

    /// The next piece of decoded body, or `None` at the end of the body.
    fn read_body_piece(&mut self, kind: &mut BodyKind) -> io::Result<Option<Vec<u8>>> {
        match kind {
            BodyKind::Length(0) => Ok(None),
            BodyKind::Length(left) => {
                let piece = self.take(usize::try_from(*left).unwrap_or(usize::MAX))?;
                if piece.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("connection closed with {left} body bytes missing"),
                    ));
                }
                *left -= piece.len() as u64;
                Ok(Some(piece))
            }
            BodyKind::UntilClose => {
                let piece = self.take(usize::MAX)?;
                Ok((!piece.is_empty()).then_some(piece))
            }
            BodyKind::Chunked { done: true, .. } => Ok(None),
            BodyKind::Chunked { left, done } => {
                if *left == 0 {
                    let line = self.take_line()?;
                    let size_text = line.split(';').next().unwrap_or_default().trim();
                    let size = u64::from_str_radix(size_text, 16).map_err(|_| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("bad chunk size line {line:?}"),
                        )
                    })?;
                    if size == 0 {
                        // Trailers, then the empty line.
                        while !self.take_line()?.is_empty() {}
                        *done = true;
                        return Ok(None);
                    }
                    *left = size;
                }
                let piece = self.take(usize::try_from(*left).unwrap_or(usize::MAX))?;
                if piece.is_empty() {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "connection closed inside a chunk",
                    ));
                }
                *left -= piece.len() as u64;
                if *left == 0 {
                    let crlf = self.take_line()?;
                    if !crlf.is_empty() {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!("chunk not followed by CRLF: {crlf:?}"),
                        ));
                    }
                }
                Ok(Some(piece))
            }
        }
    }
}

/// Reads server-sent events from a response body, one event at a time.
pub struct SseReader<'a> {
    conn: &'a mut Conn,
    kind: BodyKind,
    pending: Vec<u8>,
    finished: bool,
}

impl SseReader<'_> {
    /// The `data` of the next event (its `data:` lines joined by `\n`), or
    /// `None` when the body ends. Events without data (comments) are skipped.
    pub fn next_event(&mut self) -> io::Result<Option<String>> {
        loop {
            if let Some((end, sep)) = event_end(&self.pending) {
                let raw: Vec<u8> = self.pending.drain(..end + sep).collect();
                let text = String::from_utf8_lossy(&raw[..end]).into_owned();
                let data: Vec<&str> = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if data.is_empty() {
                    continue;
                }
                return Ok(Some(data.join("\n")));
            }
            if self.finished {
                if self.pending.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "stream ended inside an event: {:?}",
                        String::from_utf8_lossy(&self.pending)
                    ),
                ));
            }
            match self.conn.read_body_piece(&mut self.kind)? {
                Some(piece) => self.pending.extend_from_slice(&piece),
                None => self.finished = true,
            }
        }
    }

    /// Reads all remaining events with the time each arrived.
    pub fn collect_timed(&mut self) -> io::Result<Vec<(String, Instant)>> {
        let mut out = Vec::new();
        while let Some(ev) = self.next_event()? {
            out.push((ev, Instant::now()));
        }
        Ok(out)
    }
}

fn event_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lf = find(buf, b"\n\n").map(|p| (p, 2));
    let crlf = find(buf, b"\r\n\r\n").map(|p| (p, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Whether `e` is a read timeout.
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    fn serve_once(reply: &'static [u8]) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            s.write_all(reply).unwrap();
        });
        port
    }

    #[test]
    fn reads_chunked_sse_and_length_bodies() {
        let port = serve_once(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
              5\r\ndata:\r\n9\r\n {\"a\":1}\n\r\n1\r\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n\
              HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno",
        );
        let mut conn = Conn::connect(port);
        conn.send(&request("GET", "/", &[], b""));
        assert_eq!(conn.read_response().status, 100);
        let head = conn.read_head().unwrap();
        assert_eq!(head.status, 200);
        let mut sse = conn.sse(&head);
        assert_eq!(sse.next_event().unwrap().as_deref(), Some("{\"a\":1}"));
        assert_eq!(sse.next_event().unwrap().as_deref(), Some("[DONE]"));
        assert_eq!(sse.next_event().unwrap(), None);
        let r = conn.read_response();
        assert_eq!((r.status, r.text().as_str()), (404, "no"));
        assert!(conn.closed_within(Duration::from_secs(5)));
    }

    #[test]
    fn builds_requests() {
        let r = request("POST", "/x", &[("A", "b")], b"{}");
        assert_eq!(
            String::from_utf8(r).unwrap(),
            "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nA: b\r\nContent-Length: 2\r\n\r\n{}"
        );
        assert_eq!(
            chunked(&[b"ab", b"", b"c"]),
            b"2\r\nab\r\n1\r\nc\r\n0\r\n\r\n"
        );
    }
}
