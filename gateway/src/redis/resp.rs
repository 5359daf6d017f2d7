//! Just enough of RESP (the Redis protocol) for the per-core limiter links:
//! commands out as arrays of bulk strings, replies in, parsed incrementally.

/// A Redis reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Status(String),
    /// `-ERR ...`.
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$n ...`; `None` is nil.
    Bulk(Option<Vec<u8>>),
    /// `*n ...`; `None` is nil.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The integers of an array reply, as scripts return them.
    pub fn integers(&self) -> Option<Vec<i64>> {
        match self {
            Reply::Array(Some(items)) => items
                .iter()
                .map(|i| match i {
                    Reply::Int(n) => Some(*n),
                    _ => None,
                })
                .collect(),
            _ => None,
        }
    }
}

/// Appends `args` as one command.
pub fn encode<S: AsRef<[u8]>>(args: &[S], out: &mut Vec<u8>) {
    let mut command = Command::start(out, args.len());
    for a in args {
        command.arg(a.as_ref());
    }
}

/// Where a command's arguments go: owned strings, or RESP bytes on a
/// link's outgoing buffer (no string per argument on the request path).
pub trait ArgSink {
    /// One argument.
    fn arg(&mut self, a: &[u8]);
    /// One integer argument, in decimal.
    fn int(&mut self, n: u64) {
        self.arg(itoa::Buffer::new().format(n).as_bytes());
    }
    /// One argument of `values` as little-endian doubles, 8 bytes each.
    fn doubles(&mut self, values: &[f64]);
}

/// Each argument on its own, for the tests to compare with the RESP bytes.
#[cfg(test)]
impl ArgSink for Vec<Vec<u8>> {
    fn arg(&mut self, a: &[u8]) {
        self.push(a.to_vec());
    }

    fn doubles(&mut self, values: &[f64]) {
        self.push(values.iter().flat_map(|v| v.to_le_bytes()).collect());
    }
}

/// One command being written: its array header first, then each argument
/// as a bulk string; the caller gives exactly the count it announced.
pub struct Command<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Command<'a> {
    /// Starts a command of `argc` arguments at the end of `out`.
    pub fn start(out: &'a mut Vec<u8>, argc: usize) -> Command<'a> {
        out.push(b'*');
        out.extend_from_slice(itoa::Buffer::new().format(argc).as_bytes());
        out.extend_from_slice(b"\r\n");
        Command { out }
    }
}

impl Command<'_> {
    /// One argument made of `parts`, one after the other (no copy of them
    /// put together first).
    pub fn parts(&mut self, parts: &[&[u8]]) {
        self.bulk_header(parts.iter().map(|p| p.len()).sum());
        for p in parts {
            self.out.extend_from_slice(p);
        }
        self.out.extend_from_slice(b"\r\n");
    }

    /// A bulk string's `$len` line; the caller writes the `len` bytes and
    /// the closing CRLF.
    fn bulk_header(&mut self, len: usize) {
        self.out.push(b'$');
        self.out
            .extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }
}

impl ArgSink for Command<'_> {
    fn arg(&mut self, a: &[u8]) {
        self.bulk_header(a.len());
        self.out.extend_from_slice(a);
        self.out.extend_from_slice(b"\r\n");
    }

    fn doubles(&mut self, values: &[f64]) {
        let len = values.len() * 8;
        self.bulk_header(len);
        self.out.reserve(len + 2);
        for v in values {
            self.out.extend_from_slice(&v.to_le_bytes());
        }
        self.out.extend_from_slice(b"\r\n");
    }
}

/// Deepest nesting of arrays accepted in a reply: the scripts return flat
/// arrays, and the parser recurses once per level.
const MAX_DEPTH: usize = 8;

/// Parses one reply at the start of `buf`: `Ok(None)` when it is not all
/// there yet, else the reply and the bytes it took.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    parse_at_depth(buf, 0)
}

fn parse_at_depth(buf: &[u8], depth: usize) -> Result<Option<(Reply, usize)>, String> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    if !matches!(kind, b'+' | b'-' | b':' | b'$' | b'*') {
        return Err(format!("unknown reply type {:?}", kind as char));
    }
    let Some(end) = line_end(buf, 1) else {
        return Ok(None);
    };
    let line = &buf[1..end];
    let next = end + 2;
    let text = || {
        std::str::from_utf8(line)
            .map(str::to_string)
            .map_err(|_| "reply line is not UTF-8".to_string())
    };
    let number =
        || parse_i64(line).ok_or_else(|| format!("bad number {:?}", String::from_utf8_lossy(line)));
    Ok(Some(match kind {
        b'+' => (Reply::Status(text()?), next),
        b'-' => (Reply::Error(text()?), next),
        b':' => (Reply::Int(number()?), next),
        b'$' => {
            let Ok(n) = usize::try_from(number()?) else {
                return Ok(Some((Reply::Bulk(None), next)));
            };
            let Some(stop) = next.checked_add(n).and_then(|s| s.checked_add(2)) else {
                return Err(format!("bulk length {n} out of range"));
            };
            if buf.len() < stop {
                return Ok(None);
            }
            if &buf[stop - 2..stop] != b"\r\n" {
                return Err("bulk string not followed by CRLF".into());
            }
            (Reply::Bulk(Some(buf[next..next + n].to_vec())), stop)
        }
        _ => {
            let Ok(n) = usize::try_from(number()?) else {
                return Ok(Some((Reply::Array(None), next)));
            };
            if n > 0 && depth >= MAX_DEPTH {
                return Err("reply nested too deeply".into());
            }
            // Each item takes at least 3 bytes: no more slots than that.
            let mut items = Vec::with_capacity(n.min(buf.len() / 3));
            let mut at = next;
            for _ in 0..n {
                match parse_at_depth(&buf[at..], depth + 1)? {
                    Some((item, used)) => {
                        items.push(item);
                        at += used;
                    }
                    None => return Ok(None),
                }
            }
            (Reply::Array(Some(items)), at)
        }
    }))
}

/// Where the line starting at `from` ends: the index of its `\r\n`. A
/// byte loop, not memchr: a reply's lines (`:1`, `*4`, `$12`) are a few
/// bytes, shorter than a vectorised search takes to set up.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    loop {
        let cr = at + buf.get(at..)?.iter().position(|&b| b == b'\r')?;
        if buf.get(cr + 1) == Some(&b'\n') {
            return Some(cr);
        }
        at = cr + 1;
    }
}

/// A decimal integer with an optional `-`, as RESP writes them; `None` for
/// anything else or a value outside `i64`.
fn parse_i64(digits: &[u8]) -> Option<i64> {
    let (negative, digits) = match digits {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, digits),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        let d = i64::from(d - b'0');
        n = n.checked_mul(10).and_then(|n| {
            if negative {
                n.checked_sub(d)
            } else {
                n.checked_add(d)
            }
        })?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands_as_bulk_arrays() {
        let mut out = Vec::new();
        encode(&["GET", "k"], &mut out);
        assert_eq!(out, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }

    #[test]
    fn parses_every_reply_type_and_waits_for_more() {
        let wire = b"*3\r\n:1\r\n:-7\r\n$2\r\nhi\r\n+OK\r\n-NOSCRIPT No matching script\r\n$-1\r\n";
        let (r, used) = parse(wire).unwrap().unwrap();
        assert_eq!(
            r,
            Reply::Array(Some(vec![
                Reply::Int(1),
                Reply::Int(-7),
                Reply::Bulk(Some(b"hi".to_vec()))
            ]))
        );
        let (r, used2) = parse(&wire[used..]).unwrap().unwrap();
        assert_eq!(r, Reply::Status("OK".into()));
        let (r, used3) = parse(&wire[used + used2..]).unwrap().unwrap();
        assert!(matches!(r, Reply::Error(e) if e.starts_with("NOSCRIPT")));
        let (r, _) = parse(&wire[used + used2 + used3..]).unwrap().unwrap();
        assert_eq!(r, Reply::Bulk(None));
        for cut in 0..used {
            assert_eq!(parse(&wire[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert!(parse(b"?x\r\n").is_err());
        assert_eq!(parse(b"").unwrap(), None);
    }

    #[test]
    fn numbers_and_lines_are_read_exactly() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-7"), Some(-7));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"9223372036854775808",
            b"1x",
            b"+1",
            b" 1",
            b"--1",
        ] {
            assert_eq!(parse_i64(bad), None, "{bad:?}");
        }
        // A lone CR inside a status line is part of it.
        assert_eq!(
            parse(b"+a\rb\r\n").unwrap(),
            Some((Reply::Status("a\rb".into()), 6))
        );
        assert_eq!(parse(b"+a\r").unwrap(), None);
        assert!(parse(b":12a\r\n").is_err());
    }

    #[test]
    fn hostile_replies_are_errors_not_panics() {
        // A line ending right after the type byte, or before it.
        assert!(parse(b"\r\n").is_err());
        assert_eq!(
            parse(b"+\r\n").unwrap(),
            Some((Reply::Status(String::new()), 3))
        );
        // The longest bulk length waits for its bytes, without overflow.
        assert!(parse(format!("${}\r\nx", i64::MAX).as_bytes())
            .unwrap()
            .is_none());
        // A bulk string must end in CRLF exactly where its length says.
        assert!(parse(b"$1\r\nabc\r\n").is_err());
        // Nesting is bounded, so the recursion is.
        let deep = "*1\r\n".repeat(10_000) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
        let ok = "*1\r\n".repeat(MAX_DEPTH) + ":1\r\n";
        assert!(parse(ok.as_bytes()).unwrap().is_some());
        // A huge announced array does not reserve memory up front.
        assert_eq!(parse(b"*9223372036854775807\r\n:1\r\n").unwrap(), None);
        assert_eq!(
            Reply::Array(Some(vec![Reply::Int(1), Reply::Int(2)])).integers(),
            Some(vec![1, 2])
        );
    }

    proptest::proptest! {
        /// Lines end where memchr, the search before the byte loop, finds
        /// their `\r\n`: lone `\r`s and `\n`s skipped, a cut line waits.
        #[test]
        fn lines_end_where_memchr_finds_them(
            buf in proptest::collection::vec(proptest::sample::select(b"\r\n:1*$-+x".to_vec()), 0..24),
            from in 0usize..26,
        ) {
            let by_memchr = |mut at: usize| loop {
                let cr = at + memchr::memchr(b'\r', buf.get(at..)?)?;
                if buf.get(cr + 1) == Some(&b'\n') {
                    return Some(cr);
                }
                at = cr + 1;
            };
            proptest::prop_assert_eq!(line_end(&buf, from), by_memchr(from));
        }
    }
}
