//! Finds one top-level member of a JSON object without parsing the rest:
//! strings, which are most of an LLM response's bytes, are skipped with a
//! SIMD search for their closing quote. Used to read `usage` out of a
//! response body that is passed through untouched.

/// Where the value of the top-level member `key` of the JSON object `body`
/// starts (`body[at..]` begins with the value). `None` when `body` is not an
/// object or has no such member under that exact (unescaped) name; callers
/// that must also catch escaped names parse the whole body then.
pub(super) fn find(body: &[u8], key: &[u8]) -> Option<usize> {
    let mut i = skip_ws(body, 0);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    let mut depth = 1usize;
    let mut expect_key = true;
    while i < body.len() {
        match body[i] {
            b'"' => {
                let end = string_end(body, i + 1)?;
                if depth == 1 && expect_key {
                    let value = skip_ws(body, end + 1);
                    if body.get(value) != Some(&b':') {
                        return None;
                    }
                    let value = skip_ws(body, value + 1);
                    if &body[i + 1..end] == key {
                        return Some(value);
                    }
                    expect_key = false;
                    i = value;
                    continue;
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return None;
                }
            }
            b',' if depth == 1 => expect_key = true,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the quote closing the string whose contents start at `from`.
fn string_end(body: &[u8], mut from: usize) -> Option<usize> {
    loop {
        let at = from + memchr::memchr2(b'"', b'\\', body.get(from..)?)?;
        if body[at] == b'"' {
            return Some(at);
        }
        from = at + 2;
    }
}

fn skip_ws(body: &[u8], mut i: usize) -> usize {
    while body.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::find;

    fn value<'a>(body: &'a str, key: &str) -> Option<&'a str> {
        find(body.as_bytes(), key.as_bytes()).map(|at| &body[at..])
    }

    #[test]
    fn finds_only_top_level_members() {
        let body = r#"{"id":"x","choices":[{"message":{"content":"\"usage\": 1","usage":2}}],
            "usage" : {"prompt_tokens":3}}"#;
        assert_eq!(value(body, "usage"), Some(r#"{"prompt_tokens":3}}"#));
        assert_eq!(
            value(body, "id"),
            Some(
                r#""x","choices":[{"message":{"content":"\"usage\": 1","usage":2}}],
            "usage" : {"prompt_tokens":3}}"#
            )
        );
        assert_eq!(value(r#"{"a":{"usage":1}}"#, "usage"), None);
        assert_eq!(value(r#"{"a":"\\","usage":1}"#, "usage"), Some("1}"));
    }

    #[test]
    fn malformed_or_truncated_bodies_find_nothing() {
        for body in [
            "",
            "[]",
            r#"{"a":"unterminated"#,
            r#"{"a" 1}"#,
            r#"{"a":1}}"usage":1"#,
            r#"{"a":"\"#,
            "{",
        ] {
            assert_eq!(value(body, "usage"), None, "{body}");
        }
    }
}
