//! The guardrail suites' inputs (`benches/benches/guardrails.rs` and the
//! callgrind driver `examples/guardrail_instructions.rs`): `loadgen overhead
//! --variant guardrail`'s guardrail, its filler requests and the mock's
//! answer and stream.

use gateway::guardrails::patterns::PREBUILT;
use gateway::guardrails::{Guardrails, PostCall, Scope};

/// A default-on `pre_call` and `post_call` guardrail with every prebuilt
/// pattern and 1,000 blocked words (all `MASK`).
pub fn rails() -> Guardrails {
    let mut patterns = String::new();
    for p in PREBUILT {
        patterns.push_str(&format!(
            "{{pattern_type: prebuilt, pattern_name: {}, action: MASK}},",
            p.name
        ));
    }
    let mut words = String::new();
    for i in 0..1000 {
        words.push_str(&format!("{{keyword: codename{i:04}x, action: MASK}},"));
    }
    let yaml = format!(
        "- guardrail_name: out\n  litellm_params: {{guardrail: litellm_content_filter, mode: [pre_call, post_call], default_on: true, patterns: [{patterns}], blocked_words: [{words}]}}\n"
    );
    Guardrails::from_config(Some(&serde_yaml::from_str(&yaml).expect("the rail's YAML")))
        .expect("the rail's config")
}

/// The `post_call` checks a request of `rails` gets for its answer.
pub fn post_call(rails: &Guardrails) -> PostCall {
    let (_, checked) = rails
        .pre_call(
            Scope::default(),
            bytes::Bytes::from_static(b"{}"),
            &mut Default::default(),
        )
        .expect("an empty request passes");
    checked.post.expect("the rail runs post_call")
}

/// A chat request of four user messages of `loadgen`'s filler prose,
/// `size` bytes of text in all.
pub fn filler_request(size: usize) -> bytes::Bytes {
    let words = "the quick brown fox jumps over the lazy dog while the gateway routes ";
    let filler: String = words.chars().cycle().take(size / 4).collect();
    let messages: Vec<_> = (0..4)
        .map(|_| serde_json::json!({"role": "user", "content": filler}))
        .collect();
    let body = serde_json::json!({"model": "gpt-4o", "messages": messages, "max_tokens": 16});
    bytes::Bytes::from(serde_json::to_vec(&body).expect("a JSON body"))
}

/// The words of the mock's 16-token answer (`loadgen mock`).
const WORDS: [&str; 16] = [
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
    "incididunt",
    "ut",
    "labore",
    "et",
];

/// The mock's whole answer of 16 tokens.
pub fn mock_answer() -> Vec<u8> {
    let content = WORDS.join(" ");
    format!(
        r#"{{"id":"chatcmpl-mock-1234","object":"chat.completion","created":1765000000,"model":"gpt-4o","choices":[{{"index":0,"message":{{"role":"assistant","content":"{content}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":1070,"completion_tokens":16,"total_tokens":1086}}}}"#
    )
    .into_bytes()
}

/// The mock's stream of 16 tokens: 17 chunks and `[DONE]`, as SSE bytes.
pub fn mock_stream() -> Vec<u8> {
    let head = r#"{"id":"chatcmpl-mock-1234","object":"chat.completion.chunk","created":1765000000,"model":"gpt-4o","choices":"#;
    let mut out = String::new();
    for (i, w) in WORDS.iter().enumerate() {
        let role = if i == 0 { r#""role":"assistant","# } else { "" };
        let sep = if i + 1 < WORDS.len() { " " } else { "" };
        out.push_str(&format!(
            "data: {head}[{{\"index\":0,\"delta\":{{{role}\"content\":\"{w}{sep}\"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    out.push_str(&format!(
        "data: {head}[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n"
    ));
    out.into_bytes()
}
