//! The cloud providers' protocol work: SigV4 signing of a 1 KB and a 64 KB
//! body, the event-stream decoder over one text-delta message, the Converse
//! and Gemini translators (a chat request, a whole answer, one stream
//! message into chat chunks), the Responses bridge (request, whole
//! answer, one chunk into events), and the embeddings translators of
//! Bedrock (Titan, Cohere) and Gemini / Vertex (request, 768-float answer).

use benches::chat_body;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gateway::deployment::Credentials;
use gateway::formats::{responses, EventTranslator, StreamTranslator};
use gateway::providers::eventstream::{encode_event, Decoder};
use gateway::providers::sigv4::{sign, SigningInput};
use gateway::providers::{bedrock, gemini};
use serde_json::json;

fn signing(c: &mut Criterion) {
    let mut g = c.benchmark_group("sigv4_sign");
    let creds = Credentials {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
        session_token: None,
    };
    for size in [1 << 10, 64 << 10] {
        let body = chat_body(size);
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &body, |b, body| {
            b.iter(|| {
                black_box(sign(
                    &creds,
                    &SigningInput {
                        method: "POST",
                        path: "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse",
                        query: "",
                        headers: &[
                            ("host", "bedrock-runtime.us-east-1.amazonaws.com"),
                            ("content-type", "application/json"),
                        ],
                        payload: &[body],
                        amz_date: "20250101T000000Z",
                        region: "us-east-1",
                        service: "bedrock",
                        double_encode: true,
                    },
                ))
            })
        });
    }
    g.finish();
}

fn decoding(c: &mut Criterion) {
    let msg = encode_event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"text":" tok0042"},"p":"abcdefghijklmnop"}"#,
    );
    c.bench_function("eventstream_decode_message", |b| {
        let mut d = Decoder::new();
        b.iter(|| {
            let mut n = 0;
            d.feed(black_box(&msg), &mut |m| {
                n += m.payload.len();
                Ok(())
            })
            .unwrap();
            black_box(n)
        })
    });
}

fn translators(c: &mut Criterion) {
    let mut g = c.benchmark_group("translate_bedrock");
    let chat = chat_body(1 << 10);
    g.bench_function("chat_to_converse_1k", |b| {
        b.iter(|| black_box(bedrock::request_from_chat(&chat).unwrap()))
    });
    let answer = serde_json::to_vec(&json!({
        "output": {"message": {"role": "assistant", "content": [{"text": "word ".repeat(200)}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 1000, "outputTokens": 200, "totalTokens": 1200},
    }))
    .unwrap();
    g.bench_function("converse_to_chat", |b| {
        b.iter(|| black_box(bedrock::response_to_chat(&answer).unwrap()))
    });
    let msg = encode_event(
        "contentBlockDelta",
        br#"{"contentBlockIndex":0,"delta":{"text":" tok0042"}}"#,
    );
    g.bench_function("converse_stream_message_to_chat", |b| {
        let mut t = bedrock::ConverseToChat::new(true);
        let mut out = Vec::with_capacity(512);
        b.iter(|| {
            out.clear();
            t.feed(black_box(&msg), &mut out).unwrap();
            black_box(out.len())
        })
    });
    g.finish();
}

fn gemini_and_responses(c: &mut Criterion) {
    let mut g = c.benchmark_group("translate_gemini_responses");
    let chat = chat_body(1 << 10);
    g.bench_function("chat_to_gemini_1k", |b| {
        b.iter(|| black_box(gemini::request_from_chat(&chat).unwrap()))
    });
    let answer = serde_json::to_vec(&json!({
        "candidates": [{"content": {"role": "model", "parts": [{"text": "word ".repeat(200)}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 1000, "candidatesTokenCount": 200},
        "modelVersion": "gemini-2.0-flash",
    }))
    .unwrap();
    g.bench_function("gemini_to_chat", |b| {
        b.iter(|| black_box(gemini::response_to_chat(&answer).unwrap()))
    });
    let event = br#"{"candidates":[{"content":{"role":"model","parts":[{"text":" tok0042"}]}}],"modelVersion":"gemini-2.0-flash"}"#;
    g.bench_function("gemini_stream_event_to_chat", |b| {
        let mut t = gemini::GeminiToChat::new(true);
        let mut out = Vec::with_capacity(512);
        b.iter(|| {
            out.clear();
            t.event(b"", black_box(event), &mut out).unwrap();
            black_box(out.len())
        })
    });
    let request = serde_json::to_vec(&json!({
        "model": "gpt-4o", "instructions": "Be brief.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "word ".repeat(200)}]}],
    }))
    .unwrap();
    g.bench_function("responses_to_chat", |b| {
        b.iter(|| black_box(responses::to_chat(&request, "gpt-4o").unwrap()))
    });
    let whole = serde_json::to_vec(&json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "word ".repeat(200)}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200},
    }))
    .unwrap();
    g.bench_function("chat_to_response", |b| {
        b.iter(|| black_box(responses::from_chat(&whole, &Default::default()).unwrap()))
    });
    let chunk = br#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" tok0042"},"finish_reason":null}]}"#;
    g.bench_function("chat_chunk_to_response_events", |b| {
        let mut t = responses::ChatToResponses::default();
        let mut out = Vec::with_capacity(512);
        b.iter(|| {
            out.clear();
            t.event(b"", black_box(chunk), &mut out).unwrap();
            black_box(out.len())
        })
    });
    g.finish();
}

fn embeddings(c: &mut Criterion) {
    let mut g = c.benchmark_group("translate_embeddings");
    let one = serde_json::to_vec(&json!({"model": "e", "input": "word ".repeat(200)})).unwrap();
    let many = serde_json::to_vec(&json!({
        "model": "e",
        "input": (0..16).map(|i| format!("text {i} ").repeat(20)).collect::<Vec<_>>(),
    }))
    .unwrap();
    g.bench_function("chat_to_titan_1k", |b| {
        b.iter(|| {
            black_box(bedrock::embeddings::request(&one, "amazon.titan-embed-text-v2:0").unwrap())
        })
    });
    g.bench_function("chat_to_cohere_16_inputs", |b| {
        b.iter(|| {
            black_box(bedrock::embeddings::request(&many, "cohere.embed-english-v3").unwrap())
        })
    });
    g.bench_function("chat_to_gemini_batch_16_inputs", |b| {
        b.iter(|| {
            black_box(gemini::embeddings::studio_request(&many, "text-embedding-004").unwrap())
        })
    });
    g.bench_function("chat_to_vertex_predict_16_inputs", |b| {
        b.iter(|| black_box(gemini::embeddings::vertex_request(&many).unwrap()))
    });
    let vector: Vec<f64> = (0..768).map(|i| f64::from(i) / 768.0).collect();
    let titan =
        serde_json::to_vec(&json!({"embedding": vector, "inputTextTokenCount": 200})).unwrap();
    g.bench_function("titan_768_to_openai", |b| {
        b.iter(|| black_box(bedrock::embeddings::to_openai(&titan).unwrap()))
    });
    let google = serde_json::to_vec(&json!({"embeddings": [{"values": vector}]})).unwrap();
    g.bench_function("gemini_768_to_openai", |b| {
        b.iter(|| black_box(gemini::embeddings::to_openai(&google).unwrap()))
    });
    g.finish();
}

criterion_group!(
    benches,
    signing,
    decoding,
    translators,
    gemini_and_responses,
    embeddings
);
criterion_main!(benches);
