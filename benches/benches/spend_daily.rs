//! What a spend batch adds to LiteLLM's daily tables (`DailyBatch::of`): a
//! full batch of 8,192 rows whose keys interleave, over 1 and 1,000 keys.
//! Runs on the control thread once per batch; flat across keys is the aim.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use gateway::store::{DailyBatch, SpendLogRow};

/// `n` rows of `keys` keys in turn (row i of key i mod `keys`).
fn rows(n: usize, keys: usize) -> Vec<SpendLogRow> {
    (0..n)
        .map(|i| SpendLogRow {
            request_id: format!("req-{i:08}").into(),
            call_type: "acompletion".into(),
            api_key: format!("{:064x}", (i % keys) * 7919).into(),
            spend: 0.000125,
            prompt_tokens: 12,
            completion_tokens: 40,
            model: "gpt-4o-mini".into(),
            model_group: "gpt-4o-mini".into(),
            custom_llm_provider: "openai".into(),
            status: "success".into(),
            ..Default::default()
        })
        .collect()
}

fn daily(c: &mut Criterion) {
    let mut group = c.benchmark_group("spend_daily");
    for keys in [1, 1000] {
        let batch = rows(8192, keys);
        group.bench_with_input(
            BenchmarkId::new("batch_8192_rows", keys),
            &batch,
            |b, batch| b.iter(|| DailyBatch::of(black_box(batch.as_slice()), |_| None)),
        );
    }
    group.finish();
}

criterion_group!(benches, daily);
criterion_main!(benches);
