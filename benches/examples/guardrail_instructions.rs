//! A driver for counting the guardrail path's instructions under
//! callgrind (load-independent): `guardrail_instructions CASE N` runs CASE
//! N times after one warm-up run; the instructions of one run are
//! (count at N - count at 0) / N. Cases: `pre:KB` (`pre_call` of a chat
//! request of four user messages of `loadgen`'s filler prose, about KB
//! kilobytes in all), `answer` (`post_call` on the mock's 16-token chat
//! answer), `stream` (the mock's 16-token stream, 17 chunks and `[DONE]`,
//! through the relay's usage tap and the stream window as
//! `proxy::guard` runs it: each chunk's text found in place, fed to the
//! window and spliced back) and `tap` (the usage tap alone on it).

use gateway::guardrails::patterns::PREBUILT;
use gateway::guardrails::{Guardrails, Scope};
use std::hint::black_box;

/// A default-on `pre_call` and `post_call` guardrail with every prebuilt
/// pattern and 1,000 blocked words (all `MASK`): `loadgen overhead
/// --variant guardrail`'s.
fn rails() -> Guardrails {
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
    Guardrails::from_config(Some(&serde_yaml::from_str(&yaml).unwrap())).unwrap()
}

/// A chat request of four user messages of filler prose, `size` bytes of
/// text in all.
fn request(size: usize) -> bytes::Bytes {
    let words = "the quick brown fox jumps over the lazy dog while the gateway routes ";
    let filler: String = words.chars().cycle().take(size / 4).collect();
    let messages: Vec<_> = (0..4)
        .map(|_| serde_json::json!({"role": "user", "content": filler}))
        .collect();
    let body = serde_json::json!({"model": "gpt-4o", "messages": messages, "max_tokens": 16});
    bytes::Bytes::from(serde_json::to_vec(&body).unwrap())
}

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
fn answer() -> Vec<u8> {
    let content = WORDS.join(" ");
    format!(
        r#"{{"id":"chatcmpl-mock-1234","object":"chat.completion","created":1765000000,"model":"gpt-4o","choices":[{{"index":0,"message":{{"role":"assistant","content":"{content}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":1070,"completion_tokens":16,"total_tokens":1086}}}}"#
    )
    .into_bytes()
}

/// The mock's stream of 16 tokens, as SSE bytes.
fn stream() -> Vec<u8> {
    let mut out = Vec::new();
    let head = r#"{"id":"chatcmpl-mock-1234","object":"chat.completion.chunk","created":1765000000,"model":"gpt-4o","choices":"#;
    for (i, w) in WORDS.iter().enumerate() {
        let role = if i == 0 { r#""role":"assistant","# } else { "" };
        let sep = if i + 1 < WORDS.len() { " " } else { "" };
        out.extend_from_slice(
            format!(
                "data: {head}[{{\"index\":0,\"delta\":{{{role}\"content\":\"{w}{sep}\"}},\"finish_reason\":null}}]}}\n\n"
            )
            .as_bytes(),
        );
    }
    out.extend_from_slice(
        format!("data: {head}[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n")
            .as_bytes(),
    );
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().expect("a case");
    let n: usize = args.next().map_or(1, |n| n.parse().unwrap());
    let rails = rails();
    let (_, checked) = rails
        .pre_call(
            Scope::default(),
            bytes::Bytes::from_static(b"{}"),
            &mut Default::default(),
        )
        .unwrap();
    let post = checked.post.unwrap();
    let mut run: Box<dyn FnMut()> = match case.as_str() {
        "answer" => {
            let body = answer();
            Box::new(move || {
                let mut log = Default::default();
                black_box(post.answer(&body, &mut log).unwrap().len());
            })
        }
        "stream" => {
            let body = stream();
            Box::new(move || {
                let mut tap = gateway::spend::StreamUsage::new();
                tap.feed(&body);
                let mut guard = gateway::proxy::bench::StreamGuard::new(&post);
                let mut out = Vec::with_capacity(body.len());
                guard.feed(&body, &mut out);
                black_box((tap.finish(|| 0).0.completion_tokens, out.len()));
            })
        }
        "tap" => {
            let body = stream();
            Box::new(move || {
                let mut tap = gateway::spend::StreamUsage::new();
                tap.feed(&body);
                black_box(tap.finish(|| 0).0.completion_tokens);
            })
        }
        pre => {
            let kb: usize = pre.strip_prefix("pre:").expect("a case").parse().unwrap();
            let body = request(kb << 10);
            Box::new(move || {
                let mut log = Default::default();
                let (out, _) = rails
                    .pre_call(Scope::default(), body.clone(), &mut log)
                    .unwrap();
                black_box(out.len());
            })
        }
    };
    run();
    for _ in 0..n {
        run();
    }
}
