//! The `id` of the answer a client receives (`chatcmpl-…`, `msg_…`,
//! `resp_…`), read from what is sent, for the attempt's spend-log row:
//! LiteLLM keeps it as the row's `request_id`, and a client finds its
//! request with `/spend/logs?request_id=<id>`.
//!
//! A whole body is read at once; a relayed body or a stream is read from
//! its first [`HEAD_LIMIT`] bytes, so the relay copies nothing once the id
//! is found (or given up on).

use crate::json_skim::Reader;
use std::sync::Arc;

/// Bytes of a relayed answer's start kept to find its id: the id leads an
/// OpenAI or Anthropic body and the first event of a stream.
const HEAD_LIMIT: usize = 8 << 10;
/// The longest id kept (the upstream's text, so capped).
const MAX_ID_LEN: usize = 256;

/// Reads an answer's id from the bytes sent to the client.
#[derive(Debug, Default)]
pub(super) struct AnswerId {
    /// The start of a relayed answer, while the id is looked for.
    head: Vec<u8>,
    state: State,
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Looking,
    Found(Arc<str>),
    GaveUp,
}

/// What one JSON text says about its id.
enum Read {
    Found(Arc<str>),
    /// The text is whole and names no id.
    None,
    /// The text stops (or is not followed) before an id was read.
    Unknown,
}

impl AnswerId {
    /// Reads a whole answer `body` (JSON).
    pub(super) fn whole(&mut self, body: &[u8]) {
        if !matches!(self.state, State::Looking) {
            return;
        }
        self.state = match of_json(body) {
            Read::Found(id) => State::Found(id),
            Read::None => State::GaveUp,
            // A text the cursor does not follow (a `\u` escape before the
            // id, members in another order): the full parse decides.
            Read::Unknown => match of_json_full(body) {
                Some(id) => State::Found(id),
                None => State::GaveUp,
            },
        };
    }

    /// Reads the next bytes of a relayed answer: server-sent events when
    /// `events`, else one JSON body.
    pub(super) fn feed(&mut self, bytes: &[u8], events: bool) {
        if !matches!(self.state, State::Looking) || bytes.is_empty() {
            return;
        }
        let room = HEAD_LIMIT.saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..bytes.len().min(room)]);
        let read = if events {
            of_events(&self.head)
        } else {
            of_json(&self.head)
        };
        self.state = match read {
            Read::Found(id) => State::Found(id),
            Read::None => State::GaveUp,
            Read::Unknown if self.head.len() >= HEAD_LIMIT => State::GaveUp,
            Read::Unknown => return,
        };
        self.head = Vec::new();
    }

    /// The id, if one was read.
    pub(super) fn take(self) -> Option<Arc<str>> {
        match self.state {
            State::Found(id) => Some(id),
            State::Looking | State::GaveUp => None,
        }
    }
}

/// The id of the first event of `text` that names one; `Unknown` while the
/// events read so far name none.
fn of_events(text: &[u8]) -> Read {
    // Only whole lines: the last one may still be arriving.
    let whole = match memchr::memrchr(b'\n', text) {
        Some(end) => &text[..end],
        None => return Read::Unknown,
    };
    for line in whole.split(|b| *b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else {
            continue;
        };
        let data = data.trim_ascii();
        if data.first() != Some(&b'{') {
            continue;
        }
        let read = match of_json(data) {
            Read::Unknown => of_json_full(data).map_or(Read::None, Read::Found),
            read => read,
        };
        if let Read::Found(id) = read {
            return Read::Found(id);
        }
    }
    Read::Unknown
}

/// The top-level `id` of a JSON object, or the `id` of its `message`
/// (Anthropic's `message_start` event) or `response` (a Responses API
/// event); the first one read.
fn of_json(text: &[u8]) -> Read {
    let mut found = None;
    let mut r = Reader::new(text);
    let whole = r.object(0, |r, key| match key {
        b"id" => match id_at(r)? {
            Some(id) => {
                found = Some(id);
                // Stop reading: the rest of the text is not needed.
                None
            }
            None => Some(()),
        },
        b"message" | b"response" if r.peek() == Some(b'{') => r.object(1, |r, key| match key {
            b"id" => match id_at(r)? {
                Some(id) => {
                    found = Some(id);
                    None
                }
                None => Some(()),
            },
            _ => r.skip_value(2),
        }),
        _ => r.skip_value(1),
    });
    match (found, whole) {
        (Some(id), _) => Read::Found(id),
        (None, Some(())) => Read::None,
        (None, None) => Read::Unknown,
    }
}

/// The value at the cursor as an id: a string of at most [`MAX_ID_LEN`]
/// bytes without escapes (`Some(None)` for any other value, stepped over).
fn id_at(r: &mut Reader<'_>) -> Option<Option<Arc<str>>> {
    if r.peek()? != b'"' {
        return r.skip_value(1).map(|()| None);
    }
    let raw = r.string()?;
    Some(usable(raw))
}

fn usable(raw: &[u8]) -> Option<Arc<str>> {
    if raw.is_empty() || raw.len() > MAX_ID_LEN || raw.contains(&b'\\') {
        return None;
    }
    std::str::from_utf8(raw).ok().map(Arc::from)
}

/// [`of_json`] by serde_json, for the texts the cursor leaves to it.
fn of_json_full(text: &[u8]) -> Option<Arc<str>> {
    #[derive(serde::Deserialize)]
    struct Inner {
        id: Option<serde_json::Value>,
    }
    #[derive(serde::Deserialize)]
    struct Outer {
        id: Option<serde_json::Value>,
        message: Option<Inner>,
        response: Option<Inner>,
    }
    let outer: Outer = serde_json::from_slice(text).ok()?;
    let nested = |i: Option<Inner>| i.and_then(|i| i.id);
    [outer.id, nested(outer.message), nested(outer.response)]
        .into_iter()
        .flatten()
        .find_map(|v| match v {
            serde_json::Value::String(s) => usable(s.as_bytes()),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(body: &str) -> Option<Arc<str>> {
        let mut a = AnswerId::default();
        a.whole(body.as_bytes());
        a.take()
    }

    fn fed(pieces: &[&str], events: bool) -> Option<Arc<str>> {
        let mut a = AnswerId::default();
        for p in pieces {
            a.feed(p.as_bytes(), events);
        }
        a.take()
    }

    #[test]
    fn reads_the_id_of_whole_answers() {
        let chat = r#"{"id":"chatcmpl-1","object":"chat.completion","choices":[]}"#;
        assert_eq!(whole(chat).as_deref(), Some("chatcmpl-1"));
        // Members in another order, a `\u` escape before the id.
        let sorted = r#"{"choices":[{"message":{"content":"caf\u00e9"}}],"id":"chatcmpl-2"}"#;
        assert_eq!(whole(sorted).as_deref(), Some("chatcmpl-2"));
        let messages = r#"{"id":"msg_1","type":"message","content":[]}"#;
        assert_eq!(whole(messages).as_deref(), Some("msg_1"));
        // Embeddings carry no id; neither do other values.
        assert_eq!(whole(r#"{"object":"list","data":[]}"#), None);
        assert_eq!(whole(r#"{"id":7}"#), None);
        assert_eq!(whole(r#"{"id":"a\"b"}"#), None);
        assert_eq!(whole(&format!(r#"{{"id":"{}"}}"#, "x".repeat(257))), None);
        assert_eq!(whole("not json"), None);
    }

    #[test]
    fn reads_the_id_of_a_relayed_body_from_its_start() {
        let pieces = [r#"{"id":"chat"#, r#"cmpl-3","choices":[{"#, r#"}]}"#];
        assert_eq!(fed(&pieces, false).as_deref(), Some("chatcmpl-3"));
        // An id past the bytes kept is given up on.
        let long = format!(r#"{{"choices":"{}","id":"late"}}"#, "x".repeat(HEAD_LIMIT));
        assert_eq!(fed(&[&long], false), None);
    }

    #[test]
    fn reads_the_id_of_the_first_event_naming_one() {
        let chat = [
            "data: {\"id\":\"chatcmpl-4\",\"object\":\"chat.compl",
            "etion.chunk\",\"choices\":[]}\n\ndata: [DONE]\n\n",
        ];
        assert_eq!(fed(&chat, true).as_deref(), Some("chatcmpl-4"));
        let messages = ["event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_5\",\"type\":\"message\"}}\n\n"];
        assert_eq!(fed(&messages, true).as_deref(), Some("msg_5"));
        let responses = ["event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_6\",\"object\":\"response\"}}\n\n"];
        assert_eq!(fed(&responses, true).as_deref(), Some("resp_6"));
        // An event without an id, then one with.
        let later = [
            ": ping\n\ndata: {\"type\":\"ping\"}\n\n",
            "data: {\"id\":\"c7\"}\n\n",
        ];
        assert_eq!(fed(&later, true).as_deref(), Some("c7"));
        assert_eq!(fed(&["data: [DONE]\n\n"], true), None);
    }
}
