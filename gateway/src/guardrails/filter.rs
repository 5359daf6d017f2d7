//! `litellm_content_filter`: regex patterns (prebuilt or custom) and
//! blocked words, each blocking the request or masking what matched with
//! LiteLLM's redaction text. One pass of the patterns' prefilters
//! ([`super::gate`]) finds the windows of the text where each pattern can
//! match, and each pattern's regex runs on its windows alone; one
//! Aho-Corasick pass finds the words.

use super::gate::{Gates, Windows};
use super::patterns::{self, Check};
use crate::error::GatewayError;
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
use regex::bytes::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};
use regex_automata::util::syntax;
use regex_automata::{meta, Input};
use std::borrow::Cow;

/// LiteLLM's text in place of a masked keyword.
const KEYWORD_REDACTED: &str = "[KEYWORD_REDACTED]";
/// Compiled size allowed to one custom regex (the engine is linear-time;
/// this bounds its memory).
const MAX_REGEX_SIZE: usize = 1 << 20;
/// Cache of the patterns' lazy DFA (per thread): room for every pattern
/// together, so a long text is scanned without falling back to a slower
/// engine.
const SET_DFA_CACHE: usize = 32 << 20;
/// Cache of one pattern's lazy DFA (per thread; the `regex` crate's
/// default).
const DFA_CACHE: usize = 2 << 20;
/// When the windows of all patterns together cover more than this many
/// times the text, one pass of the `RegexSet` first tells which patterns
/// match at all (a text of digits and keys would otherwise be searched
/// once per pattern).
const WINDOWS_PER_TEXT: usize = 4;
/// Up to this many blocked words are matched by a full DFA (fastest);
/// beyond, the automaton's own choice keeps memory bounded.
const MAX_DFA_WORDS: usize = 10_000;
/// Bytes of a streamed answer held back for a pattern split across chunks
/// (LiteLLM holds 50 characters).
const STREAM_HOLD: usize = 128;
/// The same for `openai_api_key`, whose keys run longer (LiteLLM: 419).
const OPENAI_KEY_HOLD: usize = 420;

/// What a match does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Refuse with LiteLLM's 400.
    Block,
    /// Replace what matched with the redaction text.
    Mask,
}

impl Action {
    /// LiteLLM's `BLOCK` / `MASK` (case-insensitive).
    pub fn parse(s: &str) -> Option<Action> {
        match s.to_ascii_uppercase().as_str() {
            "BLOCK" => Some(Action::Block),
            "MASK" => Some(Action::Mask),
            _ => None,
        }
    }
}

/// A pattern as configured, before compiling.
pub struct PatternSpec {
    /// The name errors and redaction text use.
    pub name: String,
    /// The regex.
    pub regex: String,
    /// The check each match must also pass.
    pub check: Check,
    /// What a match does.
    pub action: Action,
}

impl PatternSpec {
    /// The prebuilt pattern `name`, or `None` when there is none.
    pub fn prebuilt(name: &str, action: Action) -> Option<PatternSpec> {
        patterns::prebuilt(name).map(|p| PatternSpec {
            name: p.name.to_string(),
            regex: p.regex.to_string(),
            check: p.check,
            action,
        })
    }
}

/// A blocked word as configured.
pub struct WordSpec {
    /// The keyword (matched case-insensitively, as a substring; `*` stands
    /// for at most one character, as in LiteLLM).
    pub keyword: String,
    /// What a match does.
    pub action: Action,
    /// Shown in the block message.
    pub description: Option<String>,
}

struct Pattern {
    name: String,
    redaction: String,
    /// The `regex` crate's engine with the same settings, searched over a
    /// window of the text.
    regex: meta::Regex,
    check: Check,
    action: Action,
}

struct Word {
    keyword: String,
    action: Action,
    description: Option<String>,
}

/// A compiled content filter.
pub struct ContentFilter {
    set: RegexSet,
    patterns: Vec<Pattern>,
    /// Where each pattern can match.
    gates: Gates,
    /// Plain keywords, one automaton.
    words: Option<AhoCorasick>,
    plain: Vec<Word>,
    /// Keywords with `*`, one regex each.
    wild: Vec<(Regex, Word)>,
    /// What a stream holds back ([`Self::hold`]), worked out once.
    hold: usize,
    /// Whether any pattern or word refuses (`BLOCK`).
    blocks: bool,
}

impl std::fmt::Debug for ContentFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContentFilter")
            .field("patterns", &self.patterns.len())
            .field("words", &(self.plain.len() + self.wild.len()))
            .finish()
    }
}

/// `pattern` compiled as `regex::bytes::RegexBuilder` compiles it with
/// `unicode(false)`, `case_insensitive(true)` and a size limit (ASCII
/// classes, any case, as LiteLLM matches), and its syntax tree for the
/// prefilter.
fn compile(pattern: &str) -> Result<(meta::Regex, regex_syntax::hir::Hir), String> {
    let hir = syntax::parse_with(
        pattern,
        &syntax::Config::new()
            .unicode(false)
            .case_insensitive(true)
            .utf8(false),
    )
    .map_err(|e| e.to_string())?;
    let config = meta::Config::new()
        .match_kind(regex_automata::MatchKind::LeftmostFirst)
        .utf8_empty(false)
        .nfa_size_limit(Some(MAX_REGEX_SIZE))
        .hybrid_cache_capacity(DFA_CACHE);
    let regex = meta::Builder::new()
        .configure(config)
        .build_from_hir(&hir)
        .map_err(|e| e.to_string())?;
    Ok((regex, hir))
}

impl ContentFilter {
    /// Compiles `patterns` and `words`; the error names the pattern or
    /// keyword at fault.
    pub fn new(patterns: Vec<PatternSpec>, words: Vec<WordSpec>) -> Result<ContentFilter, String> {
        let mut compiled = Vec::with_capacity(patterns.len());
        let mut hirs = Vec::with_capacity(patterns.len());
        let mut sources = Vec::with_capacity(patterns.len());
        for p in patterns {
            let (regex, hir) = compile(&p.regex)
                .map_err(|e| format!("pattern `{}` does not compile: {e}", p.name))?;
            hirs.push(hir);
            compiled.push(Pattern {
                redaction: format!("[{}_REDACTED]", p.name.to_uppercase()),
                name: p.name,
                regex,
                check: p.check,
                action: p.action,
            });
            sources.push(p.regex);
        }
        let gates = Gates::new(&hirs.iter().collect::<Vec<_>>());
        let set = RegexSetBuilder::new(&sources)
            .unicode(false)
            .case_insensitive(true)
            .size_limit(MAX_REGEX_SIZE.saturating_mul(compiled.len().max(1)))
            .dfa_size_limit(SET_DFA_CACHE)
            .build()
            .map_err(|e| format!("patterns do not compile together: {e}"))?;
        let (mut plain, mut wild) = (Vec::new(), Vec::new());
        for w in words {
            let keyword = w.keyword.to_lowercase();
            if keyword.is_empty() {
                return Err("blocked_words: an empty keyword".into());
            }
            let word = Word {
                keyword,
                action: w.action,
                description: w.description,
            };
            if word.keyword.contains('*') {
                let pattern = regex::escape(&word.keyword).replace(r"\*", ".?");
                let regex = RegexBuilder::new(&pattern)
                    .case_insensitive(true)
                    .size_limit(MAX_REGEX_SIZE)
                    .build()
                    .map_err(|e| format!("blocked word `{}`: {e}", word.keyword))?;
                wild.push((regex, word));
            } else {
                plain.push(word);
            }
        }
        let words = if plain.is_empty() {
            None
        } else {
            Some(
                AhoCorasickBuilder::new()
                    .ascii_case_insensitive(true)
                    .match_kind(MatchKind::LeftmostLongest)
                    .kind((plain.len() <= MAX_DFA_WORDS).then_some(AhoCorasickKind::DFA))
                    .build(plain.iter().map(|w| w.keyword.as_bytes()))
                    .map_err(|e| format!("blocked_words: {e}"))?,
            )
        };
        let hold = hold_of(&compiled, &plain, &wild);
        let blocks = compiled
            .iter()
            .map(|p| p.action)
            .chain(
                plain
                    .iter()
                    .chain(wild.iter().map(|(_, w)| w))
                    .map(|w| w.action),
            )
            .any(|a| a == Action::Block);
        Ok(ContentFilter {
            set,
            patterns: compiled,
            gates,
            words,
            plain,
            wild,
            hold,
            blocks,
        })
    }

    /// Checks `text`: `Ok(Borrowed)` when nothing matched, `Ok(Owned)`
    /// with the masks applied, or LiteLLM's 400 for a `BLOCK` match.
    pub fn apply<'t>(&self, text: &'t str) -> Result<Cow<'t, str>, GatewayError> {
        let mut spans = Vec::new();
        self.find(text, &mut |start, end, redaction| {
            spans.push((start, end, redaction))
        })?;
        if spans.is_empty() {
            return Ok(Cow::Borrowed(text));
        }
        Ok(Cow::Owned(render(text, spans)))
    }

    /// Bytes a stream holds back so that a match split across chunks is
    /// still whole when it is checked: LiteLLM's holdback (longer for
    /// OpenAI keys), or the longest keyword.
    pub fn hold(&self) -> usize {
        self.hold
    }

    /// Whether a match can refuse the text (a `BLOCK` pattern or word):
    /// a filter that only masks need not look at text it still holds.
    pub fn blocks(&self) -> bool {
        self.blocks
    }

    /// The `(start, end)` of every match to mask in `text`, in no order;
    /// LiteLLM's 400 for a `BLOCK` match.
    pub fn spans(&self, text: &str, out: &mut Vec<(usize, usize)>) -> Result<(), GatewayError> {
        self.find(text, &mut |start, end, _| out.push((start, end)))
    }

    /// Gives `found` the `(start, end, redaction)` of every match to mask:
    /// patterns and words, both on the text as given.
    fn find<'s>(&'s self, text: &str, found: &mut Found<'_, 's>) -> Result<(), GatewayError> {
        WINDOWS.with(|windows| match windows.try_borrow_mut() {
            Ok(mut windows) => {
                let found = self.find_patterns(text, &mut windows, found);
                windows.trim();
                found
            }
            // Not reachable (a search never starts another); a fresh
            // buffer keeps it correct anyway.
            Err(_) => self.find_patterns(text, &mut Windows::default(), found),
        })?;
        self.find_words(text, found)
    }

    fn find_patterns<'s>(
        &'s self,
        text: &str,
        windows: &mut Windows,
        spans: &mut Found<'_, 's>,
    ) -> Result<(), GatewayError> {
        let bytes = text.as_bytes();
        if self.patterns.is_empty() {
            return Ok(());
        }
        self.gates.windows(bytes, windows);
        let hits = (windows.total() > WINDOWS_PER_TEXT.saturating_mul(bytes.len()))
            .then(|| self.set.matches(bytes));
        for (i, p) in self.patterns.iter().enumerate() {
            if hits.as_ref().is_some_and(|h| !h.matched(i)) {
                continue;
            }
            // Every match lies inside one window: searching them in order
            // finds what one search of the whole text finds.
            let found = windows
                .of(i)
                .flat_map(|(start, end)| p.regex.find_iter(Input::new(bytes).span(start..end)));
            let found = found.filter(|m| {
                text.is_char_boundary(m.start())
                    && text.is_char_boundary(m.end())
                    && patterns::passes(p.check, bytes, m.start(), m.end())
            });
            match p.action {
                Action::Block => {
                    if found.take(1).count() > 0 {
                        return Err(pattern_blocked(&p.name));
                    }
                }
                Action::Mask => found.for_each(|m| spans(m.start(), m.end(), p.redaction.as_str())),
            }
        }
        Ok(())
    }

    fn find_words<'s>(&'s self, text: &str, spans: &mut Found<'_, 's>) -> Result<(), GatewayError> {
        if let Some(ac) = &self.words {
            for m in ac.find_iter(text) {
                let w = &self.plain[m.pattern().as_usize()];
                match w.action {
                    Action::Block => return Err(word_blocked(w)),
                    Action::Mask => spans(m.start(), m.end(), KEYWORD_REDACTED),
                }
            }
        }
        for (regex, w) in &self.wild {
            for m in regex.find_iter(text.as_bytes()) {
                if !(text.is_char_boundary(m.start()) && text.is_char_boundary(m.end())) {
                    continue;
                }
                match w.action {
                    Action::Block => return Err(word_blocked(w)),
                    Action::Mask => spans(m.start(), m.end(), KEYWORD_REDACTED),
                }
            }
        }
        Ok(())
    }
}

/// Takes each match to mask: `(start, end, redaction)`.
type Found<'f, 's> = dyn FnMut(usize, usize, &'s str) + 'f;

thread_local! {
    /// The windows of the text being searched, kept for the next search on
    /// this thread (a request core checks one text at a time).
    static WINDOWS: std::cell::RefCell<Windows> = std::cell::RefCell::default();
}

/// Bytes a stream holds back for `patterns` and words `plain` and `wild`.
fn hold_of(patterns: &[Pattern], plain: &[Word], wild: &[(Regex, Word)]) -> usize {
    let patterns = patterns
        .iter()
        .map(|p| {
            if p.name == "openai_api_key" {
                OPENAI_KEY_HOLD
            } else {
                STREAM_HOLD
            }
        })
        .max()
        .unwrap_or(0);
    let words = plain
        .iter()
        .chain(wild.iter().map(|(_, w)| w))
        .map(|w| w.keyword.len())
        .max()
        .unwrap_or(0);
    patterns.max(words)
}

/// `text` with each span replaced by its redaction; a span overlapping an
/// earlier one is covered by it.
fn render(text: &str, mut spans: Vec<(usize, usize, &str)>) -> String {
    spans.sort_unstable_by_key(|&(start, end, _)| (start, end));
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end, redaction) in spans {
        if start < at {
            // Overlaps the previous mask: that one covers it.
            at = at.max(end);
            continue;
        }
        out.push_str(&text[at..start]);
        out.push_str(redaction);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// LiteLLM's refusal for a pattern with action `BLOCK`.
fn pattern_blocked(name: &str) -> GatewayError {
    let message = format!("Content blocked: {name} pattern detected");
    GatewayError::GuardrailBlocked {
        detail: serde_json::json!({"error": message, "pattern": name}),
        message,
    }
}

/// LiteLLM's refusal for a blocked word with action `BLOCK`.
fn word_blocked(w: &Word) -> GatewayError {
    let mut message = format!("Content blocked: keyword '{}' detected", w.keyword);
    if let Some(d) = &w.description {
        message.push_str(&format!(" ({d})"));
    }
    GatewayError::GuardrailBlocked {
        detail: serde_json::json!({
            "error": message,
            "keyword": w.keyword,
            "description": w.description,
        }),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prebuilt(names: &[&str], action: Action) -> ContentFilter {
        let specs = names
            .iter()
            .map(|n| PatternSpec::prebuilt(n, action).unwrap())
            .collect();
        ContentFilter::new(specs, Vec::new()).unwrap()
    }

    fn masked(filter: &ContentFilter, text: &str) -> String {
        filter.apply(text).unwrap().into_owned()
    }

    #[test]
    fn each_prebuilt_pattern_masks_its_positive_and_spares_its_negative() {
        let cases: &[(&str, &str, &str)] = &[
            ("us_ssn", "ssn 123-45-6789 ok", "call 123-456-789"),
            (
                "email",
                "mail jane.doe@example.com now",
                "jane at example dot com",
            ),
            ("us_phone", "call (555) 123-4567 today", "call 12345"),
            (
                "visa",
                "card 4111 1111 1111 1111.",
                "card 4111 1111 1111 1112.",
            ),
            (
                "mastercard",
                "card 5500-0000-0000-0004",
                "card 5500-0000-0000-0005",
            ),
            ("amex", "card 378282246310005", "card 378282246310006"),
            ("discover", "card 6011111111111117", "card 6011111111111118"),
            (
                "credit_card",
                "pay 4111111111111111 now",
                "pay 4111111111111112 now",
            ),
            ("iban", "iban GB82WEST12345698765432", "iban GB82 short"),
            ("ipv4", "host 192.168.1.20 up", "version 1.2.3"),
            ("aws_access_key", "AKIAIOSFODNN7EXAMPLE here", "AKIA-short"),
            (
                "github_token",
                "ghp_abcdefghijklmnopqrstuvwxyz0123456789 x",
                "ghp_short",
            ),
            (
                "openai_api_key",
                "key sk-abcdefghijklmnopqrstT3BlbkFJabcdefghijklmnopqrst end",
                "key sk-abcdefghijklmnopqrstT3BlbkFJabcdefghijklmnopqrstu",
            ),
            (
                "anthropic_api_key",
                "key sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
                "ask-ant-api03-abcdefghijklmnopqrstuvwxyz",
            ),
            (
                "gemini_api_key",
                "k AIzaSyA1234567890abcdefghijklmnopqrstu x",
                "k aizaSyA1234567890abcdefghijklmnopqrstu x",
            ),
            (
                "private_key",
                "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
                "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
            ),
        ];
        for (name, positive, negative) in cases {
            let f = prebuilt(&[name], Action::Mask);
            let tag = format!("[{}_REDACTED]", name.to_uppercase());
            let out = masked(&f, positive);
            assert!(out.contains(&tag), "{name}: {positive:?} gave {out:?}");
            assert!(
                matches!(f.apply(negative).unwrap(), Cow::Borrowed(_)),
                "{name}: {negative:?} matched"
            );
        }
    }

    #[test]
    fn masking_keeps_the_rest_of_the_text_and_its_utf8() {
        let f = prebuilt(&["email", "us_ssn"], Action::Mask);
        assert_eq!(
            masked(&f, "é a@b.io, ü 123-45-6789 ✓"),
            "é [EMAIL_REDACTED], ü [US_SSN_REDACTED] ✓"
        );
    }

    #[test]
    fn block_is_litellms_400_naming_the_pattern() {
        let f = prebuilt(&["us_ssn"], Action::Block);
        let err = f.apply("my ssn is 123-45-6789").unwrap_err();
        assert_eq!(err.status(), 400);
        assert_eq!(err.to_string(), "Content blocked: us_ssn pattern detected");
        assert!(f.apply("nothing here").is_ok());
    }

    #[test]
    fn luhn_rejects_a_card_shaped_non_card() {
        let f = prebuilt(&["credit_card"], Action::Block);
        assert!(f.apply("order 4111 1111 1111 1112 shipped").is_ok());
        assert!(f.apply("order 4111 1111 1111 1111 shipped").is_err());
    }

    #[test]
    fn blocked_words_match_in_any_case_and_mask_or_block() {
        let words = vec![
            WordSpec {
                keyword: "Project Falcon".into(),
                action: Action::Mask,
                description: None,
            },
            WordSpec {
                keyword: "forbidden".into(),
                action: Action::Block,
                description: Some("policy 7".into()),
            },
        ];
        let f = ContentFilter::new(Vec::new(), words).unwrap();
        assert_eq!(
            masked(&f, "about PROJECT falcon and project FALCON."),
            "about [KEYWORD_REDACTED] and [KEYWORD_REDACTED]."
        );
        let err = f.apply("this is ForBidden").unwrap_err();
        assert_eq!(
            err.to_string(),
            "Content blocked: keyword 'forbidden' detected (policy 7)"
        );
    }

    #[test]
    fn wildcard_keywords_stand_for_one_character() {
        let words = vec![WordSpec {
            keyword: "h*ck".into(),
            action: Action::Mask,
            description: None,
        }];
        let f = ContentFilter::new(Vec::new(), words).unwrap();
        assert_eq!(
            masked(&f, "HACK and hck"),
            "[KEYWORD_REDACTED] and [KEYWORD_REDACTED]"
        );
    }

    /// Texts of pieces that make and unmake every prebuilt pattern's
    /// matches, runs of digits, spaces and key characters, and UTF-8.
    fn mixed_texts(seed: u64, count: usize) -> Vec<String> {
        const PIECES: &[&str] = &[
            "the ",
            "quarterly ",
            "a",
            "Z",
            "x",
            " ",
            "        ",
            "\t",
            "-",
            "-----",
            ".",
            "@",
            "_",
            "/",
            "+",
            "=",
            ":",
            "'",
            "\"",
            "\n",
            "\\n",
            "%2",
            "(",
            ")",
            "1",
            "4",
            "5",
            "3",
            "6",
            "0",
            "12",
            "123",
            "1234",
            "4111",
            "5500",
            "6011",
            "37",
            "192.168.",
            "AKIA",
            "ghp_",
            "xoxb-",
            "api_key: ",
            "API-KEY=",
            "sk-",
            "sk-ant-",
            "sk-proj-",
            "T3BlbkFJ",
            "AIza",
            "AQ.",
            "-----BEGIN ",
            "RSA ",
            "PRIVATE KEY-----",
            "-----END ",
            "jane.doe@example.com",
            "GB82",
            "WEST",
            "abcdefghij",
            "ABCDEFGHIJKLMNOP",
            "0123456789",
            "emp-",
            "é",
            "✓",
            "ü",
        ];
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..count)
            .map(|_| {
                let mut text = String::new();
                for _ in 0..rng.usize(0..100) {
                    let piece = PIECES[rng.usize(0..PIECES.len())];
                    let times = if rng.u8(0..8) == 0 {
                        rng.usize(1..14)
                    } else {
                        1
                    };
                    (0..times).for_each(|_| text.push_str(piece));
                }
                text
            })
            .collect()
    }

    #[test]
    fn windows_find_what_a_search_of_the_whole_text_finds() {
        // Every prebuilt pattern, and custom ones the prefilter cannot
        // narrow (one matches the empty string, one matches nearly any
        // byte) or narrows on a literal.
        let mut specs: Vec<PatternSpec> = patterns::PREBUILT
            .iter()
            .map(|p| PatternSpec::prebuilt(p.name, Action::Mask).unwrap())
            .collect();
        for (name, regex) in [
            ("employee_id", r"\bEMP-\d{5}\b"),
            ("empty", r"\d*"),
            ("wide", r"[^a]{3}x"),
            ("alternation", r"(?:ab|cd)+e|\+\d{2,}"),
        ] {
            specs.push(PatternSpec {
                name: name.into(),
                regex: regex.into(),
                check: Check::None,
                action: Action::Mask,
            });
        }
        // The search before the prefilter: each regex over the whole text.
        let whole: Vec<(Regex, Check)> = specs
            .iter()
            .map(|p| {
                let regex = RegexBuilder::new(&p.regex)
                    .unicode(false)
                    .case_insensitive(true)
                    .build()
                    .unwrap();
                (regex, p.check)
            })
            .collect();
        let filter = ContentFilter::new(specs, Vec::new()).unwrap();
        for text in mixed_texts(37, 1500) {
            let bytes = text.as_bytes();
            let mut want: Vec<(usize, usize)> = whole
                .iter()
                .flat_map(|(regex, check)| {
                    regex.find_iter(bytes).filter(|m| {
                        text.is_char_boundary(m.start())
                            && text.is_char_boundary(m.end())
                            && patterns::passes(*check, bytes, m.start(), m.end())
                    })
                })
                .map(|m| (m.start(), m.end()))
                .collect();
            let mut got = Vec::new();
            filter.spans(&text, &mut got).unwrap();
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "{text:?}");
        }
    }

    #[test]
    fn custom_regex_patterns_mask_under_their_name() {
        let spec = PatternSpec {
            name: "employee_id".into(),
            regex: r"\bEMP-\d{5}\b".into(),
            check: Check::None,
            action: Action::Mask,
        };
        let f = ContentFilter::new(vec![spec], Vec::new()).unwrap();
        assert_eq!(masked(&f, "id emp-12345."), "id [EMPLOYEE_ID_REDACTED].");
        let bad = PatternSpec {
            name: "broken".into(),
            regex: r"(?<=x)y".into(),
            check: Check::None,
            action: Action::Mask,
        };
        let err = ContentFilter::new(vec![bad], Vec::new()).unwrap_err();
        assert!(err.contains("`broken`"), "{err}");
    }
}
