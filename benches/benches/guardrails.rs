//! The `litellm_content_filter` guardrail on one text: every prebuilt
//! pattern (action `MASK`) and 1,000 blocked words, over clean prose and
//! over prose with an email every ~500 bytes, at 1 KB and 64 KB
//! (target: at most 2 µs per KB on clean text).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gateway::guardrails::filter::{Action, ContentFilter, PatternSpec, WordSpec};
use gateway::guardrails::patterns::PREBUILT;

/// All prebuilt patterns and/or 1,000 blocked words.
fn filter(patterns: bool, words: bool) -> ContentFilter {
    let patterns = PREBUILT
        .iter()
        .filter(|_| patterns)
        .map(|p| PatternSpec::prebuilt(p.name, Action::Mask).unwrap())
        .collect();
    let words = (0..1000)
        .filter(|_| words)
        .map(|i| WordSpec {
            keyword: format!("codename{i:04}x"),
            action: Action::Mask,
            description: None,
        })
        .collect();
    ContentFilter::new(patterns, words).unwrap()
}

/// `size` bytes of prose; with `pii`, an email address every ~500 bytes.
fn text(size: usize, pii: bool) -> String {
    let sentence = "The quarterly report shows steady growth across all regions, and the team plans to review it on Monday. ";
    let mut out = String::with_capacity(size + 128);
    let mut i = 0;
    while out.len() < size {
        out.push_str(sentence);
        if pii && i % 5 == 4 {
            out.push_str("Contact jane.doe@example.com for details. ");
        }
        i += 1;
    }
    out.truncate(size);
    out
}

fn content_filter(c: &mut Criterion) {
    let f = filter(true, true);
    let mut g = c.benchmark_group("guardrail_content_filter");
    for size in [1 << 10, 64 << 10] {
        for (label, pii) in [("clean", false), ("email_every_500b", true)] {
            let t = text(size, pii);
            g.throughput(Throughput::Bytes(t.len() as u64));
            g.bench_with_input(BenchmarkId::new(label, size), &t, |b, t| {
                b.iter(|| black_box(f.apply(t).unwrap().len()))
            });
        }
    }
    // Each half alone, on clean text.
    let t = text(64 << 10, false);
    g.throughput(Throughput::Bytes(t.len() as u64));
    for (label, half) in [
        ("patterns_only", filter(true, false)),
        ("words_only", filter(false, true)),
    ] {
        g.bench_with_input(BenchmarkId::new(label, t.len()), &t, |b, t| {
            b.iter(|| black_box(half.apply(t).unwrap().len()))
        });
    }
    g.finish();
}

criterion_group!(benches, content_filter);
criterion_main!(benches);
