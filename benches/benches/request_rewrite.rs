//! Reading the routing fields of a request body and rewriting its model name:
//! the gateway's borrowed serde view against a full simd-json parse and
//! re-serialization, at 1 KB, 64 KB and 512 KB.

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

criterion_group!(benches, rewrite);
criterion_main!(benches);
