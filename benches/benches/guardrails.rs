//! The `litellm_content_filter` guardrail on one text: every prebuilt
//! pattern (action `MASK`) and 1,000 blocked words, over clean prose and
//! over prose with an email every ~500 bytes, at 1 KB and 64 KB
//! (target: at most 2 µs per KB on clean text); and the same guardrail
//! on a streamed answer, per chunk (target: at most 1 µs per chunk).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gateway::guardrails::filter::{Action, ContentFilter, PatternSpec, WordSpec};
use gateway::guardrails::patterns::PREBUILT;
use gateway::guardrails::{Guardrails, Scope};

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

/// The stream window of a `post_call` guardrail with every prebuilt
/// pattern and 1,000 blocked words (all `MASK`), as a request gets it.
fn stream_window() -> gateway::guardrails::stream::StreamCheck {
    let mut patterns = String::new();
    for p in PREBUILT {
        patterns.push_str(&format!(
            "{{pattern_type: prebuilt, pattern_name: {}, action: MASK}},",
            p.name
        ));
    }
    let mut words = String::new();
    for i in 0..1000 {
        words.push_str(&format!("{{keyword: codename{i:04}x, action: MASK}},"));
    }
    let yaml = format!(
        "- guardrail_name: out\n  litellm_params: {{guardrail: litellm_content_filter, mode: post_call, default_on: true, patterns: [{patterns}], blocked_words: [{words}]}}\n"
    );
    let rails = Guardrails::from_config(Some(&serde_yaml::from_str(&yaml).unwrap())).unwrap();
    let (_, checked) = rails
        .pre_call(
            Scope::default(),
            bytes::Bytes::from_static(b"{}"),
            &mut Default::default(),
        )
        .unwrap();
    checked.post.unwrap().stream()
}

fn stream_filter(c: &mut Criterion) {
    let mut w = stream_window();
    let mut g = c.benchmark_group("guardrail_stream_filter");
    let text_of = |pii| text(16 << 10, pii);
    for chunk in [4usize, 16, 64] {
        for (label, pii) in [("clean", false), ("email_every_500b", true)] {
            let t = text_of(pii);
            let pieces: Vec<&str> = t
                .as_bytes()
                .chunks(chunk)
                .map(|c| std::str::from_utf8(c).unwrap())
                .collect();
            g.throughput(Throughput::Elements(pieces.len() as u64));
            g.bench_with_input(
                BenchmarkId::new(format!("{label}_chunk_bytes"), chunk),
                &pieces,
                |b, pieces| {
                    // One stream per iteration: its end (the flush) leaves
                    // the window empty for the next.
                    b.iter(|| {
                        let mut out = 0;
                        for p in pieces {
                            out += w.feed(0, p).unwrap().len();
                        }
                        black_box(out + w.flush(0).unwrap().len())
                    })
                },
            );
        }
    }
    g.finish();
}

criterion_group!(benches, content_filter, stream_filter);
criterion_main!(benches);
