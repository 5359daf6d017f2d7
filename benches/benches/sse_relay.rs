//! Relaying one streamed response: an OpenAI SSE stream of 200 events of
//! about 200 bytes, chunk-decoded as it arrives from upstream and
//! chunk-encoded again for the client; and what the relay reads on the way:
//! the usage tap (the generated text counted, the usage kept) and the filter
//! that drops the usage-only chunk for a client that did not ask for it.
//! Beside it, the usage of a non-streamed chat response: the one-pass
//! reader against the serde_json parse it leaves unusual values to (the same
//! body with one `\u` escape in its usage object).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gateway::http1::{encode_chunk, ChunkedDecoder, LAST_CHUNK};
use gateway::spend::StreamUsage;
use gateway::sse::UsageChunkFilter;

/// Events in the stream (tokens, the usage chunk, `[DONE]`).
const EVENTS: usize = 200;

/// The SSE events of one chat-completion stream, as OpenAI sends them: a
/// `data:` line with a `chat.completion.chunk` per token, then `[DONE]`.
fn sse_events() -> Vec<Vec<u8>> {
    let mut events: Vec<Vec<u8>> = (0..EVENTS - 2)
        .map(|i| {
            format!(
                "data: {{\"id\":\"chatcmpl-AbCdEfGhIjKlMnOpQrStUvWxYz012\",\"object\":\"chat.completion.chunk\",\"created\":1731000000,\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_45cf54deae\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" tok{i:04}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
            )
            .into_bytes()
        })
        .collect();
    events.push(
        b"data: {\"id\":\"chatcmpl-AbCdEfGhIjKlMnOpQrStUvWxYz012\",\"object\":\"chat.completion.chunk\",\"created\":1731000000,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":198,\"total_tokens\":210}}\n\n".to_vec(),
    );
    events.push(b"data: [DONE]\n\n".to_vec());
    events
}

/// The upstream's wire bytes: one chunk per event (each arrives in its own
/// read), then the last chunk.
fn upstream_reads(events: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut reads: Vec<Vec<u8>> = events
        .iter()
        .map(|e| {
            let mut wire = Vec::new();
            encode_chunk(e, &mut wire);
            wire
        })
        .collect();
    reads.push(LAST_CHUNK.to_vec());
    reads
}

fn sse_relay(c: &mut Criterion) {
    let events = sse_events();
    let reads = upstream_reads(&events);
    let payload: usize = events.iter().map(Vec::len).sum();
    let mut g = c.benchmark_group("sse_relay");
    g.throughput(Throughput::Bytes(payload as u64));

    g.bench_function(BenchmarkId::new("encode", EVENTS), |b| {
        let mut out = Vec::with_capacity(64 * 1024);
        b.iter(|| {
            out.clear();
            for e in &events {
                encode_chunk(black_box(e), &mut out);
            }
            out.extend_from_slice(LAST_CHUNK);
            black_box(out.len())
        })
    });

    g.bench_function(BenchmarkId::new("decode", EVENTS), |b| {
        let mut out = Vec::with_capacity(1024);
        b.iter(|| {
            let mut decoder = ChunkedDecoder::default();
            let mut total = 0;
            for read in &reads {
                out.clear();
                let used = decoder.decode(black_box(read), &mut out).unwrap();
                debug_assert_eq!(used, read.len());
                total += out.len();
            }
            assert!(decoder.is_done());
            black_box(total)
        })
    });

    g.bench_function(BenchmarkId::new("decode_then_encode", EVENTS), |b| {
        let mut data = Vec::with_capacity(1024);
        let mut out = Vec::with_capacity(1024);
        b.iter(|| {
            let mut decoder = ChunkedDecoder::default();
            let mut sent = 0;
            for read in &reads {
                data.clear();
                out.clear();
                decoder.decode(black_box(read), &mut data).unwrap();
                encode_chunk(&data, &mut out);
                sent += out.len();
            }
            assert!(decoder.is_done());
            black_box(sent)
        })
    });
    g.bench_function(BenchmarkId::new("usage_tap", EVENTS), |b| {
        b.iter(|| {
            let mut usage = StreamUsage::new();
            for e in &events {
                usage.feed(black_box(e));
            }
            let (usage, _) = usage.finish(|| 0);
            assert_eq!(usage.completion_tokens, 198);
            black_box(usage)
        })
    });

    g.bench_function(BenchmarkId::new("usage_chunk_filter", EVENTS), |b| {
        let mut out = Vec::with_capacity(64 * 1024);
        b.iter(|| {
            out.clear();
            let mut filter = UsageChunkFilter::default();
            for e in &events {
                filter.filter(black_box(e), &mut out);
            }
            filter.finish(&mut out);
            black_box(out.len())
        })
    });
    g.finish();
}

/// A chat completion as OpenAI answers it, with its usage details.
const CHAT_RESPONSE: &str = r#"{"id":"chatcmpl-AbCdEfGhIjKlMnOpQrStUvWxYz012","object":"chat.completion","created":1731000000,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog.","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":11,"total_tokens":23,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}},"system_fingerprint":"fp_45cf54deae"}"#;

fn response_usage(c: &mut Criterion) {
    let mut g = c.benchmark_group("response_usage");
    let body = CHAT_RESPONSE.as_bytes();
    let escaped = CHAT_RESPONSE
        .replacen("\"audio_tokens\"", "\"audio_t\\u006fkens\"", 1)
        .into_bytes();
    assert_eq!(
        gateway::spend::from_response_body(body),
        gateway::spend::from_response_body(&escaped)
    );
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("one_pass", |b| {
        b.iter(|| black_box(gateway::spend::from_response_body(black_box(body))))
    });
    g.bench_function("serde_json_fallback", |b| {
        b.iter(|| black_box(gateway::spend::from_response_body(black_box(&escaped))))
    });
    g.finish();
}

criterion_group!(benches, sse_relay, response_usage);
criterion_main!(benches);
