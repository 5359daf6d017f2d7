//! The texts of a request or answer body found in place, without a parse
//! ([`json_skim`](crate::json_skim)): each text's JSON string, where it is
//! in the body and what it decodes to, in the order [`walk`](super::walk)
//! visits them. A body it does not read exactly as serde_json would (a
//! `\u` escape, a duplicate of a member it reads, a text that is not
//! UTF-8, nesting past 64, bad JSON) gives `None`, and the caller parses
//! it.

use crate::json_skim::{Plain, Reader, Seen};
use std::borrow::Cow;

/// One text of a body.
#[derive(Debug)]
pub struct Text<'a> {
    /// Where its JSON string is in the body, quotes included.
    pub span: (usize, usize),
    /// What it decodes to (borrowed when it has no escape).
    pub text: Cow<'a, str>,
    /// Whether a guardrail rewrote it.
    pub changed: bool,
}

/// The request members that hold text, in [`walk`](super::walk)'s order.
const REQUEST_TEXT: [&[u8]; 5] = [b"messages", b"system", b"input", b"prompt", b"instructions"];

/// Every text of a request body (as [`walk::request`](super::walk::request)).
pub fn request(body: &[u8]) -> Option<Vec<Text<'_>>> {
    let mut r = Reader::with_long_strings(body);
    let mut found = Vec::new();
    let mut members = Members::new(&found);
    let mut seen = Seen::default();
    r.object(0, |r, key| {
        match REQUEST_TEXT.iter().position(|k| *k == key) {
            Some(i) => {
                seen.first(i as u8)?;
                let from = found.len();
                content(r, 1, &mut found)?;
                members.read(i as u8, from, found.len());
                Some(())
            }
            None => r.skip_value(1),
        }
    })?;
    r.finished().then_some(())?;
    members.in_order(&mut found);
    Some(found)
}

/// Every text of a whole answer (as [`walk::answer`](super::walk::answer)):
/// chat `choices[].message`, completions `choices[].text`, Messages
/// `content`, Responses `output`.
pub fn answer(body: &[u8]) -> Option<Vec<Text<'_>>> {
    let mut r = Reader::with_long_strings(body);
    let mut found = Vec::new();
    let mut members = Members::new(&found);
    let mut seen = Seen::default();
    r.object(0, |r, key| {
        let i = match key {
            b"choices" => 0,
            b"content" => 1,
            b"output" => 2,
            _ => return r.skip_value(1),
        };
        seen.first(i)?;
        let from = found.len();
        match i {
            0 => choices(r, &mut found),
            _ => content(r, 1, &mut found),
        }?;
        members.read(i, from, found.len());
        Some(())
    })?;
    r.finished().then_some(())?;
    members.in_order(&mut found);
    Some(found)
}

/// The members of one object that gave texts, as read: each text is
/// written to the list as its member is read, and put in the walk's order
/// of members (by their number) at the object's end when they came in
/// another (no list per member).
struct Members {
    /// Where the object's texts start in the list.
    base: usize,
    /// Each member's number and the range of its texts in the list.
    read: [(u8, usize, usize); 5],
    len: usize,
    /// Whether a member came before one of a lower number.
    shuffled: bool,
}

impl Members {
    /// For an object whose texts go to the end of `out`.
    fn new(out: &[Text<'_>]) -> Members {
        Members {
            base: out.len(),
            read: [(0, 0, 0); 5],
            len: 0,
            shuffled: false,
        }
    }

    /// Member `number` gave the texts `from..to` (each member is read
    /// once: a duplicate is refused before).
    fn read(&mut self, number: u8, from: usize, to: usize) {
        if from == to {
            return;
        }
        if let Some(&(last, ..)) = self.read[..self.len].last() {
            self.shuffled |= last > number;
        }
        self.read[self.len] = (number, from, to);
        self.len += 1;
    }

    /// Puts the object's texts of `out` in the order of their members.
    fn in_order(mut self, out: &mut Vec<Text<'_>>) {
        if !self.shuffled {
            return;
        }
        let read = &mut self.read[..self.len];
        read.sort_unstable_by_key(|&(number, ..)| number);
        let mut texts: Vec<Option<Text<'_>>> = out.drain(self.base..).map(Some).collect();
        for &(_, from, to) in read.iter() {
            out.extend(
                texts[from - self.base..to - self.base]
                    .iter_mut()
                    .filter_map(Option::take),
            );
        }
    }
}

/// An answer's `choices`: each one's `text`, then its `message`.
fn choices<'a>(r: &mut Reader<'a>, out: &mut Vec<Text<'a>>) -> Option<()> {
    if r.peek()? != b'[' {
        return r.skip_value(1);
    }
    r.array_or_null(1, |r| {
        if r.peek()? != b'{' {
            return r.skip_value(2);
        }
        let mut members = Members::new(out);
        let mut seen = Seen::default();
        r.object(2, |r, key| {
            let from = out.len();
            let i = match key {
                b"text" => {
                    seen.first(0)?;
                    string_or_skip(r, 3, out)?;
                    0
                }
                b"message" => {
                    seen.first(1)?;
                    content(r, 3, out)?;
                    1
                }
                _ => return r.skip_value(3),
            };
            members.read(i, from, out.len());
            Some(())
        })?;
        members.in_order(out);
        Some(())
    })
}

/// A content value: a string, a list of strings or parts, or a part.
fn content<'a>(r: &mut Reader<'a>, depth: usize, out: &mut Vec<Text<'a>>) -> Option<()> {
    match r.peek()? {
        b'"' => {
            out.push(text(r)?);
            Some(())
        }
        b'[' => r.array_or_null(depth, |r| content(r, depth + 1, out)),
        b'{' => part(r, depth, out),
        _ => r.skip_value(depth),
    }
}

/// A part: its `text`, its `arguments` (a Responses `function_call`), its
/// tool calls' `function.arguments`, then its nested `content`.
fn part<'a>(r: &mut Reader<'a>, depth: usize, out: &mut Vec<Text<'a>>) -> Option<()> {
    let mut members = Members::new(out);
    let mut seen = Seen::default();
    r.object(depth, |r, key| {
        let i = match key {
            b"text" => 0,
            b"arguments" => 1,
            b"tool_calls" => 2,
            b"content" => 3,
            _ => return r.skip_value(depth + 1),
        };
        seen.first(i)?;
        let from = out.len();
        match i {
            0 | 1 => string_or_skip(r, depth + 1, out),
            2 => tool_calls(r, depth + 1, out),
            _ => content(r, depth + 1, out),
        }?;
        members.read(i, from, out.len());
        Some(())
    })?;
    members.in_order(out);
    Some(())
}

/// `tool_calls`: each call's `function.arguments`.
fn tool_calls<'a>(r: &mut Reader<'a>, depth: usize, out: &mut Vec<Text<'a>>) -> Option<()> {
    if r.peek()? != b'[' {
        return r.skip_value(depth);
    }
    r.array_or_null(depth, |r| {
        member_of(r, depth + 1, b"function", |r, depth| {
            member_of(r, depth, b"arguments", |r, depth| {
                string_or_skip(r, depth, out)
            })
        })
    })
}

/// In an object, `then` on member `name` (once; a duplicate is the full
/// parse's); any other value is skipped.
fn member_of<'a>(
    r: &mut Reader<'a>,
    depth: usize,
    name: &[u8],
    mut then: impl FnMut(&mut Reader<'a>, usize) -> Option<()>,
) -> Option<()> {
    if r.peek()? != b'{' {
        return r.skip_value(depth);
    }
    let mut seen = Seen::default();
    r.object(depth, |r, key| {
        if key != name {
            return r.skip_value(depth + 1);
        }
        seen.first(0)?;
        then(r, depth + 1)
    })
}

/// A string's text into `out`; any other value skipped.
fn string_or_skip<'a>(r: &mut Reader<'a>, depth: usize, out: &mut Vec<Text<'a>>) -> Option<()> {
    match r.peek()? {
        b'"' => {
            out.push(text(r)?);
            Some(())
        }
        _ => r.skip_value(depth),
    }
}

/// The string at the cursor.
fn text<'a>(r: &mut Reader<'a>) -> Option<Text<'a>> {
    let start = r.position();
    let (raw, plain) = r.text_string()?;
    let text = match plain {
        Plain {
            ascii: true,
            escaped: false,
        } => {
            // SAFETY: every byte is ASCII (the reader's pass saw no high
            // bit), so the bytes are UTF-8.
            Cow::Borrowed(unsafe { std::str::from_utf8_unchecked(raw) })
        }
        _ => unescape(raw)?,
    };
    Some(Text {
        span: (start, r.position()),
        text,
        changed: false,
    })
}

/// A string's raw bytes (as [`Reader::string`] gives them: only the
/// two-byte escapes) decoded; `None` when not UTF-8.
pub fn unescape(raw: &[u8]) -> Option<Cow<'_, str>> {
    let text = std::str::from_utf8(raw).ok()?;
    let Some(first) = memchr::memchr(b'\\', raw) else {
        return Some(Cow::Borrowed(text));
    };
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..first]);
    let mut at = first;
    loop {
        let decoded = match raw.get(at + 1)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            _ => return None,
        };
        out.push(decoded);
        at += 2;
        match memchr::memchr(b'\\', &raw[at..]) {
            Some(next) => {
                out.push_str(&text[at..at + next]);
                at += next;
            }
            None => {
                out.push_str(&text[at..]);
                return Some(Cow::Owned(out));
            }
        }
    }
}

/// `body` with each changed text of `texts` written in place of its
/// string (JSON-encoded); `None` when none changed.
pub fn rewritten(body: &[u8], texts: &[Text<'_>]) -> Option<Vec<u8>> {
    let mut changed: Vec<&Text<'_>> = texts.iter().filter(|t| t.changed).collect();
    if changed.is_empty() {
        return None;
    }
    changed.sort_by_key(|t| t.span.0);
    let grown: usize = changed.iter().map(|t| t.text.len() + 2).sum();
    let mut out = Vec::with_capacity(body.len() + grown);
    let mut last = 0;
    for t in changed {
        out.extend_from_slice(&body[last..t.span.0]);
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, t.text.as_ref());
        last = t.span.1;
    }
    out.extend_from_slice(&body[last..]);
    Some(out)
}

/// The text of an OpenAI stream chunk of one choice, found in place.
#[derive(Debug)]
pub struct ChunkText<'a> {
    /// The choice's `index`.
    pub index: u64,
    /// Whether its `finish_reason` is set.
    pub finished: bool,
    /// Its `delta.content` when a string: where the string is, and its text.
    pub content: Option<((usize, usize), Cow<'a, str>)>,
    /// Where a member can be written into its `delta` (just after its
    /// `{`) and whether the delta has members already; `None` when its
    /// `content` is there as `null` (a member cannot be added twice).
    pub delta: Option<(usize, bool)>,
}

/// An OpenAI chat chunk's one choice (`Some(None)`: no choice at all);
/// `None` for any other chunk (more choices, a completions `text`, a
/// `delta` that is not an object or whose `content` is neither a string
/// nor null) or what the full parse must read.
pub fn openai_chunk(data: &[u8]) -> Option<Option<ChunkText<'_>>> {
    let mut r = Reader::new(data);
    let mut found = None;
    let mut seen = Seen::default();
    r.object(0, |r, key| match key {
        b"choices" => {
            seen.first(0)?;
            if r.peek()? != b'[' {
                return None;
            }
            r.array_or_null(1, |r| {
                if found.is_some() {
                    return None;
                }
                found = Some(chunk_choice(r)?);
                Some(())
            })
        }
        _ => r.skip_value(1),
    })?;
    r.finished().then_some(found)
}

/// One choice of a chunk.
fn chunk_choice<'a>(r: &mut Reader<'a>) -> Option<ChunkText<'a>> {
    let mut c = ChunkText {
        index: 0,
        finished: false,
        content: None,
        delta: None,
    };
    let mut seen = Seen::default();
    r.object(2, |r, key| match key {
        b"index" => {
            seen.first(0)?;
            let start = r.position();
            r.number()?;
            c.index = std::str::from_utf8(r.text_since(start))
                .ok()?
                .parse()
                .ok()?;
            Some(())
        }
        b"finish_reason" => {
            seen.first(1)?;
            c.finished = r.peek()? != b'n';
            r.skip_value(3)
        }
        b"delta" => {
            seen.first(2)?;
            if r.peek()? != b'{' {
                return None;
            }
            let open = r.position() + 1;
            let (mut members, mut null) = (false, false);
            let mut content_seen = Seen::default();
            r.object(3, |r, key| {
                members = true;
                match key {
                    b"content" => {
                        content_seen.first(0)?;
                        match r.peek()? {
                            b'"' => {
                                let t = text(r)?;
                                c.content = Some((t.span, t.text));
                                Some(())
                            }
                            b'n' => {
                                null = true;
                                r.literal(b"null")
                            }
                            _ => None,
                        }
                    }
                    _ => r.skip_value(4),
                }
            })?;
            c.delta = (!null).then_some((open, members));
            Some(())
        }
        b"text" => None,
        _ => r.skip_value(3),
    })?;
    // The delta is what the full parse's check reads.
    seen.first(2).map_or(Some(c), |()| None)
}

/// An Anthropic `content_block_delta` event's `index` and `delta.text`
/// (where its string is, and its text); `None` for any other event or
/// what the full parse must read.
pub fn anthropic_text_delta(data: &[u8]) -> Option<(u64, (usize, usize), Cow<'_, str>)> {
    let mut r = Reader::new(data);
    let (mut kind, mut index, mut found) = (None, None, None);
    let mut seen = Seen::default();
    r.object(0, |r, key| match key {
        b"type" => {
            seen.first(0)?;
            kind = Some(r.string()?);
            Some(())
        }
        b"index" => {
            seen.first(1)?;
            let start = r.position();
            r.number()?;
            index = Some(
                std::str::from_utf8(r.text_since(start))
                    .ok()?
                    .parse()
                    .ok()?,
            );
            Some(())
        }
        b"delta" => {
            seen.first(2)?;
            member_of(r, 1, b"text", |r, _| {
                if r.peek()? != b'"' {
                    return None;
                }
                let t = text(r)?;
                found = Some((t.span, t.text));
                Some(())
            })
        }
        _ => r.skip_value(1),
    })?;
    r.finished().then_some(())?;
    (kind? == b"content_block_delta").then_some(())?;
    let (span, text) = found?;
    Some((index?, span, text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// What the full parse's walk visits.
    fn walked(body: &str, answer_side: bool) -> Vec<String> {
        let mut v: Value = serde_json::from_str(body).unwrap();
        let mut out = Vec::new();
        let mut visit = |s: &mut String| {
            out.push(s.clone());
            Ok(())
        };
        if answer_side {
            super::super::walk::answer(&mut v, &mut visit).unwrap();
        } else {
            super::super::walk::request(&mut v, &mut visit).unwrap();
        }
        out
    }

    fn skimmed(body: &str, answer_side: bool) -> Option<Vec<String>> {
        let texts = match answer_side {
            true => answer(body.as_bytes())?,
            false => request(body.as_bytes())?,
        };
        Some(texts.into_iter().map(|t| t.text.into_owned()).collect())
    }

    #[test]
    fn every_text_is_found_in_the_walks_order() {
        let requests = [
            r#"{"model":"m","messages":[{"role":"system","content":"a"},{"role":"user","content":[{"type":"text","text":"b"},{"type":"image_url","image_url":{"url":"http://x"}}]},{"role":"assistant","tool_calls":[{"id":"t","function":{"name":"f","arguments":"c"}}]}]}"#,
            r#"{"model":"m","system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"r"}]}]}]}"#,
            r#"{"instructions":"i","model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"t"}]},{"type":"function_call","arguments":"{\"a\":1}"}]}"#,
            r#"{"model":"m","input":["e1","e2"]}"#,
            r#"{"model":"m","prompt":"p \"q\" \\ \n\t/ é"}"#,
            r#"{"model":"m","input":[[1,2]],"messages":null}"#,
            r#"{"content":{"text":"x","content":"y","arguments":"z","tool_calls":[{"function":{"arguments":"w"}},1]},"messages":[{"content":"last","text":"first"}]}"#,
        ];
        for body in requests {
            assert_eq!(
                skimmed(body, false).as_deref(),
                Some(&walked(body, false)[..]),
                "{body}"
            );
        }
        let answers = [
            r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"a","tool_calls":[{"function":{"arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"message":{"content":"m"},"text":"t"}],"content":"c"}"#,
            r#"{"type":"message","content":[{"type":"text","text":"m"}]}"#,
            r#"{"output":[{"type":"message","content":[{"type":"output_text","text":"o"}]}]}"#,
        ];
        for body in answers {
            assert_eq!(
                skimmed(body, true).as_deref(),
                Some(&walked(body, true)[..]),
                "{body}"
            );
        }
    }

    #[test]
    fn members_in_any_order_give_the_walks_order() {
        // Every order of a part's four text members (one nested part in
        // `content`, its members in turn in another order), at the top of
        // a request and of an answer's choice.
        let members = [
            r#""text":"t""#,
            r#""arguments":"a""#,
            r#""tool_calls":[{"function":{"arguments":"c1"}},{"function":{"arguments":"c2"}}]"#,
            r#""content":[{"arguments":"na","text":"nt"},"s"]"#,
        ];
        let mut orders: Vec<Vec<usize>> = vec![vec![]];
        for _ in 0..4 {
            let mut longer = Vec::new();
            for o in &orders {
                for i in (0..4).filter(|i| !o.contains(i)) {
                    longer.push([&o[..], &[i]].concat());
                }
            }
            orders = longer;
        }
        assert_eq!(orders.len(), 24);
        for order in &orders {
            let part: Vec<&str> = order.iter().map(|&i| members[i]).collect();
            let part = format!("{{\"role\":\"user\",{}}}", part.join(","));
            let body = format!(r#"{{"prompt":"p","messages":[{part},{part}],"system":"s0"}}"#);
            assert_eq!(
                skimmed(&body, false).as_deref(),
                Some(&walked(&body, false)[..]),
                "{body}"
            );
            let body = format!(r#"{{"output":"o","choices":[{{"message":{part},"text":"ct"}}]}}"#);
            assert_eq!(
                skimmed(&body, true).as_deref(),
                Some(&walked(&body, true)[..]),
                "{body}"
            );
        }
    }

    #[test]
    fn what_the_full_parse_must_read_is_left_to_it() {
        for body in [
            r#"{"prompt":"caf\u00e9"}"#,
            r#"{"prompt":"a","prompt":"b"}"#,
            r#"{"messages":[{"content":"a","content":"b"}]}"#,
            r#"{"prompt":"a"} x"#,
            r#"{"prompt":"a""#,
            r#"[1]"#,
        ] {
            assert!(skimmed(body, false).is_none(), "{body}");
        }
        assert!(request(b"{\"prompt\":\"\xff\"}").is_none(), "not UTF-8");
    }

    #[test]
    fn a_rewrite_replaces_only_the_changed_strings() {
        let body = r#"{"model":"m", "messages":[{"role":"user","content":"mail a@b.io"},{"role":"user","content":"keep \"me\""}]}"#;
        let mut texts = request(body.as_bytes()).unwrap();
        assert_eq!(texts[1].text, "keep \"me\"");
        assert!(rewritten(body.as_bytes(), &texts).is_none());
        texts[0].text = Cow::Owned("mail [EMAIL] \"x\"\n".into());
        texts[0].changed = true;
        let out = String::from_utf8(rewritten(body.as_bytes(), &texts).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"model":"m", "messages":[{"role":"user","content":"mail [EMAIL] \"x\"\n"},{"role":"user","content":"keep \"me\""}]}"#
        );
    }
    #[test]
    fn a_chunks_one_choice_is_read_in_place_or_left_to_the_parse() {
        let chunk = br#"{"id":"c","choices":[{"index":2,"delta":{"role":"assistant","content":"hi \"x\""},"finish_reason":null}]}"#;
        let c = openai_chunk(chunk).unwrap().unwrap();
        assert_eq!((c.index, c.finished), (2, false));
        let (span, text) = c.content.unwrap();
        assert_eq!(text, "hi \"x\"");
        assert_eq!(&chunk[span.0..span.1], br#""hi \"x\"""#);
        let end = br#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
        let c = openai_chunk(end).unwrap().unwrap();
        assert!(c.finished && c.content.is_none());
        let at = memchr::memmem::find(end, b"{}").unwrap() + 1;
        assert_eq!(c.delta, Some((at, false)), "an empty delta, just inside it");
        let role =
            br#"{"choices":[{"index":0,"delta":{ "role":"assistant"},"finish_reason":"stop"}]}"#;
        let at = memchr::memmem::find(role, b"{ \"role").unwrap() + 1;
        assert_eq!(openai_chunk(role).unwrap().unwrap().delta, Some((at, true)));
        let null = br#"{"choices":[{"index":0,"delta":{"content":null},"finish_reason":"stop"}]}"#;
        let c = openai_chunk(null).unwrap().unwrap();
        assert!(
            c.content.is_none() && c.delta.is_none(),
            "no second content member"
        );
        assert!(
            openai_chunk(br#"{"choices":[],"usage":{"total_tokens":3}}"#)
                .unwrap()
                .is_none()
        );
        for other in [
            &br#"{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}"#[..],
            br#"{"choices":[{"index":0,"text":"a"}]}"#,
            br#"{"choices":[{"index":0,"delta":null,"finish_reason":"stop"}]}"#,
            br#"{"choices":[{"index":0}]}"#,
            br#"{"choices":[{"index":0,"delta":{"content":"\u00e9"}}]}"#,
            br#"{"choices":[{"index":1.5,"delta":{"content":"a"}}]}"#,
        ] {
            assert!(openai_chunk(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }
    #[test]
    fn an_anthropic_text_delta_is_read_in_place() {
        let event = br#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"a\nb"}}"#;
        let (index, span, text) = anthropic_text_delta(event).unwrap();
        assert_eq!((index, text.as_ref()), (1, "a\nb"));
        assert_eq!(&event[span.0..span.1], br#""a\nb""#);
        for other in [
            &br#"{"type":"content_block_stop","index":0}"#[..],
            br#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
            br#"{"type":"content_block_delta","delta":{"text":"a"}}"#,
        ] {
            assert!(anthropic_text_delta(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }
}
