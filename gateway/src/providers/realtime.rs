//! The realtime API over WebSocket (`/v1/realtime`), as LiteLLM reaches
//! it: where a session of an `openai/` (or other OpenAI-compatible) or
//! `azure/` deployment goes and with which credentials, and the usage a
//! `response.done` event reports. Pure data.

use super::azure::{is_v1, query_value, DEFAULT_API_VERSION};
use crate::deployment::{Deployment, ProviderKind};
use crate::spend::{AudioTokens, Usage};
use std::sync::LazyLock;

/// Finds `response.done` in a server event; built once, not per event.
static RESPONSE_DONE: LazyLock<memchr::memmem::Finder<'static>> =
    LazyLock::new(|| memchr::memmem::Finder::new(b"response.done"));

/// Where a realtime session is opened and what the opening handshake
/// carries beyond the WebSocket headers.
#[derive(Debug, PartialEq)]
pub struct RealtimeTarget {
    /// The request target: path and query.
    pub path: String,
    /// The deployment's credential (and the beta header when asked for).
    pub headers: Vec<(&'static str, String)>,
}

/// A deployment whose provider has no realtime API here.
#[derive(Debug, PartialEq)]
pub struct NoRealtime;

/// The session's target on `dep` for `upstream_model`: OpenAI's
/// `/v1/realtime?model=` (LiteLLM replaces the api_base's path) with the
/// key as a bearer token, and `OpenAI-Beta: realtime=v1` when the client
/// sent it (`beta`); Azure's `{api_base}/openai/realtime?api-version=&deployment=`
/// (or `/openai/v1/realtime?model=` for the `v1` versions) with the key in
/// `api-key` (else the AD token as a bearer token). `intent` (OpenAI's
/// `?intent=transcription`) is passed on.
pub fn target(
    dep: &Deployment,
    upstream_model: &str,
    intent: Option<&str>,
    beta: bool,
) -> Result<RealtimeTarget, NoRealtime> {
    let key = dep.api_key.as_deref().filter(|k| !k.is_empty());
    let intent = intent
        .map(|i| format!("&intent={}", query_value(i)))
        .unwrap_or_default();
    let model = query_value(upstream_model);
    match dep.provider {
        ProviderKind::OpenAiCompatible => {
            let mut headers = Vec::new();
            if let Some(key) = key {
                headers.push(("authorization", format!("Bearer {key}")));
            }
            if beta {
                headers.push(("openai-beta", "realtime=v1".to_string()));
            }
            Ok(RealtimeTarget {
                path: format!("/v1/realtime?model={model}{intent}"),
                headers,
            })
        }
        ProviderKind::Azure => {
            let base_path = dep.base.as_ref().map_or("", |b| b.path.as_str());
            let version = dep.api_version.as_deref().unwrap_or(DEFAULT_API_VERSION);
            let path = if is_v1(version) {
                format!("{base_path}/openai/v1/realtime?model={model}{intent}")
            } else {
                format!(
                    "{base_path}/openai/realtime?api-version={}&deployment={model}{intent}",
                    query_value(version)
                )
            };
            let credential = match key {
                Some(key) => Some(("api-key", key.to_string())),
                None => dep
                    .azure_ad_token
                    .as_deref()
                    .filter(|t| !t.is_empty())
                    .map(|t| ("authorization", format!("Bearer {t}"))),
            };
            Ok(RealtimeTarget {
                path,
                headers: credential.into_iter().collect(),
            })
        }
        _ => Err(NoRealtime),
    }
}

/// What one `response.done` event reports.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ResponseUsage {
    /// Input tokens (text and audio, cached included) and output tokens,
    /// cached input tokens among them.
    pub tokens: Usage,
    /// Of those, the audio ones.
    pub audio: AudioTokens,
}

impl ResponseUsage {
    /// Adds `other` (saturating: counts come from the upstream).
    pub fn add(&mut self, other: &ResponseUsage) {
        let t = &mut self.tokens;
        t.prompt_tokens = t.prompt_tokens.saturating_add(other.tokens.prompt_tokens);
        t.completion_tokens = t
            .completion_tokens
            .saturating_add(other.tokens.completion_tokens);
        t.cached_tokens = t.cached_tokens.saturating_add(other.tokens.cached_tokens);
        self.audio.add(other.audio);
    }
}

/// `response.done`'s usage object.
#[derive(serde::Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    response: Option<Response>,
}

#[derive(serde::Deserialize)]
struct Response {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(serde::Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_token_details: Option<InputDetails>,
    #[serde(default)]
    output_token_details: Option<OutputDetails>,
}

#[derive(serde::Deserialize, Default)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: u64,
    #[serde(default)]
    audio_tokens: u64,
    #[serde(default)]
    cached_tokens_details: Option<CachedDetails>,
}

#[derive(serde::Deserialize, Default)]
struct CachedDetails {
    #[serde(default)]
    audio_tokens: u64,
}

#[derive(serde::Deserialize, Default)]
struct OutputDetails {
    #[serde(default)]
    audio_tokens: u64,
}

/// The usage of a server event when it is a `response.done` with one;
/// `None` for every other event (most are audio deltas: those are
/// recognised without parsing them).
pub fn response_done_usage(event: &[u8]) -> Option<ResponseUsage> {
    RESPONSE_DONE.find(event)?;
    let parsed: Event = serde_json::from_slice(event).ok()?;
    if parsed.kind != "response.done" {
        return None;
    }
    let usage = parsed.response?.usage?;
    let input = usage.input_token_details.unwrap_or_default();
    let output = usage.output_token_details.unwrap_or_default();
    // Details never exceed their totals, whatever the upstream says.
    let cached = input.cached_tokens.min(usage.input_tokens);
    Some(ResponseUsage {
        tokens: Usage {
            prompt_tokens: usage.input_tokens,
            completion_tokens: usage.output_tokens,
            cached_tokens: cached,
            ..Usage::default()
        },
        audio: AudioTokens {
            input: input.audio_tokens.min(usage.input_tokens),
            cached: input
                .cached_tokens_details
                .map_or(0, |d| d.audio_tokens)
                .min(cached),
            output: output.audio_tokens.min(usage.output_tokens),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn dep(params: &str) -> Deployment {
        let text = format!("model_list:\n  - model_name: g\n    litellm_params: {{{params}}}\n");
        let mut c = Config::parse(Path::new("config.yaml"), &text, &|_| None).unwrap();
        c.deployments.remove(0)
    }

    #[test]
    fn openai_sessions_go_to_v1_realtime_with_the_bearer_key() {
        let d = dep("model: openai/gpt-realtime, api_key: sk-up, api_base: 'http://h:1/custom/v1'");
        let t = target(&d, "gpt-realtime", None, true).unwrap();
        assert_eq!(t.path, "/v1/realtime?model=gpt-realtime");
        assert_eq!(
            t.headers,
            vec![
                ("authorization", "Bearer sk-up".to_string()),
                ("openai-beta", "realtime=v1".to_string())
            ]
        );
        let t = target(&d, "a b", Some("transcription"), false).unwrap();
        assert_eq!(t.path, "/v1/realtime?model=a%20b&intent=transcription");
        assert_eq!(t.headers.len(), 1);
    }

    #[test]
    fn azure_sessions_name_the_deployment_and_version() {
        let d = dep(
            "model: azure/rt, api_key: az, api_base: 'https://x.openai.azure.com', api_version: '2024-10-01-preview'",
        );
        let t = target(&d, "rt", None, true).unwrap();
        assert_eq!(
            t.path,
            "/openai/realtime?api-version=2024-10-01-preview&deployment=rt"
        );
        assert_eq!(t.headers, vec![("api-key", "az".to_string())]);
        let d = dep(
            "model: azure/rt, api_key: az, api_base: 'https://x.openai.azure.com', api_version: v1",
        );
        assert_eq!(
            target(&d, "rt", None, false).unwrap().path,
            "/openai/v1/realtime?model=rt"
        );
        let d = dep("model: anthropic/claude-3-5-sonnet, api_key: k");
        assert_eq!(target(&d, "claude", None, false), Err(NoRealtime));
    }

    #[test]
    fn usage_is_read_from_response_done_only() {
        let done = br#"{"type":"response.done","event_id":"e","response":{"id":"r","usage":{"total_tokens":30,"input_tokens":20,"output_tokens":10,"input_token_details":{"cached_tokens":4,"text_tokens":8,"audio_tokens":12,"cached_tokens_details":{"text_tokens":1,"audio_tokens":3}},"output_token_details":{"text_tokens":2,"audio_tokens":8}}}}"#;
        let u = response_done_usage(done).unwrap();
        assert_eq!(
            (
                u.tokens.prompt_tokens,
                u.tokens.completion_tokens,
                u.tokens.cached_tokens
            ),
            (20, 10, 4)
        );
        assert_eq!((u.audio.input, u.audio.cached, u.audio.output), (12, 3, 8));
        let delta = br#"{"type":"response.audio.delta","delta":"response.done"}"#;
        assert_eq!(response_done_usage(delta), None);
        assert_eq!(response_done_usage(b"response.done"), None);
        // Details larger than their totals are cut to them.
        let odd = br#"{"type":"response.done","response":{"usage":{"input_tokens":1,"output_tokens":1,"input_token_details":{"cached_tokens":9,"audio_tokens":9},"output_token_details":{"audio_tokens":9}}}}"#;
        let u = response_done_usage(odd).unwrap();
        assert_eq!(
            (u.tokens.cached_tokens, u.audio.input, u.audio.output),
            (1, 1, 1)
        );
    }
}
