//! A one-pass reader of a request's input for the prompt estimate: the
//! characters of `messages[].content` and `system` (a string, or the `text`
//! of each `"type": "text"` part) and the raw `prompt` and `input`, found
//! without building anything (the contents by [`crate::inbound::prompt_chars`],
//! which the routing read of a request uses too).
//!
//! The full parse ([`super::usage`]'s views) costs about 7 instructions a
//! byte of a chat body, most of it checking and skipping what it ignores.
//! This reader answers only for bodies it reads exactly as that parse
//! would: a `\u` escape, a duplicate member it reads, a message or value
//! of a shape it does not expect, invalid UTF-8 in a string it reads, or
//! anything after the object is left to the full parse, which then
//! decides as it always did.

use crate::inbound::prompt_chars::{messages_chars, system_chars};
use crate::json_skim::{Reader, Seen};

/// What the estimate counts: characters of text, and the raw `prompt` and
/// `input` values (each still to be tallied).
#[derive(Debug, Default, PartialEq)]
pub(super) struct PromptInput<'a> {
    /// Characters of the messages' contents and the system prompt.
    pub chars: u64,
    /// `prompt` as sent, unless absent or `null`.
    pub prompt: Option<&'a str>,
    /// `input` as sent, unless absent or `null`.
    pub input: Option<&'a str>,
}

/// The input of a request body, or `None` when the full parse must decide.
pub(super) fn prompt_input(body: &[u8]) -> Option<PromptInput<'_>> {
    let mut r = Reader::with_long_strings(body);
    let mut found = PromptInput::default();
    let mut seen = Seen::default();
    r.object(0, |r, key| match key {
        b"messages" => {
            seen.first(0)?;
            found.chars = found.chars.saturating_add(messages_chars(r)?);
            Some(())
        }
        b"system" => {
            seen.first(1)?;
            found.chars = found.chars.saturating_add(system_chars(r)?);
            Some(())
        }
        b"prompt" => {
            seen.first(2)?;
            found.prompt = raw_unless_null(r)?;
            Some(())
        }
        b"input" => {
            seen.first(3)?;
            found.input = raw_unless_null(r)?;
            Some(())
        }
        _ => r.skip_value(1),
    })?;
    r.finished().then_some(found)
}

/// A value as sent (`None` for `null`), which must be UTF-8.
fn raw_unless_null<'a>(r: &mut Reader<'a>) -> Option<Option<&'a str>> {
    let start = r.position();
    r.skip_value(1)?;
    let raw = std::str::from_utf8(r.text_since(start)).ok()?;
    Some((raw != "null").then_some(raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_chat_body() {
        let body = br#"{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"h\u00e9"}]}]}"#;
        assert_eq!(prompt_input(body), None, "a \\u escape is the full parse's");
        let body = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"héllo \\\"x\\\"\"},{\"content\":[{\"text\":\"abc\",\"type\":\"text\"},{\"type\":\"image_url\",\"text\":\"zz\"},\"s\",true]},{\"content\":null},{\"content\":{\"a\":1}}],\"system\":[{\"type\":\"text\",\"text\":\"sys\"}],\"stream\":false}";
        let got = prompt_input(body.as_bytes()).unwrap();
        assert_eq!((got.chars, got.prompt, got.input), (9 + 3 + 3, None, None));
        let got = prompt_input(br#"{"prompt":["ab",[1,2]],"input":null,"model":"m"}"#).unwrap();
        assert_eq!(
            (got.chars, got.prompt, got.input),
            (0, Some(r#"["ab",[1,2]]"#), None)
        );
        assert_eq!(prompt_input(b" {} ").unwrap(), PromptInput::default());
    }

    #[test]
    fn leaves_anything_unusual_to_the_full_parse() {
        for body in [
            &br#"{"messages":[],"messages":[]}"#[..],
            br#"{"messages":[{"content":"a","content":"b"}]}"#,
            br#"{"messages":[null]}"#,
            br#"{"messages":["x"]}"#,
            br#"{"messages":{}}"#,
            br#"{"messages":[]} x"#,
            br#"[null,null,null,null]"#,
            br#"{"system":"a","system":"b"}"#,
            br#"{"prompt":1,"prompt":2}"#,
            b"{\"messages\":[{\"content\":\"\xff\"}]}",
            b"{\"messages\":[{\"content\":[\"\xff\"]}]}",
            b"{\"prompt\":\"\xff\"}",
            br#"{"messages":[{"content":"\x"}]}"#,
            br#"{"id":01}"#,
            br#"{"messages":[{"content":1e400}]}"#,
            br#"{"system":[{"type":"text","text":7}]}"#,
            b"",
        ] {
            assert_eq!(
                prompt_input(body),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // Bytes the full parse does not read as text are not checked.
        assert!(prompt_input(b"{\"user\":\"\xff\",\"messages\":[{\"name\":\"\xff\"}]}").is_some());
    }
}
