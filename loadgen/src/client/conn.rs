//! One keep-alive client connection: send a request, read one response
//! (Content-Length, chunked or until close) and note when its body began.

use std::net::SocketAddr;
use std::time::Instant;

use gateway::http1::{parse_response_head, ChunkedDecoder, ReadBuffer, ResponseFraming};
use monoio::io::AsyncWriteRentExt;
use monoio::net::TcpStream;
use serde::Serialize;

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
}

/// An open client connection.
pub struct Connection {
    stream: TcpStream,
    buf: ReadBuffer,
    /// Decoded chunk payload, discarded after each read.
    scratch: Vec<u8>,
    /// The request to send next; see [`Connection::request_buf`].
    out: Vec<u8>,
}

impl Connection {
    /// Connects to `addr` with `TCP_NODELAY`.
    pub async fn open(addr: SocketAddr) -> Result<Connection, Failure> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|_| Failure::Connect)?;
        stream.set_nodelay(true).map_err(|_| Failure::Connect)?;
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
        let (res, out) = self.stream.write_all(std::mem::take(&mut self.out)).await;
        self.out = out;
        res.map_err(|_| Failure::Write)?;
        self.read_response().await
    }

    async fn read_response(&mut self) -> Result<Response, Failure> {
        let head = loop {
            match parse_response_head(self.buf.bytes()) {
                Ok(Some((head, len))) => {
                    self.buf.consume(len);
                    break head;
                }
                Ok(None) => self.fill().await?,
                Err(_) => return Err(Failure::Protocol),
            }
        };
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
