//! Reading the routing fields of a request body and rewriting its model name:
//! the gateway's borrowed serde view against a full simd-json parse and
//! re-serialization, at 1 KB, 64 KB and 512 KB. Beside it, the prompt
//! estimate (the TPM reservation's): the one-pass reader against the full
//! serde_json parse it leaves unusual bodies to (the same body with one
//! `\u` escape in its system prompt).

use benches::chat_body;
use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gateway::inbound::{Endpoint, LlmRequest};

fn rewrite(c: &mut Criterion) {
    let mut g = c.benchmark_group("request_rewrite");
    for size in [1 << 10, 64 << 10, 512 << 10] {
        let body = Bytes::from(chat_body(size));
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_with_input(
            BenchmarkId::new("borrowed_view_splice", size),
            &body,
            |b, body| {
                b.iter(|| {
                    let req = LlmRequest::parse(Endpoint::ChatCompletions, body.clone()).unwrap();
                    black_box(req.body_with_model("gpt-4o-2024-08-06"))
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("simd_json_tree_reserialize", size),
            &body,
            |b, body| {
                b.iter(|| {
                    let mut copy = body.to_vec();
                    let mut value: simd_json::OwnedValue =
                        simd_json::to_owned_value(&mut copy).unwrap();
                    if let simd_json::OwnedValue::Object(map) = &mut value {
                        map.insert("model".into(), "gpt-4o-2024-08-06".into());
                    }
                    black_box(simd_json::to_vec(&value).unwrap())
                })
            },
        );
    }
    g.finish();
}

fn prompt_estimate(c: &mut Criterion) {
    let mut g = c.benchmark_group("prompt_estimate");
    for size in [1 << 10, 64 << 10] {
        let body = chat_body(size);
        let text = String::from_utf8(body.clone()).unwrap();
        let escaped = text.replacen("helpful", "helpf\\u0075l", 1).into_bytes();
        assert_eq!(
            gateway::spend::estimate_prompt_tokens(&body),
            gateway::spend::estimate_prompt_tokens(&escaped)
        );
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_with_input(BenchmarkId::new("one_pass", size), &body, |b, body| {
            b.iter(|| black_box(gateway::spend::estimate_prompt_tokens(body)))
        });
        g.bench_with_input(
            BenchmarkId::new("serde_json_fallback", size),
            &escaped,
            |b, body| b.iter(|| black_box(gateway::spend::estimate_prompt_tokens(body))),
        );
    }
    g.finish();
}

criterion_group!(benches, rewrite, prompt_estimate);
criterion_main!(benches);
