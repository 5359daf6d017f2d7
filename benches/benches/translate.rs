//! The format translators: a chat request to Anthropic's Messages API and a
//! Messages request to chat (1 KB, 64 KB, 512 KB bodies), whole responses
//! both ways, and one stream event each way (a text delta, the common
//! case).

use benches::chat_body;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gateway::formats::{anthropic as client, EventTranslator};
use gateway::providers::anthropic as provider;
use serde_json::json;

/// A Messages request of about `size` bytes.
fn messages_body(size: usize) -> Vec<u8> {
    let chat: serde_json::Value = serde_json::from_slice(&chat_body(size)).unwrap();
    let text = chat["messages"][1]["content"].clone();
    serde_json::to_vec(&json!({
        "model": "claude-sonnet-4", "max_tokens": 256, "system": "You are a helpful assistant.",
        "messages": [{"role": "user", "content": text}],
    }))
    .unwrap()
}

fn requests(c: &mut Criterion) {
    let mut g = c.benchmark_group("translate_request");
    for size in [1 << 10, 64 << 10, 512 << 10] {
        let chat = chat_body(size);
        g.throughput(Throughput::Bytes(chat.len() as u64));
        g.bench_with_input(
            BenchmarkId::new("chat_to_messages", size),
            &chat,
            |b, body| {
                b.iter(|| {
                    black_box(provider::request_from_chat(body, "claude-sonnet-4", 4096).unwrap())
                })
            },
        );
        let messages = messages_body(size);
        g.bench_with_input(
            BenchmarkId::new("messages_to_chat", size),
            &messages,
            |b, body| b.iter(|| black_box(client::to_chat(body, "gpt-4o").unwrap())),
        );
    }
    g.finish();
}

fn responses(c: &mut Criterion) {
    let mut g = c.benchmark_group("translate_response");
    let text = "word ".repeat(200);
    let messages = serde_json::to_vec(&json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 500},
    }))
    .unwrap();
    g.bench_function("messages_to_chat", |b| {
        b.iter(|| black_box(provider::response_to_chat(&messages).unwrap()))
    });
    let chat = serde_json::to_vec(&json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
    }))
    .unwrap();
    g.bench_function("chat_to_messages", |b| {
        b.iter(|| black_box(client::from_chat(&chat).unwrap()))
    });
    g.finish();
}

fn stream_events(c: &mut Criterion) {
    let mut g = c.benchmark_group("translate_stream_event");
    let delta = br#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" tok0042"}}"#;
    g.bench_function("messages_to_chat", |b| {
        let mut t = provider::MessagesToChat::new(true);
        let mut out = Vec::with_capacity(512);
        b.iter(|| {
            out.clear();
            t.event(b"content_block_delta", black_box(delta), &mut out)
                .unwrap();
            black_box(out.len())
        })
    });
    let chunk = br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" tok0042"},"finish_reason":null}]}"#;
    g.bench_function("chat_to_messages", |b| {
        let mut t = client::ChatToMessages::new();
        let mut out = Vec::with_capacity(512);
        b.iter(|| {
            out.clear();
            t.event(b"", black_box(chunk), &mut out).unwrap();
            black_box(out.len())
        })
    });
    g.finish();
}

criterion_group!(benches, requests, responses, stream_events);
criterion_main!(benches);
