//! The requests a run sends: chat-completion bodies of a chosen size,
//! rotated over models and API keys, pre-rendered once so the send path
//! only copies bytes.

use serde_json::json;

use super::Target;
use crate::cli::Args;
use crate::units::ByteSize;

/// What every request of a run looks like.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSpec {
    /// Model names, used in turn.
    pub models: Vec<String>,
    /// API keys sent as `Authorization: Bearer`, used in turn; none sends no
    /// credential.
    pub keys: Vec<String>,
    /// Approximate body size in bytes (the user message is padded to it).
    pub body_size: usize,
    /// Ask for a streamed (SSE) response.
    pub stream: bool,
    /// `max_tokens` of each request.
    pub max_tokens: u64,
    /// Members added to every body (e.g. a `cache` object).
    pub extra: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Default for RequestSpec {
    fn default() -> Self {
        RequestSpec {
            models: vec!["gpt-4o".to_string()],
            keys: Vec::new(),
            body_size: 1024,
            stream: false,
            max_tokens: 16,
            extra: None,
        }
    }
}

/// Usage lines of the flags [`RequestSpec::parse_flag`] accepts, but
/// `--model`, which only some commands offer.
pub const FLAGS_USAGE: &str =
    "  --body-size SIZE          request body size: 1k, 64k, 512k, … [default: 1k]
  --stream                  ask for streamed (SSE) responses
  --max-tokens N            max_tokens of each request [default: 16]
";

impl RequestSpec {
    /// Applies `flag` if it is one of [`FLAGS_USAGE`]; returns whether it
    /// was.
    pub fn parse_flag(&mut self, flag: &str, args: &mut Args) -> Result<bool, String> {
        match flag {
            "model" => {
                let list: String = args.value(flag)?;
                self.models = list
                    .split(',')
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map(String::from)
                    .collect();
            }
            "body-size" => self.body_size = args.value::<ByteSize>(flag)?.0,
            "stream" => self.stream = true,
            "max-tokens" => self.max_tokens = args.value(flag)?,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Pre-rendered request pieces for every model and key of a [`RequestSpec`].
#[derive(Debug)]
pub struct RequestMix {
    /// Request line, `Host` and `Content-Type`.
    prefix: Vec<u8>,
    /// One `Authorization` line per key (a single empty entry without keys).
    auth: Vec<Vec<u8>>,
    /// Per model: its `Content-Length` line and head end, and its body.
    bodies: Vec<(Vec<u8>, Vec<u8>)>,
}

impl RequestMix {
    /// Renders `spec` for `target`. A target path ending in `/messages`
    /// gets Anthropic Messages requests (the key in `x-api-key`, an
    /// `anthropic-version`), one ending in `/responses` Responses API
    /// requests, any other chat completions requests.
    pub fn new(spec: &RequestSpec, target: &Target) -> RequestMix {
        let messages = target.path.ends_with("/messages");
        let responses = target.path.ends_with("/responses");
        let mut prefix = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: loadgen\r\nContent-Type: application/json\r\n",
            target.path, target.host
        );
        if messages {
            prefix.push_str("anthropic-version: 2023-06-01\r\n");
        }
        let prefix = prefix.into_bytes();
        let auth = if spec.keys.is_empty() {
            vec![Vec::new()]
        } else {
            spec.keys
                .iter()
                .map(|k| {
                    if messages {
                        format!("x-api-key: {k}\r\n").into_bytes()
                    } else {
                        format!("Authorization: Bearer {k}\r\n").into_bytes()
                    }
                })
                .collect()
        };
        let bodies = spec
            .models
            .iter()
            .map(|model| {
                let body = if messages {
                    messages_body(model, spec.body_size, spec.max_tokens, spec.stream)
                } else if responses {
                    responses_body(model, spec.body_size, spec.max_tokens, spec.stream)
                } else {
                    chat_body(model, spec.body_size, spec.max_tokens, spec.stream)
                };
                let body = with_members(body, spec.extra.as_ref());
                let end = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
                (end, body)
            })
            .collect();
        RequestMix {
            prefix,
            auth,
            bodies,
        }
    }

    /// Writes request number `i` into `out` (cleared first). Models rotate
    /// fastest, then keys, so every pairing is used.
    pub fn write(&self, i: u64, out: &mut Vec<u8>) {
        let models = self.bodies.len() as u64;
        let (end, body) = &self.bodies[(i % models) as usize];
        let auth = &self.auth[((i / models) % self.auth.len() as u64) as usize];
        out.clear();
        out.reserve(self.prefix.len() + auth.len() + end.len() + body.len());
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(auth);
        out.extend_from_slice(end);
        out.extend_from_slice(body);
    }
}

/// `body` (a JSON object) with `extra`'s members added.
fn with_members(
    body: Vec<u8>,
    extra: Option<&serde_json::Map<String, serde_json::Value>>,
) -> Vec<u8> {
    let Some(extra) = extra else {
        return body;
    };
    let mut v: serde_json::Value = serde_json::from_slice(&body).expect("a rendered body is JSON");
    if let Some(map) = v.as_object_mut() {
        map.extend(extra.clone());
    }
    serde_json::to_vec(&v).expect("a JSON value always serializes")
}

/// A chat-completions body for `model` of about `size` bytes: one user
/// message padded with prose.
pub fn chat_body(model: &str, size: usize, max_tokens: u64, stream: bool) -> Vec<u8> {
    padded(size, |content| {
        json!({
            "model": model,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "stream": stream,
        })
    })
}

/// A Responses API body for `model` of about `size` bytes: instructions
/// and an input padded with prose.
pub fn responses_body(model: &str, size: usize, max_tokens: u64, stream: bool) -> Vec<u8> {
    padded(size, |content| {
        json!({
            "model": model,
            "instructions": "You are a helpful assistant.",
            "input": content,
            "max_output_tokens": max_tokens,
            "stream": stream,
        })
    })
}

/// An Anthropic Messages body for `model` of about `size` bytes, as Claude
/// Code sends one: a system block and one user message padded with prose.
pub fn messages_body(model: &str, size: usize, max_tokens: u64, stream: bool) -> Vec<u8> {
    padded(size, |content| {
        json!({
            "model": model,
            "max_tokens": max_tokens,
            "system": [{"type": "text", "text": "You are a helpful assistant."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": content}]}],
            "stream": stream,
        })
    })
}

/// `body(filler)` serialized, the filler prose sized so the whole is about
/// `size` bytes.
fn padded(size: usize, body: impl Fn(&str) -> serde_json::Value) -> Vec<u8> {
    let render =
        |content: &str| serde_json::to_vec(&body(content)).expect("a JSON value always serializes");
    let bare = render("").len();
    let words = "the quick brown fox jumps over the lazy dog while the gateway routes ";
    let filler: String = words
        .chars()
        .cycle()
        .take(size.saturating_sub(bare))
        .collect();
    render(&filler)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(models: &[&str], keys: &[&str]) -> RequestSpec {
        RequestSpec {
            models: models.iter().map(|s| s.to_string()).collect(),
            keys: keys.iter().map(|s| s.to_string()).collect(),
            body_size: 1024,
            stream: true,
            max_tokens: 7,
            extra: None,
        }
    }

    #[test]
    fn bodies_hit_the_requested_size() {
        for size in [1024, 64 * 1024, 512 * 1024] {
            let body = chat_body("gpt-4o", size, 16, false);
            assert_eq!(body.len(), size);
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["model"], "gpt-4o");
        }
        assert!(
            chat_body("m", 10, 1, false).len() > 10,
            "never truncated below valid JSON"
        );
    }

    #[test]
    fn messages_targets_get_anthropic_requests() {
        let target = Target::parse("http://127.0.0.1:1/v1/messages").unwrap();
        let mix = RequestMix::new(&spec(&["claude"], &["k1"]), &target);
        let mut out = Vec::new();
        mix.write(0, &mut out);
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains("\r\nx-api-key: k1\r\n")
                && head.contains("anthropic-version: 2023-06-01")
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(
            (v["model"].as_str(), v["max_tokens"].as_u64()),
            (Some("claude"), Some(7))
        );
        assert!(v["messages"][0]["content"][0]["text"].is_string());
        assert_eq!(messages_body("m", 4096, 1, false).len(), 4096);
        let target = Target::parse("http://127.0.0.1:1/v1/responses").unwrap();
        let mix = RequestMix::new(&spec(&["gpt"], &["k1"]), &target);
        let mut out = Vec::new();
        mix.write(0, &mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.contains("Authorization: Bearer k1"));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["max_output_tokens"], 7);
        assert!(v["input"].is_string());
    }

    #[test]
    fn rotates_models_then_keys() {
        let target = Target::parse("http://127.0.0.1:1").unwrap();
        let mix = RequestMix::new(&spec(&["a", "b"], &["k1", "k2"]), &target);
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for i in 0..4 {
            mix.write(i, &mut out);
            let text = String::from_utf8(out.clone()).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"));
            assert!(head.contains(&format!("Content-Length: {}", body.len())));
            let v: serde_json::Value = serde_json::from_str(body).unwrap();
            let key = head
                .split("Bearer ")
                .nth(1)
                .unwrap()
                .lines()
                .next()
                .unwrap();
            seen.push(format!("{}/{key}", v["model"].as_str().unwrap()));
            assert_eq!(
                (v["stream"].as_bool(), v["max_tokens"].as_u64()),
                (Some(true), Some(7))
            );
        }
        assert_eq!(seen, ["a/k1", "b/k1", "a/k2", "b/k2"]);
    }

    #[test]
    fn parses_request_flags() {
        let mut spec = RequestSpec::default();
        let mut args = Args::new(
            "--model a,b --body-size 64k --stream --max-tokens 3 --other"
                .split_whitespace()
                .map(String::from),
        );
        while let Some(flag) = args.next_flag().unwrap() {
            let known = spec.parse_flag(&flag, &mut args).unwrap();
            assert_eq!(known, flag != "other");
        }
        assert_eq!(spec.models, ["a", "b"]);
        assert_eq!(
            (spec.body_size, spec.stream, spec.max_tokens),
            (65536, true, 3)
        );
    }

    #[test]
    fn no_key_no_authorization() {
        let target = Target::parse("http://127.0.0.1:1").unwrap();
        let mut out = Vec::new();
        RequestMix::new(&spec(&["a"], &[]), &target).write(0, &mut out);
        assert!(!String::from_utf8(out).unwrap().contains("Authorization"));
    }
}
