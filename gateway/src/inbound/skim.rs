//! The routing fields of a request body in one pass, without serde_json.
//!
//! serde_json reads a 1 KB chat body in about 7,000 instructions: every key
//! matched as text, the `messages` value tokenized and then validated as
//! UTF-8 again for its raw text. This reader walks the body once and finds
//! the strings' ends with memchr. It answers only for bodies it reads
//! exactly as serde_json would (the same members, the same values); a
//! duplicate member, a `\u` escape, a number or string in a typed field that
//! is not plain, nesting past 64, anything else it does not follow is left to
//! serde_json, which then accepts or refuses the body as it always did.

use super::prompt_chars::{messages_chars, system_chars};
use super::RoutingView;
use crate::json_skim::{Reader, Seen};

/// The routing fields of `body`, or `None` when serde_json must read it.
/// The same walk counts the characters of the messages' contents and of
/// `system` for the prompt estimate ([`RoutingView::prompt_chars`]), so
/// that the estimate needs no pass of its own.
pub(super) fn routing_view(body: &[u8]) -> Option<RoutingView<'_>> {
    let mut r = Reader::with_long_strings(body);
    let mut view = RoutingView::default();
    let mut seen = Seen::default();
    let mut chars = Some(0);
    let mut system = Seen::default();
    r.object(0, |r, key| {
        if super::is_litellm_only(key) {
            // Not a field serde_json reads: duplicates are kept, as it
            // ignores them.
            let value = raw(r)?;
            view.litellm_only.push(value);
            return Some(());
        }
        if key == b"system" {
            // Not a routing field; the estimate's reader leaves a
            // duplicate to the full parse.
            if system.first(0).is_none() {
                chars = None;
            }
            return counted(r, system_chars, &mut chars);
        }
        let (bit, slot) = match key {
            b"model" => (0, Slot::Raw(&mut view.model)),
            b"messages" => (1, Slot::Messages(&mut view.messages)),
            b"prompt" => (2, Slot::Raw(&mut view.prompt)),
            b"input" => (3, Slot::Raw(&mut view.input)),
            b"metadata" => (4, Slot::Raw(&mut view.metadata)),
            b"fallbacks" => (5, Slot::Member(&mut view.fallbacks)),
            b"num_retries" => (6, Slot::Member(&mut view.num_retries)),
            b"tags" => (7, Slot::Member(&mut view.tags)),
            b"stream" => (8, Slot::Value(&mut view.stream)),
            b"max_tokens" => (9, Slot::Value(&mut view.max_tokens)),
            b"max_completion_tokens" => (10, Slot::Value(&mut view.max_completion_tokens)),
            b"max_output_tokens" => (11, Slot::Value(&mut view.max_output_tokens)),
            b"n" => (12, Slot::Value(&mut view.n)),
            b"user" => (13, Slot::Value(&mut view.user)),
            b"cache" => (14, Slot::Member(&mut view.cache)),
            b"mock_testing_fallbacks" => (15, Slot::Member(&mut view.mock_testing_fallbacks)),
            b"mock_testing_context_fallbacks" => {
                (16, Slot::Member(&mut view.mock_testing_context_fallbacks))
            }
            b"mock_testing_content_policy_fallbacks" => (
                17,
                Slot::Member(&mut view.mock_testing_content_policy_fallbacks),
            ),
            b"mock_testing_rate_limit_error" => {
                (18, Slot::Member(&mut view.mock_testing_rate_limit_error))
            }
            b"mock_timeout" => (19, Slot::Member(&mut view.mock_timeout)),
            b"mock_delay" => (20, Slot::Member(&mut view.mock_delay)),
            b"mock_response" => (21, Slot::Raw(&mut view.mock_response)),
            b"turn_off_message_logging" => (22, Slot::Member(&mut view.turn_off_message_logging)),
            b"litellm_trace_id" => (23, Slot::Member(&mut view.litellm_trace_id)),
            b"litellm_metadata" => (24, Slot::Member(&mut view.litellm_metadata)),
            _ => return r.skip_value(1),
        };
        // serde_json refuses a duplicate of a field it reads.
        seen.first(bit)?;
        match slot {
            Slot::Raw(out) => *out = raw_or_null(r)?,
            Slot::Member(out) => *out = Some(raw(r)?),
            Slot::Value(out) => *out = plain_value(r)?,
            Slot::Messages(out) => {
                let start = r.position();
                counted(r, messages_chars, &mut chars)?;
                let text = std::str::from_utf8(r.text_since(start)).ok()?;
                *out = (text != "null").then_some(text);
            }
        }
        Some(())
    })?;
    view.prompt_chars = chars;
    r.finished().then_some(view)
}

/// Reads the value at the cursor with `count`, the prompt estimate's
/// reader of it, adding the characters it counts to `chars`. Where that
/// reader gives up (or `chars` is already unknown), `chars` is unknown and
/// the value is skipped as any other. The estimate's reader checks all
/// that skipping checks (and more) and counts nesting no lower, so a value
/// it reads is one skipping reads too, ending at the same place: the
/// routing fields are read as they were without the count.
fn counted<'a>(
    r: &mut Reader<'a>,
    count: impl FnOnce(&mut Reader<'a>) -> Option<u64>,
    chars: &mut Option<u64>,
) -> Option<()> {
    if let Some(sum) = *chars {
        let mut ahead = r.clone();
        if let Some(n) = count(&mut ahead) {
            *r = ahead;
            *chars = Some(sum.saturating_add(n));
            return Some(());
        }
        *chars = None;
    }
    r.skip_value(1)
}

/// Where one routing member goes, by how serde_json reads it.
enum Slot<'v, 'a> {
    /// Its raw text; `null` is absent.
    Raw(&'v mut Option<&'a str>),
    /// Its raw text, `null` included.
    Member(&'v mut Option<&'a str>),
    /// A `serde_json::Value`; `null` is absent.
    Value(&'v mut Option<serde_json::Value>),
    /// `messages`: as [`Slot::Raw`], its characters counted too.
    Messages(&'v mut Option<&'a str>),
}

/// The value at the cursor as raw text, `None` for `null`.
fn raw_or_null<'a>(r: &mut Reader<'a>) -> Option<Option<&'a str>> {
    if r.peek()? == b'n' {
        r.literal(b"null")?;
        return Some(None);
    }
    raw(r).map(Some)
}

/// The value at the cursor as raw text (valid UTF-8, as serde_json's raw
/// values must be).
fn raw<'a>(r: &mut Reader<'a>) -> Option<&'a str> {
    let start = r.position();
    r.skip_value(1)?;
    std::str::from_utf8(r.text_since(start)).ok()
}

/// A plain value at the cursor, as serde_json builds it: `null` (absent),
/// a boolean, a non-negative integer of up to 18 digits, or a string
/// without escapes. Anything else is serde_json's (`None`).
fn plain_value(r: &mut Reader<'_>) -> Option<Option<serde_json::Value>> {
    match r.peek()? {
        b'n' => r.literal(b"null").map(|()| None),
        b't' => r.literal(b"true").map(|()| Some(true.into())),
        b'f' => r.literal(b"false").map(|()| Some(false.into())),
        b'"' => {
            let raw = r.string()?;
            if memchr::memchr(b'\\', raw).is_some() {
                return None;
            }
            let text = std::str::from_utf8(raw).ok()?;
            Some(Some(text.into()))
        }
        _ => {
            let start = r.position();
            r.number()?;
            let digits = r.text_since(start);
            if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            // Up to 18 digits: no overflow.
            let n = digits
                .iter()
                .fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
            Some(Some(n.into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What serde_json reads from `body`, as `Fields::read` used to.
    fn by_serde(body: &[u8]) -> Option<RoutingView<'_>> {
        let mut view: RoutingView<'_> = serde_json::from_slice(body).ok()?;
        view.litellm_only = super::super::litellm_only_members(body).ok()?;
        Some(view)
    }

    /// The routing fields the skim read from `body`, without the prompt's
    /// characters (which serde_json's view leaves unknown).
    fn routing_fields(body: &[u8]) -> Option<RoutingView<'_>> {
        let mut view = routing_view(body)?;
        view.prompt_chars = None;
        Some(view)
    }

    #[test]
    fn reads_an_ordinary_chat_body_as_serde_json_does() {
        let body = br#" {"model":"gpt-4o","messages":[{"role":"user","content":"hi \"there\"\n"}],
            "max_tokens":16,"stream":true,"user":"u-1","n":2,"temperature":0.7,
            "metadata":{"tags":["a"]},"fallbacks":null,"extra":{"x":[1,2.5e3,-0,true,false,null]}} "#;
        let view = routing_view(body).expect("the skim reads it");
        assert_eq!(view.model, Some("\"gpt-4o\""));
        assert_eq!(view.fallbacks, Some("null"));
        assert_eq!(view.stream, Some(serde_json::Value::Bool(true)));
        assert_eq!(view.prompt_chars, Some(11), "hi \"there\" and a newline");
        assert_eq!(routing_fields(body), by_serde(body));
    }

    #[test]
    fn counts_the_prompt_where_the_estimate_would_and_reads_the_same_fields() {
        let body = "{\"model\":\"m\",\"system\":[{\"type\":\"text\",\"text\":\"sé\"}],\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\\nb\"},{\"type\":\"image_url\",\"image_url\":{}}]},{\"content\":\"模型\"}],\"tools\":[{\"type\":\"function\"}]}";
        let view = routing_view(body.as_bytes()).unwrap();
        assert_eq!(view.prompt_chars, Some(2 + 3 + 2));
        // What the estimate's reader leaves to the full parse: the count is
        // unknown, the routing fields read as ever.
        for body in [
            &br#"{"model":"m","messages":[{"content":7}]}"#[..],
            br#"{"model":"m","messages":[null]}"#,
            br#"{"model":"m","system":"a","system":"b","messages":[]}"#,
            br#"{"model":"m","messages":[],"system":[{"type":"text","text":1e400}]}"#,
            br#"{"model":"m","messages":[{"content":[{"type":"text","text":"a"},2]}]}"#,
        ] {
            let view = routing_view(body).expect("the routing fields read");
            assert_eq!(view.prompt_chars, None, "{}", String::from_utf8_lossy(body));
            assert_eq!(routing_fields(body), by_serde(body));
        }
        assert_eq!(
            routing_view(br#"{"model":"m","messages":null}"#).map(|v| (v.messages, v.prompt_chars)),
            Some((None, Some(0)))
        );
    }

    #[test]
    fn leaves_anything_unusual_to_serde_json() {
        for body in [
            &br#"{"model":"a","model":"b","messages":[]}"#[..],
            br#"{"model":"\u0061","messages":[]}"#,
            br#"{"model":"a","messages":[],"max_tokens":-1}"#,
            br#"{"model":"a","messages":[],"max_tokens":1.0}"#,
            br#"{"model":"a","messages":[],"max_tokens":1234567890123456789}"#,
            br#"{"model":"a","messages":[],"user":"a\"b"}"#,
            br#"{"model":"a","messages":[]} x"#,
            br#"["a",[]]"#,
            br#"{"model":"a","messages":[01]}"#,
            b"{\"model\":\"a\",\"messages\":[\"\xff\"]}",
            b"{\"model\":\"a\",\"messages\":[\"a\x01\"]}",
            br#"{"model":"a","messages":["#,
            b"",
        ] {
            assert_eq!(
                routing_view(body),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let deep = format!(
            "{{\"model\":\"a\",\"x\":{}{}}}",
            "[".repeat(100),
            "]".repeat(100)
        );
        assert_eq!(routing_view(deep.as_bytes()), None);
    }

    /// JSON values of the shapes clients send and of the ones this reader
    /// leaves to serde_json, as text.
    fn value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i32>().prop_map(|n| n.to_string()),
            (any::<i16>(), 0u8..100).prop_map(|(a, b)| format!("{a}.{b}")),
            Just("1e3".to_string()),
            Just("-0".to_string()),
            Just("012".to_string()),
            "[a-z \"\\\\/\n\t\u{1}é模🚀]{0,12}".prop_map(|s| serde_json::to_string(&s).unwrap()),
            "[a-z\\\\nt\"u0-9]{0,10}".prop_map(|s| format!("\"{s}\"")),
            Just("\"\\u00e9\"".to_string()),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(("[a-z_]{1,6}", inner), 0..4).prop_map(|m| {
                    let members: Vec<String> =
                        m.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    /// Request bodies: routing members and others, duplicates now and
    /// then, odd whitespace, and some bytes cut or changed.
    fn body() -> impl Strategy<Value = Vec<u8>> {
        let key = prop_oneof![
            Just("model"),
            Just("messages"),
            Just("prompt"),
            Just("input"),
            Just("metadata"),
            Just("fallbacks"),
            Just("num_retries"),
            Just("tags"),
            Just("cache"),
            Just("mock_timeout"),
            Just("mock_testing_fallbacks"),
            Just("turn_off_message_logging"),
            Just("litellm_metadata"),
            Just("caching"),
            Just("mock_response"),
            Just("stream"),
            Just("max_tokens"),
            Just("max_completion_tokens"),
            Just("max_output_tokens"),
            Just("n"),
            Just("user"),
            Just("temperature"),
            Just("mo\\nel"),
        ];
        let space = prop_oneof![Just(""), Just(" "), Just("\n\t"), Just("\r\n ")];
        (
            prop::collection::vec((key, value(), space.clone()), 0..7),
            space,
            prop_oneof![
                6 => Just(None),
                1 => (any::<prop::sample::Index>(), any::<u8>()).prop_map(Some),
            ],
            prop_oneof![6 => Just(None), 1 => any::<prop::sample::Index>().prop_map(Some)],
        )
            .prop_map(|(members, outer, change, cut)| {
                let members: Vec<String> = members
                    .into_iter()
                    .map(|(k, v, s)| format!("{s}\"{k}\"{s}:{s}{v}{s}"))
                    .collect();
                let mut body = format!("{outer}{{{}}}{outer}", members.join(",")).into_bytes();
                if let Some((at, byte)) = change {
                    let at = at.index(body.len());
                    body[at] = byte;
                }
                if let Some(at) = cut {
                    body.truncate(at.index(body.len() + 1));
                }
                body
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(8_000))]

        /// Whatever the skim answers, serde_json answers the same.
        #[test]
        fn the_skim_reads_as_serde_json_reads(body in body()) {
            if let Some(view) = routing_fields(&body) {
                prop_assert_eq!(Some(view), by_serde(&body), "{}", String::from_utf8_lossy(&body));
            }
        }

        /// Arbitrary bytes: never a panic, never an answer serde_json
        /// would not give.
        #[test]
        fn arbitrary_bytes_read_as_serde_json_reads(body in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Some(view) = routing_fields(&body) {
                prop_assert_eq!(Some(view), by_serde(&body));
            }
        }
    }

    /// The generator reaches both outcomes, so the property above tests
    /// something: bodies the skim reads, and bodies it leaves.
    #[test]
    fn the_generator_reaches_both_outcomes() {
        use proptest::strategy::ValueTree;
        use proptest::test_runner::TestRunner;
        let mut runner = TestRunner::deterministic();
        let strategy = body();
        let (mut read, mut left) = (0, 0);
        for _ in 0..2_000 {
            let body = strategy.new_tree(&mut runner).unwrap().current();
            match routing_fields(&body) {
                Some(view) => {
                    read += 1;
                    assert_eq!(Some(view), by_serde(&body));
                }
                None => left += 1,
            }
        }
        assert!(read >= 200 && left >= 200, "read {read}, left {left}");
    }
}
