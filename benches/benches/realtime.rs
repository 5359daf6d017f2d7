//! What the realtime relay does to each WebSocket frame on the gateway
//! (`websocket::Endpoint` on both sides, `proxy/realtime.rs`'s loop without
//! its sockets): a client event (a masked 1 KiB text frame) read, unmasked
//! and masked again for the upstream; an upstream event (an unmasked 8 KiB
//! `response.audio.delta`) read, passed by the usage reader without a
//! parse, and framed for the client; and the usage read of a
//! `response.done`.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gateway::providers::realtime::response_done_usage;
use gateway::websocket::{payload, text, Endpoint};

/// The cap the relay runs with (`max_request_size_mb` of 64 MiB).
const CAP: usize = 64 << 20;

/// The wire bytes of `event` as `from` frames it.
fn framed(mut from: Endpoint, event: String) -> Vec<u8> {
    from.send(text(event)).expect("framed");
    from.take_output()
}

fn realtime(c: &mut Criterion) {
    let mut g = c.benchmark_group("realtime");
    let client_event = format!(
        "{{\"type\":\"conversation.item.create\",\"item\":{{\"type\":\"message\",\"role\":\"user\",\"content\":[{{\"type\":\"input_text\",\"text\":\"{}\"}}]}}}}",
        "x".repeat(900)
    );
    let client_wire = framed(Endpoint::client(CAP), client_event);
    g.throughput(Throughput::Bytes(client_wire.len() as u64));
    g.bench_function(BenchmarkId::new("client_to_upstream", "1KiB"), |b| {
        let mut from_client = Endpoint::server(CAP);
        let mut to_upstream = Endpoint::client(CAP);
        b.iter(|| {
            from_client.feed(black_box(&client_wire));
            while let Some(m) = from_client.next_message().expect("a frame") {
                to_upstream.send(m).expect("sent");
            }
            black_box(to_upstream.take_output());
        })
    });
    let delta = format!(
        "{{\"type\":\"response.audio.delta\",\"event_id\":\"event_1\",\"response_id\":\"resp_1\",\"item_id\":\"item_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"{}\"}}",
        "QUJD".repeat(2000)
    );
    let upstream_wire = framed(Endpoint::server(CAP), delta);
    g.throughput(Throughput::Bytes(upstream_wire.len() as u64));
    g.bench_function(BenchmarkId::new("upstream_to_client", "8KiB"), |b| {
        let mut from_upstream = Endpoint::client(CAP);
        let mut to_client = Endpoint::server(CAP);
        b.iter(|| {
            from_upstream.feed(black_box(&upstream_wire));
            while let Some(m) = from_upstream.next_message().expect("a frame") {
                black_box(payload(&m).and_then(response_done_usage));
                to_client.send(m).expect("sent");
            }
            black_box(to_client.take_output());
        })
    });
    let done = br#"{"type":"response.done","event_id":"event_9","response":{"id":"resp_1","object":"realtime.response","status":"completed","output":[{"id":"item_1","object":"realtime.item","type":"message","role":"assistant","content":[{"type":"audio","transcript":"Hello there, how can I help?"}]}],"usage":{"total_tokens":230,"input_tokens":150,"output_tokens":80,"input_token_details":{"cached_tokens":64,"text_tokens":90,"audio_tokens":60,"cached_tokens_details":{"text_tokens":64,"audio_tokens":0}},"output_token_details":{"text_tokens":20,"audio_tokens":60}}}}"#;
    g.throughput(Throughput::Bytes(done.len() as u64));
    g.bench_function("response_done_usage", |b| {
        b.iter(|| black_box(response_done_usage(black_box(done))))
    });
    g.finish();
}

criterion_group!(benches, realtime);
criterion_main!(benches);
