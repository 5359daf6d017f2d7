//! One client connection: read a request head, let the API admit it (the
//! credential is checked before the body is read), read the body, hand it
//! to the API, repeat while keep-alive holds. Pipelined requests are answered in
//! order because each is read only after the previous response is written.

use crate::api;
use crate::auth::CredentialMemo;
use crate::downstream::{ClientStream, Responder};
use crate::error::GatewayError;
use crate::http1::{
    parse_request_head, BodyFraming, ChunkedDecoder, HeadError, ReadBuffer, RequestHead,
};
use crate::panic_guard::CatchPanic;
use crate::state::Worker;
use bytes::Bytes;
use monoio::buf::IoBufMut;
use monoio::io::AsyncReadRent;
use monoio::net::TcpStream;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// A connection's task: [`serve`], its panic caught and logged. Its size
/// is what every open stream keeps on the heap, so nothing is kept beside
/// `serve`'s own state (a wrapping `async` block kept the socket and the
/// worker again, 88 B padded to 128).
pub fn task(
    tcp: TcpStream,
    slot: OpenConnection,
) -> Connection<impl std::future::Future<Output = ()>> {
    Connection {
        served: CatchPanic::new(serve(tcp, slot)),
    }
}

pin_project_lite::pin_project! {
    /// The future of [`task`].
    pub struct Connection<F> {
        #[pin]
        served: CatchPanic<F>,
    }
}

impl<F: std::future::Future<Output = ()>> std::future::Future for Connection<F> {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        self.project().served.poll(cx).map(|served| {
            if let Err(panic) = served {
                tracing::error!(panic = %panic, "connection panicked; closed");
            }
        })
    }
}

/// A connection counted in its core's open connections until it is
/// dropped: when the connection ends, or while a panic unwinds it.
pub struct OpenConnection(Rc<Worker>);

impl OpenConnection {
    /// Counts a connection of `worker`'s (before its task first runs, so a
    /// shutdown that begins meanwhile waits for it).
    pub fn count(worker: Rc<Worker>) -> Self {
        worker
            .open_connections
            .set(worker.open_connections.get() + 1);
        OpenConnection(worker)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let open = &self.0.open_connections;
        open.set(open.get().saturating_sub(1));
    }
}

/// Serves `tcp` until the client or the gateway closes it; with client
/// TLS, after a handshake that must finish within the header timeout.
pub async fn serve(tcp: TcpStream, slot: OpenConnection) {
    let worker = &*slot.0;
    // Tuned in a plain call: a socket borrowed here would keep its room in
    // this future's state after it moved into `stream`.
    let tcp = tuned(tcp, worker.shared.limits.write_timeout);
    let mut stream = match &worker.shared.client_tls {
        None => ClientStream::Plain(tcp),
        Some(tls) => {
            let acceptor = tls.acceptor();
            let handshake = ClientStream::accept_tls(tcp, &acceptor);
            match monoio::time::timeout(worker.shared.limits.header_timeout, handshake).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "client TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!("client TLS handshake timed out");
                    return;
                }
            }
        }
    };
    let mut buf = ReadBuffer::with_capacity(8 * 1024);
    let mut credentials = CredentialMemo::default();
    let mut fresh = true;
    loop {
        if buf.is_empty() {
            let read = if fresh {
                first_bytes(&mut buf, &mut stream, worker).await
            } else {
                next_bytes(&mut buf, &mut stream, worker).await
            };
            if !read {
                return;
            }
        }
        fresh = false;
        let head = match read_head(&mut stream, &mut buf, worker).await {
            Ok(Some(head)) => head,
            Ok(None) => return,
            Err(err) => {
                let mut out = Responder::new(&mut stream, false, false, false)
                    .with_write_timeout(worker.shared.limits.write_timeout);
                let _ = out.send_error(&err, None).await;
                return;
            }
        };
        let received_at = Instant::now();
        let mut keep_alive = head.keep_alive && !worker.shared.is_shutting_down();
        let head_only = head.method() == "HEAD";
        // Authenticated from the head: a refused request's body is read (and
        // dropped) only when it is small and already on its way; otherwise
        // it is never read and the connection closes after the answer.
        // Whether it was refused, read here: an admission borrowed for it
        // later would keep its room in this future's state while the
        // request (a stream, for minutes) is answered.
        let (admission, refused) = {
            let admission = api::admit(worker, &head, &mut credentials).await;
            let refused = admission.is_refused();
            (admission, refused)
        };
        if api::takes_connection(worker, &head) {
            // The route keeps the connection (a WebSocket): whatever the
            // client sent after the head is its.
            let leftover = buf.take(buf.len());
            let served = CatchPanic::new(Box::pin(api::take_over(
                worker,
                &head,
                admission,
                stream,
                leftover,
                received_at,
            )))
            .await;
            if let Err(panic) = served {
                tracing::error!(path = head.path(), panic = %panic, "connection handler panicked; connection closed");
            }
            return;
        }
        // A large multipart upload is read as it is sent on.
        let streamed = api::streamed_body(worker, &head).filter(|_| !refused);
        if let Some(length) = streamed {
            let early = buf.take(buf.len().min(length as usize));
            buf.release_if_empty();
            let mut out =
                Responder::new(&mut stream, keep_alive, head_only, head.minor_version == 0)
                    .with_write_timeout(worker.shared.limits.write_timeout);
            let upload = api::handle_upload(
                worker,
                &head,
                admission,
                (early, length),
                &mut out,
                received_at,
            );
            // Boxed: as large as a plain request's handler, and it would
            // hold this future's size up when that one shrinks.
            let served = CatchPanic::new(Box::pin(upload)).await;
            let read_all = match served {
                Ok(read_all) => read_all,
                Err(panic) => {
                    tracing::error!(path = head.path(), panic = %panic, "request handler panicked; connection closed");
                    if !out.started() {
                        out.close_after();
                        let err = GatewayError::Internal("the request handler failed");
                        let _ = out.send_error(&err, None).await;
                    }
                    false
                }
            };
            let _ = out.release_last_write().await;
            let kept = out.keep_alive();
            drop(out);
            if !read_all {
                linger(&mut stream).await;
                return;
            }
            if !kept || worker.shared.is_shutting_down() {
                return;
            }
            continue;
        }
        let skip_body = refused && !cheap_to_discard(&head);
        let body = if skip_body {
            keep_alive = false;
            Bytes::new()
        } else {
            match read_body(&mut stream, &mut buf, &head, worker).await {
                Ok(body) => body,
                Err(err) => {
                    let mut out = Responder::new(&mut stream, false, head_only, false)
                        .with_write_timeout(worker.shared.limits.write_timeout);
                    // Boxed: rare, and larger than what an open stream
                    // keeps in this future.
                    Box::pin(api::refuse(worker, &head, err, &mut out, received_at)).await;
                    // The rest of the body (one over the size limit) is
                    // drained, so the client still reads the refusal.
                    linger(&mut stream).await;
                    return;
                }
            }
        };
        // Nothing is read while the request is answered (unless pipelined).
        buf.release_if_empty();
        let mut out = Responder::new(&mut stream, keep_alive, head_only, head.minor_version == 0)
            .with_write_timeout(worker.shared.limits.write_timeout);
        // Each handler awaited on its own (see `api::Handler`).
        let served = match api::handler(worker, &head) {
            api::Handler::Llm(endpoint) => {
                CatchPanic::new(api::handle_llm(
                    worker,
                    (&head, endpoint),
                    admission,
                    body,
                    &mut out,
                    received_at,
                ))
                .await
            }
            api::Handler::Other(route) => {
                let peer = peer_of(out.request_stream());
                CatchPanic::new(api::handle_other(
                    worker,
                    (&head, route),
                    (admission, body),
                    &mut out,
                    received_at,
                    peer,
                ))
                .await
            }
        };
        if let Err(panic) = served {
            // Whatever the handler held was dropped while unwinding; only
            // this connection pays: a 500 when nothing was sent, then close.
            tracing::error!(path = head.path(), panic = %panic, "request handler panicked; connection closed");
            if !out.started() {
                out.close_after();
                let err = GatewayError::Internal("the request handler failed");
                let _ = out.send_error(&err, None).await;
            }
            return;
        }
        // A response end a handler held back and did not release still
        // reaches its client (a failed write ends keep-alive below).
        let _ = out.release_last_write().await;
        if skip_body {
            linger(&mut stream).await;
            return;
        }
        if !out.keep_alive() || worker.shared.is_shutting_down() {
            return;
        }
    }
}

/// `tcp` with its options set (see `socket::tune`).
fn tuned(tcp: TcpStream, write_timeout: Duration) -> TcpStream {
    super::socket::tune(&tcp, write_timeout);
    tcp
}

/// The client's address, read when a route asks for it: kept for the
/// connection's life, it was one more field in the state every open
/// stream carries.
fn peer_of(stream: &ClientStream) -> Option<std::net::IpAddr> {
    // SAFETY: the descriptor belongs to `stream`, which outlives this borrow.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(stream.raw_fd()) };
    let addr = socket2::SockRef::from(&fd).peer_addr().ok()?;
    addr.as_socket().map(|a| a.ip())
}

/// Largest body of a refused request that is read and dropped to keep the
/// connection; a larger one is never read.
const REFUSED_BODY_CAP: u64 = 64 * 1024;
/// How long a connection closed without reading its request body lingers,
/// dropping what the client still sends (see [`linger`]).
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes dropped while lingering: enough that a client that sent a
/// body a few MiB over `max_request_size_mb` still reads its 413 (with
/// 1 MiB, a 2 MiB upload to a 1 MB limit was cut by a reset while the
/// client wrote, and the answer was lost with it).
const LINGER_BYTES: usize = 8 << 20;

/// Whether a refused request's body is small enough to read and drop,
/// keeping the connection: none, or a Content-Length body of at most
/// [`REFUSED_BODY_CAP`] whose client is not waiting for `100 Continue`.
fn cheap_to_discard(head: &RequestHead) -> bool {
    match head.framing {
        BodyFraming::None => true,
        BodyFraming::Length(n) => n <= REFUSED_BODY_CAP && !head.expect_continue,
        BodyFraming::Chunked => false,
    }
}

/// Closes a connection whose request body was not read: the write side
/// first, then what the client still sends is read and dropped (up to
/// [`LINGER_BYTES`] for [`LINGER`]), so the kernel does not answer unread
/// bytes with a reset that could destroy the answer before the client reads
/// it.
async fn linger(stream: &mut ClientStream) {
    let _ = stream.shutdown().await;
    let deadline = Instant::now() + LINGER;
    let mut dropped = 0;
    let mut scratch = vec![0u8; 16 * 1024];
    while dropped < LINGER_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        match monoio::time::timeout(left, stream.read(scratch)).await {
            Ok((Ok(n), back)) if n > 0 => {
                dropped += n;
                scratch = back;
            }
            _ => return,
        }
    }
}

/// Reads the next request head within the header timeout; `Ok(None)` when the
/// client closed cleanly between requests.
async fn read_head(
    stream: &mut ClientStream,
    buf: &mut ReadBuffer,
    worker: &Worker,
) -> Result<Option<RequestHead>, GatewayError> {
    let limits = &worker.shared.limits;
    let deadline = Instant::now() + limits.header_timeout;
    loop {
        match parse_request_head(buf.bytes(), limits.max_headers, limits.max_header_bytes) {
            Ok((head, len)) => {
                buf.consume(len);
                return Ok(Some(head));
            }
            Err(HeadError::Partial) => {}
            Err(HeadError::TooLarge | HeadError::TooManyHeaders) => {
                return Err(GatewayError::HeadersTooLarge {
                    max_headers: limits.max_headers,
                    max_bytes: limits.max_header_bytes,
                })
            }
            Err(HeadError::Invalid(e)) => return Err(GatewayError::BadHttp(e)),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = GatewayError::ClientTimeout {
            part: "request head",
            after: limits.header_timeout,
        };
        match monoio::time::timeout(left, buf.fill(stream)).await {
            Err(_) => return Err(timeout),
            // The client left, possibly mid-head: nothing to answer.
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(None),
            Ok(Ok(_)) => {}
        }
    }
}

/// Reads the body the head announces, enforcing the size limit and the body
/// timeout, answering `Expect: 100-continue` first.
async fn read_body(
    stream: &mut ClientStream,
    buf: &mut ReadBuffer,
    head: &RequestHead,
    worker: &Worker,
) -> Result<Bytes, GatewayError> {
    let limits = &worker.shared.limits;
    let too_large = GatewayError::BodyTooLarge {
        limit_bytes: limits.max_body_bytes,
    };
    if let BodyFraming::Length(n) = head.framing {
        if n > limits.max_body_bytes as u64 {
            return Err(too_large);
        }
    }
    if head.framing == BodyFraming::None {
        return Ok(Bytes::new());
    }
    if head.expect_continue && buf.is_empty() {
        let write = stream.write_all(&b"HTTP/1.1 100 Continue\r\n\r\n"[..]);
        match monoio::time::timeout(limits.write_timeout, write).await {
            Ok((res, _)) => res.map_err(|e| GatewayError::BadHttp(e.to_string()))?,
            Err(_) => return Err(GatewayError::BadHttp("client stopped reading".into())),
        };
    }
    // One deadline for the whole body, so a client trickling bytes cannot
    // hold the connection longer than body_timeout.
    let deadline = Instant::now() + limits.body_timeout;
    let mut fill = async |buf: &mut ReadBuffer| -> Result<(), GatewayError> {
        let left = deadline.saturating_duration_since(Instant::now());
        match monoio::time::timeout(left, buf.fill(stream)).await {
            Err(_) => Err(GatewayError::ClientTimeout {
                part: "request body",
                after: limits.body_timeout,
            }),
            Ok(Ok(0)) | Ok(Err(_)) => Err(GatewayError::BadHttp(
                "connection closed inside the request body".into(),
            )),
            Ok(Ok(_)) => Ok(()),
        }
    };
    match head.framing {
        BodyFraming::None => Ok(Bytes::new()),
        BodyFraming::Length(n) if buf.len() >= n as usize => Ok(Bytes::from(buf.take(n as usize))),
        BodyFraming::Length(n) => {
            // The rest goes straight into one allocation of the body's size:
            // a large upload (an audio file) is held once, never grown
            // through the read buffer and copied out of it.
            let n = n as usize;
            let mut body = Vec::with_capacity(n);
            body.extend_from_slice(buf.bytes());
            buf.consume(body.len());
            while body.len() < n {
                let left = deadline.saturating_duration_since(Instant::now());
                let at = body.len();
                // Read no further than the body: the next request's bytes
                // stay on the socket for the read buffer.
                let read = stream.read(body.slice_mut(at..n));
                body = match monoio::time::timeout(left, read).await {
                    Err(_) => {
                        return Err(GatewayError::ClientTimeout {
                            part: "request body",
                            after: limits.body_timeout,
                        })
                    }
                    Ok((Ok(0), _)) | Ok((Err(_), _)) => {
                        return Err(GatewayError::BadHttp(
                            "connection closed inside the request body".into(),
                        ))
                    }
                    Ok((Ok(_), tail)) => tail.into_inner(),
                };
            }
            Ok(Bytes::from(body))
        }
        BodyFraming::Chunked => {
            let mut decoder = ChunkedDecoder::default();
            let mut body = Vec::new();
            loop {
                let used = decoder
                    .decode(buf.bytes(), &mut body)
                    .map_err(|e| GatewayError::BadHttp(e.to_string()))?;
                buf.consume(used);
                if body.len() > limits.max_body_bytes {
                    return Err(too_large);
                }
                if decoder.is_done() {
                    return Ok(Bytes::from(body));
                }
                fill(buf).await?;
            }
        }
    }
}

/// How long a connection accepted before shutdown began may take to send
/// its first request once shutdown has begun: its client connected while
/// the gateway was serving, so the request it sends is answered.
const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(1);

/// Reads a new connection's first bytes; false when there are none to
/// serve (the client closed, the keep-alive time passed, or shutdown began
/// and [`FIRST_REQUEST_GRACE`] passed without a byte).
async fn first_bytes(buf: &mut ReadBuffer, stream: &mut ClientStream, worker: &Worker) -> bool {
    let keepalive = worker.shared.limits.keepalive_timeout;
    let mut filled = std::pin::pin!(buf.fill(stream));
    let read = if worker.shared.is_shutting_down() {
        monoio::time::timeout(FIRST_REQUEST_GRACE, filled).await
    } else {
        monoio::select! {
            read = monoio::time::timeout(keepalive, filled.as_mut()) => read,
            _ = worker.shutdown.wait() => monoio::time::timeout(FIRST_REQUEST_GRACE, filled).await,
        }
    };
    matches!(read, Ok(Ok(n)) if n > 0)
}

/// Reads the next request's first bytes on a connection idle between
/// requests; false when it should close (the client closed, the keep-alive
/// time passed, or shutdown began).
async fn next_bytes(buf: &mut ReadBuffer, stream: &mut ClientStream, worker: &Worker) -> bool {
    if worker.shared.is_shutting_down() {
        return false;
    }
    let keepalive = worker.shared.limits.keepalive_timeout;
    let filled = std::pin::pin!(buf.fill(stream));
    monoio::select! {
        read = monoio::time::timeout(keepalive, filled) => matches!(read, Ok(Ok(n)) if n > 0),
        _ = worker.shutdown.wait() => false,
    }
}

#[cfg(test)]
mod tests {
    /// The size of the future `f` returns.
    fn future_size<A, B, F>(_: fn(A, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn a_connection_task_fits_the_allocators_7_kib_class() {
        // Every open stream keeps its connection's task on the heap: the
        // future, and monoio's header, stage tag and trailer, each padded
        // to the future's 128-byte alignment. mimalloc's classes there are
        // 7,168 and 8,192 bytes: 1 KiB a stream between them.
        let size = future_size(super::task);
        // Measured, a request of 7,168 bytes takes an 8 KiB block: the
        // class holds requests of up to 7,040 (multiples of 128 here).
        assert!(
            size + 3 * 128 <= 7_040,
            "the connection's future is {size} B"
        );
    }
}
