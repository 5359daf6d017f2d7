//! `POST …/embeddings`: one small deterministic vector per input.

use serde::Serialize;
use serde_json::Value;

use super::{Ctx, Reply, Usage};
use crate::mock::tokens;

/// Dimensions of every mock embedding.
pub const DIMENSIONS: usize = 8;

#[derive(Serialize)]
struct List<'a> {
    object: &'static str,
    data: Vec<Item>,
    model: &'a str,
    usage: EmbeddingUsage,
}

#[derive(Serialize)]
struct Item {
    object: &'static str,
    index: usize,
    embedding: Vector,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Vector {
    Floats([f32; DIMENSIONS]),
    Base64(String),
}

#[derive(Serialize)]
struct EmbeddingUsage {
    prompt_tokens: u64,
    total_tokens: u64,
}

/// Answers an embeddings request. Honors `encoding_format: "base64"`
/// (little-endian `f32`s, as OpenAI does).
pub fn handle(ctx: &Ctx<'_>, body: &Value) -> Reply {
    let input = body.get("input").unwrap_or(&Value::Null);
    let prompt = tokens::estimate(tokens::input_chars(input));
    let base64 = body.get("encoding_format").and_then(Value::as_str) == Some("base64");
    let data = (0..input_count(input))
        .map(|index| {
            let floats = vector(index);
            Item {
                object: "embedding",
                index,
                embedding: if base64 {
                    Vector::Base64(encode_base64(&floats))
                } else {
                    Vector::Floats(floats)
                },
            }
        })
        .collect();
    let usage = Usage {
        prompt,
        completion: 0,
    };
    let list = List {
        object: "list",
        data,
        model: ctx.model,
        usage: EmbeddingUsage {
            prompt_tokens: prompt,
            total_tokens: prompt,
        },
    };
    Reply::ok(&list, usage)
}

/// Number of inputs: a string or a single token array is one; an array of
/// strings or of token arrays is one per element.
fn input_count(input: &Value) -> usize {
    match input {
        Value::Array(items) if items.iter().all(Value::is_number) && !items.is_empty() => 1,
        Value::Array(items) => items.len(),
        Value::Null => 0,
        _ => 1,
    }
}

/// The mock vector of input `index`.
pub fn vector(index: usize) -> [f32; DIMENSIONS] {
    std::array::from_fn(|j| (((index * DIMENSIONS + j) % 13) as f32 - 6.0) / 10.0)
}

/// `floats` as little-endian `f32` bytes in standard base64 (OpenAI's and
/// Cohere's `base64` embeddings).
pub fn encode_base64(floats: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            if k <= group.len() {
                out.push(ALPHABET[((n >> (18 - 6 * k)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::api::Body;
    use crate::mock::controls::Controls;
    use serde_json::json;

    fn run(body: Value) -> (Value, Option<Usage>) {
        let controls = Controls::default();
        let ctx = Ctx {
            id: 1,
            created: 0,
            model: "emb",
            controls: &controls,
            req: &crate::mock::api::test_request("/v1/x", &[]),
        };
        let reply = handle(&ctx, &body);
        let Body::Full(b) = reply.body else { panic!() };
        (serde_json::from_slice(&b).unwrap(), reply.usage)
    }

    #[test]
    fn one_item_per_input() {
        let (v, usage) = run(json!({"model": "emb", "input": ["abcd", "efgh", "i"]}));
        assert_eq!(v["object"], "list");
        assert_eq!(v["model"], "emb");
        assert_eq!(v["data"].as_array().unwrap().len(), 3);
        assert_eq!(v["data"][2]["index"], 2);
        assert_eq!(
            v["data"][0]["embedding"].as_array().unwrap().len(),
            DIMENSIONS
        );
        assert_eq!(v["usage"]["prompt_tokens"], 3);
        assert_eq!(v["usage"]["total_tokens"], 3);
        assert_eq!(
            usage,
            Some(Usage {
                prompt: 3,
                completion: 0
            })
        );
        let (v, _) = run(json!({"model": "emb", "input": "hello"}));
        assert_eq!(v["data"].as_array().unwrap().len(), 1);
        let (v, _) = run(json!({"model": "emb", "input": [1, 2, 3]}));
        assert_eq!(v["data"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn base64_encoding() {
        assert_eq!(encode_base64(&[1.0]), "AACAPw==");
        let (v, _) = run(json!({"model": "emb", "input": "x", "encoding_format": "base64"}));
        assert_eq!(v["data"][0]["embedding"].as_str().unwrap().len(), 44);
    }
}
