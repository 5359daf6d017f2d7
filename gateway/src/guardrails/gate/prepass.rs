//! A vector pass in front of [`Gates`](super::Gates)' table pass: it finds
//! the 16- or 32-byte blocks of a text that may hold an anchor, so the
//! table pass (eight table loads per eight bytes) reads only those.
//!
//! Each byte is classified with two 16-entry nibble tables (`pshufb`, the
//! "shufti" method): its bits are `lo[byte & 15] & hi[byte >> 4]`, each
//! bit a product of low nibbles and high nibbles. The pass tests a few
//! sets, each a union of bits: one holding every byte anchor's class, up
//! to two that each hold some of the 4-block anchors' classes, up to two
//! for the 8-block anchors'. A block passes when it holds a byte of the
//! first, or an aligned 4 (8) bytes all in one of the others.
//!
//! A set is exact with one bit per distinct row of its bytes (the low
//! nibbles present under one high nibble). Merging two classes into one
//! set, or two bits into one, only widens the sets: a block the table
//! pass finds an anchor in always passes (an anchor byte is in the first
//! set; 4 or 8 aligned bytes all in one class are all in the set holding
//! it, and both passes count blocks from the text's start). Merges are
//! chosen to let the fewest blocks of prose through (by the byte shares
//! [`Bytes::weight`] guesses).

use super::{Anchor, Bytes};

/// Sets of 4-block (and of 8-block) anchors the pass tests.
const SETS_PER_KIND: usize = 2;
/// Bits a nibble table holds.
const BITS: usize = 8;

/// The nibble tables and the bits of the sets.
#[derive(Clone)]
pub(super) struct Prepass {
    lo: [u8; 16],
    hi: [u8; 16],
    /// Bits of the byte anchors' set.
    byte: u8,
    /// Bits of the 4-block anchors' sets (zero: no set).
    four: [u8; SETS_PER_KIND],
    /// Bits of the 8-block anchors' sets (zero: no set).
    eight: [u8; SETS_PER_KIND],
    /// Whether the CPU runs AVX2 (32-byte blocks) besides SSSE3.
    avx2: bool,
}

/// A set of bytes as a product: low nibbles × high nibbles.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Product {
    lo: u16,
    hi: u16,
}

impl Product {
    fn has(self, b: u8) -> bool {
        self.lo & (1 << (b & 15)) != 0 && self.hi & (1 << (b >> 4)) != 0
    }

    /// The smallest product holding both.
    fn merged(self, other: Product) -> Product {
        Product {
            lo: self.lo | other.lo,
            hi: self.hi | other.hi,
        }
    }
}

/// One set the pass tests: how its anchors are found, its bytes, and
/// (once bits are given out) its bits as indices into the products.
struct Set {
    anchor: Anchor,
    bytes: Bytes,
    bits: Vec<usize>,
}

/// Expected passes per 32-byte block of prose that `bytes` as a set of
/// `anchor` causes (bytes taken as independent: a rough ranking).
fn passes(anchor: Anchor, bytes: &Bytes) -> f64 {
    let w = bytes.weight();
    match anchor {
        Anchor::Byte => 32.0 * w,
        Anchor::Block4 => 8.0 * w.powi(4),
        Anchor::Block8 => 4.0 * w.powi(8),
    }
}

/// `set` as products, one per distinct row, found in `bits` (shared with
/// the sets before) or added to it; their indices.
fn products(set: &Bytes, bits: &mut Vec<Product>) -> Vec<usize> {
    let mut rows: Vec<Product> = Vec::new();
    for h in 0..16u8 {
        let row = (0..16u8)
            .filter(|&l| set.has(h << 4 | l))
            .fold(0u16, |row, l| row | 1 << l);
        if row == 0 {
            continue;
        }
        match rows.iter_mut().find(|p| p.lo == row) {
            Some(p) => p.hi |= 1 << h,
            None => rows.push(Product {
                lo: row,
                hi: 1 << h,
            }),
        }
    }
    rows.into_iter()
        .map(|p| match bits.iter().position(|b| *b == p) {
            Some(i) => i,
            None => {
                bits.push(p);
                bits.len() - 1
            }
        })
        .collect()
}

/// The bytes of the union of `bits`' products.
fn bytes_of(bits: &[Product], of: impl Iterator<Item = usize> + Clone) -> Bytes {
    let mut set = Bytes::EMPTY;
    for b in 0..=255u8 {
        set.0[usize::from(b)] = of.clone().any(|i| bits[i].has(b));
    }
    set
}

impl Prepass {
    /// The pass for `anchors` (each class with the way it is anchored),
    /// or `None` when the CPU lacks SSSE3 (or is not x86-64): the table
    /// pass then reads every byte.
    pub(super) fn new(anchors: &[(Anchor, &Bytes)]) -> Option<Prepass> {
        let avx2 = vector_support()?;
        let mut sets = vec![Set {
            anchor: Anchor::Byte,
            bytes: Bytes::EMPTY,
            bits: Vec::new(),
        }];
        for &(anchor, class) in anchors {
            match anchor {
                Anchor::Byte => sets[0].bytes.union(class),
                _ => sets.push(Set {
                    anchor,
                    bytes: class.clone(),
                    bits: Vec::new(),
                }),
            }
        }
        merge_sets(&mut sets);
        let mut bits = Vec::new();
        for set in &mut sets {
            set.bits = products(&set.bytes, &mut bits);
        }
        merge_bits(&mut sets, &mut bits);
        let mut pass = Prepass {
            lo: [0; 16],
            hi: [0; 16],
            byte: 0,
            four: [0; SETS_PER_KIND],
            eight: [0; SETS_PER_KIND],
            avx2,
        };
        for (k, p) in bits.iter().enumerate() {
            for n in 0..16 {
                if p.lo & (1 << n) != 0 {
                    pass.lo[n] |= 1 << k;
                }
                if p.hi & (1 << n) != 0 {
                    pass.hi[n] |= 1 << k;
                }
            }
        }
        let (mut fours, mut eights) = (pass.four.iter_mut(), pass.eight.iter_mut());
        for set in &sets {
            let mask = set.bits.iter().fold(0u8, |m, &k| m | 1 << k);
            let slot = match set.anchor {
                Anchor::Byte => Some(&mut pass.byte),
                Anchor::Block4 => fours.next(),
                Anchor::Block8 => eights.next(),
            };
            // `merge_sets` leaves at most `SETS_PER_KIND` of each kind.
            *slot? = mask;
        }
        Some(pass)
    }

    /// Calls `hit(at, len)` for each block `at..at + len` of `text` that
    /// may hold an anchor, in order; blocks start at multiples of 16 from
    /// the text's start. Returns where the blocks end: the table pass
    /// reads the rest.
    pub(super) fn blocks(&self, text: &[u8], hit: &mut dyn FnMut(usize, usize)) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            if self.avx2 {
                // SAFETY: `avx2` is set only when the CPU runs AVX2
                // (`vector_support`).
                return unsafe { x86::blocks_avx2(self, text, hit) };
            }
            // SAFETY: a `Prepass` exists only when the CPU runs SSSE3
            // (`vector_support`).
            unsafe { x86::blocks_ssse3(self, text, hit) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (text, hit);
            unreachable!("no prepass is built off x86-64")
        }
    }
}

#[cfg(test)]
impl Prepass {
    /// The same pass on 16-byte SSSE3 blocks even where AVX2 runs.
    pub(super) fn without_avx2(&self) -> Prepass {
        Prepass {
            avx2: false,
            ..self.clone()
        }
    }
}

/// Merges the block sets of each kind, two at a time (the pair whose union
/// lets the fewest more blocks through), until at most `SETS_PER_KIND` of
/// each kind are left.
fn merge_sets(sets: &mut Vec<Set>) {
    for kind in [Anchor::Block4, Anchor::Block8] {
        loop {
            let of_kind: Vec<usize> = (0..sets.len())
                .filter(|&i| sets[i].anchor == kind)
                .collect();
            if of_kind.len() <= SETS_PER_KIND {
                break;
            }
            let mut best: Option<(f64, usize, usize)> = None;
            for (n, &i) in of_kind.iter().enumerate() {
                for &j in &of_kind[n + 1..] {
                    let mut union = sets[i].bytes.clone();
                    union.union(&sets[j].bytes);
                    let more = passes(kind, &union)
                        - passes(kind, &sets[i].bytes)
                        - passes(kind, &sets[j].bytes);
                    if best.is_none_or(|(m, _, _)| more < m) {
                        best = Some((more, i, j));
                    }
                }
            }
            let Some((_, i, j)) = best else { break };
            let other = sets.remove(j);
            sets[i].bytes.union(&other.bytes);
        }
    }
}

/// Merges bits two at a time (the pair whose merge lets the fewest more
/// blocks through, over every set) until `BITS` are left; each set's
/// bytes become what its bits hold.
fn merge_bits(sets: &mut [Set], bits: &mut Vec<Product>) {
    while bits.len() > BITS {
        let mut best: Option<(f64, usize, usize)> = None;
        for a in 0..bits.len() {
            for b in a + 1..bits.len() {
                let mut trial = bits.clone();
                trial[a] = trial[a].merged(trial[b]);
                let total: f64 = sets
                    .iter()
                    .map(|s| {
                        let of = s.bits.iter().map(|&k| if k == b { a } else { k });
                        passes(s.anchor, &bytes_of(&trial, of))
                    })
                    .sum();
                if best.is_none_or(|(t, _, _)| total < t) {
                    best = Some((total, a, b));
                }
            }
        }
        let Some((_, a, b)) = best else { break };
        bits[a] = bits[a].merged(bits[b]);
        bits.remove(b);
        for set in sets.iter_mut() {
            for k in set.bits.iter_mut() {
                if *k == b {
                    *k = a;
                } else if *k > b {
                    *k -= 1;
                }
            }
            set.bits.sort_unstable();
            set.bits.dedup();
        }
    }
}

/// `Some(whether AVX2 runs)` when SSSE3 does; `None` otherwise.
fn vector_support() -> Option<bool> {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("ssse3").then(|| std::is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Prepass;
    use std::arch::x86_64::*;

    /// 16-byte blocks, SSSE3.
    #[target_feature(enable = "ssse3")]
    pub(super) fn blocks_ssse3(
        p: &Prepass,
        text: &[u8],
        hit: &mut dyn FnMut(usize, usize),
    ) -> usize {
        // SAFETY (both loads): `t` is 16 readable bytes; the load is
        // unaligned.
        let lo_t = unsafe { _mm_loadu_si128(p.lo.as_ptr().cast()) };
        let hi_t = unsafe { _mm_loadu_si128(p.hi.as_ptr().cast()) };
        let splat = |m: u8| _mm_set1_epi8(m as i8);
        let (mb, m4a, m4b) = (splat(p.byte), splat(p.four[0]), splat(p.four[1]));
        let (m8a, m8b) = (splat(p.eight[0]), splat(p.eight[1]));
        let nibble = _mm_set1_epi8(0x0f);
        let zero = _mm_setzero_si128();
        let mut chunks = text.chunks_exact(16);
        for (n, c) in chunks.by_ref().enumerate() {
            // SAFETY: `c` is 16 readable bytes; the load is unaligned.
            let v = unsafe { _mm_loadu_si128(c.as_ptr().cast()) };
            let lo = _mm_and_si128(v, nibble);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), nibble);
            let class = _mm_and_si128(_mm_shuffle_epi8(lo_t, lo), _mm_shuffle_epi8(hi_t, hi));
            // 0xff where a byte is not in the set.
            let out = |m| _mm_cmpeq_epi8(_mm_and_si128(class, m), zero);
            // All ones in each 4-byte lane all in the set.
            let all4 = |m| _mm_cmpeq_epi32(out(m), zero);
            // ... in each 8-byte half all in the set.
            let all8 = |m| {
                let a = all4(m);
                _mm_and_si128(a, _mm_shuffle_epi32::<0b10_11_00_01>(a))
            };
            let runs = _mm_or_si128(
                _mm_or_si128(all4(m4a), all4(m4b)),
                _mm_or_si128(all8(m8a), all8(m8b)),
            );
            let quiet = _mm_andnot_si128(runs, out(mb));
            if _mm_movemask_epi8(quiet) != 0xffff {
                hit(n * 16, 16);
            }
        }
        text.len() - chunks.remainder().len()
    }

    /// 32-byte blocks, AVX2 (the same steps on two 16-byte lanes).
    #[target_feature(enable = "avx2")]
    pub(super) fn blocks_avx2(
        p: &Prepass,
        text: &[u8],
        hit: &mut dyn FnMut(usize, usize),
    ) -> usize {
        // SAFETY (both loads): `t` is 16 readable bytes; the load is
        // unaligned.
        let lo_t = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(p.lo.as_ptr().cast()) });
        let hi_t = _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(p.hi.as_ptr().cast()) });
        let splat = |m: u8| _mm256_set1_epi8(m as i8);
        let (mb, m4a, m4b) = (splat(p.byte), splat(p.four[0]), splat(p.four[1]));
        let (m8a, m8b) = (splat(p.eight[0]), splat(p.eight[1]));
        let nibble = _mm256_set1_epi8(0x0f);
        let zero = _mm256_setzero_si256();
        let mut chunks = text.chunks_exact(32);
        for (n, c) in chunks.by_ref().enumerate() {
            // SAFETY: `c` is 32 readable bytes; the load is unaligned.
            let v = unsafe { _mm256_loadu_si256(c.as_ptr().cast()) };
            let lo = _mm256_and_si256(v, nibble);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), nibble);
            let class =
                _mm256_and_si256(_mm256_shuffle_epi8(lo_t, lo), _mm256_shuffle_epi8(hi_t, hi));
            let out = |m| _mm256_cmpeq_epi8(_mm256_and_si256(class, m), zero);
            let all4 = |m| _mm256_cmpeq_epi32(out(m), zero);
            let all8 = |m| {
                let a = all4(m);
                _mm256_and_si256(a, _mm256_shuffle_epi32::<0b10_11_00_01>(a))
            };
            let runs = _mm256_or_si256(
                _mm256_or_si256(all4(m4a), all4(m4b)),
                _mm256_or_si256(all8(m8a), all8(m8b)),
            );
            let quiet = _mm256_andnot_si256(runs, out(mb));
            if _mm256_movemask_epi8(quiet) != -1 {
                hit(n * 32, 32);
            }
        }
        text.len() - chunks.remainder().len()
    }
}
