//! A one-pass reader of an OpenAI stream chunk for the usage tap: the
//! characters of its generated text, found without building the chunk.
//!
//! serde_json spends about 30 instructions a byte on chunks this small
//! (every key checked as UTF-8 and matched, every ignored value tokenized,
//! a `Vec` per `choices`); this walks the bytes once and skips the insides
//! of strings with memchr. It answers only for chunks it reads exactly as
//! the full parse would and that carry no usage: a `usage` object, a
//! `response` member, any `\u` escape, a duplicate member, a value of an
//! unexpected type or anything else it does not follow is left to the full
//! parse, which then decides as it always did.

use crate::json_skim::{decoded_chars, Reader, Seen};

/// Characters of generated text in one event's `data` (the `text` of each
/// choice, its `delta.content` and each `delta.tool_calls[].function.arguments`),
/// or `None` when the chunk needs the full parse: it reports usage, is not
/// a chunk object, or holds something this reader does not decide.
pub(super) fn generated_chars(data: &[u8]) -> Option<u64> {
    let mut r = Reader::new(data);
    let mut chars = 0;
    let mut seen = Seen::default();
    r.object(0, |r, key| match key {
        b"choices" => {
            seen.first(0)?;
            r.array_or_null(0, |r| choice(r, &mut chars))
        }
        // A usage of `null` is no usage; any other is the full parse's.
        b"usage" => {
            seen.first(1)?;
            r.literal(b"null")
        }
        b"response" => None,
        _ => r.skip_value(1),
    })?;
    r.finished().then_some(chars)
}

/// One element of `choices`: its `text` and its `delta`.
fn choice(r: &mut Reader<'_>, chars: &mut u64) -> Option<()> {
    let mut seen = Seen::default();
    r.object(1, |r, key| match key {
        b"text" => {
            seen.first(0)?;
            text_or_null(r, chars)
        }
        b"delta" => {
            seen.first(1)?;
            let mut members = Seen::default();
            r.object_or_null(1, |r, key| delta(r, key, &mut members, chars))
        }
        _ => r.skip_value(2),
    })
}

/// One member of a `delta`; `seen` holds the members read before it.
fn delta(r: &mut Reader<'_>, key: &[u8], seen: &mut Seen, chars: &mut u64) -> Option<()> {
    match key {
        b"content" => {
            seen.first(0)?;
            text_or_null(r, chars)
        }
        b"tool_calls" => {
            seen.first(1)?;
            r.array_or_null(2, |r| tool_call(r, chars))
        }
        _ => r.skip_value(2),
    }
}

/// One element of `tool_calls`: its `function.arguments`.
fn tool_call(r: &mut Reader<'_>, chars: &mut u64) -> Option<()> {
    let mut seen = Seen::default();
    r.object(3, |r, key| match key {
        b"function" => {
            seen.first(0)?;
            let mut arguments = Seen::default();
            r.object_or_null(3, |r, key| match key {
                b"arguments" => {
                    arguments.first(0)?;
                    text_or_null(r, chars)
                }
                _ => r.skip_value(4),
            })
        }
        _ => r.skip_value(4),
    })
}

/// A string of generated text (or `null`): its characters, as the
/// full parse would decode it, added to `chars`.
fn text_or_null(r: &mut Reader<'_>, chars: &mut u64) -> Option<()> {
    if r.peek()? == b'n' {
        return r.literal(b"null");
    }
    *chars += decoded_chars(r.string()?)?;
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_text_of_an_ordinary_chunk() {
        let chunk = br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1796192202,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":"h\u00e9llo "},"finish_reason":null}]}"#;
        // A `\u` escape is the full parse's.
        assert_eq!(generated_chars(chunk), None);
        let chunk = "{\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"héllo \\\"x\\\"\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}";
        assert_eq!(generated_chars(chunk.as_bytes()), Some(9));
        let tools = br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{}"}},{"function":{"arguments":"ab"}}]}},{"text":"xyz"}]}"#;
        assert_eq!(generated_chars(tools), Some(7));
        assert_eq!(generated_chars(br#" { } "#), Some(0));
        assert_eq!(generated_chars(br#"{"choices":[]}"#), Some(0));
    }

    #[test]
    fn leaves_usage_and_anything_unusual_to_the_full_parse() {
        for chunk in [
            &br#"{"choices":[],"usage":{"prompt_tokens":1}}"#[..],
            br#"{"type":"response.completed","response":{"usage":{}}}"#,
            br#"{"choices":[],"choices":[]}"#,
            br#"{"usage":null,"usage":null}"#,
            br#"{"choices":[{"delta":{"content":7}}]}"#,
            br#"{"choices":[["x"]]}"#,
            br#"{"choices":[]} x"#,
            br#"{"choices":[{"delta":{"content":"a"}]}"#,
            br#"{"id":01}"#,
            br#"{"id":1.}"#,
            br#"{"id":tru}"#,
            b"{\"id\":\"a\x01b\"}",
            b"{\"choices\":[{\"text\":\"\xff\"}]}",
            b"{\"\xff\":1}",
            br#"{"id":"\x"}"#,
            br#"[null,null,[]]"#,
            br#"[DONE]"#,
            b"",
        ] {
            assert_eq!(
                generated_chars(chunk),
                None,
                "{}",
                String::from_utf8_lossy(chunk)
            );
        }
        let deep = format!("{{\"x\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert_eq!(generated_chars(deep.as_bytes()), None);
    }
}
