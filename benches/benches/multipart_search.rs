//! The boundary search of a streamed 25 MB upload (issue 36): what the
//! tail scanner (`gateway::inbound::form_tail`) does to every byte of a
//! file part, beside the skipping searches that were proposed for it.
//!
//! Each search looks for `\r\n--` and a boundary in 25 MiB of random bytes
//! (compressed audio is close to random), one relay read at a time:
//! - `hot`: one 256 KiB read searched 100 times, as the scanner meets a
//!   read the kernel just copied into the relay buffer (in cache);
//! - `cold`: the 25 MiB walked read by read, every byte from memory.
//!
//! The searches: the gateway's `TailScanner::feed` (memchr's `memmem`,
//! a vectorized two-byte prefilter over every byte), `memmem::Finder`
//! alone, Boyer-Moore-Horspool (looks at one byte per window and skips up
//! to the delimiter's length: a chain of dependent loads), and a stride
//! check of one byte pair per window (independent loads, every pair of
//! the delimiter in a 64 Kbit table). Boundaries: the 32 hex digits
//! `httpx` (the OpenAI Python SDK) writes, and the relay benchmark's 28.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gateway::inbound::form::AUDIO_DECIDING;
use gateway::inbound::form_tail::TailScanner;
use memchr::memmem;

/// One relay read.
const READ: usize = 256 << 10;
/// Reads in an upload: 25 MiB.
const READS: usize = 100;

/// Deterministic random bytes (xorshift64).
fn random_bytes(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Boyer-Moore-Horspool: compares the window's last byte, then skips by
/// the distance of that byte's last place in the needle from its end.
struct Horspool {
    needle: Vec<u8>,
    shift: [usize; 256],
}

impl Horspool {
    fn new(needle: &[u8]) -> Horspool {
        let d = needle.len();
        let mut shift = [d; 256];
        for (i, &b) in needle[..d - 1].iter().enumerate() {
            shift[b as usize] = d - 1 - i;
        }
        Horspool {
            needle: needle.to_vec(),
            shift,
        }
    }

    fn find(&self, hay: &[u8]) -> Option<usize> {
        let d = self.needle.len();
        let last = self.needle[d - 1];
        let mut at = 0;
        while at + d <= hay.len() {
            let b = hay[at + d - 1];
            if b == last && hay[at..at + d] == self.needle[..] {
                return Some(at);
            }
            at += self.shift[b as usize];
        }
        None
    }
}

/// A stride check: every window of the needle's length holds a byte pair
/// starting at a multiple of `len - 1` (offset `len - 2`); a pair found in
/// the needle's pair table is verified at each alignment it allows.
struct StridePairs {
    needle: Vec<u8>,
    pairs: Box<[u64; 1024]>,
}

impl StridePairs {
    fn new(needle: &[u8]) -> StridePairs {
        let mut pairs = Box::new([0u64; 1024]);
        for w in needle.windows(2) {
            let v = u16::from_le_bytes([w[0], w[1]]) as usize;
            pairs[v >> 6] |= 1 << (v & 63);
        }
        StridePairs {
            needle: needle.to_vec(),
            pairs,
        }
    }

    fn find(&self, hay: &[u8]) -> Option<usize> {
        let d = self.needle.len();
        if hay.len() < d {
            return None;
        }
        let stride = d - 1;
        let mut at = d - 2;
        while at + 1 < hay.len() {
            let v = u16::from_le_bytes([hay[at], hay[at + 1]]) as usize;
            if self.pairs[v >> 6] & (1 << (v & 63)) != 0 {
                let lo = (at + 2).saturating_sub(d);
                let hi = at.min(hay.len() - d);
                if let Some(m) = (lo..=hi).find(|&s| hay[s..s + d] == self.needle[..]) {
                    return Some(m);
                }
            }
            at += stride;
        }
        None
    }
}

fn searches(c: &mut Criterion) {
    let upload = random_bytes(READ * READS);
    for boundary in [
        "0123456789abcdef0123456789abcdef",
        "benchboundary7MA4YWxkTrZu0gW",
    ] {
        let needle = [b"\r\n--", boundary.as_bytes()].concat();
        assert!(memmem::find(&upload, &needle).is_none());
        let finder = memmem::Finder::new(&needle);
        let horspool = Horspool::new(&needle);
        let pairs = StridePairs::new(&needle);
        let mut group = c.benchmark_group(format!("multipart_search_{}", boundary.len()));
        group.throughput(Throughput::Bytes((READ * READS) as u64));
        group.sample_size(20);
        let hot = &upload[..READ];
        for (layout, reads) in [
            ("hot", vec![hot; READS]),
            ("cold", upload.chunks(READ).collect::<Vec<_>>()),
        ] {
            group.bench_function(BenchmarkId::new("tail_scanner", layout), |b| {
                b.iter(|| {
                    let mut scanner = TailScanner::new(boundary, 2, AUDIO_DECIDING);
                    for read in &reads {
                        scanner.feed(black_box(read)).unwrap();
                    }
                    scanner
                })
            });
            group.bench_function(BenchmarkId::new("memmem", layout), |b| {
                b.iter(|| {
                    reads
                        .iter()
                        .filter_map(|r| finder.find(black_box(r)))
                        .count()
                })
            });
            group.bench_function(BenchmarkId::new("horspool", layout), |b| {
                b.iter(|| {
                    reads
                        .iter()
                        .filter_map(|r| horspool.find(black_box(r)))
                        .count()
                })
            });
            group.bench_function(BenchmarkId::new("stride_pairs", layout), |b| {
                b.iter(|| {
                    reads
                        .iter()
                        .filter_map(|r| pairs.find(black_box(r)))
                        .count()
                })
            });
        }
        group.finish();
    }
}

/// The searches agree on where delimiters are, so the timings compare
/// like with like (checked before timing).
fn agree() {
    let random = random_bytes(1 << 20);
    let needle = b"\r\n--0123456789abcdef0123456789abcdef";
    for at in [0, 1, 4093, 65_536, (1 << 20) - needle.len()] {
        let mut hay = random.clone();
        hay[at..at + needle.len()].copy_from_slice(needle);
        let want = memmem::find(&hay, needle);
        assert_eq!(Horspool::new(needle).find(&hay), want, "{at}");
        assert_eq!(StridePairs::new(needle).find(&hay), want, "{at}");
    }
}

fn all(c: &mut Criterion) {
    agree();
    searches(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
