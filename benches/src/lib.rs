//! Inputs shared by the criterion suites: realistic request heads and chat
//! bodies of a chosen size.

pub mod guardrail_inputs;

/// A chat-completions request head as the OpenAI Python SDK sends it.
pub const SDK_REQUEST_HEAD: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\nAccept: application/json\r\nContent-Type: application/json\r\nUser-Agent: OpenAI/Python 1.54.0\r\nX-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.54.0\r\nX-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\nX-Stainless-Runtime: CPython\r\nX-Stainless-Runtime-Version: 3.11.7\r\nAuthorization: Bearer sk-1234567890abcdef\r\nX-Stainless-Async: false\r\nx-stainless-retry-count: 0\r\nContent-Length: 1024\r\n\r\n";

/// A chat body of about `size` bytes: a system prompt and a user message
/// padded with prose, `model` placed after `messages` as SDKs do.
pub fn chat_body(size: usize) -> Vec<u8> {
    let filler_len = size.saturating_sub(160);
    let words = "the quick brown fox jumps over the lazy dog while the gateway routes ";
    let filler: String = words.chars().cycle().take(filler_len).collect();
    format!(
        r#"{{"messages":[{{"role":"system","content":"You are a helpful assistant."}},{{"role":"user","content":"{filler}"}}],"model":"gpt-4o","max_tokens":256,"stream":false}}"#
    )
    .into_bytes()
}
