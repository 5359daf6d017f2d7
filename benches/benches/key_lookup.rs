//! Virtual-key authentication on a cache hit: sha256 of the presented key and
//! one lock-free map lookup, with 10, 10k and 1M cached keys. Flat cost across
//! sizes is the target.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use gateway::auth::{hash_key, token_hex, KeyCache};
use gateway::store::{KeyRecord, MemoryStore, Store};

fn filled_cache(n: usize) -> (KeyCache, Vec<String>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = MemoryStore::default();
    let cache = KeyCache::default();
    let keys: Vec<String> = (0..n).map(|i| format!("sk-bench-{i:012}")).collect();
    rt.block_on(async {
        for key in &keys {
            let token = token_hex(&hash_key(key));
            let record = KeyRecord {
                token: token.clone(),
                ..Default::default()
            };
            store.insert_key(&record).await.unwrap();
            cache.load(&store, &token).await.unwrap();
        }
    });
    (cache, keys)
}

fn lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("key_lookup");
    for n in [10usize, 10_000, 1_000_000] {
        let (cache, keys) = filled_cache(n);
        let probes: Vec<&String> = (0..1024).map(|i| &keys[(i * 7919) % keys.len()]).collect();
        let mut i = 0;
        g.bench_with_input(BenchmarkId::new("hash_and_get", n), &n, |b, _| {
            b.iter(|| {
                i = (i + 1) % probes.len();
                let entry = cache.get(&hash_key(black_box(probes[i])));
                black_box(entry.is_some())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, lookup);
criterion_main!(benches);
