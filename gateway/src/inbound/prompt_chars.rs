//! The characters of a request's `messages[].content` and `system` that
//! the prompt estimate counts (a string, or the `text` of each `"type":
//! "text"` part), read in one pass without building anything: by the
//! routing read of the body ([`super::skim`]) and by `spend`'s prompt
//! reader. They answer only for values read exactly as the estimate's full
//! parse reads them: a value of a shape they do not expect, invalid UTF-8
//! in a string they read, or a `\u` escape is left to that parse (`None`).

use crate::json_skim::{decoded_chars, Reader, Seen};

/// The characters of a top-level `messages` value (at the cursor) as the
/// estimate counts them, the cursor then after it; `None` (the cursor
/// anywhere) when the value is the full parse's.
pub(crate) fn messages_chars(r: &mut Reader<'_>) -> Option<u64> {
    let mut chars = 0;
    r.array_or_null(1, |r| message(r, &mut chars))?;
    Some(chars)
}

/// [`messages_chars`] for a top-level `system` value.
pub(crate) fn system_chars(r: &mut Reader<'_>) -> Option<u64> {
    let mut chars = 0;
    content(r, &mut chars)?;
    Some(chars)
}

/// One element of `messages`: an object whose `content` counts.
fn message(r: &mut Reader<'_>, chars: &mut u64) -> Option<()> {
    let mut seen = Seen::default();
    r.object(2, |r, key| match key {
        b"content" => {
            seen.first(0)?;
            content(r, chars)
        }
        _ => r.skip_value(3),
    })
}

/// A `content` or `system` value: a string's characters, the text parts of
/// an array; `null`, a literal or an object count nothing.
fn content(r: &mut Reader<'_>, chars: &mut u64) -> Option<()> {
    match r.peek()? {
        b'"' => {
            *chars = chars.saturating_add(text(r)?);
            Some(())
        }
        b'[' => r.array_or_null(3, |r| part(r, chars)),
        _ => other_than_a_number(r, 3),
    }
}

/// A value the full parse reads as a value (not as one it ignores), which
/// counts nothing: a number there is the full parse's, as it refuses one
/// out of `f64`'s range where it would only check an ignored one's grammar.
fn other_than_a_number(r: &mut Reader<'_>, depth: usize) -> Option<()> {
    match r.peek()? {
        b'-' | b'0'..=b'9' => None,
        _ => r.skip_value(depth),
    }
}

/// One element of a content array: an object's `text` counts when its
/// `type` is `"text"` (the last of each, as the full parse reads
/// repeats); a string is read as text but counts nothing; anything else
/// counts nothing.
fn part(r: &mut Reader<'_>, chars: &mut u64) -> Option<()> {
    match r.peek()? {
        b'{' => {
            let (mut is_text, mut counted) = (false, None);
            r.object(4, |r, key| match key {
                b"type" => {
                    is_text = match r.peek()? {
                        b'"' => text_bytes(r)? == "text",
                        _ => other_than_a_number(r, 5).map(|()| false)?,
                    };
                    Some(())
                }
                b"text" => {
                    counted = match r.peek()? {
                        b'"' => Some(text(r)?),
                        _ => other_than_a_number(r, 5).map(|()| None)?,
                    };
                    Some(())
                }
                _ => r.skip_value(5),
            })?;
            if is_text {
                *chars = chars.saturating_add(counted.unwrap_or(0));
            }
            Some(())
        }
        b'"' => text_bytes(r).map(drop),
        _ => other_than_a_number(r, 4),
    }
}

/// A string read as text: its raw text, which must be UTF-8.
fn text_bytes<'a>(r: &mut Reader<'a>) -> Option<&'a str> {
    std::str::from_utf8(r.string()?).ok()
}

/// A string's characters as the full parse decodes it: its length when
/// the pass that found its end saw only ASCII and no escape.
fn text(r: &mut Reader<'_>) -> Option<u64> {
    let (raw, plain) = r.text_string()?;
    if plain.ascii && !plain.escaped {
        return Some(raw.len() as u64);
    }
    decoded_chars(raw)
}
