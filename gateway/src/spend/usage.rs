//! How many tokens a request used: read from the provider's response or
//! stream when it reports them, estimated from text (4 characters a token,
//! LiteLLM's rule) when it does not, and estimated up front for budget
//! reservation.

use super::chunk_skim;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::sync::LazyLock;

/// Finds the last `"usage"` member name of a kept tail; built once, not per
/// response.
static USAGE_MEMBER: LazyLock<memchr::memmem::FinderRev<'static>> =
    LazyLock::new(|| memchr::memmem::FinderRev::new(b"\"usage\""));

/// Token counts of one request, the quantity spend is computed from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt (input) tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Completion (output) tokens; 0 for embeddings.
    pub completion_tokens: u64,
    /// Of the prompt tokens, those read from the provider's prompt cache
    /// (OpenAI's `prompt_tokens_details.cached_tokens`, Anthropic's
    /// `cache_read_input_tokens`).
    pub cached_tokens: u64,
    /// Of the prompt tokens, those written to the provider's prompt cache
    /// (Anthropic's `cache_creation_input_tokens`).
    pub cache_creation_tokens: u64,
    /// Search units of a rerank call (Cohere's
    /// `meta.billed_units.search_units`), billed per query.
    pub search_units: u64,
}

/// Whether a stream's usage came from the provider or from counting text,
/// so callers can log or flag estimated spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageSource {
    /// The provider sent a `usage` object.
    Reported,
    /// No `usage` was seen; counts are estimates.
    Estimated,
}

/// An OpenAI `usage` object (chat's names, or the Responses API's
/// `input_tokens`, `output_tokens`, `input_tokens_details`); other members
/// (`total_tokens`, other details) are skipped. `cache_creation_input_tokens` is how LiteLLM and
/// the gateway report Anthropic's cache writes in OpenAI's shape.
#[derive(Deserialize)]
struct UsageView {
    #[serde(alias = "input_tokens")]
    prompt_tokens: Option<u64>,
    #[serde(alias = "output_tokens")]
    completion_tokens: Option<u64>,
    #[serde(alias = "input_tokens_details")]
    prompt_tokens_details: Option<DetailsView>,
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct DetailsView {
    cached_tokens: Option<u64>,
}

impl UsageView {
    fn usage(&self) -> Option<Usage> {
        if self.prompt_tokens.is_none() && self.completion_tokens.is_none() {
            return None;
        }
        Some(Usage {
            prompt_tokens: self.prompt_tokens.unwrap_or(0),
            completion_tokens: self.completion_tokens.unwrap_or(0),
            cached_tokens: self
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0),
            cache_creation_tokens: self.cache_creation_input_tokens.unwrap_or(0),
            search_units: 0,
        })
    }
}

/// Only `usage` of a response body; serde skips everything else unbuilt.
#[derive(Deserialize)]
struct ResponseView {
    usage: Option<UsageView>,
}

/// The usage an OpenAI chat, completions or embeddings response reports,
/// so a non-streamed response is billed on the provider's own count. `None`
/// when the body is not JSON or carries no usage counts.
pub fn from_response_body(body: &[u8]) -> Option<Usage> {
    // Fast path: parse only the top-level `usage` member; anything unusual
    // (no such plain member, a value that does not parse) takes the full
    // parse, so the answer is the same.
    if let Some(at) = super::member::find(body, b"usage") {
        if let Some(usage) = super::usage_skim::usage_value(&body[at..]) {
            return usage;
        }
        let value = serde_json::Deserializer::from_slice(&body[at..])
            .into_iter::<Option<UsageView>>()
            .next();
        if let Some(Ok(view)) = value {
            return view?.usage();
        }
    }
    serde_json::from_slice::<ResponseView>(body)
        .ok()?
        .usage?
        .usage()
}

/// The usage of a JSON response body of which only the last bytes were
/// kept (a body too large to hold): the last top-level-looking `"usage"`
/// member in `tail`, where OpenAI-style responses put it. `None` when the
/// tail holds no parsable usage object.
pub fn from_response_tail(tail: &[u8]) -> Option<Usage> {
    let mut end = tail.len();
    while let Some(at) = USAGE_MEMBER.rfind(&tail[..end]) {
        end = at;
        // A quote escaped inside a string is text, not a member name.
        if at > 0 && tail[at - 1] == b'\\' {
            continue;
        }
        let rest = &tail[at + USAGE_MEMBER.needle().len()..];
        let rest = rest.trim_ascii_start().strip_prefix(b":")?;
        let parsed = serde_json::Deserializer::from_slice(rest)
            .into_iter::<UsageView>()
            .next();
        if let Some(Ok(view)) = parsed {
            return view.usage();
        }
    }
    None
}

/// Most bytes of one SSE event kept while it is incomplete; a larger event
/// is skipped so a misbehaving upstream cannot grow memory without bound.
const MAX_EVENT_BYTES: usize = 1 << 20;

/// Usage of an OpenAI SSE stream, fed the bytes as they pass through so the
/// gateway never buffers the stream. It keeps the last `usage` object seen
/// (sent in a final chunk when `stream_options.include_usage` is set) and,
/// as a fallback, counts the characters of the generated text.
#[derive(Debug, Default)]
pub struct StreamUsage {
    /// The current line up to the bytes fed so far.
    line: Vec<u8>,
    /// Part of the current line was dropped for size; the line is not blank.
    line_dropped: bool,
    /// `data:` values of the current event, joined by `\n`.
    data: Vec<u8>,
    /// The current event outgrew [`MAX_EVENT_BYTES`]; ignored to its end.
    skipping: bool,
    /// The last reported usage.
    reported: Option<Usage>,
    /// Characters of generated text seen.
    chars: u64,
}

/// One chunk of a chat or legacy completions stream, borrowed where the
/// strings have no escapes.
#[derive(Deserialize)]
struct ChunkView<'a> {
    usage: Option<UsageView>,
    /// The Responses API's `response.completed` (and `.incomplete`,
    /// `.failed`) events carry the usage in their `response`.
    response: Option<ResponseView>,
    #[serde(borrow)]
    choices: Option<Vec<ChoiceView<'a>>>,
}

#[derive(Deserialize)]
struct ChoiceView<'a> {
    #[serde(borrow)]
    delta: Option<DeltaView<'a>>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct DeltaView<'a> {
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    tool_calls: Option<Vec<ToolCallView<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallView<'a> {
    #[serde(borrow)]
    function: Option<FunctionView<'a>>,
}

#[derive(Deserialize)]
struct FunctionView<'a> {
    #[serde(borrow)]
    arguments: Option<Cow<'a, str>>,
}

impl StreamUsage {
    /// A counter for a new stream.
    pub fn new() -> StreamUsage {
        StreamUsage::default()
    }

    /// Takes the next bytes of the stream, split anywhere.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while let Some(eol) = memchr::memchr(b'\n', bytes) {
            let head = &bytes[..eol];
            bytes = &bytes[eol + 1..];
            if self.line_dropped {
                // The tail of an oversized line: not blank, and its event is
                // already being skipped.
                self.line_dropped = false;
                self.line.clear();
            } else if self.line.is_empty() {
                self.on_line(head);
            } else if self.fits(head.len()) {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                self.on_line(&line);
                line.clear();
                self.line = line;
            } else {
                self.line.clear();
                self.skip_event();
            }
        }
        if bytes.is_empty() || self.line_dropped {
            return;
        }
        if self.fits(bytes.len()) {
            self.line.extend_from_slice(bytes);
        } else {
            self.line.clear();
            self.line_dropped = true;
            self.skip_event();
        }
    }

    /// The stream's usage: the last reported `usage` if any, else
    /// `prompt_estimate` prompt tokens and a quarter of the generated
    /// characters (rounded up) as completion tokens. An event left
    /// unterminated at the end of the stream still counts.
    pub fn finish(mut self, prompt_estimate: impl FnOnce() -> u64) -> (Usage, UsageSource) {
        if !self.line.is_empty() && !self.line_dropped {
            let line = std::mem::take(&mut self.line);
            self.on_line(&line);
        }
        self.on_line(b"");
        match self.reported {
            Some(usage) => (usage, UsageSource::Reported),
            None => (
                Usage {
                    prompt_tokens: prompt_estimate(),
                    completion_tokens: tokens_of_chars(self.chars),
                    ..Usage::default()
                },
                UsageSource::Estimated,
            ),
        }
    }

    /// Whether `more` bytes fit in the current event's buffers. Lines of a
    /// skipped event are still buffered (its data is not) so that its end,
    /// a blank line possibly split as `\r` + `\n`, is recognised.
    fn fits(&self, more: usize) -> bool {
        self.line.len() + self.data.len() + more <= MAX_EVENT_BYTES
    }

    fn skip_event(&mut self) {
        self.skipping = true;
        self.data = Vec::new();
    }

    /// One complete line, without its `\n`.
    fn on_line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if !self.skipping && !self.data.is_empty() {
                let data = std::mem::take(&mut self.data);
                self.on_event(&data);
                self.data = data;
            }
            self.data.clear();
            self.skipping = false;
            return;
        }
        if self.skipping {
            return;
        }
        let Some(value) = line.strip_prefix(b"data:") else {
            return; // `event:`, `id:`, comments
        };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if self.data.len() + value.len() + 1 > MAX_EVENT_BYTES {
            self.skip_event();
            return;
        }
        if !self.data.is_empty() {
            self.data.push(b'\n');
        }
        self.data.extend_from_slice(value);
    }

    /// The data of one complete event: read in one pass when it is an
    /// ordinary chunk ([`chunk_skim`]), parsed otherwise.
    fn on_event(&mut self, data: &[u8]) {
        match chunk_skim::generated_chars(data) {
            Some(chars) => self.chars += chars,
            None => self.on_event_parsed(data),
        }
    }

    /// The data of one complete event, parsed whole.
    fn on_event_parsed(&mut self, data: &[u8]) {
        let Ok(chunk) = serde_json::from_slice::<ChunkView>(data) else {
            return; // `[DONE]` and anything else that is not a chunk
        };
        let usage = chunk
            .usage
            .as_ref()
            .or_else(|| chunk.response.as_ref().and_then(|r| r.usage.as_ref()));
        if let Some(usage) = usage.and_then(UsageView::usage) {
            self.reported = Some(usage);
        }
        for choice in chunk.choices.iter().flatten() {
            let mut count = |s: &Option<Cow<str>>| {
                self.chars += s.as_deref().map_or(0, |s| s.chars().count() as u64);
            };
            count(&choice.text);
            if let Some(delta) = &choice.delta {
                count(&delta.content);
                for call in delta.tool_calls.iter().flatten() {
                    if let Some(f) = &call.function {
                        count(&f.arguments);
                    }
                }
            }
        }
    }
}

/// Tokens for `chars` characters of text, rounded up (LiteLLM's estimate
/// of 4 characters a token).
pub fn tokens_of_chars(chars: u64) -> u64 {
    chars.div_ceil(4)
}

/// Text and token ids of a request's input, tallied without building it.
#[derive(Default)]
struct Tally {
    chars: u64,
    tokens: u64,
}

impl Tally {
    /// A JSON text: a string (its characters), number (one token id) or
    /// array of these; other values count nothing.
    fn text_or_tokens(&mut self, raw: &str, depth: u8) {
        match raw.as_bytes().first() {
            Some(b'"') => {
                if let Ok(s) = serde_json::from_str::<Cow<str>>(raw) {
                    self.chars += s.chars().count() as u64;
                }
            }
            Some(b'0'..=b'9') => self.tokens += 1,
            Some(b'[') if depth < 2 => {
                if let Ok(items) = serde_json::from_str::<Vec<&RawValue>>(raw) {
                    for item in items {
                        self.text_or_tokens(item.get(), depth + 1);
                    }
                }
            }
            _ => {}
        }
    }

    /// The estimate: a quarter of the characters, rounded up, plus the
    /// token ids; at least 1.
    fn estimate(&self) -> u64 {
        (tokens_of_chars(self.chars) + self.tokens).max(1)
    }
}

/// The input fields of a chat, completions or embeddings request.
#[derive(Deserialize)]
struct PromptView<'a> {
    messages: Option<Vec<MessageView>>,
    #[serde(borrow)]
    prompt: Option<&'a RawValue>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    /// Anthropic's top-level system prompt (a string or text blocks).
    system: Option<ContentChars>,
}

#[derive(Deserialize)]
struct MessageView {
    content: Option<ContentChars>,
}

/// The characters of a chat message's `content` (or Messages' `system`),
/// counted while it is parsed, with no second pass over its text: a
/// string, or the `text` parts of an array of parts; anything else counts
/// nothing.
struct ContentChars(u64);

impl<'de> Deserialize<'de> for ContentChars {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ContentVisitor)
    }
}

struct ContentVisitor;

impl<'de> Visitor<'de> for ContentVisitor {
    type Value = ContentChars;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("message content")
    }

    fn visit_str<E>(self, s: &str) -> Result<ContentChars, E> {
        Ok(ContentChars(s.chars().count() as u64))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut parts: A) -> Result<ContentChars, A::Error> {
        let mut chars = 0u64;
        while let Some(part) = parts.next_element::<PartChars>()? {
            chars = chars.saturating_add(part.0);
        }
        Ok(ContentChars(chars))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ContentChars, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(ContentChars(0))
    }

    fn visit_bool<E>(self, _: bool) -> Result<ContentChars, E> {
        Ok(ContentChars(0))
    }

    fn visit_i64<E>(self, _: i64) -> Result<ContentChars, E> {
        Ok(ContentChars(0))
    }

    fn visit_u64<E>(self, _: u64) -> Result<ContentChars, E> {
        Ok(ContentChars(0))
    }

    fn visit_f64<E>(self, _: f64) -> Result<ContentChars, E> {
        Ok(ContentChars(0))
    }

    fn visit_unit<E>(self) -> Result<ContentChars, E> {
        Ok(ContentChars(0))
    }
}

/// One part of a content array: the characters of its `text` when its
/// `type` is `"text"`; any other value counts nothing.
struct PartChars(u64);

impl<'de> Deserialize<'de> for PartChars {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PartVisitor)
    }
}

struct PartVisitor;

impl<'de> Visitor<'de> for PartVisitor {
    type Value = PartChars;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a content part")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PartChars, A::Error> {
        let (mut is_text, mut text) = (false, None);
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "type" => is_text = map.next_value::<MaybeStr>()?.0.as_deref() == Some("text"),
                "text" => {
                    text = map
                        .next_value::<MaybeStr>()?
                        .0
                        .map(|t| t.chars().count() as u64)
                }
                _ => map.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        Ok(PartChars(if is_text { text.unwrap_or(0) } else { 0 }))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PartChars, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(PartChars(0))
    }

    fn visit_str<E>(self, _: &str) -> Result<PartChars, E> {
        Ok(PartChars(0))
    }

    fn visit_bool<E>(self, _: bool) -> Result<PartChars, E> {
        Ok(PartChars(0))
    }

    fn visit_i64<E>(self, _: i64) -> Result<PartChars, E> {
        Ok(PartChars(0))
    }

    fn visit_u64<E>(self, _: u64) -> Result<PartChars, E> {
        Ok(PartChars(0))
    }

    fn visit_f64<E>(self, _: f64) -> Result<PartChars, E> {
        Ok(PartChars(0))
    }

    fn visit_unit<E>(self) -> Result<PartChars, E> {
        Ok(PartChars(0))
    }
}

/// A string value, borrowed where it has no escapes; `None` for any other
/// value.
struct MaybeStr<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for MaybeStr<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(MaybeStrVisitor)
    }
}

struct MaybeStrVisitor;

impl<'de> Visitor<'de> for MaybeStrVisitor {
    type Value = MaybeStr<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any value")
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<MaybeStr<'de>, E> {
        Ok(MaybeStr(Some(Cow::Borrowed(s))))
    }

    fn visit_str<E>(self, s: &str) -> Result<MaybeStr<'de>, E> {
        Ok(MaybeStr(Some(Cow::Owned(s.to_owned()))))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MaybeStr<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(MaybeStr(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeStr<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(MaybeStr(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<MaybeStr<'de>, E> {
        Ok(MaybeStr(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<MaybeStr<'de>, E> {
        Ok(MaybeStr(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<MaybeStr<'de>, E> {
        Ok(MaybeStr(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<MaybeStr<'de>, E> {
        Ok(MaybeStr(None))
    }

    fn visit_unit<E>(self) -> Result<MaybeStr<'de>, E> {
        Ok(MaybeStr(None))
    }
}

/// A request's prompt estimate, computed on first use: it costs a parse of
/// the whole body, and most requests (no TPM limit, no context-window
/// check, usage reported by the provider) never need it. It holds the body
/// (shared, not copied) until [`PromptEstimate::release`].
pub struct PromptEstimate {
    /// The body, until released.
    body: std::cell::Cell<bytes::Bytes>,
    /// The body's length, kept after it is released.
    len: u64,
    tokens: std::cell::Cell<Option<u64>>,
}

impl PromptEstimate {
    /// The estimate of `body`'s prompt, not computed yet.
    pub fn new(body: bytes::Bytes) -> Self {
        PromptEstimate {
            len: body.len() as u64,
            body: std::cell::Cell::new(body),
            tokens: std::cell::Cell::new(None),
        }
    }

    /// A bound the estimate never exceeds, without computing it: every
    /// character or token id it counts takes at least one byte of the body.
    pub fn upper_bound(&self) -> u64 {
        self.tokens.get().unwrap_or_else(|| self.len.max(1))
    }

    /// [`estimate_prompt_tokens`] of the body, computed once.
    pub fn get(&self) -> u64 {
        if let Some(t) = self.tokens.get() {
            return t;
        }
        let body = self.body.take();
        let t = estimate_prompt_tokens(&body);
        self.body.set(body);
        self.tokens.set(Some(t));
        t
    }

    /// Takes `tokens` as the estimate, when not computed yet: they were
    /// counted from the same body in another pass over it.
    pub fn know(&self, tokens: u64) {
        if self.tokens.get().is_none() {
            self.tokens.set(Some(tokens));
        }
    }

    /// Computes the estimate if it was not yet, then lets go of the body
    /// (its memory is freed once no one else holds it): a request whose
    /// answer streams for minutes keeps only the number.
    pub fn release(&self) {
        self.get();
        drop(self.body.take());
    }
}

impl std::fmt::Debug for PromptEstimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PromptEstimate({:?})", self.tokens.get())
    }
}

/// Prompt tokens of a request before it is sent, to reserve budget and as
/// the prompt count of a stream that reports no usage: a quarter of the
/// input text's characters, rounded up (LiteLLM's estimate), plus one per
/// token id of a pre-tokenized `prompt` or `input`; at least 1. Reads chat
/// and Messages `messages[].content` (string or `text` parts), Messages'
/// `system`, completions `prompt` and embeddings `input` (string or array);
/// a body that does not parse counts as a quarter of its bytes.
pub fn estimate_prompt_tokens(body: &[u8]) -> u64 {
    let Some(input) = super::prompt_skim::prompt_input(body) else {
        return parsed_estimate(body);
    };
    estimate_of_read_input(input.chars, input.prompt, input.input)
}

/// [`estimate_prompt_tokens`] of a body whose input a one-pass reader found
/// as the estimate's own reader does: `chars` characters of messages'
/// contents and the system prompt ([`crate::inbound::prompt_chars`]), and
/// the raw `prompt` and `input` (absent or `null`: `None`).
pub fn estimate_of_read_input(chars: u64, prompt: Option<&str>, input: Option<&str>) -> u64 {
    let mut tally = Tally { chars, tokens: 0 };
    for raw in [prompt, input].into_iter().flatten() {
        tally.text_or_tokens(raw, 0);
    }
    tally.estimate()
}

/// [`estimate_prompt_tokens`] by the full parse: for what the one-pass
/// reader leaves to it.
fn parsed_estimate(body: &[u8]) -> u64 {
    match serde_json::from_slice::<PromptView>(body) {
        Ok(view) => estimate_of(&view),
        Err(_) => tokens_of_chars(body.len() as u64).max(1),
    }
}

/// [`estimate_prompt_tokens`] of a body that parsed.
fn estimate_of(view: &PromptView<'_>) -> u64 {
    let mut tally = Tally::default();
    let contents = view
        .messages
        .iter()
        .flatten()
        .filter_map(|m| m.content.as_ref());
    for content in contents.chain(view.system.as_ref()) {
        tally.chars = tally.chars.saturating_add(content.0);
    }
    for raw in [view.prompt, view.input].into_iter().flatten() {
        tally.text_or_tokens(raw.get(), 0);
    }
    tally.estimate()
}

/// The member [`inject_include_usage`] decides on.
#[derive(Deserialize)]
struct StreamOptionsView<'a> {
    /// The member as sent, `null` included (a plain `Option` would read a
    /// null member as absent).
    #[serde(borrow, default, deserialize_with = "raw_member")]
    stream_options: Option<&'a serde_json::value::RawValue>,
}

/// [`StreamOptionsView`] and [`PromptView`] in one pass over the body.
#[derive(Deserialize)]
struct StreamedView<'a> {
    #[serde(borrow, default, deserialize_with = "raw_member")]
    stream_options: Option<&'a serde_json::value::RawValue>,
    messages: Option<Vec<MessageView>>,
    #[serde(borrow)]
    prompt: Option<&'a RawValue>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
    system: Option<ContentChars>,
}

fn raw_member<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<&'de serde_json::value::RawValue>, D::Error> {
    <&serde_json::value::RawValue>::deserialize(d).map(Some)
}

/// The member added to streamed requests.
const INCLUDE_USAGE: &[u8] = br#""stream_options":{"include_usage":true}"#;

/// A streamed chat or completions request body that asks the provider for
/// exact usage in the stream's last chunk, so billing never depends on the
/// client's choice: `"stream_options":{"include_usage":true}` is spliced in
/// before the closing brace, or, when the client sent `stream_options`
/// without `include_usage: true`, its value is replaced by the same object
/// with `include_usage: true` (its other options kept). Nothing else is
/// re-serialized. Call it only for `stream: true` requests: OpenAI rejects
/// `stream_options` on others. `None` (send the body unchanged, and relay
/// the usage chunk) when the client asked for usage itself or the body is
/// not a JSON object.
pub fn inject_include_usage(body: &[u8]) -> Option<Vec<u8>> {
    let view: StreamOptionsView = serde_json::from_slice(body).ok()?;
    with_include_usage(body, view.stream_options)
}

/// [`inject_include_usage`] and, from the same pass over the body, its
/// [`estimate_prompt_tokens`]: the estimate is `None` when the body's input
/// fields do not parse (the body is then read again for `stream_options`
/// alone, as [`inject_include_usage`] does).
pub fn inject_include_usage_estimating(body: &[u8]) -> (Option<Vec<u8>>, Option<u64>) {
    match serde_json::from_slice::<StreamedView>(body) {
        Ok(view) => {
            let estimate = estimate_of(&PromptView {
                messages: view.messages,
                prompt: view.prompt,
                input: view.input,
                system: view.system,
            });
            (
                with_include_usage(body, view.stream_options),
                Some(estimate),
            )
        }
        Err(_) => (inject_include_usage(body), None),
    }
}

/// [`inject_include_usage`] once `stream_options` was read from `body`.
fn with_include_usage(
    body: &[u8],
    stream_options: Option<&serde_json::value::RawValue>,
) -> Option<Vec<u8>> {
    let is_ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    let open = body.iter().position(|b| !is_ws(b))?;
    let close = body.iter().rposition(|b| !is_ws(b))?;
    // serde also reads structs from arrays; only an object is wanted.
    if open >= close || body[open] != b'{' || body[close] != b'}' {
        return None;
    }
    if let Some(raw) = stream_options {
        let mut options = match serde_json::from_str(raw.get()).ok()? {
            serde_json::Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        if options.get("include_usage") == Some(&serde_json::Value::Bool(true)) {
            return None;
        }
        options.insert("include_usage".into(), serde_json::Value::Bool(true));
        let value = serde_json::to_vec(&options).ok()?;
        let start = (raw.get().as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
        let end = start.checked_add(raw.get().len())?;
        let mut out = Vec::with_capacity(body.len() + value.len());
        out.extend_from_slice(body.get(..start)?);
        out.extend_from_slice(&value);
        out.extend_from_slice(body.get(end..)?);
        return Some(out);
    }
    let empty = body[open + 1..close].iter().all(is_ws);
    let mut out = Vec::with_capacity(body.len() + INCLUDE_USAGE.len() + 1);
    out.extend_from_slice(&body[..close]);
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(INCLUDE_USAGE);
    out.extend_from_slice(&body[close..]);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn usage(prompt_tokens: u64, completion_tokens: u64) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            ..Usage::default()
        }
    }

    #[test]
    fn response_usage_of_chat_completions_and_embeddings() {
        let chat = br#"{"id":"x","choices":[{"message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0}}}"#;
        assert_eq!(from_response_body(chat), Some(usage(12, 3)));
        let cached = br#"{"usage":{"prompt_tokens":120,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":100,"cache_creation_tokens":15},"cache_creation_input_tokens":15}}"#;
        assert_eq!(
            from_response_body(cached),
            Some(Usage {
                cached_tokens: 100,
                cache_creation_tokens: 15,
                ..usage(120, 3)
            })
        );
        let embeddings = br#"{"object":"list","data":[{"embedding":[0.1,0.2],"index":0}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}"#;
        assert_eq!(from_response_body(embeddings), Some(usage(8, 0)));
        assert_eq!(from_response_body(br#"{"choices":[]}"#), None);
        assert_eq!(from_response_body(br#"{"usage":null}"#), None);
        assert_eq!(from_response_body(br#"{"usage":{"total_tokens":3}}"#), None);
        assert_eq!(from_response_body(b"not json"), None);
        assert_eq!(from_response_body(b""), None);
    }

    #[test]
    fn response_usage_of_a_large_body() {
        let text = "x\\\"y".repeat(300_000);
        let body = format!(
            r#"{{"choices":[{{"message":{{"content":"{text}"}}}}],"usage":{{"prompt_tokens":1,"completion_tokens":2}}}}"#
        );
        assert!(body.len() > 1_000_000);
        assert_eq!(from_response_body(body.as_bytes()), Some(usage(1, 2)));
    }

    const STREAM: &str = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hé\"}}],\"usage\":null}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"llo\\n\"}}],\"usage\":null}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}}\n\n",
        "data: [DONE]\n\n",
    );

    fn run(chunks: &[&[u8]], prompt_estimate: u64) -> (Usage, UsageSource) {
        let mut s = StreamUsage::new();
        for c in chunks {
            s.feed(c);
        }
        s.finish(|| prompt_estimate)
    }

    #[test]
    fn stream_reports_the_last_usage() {
        let got = run(&[STREAM.as_bytes()], 100);
        assert_eq!(got, (usage(9, 4), UsageSource::Reported));
    }

    #[test]
    fn stream_every_split_gives_the_same_result() {
        let bytes = STREAM.as_bytes();
        let whole = run(&[bytes], 100);
        for i in 0..=bytes.len() {
            assert_eq!(run(&[&bytes[..i], &bytes[i..]], 100), whole, "split at {i}");
            for j in i..=bytes.len() {
                let three = run(&[&bytes[..i], &bytes[i..j], &bytes[j..]], 100);
                assert_eq!(three, whole, "split at {i} and {j}");
            }
        }
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(run(&bytewise, 100), whole);
    }

    #[test]
    fn stream_without_usage_is_estimated_from_text() {
        // "Hé" + "llo\n" = 6 characters (é is two bytes) → 2 tokens.
        let no_usage = STREAM.replace(
            "{\"prompt_tokens\":9,\"completion_tokens\":4,\"total_tokens\":13}",
            "null",
        );
        let bytes = no_usage.as_bytes();
        let whole = run(&[bytes], 7);
        assert_eq!(whole, (usage(7, 2), UsageSource::Estimated));
        for i in 0..=bytes.len() {
            assert_eq!(run(&[&bytes[..i], &bytes[i..]], 7), whole, "split at {i}");
        }
    }

    #[test]
    fn stream_counts_legacy_text_and_tool_arguments() {
        let stream = concat!(
            "data: {\"choices\":[{\"text\":\"abcde\",\"index\":0}]}\r\n\r\n",
            ": keep-alive\n\n",
            "event: message\ndata: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"a\\\":1}\"}}]}}]}\n\n",
            "data: not json\n\n",
            "data: [DONE]\n\n",
        );
        // 5 + 7 characters → 3 tokens.
        assert_eq!(
            run(&[stream.as_bytes()], 1),
            (usage(1, 3), UsageSource::Estimated)
        );
    }

    #[test]
    fn stream_data_split_over_lines_and_unterminated_end() {
        let stream = "data: {\"usage\":\ndata: {\"prompt_tokens\":2,\"completion_tokens\":5}}\n\ndata: {\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":6}}";
        assert_eq!(
            run(&[stream.as_bytes()], 1),
            (usage(3, 6), UsageSource::Reported)
        );
        assert_eq!(run(&[], 4), (usage(4, 0), UsageSource::Estimated));
    }

    #[test]
    fn stream_skips_an_oversized_event_and_recovers() {
        let big = format!(
            "data: {{\"choices\":[{{\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
            "a".repeat(MAX_EVENT_BYTES)
        );
        let after = "data: {\"choices\":[{\"delta\":{\"content\":\"abcd\"}}]}\n\n";
        for piece in [1 << 10, 1 << 16, big.len()] {
            let mut s = StreamUsage::new();
            for c in big.as_bytes().chunks(piece) {
                s.feed(c);
                assert!(s.line.len() + s.data.len() <= MAX_EVENT_BYTES);
            }
            s.feed(after.as_bytes());
            assert_eq!(
                s.finish(|| 1),
                (usage(1, 1), UsageSource::Estimated),
                "{piece}"
            );
        }
        // An oversized line that ends exactly at a chunk boundary, followed
        // by the event's blank line in the next chunk.
        let line = format!("data: \"{}\"\n", "a".repeat(MAX_EVENT_BYTES));
        let mut s = StreamUsage::new();
        s.feed(&line.as_bytes()[..line.len() - 1]);
        s.feed(b"\n");
        s.feed(b"\n");
        s.feed(after.as_bytes());
        assert_eq!(s.finish(|| 1), (usage(1, 1), UsageSource::Estimated));
        // The same with CRLF and the blank line split between `\r` and `\n`.
        let mut s = StreamUsage::new();
        s.feed(line.trim_end().as_bytes());
        s.feed(b"\r\n");
        s.feed(b"\r");
        s.feed(b"\n");
        s.feed(after.as_bytes());
        assert_eq!(s.finish(|| 1), (usage(1, 1), UsageSource::Estimated));
    }

    #[test]
    fn responses_api_usage_is_read_from_bodies_and_completed_events() {
        let body = br#"{"object":"response","usage":{"input_tokens":7,"input_tokens_details":{"cached_tokens":2},"output_tokens":3,"total_tokens":10}}"#;
        let u = from_response_body(body).unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
            (7, 3, 2)
        );
        let mut s = StreamUsage::new();
        s.feed(b"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n");
        s.feed(b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":4}}}\n\n");
        let (u, source) = s.finish(|| 99);
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, source),
            (5, 4, UsageSource::Reported)
        );
    }

    #[test]
    fn prompt_estimate_of_chat_messages() {
        let body = json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "system", "content": "abcd"},
                {"role": "user", "content": [
                    {"type": "text", "text": "éfgh"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "text", "text": "i"}
                ]},
                {"role": "assistant", "content": null, "tool_calls": []}
            ]
        });
        // 4 + 4 + 1 = 9 characters → 3 tokens.
        assert_eq!(estimate_prompt_tokens(body.to_string().as_bytes()), 3);
        let messages = json!({
            "system": [{"type": "text", "text": "abcd"}],
            "messages": [{"role": "user", "content": "efgh"}],
        });
        assert_eq!(estimate_prompt_tokens(messages.to_string().as_bytes()), 2);
        let escaped = br#"{"messages":[{"role":"user","content":"\"\u00e9\"\n"}]}"#;
        assert_eq!(estimate_prompt_tokens(escaped), 1);
        // Only well-formed text parts count, whatever order their members
        // come in; odd parts count nothing and spoil nothing.
        let odd = json!({"messages": [{"role": "user", "content": [
            "loose",
            {"type": "text", "text": 5},
            {"text": "abcdefgh", "type": "text"},
            {"type": {"x": 1}, "text": "zz"},
            [1, 2],
            {"type": "text", "text": "\"é\""}
        ]}]});
        // 8 + 3 = 11 characters → 3 tokens.
        assert_eq!(estimate_prompt_tokens(odd.to_string().as_bytes()), 3);
    }

    #[test]
    fn prompt_estimate_of_completions_and_embeddings() {
        let one = |v: Value| estimate_prompt_tokens(v.to_string().as_bytes());
        assert_eq!(one(json!({"prompt": "abcdefghi"})), 3);
        assert_eq!(one(json!({"prompt": ["abcd", "efgh"]})), 2);
        assert_eq!(one(json!({"prompt": [1, 2, 3]})), 3);
        assert_eq!(one(json!({"prompt": [[1, 2], [3]]})), 3);
        assert_eq!(one(json!({"input": "abcde"})), 2);
        assert_eq!(one(json!({"input": ["abcd", "abcd", "a"]})), 3);
        assert_eq!(one(json!({"input": ""})), 1);
        assert_eq!(one(json!({"model": "x"})), 1);
    }

    #[test]
    fn prompt_estimate_of_an_unparsable_body() {
        assert_eq!(estimate_prompt_tokens(b"{\"messages\": [oops"), 5);
        assert_eq!(estimate_prompt_tokens(b""), 1);
        for body in [
            &b""[..],
            b"{\"messages\": [oops",
            b"{\"prompt\":[1,2,3,4,5]}",
            b"{\"messages\":[{\"role\":\"user\",\"content\":\"\\u00e9\\n\"}]}",
        ] {
            let estimate = PromptEstimate::new(bytes::Bytes::from_static(body));
            assert!(estimate.upper_bound() >= estimate.get(), "{body:?}");
        }
    }

    #[test]
    fn a_released_prompt_estimate_keeps_its_number_and_lets_go_of_the_body() {
        let body = bytes::Bytes::from(
            br#"{"messages":[{"role":"user","content":"twelve chars"}]}"#.to_vec(),
        );
        let estimate = PromptEstimate::new(body.clone());
        // The body is held once by the caller, once by the estimate.
        assert!(!body.is_unique());
        estimate.release();
        assert!(body.is_unique());
        assert_eq!(estimate.get(), 3);
        assert_eq!(estimate.upper_bound(), 3);
    }

    #[test]
    fn one_pass_injection_and_estimate_match_the_two_passes() {
        for body in [
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hello there, twenty"}]}"#,
            r#"{"stream":true,"stream_options":{"x":1},"messages":[{"content":[{"type":"text","text":"abc"}]}]}"#,
            r#"{"stream":true,"stream_options":{"include_usage":true},"prompt":[1,2,3]}"#,
            r#"{"stream":true,"stream_options":null,"input":"some text","system":"sys"}"#,
            r#"{"stream":true}"#,
        ] {
            let (injected, estimate) = inject_include_usage_estimating(body.as_bytes());
            assert_eq!(injected, inject_include_usage(body.as_bytes()), "{body}");
            assert_eq!(
                estimate,
                Some(estimate_prompt_tokens(body.as_bytes())),
                "{body}"
            );
        }
        // Input fields that do not parse: injected all the same, no estimate.
        let odd = r#"{"stream":true,"messages":"not a list"}"#;
        let (injected, estimate) = inject_include_usage_estimating(odd.as_bytes());
        assert_eq!(injected, inject_include_usage(odd.as_bytes()));
        assert!(injected.is_some());
        assert_eq!(estimate, None);
    }

    fn inject(body: &str) -> Option<String> {
        inject_include_usage(body.as_bytes()).map(|b| String::from_utf8(b).unwrap())
    }

    fn assert_injected(body: &str) {
        let out = inject(body).unwrap_or_else(|| panic!("not injected: {body:?}"));
        let mut before: Value = serde_json::from_str(body).unwrap();
        before["stream_options"] = json!({"include_usage": true});
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap(),
            before,
            "{out}"
        );
        assert!(out.starts_with(&body[..body.rfind('}').unwrap()]), "{out}");
    }

    #[test]
    fn injects_include_usage_before_the_final_brace() {
        assert_eq!(
            inject(r#"{"stream":true}"#).unwrap(),
            r#"{"stream":true,"stream_options":{"include_usage":true}}"#
        );
        assert_injected(
            r#"{"model":"m","messages":[{"role":"user","content":"}"}],"stream":true}"#,
        );
        assert_injected("{\n  \"model\": \"m\",\n  \"stream\": true\n}\n");
        assert_injected("  {\"stream\": true, \"x\": {\"y\": {}}}\r\n\t ");
    }

    #[test]
    fn injects_into_an_empty_object_without_a_comma() {
        assert_eq!(
            inject("{}").unwrap(),
            r#"{"stream_options":{"include_usage":true}}"#
        );
        assert_eq!(
            inject("{ \n }\n").unwrap(),
            "{ \n \"stream_options\":{\"include_usage\":true}}\n"
        );
    }

    #[test]
    fn usage_is_found_in_the_tail_of_a_body_too_large_to_keep() {
        let tail = br#"ntent":"the text said \"usage\": {\"prompt_tokens\": 1}"}}],"usage":{"prompt_tokens":1200,"completion_tokens":34,"total_tokens":1234}}"#;
        assert_eq!(from_response_tail(tail), Some(usage(1200, 34)));
        assert_eq!(from_response_tail(b"xx\"usage\": nope"), None);
        assert_eq!(from_response_tail(b"no usage here"), None);
    }

    #[test]
    fn a_client_that_declines_usage_is_still_billed_from_the_provider_s_count() {
        // include_usage: false (or null options) must not switch billing off:
        // the gateway asks for usage anyway and hides the chunk.
        assert_eq!(
            inject(r#"{"stream":true,"stream_options":{"include_usage":false}}"#).unwrap(),
            r#"{"stream":true,"stream_options":{"include_usage":true}}"#
        );
        assert_eq!(
            inject(r#"{"stream_options" : null ,"stream":true}"#).unwrap(),
            r#"{"stream_options" : {"include_usage":true} ,"stream":true}"#
        );
        let kept = inject(r#"{"stream":true,"stream_options":{"x":1}}"#).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&kept).unwrap(),
            json!({"stream": true, "stream_options": {"x": 1, "include_usage": true}})
        );
    }

    #[test]
    fn leaves_other_bodies_alone() {
        assert_eq!(
            inject(r#"{"stream":true,"stream_options":{"include_usage":true}}"#),
            None
        );
        assert_eq!(inject(r#"[true]"#), None);
        assert_eq!(inject(r#"{"stream":true"#), None);
        assert_eq!(inject(""), None);
        assert_eq!(inject("\"{}\""), None);
        assert_eq!(inject(r#"{"a":1}{"b":2}"#), None);
    }

    mod skim_matches_the_full_parse {
        use super::super::StreamUsage;
        use proptest::prelude::*;

        /// JSON-like text, valid or slightly not: the pieces the one-pass
        /// reader must judge exactly as serde_json does.
        fn value(depth: u32) -> BoxedStrategy<String> {
            let scalar = prop_oneof![
                3 => string(),
                3 => prop::sample::select(vec!["null", "true", "false", "0", "-1", "1.5", "1e5", "2E-3", "-0.0e+1"])
                    .prop_map(str::to_string),
                1 => prop::sample::select(vec!["nul", "01", "1.", "-", ".5"]).prop_map(str::to_string),
            ];
            if depth == 0 {
                return scalar.boxed();
            }
            prop_oneof![
                3 => scalar,
                1 => proptest::collection::vec(value(depth - 1), 0..3)
                    .prop_map(|items| format!("[{}]", items.join(","))),
                2 => proptest::collection::vec((key(), value(depth - 1)), 0..4).prop_map(|members| {
                    let members: Vec<String> =
                        members.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                    format!("{{{}}}", members.join(" , "))
                }),
            ]
            .boxed()
        }

        /// A JSON string: mostly what real chunks hold, now and then what
        /// the full parse refuses or decodes specially.
        fn string() -> impl Strategy<Value = String> {
            let piece = prop_oneof![
                30 => prop::sample::select(vec!["a", "é", "😀", " ", "\\n", "\\\"", "\\\\", "\\/"]),
                1 => prop::sample::select(vec!["\\u00e9", "\\ud83d", "\\x", "\u{1}"]),
            ];
            proptest::collection::vec(piece, 0..6)
                .prop_map(|parts| format!("\"{}\"", parts.concat()))
        }

        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                30 => prop::sample::select(vec![
                    "\"choices\"", "\"delta\"", "\"content\"", "\"text\"", "\"tool_calls\"",
                    "\"function\"", "\"arguments\"", "\"id\"", "\"prompt_tokens\"", "\"a\\nb\"",
                ]),
                1 => prop::sample::select(vec!["\"usage\"", "\"response\"", "\"cho\\u0069ces\""]),
            ]
            .prop_map(str::to_string)
        }

        /// A chunk: an object of members drawn from the keys above (some
        /// repeated), with `choices` shaped like the real thing most times.
        fn chunk() -> impl Strategy<Value = String> {
            let text = || prop_oneof![8 => string().boxed(), 1 => Just("null".to_string()).boxed(), 1 => value(1)];
            let member = prop_oneof![
                4 => text().prop_map(|t| format!("\"delta\":{{\"content\":{t}}}")),
                1 => text().prop_map(|t| format!(
                    "\"delta\":{{\"tool_calls\":[{{\"function\":{{\"arguments\":{t}}}}}]}}"
                )),
                1 => text().prop_map(|t| format!("\"text\":{t}")),
                2 => Just("\"index\":0".to_string()),
                1 => Just("\"finish_reason\":null".to_string()),
                1 => (key(), value(2)).prop_map(|(k, v)| format!("{k}:{v}")),
            ];
            let choice = proptest::collection::vec(member, 0..4)
                .prop_map(|members| format!("{{{}}}", members.join(",")));
            let choices = proptest::collection::vec(choice, 0..3)
                .prop_map(|c| format!("\"choices\":[{}]", c.join(",")));
            let other = (key(), value(3)).prop_map(|(k, v)| format!("{k}:{v}"));
            (
                proptest::collection::vec(other, 0..3),
                proptest::collection::vec(choices, 0..=2),
                prop::sample::select(vec!["", " ", "\n", " x"]),
            )
                .prop_map(|(mut members, choices, tail)| {
                    // Once mostly; sometimes missing or repeated.
                    for c in choices
                        .into_iter()
                        .take(if members.is_empty() { 2 } else { 1 })
                    {
                        members.insert(members.len() / 2, c);
                    }
                    format!(" {{{}}}{tail}", members.join(","))
                })
        }

        /// A `content` (or `system`) value: mostly a string or an array of
        /// parts, now and then anything.
        fn content() -> BoxedStrategy<String> {
            let part_member = prop_oneof![
                3 => prop_oneof![
                    4 => Just("\"text\"".to_string()),
                    1 => Just("\"image_url\"".to_string()),
                    1 => value(1),
                ]
                .prop_map(|t| format!("\"type\":{t}")),
                3 => prop_oneof![4 => string().boxed(), 1 => value(1)].prop_map(|t| format!("\"text\":{t}")),
                1 => (key(), value(1)).prop_map(|(k, v)| format!("{k}:{v}")),
            ];
            let part = prop_oneof![
                6 => proptest::collection::vec(part_member, 0..4)
                    .prop_map(|members| format!("{{{}}}", members.join(","))),
                1 => value(1),
                1 => Just("1e400".to_string()),
            ];
            prop_oneof![
                6 => string().boxed(),
                3 => proptest::collection::vec(part, 0..4)
                    .prop_map(|parts| format!("[{}]", parts.join(",")))
                    .boxed(),
                1 => Just("null".to_string()).boxed(),
                1 => value(2),
                1 => Just("-1e400".to_string()).boxed(),
            ]
            .boxed()
        }

        /// A request body: `messages`, `system`, `prompt` and `input` among
        /// other members (each sometimes repeated or missing), messages
        /// mostly objects with a `content`.
        fn request() -> impl Strategy<Value = String> {
            let message_member = prop_oneof![
                4 => content().prop_map(|c| format!("\"content\":{c}")),
                2 => string().prop_map(|r| format!("\"role\":{r}")),
                1 => (key(), value(2)).prop_map(|(k, v)| format!("{k}:{v}")),
            ];
            let message = prop_oneof![
                8 => proptest::collection::vec(message_member, 0..3)
                    .prop_map(|members| format!("{{{}}}", members.join(","))),
                1 => value(1),
            ];
            let tokens = prop_oneof![
                3 => string().boxed(),
                2 => proptest::collection::vec(prop_oneof![string().boxed(), Just("12".to_string()).boxed(), value(1)], 0..4)
                    .prop_map(|items| format!("[{}]", items.join(",")))
                    .boxed(),
                1 => value(2),
            ];
            let member = prop_oneof![
                6 => proptest::collection::vec(message, 0..4)
                    .prop_map(|m| format!("\"messages\":[{}]", m.join(","))),
                1 => Just("\"messages\":null".to_string()),
                2 => content().prop_map(|c| format!("\"system\":{c}")),
                2 => tokens.clone().prop_map(|t| format!("\"prompt\":{t}")),
                2 => tokens.prop_map(|t| format!("\"input\":{t}")),
                2 => Just("\"model\":\"gpt-4o\"".to_string()),
                2 => (key(), value(2)).prop_map(|(k, v)| format!("{k}:{v}")),
            ];
            (
                proptest::collection::vec(member, 0..5),
                prop::sample::select(vec!["", " ", "\n", " x"]),
            )
                .prop_map(|(members, tail)| format!(" {{{}}}{tail}", members.join(",")))
        }

        /// A chat request as clients send it: [`request`]'s members, with
        /// a `model` and `messages` first where it has none, now and then
        /// `tools` and members the gateway cuts from the body (so the
        /// body kept is another).
        fn chat_request() -> impl Strategy<Value = String> {
            let extra = prop_oneof![
                4 => Just(None),
                1 => value(3).prop_map(|t| Some(format!("\"tools\":[{t}]"))),
                1 => Just(Some("\"fallbacks\":[\"g\"],\"caching\":true".to_string())),
            ];
            (request(), extra).prop_map(|(body, extra)| {
                let Some((head, rest)) = body.split_once('{') else {
                    return body;
                };
                let mut added: Vec<String> = extra.into_iter().collect();
                if !rest.contains("\"model\":") {
                    added.insert(0, "\"model\":\"m\"".into());
                }
                if !rest.contains("\"messages\":") {
                    added.push(r#""messages":[{"role":"user","content":"hi"}]"#.into());
                }
                if added.is_empty() {
                    return body;
                }
                let comma = if rest.trim_start().starts_with('}') {
                    ""
                } else {
                    ","
                };
                format!("{head}{{{}{comma}{rest}", added.join(","))
            })
        }

        /// The prompt estimate the routing read counted for `body` (as
        /// received on `/chat/completions`), when it did; and the body
        /// the request keeps.
        fn counted_when_routed(body: &str) -> Option<(Option<u64>, bytes::Bytes)> {
            let req = crate::inbound::LlmRequest::parse(
                crate::inbound::Endpoint::ChatCompletions,
                bytes::Bytes::copy_from_slice(body.as_bytes()),
            )
            .ok()?;
            let tokens = req
                .prompt_chars
                .map(|chars| super::super::estimate_of_read_input(chars, None, None));
            Some((tokens, req.body))
        }

        /// The chat requests above reach requests whose estimate the
        /// routing read counted and requests whose estimate it left to the
        /// body's own pass.
        #[test]
        fn the_chat_requests_reach_both_outcomes() {
            use proptest::strategy::ValueTree;
            let mut runner = proptest::test_runner::TestRunner::deterministic();
            let (mut counted, mut left) = (0, 0);
            for _ in 0..2000 {
                let body = chat_request().new_tree(&mut runner).unwrap().current();
                match counted_when_routed(&body) {
                    Some((Some(_), _)) => counted += 1,
                    Some((None, _)) => left += 1,
                    None => {}
                }
            }
            assert!(
                counted >= 200 && left >= 50,
                "counted {counted}, left {left}"
            );
        }

        /// A token count, mostly plain, now and then what the full parse
        /// refuses or reads otherwise.
        fn count() -> impl Strategy<Value = String> {
            prop_oneof![
                6 => (0u64..100_000).prop_map(|n| n.to_string()),
                1 => prop::sample::select(vec![
                    "null", "0", "18446744073709551615", "18446744073709551616", "-1", "-0",
                    "1.5", "1e2", "\"3\"", "01", "true", "{}",
                ])
                .prop_map(str::to_string),
            ]
        }

        /// A `usage` value: an object of counts (some repeated, aliased or
        /// missing), details and other members; now and then `null` or
        /// anything.
        fn usage_value() -> impl Strategy<Value = String> {
            let details = prop_oneof![
                4 => proptest::collection::vec(
                    prop_oneof![
                        3 => count().prop_map(|c| format!("\"cached_tokens\":{c}")),
                        1 => (key(), value(1)).prop_map(|(k, v)| format!("{k}:{v}")),
                    ],
                    0..3,
                )
                .prop_map(|m| format!("{{{}}}", m.join(","))),
                1 => value(1),
            ];
            let member = prop_oneof![
                6 => (
                    prop::sample::select(vec![
                        "prompt_tokens", "input_tokens", "completion_tokens", "output_tokens",
                        "cache_creation_input_tokens", "total_tokens",
                    ]),
                    count(),
                )
                    .prop_map(|(k, c)| format!("\"{k}\":{c}")),
                2 => (
                    prop::sample::select(vec!["prompt_tokens_details", "input_tokens_details"]),
                    details,
                )
                    .prop_map(|(k, d)| format!("\"{k}\":{d}")),
                1 => (key(), value(2)).prop_map(|(k, v)| format!("{k}:{v}")),
            ];
            prop_oneof![
                8 => proptest::collection::vec(member, 0..5)
                    .prop_map(|m| format!("{{{}}}", m.join(","))),
                1 => Just("null".to_string()),
                1 => value(2),
            ]
        }

        /// Draws 2,000 texts from `texts` and asserts that the one-pass
        /// reader `read` answers for 200 to 1,800 of them (`Some`) and
        /// finds something (`Some(true)`) in at least 50: the comparisons
        /// below then test the reader, not only its fallback.
        fn reaches_both_outcomes(
            texts: impl Strategy<Value = String>,
            read: impl Fn(&[u8]) -> Option<bool>,
        ) {
            use proptest::strategy::ValueTree;
            let mut runner = proptest::test_runner::TestRunner::deterministic();
            let (mut answered, mut found) = (0, 0);
            for _ in 0..2000 {
                let text = texts.new_tree(&mut runner).unwrap().current();
                if let Some(something) = read(text.as_bytes()) {
                    answered += 1;
                    found += usize::from(something);
                }
            }
            assert!((200..1800).contains(&answered), "read {answered} of 2000");
            assert!(found >= 50, "found something in {found} of {answered}");
        }

        /// The usage values above reach both outcomes of the usage reader.
        #[test]
        fn the_usage_values_reach_both_outcomes() {
            reaches_both_outcomes(usage_value(), |text| {
                crate::spend::usage_skim::usage_value(text).map(|usage| usage.is_some())
            });
        }

        /// The bodies above reach both outcomes of the prompt reader.
        #[test]
        fn the_requests_reach_both_outcomes() {
            reaches_both_outcomes(request(), |body| {
                crate::spend::prompt_skim::prompt_input(body).map(|input| input.chars > 0)
            });
        }

        /// The chunks above reach both outcomes of the chunk reader.
        #[test]
        fn the_chunks_reach_both_outcomes() {
            reaches_both_outcomes(chunk(), |data| {
                super::super::chunk_skim::generated_chars(data).map(|chars| chars > 0)
            });
        }

        /// Whenever the usage reader answers for `text`, serde_json reads
        /// the value there and finds the same usage.
        fn usage_read_as_serde_reads(text: &[u8]) -> Result<(), TestCaseError> {
            let Some(skimmed) = crate::spend::usage_skim::usage_value(text) else {
                return Ok(());
            };
            let shown = String::from_utf8_lossy(text);
            let parsed = serde_json::Deserializer::from_slice(text)
                .into_iter::<Option<super::super::UsageView>>()
                .next();
            let Some(Ok(view)) = parsed else {
                return Err(TestCaseError::fail(format!(
                    "the full parse refuses {shown}"
                )));
            };
            prop_assert_eq!(skimmed, view.and_then(|v| v.usage()), "{}", shown);
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(20_000))]
            #[test]
            fn on_any_chunk(data in chunk()) {
                let mut skimmed = StreamUsage::new();
                skimmed.on_event(data.as_bytes());
                let mut parsed = StreamUsage::new();
                parsed.on_event_parsed(data.as_bytes());
                prop_assert_eq!(skimmed.reported, parsed.reported, "{}", data);
                prop_assert_eq!(skimmed.chars, parsed.chars, "{}", data);
            }

            #[test]
            fn reads_any_usage_value(text in usage_value(), tail in prop::sample::select(vec!["", "}", ",\"x\":1}", " x"])) {
                usage_read_as_serde_reads(format!("{text}{tail}").as_bytes())?;
            }

            #[test]
            fn reads_any_usage_bytes(text in proptest::collection::vec(any::<u8>(), 0..48)) {
                usage_read_as_serde_reads(&text)?;
            }

            #[test]
            fn estimates_any_request(body in request()) {
                prop_assert_eq!(
                    super::super::estimate_prompt_tokens(body.as_bytes()),
                    super::super::parsed_estimate(body.as_bytes()),
                    "{}",
                    body
                );
            }

            /// What the routing read counted is the estimate of the body
            /// kept, as its own pass and the full parse find it.
            #[test]
            fn the_routing_read_estimates_any_chat_request(body in chat_request()) {
                if let Some((Some(tokens), kept)) = counted_when_routed(&body) {
                    prop_assert_eq!(tokens, super::super::estimate_prompt_tokens(&kept), "{}", body);
                    prop_assert_eq!(tokens, super::super::parsed_estimate(&kept), "{}", body);
                }
            }

            #[test]
            fn estimates_any_bytes(body in proptest::collection::vec(any::<u8>(), 0..64)) {
                prop_assert_eq!(
                    super::super::estimate_prompt_tokens(&body),
                    super::super::parsed_estimate(&body)
                );
            }

            #[test]
            fn on_any_bytes(data in proptest::collection::vec(any::<u8>(), 0..64)) {
                let mut skimmed = StreamUsage::new();
                skimmed.on_event(&data);
                let mut parsed = StreamUsage::new();
                parsed.on_event_parsed(&data);
                prop_assert_eq!(skimmed.reported, parsed.reported);
                prop_assert_eq!(skimmed.chars, parsed.chars);
            }
        }
    }
}
