//! AWS's binary event-stream framing (`application/vnd.amazon.eventstream`),
//! decoded incrementally and encoded for tests and mocks.
//!
//! A message is a 12-byte prelude (total length, headers length, CRC32 of
//! those 8 bytes), typed headers, the payload and a CRC32 of everything
//! before it. Both checksums are verified and lengths are bounded before
//! anything is buffered.

/// Most bytes of one message (AWS's limit is 16 MiB).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// Most bytes of a message's headers (AWS's limit is 128 KiB).
pub const MAX_HEADER_BYTES: usize = 128 << 10;
const PRELUDE: usize = 12;
const MIN_MESSAGE: usize = PRELUDE + 4;

/// CRC-32 (IEEE 802.3, the one zlib computes).
pub fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// A header value; only strings are kept as such, the other types are
/// validated and skipped over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    /// Type 7.
    String(String),
    /// Any other type.
    Other,
}

/// One decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Headers in order.
    pub headers: Vec<(String, HeaderValue)>,
    /// The payload.
    pub payload: Vec<u8>,
}

impl Message {
    /// The string value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|(n, v)| match v {
            HeaderValue::String(s) if n == name => Some(s.as_str()),
            _ => None,
        })
    }
}

/// A framing error: the stream cannot be trusted past it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("event stream: {0}")]
pub struct FrameError(pub &'static str);

/// Decodes messages from bytes fed as they arrive.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// An empty decoder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `input` and hands every message it completes to `each`.
    pub fn feed(
        &mut self,
        input: &[u8],
        each: &mut dyn FnMut(Message) -> Result<(), FrameError>,
    ) -> Result<(), FrameError> {
        self.buf.extend_from_slice(input);
        let mut start = 0;
        let result = loop {
            match frame_len(&self.buf[start..]) {
                Ok(Some(len)) => {
                    let end = start + len;
                    match decode(&self.buf[start..end]).and_then(&mut *each) {
                        Ok(()) => start = end,
                        Err(e) => break Err(e),
                    }
                }
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.buf.drain(..start);
        result
    }

    /// Whether bytes of an incomplete message are left (at the end of the
    /// stream: truncated).
    pub fn has_partial(&self) -> bool {
        !self.buf.is_empty()
    }
}

/// The length of the message at the start of `buf` once all of it is
/// there; `None` while incomplete.
fn frame_len(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    if buf.len() < PRELUDE {
        return Ok(None);
    }
    let total = be32(&buf[0..4]) as usize;
    let headers = be32(&buf[4..8]) as usize;
    if crc32(&buf[0..8]) != be32(&buf[8..12]) {
        return Err(FrameError("prelude checksum mismatch"));
    }
    if !(MIN_MESSAGE..=MAX_MESSAGE_BYTES).contains(&total) {
        return Err(FrameError("message length out of range"));
    }
    if headers > MAX_HEADER_BYTES || headers > total - MIN_MESSAGE {
        return Err(FrameError("headers length out of range"));
    }
    Ok((buf.len() >= total).then_some(total))
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// One whole message whose prelude `frame_len` checked.
fn decode(msg: &[u8]) -> Result<Message, FrameError> {
    let total = msg.len();
    if crc32(&msg[..total - 4]) != be32(&msg[total - 4..]) {
        return Err(FrameError("message checksum mismatch"));
    }
    let headers_len = be32(&msg[4..8]) as usize;
    let mut rest = &msg[PRELUDE..PRELUDE + headers_len];
    let mut headers = Vec::new();
    while !rest.is_empty() {
        let (header, left) = read_header(rest)?;
        headers.push(header);
        rest = left;
    }
    Ok(Message {
        headers,
        payload: msg[PRELUDE + headers_len..total - 4].to_vec(),
    })
}

fn take(buf: &[u8], n: usize) -> Result<(&[u8], &[u8]), FrameError> {
    if buf.len() < n {
        return Err(FrameError("header runs past its section"));
    }
    Ok(buf.split_at(n))
}

fn read_header(buf: &[u8]) -> Result<((String, HeaderValue), &[u8]), FrameError> {
    let (len, rest) = take(buf, 1)?;
    let (name, rest) = take(rest, len[0] as usize)?;
    let name = std::str::from_utf8(name)
        .map_err(|_| FrameError("header name is not UTF-8"))?
        .to_string();
    let (kind, rest) = take(rest, 1)?;
    let fixed = match kind[0] {
        0 | 1 => 0,
        2 => 1,
        3 => 2,
        4 => 4,
        5 | 8 => 8,
        9 => 16,
        6 | 7 => {
            let (len, rest) = take(rest, 2)?;
            let len = u16::from_be_bytes([len[0], len[1]]) as usize;
            let (value, rest) = take(rest, len)?;
            let value = if kind[0] == 7 {
                let s = std::str::from_utf8(value)
                    .map_err(|_| FrameError("string header is not UTF-8"))?;
                HeaderValue::String(s.to_string())
            } else {
                HeaderValue::Other
            };
            return Ok(((name, value), rest));
        }
        _ => return Err(FrameError("unknown header type")),
    };
    let (_, rest) = take(rest, fixed)?;
    Ok(((name, HeaderValue::Other), rest))
}

/// Encodes a message with string headers.
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut h = Vec::new();
    for (name, value) in headers {
        h.push(name.len() as u8);
        h.extend_from_slice(name.as_bytes());
        h.push(7);
        h.extend_from_slice(&(value.len() as u16).to_be_bytes());
        h.extend_from_slice(value.as_bytes());
    }
    let total = (PRELUDE + h.len() + payload.len() + 4) as u32;
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&(h.len() as u32).to_be_bytes());
    let prelude_crc = crc32(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// An `event` message of type `event_type` with a JSON payload, as
/// Bedrock's streams frame them.
pub fn encode_event(event_type: &str, payload: &[u8]) -> Vec<u8> {
    encode(
        &[
            (":event-type", event_type),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], split: usize) -> Result<Vec<Message>, FrameError> {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        let mut push = |m| {
            out.push(m);
            Ok(())
        };
        d.feed(&input[..split], &mut push)?;
        d.feed(&input[split..], &mut push)?;
        assert!(!d.has_partial());
        Ok(out)
    }

    #[test]
    fn crc32_matches_zlib() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn typed_headers_are_skipped_over() {
        let payload = br#"{"foo":"bar"}"#;
        let header = [
            &[5u8][..],
            b"event",
            &[4],
            &0x4000_0000u32.to_be_bytes(),
            &[1, b'u', 9],
            &[7u8; 16],
            &[1, b's', 7, 0, 2],
            b"ok",
        ]
        .concat();
        let total = (12 + header.len() + payload.len() + 4) as u32;
        let mut msg = Vec::new();
        msg.extend_from_slice(&total.to_be_bytes());
        msg.extend_from_slice(&(header.len() as u32).to_be_bytes());
        msg.extend_from_slice(&crc32(&msg.clone()).to_be_bytes());
        msg.extend_from_slice(&header);
        msg.extend_from_slice(payload);
        msg.extend_from_slice(&crc32(&msg.clone()).to_be_bytes());
        let got = all(&msg, 5).unwrap();
        assert_eq!(got[0].headers[0], ("event".to_string(), HeaderValue::Other));
        assert_eq!(got[0].header("s"), Some("ok"));
        assert_eq!(got[0].payload, payload);
    }

    #[test]
    fn messages_decode_in_any_split() {
        let mut input = encode_event("messageStart", br#"{"role":"assistant"}"#);
        input.extend(encode(&[(":message-type", "event")], b""));
        for split in 0..=input.len() {
            let got = all(&input, split).unwrap();
            assert_eq!(got.len(), 2, "split at {split}");
            assert_eq!(got[0].header(":event-type"), Some("messageStart"));
            assert_eq!(got[0].payload, br#"{"role":"assistant"}"#);
            assert!(got[1].payload.is_empty());
        }
    }

    #[test]
    fn corruption_is_an_error_never_a_panic() {
        let good = encode_event("contentBlockDelta", br#"{"delta":{"text":"hi"}}"#);
        for i in 0..good.len() {
            for bit in [0x01u8, 0x80] {
                let mut bad = good.clone();
                bad[i] ^= bit;
                let mut d = Decoder::new();
                let r = d.feed(&bad, &mut |_| Ok(()));
                // A flipped bit is caught by a checksum, or leaves the
                // message incomplete (a larger length).
                assert!(r.is_err() || d.has_partial(), "flip at {i}");
            }
        }
        let mut huge = Vec::new();
        huge.extend_from_slice(&(MAX_MESSAGE_BYTES as u32 + 1).to_be_bytes());
        huge.extend_from_slice(&0u32.to_be_bytes());
        let crc = crc32(&huge);
        huge.extend_from_slice(&crc.to_be_bytes());
        let err = Decoder::new().feed(&huge, &mut |_| Ok(())).unwrap_err();
        assert_eq!(err, FrameError("message length out of range"));
    }
}
