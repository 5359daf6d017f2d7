//! The two pass-through routes whose credential is made per call rather
//! than configured: `/vertex_ai/*` (a Google access token, the project and
//! location put in the path as LiteLLM does) and `/bedrock/*` (a SigV4
//! signature of each request). Their targets come from the deployments
//! marked `use_in_pass_through: true` (Bedrock's also from the `AWS_*`
//! environment); this module holds the targets, the path rules and the
//! signing. Pure data.

use crate::deployment::{AwsSettings, VertexSettings};
use crate::providers::passthrough::BadPath;
use crate::providers::sigv4::{self, SigningInput};
use crate::upstream::UpstreamBase;

/// A Vertex AI project and location the `/vertex_ai/*` route may call,
/// with its token source, from a `use_in_pass_through` deployment.
#[derive(Debug, Clone)]
pub struct VertexTarget {
    /// Project, location and token source.
    pub settings: VertexSettings,
    /// The deployment's server (its path dropped).
    pub base: UpstreamBase,
}

/// Where `/bedrock/*` calls go and what signs them.
#[derive(Debug, Clone)]
pub struct BedrockTarget {
    /// Keys and region.
    pub aws: AwsSettings,
    /// The runtime endpoint (`bedrock-runtime`).
    pub runtime: UpstreamBase,
    /// The agent runtime endpoint (`bedrock-agent-runtime`).
    pub agent_runtime: UpstreamBase,
}

/// The value of the path segment after `/{name}/`, if any.
fn segment_after<'p>(path: &'p str, name: &str) -> Option<&'p str> {
    let mut parts = path.split('/');
    parts.find(|s| *s == name)?;
    parts.next().filter(|s| !s.is_empty())
}

/// The target for a `/vertex_ai` path: the deployment whose project and
/// location the path names, else `default` (LiteLLM's
/// `default_vertex_config`), else the first deployment.
pub fn vertex_target<'t>(
    targets: &'t [VertexTarget],
    default: Option<&'t VertexTarget>,
    rest: &str,
) -> Option<&'t VertexTarget> {
    let project = segment_after(rest, "projects");
    let location = segment_after(rest, "locations");
    targets
        .iter()
        .find(|t| {
            Some(t.settings.project.as_str()) == project
                && Some(t.settings.location.as_str()) == location
        })
        .or(default)
        .or_else(|| targets.first())
}

/// The upstream path for a `/vertex_ai` call to `rest` (already checked
/// by `passthrough::upstream_target`, passed as `checked`, query
/// included), as LiteLLM builds it: a path naming `/projects/…/locations/…`
/// gets the target's project and location in their place (and `/v1` in
/// front when it has no version; a project without a location is
/// refused, as Vertex AI has no such path); any other path is put below
/// `/{version}/projects/{project}/locations/{location}` (`v1`, or the
/// `v1`/`v1beta1` it starts with). A streamed method (`stream` in the
/// path) gets `alt=sse`.
pub fn vertex_path(settings: &VertexSettings, checked: &str) -> Result<String, BadPath> {
    let (path, query) = checked.split_once('?').unwrap_or((checked, ""));
    let enc = sigv4::uri_encode;
    let (project, location) = (enc(&settings.project), enc(&settings.location));
    let segments: Vec<&str> = path.split('/').collect();
    let named = |name: &str| segments.contains(&name);
    if segments
        .last()
        .is_some_and(|s| *s == "projects" || *s == "locations")
    {
        return Err(BadPath("a projects or locations segment names none"));
    }
    if named("projects") && !named("locations") {
        return Err(BadPath("the path names a project without a location"));
    }
    let mut out = if named("locations") {
        let mut rebuilt = Vec::with_capacity(segments.len());
        let mut i = 0;
        while i < segments.len() {
            rebuilt.push(segments[i].to_string());
            match segments[i] {
                "projects" if i + 1 < segments.len() => {
                    rebuilt.push(project.clone());
                    i += 1;
                }
                "locations" if i + 1 < segments.len() => {
                    rebuilt.push(location.clone());
                    i += 1;
                }
                _ => {}
            }
            i += 1;
        }
        let joined = rebuilt.join("/");
        if joined.starts_with("/projects/") {
            format!("/v1{joined}")
        } else {
            joined
        }
    } else {
        let (version, rest) = match path {
            p if p.starts_with("/v1beta1/") => ("v1beta1", &p["/v1beta1".len()..]),
            p if p.starts_with("/v1/") => ("v1", &p["/v1".len()..]),
            p => ("v1", p),
        };
        format!("/{version}/projects/{project}/locations/{location}{rest}")
    };
    if out.len() > 16 * 1024 {
        return Err(BadPath("the path is too long"));
    }
    let streamed = path.contains("stream") && !query.split('&').any(|p| p.starts_with("alt="));
    let mut first = true;
    for pair in query
        .split('&')
        .filter(|p| !p.is_empty())
        .chain(streamed.then_some("alt=sse"))
    {
        out.push(if first { '?' } else { '&' });
        first = false;
        out.push_str(pair);
    }
    Ok(out)
}

/// Whether a `/bedrock` path is one of the agent runtime's (LiteLLM's
/// list: agents, knowledge bases, flows, retrieve-and-generate, rerank,
/// query generation, prompt optimization).
pub fn bedrock_is_agent_route(rest: &str) -> bool {
    [
        "agents/",
        "knowledgebases/",
        "flows/",
        "retrieveAndGenerate/",
        "rerank/",
        "generateQuery/",
        "optimize-prompt/",
    ]
    .iter()
    .any(|r| rest.contains(r))
        || rest.trim_end_matches('/').ends_with("/rerank")
        || rest.trim_end_matches('/').ends_with("/retrieveAndGenerate")
}

/// The model id a Bedrock runtime path names (`/model/{id}/{action}`),
/// percent-decoded.
pub fn bedrock_model(rest: &str) -> Option<String> {
    let id = segment_after(rest, "model")?;
    let bytes = id.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The SigV4 headers (`x-amz-date`, `x-amz-security-token`,
/// `authorization`) of a `method` call to `target` (path and query) on
/// `base` with `body` at `amz_date`, for service `bedrock`; `None` without
/// keys.
pub fn bedrock_sign(
    aws: &AwsSettings,
    base: &UpstreamBase,
    (method, target): (&str, &str),
    body: &[u8],
    amz_date: &str,
) -> Option<Vec<(String, String)>> {
    let creds = aws.credentials.as_ref()?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let host = crate::providers::bedrock::host_header(base);
    let signed = sigv4::sign(
        creds,
        &SigningInput {
            method,
            path,
            query,
            headers: &[("host", &host)],
            payload: &[body],
            amz_date,
            region: &aws.region,
            service: "bedrock",
            double_encode: true,
        },
    );
    Some(
        signed
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(project: &str, location: &str) -> VertexSettings {
        VertexSettings {
            project: project.into(),
            location: location.into(),
            auth: None,
        }
    }

    #[test]
    fn vertex_paths_get_the_targets_project_and_location() {
        let s = settings("proj", "us-central1");
        assert_eq!(
            vertex_path(
                &s,
                "/v1/projects/other/locations/europe-west1/publishers/google/models/gemini-2.0-flash:generateContent"
            ),
            Ok("/v1/projects/proj/locations/us-central1/publishers/google/models/gemini-2.0-flash:generateContent".into())
        );
        assert!(vertex_path(&s, "/v1/projects/x/publishers/google/models/g").is_err());
        assert!(vertex_path(&s, "/v1/locations/l/projects").is_err());
        assert_eq!(
            vertex_path(&s, "/projects/p/locations/l/cachedContents"),
            Ok("/v1/projects/proj/locations/us-central1/cachedContents".into())
        );
        assert_eq!(
            vertex_path(
                &s,
                "/v1beta1/publishers/google/models/g:streamGenerateContent"
            ),
            Ok("/v1beta1/projects/proj/locations/us-central1/publishers/google/models/g:streamGenerateContent?alt=sse".into())
        );
        assert_eq!(
            vertex_path(&s, "/publishers/google/models/g:streamGenerateContent?alt=sse"),
            Ok("/v1/projects/proj/locations/us-central1/publishers/google/models/g:streamGenerateContent?alt=sse".into())
        );
        let targets = [
            VertexTarget {
                settings: settings("a", "us-central1"),
                base: crate::upstream::parse_base("http://h:1").unwrap(),
            },
            VertexTarget {
                settings: settings("b", "europe-west1"),
                base: crate::upstream::parse_base("http://h:2").unwrap(),
            },
        ];
        let pick = |rest| {
            vertex_target(&targets, None, rest)
                .unwrap()
                .settings
                .project
                .clone()
        };
        assert_eq!(pick("/v1/projects/b/locations/europe-west1/x"), "b");
        assert_eq!(pick("/v1/projects/b/locations/us-east1/x"), "a");
        assert_eq!(pick("/v1/publishers/google/models/g:generateContent"), "a");
        let default = VertexTarget {
            settings: settings("d", "global"),
            base: crate::upstream::parse_base("http://h:3").unwrap(),
        };
        let with_default = |rest| {
            vertex_target(&targets, Some(&default), rest)
                .unwrap()
                .settings
                .project
                .clone()
        };
        assert_eq!(with_default("/v1/projects/b/locations/europe-west1/x"), "b");
        assert_eq!(with_default("/v1/projects/x/locations/y/z"), "d");
    }

    #[test]
    fn bedrock_paths_name_their_runtime_and_model() {
        assert!(bedrock_is_agent_route("/knowledgebases/kb1/retrieve"));
        assert!(bedrock_is_agent_route("/rerank"));
        assert!(!bedrock_is_agent_route("/model/m/converse"));
        assert_eq!(
            bedrock_model("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse").as_deref(),
            Some("anthropic.claude-3-haiku-20240307-v1:0")
        );
        assert_eq!(bedrock_model("/agents/a"), None);
    }
}
