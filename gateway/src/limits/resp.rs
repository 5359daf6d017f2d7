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
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(args.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for a in args {
        let a = a.as_ref();
        out.push(b'$');
        out.extend_from_slice(itoa::Buffer::new().format(a.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Parses one reply at the start of `buf`: `Ok(None)` when it is not all
/// there yet, else the reply and the bytes it took.
pub fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    let Some(end) = memchr::memmem::find(buf, b"\r\n") else {
        return Ok(None);
    };
    let line = std::str::from_utf8(&buf[1..end]).map_err(|_| "reply line is not UTF-8")?;
    let next = end + 2;
    let number = || {
        line.parse::<i64>()
            .map_err(|_| format!("bad number {line:?}"))
    };
    let kind = *buf.first().ok_or("empty reply")?;
    Ok(Some(match kind {
        b'+' => (Reply::Status(line.to_string()), next),
        b'-' => (Reply::Error(line.to_string()), next),
        b':' => (Reply::Int(number()?), next),
        b'$' => {
            let n = number()?;
            if n < 0 {
                return Ok(Some((Reply::Bulk(None), next)));
            }
            let n = n as usize;
            if buf.len() < next + n + 2 {
                return Ok(None);
            }
            (
                Reply::Bulk(Some(buf[next..next + n].to_vec())),
                next + n + 2,
            )
        }
        b'*' => {
            let n = number()?;
            if n < 0 {
                return Ok(Some((Reply::Array(None), next)));
            }
            let mut items = Vec::with_capacity(n.min(1024) as usize);
            let mut at = next;
            for _ in 0..n {
                match parse(&buf[at..])? {
                    Some((item, used)) => {
                        items.push(item);
                        at += used;
                    }
                    None => return Ok(None),
                }
            }
            (Reply::Array(Some(items)), at)
        }
        other => return Err(format!("unknown reply type {:?}", other as char)),
    }))
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
        assert_eq!(
            Reply::Array(Some(vec![Reply::Int(1), Reply::Int(2)])).integers(),
            Some(vec![1, 2])
        );
    }
}
