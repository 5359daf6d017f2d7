//! Where a content filter pattern can match at all: a prefilter read from
//! the pattern's syntax tree, so that each regex runs on the few windows
//! of a text that could hold a match instead of on every byte of it.
//!
//! From the tree come the pattern's alphabet (every byte a match can
//! hold), its shortest and longest match, and a required run: a class `R`
//! and a length `r` such that every match holds `r` consecutive bytes of
//! `R` (`\d{3}-\d{2}-\d{4}` holds 11 of `[0-9-]`, an email an `@`, a card
//! number 15 of `[0-9\s-]`). One pass over the text reads each byte's
//! classes from a table, eight bytes at a time; an anchor is a byte of `R`,
//! or for a long run an aligned block of 4 or 8 bytes all in `R` (a run of
//! `2k - 1` bytes always covers an aligned block of `k`). An anchor whose
//! run of `R` is shorter than `r` is dropped; otherwise its window is the
//! run of alphabet bytes around it, cut to the longest match on each side,
//! and dropped when shorter than the shortest match. Every match lies
//! inside one window, so a search confined to the windows (look-around
//! still sees the whole text) finds exactly the matches a search of the
//! whole text finds. A pattern without a selective run (letters only, or
//! one that can match the empty string) is searched over the whole text.

mod prepass;

use prepass::Prepass;
use regex_syntax::hir::{Class, Hir, HirKind};

/// A set of bytes.
#[derive(Clone, PartialEq, Eq)]
struct Bytes([bool; 256]);

impl Bytes {
    const EMPTY: Bytes = Bytes([false; 256]);

    fn has(&self, b: u8) -> bool {
        self.0[usize::from(b)]
    }

    fn add_range(&mut self, lo: u8, hi: u8) {
        for b in lo..=hi {
            self.0[usize::from(b)] = true;
        }
    }

    fn union(&mut self, other: &Bytes) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a |= *b;
        }
    }

    /// How often a byte of the set turns up in text, roughly (English prose
    /// and JSON): what an anchor on it would cost.
    fn weight(&self) -> f64 {
        let w: f64 = (0..=255u8).filter(|&b| self.has(b)).map(frequency).sum();
        w.min(1.0)
    }
}

/// A rough share of byte `b` in prose: letters and spaces common, digits
/// and punctuation rare.
fn frequency(b: u8) -> f64 {
    match b {
        b' ' => 0.15,
        b'e' | b't' | b'a' | b'o' | b'i' | b'n' | b's' | b'h' | b'r' => 0.05,
        b'a'..=b'z' => 0.015,
        b'A'..=b'Z' => 0.002,
        b'0'..=b'9' => 0.004,
        b'.' | b',' | b'\n' => 0.01,
        b'"' => 0.005,
        0x80..=0xff => 0.002,
        _ => 0.001,
    }
}

/// `r` consecutive bytes of a class every match holds.
#[derive(Clone)]
struct Run {
    class: Bytes,
    len: usize,
}

/// What the tree says about one node's matches.
struct Summary {
    /// Every byte a match can hold.
    alphabet: Bytes,
    /// The shortest match, in bytes.
    min: usize,
    /// The most selective run every match holds, if any.
    best: Option<Run>,
    /// The rarest class every match holds a byte of, if any.
    rare: Option<Bytes>,
}

/// How an anchor is found.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Anchor {
    /// Any byte of the class.
    Byte,
    /// An aligned block of 4 bytes all in the class (runs of 7 or more).
    Block4,
    /// An aligned block of 8 bytes all in the class (runs of 15 or more).
    Block8,
}

/// Expected anchors per byte of text for `run`, and the way to find them.
fn cost(run: &Run) -> (f64, Anchor) {
    let p = run.class.weight();
    let mut best = (p, Anchor::Byte);
    if run.len >= 7 && p.powi(4) / 4.0 < best.0 {
        best = (p.powi(4) / 4.0, Anchor::Block4);
    }
    if run.len >= 15 && p.powi(8) / 8.0 < best.0 {
        best = (p.powi(8) / 8.0, Anchor::Block8);
    }
    best
}

/// The cheaper of two runs (the longer one on a tie: it drops more anchors).
fn better(a: Option<Run>, b: Option<Run>) -> Option<Run> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let (ca, cb) = (cost(&a).0, cost(&b).0);
            if cb < ca || (cb == ca && b.len > a.len) {
                Some(b)
            } else {
                Some(a)
            }
        }
        (a, b) => a.or(b),
    }
}

/// The rarer of two classes.
fn rarer(a: Option<Bytes>, b: Option<Bytes>) -> Option<Bytes> {
    match (a, b) {
        (Some(a), Some(b)) if b.weight() < a.weight() => Some(b),
        (a, b) => a.or(b),
    }
}

fn class_bytes(class: &Class) -> Bytes {
    let mut set = Bytes::EMPTY;
    match class {
        Class::Bytes(c) => c
            .ranges()
            .iter()
            .for_each(|r| set.add_range(r.start(), r.end())),
        Class::Unicode(c) => {
            for r in c.ranges() {
                let (lo, hi) = (u32::from(r.start()), u32::from(r.end()));
                if lo < 0x80 {
                    set.add_range(lo as u8, hi.min(0x7f) as u8);
                }
                if hi >= 0x80 {
                    // A character past ASCII is bytes 0x80 and up in UTF-8.
                    set.add_range(0x80, 0xff);
                }
            }
        }
    }
    set
}

fn summarize(hir: &Hir) -> Summary {
    let min = hir.properties().minimum_len().unwrap_or(0);
    let (alphabet, best, rare) = match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => (Bytes::EMPTY, None, None),
        HirKind::Literal(lit) => {
            let mut set = Bytes::EMPTY;
            lit.0.iter().for_each(|&b| set.add_range(b, b));
            let rare = lit.0.iter().map(|&b| {
                let mut one = Bytes::EMPTY;
                one.add_range(b, b);
                one
            });
            (set, None, rare.fold(None, |a, b| rarer(a, Some(b))))
        }
        HirKind::Class(c) => (class_bytes(c), None, None),
        HirKind::Capture(c) => {
            let s = summarize(&c.sub);
            (s.alphabet, s.best, s.rare)
        }
        HirKind::Repetition(rep) => {
            let s = summarize(&rep.sub);
            if rep.min >= 1 {
                (s.alphabet, s.best, s.rare)
            } else {
                (s.alphabet, None, None)
            }
        }
        HirKind::Concat(subs) => {
            let subs: Vec<Summary> = subs.iter().map(summarize).collect();
            let mut alphabet = Bytes::EMPTY;
            let (mut best, mut rare) = (None, None);
            for (i, s) in subs.iter().enumerate() {
                alphabet.union(&s.alphabet);
                best = better(best, s.best.clone());
                rare = rarer(rare, s.rare.clone());
                // Children i..=j match side by side: one run of their
                // alphabets as long as their shortest matches together.
                let mut class = Bytes::EMPTY;
                let mut len = 0usize;
                for t in subs[i..].iter().take(MAX_RUN_CHILDREN) {
                    class.union(&t.alphabet);
                    len = len.saturating_add(t.min);
                    if len > 0 {
                        best = better(
                            best,
                            Some(Run {
                                class: class.clone(),
                                len,
                            }),
                        );
                    }
                }
            }
            (alphabet, best, rare)
        }
        HirKind::Alternation(subs) => {
            let subs: Vec<Summary> = subs.iter().map(summarize).collect();
            let mut alphabet = Bytes::EMPTY;
            let mut run = Some(Run {
                class: Bytes::EMPTY,
                len: usize::MAX,
            });
            let mut rare = Some(Bytes::EMPTY);
            for s in &subs {
                alphabet.union(&s.alphabet);
                rare = match (rare, &s.rare) {
                    (Some(mut r), Some(b)) => {
                        r.union(b);
                        Some(r)
                    }
                    _ => None,
                };
                // Every branch holds its own run: together, their classes'
                // union for the shortest of their lengths.
                run = match (run, &s.best) {
                    (Some(mut r), Some(b)) => {
                        r.class.union(&b.class);
                        r.len = r.len.min(b.len);
                        Some(r)
                    }
                    _ => None,
                };
            }
            let run = run.filter(|r| r.len >= 1 && r.len < usize::MAX);
            (alphabet, run, rare.filter(|_| !subs.is_empty()))
        }
    };
    // The whole match is itself a run of its alphabet.
    let whole = (min > 0).then(|| Run {
        class: alphabet.clone(),
        len: min,
    });
    let rare = rarer(rare, best.as_ref().map(|r| r.class.clone()));
    let rare = rarer(rare, whole.as_ref().map(|r| r.class.clone()));
    let best = better(best, whole);
    Summary {
        alphabet,
        min,
        best,
        rare,
    }
}

/// Anchors per byte above which a pattern is searched whole: its regex's
/// own prefilter or automaton is then cheaper than windows.
const MAX_ANCHOR_RATE: f64 = 0.05;
/// Children of a concatenation looked at together for one run (bounds the
/// work on a long custom pattern at start-up).
const MAX_RUN_CHILDREN: usize = 32;

/// The prefilter of one pattern.
struct Gate {
    alphabet: Bytes,
    run: Run,
    /// A class every match holds a byte of, rarer than the run's: a window
    /// without one is dropped.
    rare: Option<Bytes>,
    anchor: Anchor,
    /// The class's bit in [`Gates`]' table.
    bit: u64,
    min: usize,
    max: Option<usize>,
}

/// The prefilters of a filter's patterns, in the filter's order.
pub struct Gates {
    /// Per byte, the bits of the classes it belongs to.
    table: Box<[u64; 256]>,
    /// Bits whose patterns anchor on a byte, on a 4-byte block, on an
    /// 8-byte block.
    byte: u64,
    block4: u64,
    block8: u64,
    /// `None`: the pattern is searched over the whole text.
    gates: Vec<Option<Gate>>,
    /// The vector pass that skips blocks without an anchor (`None` on a
    /// CPU without SSSE3: the table pass reads every byte).
    prepass: Option<Prepass>,
}

/// Most windows whose room [`Windows::trim`] keeps for the next text.
const KEPT_WINDOWS: usize = 4096;

/// Byte ranges of a text, per pattern, where its matches can be.
#[derive(Default)]
pub struct Windows {
    /// `(pattern, start, end)`, sorted; windows of one pattern do not
    /// overlap.
    spans: Vec<(usize, usize, usize)>,
    /// Per pattern: the end of the last run of its class looked at, and its
    /// last window's index in `spans`.
    state: Vec<(usize, usize)>,
}

impl Windows {
    /// The windows of pattern `i` (call after [`Gates::windows`]), in order.
    pub fn of(&self, i: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        let from = self.spans.partition_point(|s| s.0 < i);
        self.spans[from..]
            .iter()
            .take_while(move |s| s.0 == i)
            .map(|s| (s.1, s.2))
    }

    /// Lets go of the buffers when a long text grew them past what a
    /// usual one needs (they are kept for the next text).
    pub fn trim(&mut self) {
        if self.spans.capacity() > KEPT_WINDOWS {
            *self = Windows::default();
        }
    }

    /// Bytes covered, over all patterns.
    pub fn total(&self) -> usize {
        self.spans.iter().map(|s| s.2 - s.1).sum()
    }
}

impl Gates {
    /// The prefilters of the patterns whose syntax trees are `hirs`.
    pub fn new(hirs: &[&Hir]) -> Gates {
        let mut table = Box::new([0u64; 256]);
        let mut classes: Vec<Bytes> = Vec::new();
        let (mut byte, mut block4, mut block8) = (0, 0, 0);
        let mut gates = Vec::with_capacity(hirs.len());
        for hir in hirs {
            let s = summarize(hir);
            let max = hir.properties().maximum_len();
            let gate = s.best.filter(|_| s.min > 0).and_then(|run| {
                let (rate, anchor) = cost(&run);
                if rate > MAX_ANCHOR_RATE {
                    return None;
                }
                // The whole match as the run, when an earlier pattern
                // anchors the same way on its alphabet: its blocks are
                // read anyway, so it costs the table pass (and the vector
                // pass) nothing more than this pattern's own run would.
                let whole = Run {
                    class: s.alphabet.clone(),
                    len: s.min,
                };
                let (whole_rate, whole_anchor) = cost(&whole);
                let shared = classes
                    .iter()
                    .position(|c| *c == whole.class)
                    .is_some_and(|i| {
                        let bits = match whole_anchor {
                            Anchor::Byte => byte,
                            Anchor::Block4 => block4,
                            Anchor::Block8 => block8,
                        };
                        bits & 1 << i != 0
                    });
                let (run, anchor) = if shared && whole_rate <= MAX_ANCHOR_RATE {
                    (whole, whole_anchor)
                } else {
                    (run, anchor)
                };
                let index = match classes.iter().position(|c| *c == run.class) {
                    Some(i) => i,
                    None if classes.len() < 64 => {
                        classes.push(run.class.clone());
                        classes.len() - 1
                    }
                    None => return None,
                };
                let bit = 1u64 << index;
                match anchor {
                    Anchor::Byte => byte |= bit,
                    Anchor::Block4 => block4 |= bit,
                    Anchor::Block8 => block8 |= bit,
                }
                let rare = s.rare.filter(|r| r.weight() < run.class.weight());
                Some(Gate {
                    alphabet: s.alphabet,
                    run,
                    rare,
                    anchor,
                    bit,
                    min: s.min,
                    max,
                })
            });
            gates.push(gate);
        }
        let mut anchors = Vec::new();
        for (i, class) in classes.iter().enumerate() {
            for b in 0..=255u8 {
                if class.has(b) {
                    table[usize::from(b)] |= 1 << i;
                }
            }
            for (bits, anchor) in [
                (byte, Anchor::Byte),
                (block4, Anchor::Block4),
                (block8, Anchor::Block8),
            ] {
                if bits & 1 << i != 0 {
                    anchors.push((anchor, class));
                }
            }
        }
        let prepass = Prepass::new(&anchors);
        Gates {
            table,
            byte,
            block4,
            block8,
            gates,
            prepass,
        }
    }

    /// Fills `out` with the windows of every pattern in `text`.
    pub fn windows(&self, text: &[u8], out: &mut Windows) {
        out.spans.clear();
        out.state.clear();
        out.state.resize(self.gates.len(), (0, usize::MAX));
        for (i, g) in self.gates.iter().enumerate() {
            if g.is_none() {
                out.spans.push((i, 0, text.len()));
            }
        }
        // Blocks the vector pass lets through, then what it leaves at the
        // end, go through the table pass eight bytes at a time.
        let from = match &self.prepass {
            Some(p) => p.blocks(text, &mut |at, len| {
                (at..at + len)
                    .step_by(8)
                    .for_each(|at| self.eight(text, at, out))
            }),
            None => 0,
        };
        let t = &*self.table;
        let mut chunks = text[from..].chunks_exact(8);
        for (n, _) in chunks.by_ref().enumerate() {
            self.eight(text, from + n * 8, out);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let any = rest.iter().fold(0, |a, &b| a | t[usize::from(b)]);
            let all4 = if rest.len() >= 4 {
                rest[..4].iter().fold(!0, |a, &b| a & t[usize::from(b)])
            } else {
                0
            };
            let hits = [any & self.byte, all4 & self.block4, 0];
            if hits != [0; 3] {
                self.chunk(text, text.len() - rest.len(), rest.len(), hits, out);
            }
        }
        out.spans.sort_unstable();
    }

    /// The table pass on the eight bytes at `at`.
    #[inline(always)]
    fn eight(&self, text: &[u8], at: usize, out: &mut Windows) {
        let t = &*self.table;
        let Some(c) = text[at..].first_chunk::<8>() else {
            return;
        };
        let v = |i: usize| t[usize::from(c[i])];
        let (a0, a1, a2, a3) = (v(0), v(1), v(2), v(3));
        let (a4, a5, a6, a7) = (v(4), v(5), v(6), v(7));
        let (lo_all, hi_all) = (a0 & a1 & a2 & a3, a4 & a5 & a6 & a7);
        let any = a0 | a1 | a2 | a3 | a4 | a5 | a6 | a7;
        let block4 = (lo_all | hi_all) & self.block4;
        let block8 = lo_all & hi_all & self.block8;
        if (any & self.byte) | block4 | block8 != 0 {
            self.chunk(text, at, 8, [any & self.byte, block4, block8], out);
        }
    }

    /// The anchors of the chunk `at..at + len` for the patterns whose bits
    /// `hits` holds (byte, 4-block, 8-block anchors).
    fn chunk(&self, text: &[u8], at: usize, len: usize, hits: [u64; 3], out: &mut Windows) {
        for (i, g) in self.gates.iter().enumerate() {
            let Some(g) = g else { continue };
            let hit = match g.anchor {
                Anchor::Byte => hits[0],
                Anchor::Block4 => hits[1],
                Anchor::Block8 => hits[2],
            };
            if hit & g.bit == 0 {
                continue;
            }
            match g.anchor {
                Anchor::Byte => {
                    for x in at..at + len {
                        if x >= out.state[i].0 && g.run.class.has(text[x]) {
                            self.run(i, g, text, x, out);
                        }
                    }
                }
                Anchor::Block4 | Anchor::Block8 => {
                    let size = if g.anchor == Anchor::Block4 { 4 } else { 8 };
                    let mut x = at;
                    while x + size <= at + len {
                        let full = text[x..x + size].iter().all(|&b| g.run.class.has(b));
                        if x >= out.state[i].0 && full {
                            self.run(i, g, text, x, out);
                        }
                        x += size;
                    }
                }
            }
        }
    }

    /// The window of pattern `i` around the run of its class holding `x`.
    fn run(&self, i: usize, g: &Gate, text: &[u8], x: usize, out: &mut Windows) {
        let (mut start, mut end) = (x, x);
        while start > 0 && g.run.class.has(text[start - 1]) {
            start -= 1;
        }
        while end < text.len() && g.run.class.has(text[end]) {
            end += 1;
        }
        out.state[i].0 = end;
        if end - start < g.run.len {
            return;
        }
        // A match holding a byte of this run starts and ends within the
        // longest match of it.
        let (floor, ceiling) = match g.max {
            Some(max) => (
                start.saturating_sub(max),
                end.saturating_add(max).min(text.len()),
            ),
            None => (0, text.len()),
        };
        let last = out.spans.get(out.state[i].1).map(|s| (s.1, s.2));
        // Bytes of the last window are all alphabet bytes: no need to
        // look at them again.
        let left_stop = last.map_or(floor, |(_, e)| floor.max(e.min(start)));
        let mut lo = start;
        while lo > left_stop && g.alphabet.has(text[lo - 1]) {
            lo -= 1;
        }
        let mut hi = match last {
            Some((s, e)) if s <= end && end < e => e.min(ceiling),
            _ => end,
        };
        while hi < ceiling && g.alphabet.has(text[hi]) {
            hi += 1;
        }
        match last {
            Some((s, e)) if lo <= e => {
                let w = &mut out.spans[out.state[i].1];
                w.1 = s;
                w.2 = e.max(hi);
            }
            _ => {
                let rare = |r: &Bytes| text[lo..hi].iter().any(|&b| r.has(b));
                if hi - lo >= g.min && g.rare.as_ref().is_none_or(rare) {
                    out.state[i].1 = out.spans.len();
                    out.spans.push((i, lo, hi));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guardrails::patterns::PREBUILT;
    use regex_automata::util::syntax;

    fn gates(patterns: &[&str]) -> Gates {
        let config = syntax::Config::new()
            .unicode(false)
            .case_insensitive(true)
            .utf8(false);
        let hirs: Vec<Hir> = patterns
            .iter()
            .map(|p| syntax::parse_with(p, &config).unwrap())
            .collect();
        Gates::new(&hirs.iter().collect::<Vec<_>>())
    }

    fn windows(g: &Gates, text: &str) -> Vec<Vec<(usize, usize)>> {
        let mut w = Windows::default();
        g.windows(text.as_bytes(), &mut w);
        (0..g.gates.len()).map(|i| w.of(i).collect()).collect()
    }

    #[test]
    fn every_prebuilt_pattern_is_narrowed_and_clean_prose_has_no_window() {
        let all: Vec<&str> = PREBUILT.iter().map(|p| p.regex).collect();
        let g = gates(&all);
        for (p, gate) in PREBUILT.iter().zip(&g.gates) {
            assert!(gate.is_some(), "{} is searched whole", p.name);
        }
        let prose = "The quarterly report shows steady growth across all regions, \
            and the team plans to review it on Monday.\n        Indented lines, \
            \"quotes\", internationalization and acknowledgements stay clean. ";
        let text = prose.repeat(20);
        assert!(windows(&g, &text).iter().all(Vec::is_empty));
    }

    #[test]
    fn a_window_holds_the_match_and_little_else() {
        let g = gates(&[
            r"\b\d{3}-\d{2}-\d{4}\b",
            r"\b[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}\b",
        ]);
        let text = "year 2024, ssn 123-45-6789; mail: jane.doe@example.com, dates 2024-12-05.";
        let w = windows(&g, text);
        let ssn = text.find("123").unwrap();
        assert_eq!(w[0], vec![(ssn, ssn + 11)]);
        let mail = text.find("jane").unwrap();
        assert_eq!(w[1], vec![(mail, mail + "jane.doe@example.com".len())]);
    }

    /// Texts mixing prose, digits, separators and key-like runs, long
    /// enough to cross several vector blocks.
    fn mixed_text() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let piece = prop_oneof![
            Just(&b"the quick brown fox "[..]),
            Just(&b"internationalization "[..]),
            Just(&b"123-45-6789"[..]),
            Just(&b"4111 1111 1111 1111"[..]),
            Just(&b"jane.doe@example.com"[..]),
            Just(&b"AKIAABCDEFGHIJKLMNOP"[..]),
            Just(&b"sk-ant-abcdefghijklmnopqrstuv"[..]),
            Just(&b"-----BEGIN PRIVATE KEY-----"[..]),
            Just(&b"192.168.0.1"[..]),
            Just(&b"    "[..]),
            Just(&b"\n\t"[..]),
            Just("héllo wörld ".as_bytes()),
        ];
        let byte = any::<u8>().prop_map(|b| vec![b]);
        proptest::collection::vec(
            prop_oneof![3 => piece.prop_map(<[u8]>::to_vec), 1 => byte],
            0..40,
        )
        .prop_map(|pieces| pieces.concat())
    }

    proptest::proptest! {
        #[test]
        fn the_vector_pass_finds_the_windows_the_table_pass_finds(text in mixed_text(), skip in 0usize..16) {
            // The vector pass as the CPU runs it (AVX2 here), on 16-byte
            // SSSE3 blocks, and the table pass alone.
            static ALL: std::sync::OnceLock<[Gates; 3]> = std::sync::OnceLock::new();
            let [vector, narrow, table] = ALL.get_or_init(|| {
                let all: Vec<&str> = PREBUILT.iter().map(|p| p.regex).collect();
                let mut narrow = gates(&all);
                narrow.prepass = narrow.prepass.as_ref().map(Prepass::without_avx2);
                let mut table = gates(&all);
                table.prepass = None;
                [gates(&all), narrow, table]
            });
            let text = &text[skip.min(text.len())..];
            let mut expected = Windows::default();
            table.windows(text, &mut expected);
            for g in [vector, narrow] {
                let mut w = Windows::default();
                g.windows(text, &mut w);
                proptest::prop_assert_eq!(&w.spans, &expected.spans);
            }
        }
    }

    #[test]
    fn the_vector_pass_skips_most_prose_and_stops_at_anchors() {
        let all: Vec<&str> = PREBUILT.iter().map(|p| p.regex).collect();
        let g = gates(&all);
        let Some(p) = &g.prepass else {
            return; // No SSSE3: nothing to test.
        };
        let prose = "the quick brown fox jumps over the lazy dog while the gateway routes ";
        let text = prose.repeat(16).into_bytes();
        let mut hits = Vec::new();
        let end = p.blocks(&text, &mut |at, len| hits.push((at, len)));
        assert!(end <= text.len() && text.len() - end < 32 && end % 16 == 0);
        assert!(hits.len() * 8 <= end / 16, "{hits:?}");
        let mut text = text;
        text[70] = b'@';
        hits.clear();
        p.blocks(&text, &mut |at, len| hits.push((at, len)));
        assert!(hits.iter().any(|&(at, len)| (at..at + len).contains(&70)));
    }

    #[test]
    fn a_key_pattern_shares_the_block_anchor_of_its_alphabet() {
        let g = gates(&[r"\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b", r"\bAKIA[0-9A-Z]{16}\b"]);
        let anchors: Vec<Anchor> = g.gates.iter().map(|g| g.as_ref().unwrap().anchor).collect();
        assert_eq!(anchors, [Anchor::Block8, Anchor::Block8]);
        let text = "quick kite, AKIAABCDEFGHIJKLMNOP!";
        let w = windows(&g, text);
        let key = text.find("AKIA").unwrap();
        assert_eq!(w[1], vec![(key, key + 20)]);
    }

    #[test]
    fn a_pattern_that_can_match_empty_or_any_letter_is_searched_whole() {
        let g = gates(&[r"\d*", r"[a-z]+", r"[^a]{3}"]);
        let w = windows(&g, "abc def");
        assert_eq!(w, vec![vec![(0, 7)]; 3]);
    }
}
