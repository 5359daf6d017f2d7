//! Request-head parsing: the first thing every request costs.

use benches::SDK_REQUEST_HEAD;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use gateway::http1::parse_request_head;

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("http_parse");
    g.throughput(Throughput::Bytes(SDK_REQUEST_HEAD.len() as u64));
    g.bench_function("sdk_chat_head", |b| {
        b.iter(|| {
            let (head, len) = parse_request_head(black_box(SDK_REQUEST_HEAD), 100, 65536).unwrap();
            black_box((head.header("authorization").map(str::len), len))
        })
    });
    g.finish();
}

criterion_group!(benches, parse);
criterion_main!(benches);
