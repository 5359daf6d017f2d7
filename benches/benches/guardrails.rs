//! The `litellm_content_filter` guardrail on one text: every prebuilt
//! pattern (action `MASK`) and 1,000 blocked words, over clean prose and
//! over prose with an email every ~500 bytes, at 1 KB and 64 KB
//! (target: at most 2 µs per KB on clean text); the same guardrail
//! on a streamed answer, per chunk (target: at most 1 µs per chunk); and
//! its whole path on a 4 KB chat request and answer (the body's texts
//! found and, when masked, written back) beside the filter alone on the
//! same texts. Then the targets' own measure: `pre_call` on chat
//! requests of 1, 4, 16 and 64 KB (four user messages of filler prose;
//! per KB = time / KB, and the slope between sizes) beside the same call
//! with no guardrail configured; and the mock's 16-token stream (17 chunks
//! and `[DONE]`) through the relay's usage tap alone and through the tap
//! and the stream guard as the relay runs them (per chunk = the
//! difference / 17).

use benches::guardrail_inputs::{filler_request, mock_stream, post_call, rails};
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

/// The stream window of [`rails`]' guardrail, as a request gets it.
fn stream_window() -> gateway::guardrails::stream::StreamCheck {
    let rails = rails();
    post_call(&rails).stream()
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

/// A chat request of four 1 KB user messages, and an answer of one 4 KB
/// message; with `pii`, an email every ~500 bytes (so they are masked and
/// written back).
fn chat_bodies(pii: bool) -> (bytes::Bytes, Vec<u8>, Vec<String>) {
    let texts: Vec<String> = (0..4).map(|_| text(1 << 10, pii)).collect();
    let messages: Vec<serde_json::Value> = texts
        .iter()
        .map(|t| serde_json::json!({"role": "user", "content": t}))
        .collect();
    let request = serde_json::json!({"model": "gpt-4o", "temperature": 0.2, "messages": messages});
    let answer = serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
        "model": "gpt-4o", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": text(4 << 10, pii)}}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 900, "total_tokens": 1800}});
    (
        bytes::Bytes::from(serde_json::to_vec(&request).unwrap()),
        serde_json::to_vec(&answer).unwrap(),
        texts,
    )
}

/// `body` (a JSON object) with a first member holding a `\u` escape.
fn with_escaped_member(body: &[u8]) -> bytes::Bytes {
    let mut out = br#"{"x_note":"caf\u00e9","#.to_vec();
    out.extend_from_slice(&body[1..]);
    bytes::Bytes::from(out)
}

fn request_path(c: &mut Criterion) {
    let rails = rails();
    let f = filter(true, true);
    let mut g = c.benchmark_group("guardrail_request_path");
    for (label, pii) in [("clean", false), ("email_every_500b", true)] {
        let (request, answer, texts) = chat_bodies(pii);
        g.throughput(Throughput::Bytes(request.len() as u64));
        g.bench_function(BenchmarkId::new("pre_call_4k_request", label), |b| {
            b.iter(|| {
                let mut log = Default::default();
                let (body, checked) = rails
                    .pre_call(Scope::default(), request.clone(), &mut log)
                    .unwrap();
                black_box((body.len(), checked.applied.is_some()))
            })
        });
        // The same request with a `\u` escape in a member it does not
        // check, which the in-place reader leaves to the parse (serde_json
        // `Value`, walked, re-encoded whole when masked): the path every
        // guarded request took before.
        let parsed = with_escaped_member(&request);
        g.bench_function(BenchmarkId::new("pre_call_4k_request_parsed", label), |b| {
            b.iter(|| {
                let mut log = Default::default();
                let (body, checked) = rails
                    .pre_call(Scope::default(), parsed.clone(), &mut log)
                    .unwrap();
                black_box((body.len(), checked.applied.is_some()))
            })
        });
        g.bench_function(BenchmarkId::new("filter_only_4k_request", label), |b| {
            b.iter(|| {
                black_box(
                    texts
                        .iter()
                        .map(|t| f.apply(t).unwrap().len())
                        .sum::<usize>(),
                )
            })
        });
        let (_, checked) = rails
            .pre_call(Scope::default(), request.clone(), &mut Default::default())
            .unwrap();
        let post = checked.post.unwrap();
        g.throughput(Throughput::Bytes(answer.len() as u64));
        g.bench_function(BenchmarkId::new("post_call_4k_answer", label), |b| {
            b.iter(|| {
                let mut log = Default::default();
                black_box(post.answer(&answer, &mut log).unwrap().len())
            })
        });
        let parsed = with_escaped_member(&answer);
        g.bench_function(BenchmarkId::new("post_call_4k_answer_parsed", label), |b| {
            b.iter(|| {
                let mut log = Default::default();
                black_box(post.answer(&parsed, &mut log).unwrap().len())
            })
        });
    }
    g.finish();
}

fn request_sizes(c: &mut Criterion) {
    let rails = rails();
    let none = Guardrails::from_config(None).unwrap();
    let mut g = c.benchmark_group("guardrail_request_kb");
    for kb in [1usize, 4, 16, 64] {
        let body = filler_request(kb << 10);
        g.throughput(Throughput::Bytes(kb as u64 * 1024));
        for (label, rails) in [("pre_call", &rails), ("no_guardrail", &none)] {
            g.bench_with_input(BenchmarkId::new(label, kb), &body, |b, body| {
                b.iter(|| {
                    let mut log = Default::default();
                    let (out, _) = rails
                        .pre_call(Scope::default(), body.clone(), &mut log)
                        .unwrap();
                    black_box(out.len())
                })
            });
        }
    }
    g.finish();
}

fn stream_chunks(c: &mut Criterion) {
    let rails = rails();
    let post = post_call(&rails);
    let stream = mock_stream();
    let mut g = c.benchmark_group("guardrail_stream_chunk");
    g.throughput(Throughput::Elements(17));
    g.bench_function("usage_tap_only/17", |b| {
        b.iter(|| {
            let mut tap = gateway::spend::StreamUsage::new();
            tap.feed(&stream);
            black_box(tap.finish(|| 0).0.completion_tokens)
        })
    });
    g.bench_function("usage_tap_and_guard/17", |b| {
        b.iter(|| {
            let mut tap = gateway::spend::StreamUsage::new();
            tap.feed(&stream);
            let mut guard = gateway::proxy::bench::StreamGuard::new(&post);
            let mut out = Vec::with_capacity(stream.len());
            assert!(guard.feed(&stream, &mut out));
            black_box((tap.finish(|| 0).0.completion_tokens, out.len()))
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    content_filter,
    stream_filter,
    request_path,
    request_sizes,
    stream_chunks
);
criterion_main!(benches);
