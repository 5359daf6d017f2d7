//! Writing responses to a client connection: whole bodies with
//! Content-Length, or streams in chunked coding flushed piece by piece.

use super::stream::ClientStream;
use crate::error::GatewayError;
use crate::http1::{encode_chunk, LAST_CHUNK};
use std::time::Duration;

/// Room a head starts with: a proxied answer's head with LiteLLM's and the
/// rate-limit headers (about 700 bytes) and a small body coalesced behind
/// it fit without growing the buffer (each growth a reallocation and a
/// copy of the head, twice a request at 512 bytes).
const HEAD_CAPACITY: usize = 2048;

/// A response head under construction.
pub struct HeadBuilder {
    buf: Vec<u8>,
}

impl HeadBuilder {
    /// Starts `HTTP/1.1 <status>`.
    pub fn new(status: u16) -> Self {
        let mut buf = Vec::with_capacity(HEAD_CAPACITY);
        buf.extend_from_slice(b"HTTP/1.1 ");
        buf.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(reason(status).as_bytes());
        buf.extend_from_slice(b"\r\n");
        HeadBuilder { buf }
    }

    /// Adds a header; values with CR or LF are dropped, never written.
    pub fn header(&mut self, name: &str, value: &str) -> &mut Self {
        if memchr::memchr2(b'\r', b'\n', value.as_bytes()).is_none() {
            self.header_with(name, |buf| buf.extend_from_slice(value.as_bytes()));
        }
        self
    }

    /// Adds a numeric header.
    pub fn header_num(&mut self, name: &str, value: u64) -> &mut Self {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(value).as_bytes();
        self.header_with(name, |buf| buf.extend_from_slice(digits))
    }

    /// Adds a header whose value `write` appends in place, unchecked: only
    /// for values that cannot hold CR or LF (numbers, durations).
    pub fn header_with(&mut self, name: &str, write: impl FnOnce(&mut Vec<u8>)) -> &mut Self {
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.extend_from_slice(b": ");
        write(&mut self.buf);
        self.buf.extend_from_slice(b"\r\n");
        self
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

/// Writes the response to one request on a client connection.
pub struct Responder<'a> {
    stream: &'a mut ClientStream,
    keep_alive: bool,
    head_only: bool,
    /// HTTP/1.0 clients get streams delimited by connection close.
    http10: bool,
    /// Status sent, once the head is out.
    status: Option<u16>,
    /// Time each write may take before the client counts as gone.
    write_timeout: Duration,
    /// A fixed-length response's head, held back so it leaves in one write
    /// (one TCP segment) with the first body bytes.
    pending_head: Vec<u8>,
    /// Body bytes a fixed-length response still owes.
    fixed_left: u64,
    /// Whether the response's last write waits for
    /// [`Responder::release_last_write`].
    hold_last: bool,
    /// That last write, once the response is complete.
    last_write: Option<Vec<u8>>,
    /// A copy of the body, when asked for ([`Responder::capture_body`]).
    capture: Option<Capture>,
    /// Writes wait for this signal ([`Responder::gate`]).
    gate: Option<std::rc::Rc<crate::local_signal::LocalSignal>>,
}

/// A copy of the body bytes written, up to a limit.
struct Capture {
    buf: Vec<u8>,
    limit: usize,
    /// More than `limit` bytes were written: the copy is incomplete.
    over: bool,
}

/// Body bytes up to this are copied behind a held-back head; more are
/// written after it.
const COALESCE_LIMIT: usize = 64 * 1024;

/// The write deadline of a [`Responder`] not given one.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);

impl<'a> Responder<'a> {
    /// A responder for a request that allows keep-alive when `keep_alive`;
    /// `head_only` for HEAD requests, `http10` for HTTP/1.0 clients.
    pub fn new(
        stream: &'a mut ClientStream,
        keep_alive: bool,
        head_only: bool,
        http10: bool,
    ) -> Self {
        Responder {
            stream,
            keep_alive,
            head_only,
            http10,
            status: None,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            pending_head: Vec::new(),
            fixed_left: 0,
            hold_last: false,
            last_write: None,
            capture: None,
            gate: None,
        }
    }

    /// Holds every write until `gate` fires: the response is prepared as
    /// usual, and nothing reaches the client before (a check beside the
    /// upstream call). [`Self::discard_unsent`] forgets it, should the
    /// check refuse.
    pub fn gate(&mut self, gate: std::rc::Rc<crate::local_signal::LocalSignal>) {
        self.gate = Some(gate);
    }

    /// Forgets a response none of whose bytes were written (its writes
    /// wait on the gate, or its last write is held), so another can be
    /// sent instead; `false` (and nothing changed) when some were.
    pub fn discard_unsent(&mut self) -> bool {
        let gated = self.gate.as_ref().is_some_and(|g| !g.fired());
        if !gated {
            return false;
        }
        self.status = None;
        self.pending_head = Vec::new();
        self.fixed_left = 0;
        self.last_write = None;
        self.capture = None;
        self.gate = None;
        true
    }

    /// The client's connection, to read the rest of the request's body
    /// from (a streamed upload) before the response starts.
    pub fn request_stream(&mut self) -> &mut ClientStream {
        self.stream
    }

    /// Holds the write that completes the response (a whole response, a
    /// fixed-length body's last bytes, a stream's last chunk) until
    /// [`Self::release_last_write`]: what must be over before the client
    /// can see the end of its response, such as freeing its parallel slot
    /// for the next request it sends, comes first.
    pub fn hold_last_write(&mut self) {
        self.hold_last = true;
    }

    /// Keeps a copy of the body bytes written from now on, up to `limit`
    /// bytes (the response cache stores a complete answer from it).
    pub fn capture_body(&mut self, limit: usize) {
        self.capture = Some(Capture {
            buf: Vec::new(),
            limit,
            over: false,
        });
    }

    /// Keeps a copy of the body bytes written from now on, up to at least
    /// `limit` bytes: a copy already being kept goes on with its limit
    /// raised to `limit` if lower. Whether this started the copy (its
    /// starter takes it with [`Self::take_capture`]).
    pub fn capture_at_least(&mut self, limit: usize) -> bool {
        match &mut self.capture {
            Some(c) => {
                c.limit = c.limit.max(limit);
                false
            }
            None => {
                self.capture_body(limit);
                true
            }
        }
    }

    /// The body copied so far, unless it grew past its limit; the copy
    /// goes on.
    pub fn captured(&self) -> Option<&[u8]> {
        self.capture
            .as_ref()
            .filter(|c| !c.over)
            .map(|c| c.buf.as_slice())
    }

    /// The copy of the body, unless it grew past its limit; stops copying.
    pub fn take_capture(&mut self) -> Option<Vec<u8>> {
        self.capture.take().filter(|c| !c.over).map(|c| c.buf)
    }

    fn keep(&mut self, data: &[u8]) {
        if let Some(c) = &mut self.capture {
            if c.over || c.buf.len() + data.len() > c.limit {
                c.over = true;
                c.buf = Vec::new();
            } else {
                c.buf.extend_from_slice(data);
            }
        }
    }

    /// Writes the response's held last write, if any, and stops holding.
    pub async fn release_last_write(&mut self) -> std::io::Result<()> {
        self.hold_last = false;
        match self.last_write.take() {
            Some(buf) => self.write(buf).await,
            None => Ok(()),
        }
    }

    /// Writes `buf`; when it ends the response (`ends`) and the last write
    /// is held, keeps it instead (after what is held already, should more
    /// follow).
    async fn write_part(&mut self, buf: Vec<u8>, ends: bool) -> std::io::Result<()> {
        if !(ends && self.hold_last) {
            return self.write(buf).await;
        }
        match &mut self.last_write {
            Some(held) => held.extend_from_slice(&buf),
            None => self.last_write = Some(buf),
        }
        Ok(())
    }

    /// Sets the time each write may take: a client that does not read for
    /// that long is disconnected (the write fails with `TimedOut`).
    pub fn with_write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Whether the connection may serve another request afterwards.
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// Forces the connection to close after this response.
    pub fn close_after(&mut self) {
        self.keep_alive = false;
    }

    /// The status sent, if the head was written.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// Whether the client has closed its side of the connection (checked
    /// without blocking; data it pipelined counts as still there). Used
    /// between attempts, so no retry starts for a client that left.
    pub fn client_gone(&self) -> bool {
        let mut byte = 0u8;
        // SAFETY: a one-byte peek into a local buffer on the socket this
        // responder borrows; the fd stays open for the call.
        let n = unsafe {
            libc::recv(
                self.stream.raw_fd(),
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n == 0
            || (n < 0
                && !matches!(
                    std::io::Error::last_os_error().raw_os_error(),
                    Some(libc::EAGAIN) | Some(libc::EINTR)
                ))
    }

    /// Whether any byte of the response was written.
    pub fn started(&self) -> bool {
        self.status.is_some()
    }

    fn finish_head(&mut self, mut head: HeadBuilder, status: u16) -> Vec<u8> {
        if !self.keep_alive {
            head.header("connection", "close");
        }
        head.buf.extend_from_slice(b"\r\n");
        self.status = Some(status);
        head.buf
    }

    /// Sends a complete response with `body`.
    pub async fn send(
        &mut self,
        status: u16,
        mut head: HeadBuilder,
        content_type: &str,
        body: &[u8],
    ) -> std::io::Result<()> {
        head.header("content-type", content_type);
        head.header_num("content-length", body.len() as u64);
        let mut buf = self.finish_head(head, status);
        if !self.head_only {
            self.keep(body);
            buf.extend_from_slice(body);
        }
        self.write_part(buf, true).await
    }

    /// Sends an error as LiteLLM's JSON body.
    pub async fn send_error(
        &mut self,
        err: &GatewayError,
        head: Option<HeadBuilder>,
    ) -> std::io::Result<()> {
        let status = err.status();
        let mut head = head.unwrap_or_else(|| HeadBuilder::new(status));
        if let Some(ra) = err.retry_after() {
            head.header("retry-after", ra);
        }
        self.send(status, head, "application/json", &err.body())
            .await
    }

    /// Sends the head of a chunked response; follow with [`Self::send_chunk`].
    pub async fn start_stream(
        &mut self,
        status: u16,
        mut head: HeadBuilder,
        content_type: &str,
    ) -> std::io::Result<()> {
        head.header("content-type", content_type);
        if content_type.starts_with("text/event-stream") {
            head.header("cache-control", "no-cache");
        }
        if self.http10 {
            self.keep_alive = false;
        } else {
            head.header("transfer-encoding", "chunked");
        }
        let buf = self.finish_head(head, status);
        self.write(buf).await
    }

    /// Sends the head of a response of `len` bytes; follow with
    /// [`Self::send_raw`] as the bytes arrive. The head leaves with the
    /// first of them.
    pub async fn start_fixed(
        &mut self,
        status: u16,
        mut head: HeadBuilder,
        content_type: &str,
        len: u64,
    ) -> std::io::Result<()> {
        head.header("content-type", content_type);
        head.header_num("content-length", len);
        let buf = self.finish_head(head, status);
        if len > 0 && !self.head_only {
            self.pending_head = buf;
            self.fixed_left = len;
            return Ok(());
        }
        self.write_part(buf, true).await
    }

    /// Sends body bytes of a fixed-length response.
    pub async fn send_raw(&mut self, data: Vec<u8>) -> std::io::Result<()> {
        if data.is_empty() || self.head_only {
            return Ok(());
        }
        self.keep(&data);
        self.fixed_left = self.fixed_left.saturating_sub(data.len() as u64);
        let last = self.fixed_left == 0;
        if !self.pending_head.is_empty() {
            let mut head = std::mem::take(&mut self.pending_head);
            if data.len() <= COALESCE_LIMIT {
                head.extend_from_slice(&data);
                return self.write_part(head, last).await;
            }
            self.write(head).await?;
        }
        self.write_part(data, last).await
    }

    /// Sends one chunk now.
    pub async fn send_chunk(&mut self, data: &[u8]) -> std::io::Result<()> {
        if data.is_empty() || self.head_only {
            return Ok(());
        }
        self.keep(data);
        if self.http10 {
            return self.write(data.to_vec()).await;
        }
        let mut buf = Vec::with_capacity(data.len() + 16);
        encode_chunk(data, &mut buf);
        self.write(buf).await
    }

    /// Ends a chunked response.
    pub async fn end_stream(&mut self) -> std::io::Result<()> {
        if self.head_only || self.http10 {
            return Ok(());
        }
        self.write_part(LAST_CHUNK.to_vec(), true).await
    }

    /// Abandons a stream that cannot complete: the client sees the connection
    /// close without the last chunk, so it knows the body is truncated.
    pub fn abort_stream(&mut self) {
        self.keep_alive = false;
    }

    async fn write(&mut self, buf: Vec<u8>) -> std::io::Result<()> {
        if let Some(gate) = &self.gate {
            if !gate.fired() {
                let gate = std::rc::Rc::clone(gate);
                gate.wait().await;
            }
        }
        let written = std::pin::pin!(self.stream.write_all(buf));
        let res = match monoio::time::timeout(self.write_timeout, written).await {
            Ok((res, _)) => res.map(drop),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client stopped reading",
            )),
        };
        if res.is_err() {
            self.keep_alive = false;
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Runs `test` on a runtime with timers.
    fn block_on(test: impl std::future::Future<Output = ()>) {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(test);
    }

    /// Both ends of a loopback connection: the server's, and a
    /// non-blocking client socket.
    async fn connection() -> (ClientStream, std::net::TcpStream) {
        let listener = monoio::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.set_nonblocking(true).unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (ClientStream::Plain(server), client)
    }

    /// What the client can read now, without waiting.
    fn received(client: &mut std::net::TcpStream) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match client.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        String::from_utf8(got).unwrap()
    }

    #[test]
    fn a_held_whole_response_leaves_only_when_released() {
        block_on(async {
            let (mut stream, mut client) = connection().await;
            let client = &mut client;
            let mut out = Responder::new(&mut stream, true, false, false);
            out.hold_last_write();
            out.send(200, HeadBuilder::new(200), "application/json", b"{}")
                .await
                .unwrap();
            assert_eq!(received(client), "");
            out.release_last_write().await.unwrap();
            let got = received(client);
            assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
            assert!(got.ends_with("content-length: 2\r\n\r\n{}"), "{got}");
            // Nothing is held twice.
            out.release_last_write().await.unwrap();
            assert_eq!(received(client), "");
        });
    }

    #[test]
    fn a_held_fixed_length_body_sends_all_but_its_last_bytes() {
        block_on(async {
            let (mut stream, mut client) = connection().await;
            let client = &mut client;
            let mut out = Responder::new(&mut stream, true, false, false);
            out.hold_last_write();
            out.start_fixed(200, HeadBuilder::new(200), "text/plain", 10)
                .await
                .unwrap();
            out.send_raw(b"0123".to_vec()).await.unwrap();
            assert!(received(client).ends_with("\r\n\r\n0123"));
            out.send_raw(b"456789".to_vec()).await.unwrap();
            assert_eq!(received(client), "");
            // Bytes past the announced length are never dropped.
            out.send_raw(b"!".to_vec()).await.unwrap();
            out.release_last_write().await.unwrap();
            assert_eq!(received(client), "456789!");
        });
    }

    #[test]
    fn a_held_stream_sends_its_chunks_and_holds_its_last_chunk() {
        block_on(async {
            let (mut stream, mut client) = connection().await;
            let client = &mut client;
            let mut out = Responder::new(&mut stream, true, false, false);
            out.hold_last_write();
            out.start_stream(200, HeadBuilder::new(200), "text/event-stream")
                .await
                .unwrap();
            out.send_chunk(b"data: 1\n\n").await.unwrap();
            assert!(received(client).ends_with("9\r\ndata: 1\n\n\r\n"));
            out.end_stream().await.unwrap();
            assert_eq!(received(client), "");
            out.release_last_write().await.unwrap();
            assert_eq!(received(client), "0\r\n\r\n");
        });
    }

    #[test]
    fn a_response_not_held_leaves_at_once() {
        block_on(async {
            let (mut stream, mut client) = connection().await;
            let client = &mut client;
            let mut out = Responder::new(&mut stream, true, false, false);
            out.send(200, HeadBuilder::new(200), "application/json", b"{}")
                .await
                .unwrap();
            assert!(received(client).ends_with("\r\n\r\n{}"));
        });
    }

    #[test]
    fn header_values_with_cr_or_lf_are_dropped() {
        let mut head = HeadBuilder::new(200);
        head.header("x-a", "plain")
            .header("x-b", "split\r\nx-injected: yes")
            .header("x-c", "bare\nlf")
            .header("x-d", "bare\rcr")
            .header_num("x-e", 7);
        assert_eq!(
            String::from_utf8(head.buf).unwrap(),
            "HTTP/1.1 200 OK\r\nx-a: plain\r\nx-e: 7\r\n"
        );
    }
}
