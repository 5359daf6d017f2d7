//! The cache key's members read in one pass with [`json_skim`] instead of
//! serde_json: the body's strings and numbers stay slices of it, the feed
//! goes into one buffer hashed at once (one SHA-256 call rather than one
//! per member, tag and length). It writes exactly the bytes
//! [`super::key`]'s serde reading feeds, or answers `None` for anything it
//! does not follow (a `\u` escape, an escaped member name, a number whose
//! text serde_json rewrites, invalid UTF-8, nesting past
//! [`json_skim::MAX_DEPTH`], bad JSON), and the caller reads the body with
//! serde_json, errors included.

use crate::json_skim::Reader;
use std::io::Write;

/// A value as the body wrote it.
enum Raw<'a> {
    Null,
    Bool(bool),
    /// Digits alone: serde_json prints them back unchanged.
    Digits(&'a [u8]),
    /// Any other number, as serde_json reads it.
    Num(serde_json::Number),
    /// The string's bytes between its quotes, escapes kept.
    Str(&'a [u8]),
    Arr(Vec<Raw<'a>>),
    /// Members, names without escapes.
    Obj(Vec<(&'a [u8], Raw<'a>)>),
}

/// Appends to `out` the feed of the members of the object `body` (sorted,
/// the last of repeated names kept, those named in `excluded` left out),
/// as the serde reading feeds them; with whether
/// `stream_options.include_usage` is `true`. `None`: read it with serde_json.
pub(super) fn feed_members(body: &[u8], excluded: &[&str], out: &mut Vec<u8>) -> Option<bool> {
    let mut r = Reader::with_long_strings(body);
    if r.peek()? != b'{' {
        return None;
    }
    let Raw::Obj(mut members) = value(&mut r, 0)? else {
        return None;
    };
    if !r.finished() {
        return None;
    }
    members.sort_by(|a, b| a.0.cmp(b.0));
    let mut include_usage = false;
    for i in 0..members.len() {
        if shadowed(&members, i) {
            continue;
        }
        let (name, value) = &mut members[i];
        if *name == b"stream_options" {
            include_usage = usage_asked(value);
        }
        if excluded.iter().any(|e| e.as_bytes() == *name) {
            continue;
        }
        bytes(out, name);
        feed(out, value);
    }
    Some(include_usage)
}

fn value<'a>(r: &mut Reader<'a>, depth: usize) -> Option<Raw<'a>> {
    Some(match r.peek()? {
        b'"' => {
            let raw = r.string()?;
            if !raw.is_ascii() {
                std::str::from_utf8(raw).ok()?;
            }
            Raw::Str(raw)
        }
        b'{' => {
            let mut members = Vec::new();
            r.object(depth + 1, |r, name| {
                if name.contains(&b'\\') {
                    return None;
                }
                members.push((name, value(r, depth + 1)?));
                Some(())
            })?;
            Raw::Obj(members)
        }
        b'[' => {
            let mut items = Vec::new();
            r.array_or_null(depth + 1, |r| {
                items.push(value(r, depth + 1)?);
                Some(())
            })?;
            Raw::Arr(items)
        }
        b'n' => {
            r.literal(b"null")?;
            Raw::Null
        }
        b't' => {
            r.literal(b"true")?;
            Raw::Bool(true)
        }
        b'f' => {
            r.literal(b"false")?;
            Raw::Bool(false)
        }
        _ => {
            let start = r.position();
            r.number()?;
            let text = r.text_since(start);
            // Up to 19 digits are a u64 serde_json prints as written; a
            // sign, fraction or exponent it may print otherwise (`-0` as
            // `-0.0`, `1E2` as `100.0`): read by serde_json itself.
            if text.len() <= 19 && text.iter().all(u8::is_ascii_digit) {
                Raw::Digits(text)
            } else {
                Raw::Num(serde_json::from_slice(text).ok()?)
            }
        }
    })
}

/// `stream_options.include_usage` is `true` (the last of repeated names).
fn usage_asked(options: &Raw<'_>) -> bool {
    let Raw::Obj(members) = options else {
        return false;
    };
    members
        .iter()
        .rev()
        .find(|(n, _)| *n == b"include_usage")
        .is_some_and(|(_, v)| matches!(v, Raw::Bool(true)))
}

/// Whether member `i` of sorted `members` is followed by one of its name.
fn shadowed(members: &[(&[u8], Raw<'_>)], i: usize) -> bool {
    members
        .get(i + 1)
        .is_some_and(|next| next.0 == members[i].0)
}

/// The serde reading's feed of `v`: a type tag, lengths, members sorted.
fn feed(out: &mut Vec<u8>, v: &mut Raw<'_>) {
    match v {
        Raw::Null => out.push(b'n'),
        Raw::Bool(b) => out.push(if *b { b't' } else { b'f' }),
        Raw::Digits(text) => {
            out.push(b'#');
            bytes(out, text);
        }
        Raw::Num(n) => {
            out.push(b'#');
            let len_at = out.len();
            out.extend_from_slice(&[0; 8]);
            // Writing to a Vec cannot fail.
            let _ = write!(out, "{n}");
            patch_len(out, len_at);
        }
        Raw::Str(raw) => {
            out.push(b's');
            string(out, raw);
        }
        Raw::Arr(items) => {
            out.push(b'[');
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            items.iter_mut().for_each(|item| feed(out, item));
        }
        Raw::Obj(members) => {
            members.sort_by(|a, b| a.0.cmp(b.0));
            let kept = (0..members.len())
                .filter(|i| !shadowed(members, *i))
                .count();
            out.push(b'{');
            out.extend_from_slice(&(kept as u64).to_le_bytes());
            for i in 0..members.len() {
                if shadowed(members, i) {
                    continue;
                }
                let (name, value) = &mut members[i];
                bytes(out, name);
                feed(out, value);
            }
        }
    }
}

/// Length (u64, little-endian) then the bytes.
fn bytes(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// A string's decoded bytes, length first, from its raw text (escapes
/// other than `\u`, which the reader refuses).
fn string(out: &mut Vec<u8>, raw: &[u8]) {
    if !raw.contains(&b'\\') {
        bytes(out, raw);
        return;
    }
    let len_at = out.len();
    out.extend_from_slice(&[0; 8]);
    let mut escaped = false;
    for &b in raw {
        if escaped {
            out.push(match b {
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                other => other,
            });
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else {
            out.push(b);
        }
    }
    patch_len(out, len_at);
}

/// Writes at `len_at` the length of what follows its 8 bytes.
fn patch_len(out: &mut [u8], len_at: usize) {
    let len = (out.len() - len_at - 8) as u64;
    out[len_at..len_at + 8].copy_from_slice(&len.to_le_bytes());
}
