//! Google Vertex AI (`vertex_ai/<model>`): Gemini models through
//! `generateContent`, with a service account's OAuth access token.
//!
//! Requests go to
//! `{base}/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:generateContent`
//! (`:streamGenerateContent?alt=sse` when streamed), where the base is
//! `https://{location}-aiplatform.googleapis.com`
//! (`https://aiplatform.googleapis.com` for `global`,
//! `https://aiplatform.{location}.rep.googleapis.com` for a multi-region
//! such as `us`), as LiteLLM builds it. An `api_base` with an empty path
//! gets the same path; with `/v1` or `/v1beta1` the rest of it; with any
//! other path it names the model resource and only `:{method}` is added.
//! The body is Gemini's (`gemini` translates both ways), the credential
//! `Authorization: Bearer <token>` from `google_auth`.
//!
//! Settings are LiteLLM's: `vertex_project` (else `VERTEXAI_PROJECT`,
//! `VERTEX_PROJECT`, else the key file's `project_id`), `vertex_location`
//! (else `VERTEXAI_LOCATION`, else `us-central1`), `vertex_credentials`:
//! a service-account key or `authorized_user` credentials as JSON text, a
//! mapping, or a file path (else `VERTEXAI_CREDENTIALS`, else the file
//! `GOOGLE_APPLICATION_CREDENTIALS` names). Without credentials a
//! deployment answers 401: metadata-server and workload-identity
//! credentials are not fetched.
//!
//! Models named `claude-…` are Anthropic's, served by `anthropic`
//! (`:rawPredict`, the Messages API); `semantic-ranker-…` models serve
//! LiteLLM's rerank through the ranking API (`rank`); Imagen models serve
//! OpenAI's image generation through `:predict` (`imagen`).

mod anthropic;
pub mod imagen;
pub mod rank;

pub use anthropic::{VertexAnthropic, VERTEX_ANTHROPIC_VERSION};

use super::gemini::{self, GeminiToChat};
use super::{with_extra_headers, Header, Provider, UpstreamRequest};
use crate::deployment::{Deployment, VertexSettings};
use crate::error::{ErrorClass, GatewayError};
use crate::formats::{Events, Format, StreamTranslator, TranslateError};
use crate::google_auth::{TokenSource, MAX_KEY_FILE};
use crate::inbound::{Endpoint, LlmRequest};
use std::borrow::Cow;

/// The location when nothing names one (LiteLLM's default).
pub const DEFAULT_LOCATION: &str = "us-central1";

/// The `litellm_params` Vertex keys of a deployment.
#[derive(Debug, Default)]
pub struct VertexParams<'a> {
    /// `vertex_project`.
    pub project: Option<&'a str>,
    /// `vertex_location`.
    pub location: Option<&'a str>,
    /// `vertex_credentials`, as JSON text or a file path.
    pub credentials: Option<&'a str>,
}

/// The settings and the default API base for `params`, reading the
/// environment through `lookup` for what they leave out.
pub fn resolve(
    params: &VertexParams<'_>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(VertexSettings, String), String> {
    let pick = |given: Option<&str>, vars: &[&str]| -> Option<String> {
        given
            .filter(|v| !v.trim().is_empty())
            .map(str::to_string)
            .or_else(|| {
                vars.iter()
                    .find_map(|v| lookup(v).filter(|s| !s.trim().is_empty()))
            })
    };
    let key_file = match pick(params.credentials, &["VERTEXAI_CREDENTIALS"]) {
        Some(given) => Some(key_text(&given, "vertex_credentials")?),
        None => match pick(None, &["GOOGLE_APPLICATION_CREDENTIALS"]) {
            Some(path) => Some(read_key_file(&path, "GOOGLE_APPLICATION_CREDENTIALS")?),
            None => None,
        },
    };
    let auth = key_file
        .map(|text| TokenSource::for_key_file(&text))
        .transpose()
        .map_err(|e| format!("vertex_credentials: {e}"))?;
    let project = pick(params.project, &["VERTEXAI_PROJECT", "VERTEX_PROJECT"])
        .or_else(|| {
            auth.as_ref()
                .and_then(|a| a.project_id())
                .map(str::to_string)
        })
        .ok_or("vertex_project is required (or VERTEXAI_PROJECT, or credentials with project_id or quota_project_id)")?;
    let valid_project = project.len() <= 128
        && project
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-.:".contains(&b));
    if !valid_project {
        return Err(format!("vertex_project \"{project}\" is not a project id"));
    }
    let location = pick(params.location, &["VERTEXAI_LOCATION"])
        .unwrap_or_else(|| DEFAULT_LOCATION.to_string());
    let valid_location = location.len() <= 64
        && location.starts_with(|c: char| c.is_ascii_lowercase())
        && location
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid_location {
        return Err(format!("vertex_location \"{location}\" is not a location"));
    }
    let base = if location == "global" {
        "https://aiplatform.googleapis.com".to_string()
    } else if !location.contains('-') {
        format!("https://aiplatform.{location}.rep.googleapis.com")
    } else {
        format!("https://{location}-aiplatform.googleapis.com")
    };
    Ok((
        VertexSettings {
            project,
            location,
            auth,
        },
        base,
    ))
}

/// A key file's JSON: `given` itself when it is JSON, else the file it names.
fn key_text(given: &str, what: &str) -> Result<String, String> {
    if given.trim_start().starts_with('{') {
        Ok(given.to_string())
    } else {
        read_key_file(given, what)
    }
}

/// The key file at `path`, at most [`MAX_KEY_FILE`] bytes.
fn read_key_file(path: &str, what: &str) -> Result<String, String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_KEY_FILE as u64 + 1).read_to_string(&mut text))
        .map_err(|e| format!("{what}: cannot read the key file {path:?}: {e}"))?;
    if text.len() > MAX_KEY_FILE {
        return Err(format!(
            "{what}: the key file {path:?} is larger than 64 KiB"
        ));
    }
    Ok(text)
}

/// The Vertex AI translator.
pub struct Vertex;

/// The path of `endpoint`'s method on `model` below `dep`'s base (see the
/// module doc).
fn model_path(
    dep: &Deployment,
    settings: &VertexSettings,
    model: &str,
    endpoint: Endpoint,
    stream: bool,
) -> String {
    let method = match (endpoint, stream) {
        (Endpoint::Embeddings | Endpoint::ImageGenerations, _) => "predict",
        (_, true) => "streamGenerateContent",
        (_, false) => "generateContent",
    };
    let base = dep.base.as_ref().map_or("", |b| b.path.as_str());
    let enc = super::sigv4::uri_encode;
    let mut path = if base.is_empty() || base == "/v1" || base == "/v1beta1" {
        format!(
            "{}/projects/{}/locations/{}/publishers/google/models/{}:{method}",
            if base.is_empty() { "/v1" } else { base },
            enc(&settings.project),
            enc(&settings.location),
            enc(model),
        )
    } else {
        format!("{base}:{method}")
    };
    if stream && !matches!(endpoint, Endpoint::Embeddings | Endpoint::ImageGenerations) {
        path.push_str("?alt=sse");
    }
    path
}

/// Whether `vertex_ai/{model}` is one of Anthropic's models.
pub fn is_anthropic_model(model: &str) -> bool {
    model.starts_with("claude")
}

/// The `Authorization` header of `settings`, or why there is none.
fn authorization(settings: &VertexSettings) -> Result<Header, GatewayError> {
    let unauthorized = |message: &str| GatewayError::Upstream {
        status: 401,
        message: message.to_string(),
        error_type: Some("authentication_error".into()),
        provider_code: None,
        upstream_param: None,
        retry_after: None,
        class: ErrorClass::Authentication,
    };
    let Some(auth) = &settings.auth else {
        return Err(unauthorized(
            "vertex_ai: no credentials: set vertex_credentials or GOOGLE_APPLICATION_CREDENTIALS to a service-account key",
        ));
    };
    let token = auth.current().ok_or(GatewayError::Unavailable(
        "vertex_ai: no Google access token yet",
    ))?;
    Ok((Cow::Borrowed("authorization"), token.header.clone()))
}

impl Provider for Vertex {
    fn format(&self) -> Format {
        Format::Gemini
    }

    fn build_request(
        &self,
        req: &LlmRequest,
        upstream_model: &str,
        dep: &Deployment,
    ) -> Result<UpstreamRequest, GatewayError> {
        if req.endpoint == Endpoint::Rerank {
            let settings = dep.vertex.as_ref().ok_or(GatewayError::Internal(
                "a vertex_ai deployment without settings",
            ))?;
            let base = dep.base.as_ref().map_or("", |b| b.path.as_str());
            let own = vec![
                authorization(settings)?,
                (
                    Cow::Borrowed("x-goog-user-project"),
                    settings.project.clone(),
                ),
            ];
            return Ok(UpstreamRequest::whole(
                rank::path(base, &settings.project),
                with_extra_headers(own, dep),
                rank::request(&req.body, upstream_model)?,
            ));
        }
        let (body, include_usage) = match req.endpoint {
            Endpoint::ChatCompletions => gemini::request_from_chat(&req.body)?,
            Endpoint::Embeddings => (gemini::embeddings::vertex_request(&req.body)?, false),
            Endpoint::ImageGenerations if imagen::is_imagen(upstream_model) => {
                (imagen::request(&req.body)?, false)
            }
            _ => {
                return Err(GatewayError::InvalidParam {
                    param: "model",
                    message: format!(
                        "provider vertex_ai serves /chat/completions, /embeddings, /v1/messages, /v1/responses, (semantic-ranker models) /rerank and (Imagen models) /images/generations, not {}",
                        req.endpoint.path_suffix()
                    ),
                })
            }
        };
        let settings = dep.vertex.as_ref().ok_or(GatewayError::Internal(
            "a vertex_ai deployment without settings",
        ))?;
        let own = vec![authorization(settings)?];
        Ok(UpstreamRequest {
            path: model_path(dep, settings, upstream_model, req.endpoint, req.stream),
            headers: with_extra_headers(own, dep),
            body: [body.into(), Default::default(), Default::default()],
            include_usage,
        })
    }

    fn response_to_internal(&self, body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(gemini::response_to_chat(body))
    }

    fn embeddings_to_internal(&self, body: &[u8]) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(gemini::embeddings::to_openai(body))
    }

    fn rerank_to_cohere(
        &self,
        body: &[u8],
        documents: usize,
    ) -> Option<Result<Vec<u8>, TranslateError>> {
        Some(rank::to_cohere(body, documents))
    }

    fn images_to_openai(&self, body: &[u8]) -> Option<Result<Vec<u8>, GatewayError>> {
        Some(imagen::to_openai(body, chrono::Utc::now().timestamp()))
    }

    /// As Gemini: every http(s) image goes inline.
    fn inlines_image_url(&self, url: &str) -> bool {
        gemini::Gemini.inlines_image_url(url)
    }

    fn stream_to_internal(&self, include_usage: bool) -> Option<Box<dyn StreamTranslator>> {
        Some(Box::new(Events::new(GeminiToChat::new(include_usage))))
    }

    fn accepts_stream_options(&self, _dep: &Deployment) -> bool {
        false
    }

    fn error(&self, status: u16, body: &[u8], retry_after: Option<String>) -> GatewayError {
        gemini::google_error(status, body, retry_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const KEY: &str = include_str!("../../../../loadgen/src/mock/api/vertex/service_account.json");

    fn dep(params: &str, env: &[(&str, &str)]) -> Result<Deployment, String> {
        let text = format!("model_list:\n  - model_name: v\n    litellm_params: {{{params}}}\n");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        Config::parse(std::path::Path::new("c.yaml"), &text, &lookup)
            .map(|mut c| c.deployments.remove(0))
            .map_err(|e| e.to_string())
    }

    fn key_file() -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, KEY.as_bytes()).unwrap();
        f
    }

    fn path_of(d: &Deployment, stream: bool) -> String {
        model_path(
            d,
            d.vertex.as_ref().unwrap(),
            &d.upstream_model,
            Endpoint::ChatCompletions,
            stream,
        )
    }

    #[test]
    fn urls_follow_litellm() {
        let file = key_file();
        let creds = file.path().to_str().unwrap();
        let d = dep(
            "model: vertex_ai/gemini-2.0-flash",
            &[("GOOGLE_APPLICATION_CREDENTIALS", creds)],
        )
        .unwrap();
        let v = d.vertex.as_ref().unwrap();
        assert_eq!(
            (v.project.as_str(), v.location.as_str()),
            ("mock-project", "us-central1")
        );
        assert_eq!(
            d.base.as_ref().unwrap().url,
            "https://us-central1-aiplatform.googleapis.com"
        );
        assert_eq!(
            path_of(&d, false),
            "/v1/projects/mock-project/locations/us-central1/publishers/google/models/gemini-2.0-flash:generateContent"
        );
        assert!(path_of(&d, true).ends_with(":streamGenerateContent?alt=sse"));
        let v = d.vertex.as_ref().unwrap();
        assert!(
            model_path(&d, v, "text-embedding-005", Endpoint::Embeddings, false)
                .ends_with("/publishers/google/models/text-embedding-005:predict")
        );
        let d = dep(
            &format!("model: vertex_ai/m, vertex_project: p1, vertex_location: global, vertex_credentials: '{creds}'"),
            &[],
        )
        .unwrap();
        assert_eq!(
            d.base.as_ref().unwrap().url,
            "https://aiplatform.googleapis.com"
        );
        assert_eq!(
            path_of(&d, false),
            "/v1/projects/p1/locations/global/publishers/google/models/m:generateContent"
        );
        let d = dep(
            "model: vertex_ai/m, vertex_project: p, vertex_location: eu",
            &[],
        )
        .unwrap();
        assert_eq!(
            d.base.as_ref().unwrap().url,
            "https://aiplatform.eu.rep.googleapis.com"
        );
        assert!(d.vertex.as_ref().unwrap().auth.is_none());
        let d = dep(
            "model: vertex_ai/m, vertex_project: p, api_base: 'http://proxy.local:8080/v1beta1'",
            &[],
        )
        .unwrap();
        assert_eq!(
            path_of(&d, false),
            "/v1beta1/projects/p/locations/us-central1/publishers/google/models/m:generateContent"
        );
        let d = dep(
            "model: vertex_ai/m, vertex_project: p, api_base: 'http://gw.local/my/model'",
            &[],
        )
        .unwrap();
        assert_eq!(path_of(&d, true), "/my/model:streamGenerateContent?alt=sse");
        let d = dep(
            "model: vertex_ai/m, vertex_project: p, api_base: 'http://127.0.0.1:9'",
            &[],
        )
        .unwrap();
        assert!(path_of(&d, false).starts_with("/v1/projects/p/"));
    }

    #[test]
    fn credentials_come_inline_from_files_or_the_environment() {
        let inline = serde_json::to_string(KEY).unwrap();
        let d = dep(
            &format!("model: vertex_ai/m, vertex_credentials: {inline}"),
            &[],
        )
        .unwrap();
        assert!(d.vertex.as_ref().unwrap().auth.is_some());
        // A mapping, as YAML writes the key file inline.
        let compact: serde_json::Value = serde_json::from_str(KEY).unwrap();
        let d = dep(
            &format!("model: vertex_ai/m, vertex_credentials: {compact}"),
            &[],
        )
        .unwrap();
        assert!(d.vertex.as_ref().unwrap().auth.is_some());
        let d = dep(
            "model: vertex_ai/m",
            &[("VERTEXAI_CREDENTIALS", KEY), ("VERTEXAI_PROJECT", "other")],
        )
        .unwrap();
        assert_eq!(d.vertex.as_ref().unwrap().project, "other");
        for (params, env, problem) in [
            ("model: vertex_ai/m", &[][..], "vertex_project is required"),
            (
                "model: vertex_ai/m, vertex_credentials: /nonexistent/key.json",
                &[][..],
                "cannot read the key file",
            ),
            (
                "model: vertex_ai/m, vertex_credentials: '{\"type\": \"external_account\"}'",
                &[][..],
                "not supported",
            ),
            (
                "model: vertex_ai/m, vertex_credentials: '{\"type\": \"authorized_user\"}'",
                &[][..],
                "have no client_id",
            ),
            (
                "model: vertex_ai/m, vertex_project: p, vertex_location: 'evil.com/'",
                &[][..],
                "not a location",
            ),
            (
                "model: vertex_ai/m, vertex_project: 'a/b'",
                &[][..],
                "not a project id",
            ),
        ] {
            let err = dep(params, env).unwrap_err();
            assert!(err.contains(problem), "{params}: {err}");
        }
    }

    #[test]
    fn requests_need_a_token() {
        let d = dep("model: vertex_ai/m, vertex_project: p", &[]).unwrap();
        let req = LlmRequest::parse(
            Endpoint::ChatCompletions,
            r#"{"model":"v","messages":[{"role":"user","content":"hi"}]}"#.into(),
        )
        .unwrap();
        let err = Vertex.build_request(&req, "m", &d).unwrap_err();
        assert_eq!(
            (err.status(), err.class()),
            (401, ErrorClass::Authentication)
        );
        let file = key_file();
        let d = dep(
            &format!(
                "model: vertex_ai/m, vertex_credentials: '{}'",
                file.path().display()
            ),
            &[],
        )
        .unwrap();
        assert_eq!(
            Vertex.build_request(&req, "m", &d).unwrap_err().status(),
            503
        );
    }
}
