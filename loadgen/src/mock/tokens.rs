//! Token accounting for mock responses: a cheap prompt-size estimate from the
//! request body, the completion length, and the generated words.

use serde_json::Value;

/// Words cycled through to build completion text; one word is one token.
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

/// Estimated tokens for `chars` characters of prompt: `ceil(chars / 4)`, at
/// least 1.
pub fn estimate(chars: usize) -> u64 {
    (chars.div_ceil(4) as u64).max(1)
}

/// Characters of text in a message `content` (a string, or an array of parts
/// whose `text` fields count).
pub fn content_chars(content: &Value) -> usize {
    match content {
        Value::String(s) => s.chars().count(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p {
                Value::String(s) => s.chars().count(),
                Value::Object(o) => o.get("text").map_or(0, content_chars),
                _ => 0,
            })
            .sum(),
        _ => 0,
    }
}

/// Prompt characters of a chat or Anthropic request: every message's
/// content, plus a top-level `system` (Anthropic) if present.
pub fn messages_chars(body: &Value) -> usize {
    let system = body.get("system").map_or(0, content_chars);
    let messages: usize = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, |ms| {
            ms.iter()
                .map(|m| m.get("content").map_or(0, content_chars))
                .sum()
        });
    system + messages
}

/// Characters of a legacy `prompt` or embeddings `input`: a string, an array
/// of strings, or token arrays (each token id counts as 4 characters, i.e.
/// one token).
pub fn input_chars(input: &Value) -> usize {
    match input {
        Value::String(s) => s.chars().count(),
        Value::Number(_) => 4,
        Value::Array(items) => items.iter().map(input_chars).sum(),
        _ => 0,
    }
}

/// Completion length: `default`, capped by the request's
/// `max_completion_tokens` or `max_tokens` when given.
pub fn completion_tokens(default: u64, body: &Value) -> u64 {
    let cap = body
        .get("max_completion_tokens")
        .and_then(Value::as_u64)
        .or_else(|| body.get("max_tokens").and_then(Value::as_u64));
    match cap {
        Some(cap) => default.min(cap),
        None => default,
    }
}

/// The text of token `i` of a completion `n` tokens long: a word, followed
/// by a space unless it is the last, so the pieces concatenate to [`text`].
pub fn piece(i: u64, n: u64) -> String {
    let word = WORDS[(i % WORDS.len() as u64) as usize];
    if i + 1 < n {
        format!("{word} ")
    } else {
        word.to_string()
    }
}

/// A completion of `n` tokens (words separated by single spaces).
pub fn text(n: u64) -> String {
    let mut out = String::with_capacity(n as usize * 7);
    for i in 0..n {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(WORDS[(i % WORDS.len() as u64) as usize]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn estimate_rounds_up_with_minimum_one() {
        assert_eq!(estimate(0), 1);
        assert_eq!(estimate(1), 1);
        assert_eq!(estimate(4), 1);
        assert_eq!(estimate(5), 2);
        assert_eq!(estimate(8), 2);
        assert_eq!(estimate(9), 3);
    }

    #[test]
    fn chat_messages_string_and_parts() {
        let body = json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "abcd"},
                {"role": "user", "content": [
                    {"type": "text", "text": "efghi"},
                    {"type": "image_url", "image_url": {"url": "http://x"}}
                ]},
                {"role": "assistant", "content": null}
            ]
        });
        assert_eq!(messages_chars(&body), 9);
        assert_eq!(estimate(messages_chars(&body)), 3);
    }

    #[test]
    fn anthropic_system_counts() {
        let body = json!({
            "system": [{"type": "text", "text": "12345678"}],
            "messages": [{"role": "user", "content": "é"}]
        });
        // Characters, not bytes: "é" is one.
        assert_eq!(messages_chars(&body), 9);
        assert_eq!(estimate(messages_chars(&body)), 3);
    }

    #[test]
    fn input_forms() {
        assert_eq!(input_chars(&json!("hello")), 5);
        assert_eq!(input_chars(&json!(["ab", "cde"])), 5);
        assert_eq!(estimate(input_chars(&json!([1, 2, 3]))), 3);
        assert_eq!(estimate(input_chars(&json!([[1, 2], [3]]))), 3);
    }

    #[test]
    fn completion_capped_by_request() {
        assert_eq!(completion_tokens(16, &json!({})), 16);
        assert_eq!(completion_tokens(16, &json!({"max_tokens": 4})), 4);
        assert_eq!(completion_tokens(16, &json!({"max_tokens": 40})), 16);
        assert_eq!(
            completion_tokens(16, &json!({"max_completion_tokens": 2, "max_tokens": 8})),
            2
        );
    }

    #[test]
    fn pieces_concatenate_to_text() {
        for n in 0..40 {
            let joined: String = (0..n).map(|i| piece(i, n)).collect();
            assert_eq!(joined, text(n));
            assert_eq!(text(n).split_whitespace().count() as u64, n);
        }
    }
}
