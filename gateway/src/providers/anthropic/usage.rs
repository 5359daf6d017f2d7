//! Token usage read from Messages responses and event streams as they are
//! relayed: `message_start` reports the input (and cache) tokens,
//! `message_delta` the output tokens so far. When a stream reports none,
//! the generated text is counted at 4 characters a token.

use crate::spend::{tokens_of_chars, Usage};
use crate::sse::{EventReader, EventTooLarge};
use serde::Deserialize;
use std::borrow::Cow;
use std::sync::LazyLock;

/// Finds the last `"usage"` member name of a kept tail; built once, not per
/// response.
static USAGE_MEMBER: LazyLock<memchr::memmem::FinderRev<'static>> =
    LazyLock::new(|| memchr::memmem::FinderRev::new(b"\"usage\""));

/// Most bytes of one event the reader keeps.
const MAX_EVENT_BYTES: usize = 1 << 20;

/// Anthropic's usage object.
#[derive(Debug, Deserialize, Default, Clone, Copy)]
struct UsageView {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

impl UsageView {
    /// Members present in `newer` replace these.
    fn update(&mut self, newer: UsageView) {
        self.input_tokens = newer.input_tokens.or(self.input_tokens);
        self.output_tokens = newer.output_tokens.or(self.output_tokens);
        self.cache_read_input_tokens = newer
            .cache_read_input_tokens
            .or(self.cache_read_input_tokens);
        self.cache_creation_input_tokens = newer
            .cache_creation_input_tokens
            .or(self.cache_creation_input_tokens);
    }

    fn usage(self) -> Usage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let created = self.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            prompt_tokens: self
                .input_tokens
                .unwrap_or(0)
                .saturating_add(read)
                .saturating_add(created),
            completion_tokens: self.output_tokens.unwrap_or(0),
            cached_tokens: read,
            cache_creation_tokens: created,
            search_units: 0,
        }
    }
}

#[derive(Deserialize)]
struct BodyView {
    usage: Option<UsageView>,
}

/// The usage a whole Messages response reports.
pub fn from_body(body: &[u8]) -> Option<Usage> {
    serde_json::from_slice::<BodyView>(body)
        .ok()?
        .usage
        .map(UsageView::usage)
}

/// The usage of a Messages response of which only the last bytes were
/// kept (a body too large to hold): the last `"usage"` member in `tail`,
/// where Anthropic puts it.
pub fn from_tail(tail: &[u8]) -> Option<Usage> {
    let mut end = tail.len();
    while let Some(at) = USAGE_MEMBER.rfind(&tail[..end]) {
        end = at;
        if at > 0 && tail[at - 1] == b'\\' {
            continue; // an escaped quote inside a string
        }
        let rest = tail[at + USAGE_MEMBER.needle().len()..].trim_ascii_start();
        let Some(rest) = rest.strip_prefix(b":") else {
            continue;
        };
        let parsed = serde_json::Deserializer::from_slice(rest)
            .into_iter::<UsageView>()
            .next();
        if let Some(Ok(view)) = parsed {
            return Some(view.usage());
        }
    }
    None
}

/// One stream event, only as far as usage needs it.
#[derive(Deserialize)]
struct EventView<'a> {
    message: Option<BodyView>,
    usage: Option<UsageView>,
    #[serde(borrow)]
    delta: Option<DeltaView<'a>>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(borrow)]
    thinking: Option<Cow<'a, str>>,
}

/// Usage of a Messages event stream, fed the bytes as they pass.
#[derive(Debug)]
pub struct StreamUsage {
    reader: EventReader,
    reported: Option<UsageView>,
    chars: u64,
}

impl Default for StreamUsage {
    fn default() -> Self {
        StreamUsage {
            reader: EventReader::new(MAX_EVENT_BYTES),
            reported: None,
            chars: 0,
        }
    }
}

impl StreamUsage {
    /// Takes the next bytes of the stream, split anywhere.
    pub fn feed(&mut self, bytes: &[u8]) {
        let (reported, chars) = (&mut self.reported, &mut self.chars);
        let result = self
            .reader
            .feed(bytes, &mut |_, data| on_event(data, reported, chars));
        if result.is_err() {
            // An oversized event is skipped; reading resumes after it.
            self.reader = EventReader::new(MAX_EVENT_BYTES);
        }
    }

    /// The reported usage, else `prompt_estimate` prompt tokens and the
    /// generated characters counted.
    pub fn finish(mut self, prompt_estimate: impl FnOnce() -> u64) -> Usage {
        let (reported, chars) = (&mut self.reported, &mut self.chars);
        let _ = self
            .reader
            .finish(&mut |_, data| on_event(data, reported, chars));
        match self.reported {
            Some(reported) => reported.usage(),
            None => Usage {
                prompt_tokens: prompt_estimate(),
                completion_tokens: tokens_of_chars(self.chars),
                ..Usage::default()
            },
        }
    }
}

fn on_event(
    data: &[u8],
    reported: &mut Option<UsageView>,
    chars: &mut u64,
) -> Result<(), EventTooLarge> {
    let Ok(event) = serde_json::from_slice::<EventView>(data) else {
        return Ok(());
    };
    if let Some(newer) = event.message.and_then(|m| m.usage).or(event.usage) {
        reported
            .get_or_insert_with(UsageView::default)
            .update(newer);
    }
    if let Some(delta) = event.delta {
        for text in [delta.text, delta.partial_json, delta.thinking]
            .into_iter()
            .flatten()
        {
            *chars += text.chars().count() as u64;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &str = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":5}}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );

    #[test]
    fn stream_usage_merges_start_and_delta_in_any_split() {
        let want = Usage {
            prompt_tokens: 115,
            completion_tokens: 7,
            cached_tokens: 100,
            cache_creation_tokens: 5,
            ..Usage::default()
        };
        let bytes = STREAM.as_bytes();
        for split in 0..=bytes.len() {
            let mut s = StreamUsage::default();
            s.feed(&bytes[..split]);
            s.feed(&bytes[split..]);
            assert_eq!(s.finish(|| 1), want, "split at {split}");
        }
    }

    #[test]
    fn stream_without_usage_is_estimated() {
        let text = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"abcdefgh\"}}\n\n";
        let mut s = StreamUsage::default();
        s.feed(text.as_bytes());
        let u = s.finish(|| 3);
        assert_eq!((u.prompt_tokens, u.completion_tokens), (3, 2));
        let mut s = StreamUsage::default();
        s.feed(format!("data: \"{}\"\n\n", "a".repeat(MAX_EVENT_BYTES + 1)).as_bytes());
        s.feed(STREAM.as_bytes());
        assert_eq!(s.finish(|| 1).completion_tokens, 7);
    }

    #[test]
    fn body_usage() {
        let body = br#"{"id":"m","content":[],"usage":{"input_tokens":3,"output_tokens":4,"cache_read_input_tokens":2}}"#;
        assert_eq!(
            from_body(body),
            Some(Usage {
                prompt_tokens: 5,
                completion_tokens: 4,
                cached_tokens: 2,
                ..Usage::default()
            })
        );
        assert_eq!(from_body(b"{}"), None);
        assert_eq!(from_body(b"nope"), None);
        let tail = br#"xxx \"usage\": no"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":9}}"#;
        assert_eq!(from_tail(tail).map(|u| u.completion_tokens), Some(9));
        assert_eq!(from_tail(b"no usage here"), None);
    }
}
