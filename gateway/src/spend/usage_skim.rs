//! A one-pass reader of an OpenAI `usage` value: its token counts read
//! where they lie, for the usage of every non-streamed response.
//!
//! serde_json spends about 1,900 instructions on a chat response's `usage`
//! object (every key checked and matched, every ignored value tokenized).
//! This reader answers only for values it reads exactly as that parse
//! would: a `\u` escape, a repeated count, a count that is not a plain
//! unsigned integer or anything else it does not follow is left to the full
//! parse, which then decides as it always did.

use super::Usage;
use crate::json_skim::{Reader, Seen};

/// The counts of the `usage` value at the start of `text` (`Some(None)`:
/// `null`, or no prompt and no completion count), or `None` when the full
/// parse must decide.
pub(super) fn usage_value(text: &[u8]) -> Option<Option<Usage>> {
    let mut r = Reader::new(text);
    if r.peek()? == b'n' {
        r.literal(b"null")?;
        return Some(None);
    }
    let (mut prompt, mut completion) = (None, None);
    let mut usage = Usage::default();
    let mut seen = Seen::default();
    r.object(0, |r, key| match key {
        b"prompt_tokens" | b"input_tokens" => {
            seen.first(0)?;
            prompt = count_or_null(r)?;
            Some(())
        }
        b"completion_tokens" | b"output_tokens" => {
            seen.first(1)?;
            completion = count_or_null(r)?;
            Some(())
        }
        b"prompt_tokens_details" | b"input_tokens_details" => {
            seen.first(2)?;
            let mut cached = Seen::default();
            r.object_or_null(1, |r, key| match key {
                b"cached_tokens" => {
                    cached.first(0)?;
                    usage.cached_tokens = count_or_null(r)?.unwrap_or(0);
                    Some(())
                }
                _ => r.skip_value(2),
            })
        }
        b"cache_creation_input_tokens" => {
            seen.first(3)?;
            usage.cache_creation_tokens = count_or_null(r)?.unwrap_or(0);
            Some(())
        }
        _ => r.skip_value(1),
    })?;
    if prompt.is_none() && completion.is_none() {
        return Some(None);
    }
    usage.prompt_tokens = prompt.unwrap_or(0);
    usage.completion_tokens = completion.unwrap_or(0);
    Some(Some(usage))
}

/// A count: `null`, or a plain unsigned integer that fits a `u64`
/// (anything else, a sign, a fraction or an exponent among them, is the
/// full parse's).
fn count_or_null(r: &mut Reader<'_>) -> Option<Option<u64>> {
    if r.peek()? == b'n' {
        r.literal(b"null")?;
        return Some(None);
    }
    let start = r.position();
    r.number()?;
    let mut n: u64 = 0;
    for &d in r.text_since(start) {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(Some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_chat_usage() {
        let text = br#"{"prompt_tokens":12,"completion_tokens":16,"total_tokens":28,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}} ,"x":1}"#;
        let usage = usage_value(text).unwrap().unwrap();
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cached_tokens
            ),
            (12, 16, 4)
        );
        let responses = br#"{"input_tokens":3,"output_tokens":null,"input_tokens_details":null,"cache_creation_input_tokens":2}"#;
        let usage = usage_value(responses).unwrap().unwrap();
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cache_creation_tokens
            ),
            (3, 0, 2)
        );
        assert_eq!(usage_value(b"null"), Some(None));
        assert_eq!(usage_value(br#"{"total_tokens":5}"#), Some(None));
    }

    #[test]
    fn leaves_anything_unusual_to_the_full_parse() {
        for text in [
            &br#"{"prompt_tokens":1,"input_tokens":2}"#[..],
            br#"{"prompt_tokens":-1}"#,
            br#"{"prompt_tokens":1.0}"#,
            br#"{"prompt_tokens":1e2}"#,
            br#"{"prompt_tokens":18446744073709551616}"#,
            br#"{"prompt_tokens":"1"}"#,
            br#"{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":1}}"#,
            br#"{"prompt_tokens_details":[]}"#,
            br#"{"pr\u006fmpt_tokens":1}"#,
            br#"[1]"#,
            br#"{"prompt_tokens":1"#,
        ] {
            assert_eq!(usage_value(text), None, "{}", String::from_utf8_lossy(text));
        }
    }
}
