//! A cursor over JSON text for one-pass readers that stand in for a full
//! serde_json parse on the hot path (the usage tap's chunks, the routing
//! fields of a request). It follows JSON's grammar exactly as serde_json
//! checks it, including what serde_json checks in the values it ignores
//! (their structure, numbers, literals, escapes and control characters, not
//! the UTF-8 of their strings); whatever it does not follow (a `\u`
//! escape, nesting past [`MAX_DEPTH`]) makes it answer `None`, and its
//! caller then leaves the text to serde_json.

/// Nesting deeper than this is left to the full parse (serde_json's own
/// limit is 128).
pub(crate) const MAX_DEPTH: usize = 64;

/// The members of one object already read, by bit: the full parse refuses
/// a duplicate of a member it reads.
#[derive(Default)]
pub(crate) struct Seen(u32);

impl Seen {
    /// `None` if member `bit` was seen before.
    pub(crate) fn first(&mut self, bit: u8) -> Option<()> {
        let mask = 1u32 << bit;
        (self.0 & mask == 0).then(|| self.0 |= mask)
    }
}

/// The characters of a string's raw bytes as returned by
/// [`Reader::string`], as the full parse decodes them (each escape it lets
/// through is two ASCII bytes standing for one character); `None` when
/// they are not UTF-8 (the full parse refuses a string it reads then) or
/// end in a lone backslash (never so from the reader).
pub(crate) fn decoded_chars(raw: &[u8]) -> Option<u64> {
    let mut escapes = 0u64;
    let mut at = 0;
    while let Some(i) = memchr::memchr(b'\\', raw.get(at..)?) {
        escapes += 1;
        at += i + 2;
    }
    // ASCII (a prompt's usual text) is one character a byte: no UTF-8
    // decoding to check or count characters by.
    let chars = if raw.is_ascii() {
        raw.len() as u64
    } else {
        std::str::from_utf8(raw).ok()?.chars().count() as u64
    };
    chars.checked_sub(escapes)
}

/// What the raw bytes of a string read by [`Reader::text_string`] hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plain {
    /// Every byte is ASCII (so the bytes are UTF-8).
    pub(crate) ascii: bool,
    /// It has an escape (a backslash and the byte after it).
    pub(crate) escaped: bool,
}

/// A cursor over one JSON text (a copy reads on from the same place: to
/// try a stricter reading of a value and fall back to this one's).
#[derive(Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
    /// Strings are searched with memchr rather than a byte loop: for
    /// texts whose strings run to hundreds of bytes (a request's prompt).
    long_strings: bool,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`, for texts of short strings.
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            at: 0,
            long_strings: false,
        }
    }

    /// A cursor at the start of `buf`, for texts with long strings.
    pub(crate) fn with_long_strings(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            at: 0,
            long_strings: true,
        }
    }

    /// Where the cursor is, as an offset into the text.
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    /// The text from `start` to the cursor.
    pub(crate) fn text_since(&self, start: usize) -> &'a [u8] {
        self.buf.get(start..self.at).unwrap_or_default()
    }

    /// Whether only whitespace is left.
    pub(crate) fn finished(&mut self) -> bool {
        self.whitespace();
        self.at == self.buf.len()
    }

    /// The next byte, not consumed.
    pub(crate) fn peek(&self) -> Option<u8> {
        self.buf.get(self.at).copied()
    }

    /// Steps over JSON whitespace.
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
    pub(crate) fn object(
        &mut self,
        depth: usize,
        mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
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

    /// An object (or `null`), as [`object`](Self::object).
    pub(crate) fn object_or_null(
        &mut self,
        depth: usize,
        member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
    ) -> Option<()> {
        match self.peek()? {
            b'n' => self.literal(b"null"),
            _ => self.object(depth, member),
        }
    }

    /// An array (or `null`), `element` called with the cursor at each one.
    pub(crate) fn array_or_null(
        &mut self,
        depth: usize,
        element: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        match self.peek()? {
            b'n' => self.literal(b"null"),
            _ => self.sequence(depth, [b'[', b']'], element),
        }
    }

    /// A string's raw bytes between its quotes. Escapes other than `\u`
    /// are stepped over (and left in the bytes); a `\u` escape, a control
    /// character or an unterminated string is the full parse's. A plain
    /// loop unless the cursor was made for long strings: the strings of a
    /// chunk are a few bytes each, shorter than a vectorised search takes
    /// to set up.
    pub(crate) fn string(&mut self) -> Option<&'a [u8]> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        if self.long_strings {
            return self.long_string(start);
        }
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

    /// [`string`] for long strings: quotes and backslashes found with
    /// memchr, control characters with a pass that vectorizes.
    ///
    /// [`string`]: Self::string
    fn long_string(&mut self, start: usize) -> Option<&'a [u8]> {
        let mut at = start;
        loop {
            let rest = self.buf.get(at..)?;
            let stop = memchr::memchr2(b'"', b'\\', rest)?;
            if rest[..stop].iter().fold(false, |any, &b| any | (b < 0x20)) {
                return None;
            }
            at += stop;
            if self.buf[at] == b'"' {
                break;
            }
            match self.buf.get(at + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                _ => return None,
            }
        }
        self.at = at + 1;
        Some(&self.buf[start..at])
    }

    /// A string's raw bytes (as [`string`](Self::string)) and what they
    /// hold ([`Plain`]), found as [`long_string`](Self::long_string) finds
    /// them (with a plain loop in a cursor for short strings): the pass that looks for control characters also tells
    /// whether every byte is ASCII, so a caller need not check the UTF-8
    /// of a string again.
    pub(crate) fn text_string(&mut self) -> Option<(&'a [u8], Plain)> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.at + 1;
        if self.long_strings {
            return self.long_text(start);
        }
        let mut at = start;
        let (mut high, mut escaped) = (0u8, false);
        loop {
            match *self.buf.get(at)? {
                b'"' => break,
                b'\\' => match self.buf.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                        escaped = true;
                        at += 2;
                    }
                    _ => return None,
                },
                0..0x20 => return None,
                b => {
                    high |= b;
                    at += 1;
                }
            }
        }
        self.at = at + 1;
        let plain = Plain {
            ascii: high < 0x80,
            escaped,
        };
        Some((&self.buf[start..at], plain))
    }

    fn long_text(&mut self, start: usize) -> Option<(&'a [u8], Plain)> {
        let mut at = start;
        let (mut high, mut escaped) = (0u8, false);
        loop {
            let rest = self.buf.get(at..)?;
            let stop = memchr::memchr2(b'"', b'\\', rest)?;
            let (control, bits) = rest[..stop]
                .iter()
                .fold((false, 0u8), |(c, h), &b| (c | (b < 0x20), h | b));
            if control {
                return None;
            }
            high |= bits;
            at += stop;
            if self.buf[at] == b'"' {
                break;
            }
            match self.buf.get(at + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                _ => return None,
            }
            escaped = true;
        }
        self.at = at + 1;
        let plain = Plain {
            ascii: high < 0x80,
            escaped,
        };
        Some((&self.buf[start..at], plain))
    }

    /// Exactly `word` (`null`, `true`, `false`).
    pub(crate) fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at.checked_add(word.len())?;
        (self.buf.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// A number in JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    pub(crate) fn number(&mut self) -> Option<()> {
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
    pub(crate) fn skip_value(&mut self, depth: usize) -> Option<()> {
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
    fn counts_characters_as_decoded() {
        let mut r = Reader::new(br#""h\u00e9""#);
        assert_eq!(r.string(), None, "a \\u escape is the full parse's");
        let mut r = Reader::with_long_strings("\"héllo \\\"x\\\"\\n😀\"".as_bytes());
        let raw = r.string().unwrap();
        assert!(r.finished());
        let decoded: String = serde_json::from_slice(&[b"\"", raw, b"\""].concat()).unwrap();
        assert_eq!(decoded_chars(raw), Some(decoded.chars().count() as u64));
        assert_eq!(decoded_chars(b"\xff"), None);
        assert_eq!(decoded_chars(b""), Some(0));
        assert_eq!(
            decoded_chars(b"a\\"),
            None,
            "a lone backslash, not from the reader"
        );
    }

    /// The string reader and character count as they were before ASCII
    /// was counted by its length: what they must still answer.
    mod before {
        pub(super) fn string(buf: &[u8]) -> Option<(&[u8], usize)> {
            if *buf.first()? != b'"' {
                return None;
            }
            let mut at = 1;
            loop {
                let rest = buf.get(at..)?;
                let stop = memchr::memchr2(b'"', b'\\', rest)?;
                if rest[..stop].iter().any(|&b| b < 0x20) {
                    return None;
                }
                at += stop;
                if buf[at] == b'"' {
                    break;
                }
                match buf.get(at + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                    _ => return None,
                }
            }
            Some((&buf[1..at], at + 1))
        }

        pub(super) fn decoded_chars(raw: &[u8]) -> Option<u64> {
            let text = std::str::from_utf8(raw).ok()?;
            let mut escapes = 0u64;
            let mut at = 0;
            while let Some(i) = memchr::memchr(b'\\', raw.get(at..)?) {
                escapes += 1;
                at += i + 2;
            }
            (text.chars().count() as u64).checked_sub(escapes)
        }
    }

    /// Text of strings short and long, mixing plain bytes with quotes,
    /// escapes, control bytes, UTF-8 (whole or cut) and stray high bytes.
    fn text() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            6 => "[ -~]{0,40}".prop_map(String::into_bytes),
            1 => Just(b"\\\"".to_vec()),
            1 => Just(b"\\n".to_vec()),
            1 => Just(b"\\u00e9".to_vec()),
            1 => Just(b"\\".to_vec()),
            1 => Just(b"\"".to_vec()),
            1 => Just("é😀".as_bytes().to_vec()),
            1 => Just(b"\xc3".to_vec()),
            1 => (0u8..0x20).prop_map(|b| vec![b]),
            1 => (0x7fu8..=0xff).prop_map(|b| vec![b]),
        ];
        proptest::collection::vec(piece, 0..8).prop_map(|pieces| pieces.concat())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]
        #[test]
        fn reads_strings_as_before(body in text()) {
            let quoted = [&b"\""[..], &body].concat();
            let mut long = Reader::with_long_strings(&quoted);
            let got = long.string().map(|raw| (raw, long.position()));
            proptest::prop_assert_eq!(got, before::string(&quoted));
            let mut short = Reader::new(&quoted);
            let got = short.string().map(|raw| (raw, short.position()));
            proptest::prop_assert_eq!(got, before::string(&quoted));
            proptest::prop_assert_eq!(decoded_chars(&body), before::decoded_chars(&body));
            for mut r in [Reader::with_long_strings(&quoted), Reader::new(&quoted)] {
                let got = r.text_string().map(|(raw, plain)| (raw, r.position(), plain));
                let want = before::string(&quoted);
                proptest::prop_assert_eq!(got.map(|(raw, at, _)| (raw, at)), want);
                if let Some((raw, _, plain)) = got {
                    proptest::prop_assert_eq!(plain.ascii, raw.is_ascii());
                    proptest::prop_assert_eq!(plain.escaped, raw.contains(&b'\\'));
                }
            }
        }
    }
}
