//! The upstream HTTP/1.1 client of one core: pooled keep-alive connections,
//! TLS, DNS off the core (`dns`), deadlines, and one retry on a fresh
//! connection when a connection dies before any response byte.

mod base;
mod conn;
mod dns;
pub mod fetch;
pub mod once;
mod pool;
mod tls;

pub(crate) use base::parse_base;
pub use base::{redact_url, UpstreamBase};
pub use pool::Origin;
pub use tls::{
    add_pem_file, client_config, root_store, unverified_client_config, AnyCertificate,
    TlsSetupError,
};

use crate::http1::{
    parse_response_head, ChunkedDecoder, ReadBuffer, ResponseFraming, ResponseHead,
};
use bytes::Bytes;
pub use conn::UpstreamConn;
use monoio::net::TcpStream;
use pool::Pool;
use rustls::pki_types::ServerName;
use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why an upstream exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// TCP connect, DNS or TLS failed.
    #[error("{0}")]
    Connect(String),
    /// The deadline passed.
    #[error("timed out")]
    Timeout,
    /// The connection failed or closed mid-exchange.
    #[error("connection lost: {0}")]
    Io(String),
    /// The peer's bytes are not a valid HTTP response.
    #[error("{0}")]
    Protocol(String),
}

/// Per-core upstream client.
pub struct UpstreamClient {
    pool: Rc<RefCell<Pool>>,
    tls: monoio_rustls::TlsConnector,
    dns: dns::Resolver,
}

impl UpstreamClient {
    /// A client whose idle connections expire after `idle`.
    pub fn new(tls: Arc<rustls::ClientConfig>, idle: Duration) -> Self {
        UpstreamClient {
            pool: Rc::new(RefCell::new(Pool::new(idle))),
            tls: monoio_rustls::TlsConnector::from(tls),
            dns: dns::Resolver::default(),
        }
    }

    /// Drops expired idle connections; called periodically by the worker.
    pub fn expire_idle(&self) {
        self.pool.borrow_mut().expire();
    }

    /// Idle connections held by this core.
    pub fn idle_connections(&self) -> usize {
        self.pool.borrow().idle_count()
    }

    /// Sends `head` and `body` to `base` and reads the response head, all
    /// before `deadline`.
    pub async fn send(
        &self,
        base: &UpstreamBase,
        head: Vec<u8>,
        body: &[Bytes],
        deadline: Instant,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let origin = origin_of(base);
        let request = Request::assemble(head, body);
        let mut retried = false;
        loop {
            let pooled = if retried {
                None
            } else {
                self.pool.borrow_mut().take(&origin)
            };
            let mut conn = match pooled {
                Some(c) => c,
                // Boxed: connecting (DNS, TCP, TLS) is the largest state of
                // this future and is rare with pooled connections; inline,
                // every request's future (streams held open included)
                // would carry its size.
                None => within(deadline, Box::pin(self.connect(&origin))).await??,
            };
            // Pinned where it is made: the deadline's wrappers then move a
            // pointer instead of the exchange's state.
            let exchanged = {
                let exchanging = std::pin::pin!(exchange(&mut conn, &request));
                within(deadline, exchanging).await?
            };
            match exchanged {
                Ok((head, buf)) => {
                    return Ok(UpstreamResponse::new(
                        head,
                        conn,
                        buf,
                        Some((origin, self.pool.clone())),
                    ));
                }
                Err(Exchange::DiedBeforeResponse(_)) if !retried => retried = true,
                Err(Exchange::DiedBeforeResponse(e)) => return Err(UpstreamError::Io(e)),
                Err(Exchange::Failed(e)) => return Err(e),
            }
        }
    }

    /// Sends `head`, `first` and then what `body` yields as it yields it
    /// (a streamed upload), and reads the response head, all before
    /// `deadline`. One buffer of [`STREAMED_CHUNK`] bytes goes back and
    /// forth between the source and the socket. The connection is a fresh
    /// one (a pooled one could have been closed by the upstream while idle,
    /// and the body cannot be sent twice); it joins the pool once its
    /// answer is read. A failure of `body` leaves the upstream request
    /// unfinished: the connection is closed and the upstream never sees a
    /// whole request.
    pub async fn send_streamed<S: BodySource>(
        &self,
        base: &UpstreamBase,
        head: Vec<u8>,
        first: &[Bytes],
        body: &mut S,
        deadline: Instant,
    ) -> Result<UpstreamResponse, UpstreamError> {
        let origin = origin_of(base);
        let request = Request::assemble(head, first);
        let mut conn = within(deadline, Box::pin(self.connect(&origin))).await??;
        let exchanged = {
            let exchanging = std::pin::pin!(exchange_streamed(&mut conn, &request, body));
            within(deadline, exchanging).await?
        };
        match exchanged {
            Ok((head, buf)) => Ok(UpstreamResponse::new(
                head,
                conn,
                buf,
                Some((origin, self.pool.clone())),
            )),
            Err(Exchange::DiedBeforeResponse(e)) => Err(UpstreamError::Io(e)),
            Err(Exchange::Failed(e)) => Err(e),
        }
    }

    /// A new connection to `base` (DNS, TCP, TLS) that never joins the
    /// pool, before `deadline`: for a protocol upgrade (the realtime
    /// relay's WebSocket), which keeps the connection to itself.
    pub async fn connect_fresh(
        &self,
        base: &UpstreamBase,
        deadline: Instant,
    ) -> Result<UpstreamConn, UpstreamError> {
        let origin = origin_of(base);
        within(deadline, Box::pin(self.connect(&origin))).await?
    }

    async fn connect(&self, origin: &Origin) -> Result<UpstreamConn, UpstreamError> {
        let addrs = self
            .dns
            .resolve(&origin.host, origin.port)
            .await
            .map_err(UpstreamError::Connect)?;
        let mut last = None;
        let mut tcp = None;
        for addr in addrs {
            match TcpStream::connect_addr(addr).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(format!("connect to {addr}: {e}")),
            }
        }
        let tcp =
            tcp.ok_or_else(|| UpstreamError::Connect(last.unwrap_or_else(|| "no address".into())))?;
        let _ = tcp.set_nodelay(true);
        if !origin.tls {
            return Ok(UpstreamConn::Plain(tcp));
        }
        let name = ServerName::try_from(origin.host.to_string()).map_err(|e| {
            UpstreamError::Connect(format!("invalid TLS server name {}: {e}", origin.host))
        })?;
        let tls = self.tls.connect(name, tcp).await.map_err(|e| {
            UpstreamError::Connect(format!("TLS handshake with {}: {e}", origin.host))
        })?;
        Ok(UpstreamConn::Tls(Box::new(tls)))
    }
}

/// A request serialized for the wire: small ones in one buffer (one write),
/// large bodies as shared slices.
struct Request {
    first: Bytes,
    rest: Vec<Bytes>,
}

/// Bodies below this are copied next to the head so one write sends all.
pub const COALESCE_LIMIT: usize = 32 * 1024;

impl Request {
    fn assemble(mut head: Vec<u8>, body: &[Bytes]) -> Request {
        let body_len: usize = body.iter().map(Bytes::len).sum();
        if body_len <= COALESCE_LIMIT {
            for part in body {
                head.extend_from_slice(part);
            }
            return Request {
                first: head.into(),
                rest: Vec::new(),
            };
        }
        Request {
            first: head.into(),
            rest: body.iter().filter(|b| !b.is_empty()).cloned().collect(),
        }
    }
}

enum Exchange {
    DiedBeforeResponse(String),
    Failed(UpstreamError),
}

async fn within<F: std::future::Future>(
    deadline: Instant,
    f: F,
) -> Result<F::Output, UpstreamError> {
    let left = deadline.saturating_duration_since(Instant::now());
    monoio::time::timeout(left, f)
        .await
        .map_err(|_| UpstreamError::Timeout)
}

/// A request body that arrives while it is sent (a streamed upload).
pub trait BodySource {
    /// Fills `buf` (given empty, with [`STREAMED_CHUNK`] bytes of room)
    /// with the next bytes of the body, and gives it back: empty once the
    /// body is over. An error ends the request unsent (the source keeps
    /// what went wrong).
    fn fill(
        &mut self,
        buf: Vec<u8>,
    ) -> impl std::future::Future<Output = (Result<(), ()>, Vec<u8>)>;
}

/// The buffer a streamed body goes through, one read at a time: 1 MiB
/// (nginx's `client_body_buffer_size` in the relay benchmark). A read
/// takes what the socket holds, up to this, so a smaller one means more
/// reads and sends an upload: with 256 KiB the gateway's CPU a 25 MB upload
/// was 1.41x nginx's (median of 20 rounds) against 1.17x with 1 MiB, in
/// runs alternated on one machine (see `benches/hand-measured.md`,
/// "Issue 36: the 1 MiB relay buffer").
pub const STREAMED_CHUNK: usize = 1 << 20;

async fn write_request(conn: &mut UpstreamConn, req: &Request) -> io::Result<()> {
    let (res, _) = conn.write_all(req.first.clone()).await;
    res?;
    for part in &req.rest {
        let (res, _) = conn.write_all(part.clone()).await;
        res?;
    }
    Ok(())
}

async fn exchange_streamed<S: BodySource>(
    conn: &mut UpstreamConn,
    req: &Request,
    body: &mut S,
) -> Result<(ResponseHead, ReadBuffer), Exchange> {
    let died = |e: io::Error| Exchange::DiedBeforeResponse(e.to_string());
    write_request(conn, req).await.map_err(died)?;
    let mut buf = Vec::with_capacity(STREAMED_CHUNK);
    loop {
        buf.clear();
        let (filled, back) = body.fill(buf).await;
        buf = back;
        if filled.is_err() {
            return Err(Exchange::Failed(UpstreamError::Io(
                "the request body could not be read".into(),
            )));
        }
        if buf.is_empty() {
            break;
        }
        let (res, back) = conn.write_all(buf).await;
        buf = back;
        res.map_err(died)?;
    }
    drop(buf);
    conn.flush().await.map_err(died)?;
    read_response_head(conn).await
}

async fn exchange(
    conn: &mut UpstreamConn,
    req: &Request,
) -> Result<(ResponseHead, ReadBuffer), Exchange> {
    let died = |e: io::Error| Exchange::DiedBeforeResponse(e.to_string());
    write_request(conn, req).await.map_err(died)?;
    conn.flush().await.map_err(died)?;
    read_response_head(conn).await
}

async fn read_response_head(
    conn: &mut UpstreamConn,
) -> Result<(ResponseHead, ReadBuffer), Exchange> {
    let died = |e: io::Error| Exchange::DiedBeforeResponse(e.to_string());
    let mut buf = ReadBuffer::with_capacity(8 * 1024);
    let mut interim = 0;
    loop {
        let n = buf.fill(conn).await.map_err(died)?;
        if n == 0 {
            return Err(if buf.is_empty() && interim == 0 {
                Exchange::DiedBeforeResponse("closed before responding".into())
            } else {
                Exchange::Failed(UpstreamError::Io("closed inside the response head".into()))
            });
        }
        // One read may hold interim heads (100 Continue, 103) and the final
        // head: skip the former without waiting for another read.
        loop {
            match parse_response_head(buf.bytes()) {
                Ok(Some((head, len))) if (100..200).contains(&head.status) => {
                    buf.consume(len);
                    interim += 1;
                    if interim > MAX_INTERIM_HEADS {
                        return Err(Exchange::Failed(UpstreamError::Protocol(
                            "too many interim responses".into(),
                        )));
                    }
                }
                Ok(Some((head, len))) => {
                    buf.consume(len);
                    return Ok((head, buf));
                }
                Ok(None) => break,
                Err(e) => return Err(Exchange::Failed(UpstreamError::Protocol(e))),
            }
        }
    }
}

/// Most interim (1xx) heads accepted before the final one.
const MAX_INTERIM_HEADS: usize = 16;

enum BodyState {
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
    Done,
}

/// Read buffer of an event-stream response (8 KiB for heads and bodies):
/// each read is decoded and handed on whole, so only a piece of a chunk
/// head is ever left over, and events (a token each) are a few hundred
/// bytes; a burst larger than this takes more reads.
const STREAM_READ_BUFFER: usize = 1024;

/// A response whose head has arrived; the body is read piece by piece as the
/// provider sends it.
pub struct UpstreamResponse {
    /// Status and headers.
    pub head: ResponseHead,
    conn: Option<UpstreamConn>,
    buf: ReadBuffer,
    state: BodyState,
    /// Where the connection returns once the body is read; `None` for
    /// one-off connections.
    pool: Option<(Origin, Rc<RefCell<Pool>>)>,
}

impl UpstreamResponse {
    fn new(
        head: ResponseHead,
        conn: UpstreamConn,
        buf: ReadBuffer,
        pool: Option<(Origin, Rc<RefCell<Pool>>)>,
    ) -> Self {
        let state = match head.framing {
            ResponseFraming::Empty | ResponseFraming::Length(0) => BodyState::Done,
            ResponseFraming::Length(n) => BodyState::Length(n),
            ResponseFraming::Chunked => BodyState::Chunked(ChunkedDecoder::default()),
            ResponseFraming::UntilClose => BodyState::UntilClose,
        };
        let mut buf = buf;
        if head.is_event_stream() {
            // Events are small and a stream may stay open for minutes.
            buf.shrink_to(STREAM_READ_BUFFER);
        }
        let mut resp = UpstreamResponse {
            head,
            conn: Some(conn),
            buf,
            state,
            pool,
        };
        resp.release_if_done();
        resp
    }

    /// Body length when the provider declared it.
    pub fn content_length(&self) -> Option<u64> {
        match self.head.framing {
            ResponseFraming::Length(n) => Some(n),
            ResponseFraming::Empty => Some(0),
            _ => None,
        }
    }

    /// Appends the next decoded body bytes to `out`, waiting at most `idle`;
    /// returns `false` once the body is complete.
    pub async fn next_piece(
        &mut self,
        out: &mut Vec<u8>,
        idle: Duration,
    ) -> Result<bool, UpstreamError> {
        loop {
            if matches!(self.state, BodyState::Done) {
                return Ok(false);
            }
            if !self.buf.is_empty() {
                let before = out.len();
                self.decode_buffered(out)?;
                self.release_if_done();
                if out.len() > before {
                    return Ok(true);
                }
                if matches!(self.state, BodyState::Done) {
                    return Ok(false);
                }
            }
            let conn = self
                .conn
                .as_mut()
                .ok_or_else(|| UpstreamError::Io("connection gone".into()))?;
            let n = monoio::time::timeout(idle, self.buf.fill(conn))
                .await
                .map_err(|_| UpstreamError::Timeout)?
                .map_err(|e| UpstreamError::Io(e.to_string()))?;
            if n == 0 {
                self.conn = None;
                return match self.state {
                    BodyState::UntilClose => {
                        self.state = BodyState::Done;
                        Ok(false)
                    }
                    _ => Err(UpstreamError::Io(
                        "closed before the end of the body".into(),
                    )),
                };
            }
        }
    }

    /// Reads the rest of the body, up to `limit` bytes, within `idle` per read.
    pub async fn read_to_end(
        &mut self,
        limit: usize,
        idle: Duration,
    ) -> Result<Vec<u8>, UpstreamError> {
        let mut out = Vec::new();
        while self.next_piece(&mut out, idle).await? {
            if out.len() > limit {
                return Err(UpstreamError::Protocol(format!(
                    "response body over {limit} bytes"
                )));
            }
        }
        Ok(out)
    }

    fn decode_buffered(&mut self, out: &mut Vec<u8>) -> Result<(), UpstreamError> {
        match &mut self.state {
            BodyState::Length(left) => {
                let n = (*left).min(self.buf.len() as u64) as usize;
                out.extend_from_slice(&self.buf.bytes()[..n]);
                self.buf.consume(n);
                *left -= n as u64;
                if *left == 0 {
                    self.state = BodyState::Done;
                }
            }
            BodyState::Chunked(dec) => {
                let used = dec
                    .decode(self.buf.bytes(), out)
                    .map_err(|e| UpstreamError::Protocol(e.to_string()))?;
                self.buf.consume(used);
                if dec.is_done() {
                    self.state = BodyState::Done;
                }
            }
            BodyState::UntilClose => {
                out.extend_from_slice(self.buf.bytes());
                let n = self.buf.len();
                self.buf.consume(n);
            }
            BodyState::Done => {}
        }
        Ok(())
    }

    /// Returns the connection to the pool once the body is fully read.
    fn release_if_done(&mut self) {
        if matches!(self.state, BodyState::Done) && self.head.keep_alive && self.buf.is_empty() {
            if let (Some((origin, pool)), Some(conn)) = (&self.pool, self.conn.take()) {
                pool.borrow_mut().put(origin, conn);
            }
        }
    }
}

/// The pool's key of the connections to `base`.
fn origin_of(base: &UpstreamBase) -> Origin {
    Origin {
        host: base.host.clone(),
        port: base.port,
        tls: base.tls,
    }
}
