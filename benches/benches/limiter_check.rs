//! The local limiter's check: one request's rpm, tpm and parallel
//! descriptors checked and charged all-or-none, then settled (reservation
//! reconciled, slot freed), with 10, 10k and 1M keys holding counters. This
//! is the whole per-request cost of limits without Redis (and of the
//! fallback while Redis is out). Flat across sizes is the target.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use gateway::limits::{Descriptor, Kind, LocalLimiter, Scope, Verdict, Window};
use std::time::{SystemTime, UNIX_EPOCH};

fn descriptors(key: usize) -> [Descriptor; 3] {
    let value = format!("{key:064x}");
    [
        Descriptor::new(Scope::ApiKey, &value, Kind::Requests, 1_000_000_000),
        Descriptor::new(Scope::ApiKey, &value, Kind::Tokens, u64::MAX / 4),
        Descriptor::new(Scope::ApiKey, &value, Kind::Parallel, 1_000_000),
    ]
}

fn check(c: &mut Criterion) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let amounts = [1u64, 125, 1];
    let mut g = c.benchmark_group("limiter_check");
    for n in [10usize, 10_000, 1_000_000] {
        let limiter = LocalLimiter::new(Window::new(60));
        let keys: Vec<[Descriptor; 3]> = (0..n).map(descriptors).collect();
        for d in &keys {
            // Every key holds counters, as after its first request.
            let _ = limiter.admit(d, &amounts, |d| d.limit, now);
        }
        let probes: Vec<usize> = (0..1024).map(|i| (i * 7919) % n).collect();
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("admit_and_finish", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % probes.len();
                let d = &keys[probes[i]];
                match limiter.admit(black_box(d), &amounts, |d| d.limit, now) {
                    Verdict::Admitted { tick, .. } => limiter.finish(d, &amounts, tick, 21, now),
                    Verdict::Denied { .. } => unreachable!("limits are far away"),
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, check);
criterion_main!(benches);
