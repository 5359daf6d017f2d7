//! Chunked transfer coding (RFC 9112 §7.1), incremental in both directions.

/// The terminating chunk with no trailers.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

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
}

/// Framing the decoder cannot accept.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked encoding: {0}")]
pub struct ChunkedError(&'static str);

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder { state: State::Size }
    }
}

impl ChunkedDecoder {
    /// Whether the last chunk and trailers have been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes what it can of `input`, appending payload to `out`; returns the
    /// number of input bytes consumed. Stops at the end of the body.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ChunkedError> {
        let mut pos = 0;
        while pos < input.len() {
            match self.state {
                State::Size => {
                    let Some(eol) = memchr::memchr(b'\n', &input[pos..]) else {
                        if input.len() - pos > 1024 {
                            return Err(ChunkedError("chunk size line too long"));
                        }
                        break;
                    };
                    let line = &input[pos..pos + eol];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    let hex = match memchr::memchr(b';', line) {
                        Some(i) => &line[..i],
                        None => line,
                    };
                    let size = parse_hex(hex.trim_ascii()).ok_or(ChunkedError("bad chunk size"))?;
                    pos += eol + 1;
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::Data(size)
                    };
                }
                State::Data(left) => {
                    let n = (input.len() - pos).min(left.min(usize::MAX as u64) as usize);
                    out.extend_from_slice(&input[pos..pos + n]);
                    pos += n;
                    self.state = if n as u64 == left {
                        State::DataEnd
                    } else {
                        State::Data(left - n as u64)
                    };
                }
                State::DataEnd => {
                    let rest = &input[pos..];
                    if rest.starts_with(b"\r\n") {
                        pos += 2;
                    } else if rest.starts_with(b"\n") {
                        pos += 1;
                    } else if rest == b"\r" {
                        break;
                    } else {
                        return Err(ChunkedError("missing CRLF after chunk data"));
                    }
                    self.state = State::Size;
                }
                State::Trailers => {
                    let Some(eol) = memchr::memchr(b'\n', &input[pos..]) else {
                        if input.len() - pos > 8192 {
                            return Err(ChunkedError("trailer too long"));
                        }
                        break;
                    };
                    let empty = eol == 0 || (eol == 1 && input[pos] == b'\r');
                    pos += eol + 1;
                    if empty {
                        self.state = State::Done;
                        return Ok(pos);
                    }
                }
                State::Done => return Ok(pos),
            }
        }
        Ok(pos)
    }
}

fn parse_hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 15 {
        return None;
    }
    s.iter().try_fold(0u64, |acc, &b| {
        let d = (b as char).to_digit(16)? as u64;
        Some(acc * 16 + d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut d = ChunkedDecoder::default();
        assert!(d.decode(b"zz\r\n", &mut Vec::new()).is_err());
        let mut d = ChunkedDecoder::default();
        assert!(d.decode(b"2\r\nabX", &mut Vec::new()).is_err());
    }
}
