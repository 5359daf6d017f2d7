//! One keep-alive client connection: send a request, read one response
//! (Content-Length, chunked or until close) and note when its body began.

use std::time::Instant;

use gateway::http1::{parse_response_head, ChunkedDecoder, ReadBuffer, ResponseFraming};
use monoio::buf::{IoBufMut, IoVecBufMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::BufResult;
use monoio_rustls::ClientTlsStream;
use serde::Serialize;

use super::target::Target;

/// Initial capacity of the read buffer.
const READ_BUFFER: usize = 16 * 1024;

/// Why an exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The TCP connection could not be opened.
    Connect,
    /// Writing the request failed.
    Write,
    /// Reading the response failed.
    Read,
    /// The server closed the connection before a complete response.
    Closed,
    /// The response was not valid HTTP/1.1.
    Protocol,
    /// No complete response within the request timeout.
    Timeout,
}

impl Failure {
    /// Short name for tables and JSON.
    pub fn label(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Write => "write",
            Failure::Read => "read",
            Failure::Closed => "closed",
            Failure::Protocol => "protocol",
            Failure::Timeout => "timeout",
        }
    }
}

/// A complete response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// When the first body byte arrived (`None` for an empty body).
    pub first_byte: Option<Instant>,
    /// Whether the connection may carry another request.
    pub keep_alive: bool,
    /// Whether the gateway answered from its response cache (the head
    /// names the entry in `x-litellm-cache-key`).
    pub cache_hit: bool,
}

/// A connection's socket: plain, or TLS for `https://` targets.
enum Stream {
    Plain(TcpStream),
    Tls(Box<ClientTlsStream<TcpStream>>),
}

impl Stream {
    /// Writes all of `buf` (over TLS, flushed to the socket).
    async fn send(&mut self, buf: Vec<u8>) -> BufResult<usize, Vec<u8>> {
        match self {
            Stream::Plain(s) => s.write_all(buf).await,
            Stream::Tls(s) => {
                let (res, buf) = s.write_all(buf).await;
                match res {
                    Ok(n) => (s.flush().await.map(|()| n), buf),
                    Err(e) => (Err(e), buf),
                }
            }
        }
    }
}

impl AsyncReadRent for Stream {
    async fn read<T: IoBufMut>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            Stream::Plain(s) => s.read(buf).await,
            Stream::Tls(s) => s.read(buf).await,
        }
    }

    async fn readv<T: IoVecBufMut>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            Stream::Plain(s) => s.readv(buf).await,
            Stream::Tls(s) => s.readv(buf).await,
        }
    }
}

/// An open client connection.
pub struct Connection {
    stream: Stream,
    buf: ReadBuffer,
    /// Decoded chunk payload, discarded after each read.
    scratch: Vec<u8>,
    /// The request to send next; see [`Connection::request_buf`].
    out: Vec<u8>,
}

impl Connection {
    /// Connects to `target` with `TCP_NODELAY` (and TLS for `https://`; a
    /// failed handshake counts as a failed connect).
    pub async fn open(target: &Target) -> Result<Connection, Failure> {
        let tcp = TcpStream::connect(target.addr)
            .await
            .map_err(|_| Failure::Connect)?;
        tcp.set_nodelay(true).map_err(|_| Failure::Connect)?;
        let stream = match &target.tls {
            None => Stream::Plain(tcp),
            Some(tls) => Stream::Tls(Box::new(
                tls.connector
                    .connect(tls.name.clone(), tcp)
                    .await
                    .map_err(|_| Failure::Connect)?,
            )),
        };
        Ok(Connection {
            stream,
            buf: ReadBuffer::with_capacity(READ_BUFFER),
            scratch: Vec::new(),
            out: Vec::new(),
        })
    }

    /// The buffer the next request is written into before
    /// [`Connection::exchange`].
    pub fn request_buf(&mut self) -> &mut Vec<u8> {
        &mut self.out
    }

    /// Sends the request in [`Connection::request_buf`] and reads the whole
    /// response. After an error the connection must be dropped.
    pub async fn exchange(&mut self) -> Result<Response, Failure> {
        let (res, out) = self.stream.send(std::mem::take(&mut self.out)).await;
        self.out = out;
        res.map_err(|_| Failure::Write)?;
        self.read_response().await
    }

    async fn read_response(&mut self) -> Result<Response, Failure> {
        let head = loop {
            match parse_response_head(self.buf.bytes()) {
                Ok(Some((head, len))) => {
                    let hit = names_cache_entry(&self.buf.bytes()[..len]);
                    self.buf.consume(len);
                    break (head, hit);
                }
                Ok(None) => self.fill().await?,
                Err(_) => return Err(Failure::Protocol),
            }
        };
        let (head, cache_hit) = head;
        let mut first_byte = None;
        let mut keep_alive = head.keep_alive;
        match head.framing {
            ResponseFraming::Empty => {}
            ResponseFraming::Length(mut left) => loop {
                let n = (self.buf.len() as u64).min(left);
                if n > 0 {
                    first_byte.get_or_insert_with(Instant::now);
                    self.buf.consume(n as usize);
                    left -= n;
                }
                if left == 0 {
                    break;
                }
                self.fill().await?;
            },
            ResponseFraming::Chunked => {
                let mut decoder = ChunkedDecoder::default();
                loop {
                    self.scratch.clear();
                    let used = decoder
                        .decode(self.buf.bytes(), &mut self.scratch)
                        .map_err(|_| Failure::Protocol)?;
                    self.buf.consume(used);
                    if !self.scratch.is_empty() {
                        first_byte.get_or_insert_with(Instant::now);
                    }
                    if decoder.is_done() {
                        break;
                    }
                    self.fill().await?;
                }
            }
            ResponseFraming::UntilClose => {
                keep_alive = false;
                loop {
                    if !self.buf.is_empty() {
                        first_byte.get_or_insert_with(Instant::now);
                        self.buf.consume(self.buf.len());
                    }
                    match self.buf.fill(&mut self.stream).await {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(_) => return Err(Failure::Read),
                    }
                }
            }
        }
        Ok(Response {
            status: head.status,
            first_byte,
            keep_alive,
            cache_hit,
        })
    }

    /// Reads more bytes; end of stream here means an incomplete response.
    async fn fill(&mut self) -> Result<(), Failure> {
        match self.buf.fill(&mut self.stream).await {
            Ok(0) => Err(Failure::Closed),
            Ok(_) => Ok(()),
            Err(_) => Err(Failure::Read),
        }
    }
}

/// Whether a response head carries `x-litellm-cache-key` (any case).
fn names_cache_entry(head: &[u8]) -> bool {
    const NAME: &[u8] = b"\nx-litellm-cache-key:";
    head.windows(NAME.len())
        .any(|w| w.eq_ignore_ascii_case(NAME))
}
