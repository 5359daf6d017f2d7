//! `post_call` guardrails on a streamed answer, text only (the framing is
//! the relay's). Each choice's text is held back by the guardrails' window
//! ([`ContentFilter::hold`](super::filter::ContentFilter::hold)) so that a
//! match split across chunks is whole when it is checked; the rest is
//! released masked. A `BLOCK` match is an error as soon as it is seen.

use super::log::{Hook, Log, Outcome, Run};
use super::Guardrail;
use crate::error::GatewayError;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Most choices (or content blocks) of one stream that are checked.
const MAX_CHOICES: usize = 256;
/// Most bytes one choice holds back however its matches run on (an
/// unterminated private key block matches to the end): beyond, the held
/// text is released masked as it stands.
const MAX_HELD: usize = 64 << 10;
/// How far before the window a cut looks for a space, so the text held
/// back starts at a word boundary.
const CUT_SLACK: usize = 64;
/// Most matches whose room a window keeps between checks.
const MAX_KEPT_SPANS: usize = 1024;

/// The window of one streamed answer.
#[derive(Debug)]
pub struct StreamCheck {
    rails: Vec<Arc<Guardrail>>,
    hold: usize,
    /// Whether a filter of `rails` can refuse: only then is text still
    /// held back checked as it comes (a mask waits for its release).
    blocks: bool,
    /// Each choice's index and the text it holds back.
    choices: Vec<(u64, String)>,
    /// What each of `rails` has done so far (in `rails`' order).
    outcomes: Vec<Outcome>,
    /// When the first text was checked.
    began: Option<SystemTime>,
    /// Time spent checking, every filter together.
    took: Duration,
    /// The matches of the last check (kept for its room).
    spans: Vec<(usize, usize)>,
}

impl StreamCheck {
    /// A window for `rails`.
    pub(super) fn new(mut rails: Vec<Arc<Guardrail>>) -> StreamCheck {
        rails.retain(|g| g.filter().is_some());
        let hold = rails
            .iter()
            .filter_map(|g| g.filter())
            .map(|f| f.hold())
            .max()
            .unwrap_or(0);
        let blocks = rails.iter().filter_map(|g| g.filter()).any(|f| f.blocks());
        StreamCheck {
            blocks,
            outcomes: vec![Outcome::Passed; rails.len()],
            rails,
            hold,
            choices: Vec::new(),
            began: None,
            took: Duration::ZERO,
            spans: Vec::new(),
        }
    }

    /// Takes the next `text` of choice `index`: the text to send now,
    /// masked (may be empty), or the refusal of a `BLOCK` match.
    pub fn feed(&mut self, index: u64, text: &str) -> Result<String, GatewayError> {
        let held = self.held(index)?;
        held.push_str(text);
        let mut held = std::mem::take(held);
        let released = self.release(&mut held, false);
        self.put_back(index, held);
        released
    }

    /// The end of choice `index`: everything it holds, masked.
    pub fn flush(&mut self, index: u64) -> Result<String, GatewayError> {
        let Some(at) = self.choices.iter().position(|(i, _)| *i == index) else {
            return Ok(String::new());
        };
        let (_, mut held) = self.choices.swap_remove(at);
        self.release(&mut held, true)
    }

    /// The choices that still hold text, for the end of the stream.
    pub fn pending(&self) -> Vec<u64> {
        self.choices
            .iter()
            .filter(|(_, held)| !held.is_empty())
            .map(|(i, _)| *i)
            .collect()
    }

    fn held(&mut self, index: u64) -> Result<&mut String, GatewayError> {
        let at = match self.choices.iter().position(|(i, _)| *i == index) {
            Some(at) => at,
            None if self.choices.len() < MAX_CHOICES => {
                self.choices.push((index, String::new()));
                self.choices.len() - 1
            }
            None => {
                return Err(GatewayError::Internal(
                    "the streamed answer has too many choices for its post_call guardrails",
                ))
            }
        };
        Ok(&mut self.choices[at].1)
    }

    fn put_back(&mut self, index: u64, held: String) {
        if let Some((_, slot)) = self.choices.iter_mut().find(|(i, _)| *i == index) {
            *slot = held;
        }
    }

    /// Adds one run per content filter of the window to `log`: its
    /// outcome over the whole stream (a mask anywhere makes it masked, a
    /// block blocked); the time is that of every check of the stream, all
    /// its filters together. Nothing when no text was checked.
    pub fn log_into(&self, log: &mut Log) {
        let Some(start) = self.began else { return };
        for (g, outcome) in self.rails.iter().zip(&self.outcomes) {
            log.push(Run {
                guardrail: Arc::clone(g),
                hook: Hook::Post,
                outcome: *outcome,
                start,
                took: self.took,
            });
        }
    }

    /// [`Self::checked`] with its time counted.
    fn release(&mut self, held: &mut String, end: bool) -> Result<String, GatewayError> {
        self.began.get_or_insert_with(SystemTime::now);
        let began = Instant::now();
        let released = self.checked(held, end);
        self.took = self.took.saturating_add(began.elapsed());
        released
    }

    /// Checks `held` whole (a `BLOCK` anywhere in it refuses), then takes
    /// from its front what no match can still grow into: all of it at the
    /// `end`, else all but the window, cut before any match the cut would
    /// split and after a space when one is near. Returns that part masked.
    fn checked(&mut self, held: &mut String, end: bool) -> Result<String, GatewayError> {
        let mut spans = std::mem::take(&mut self.spans);
        spans.clear();
        let released = self.checked_with(held, end, &mut spans);
        if spans.capacity() <= MAX_KEPT_SPANS {
            self.spans = spans;
        }
        released
    }

    /// [`Self::checked`] with `spans` (empty) to fill.
    fn checked_with(
        &mut self,
        held: &mut String,
        end: bool,
        spans: &mut Vec<(usize, usize)>,
    ) -> Result<String, GatewayError> {
        if !end && !self.blocks && held.len() <= self.hold {
            // Nothing is released yet (the cut would be 0) and no match
            // can refuse: the held text is checked when it goes out.
            return Ok(String::new());
        }
        for (g, outcome) in self.rails.iter().zip(self.outcomes.iter_mut()) {
            let Some(f) = g.filter() else { continue };
            if let Err(err) = f.spans(held, spans) {
                *outcome = Outcome::Blocked;
                return Err(err);
            }
        }
        let cut = if end || held.len() > MAX_HELD {
            held.len()
        } else {
            cut_point(held, self.hold, spans)
        };
        if cut == 0 {
            // All of it is still held: nothing to copy or release.
            return Ok(String::new());
        }
        let mut out = if cut == held.len() {
            std::mem::take(held)
        } else {
            let front = held[..cut].to_string();
            held.drain(..cut);
            front
        };
        if !spans.iter().any(|&(start, _)| start < cut) {
            return Ok(out);
        }
        for (g, outcome) in self.rails.iter().zip(self.outcomes.iter_mut()) {
            let Some(f) = g.filter() else { continue };
            match f.apply(&out) {
                Ok(Cow::Owned(masked)) => {
                    out = masked;
                    *outcome = Outcome::Masked;
                }
                Ok(Cow::Borrowed(_)) => {}
                Err(err) => {
                    *outcome = Outcome::Blocked;
                    return Err(err);
                }
            }
        }
        Ok(out)
    }
}

/// Where to cut `text` keeping at least `hold` bytes: on a char boundary,
/// after the last ASCII space within [`CUT_SLACK`] bytes before the
/// window, and never inside a span.
fn cut_point(text: &str, hold: usize, spans: &[(usize, usize)]) -> usize {
    let Some(mut cut) = text.len().checked_sub(hold) else {
        return 0;
    };
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let from = cut.saturating_sub(CUT_SLACK);
    if let Some(space) = text.as_bytes()[from..cut]
        .iter()
        .rposition(u8::is_ascii_whitespace)
    {
        cut = from + space + 1;
    }
    // A span the cut splits is held whole; moving the cut back may split
    // an earlier one.
    loop {
        match spans.iter().find(|&&(start, end)| start < cut && cut < end) {
            Some(&(start, _)) => cut = start,
            None => return cut,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guardrails::Guardrails;

    fn check(yaml: &str) -> StreamCheck {
        let g = Guardrails::from_config(Some(&serde_yaml::from_str(yaml).unwrap())).unwrap();
        StreamCheck::new(g.list.clone())
    }

    const MASK: &str = r#"
- guardrail_name: out
  litellm_params: {guardrail: litellm_content_filter, mode: post_call,
    patterns: [{pattern_type: prebuilt, pattern_name: email, action: MASK},
               {pattern_type: prebuilt, pattern_name: us_ssn, action: BLOCK}],
    blocked_words: [{keyword: project falcon, action: MASK}]}
"#;

    /// Feeds `pieces` to choice 0 and returns all it released.
    fn stream(c: &mut StreamCheck, pieces: &[&str]) -> Result<String, GatewayError> {
        let mut out = String::new();
        for p in pieces {
            out.push_str(&c.feed(0, p)?);
        }
        out.push_str(&c.flush(0)?);
        Ok(out)
    }

    #[test]
    fn a_match_split_across_chunks_is_masked() {
        let mut c = check(MASK);
        let out = stream(
            &mut c,
            &[
                "write to jane.d",
                "oe@exam",
                "ple.com about Project Fal",
                "con ok",
            ],
        )
        .unwrap();
        assert_eq!(out, "write to [EMAIL_REDACTED] about [KEYWORD_REDACTED] ok");
    }

    #[test]
    fn a_streams_run_is_logged_once_with_its_outcome() {
        let mut c = check(MASK);
        let mut log = Log::default();
        c.log_into(&mut log);
        assert!(log.is_empty(), "nothing checked, nothing logged");
        stream(&mut c, &["clean ", "text"]).unwrap();
        c.log_into(&mut log);
        stream(&mut c, &["mail a@b.io ", "now"]).unwrap();
        c.log_into(&mut log);
        assert!(stream(&mut c, &["ssn 123-45-6789 here"]).is_err());
        c.log_into(&mut log);
        let runs: serde_json::Value = serde_json::from_str(&log.information().unwrap()).unwrap();
        let statuses: Vec<_> = runs
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["guardrail_mode"].as_str().unwrap(),
                    r["guardrail_response"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            statuses,
            [
                ("post_call", "allow"),
                ("post_call", "mask"),
                ("post_call", "block")
            ]
        );
    }

    #[test]
    fn long_text_is_released_as_it_goes_and_nothing_is_lost() {
        let mut c = check(MASK);
        let word = "lorem ipsum dolor sit amet, ";
        let mut released = 0;
        let mut all = String::new();
        for _ in 0..100 {
            let piece = c.feed(0, word).unwrap();
            released += piece.len();
            all.push_str(&piece);
        }
        assert!(released > 2000, "released only {released} bytes");
        all.push_str(&c.flush(0).unwrap());
        assert_eq!(all, word.repeat(100));
        assert!(c.pending().is_empty());
    }

    #[test]
    fn a_block_split_across_chunks_refuses_and_choices_are_apart() {
        let mut c = check(MASK);
        assert!(c.feed(0, "my ssn is 123-4").unwrap().is_empty());
        assert_eq!(c.feed(1, "other choice a@b.io").unwrap(), "");
        let err = c.feed(0, "5-6789 ok").unwrap_err();
        assert_eq!(err.to_string(), "Content blocked: us_ssn pattern detected");
        assert_eq!(c.flush(1).unwrap(), "other choice [EMAIL_REDACTED]");
    }

    #[test]
    fn a_mask_only_window_checks_held_text_when_it_goes_out() {
        let mut c = check(
            r#"
- guardrail_name: out
  litellm_params: {guardrail: litellm_content_filter, mode: post_call,
    patterns: [{pattern_type: prebuilt, pattern_name: email, action: MASK}]}
"#,
        );
        assert!(!c.blocks);
        // Under the hold nothing goes out, whatever the text holds.
        assert_eq!(c.feed(0, "mail a@b.io and ").unwrap(), "");
        // Past it, what goes out is masked; the rest at the end.
        let mut out = c.feed(0, &"x ".repeat(100)).unwrap();
        assert!(out.starts_with("mail [EMAIL_REDACTED] and "), "{out}");
        out.push_str(&c.flush(0).unwrap());
        assert_eq!(
            out,
            format!("mail [EMAIL_REDACTED] and {}", "x ".repeat(100))
        );
        let mut log = Log::default();
        c.log_into(&mut log);
        let runs: serde_json::Value = serde_json::from_str(&log.information().unwrap()).unwrap();
        assert_eq!(runs[0]["guardrail_response"], "mask");
        // With a BLOCK rail, held text is checked as it comes.
        let mut c = check(MASK);
        assert!(c.blocks);
        assert!(c.feed(0, "ssn 123-45-6789").is_err());
    }

    #[test]
    fn utf8_is_cut_on_char_boundaries() {
        let mut c = check(MASK);
        let text = "é".repeat(300);
        let mut out = c.feed(0, &text).unwrap();
        out.push_str(&c.flush(0).unwrap());
        assert_eq!(out, text);
    }
}
