//! Chunked transfer coding (RFC 9112 §7.1), incremental in both directions.
//!
//! The decoder is strict, for client and upstream bodies alike: every line
//! ends in CRLF (a bare LF or CR is an error, the usual request-smuggling
//! vector), the chunk size is hex digits only and may not overflow 64 bits,
//! and chunk extensions and trailers are accepted but bounded and ignored.

/// The terminating chunk with no trailers.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Longest chunk-size line, extensions and CRLF included.
pub const MAX_SIZE_LINE: usize = 4096;
/// Most chunk-extension bytes over one whole body.
pub const MAX_EXTENSION_BYTES: usize = 16 * 1024;
/// Most trailer-section bytes (field lines with their CRLFs).
pub const MAX_TRAILER_BYTES: usize = 16 * 1024;
/// Most trailer fields.
pub const MAX_TRAILER_FIELDS: usize = 64;

/// Appends `data` as one chunk to `out`.
pub fn encode_chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    let mut hex = [0u8; 16];
    let mut n = data.len();
    let mut i = hex.len();
    while n > 0 {
        i -= 1;
        hex[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
    }
    out.reserve(data.len() + 20);
    out.extend_from_slice(&hex[i..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

/// Decodes a chunked body fed in arbitrary pieces.
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    extension_bytes: usize,
    trailer_bytes: usize,
    trailer_fields: usize,
}

/// Framing the decoder cannot accept.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked encoding: {0}")]
pub struct ChunkedError(&'static str);

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder {
            state: State::Size,
            extension_bytes: 0,
            trailer_bytes: 0,
            trailer_fields: 0,
        }
    }
}

impl ChunkedDecoder {
    /// Whether the last chunk and trailers have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes what it can of `input`, appending payload to `out`; returns the
    /// number of input bytes consumed. Stops at the end of the body, so bytes
    /// after it (a pipelined request) are left unconsumed.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ChunkedError> {
        let mut pos = 0;
        while pos < input.len() {
            match self.state {
                State::Size => {
                    let Some((line, used)) = crlf_line(&input[pos..], MAX_SIZE_LINE)? else {
                        break;
                    };
                    let (size, extensions) = parse_size_line(line)?;
                    self.extension_bytes = self
                        .extension_bytes
                        .checked_add(extensions)
                        .filter(|&n| n <= MAX_EXTENSION_BYTES)
                        .ok_or(ChunkedError("too many chunk extension bytes"))?;
                    pos += used;
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    let n = (input.len() - pos).min(usize::try_from(left).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[pos..pos + n]);
                    pos += n;
                    // n <= left by construction.
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                }
                State::DataEnd => {
                    let rest = &input[pos..];
                    if rest.starts_with(b"\r\n") {
                        pos += 2;
                        self.state = State::Size;
                    } else if rest == b"\r" {
                        break;
                    } else {
                        return Err(ChunkedError("chunk data not followed by CRLF"));
                    }
                }
                State::Trailers => {
                    let budget = MAX_TRAILER_BYTES - self.trailer_bytes;
                    let Some((line, used)) = crlf_line(&input[pos..], budget)? else {
                        break;
                    };
                    pos += used;
                    if line.is_empty() {
                        self.state = State::Done;
                        return Ok(pos);
                    }
                    check_trailer_field(line)?;
                    self.trailer_bytes += used;
                    self.trailer_fields += 1;
                    if self.trailer_fields > MAX_TRAILER_FIELDS {
                        return Err(ChunkedError("too many trailer fields"));
                    }
                }
                State::Done => return Ok(pos),
            }
        }
        Ok(pos)
    }
}

/// The first line of `input` without its CRLF, and its length with it;
/// `None` while the line is incomplete and shorter than `max`.
fn crlf_line(input: &[u8], max: usize) -> Result<Option<(&[u8], usize)>, ChunkedError> {
    let window = &input[..input.len().min(max)];
    let Some(eol) = memchr::memchr(b'\n', window) else {
        if input.len() >= max {
            return Err(ChunkedError("line too long"));
        }
        return Ok(None);
    };
    if eol == 0 || window[eol - 1] != b'\r' {
        return Err(ChunkedError("line ends in a bare LF"));
    }
    let line = &window[..eol - 1];
    if memchr::memchr(b'\r', line).is_some() {
        return Err(ChunkedError("bare CR in a line"));
    }
    Ok(Some((line, eol + 1)))
}

/// `chunk-size [ chunk-ext ]`: the size, checked against overflow, and the
/// extension's length. Extensions are `BWS ";" ...` of visible characters.
fn parse_size_line(line: &[u8]) -> Result<(u64, usize), ChunkedError> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ChunkedError("bad chunk size"));
    }
    let mut size: u64 = 0;
    for &b in &line[..digits] {
        let d = u64::from((b as char).to_digit(16).unwrap_or(0));
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(d))
            .ok_or(ChunkedError("chunk size overflows"))?;
    }
    let rest = &line[digits..];
    if rest.is_empty() {
        return Ok((size, 0));
    }
    let blanks = rest
        .iter()
        .take_while(|&&b| b == b' ' || b == b'\t')
        .count();
    let ext = &rest[blanks..];
    if !ext.starts_with(b";") {
        return Err(ChunkedError("bad chunk size"));
    }
    if !ext.iter().all(|&b| field_byte(b)) {
        return Err(ChunkedError("control character in a chunk extension"));
    }
    Ok((size, rest.len()))
}

/// A byte allowed in a field value or extension: HTAB, SP, visible ASCII and
/// obs-text; no other control characters.
fn field_byte(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

/// `field-name ":" OWS field-value OWS`, no obs-fold.
fn check_trailer_field(line: &[u8]) -> Result<(), ChunkedError> {
    let Some(colon) = memchr::memchr(b':', line) else {
        return Err(ChunkedError("trailer field without a colon"));
    };
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| token_byte(b)) {
        return Err(ChunkedError("bad trailer field name"));
    }
    if !line[colon + 1..].iter().all(|&b| field_byte(b)) {
        return Err(ChunkedError("control character in a trailer field"));
    }
    Ok(())
}

/// RFC 9110 `tchar`.
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(wire: &[u8]) -> Result<(Vec<u8>, usize, bool), ChunkedError> {
        let mut d = ChunkedDecoder::default();
        let mut out = Vec::new();
        let used = d.decode(wire, &mut out)?;
        Ok((out, used, d.is_done()))
    }

    #[test]
    fn round_trips_in_every_split() {
        let mut wire = Vec::new();
        encode_chunk(b"hello ", &mut wire);
        encode_chunk(b"world", &mut wire);
        wire.extend_from_slice(b"0\r\nx-trailer: 1\r\n\r\nNEXT");
        for split in 0..wire.len() {
            let mut d = ChunkedDecoder::default();
            let mut out = Vec::new();
            let mut buf = wire[..split].to_vec();
            let used = d.decode(&buf, &mut out).unwrap();
            buf.drain(..used);
            buf.extend_from_slice(&wire[split..]);
            let used2 = d.decode(&buf, &mut out).unwrap();
            assert!(d.is_done(), "split {split}");
            assert_eq!(out, b"hello world");
            assert_eq!(&buf[used2..], b"NEXT");
        }
    }

    #[test]
    fn rejects_garbage() {
        for wire in [
            &b"zz\r\n"[..],
            b"2\r\nabX",
            b"+5\r\nhello\r\n",
            b"-1\r\n",
            b"0x5\r\nhello\r\n",
            b" 5\r\nhello\r\n",
            b"5 \r\nhello\r\n",
            b"\r\n",
        ] {
            assert!(
                decode_all(wire).is_err(),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
    }

    #[test]
    fn bare_lf_and_bare_cr_are_refused_everywhere() {
        for wire in [
            &b"5\nhello\r\n0\r\n\r\n"[..],
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhello\r\n0\n\r\n",
            b"5\r\nhello\r\n0\r\n\n",
            b"5\r\nhello\r\n0\r\nx: 1\n\r\n",
            b"5\r\nhelloXY0\r\n\r\n",
            b"5\r\nhello\r\r\n0\r\n\r\n",
            b"5\r;a\r\nhello\r\n0\r\n\r\n",
            b"5;a\rb\r\nhello\r\n0\r\n\r\n",
        ] {
            assert!(
                decode_all(wire).is_err(),
                "{:?}",
                String::from_utf8_lossy(wire)
            );
        }
    }

    #[test]
    fn chunk_size_overflow_is_an_error_and_leading_zeros_are_fine() {
        assert_eq!(
            decode_all(b"10000000000000000\r\n"),
            Err(ChunkedError("chunk size overflows"))
        );
        assert!(decode_all(b"ffffffffffffffff\r\n").is_ok());
        let (out, _, done) = decode_all(b"0000000000000000000005\r\nhello\r\n0\r\n\r\n").unwrap();
        assert_eq!((out.as_slice(), done), (&b"hello"[..], true));
    }

    #[test]
    fn extensions_are_ignored_but_bounded() {
        let (out, _, done) =
            decode_all(b"5 ;name=\"quoted; value\"\t;x\r\nhello\r\n0;last\r\n\r\n").unwrap();
        assert_eq!((out.as_slice(), done), (&b"hello"[..], true));
        let long = format!("1;{}\r\n", "e".repeat(MAX_SIZE_LINE));
        assert_eq!(
            decode_all(long.as_bytes()),
            Err(ChunkedError("line too long"))
        );
        // Many lines each under the line cap still hit the per-body cap.
        let ext = format!(";{}", "e".repeat(1000));
        let many: String = (0..20).map(|_| format!("1{ext}\r\nx\r\n")).collect();
        assert_eq!(
            decode_all(many.as_bytes()),
            Err(ChunkedError("too many chunk extension bytes"))
        );
        assert!(decode_all(b"1;\x00\r\nx\r\n").is_err());
    }

    #[test]
    fn trailers_are_checked_and_bounded() {
        let (_, used, done) = decode_all(b"0\r\na: 1\r\nb-c:\r\n\r\nX").unwrap();
        assert!(done);
        assert_eq!(used, 17);
        for bad in [
            &b"0\r\nno colon\r\n\r\n"[..],
            b"0\r\n: v\r\n\r\n",
            b"0\r\na: 1\r\n folded\r\n\r\n",
            b"0\r\na: \x01\r\n\r\n",
        ] {
            assert!(
                decode_all(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let many: String = std::iter::once("0\r\n".to_string())
            .chain((0..=MAX_TRAILER_FIELDS).map(|i| format!("t{i}: v\r\n")))
            .collect();
        assert_eq!(
            decode_all(many.as_bytes()),
            Err(ChunkedError("too many trailer fields"))
        );
        let big = format!("0\r\nt: {}\r\n", "v".repeat(MAX_TRAILER_BYTES));
        assert_eq!(
            decode_all(big.as_bytes()),
            Err(ChunkedError("line too long"))
        );
        // An unfinished trailer line waits for more bytes.
        assert_eq!(decode_all(b"0\r\nt: v").unwrap(), (Vec::new(), 3, false));
    }
}
