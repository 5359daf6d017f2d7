//! WebSocket (RFC 6455) for the realtime relay: the opening handshake's
//! checks and headers on both sides, and one connection's frames through
//! tungstenite's protocol state machine driven without a socket
//! ([`Endpoint`]): bytes read from the peer go in, whole messages come out,
//! messages to send become bytes to write. Frames and messages are bounded
//! (a larger one is refused with close code 1009 before its payload is
//! buffered); control frames are answered (pings with pongs, a close with a
//! close) by the state machine. Knows nothing of the gateway.

use base64::Engine;
use std::io::{self, Read, Write};
use tungstenite::error::{CapacityError, Error as WsError};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::frame::{CloseFrame, Utf8Bytes};
use tungstenite::protocol::{Role, WebSocketConfig, WebSocketContext};

pub use tungstenite::Message;

/// The GUID RFC 6455 appends to a key for its accept value.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key.trim().as_bytes());
    sha.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha.digest().bytes())
}

/// A fresh random `Sec-WebSocket-Key` (16 random bytes, base64).
pub fn new_key() -> String {
    let bytes: [u8; 16] = std::array::from_fn(|_| fastrand::u8(..));
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Why a client's opening handshake is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotAHandshake(pub &'static str);

/// The headers of a client's opening handshake (RFC 6455 §4.2.1): the
/// method is GET, `Upgrade: websocket`, `Connection` lists `upgrade`,
/// `Sec-WebSocket-Version: 13` and a key that is 16 bytes in base64.
/// Returns the key.
pub fn check_handshake<'h>(
    method: &str,
    header: impl Fn(&str) -> Option<&'h str>,
) -> Result<&'h str, NotAHandshake> {
    if method != "GET" {
        return Err(NotAHandshake("a WebSocket handshake is a GET request"));
    }
    let has_token = |name: &str, token: &str| {
        header(name).is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    if !has_token("upgrade", "websocket") {
        return Err(NotAHandshake("missing `Upgrade: websocket`"));
    }
    if !has_token("connection", "upgrade") {
        return Err(NotAHandshake("missing `Connection: Upgrade`"));
    }
    if header("sec-websocket-version").map(str::trim) != Some("13") {
        return Err(NotAHandshake("`Sec-WebSocket-Version` must be 13"));
    }
    let key = header("sec-websocket-key")
        .map(str::trim)
        .ok_or(NotAHandshake("missing `Sec-WebSocket-Key`"))?;
    let decoded = base64::engine::general_purpose::STANDARD.decode(key);
    if decoded.map(|k| k.len()) != Ok(16) {
        return Err(NotAHandshake(
            "`Sec-WebSocket-Key` is not 16 bytes in base64",
        ));
    }
    Ok(key)
}

/// The server's `101 Switching Protocols` for a client's `key`, naming
/// `protocol` (one the client offered) when given.
pub fn accept_response(key: &str, protocol: Option<&str>) -> Vec<u8> {
    let mut h = Vec::with_capacity(160);
    h.extend_from_slice(
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: ",
    );
    h.extend_from_slice(accept_key(key).as_bytes());
    h.extend_from_slice(b"\r\n");
    if let Some(p) = protocol.filter(|p| is_token(p)) {
        h.extend_from_slice(b"sec-websocket-protocol: ");
        h.extend_from_slice(p.as_bytes());
        h.extend_from_slice(b"\r\n");
    }
    h.extend_from_slice(b"\r\n");
    h
}

/// Whether `s` is an HTTP token (what a subprotocol name must be).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// How an upstream's answer to our opening handshake ended.
#[derive(Debug, PartialEq, Eq)]
pub enum UpgradeAnswer {
    /// `101` with the right accept value; the head was this many bytes.
    Accepted(usize),
    /// Another status (an HTTP refusal), with its head's length and
    /// `Content-Length` when it has one.
    Refused {
        /// The status.
        status: u16,
        /// Bytes of the head.
        head_len: usize,
        /// The body's declared length.
        content_length: Option<u64>,
    },
}

/// Reads the upstream's answer to an opening handshake sent with `key`;
/// `Ok(None)` while the head is incomplete.
pub fn check_upgrade_answer(buf: &[u8], key: &str) -> Result<Option<UpgradeAnswer>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut res = httparse::Response::new(&mut headers);
    let len = match res.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > 64 * 1024 => {
            return Err("handshake answer head too large".into())
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("handshake answer: {e}")),
    };
    let status = res.code.unwrap_or(0);
    let find = |name: &str| {
        res.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(str::trim)
    };
    if status != 101 {
        let content_length = find("content-length").and_then(|v| v.parse().ok());
        return Ok(Some(UpgradeAnswer::Refused {
            status,
            head_len: len,
            content_length,
        }));
    }
    if !find("upgrade").is_some_and(|v| v.eq_ignore_ascii_case("websocket")) {
        return Err("101 without `Upgrade: websocket`".into());
    }
    if find("sec-websocket-accept") != Some(accept_key(key).as_str()) {
        return Err("101 with a wrong `Sec-WebSocket-Accept`".into());
    }
    Ok(Some(UpgradeAnswer::Accepted(len)))
}

/// Why a connection failed, as the close code sent to its peer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// A frame or message above the cap (close 1009).
    #[error("message too big: {size} bytes, the limit is {max} bytes")]
    TooBig {
        /// Its size (declared, for a frame).
        size: usize,
        /// The cap.
        max: usize,
    },
    /// A text message that is not UTF-8 (close 1007).
    #[error("text message is not valid UTF-8")]
    NotUtf8,
    /// Any other violation of RFC 6455 (close 1002).
    #[error("WebSocket protocol error: {0}")]
    Protocol(String),
    /// The connection is closed: nothing more can be read or sent.
    #[error("connection closed")]
    Closed,
}

impl Failure {
    /// The close code for the peer that caused it.
    pub fn close_code(&self) -> u16 {
        match self {
            Failure::TooBig { .. } => 1009,
            Failure::NotUtf8 => 1007,
            Failure::Protocol(_) | Failure::Closed => 1002,
        }
    }
}

/// Bytes in from the peer, bytes out to it: the "socket" the protocol
/// state machine reads and writes, which never blocks.
#[derive(Default)]
struct Pipe {
    input: Vec<u8>,
    read_at: usize,
    output: Vec<u8>,
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = &self.input[self.read_at..];
        if left.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = left.len().min(buf.len());
        buf[..n].copy_from_slice(&left[..n]);
        self.read_at += n;
        if self.read_at == self.input.len() {
            self.input.clear();
            self.read_at = 0;
        }
        Ok(n)
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One side of a WebSocket connection without its socket.
pub struct Endpoint {
    ctx: WebSocketContext,
    pipe: Pipe,
    /// A close frame was sent or received: the close handshake is under way.
    closing: bool,
    /// The peer broke the protocol: what it still sends is dropped unread
    /// (a refused oversize frame is never buffered).
    failed: bool,
}

impl Endpoint {
    /// The server side of a connection a client opened (its frames are
    /// masked), with frames and messages capped at `max_message` bytes.
    pub fn server(max_message: usize) -> Endpoint {
        Endpoint::new(Role::Server, max_message)
    }

    /// The client side of a connection the gateway opened (its frames are
    /// masked), capped as [`Endpoint::server`].
    pub fn client(max_message: usize) -> Endpoint {
        Endpoint::new(Role::Client, max_message)
    }

    fn new(role: Role, max_message: usize) -> Endpoint {
        let config = WebSocketConfig::default()
            .read_buffer_size(16 * 1024)
            .write_buffer_size(0)
            .max_message_size(Some(max_message))
            .max_frame_size(Some(max_message));
        Endpoint {
            ctx: WebSocketContext::new(role, Some(config)),
            pipe: Pipe::default(),
            closing: false,
            failed: false,
        }
    }

    /// Hands over bytes read from the peer (dropped once it failed).
    pub fn feed(&mut self, bytes: &[u8]) {
        if !self.failed {
            self.pipe.input.extend_from_slice(bytes);
        }
    }

    /// The next whole message the bytes fed so far hold, `Ok(None)` when
    /// more are needed. Pings are answered and a close is echoed (in the
    /// bytes to write); both are returned too. After an error the caller
    /// closes with [`Endpoint::fail`].
    pub fn next_message(&mut self) -> Result<Option<Message>, Failure> {
        if self.failed {
            return Ok(None);
        }
        match self.ctx.read(&mut self.pipe) {
            Ok(message) => {
                if matches!(message, Message::Close(_)) {
                    self.closing = true;
                }
                Ok(Some(message))
            }
            Err(WsError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            // The close handshake is over: nothing more to read.
            Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => Ok(None),
            Err(e) => {
                self.failed = true;
                self.pipe.input = Vec::new();
                self.pipe.read_at = 0;
                Err(failure(e))
            }
        }
    }

    /// Queues `message` for the peer.
    pub fn send(&mut self, message: Message) -> Result<(), Failure> {
        if matches!(message, Message::Close(_)) {
            self.closing = true;
        }
        match self.ctx.write(&mut self.pipe, message) {
            Ok(()) => self.flush(),
            Err(WsError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(failure(e)),
        }
    }

    /// Queues a close frame with `code` and `reason` (cut to fit a control
    /// frame), unless one was sent already.
    pub fn close(&mut self, code: u16, reason: &str) {
        let mut cut = reason.len().min(120);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        let frame = CloseFrame {
            code: CloseCode::from(code),
            reason: Utf8Bytes::from(reason[..cut].to_string()),
        };
        self.closing = true;
        let _ = self.ctx.close(&mut self.pipe, Some(frame));
    }

    /// Closes after `failure` with its close code.
    pub fn fail(&mut self, failure: &Failure) {
        self.close(failure.close_code(), &failure.to_string());
    }

    /// Whether a close frame was sent or received.
    pub fn closing(&self) -> bool {
        self.closing
    }

    /// Whether the close handshake is over or the peer failed: nothing
    /// more is read.
    pub fn finished(&self) -> bool {
        self.failed || !self.ctx.can_read()
    }

    /// Bytes waiting to be written to the peer.
    pub fn pending(&self) -> usize {
        self.pipe.output.len()
    }

    /// Takes the bytes to write to the peer.
    pub fn take_output(&mut self) -> Vec<u8> {
        let _ = self.flush();
        std::mem::take(&mut self.pipe.output)
    }

    fn flush(&mut self) -> Result<(), Failure> {
        match self.ctx.flush(&mut self.pipe) {
            Ok(()) => Ok(()),
            Err(WsError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => Ok(()),
            Err(e) => Err(failure(e)),
        }
    }
}

/// A text message from a string.
pub fn text(s: String) -> Message {
    Message::Text(Utf8Bytes::from(s))
}

/// A message's payload, for data messages.
pub fn payload(message: &Message) -> Option<&[u8]> {
    match message {
        Message::Text(t) => Some(t.as_bytes()),
        Message::Binary(b) => Some(b),
        _ => None,
    }
}

fn failure(e: WsError) -> Failure {
    match e {
        WsError::Capacity(CapacityError::MessageTooLong { size, max_size }) => Failure::TooBig {
            size,
            max: max_size,
        },
        WsError::Capacity(other) => Failure::Protocol(other.to_string()),
        WsError::Utf8(_) => Failure::NotUtf8,
        WsError::ConnectionClosed | WsError::AlreadyClosed => Failure::Closed,
        other => Failure::Protocol(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn accept_key_is_rfc_6455s_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn a_handshake_needs_every_header() {
        let full = [
            ("upgrade", "websocket"),
            ("connection", "keep-alive, Upgrade"),
            ("sec-websocket-version", "13"),
            ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ];
        let lookup = |skip: &'static str| {
            move |name: &str| {
                full.iter()
                    .find(|(n, _)| *n == name && *n != skip)
                    .map(|(_, v)| *v)
            }
        };
        assert_eq!(
            check_handshake("GET", lookup("")),
            Ok("dGhlIHNhbXBsZSBub25jZQ==")
        );
        assert!(check_handshake("POST", lookup("")).is_err());
        for (name, _) in full {
            assert!(check_handshake("GET", lookup(name)).is_err(), "{name}");
        }
    }

    /// Frames from a client to a server, through both endpoints: the
    /// client's are masked, the server reads them whole.
    #[test]
    fn messages_cross_between_a_client_and_a_server() {
        let mut client = Endpoint::client(1024);
        let mut server = Endpoint::server(1024);
        client.send(text("hello".into())).unwrap();
        client
            .send(Message::Binary(Bytes::from_static(b"\x00\x01")))
            .unwrap();
        let wire = client.take_output();
        // Fed one byte at a time: partial frames wait for the rest.
        let mut got = Vec::new();
        for b in &wire {
            server.feed(std::slice::from_ref(b));
            while let Some(m) = server.next_message().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(
            got,
            vec![
                text("hello".into()),
                Message::Binary(Bytes::from_static(b"\x00\x01"))
            ]
        );
    }

    #[test]
    fn a_frame_over_the_cap_fails_with_1009_before_its_payload_arrives() {
        let mut client = Endpoint::client(1 << 20);
        let mut server = Endpoint::server(100);
        client.send(text("x".repeat(200))).unwrap();
        let wire = client.take_output();
        // Only the head: the length alone refuses it.
        server.feed(&wire[..8]);
        let err = server.next_message().unwrap_err();
        assert_eq!(err.close_code(), 1009);
        server.fail(&err);
        client.feed(&server.take_output());
        match client.next_message().unwrap() {
            Some(Message::Close(Some(frame))) => assert_eq!(u16::from(frame.code), 1009),
            other => panic!("expected a close, got {other:?}"),
        }
    }

    #[test]
    fn pings_are_answered_and_a_close_is_echoed() {
        let mut client = Endpoint::client(1024);
        let mut server = Endpoint::server(1024);
        client
            .send(Message::Ping(Bytes::from_static(b"p")))
            .unwrap();
        server.feed(&client.take_output());
        assert!(matches!(server.next_message(), Ok(Some(Message::Ping(_)))));
        client.feed(&server.take_output());
        assert!(matches!(client.next_message(), Ok(Some(Message::Pong(_)))));
        client.close(1000, "bye");
        server.feed(&client.take_output());
        assert!(matches!(server.next_message(), Ok(Some(Message::Close(_)))));
        assert!(server.closing());
        client.feed(&server.take_output());
        assert!(matches!(client.next_message(), Ok(Some(Message::Close(_)))));
        assert!(client.finished());
    }

    #[test]
    fn unmasked_client_frames_and_bad_utf8_are_refused() {
        let mut server = Endpoint::server(1024);
        // An unmasked text frame "hi".
        server.feed(&[0x81, 0x02, b'h', b'i']);
        assert_eq!(server.next_message().unwrap_err().close_code(), 1002);
        let mut client = Endpoint::client(1024);
        // A server's (unmasked) text frame that is not UTF-8.
        client.feed(&[0x81, 0x02, 0xff, 0xfe]);
        assert_eq!(client.next_message().unwrap_err().close_code(), 1007);
    }

    #[test]
    fn the_upstream_answer_must_accept_our_key() {
        let key = "dGhlIHNhbXBsZSBub25jZQ==";
        let ok = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
        assert_eq!(
            check_upgrade_answer(ok, key),
            Ok(Some(UpgradeAnswer::Accepted(ok.len())))
        );
        assert_eq!(check_upgrade_answer(&ok[..20], key), Ok(None));
        let wrong = String::from_utf8_lossy(ok).replace("s3pP", "AAAA");
        assert!(check_upgrade_answer(wrong.as_bytes(), key).is_err());
        let refused = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(
            check_upgrade_answer(refused, key),
            Ok(Some(UpgradeAnswer::Refused {
                status: 401,
                head_len: refused.len() - 2,
                content_length: Some(2)
            }))
        );
    }
}
