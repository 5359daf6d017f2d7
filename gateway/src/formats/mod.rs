//! Client formats: the API a client speaks, translated to and from the
//! gateway's internal form.
//!
//! The internal form is OpenAI's: a chat completions request body, a
//! `chat.completion` response, `chat.completion.chunk` server-sent events
//! ending in `data: [DONE]`. Each provider translates its native format to
//! and from it (`providers`), each client format other than OpenAI's
//! translates to and from it here, so N providers and M client formats take
//! N + M translators, not N × M. Where the client's format is the provider's
//! (OpenAI to OpenAI, Anthropic to Anthropic) nothing is translated at all.
//!
//! Translators are pure functions of bytes: whole bodies in one call,
//! streams event by event with at most one event buffered.

pub mod anthropic;
pub mod responses;

use crate::sse::{EventReader, EventTooLarge};

/// A wire format, of a client or of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenAI's chat completions, completions and embeddings: also the
    /// gateway's internal form.
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
    /// Google's Gemini API (a provider's format only).
    Gemini,
    /// OpenAI's Responses API (a client format only, bridged through chat
    /// completions).
    Responses,
    /// AWS Bedrock's Converse API (a provider's format only: JSON answers,
    /// binary event streams).
    Bedrock,
    /// Cohere's v2 API (a provider's format only: JSON answers, named
    /// server-sent events).
    Cohere,
}

/// Most bytes of one translated stream event; a larger event ends the
/// stream with an error.
pub const MAX_EVENT_BYTES: usize = 4 << 20;

/// Most bytes of a whole body the gateway translates.
pub const MAX_BODY_BYTES: usize = 64 << 20;

/// Bytes that cannot be translated: not the shape their format promises.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TranslateError(pub String);

impl From<EventTooLarge> for TranslateError {
    fn from(e: EventTooLarge) -> Self {
        TranslateError(e.to_string())
    }
}

impl From<serde_json::Error> for TranslateError {
    fn from(e: serde_json::Error) -> Self {
        TranslateError(format!("invalid JSON: {e}"))
    }
}

/// Translates a stream of server-sent events from one format to another,
/// fed the bytes as they arrive.
pub trait StreamTranslator {
    /// Appends to `out` the translation of every event `input` completes.
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), TranslateError>;
    /// The end of the stream: appends what closes the translated stream.
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError>;
}

/// The translation of single events, which [`Events`] turns into a
/// [`StreamTranslator`].
pub trait EventTranslator {
    /// One complete event: its `event:` name (empty if none) and its data.
    fn event(&mut self, name: &[u8], data: &[u8], out: &mut Vec<u8>) -> Result<(), TranslateError>;
    /// The stream ended (after its last event).
    fn end(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError>;
}

/// A stream translator that reads events and hands each to `T`.
pub struct Events<T> {
    reader: EventReader,
    translator: T,
}

impl<T: EventTranslator> Events<T> {
    /// Reads events of at most [`MAX_EVENT_BYTES`] for `translator`.
    pub fn new(translator: T) -> Self {
        Events {
            reader: EventReader::new(MAX_EVENT_BYTES),
            translator,
        }
    }
}

impl<T: EventTranslator> StreamTranslator for Events<T> {
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), TranslateError> {
        let translator = &mut self.translator;
        self.reader
            .feed(input, &mut |name, data| translator.event(name, data, out))
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError> {
        let translator = &mut self.translator;
        self.reader
            .finish(&mut |name, data| translator.event(name, data, out))?;
        translator.end(out)
    }
}

/// Two stream translators back to back.
pub struct Chain(pub Box<dyn StreamTranslator>, pub Box<dyn StreamTranslator>);

impl StreamTranslator for Chain {
    fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), TranslateError> {
        let mut middle = Vec::with_capacity(input.len() * 2);
        self.0.feed(input, &mut middle)?;
        self.1.feed(&middle, out)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError> {
        let mut middle = Vec::new();
        self.0.finish(&mut middle)?;
        self.1.feed(&middle, out)?;
        self.1.finish(out)
    }
}

/// Appends one event: `event: <name>` (when given), `data: <json>`, a blank
/// line.
pub fn write_event(out: &mut Vec<u8>, name: Option<&str>, data: &serde_json::Value) {
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    // Writing a Value to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

/// OpenAI's stream terminator.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// Seconds since the epoch, for `created`.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upper-cases the data of every event.
    struct Upper;

    impl EventTranslator for Upper {
        fn event(
            &mut self,
            _name: &[u8],
            data: &[u8],
            out: &mut Vec<u8>,
        ) -> Result<(), TranslateError> {
            out.extend_from_slice(b"data: ");
            out.extend(data.iter().map(u8::to_ascii_uppercase));
            out.extend_from_slice(b"\n\n");
            Ok(())
        }

        fn end(&mut self, out: &mut Vec<u8>) -> Result<(), TranslateError> {
            out.extend_from_slice(DONE);
            Ok(())
        }
    }

    #[test]
    fn events_and_chains_translate_in_any_split() {
        let input = b"data: ab\n\ndata: c";
        for split in 0..input.len() {
            let mut chain = Chain(Box::new(Events::new(Upper)), Box::new(Events::new(Upper)));
            let mut out = Vec::new();
            chain.feed(&input[..split], &mut out).unwrap();
            chain.feed(&input[split..], &mut out).unwrap();
            chain.finish(&mut out).unwrap();
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "data: AB\n\ndata: C\n\ndata: [DONE]\n\ndata: [DONE]\n\n",
                "split at {split}"
            );
        }
    }

    #[test]
    fn writes_named_events() {
        let mut out = Vec::new();
        write_event(&mut out, Some("ping"), &serde_json::json!({"type": "ping"}));
        assert_eq!(out, b"event: ping\ndata: {\"type\":\"ping\"}\n\n");
    }
}
