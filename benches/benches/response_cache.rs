//! The response cache's own work per request, on a 1 KB chat request and a
//! 1 KB answer (target: a miss adds at most 3 µs): the plan (the body
//! read and its key hashed), a miss's store into the core's local cache
//! (and its single-flight registration), and a local hit's lookup.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use gateway::cache::{stream::Tokens, Cache, CacheSettings, Controls, Join, Owner};
use gateway::inbound::Endpoint;

/// A chat request of about `size` bytes (one user message padded).
fn request(size: usize) -> Vec<u8> {
    let filler: String = "the quick brown fox jumps over the lazy dog "
        .chars()
        .cycle()
        .take(size.saturating_sub(90))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "model": "gpt-4o", "max_tokens": 16, "temperature": 0.2,
        "messages": [{"role": "user", "content": filler}],
    }))
    .unwrap()
}

/// A chat answer of about `size` bytes.
fn answer(size: usize) -> Vec<u8> {
    let text: String = "lorem ipsum dolor sit amet "
        .chars()
        .cycle()
        .take(size.saturating_sub(250))
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 200, "completion_tokens": 200, "total_tokens": 400},
    }))
    .unwrap()
}

fn local_cache() -> Cache {
    let doc: serde_yaml::Value =
        serde_yaml::from_str("litellm_settings: {cache: true, cache_params: {type: local}}")
            .unwrap();
    let settings = CacheSettings::from_litellm(doc.get("litellm_settings"), &mut Vec::new())
        .unwrap()
        .unwrap();
    Cache::new(settings, None).unwrap()
}

fn response_cache(c: &mut Criterion) {
    let cache = local_cache();
    let core = cache.core_cache(1);
    let body = request(1024);
    let stored = answer(1024);
    let none = Controls::default();
    let plan = |body: &[u8]| {
        cache
            .plan(
                Endpoint::ChatCompletions,
                "gpt-4o",
                Owner::Everyone,
                body,
                false,
                &none,
            )
            .unwrap()
            .unwrap()
    };
    let mut g = c.benchmark_group("response_cache");
    g.bench_function("plan_1kb_request", |b| b.iter(|| plan(black_box(&body))));
    // For scale: what the plan paid before its key was hashed from a
    // borrowed reading, the body parsed into a `serde_json::Value`.
    g.bench_function("value_parse_1kb_request", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&body)).unwrap())
    });
    // For scale: the floor of any plan keeping the SHA-256 key, one
    // digest of the body's bytes (SHA-NI where the CPU has it).
    g.bench_function("sha256_1kb_request", |b| {
        b.iter(|| <sha2::Sha256 as sha2::Digest>::digest(black_box(&body)))
    });
    // A miss beyond its plan and lookup: the single flight it leads and
    // the answer stored (replacing the last iteration's entry).
    g.bench_function("miss_lead_store_1kb_answer", |b| {
        let p = plan(&body);
        b.iter(|| {
            let lead = cache.join(&p);
            // The copy the responder's capture makes of the answer, then
            // the store (which keeps that copy).
            let captured = black_box(&stored).to_vec();
            let kept = cache.store(&core, &p, captured, Tokens::default());
            if let Join::Lead(lead) = lead {
                lead.finish(kept);
            }
        })
    });
    let p = plan(&body);
    cache.store(&core, &p, stored.clone(), Tokens::default());
    g.bench_function("hit_lookup_1kb_answer", |b| {
        b.iter(|| black_box(core.get(&p.key, std::time::Instant::now())))
    });
    g.finish();
}

criterion_group!(benches, response_cache);
criterion_main!(benches);
