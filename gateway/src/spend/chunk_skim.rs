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

/// Nesting deeper than this is left to the full parse (serde_json's own
/// limit is 128).
const MAX_DEPTH: usize = 64;

/// Characters of generated text in one event's `data` (the `text` of each
/// choice, its `delta.content` and each `delta.tool_calls[].function.arguments`),
/// or `None` when the chunk needs the full parse: it reports usage, is not
/// a chunk object, or holds something this reader does not decide.
pub(super) fn generated_chars(data: &[u8]) -> Option<u64> {
    let mut r = Reader { buf: data, at: 0 };
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
    r.whitespace();
    (r.at == r.buf.len()).then_some(chars)
}

/// One element of `choices`: its `text` and its `delta`.
fn choice(r: &mut Reader<'_>, chars: &mut u64) -> Option<()> {
    let mut seen = Seen::default();
    r.object(1, |r, key| match key {
        b"text" => {
            seen.first(0)?;
            r.text_or_null(chars)
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
            r.text_or_null(chars)
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
                    r.text_or_null(chars)
                }
                _ => r.skip_value(4),
            })
        }
        _ => r.skip_value(4),
    })
}

/// The members of one object already read, by bit: the full parse refuses
/// a duplicate of a member it reads.
#[derive(Default)]
struct Seen(u8);

impl Seen {
    /// `None` if member `bit` was seen before.
    fn first(&mut self, bit: u8) -> Option<()> {
        let mask = 1 << bit;
        (self.0 & mask == 0).then(|| self.0 |= mask)
    }
}

/// A cursor over one JSON text.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.buf.get(self.at).copied()
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    /// Consumes `byte` after whitespace.
    fn consume(&mut self, byte: u8) -> Option<()> {
        self.whitespace();
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// `open`, items separated by commas, `close`: `item` called with the
    /// cursor at each item (after its whitespace).
    fn sequence(
        &mut self,
        depth: usize,
        [open, close]: [u8; 2],
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.consume(open)?;
        self.whitespace();
        if self.peek()? == close {
            self.at += 1;
            return Some(());
        }
        loop {
            self.whitespace();
            item(self)?;
            self.whitespace();
            match self.peek()? {
                b',' => self.at += 1,
                b if b == close => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An object, `member` called with each key (duplicates included) and
    /// the cursor at its value.
    fn object(
        &mut self,
        depth: usize,
        mut member: impl FnMut(&mut Self, &[u8]) -> Option<()>,
    ) -> Option<()> {
        self.sequence(depth, [b'{', b'}'], |r| {
            let key = r.string()?;
            if !key.is_ascii() {
                // The full parse reads keys as text.
                std::str::from_utf8(key).ok()?;
            }
            r.consume(b':')?;
            r.whitespace();
            member(r, key)
        })
    }

    fn object_or_null(
        &mut self,
        depth: usize,
        member: impl FnMut(&mut Self, &[u8]) -> Option<()>,
    ) -> Option<()> {
        match self.peek()? {
            b'n' => self.literal(b"null"),
            _ => self.object(depth, member),
        }
    }

    /// An array (or `null`), `element` called with the cursor at each one.
    fn array_or_null(
        &mut self,
        depth: usize,
        element: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        match self.peek()? {
            b'n' => self.literal(b"null"),
            _ => self.sequence(depth, [b'[', b']'], element),
        }
    }

    /// A string of generated text (or `null`): its characters, as the
    /// full parse would decode it, added to `chars`. Each escape [`string`]
    /// lets through is two ASCII bytes standing for one character.
    ///
    /// [`string`]: Self::string
    fn text_or_null(&mut self, chars: &mut u64) -> Option<()> {
        if self.peek()? == b'n' {
            return self.literal(b"null");
        }
        let raw = self.string()?;
        let mut escapes = 0;
        let mut at = 0;
        while let Some(i) = memchr::memchr(b'\\', &raw[at..]) {
            escapes += 1;
            at += i + 2;
        }
        let text = std::str::from_utf8(raw).ok()?;
        *chars += text.chars().count() as u64 - escapes;
        Some(())
    }

    /// A string's raw bytes between its quotes. Escapes other than `\u`
    /// are stepped over (and left in the bytes); a `\u` escape, a control
    /// character or an unterminated string is the full parse's. A plain
    /// loop: the strings of a chunk are a few bytes each, shorter than a
    /// vectorised search takes to set up.
    fn string(&mut self) -> Option<&'a [u8]> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        let mut at = start;
        loop {
            match *self.buf.get(at)? {
                b'"' => break,
                b'\\' => match self.buf.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                    _ => return None,
                },
                0..0x20 => return None,
                _ => at += 1,
            }
        }
        self.at = at + 1;
        Some(&self.buf[start..at])
    }

    /// Exactly `word` (`null`, `true`, `false`).
    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at.checked_add(word.len())?;
        (self.buf.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// A number in JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek()? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            self.digits_at_least_one()?;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            self.digits_at_least_one()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.at += 1;
        }
    }

    fn digits_at_least_one(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    /// Any value, checked as the full parse checks what it ignores.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => self.object(depth + 1, |r, _| r.skip_value(depth + 1)),
            b'[' => self.sequence(depth + 1, [b'[', b']'], |r| r.skip_value(depth + 1)),
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            _ => self.number(),
        }
    }
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
