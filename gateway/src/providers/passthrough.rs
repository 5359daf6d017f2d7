//! LiteLLM's provider pass-through routes (`/openai/*`, `/anthropic/*`,
//! `/gemini/*`, `/cohere/*`, `/mistral/*`, `/azure/*`, `/vertex_ai/*`,
//! `/bedrock/*`; the last two's targets and signing in
//! `passthrough_cloud`): which provider a route prefix
//! names, where its API lives, the credential the gateway adds, the
//! upstream path a client's path maps to (never above the base path, never
//! another host), and which of the provider's answers carry usage the
//! gateway can read. Pure data.

use super::passthrough_cloud::{BedrockTarget, VertexTarget};
use crate::deployment::{AwsSettings, VertexSettings};
use crate::formats::Format;
use crate::upstream::{parse_base, UpstreamBase};

/// A provider reachable through a pass-through route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassThroughProvider {
    /// `/openai/*`: OpenAI's API.
    OpenAi,
    /// `/anthropic/*`: Anthropic's API.
    Anthropic,
    /// `/gemini/*`: Google AI Studio.
    Gemini,
    /// `/cohere/*`: Cohere's API.
    Cohere,
    /// `/mistral/*`: Mistral's API.
    Mistral,
    /// `/azure/*`: an Azure OpenAI resource.
    Azure,
    /// `/vertex_ai/*`, `/vertex-ai/*`: Vertex AI with a Google token.
    VertexAi,
    /// `/bedrock/*`: Bedrock, signed with SigV4.
    Bedrock,
}

/// Every provider, in the order of [`PassThroughProvider::index`].
const ALL: [PassThroughProvider; 8] = [
    PassThroughProvider::OpenAi,
    PassThroughProvider::Anthropic,
    PassThroughProvider::Gemini,
    PassThroughProvider::Cohere,
    PassThroughProvider::Mistral,
    PassThroughProvider::Azure,
    PassThroughProvider::VertexAi,
    PassThroughProvider::Bedrock,
];

impl PassThroughProvider {
    /// The provider a request path's first segment names, with the rest of
    /// the path (empty or starting with `/`).
    pub fn parse(path: &str) -> Option<(PassThroughProvider, &str)> {
        let rest = path.strip_prefix('/')?;
        let (first, tail) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
        let provider = match first {
            "openai" => PassThroughProvider::OpenAi,
            "anthropic" => PassThroughProvider::Anthropic,
            "gemini" => PassThroughProvider::Gemini,
            "cohere" => PassThroughProvider::Cohere,
            "mistral" => PassThroughProvider::Mistral,
            "azure" => PassThroughProvider::Azure,
            "vertex_ai" | "vertex-ai" => PassThroughProvider::VertexAi,
            "bedrock" => PassThroughProvider::Bedrock,
            _ => return None,
        };
        Some((provider, tail))
    }

    /// LiteLLM's provider name (spend rows' `custom_llm_provider`).
    pub fn name(self) -> &'static str {
        match self {
            PassThroughProvider::OpenAi => "openai",
            PassThroughProvider::Anthropic => "anthropic",
            PassThroughProvider::Gemini => "gemini",
            PassThroughProvider::Cohere => "cohere",
            PassThroughProvider::Mistral => "mistral",
            PassThroughProvider::Azure => "azure",
            PassThroughProvider::VertexAi => "vertex_ai",
            PassThroughProvider::Bedrock => "bedrock",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Whether the route's credential is made per call (a Google token, a
    /// SigV4 signature) from `use_in_pass_through` deployments rather than
    /// a configured key (see `passthrough_cloud`).
    pub fn is_cloud(self) -> bool {
        matches!(
            self,
            PassThroughProvider::VertexAi | PassThroughProvider::Bedrock
        )
    }

    /// The API base LiteLLM uses when `{PROVIDER}_API_BASE` is not set
    /// (Azure has none: `AZURE_API_BASE` is required).
    fn default_base(self) -> Option<&'static str> {
        match self {
            PassThroughProvider::OpenAi => Some("https://api.openai.com"),
            PassThroughProvider::Anthropic => Some("https://api.anthropic.com"),
            PassThroughProvider::Gemini => Some("https://generativelanguage.googleapis.com"),
            PassThroughProvider::Cohere => Some("https://api.cohere.com"),
            PassThroughProvider::Mistral => Some("https://api.mistral.ai"),
            PassThroughProvider::Azure
            | PassThroughProvider::VertexAi
            | PassThroughProvider::Bedrock => None,
        }
    }

    /// The environment variable of the provider's key, as LiteLLM names it.
    pub fn key_env(self) -> &'static str {
        match self {
            PassThroughProvider::OpenAi => "OPENAI_API_KEY",
            PassThroughProvider::Anthropic => "ANTHROPIC_API_KEY",
            PassThroughProvider::Gemini => "GEMINI_API_KEY",
            PassThroughProvider::Cohere => "COHERE_API_KEY",
            PassThroughProvider::Mistral => "MISTRAL_API_KEY",
            PassThroughProvider::Azure => "AZURE_API_KEY",
            PassThroughProvider::VertexAi => "VERTEX_AI_API_KEY",
            PassThroughProvider::Bedrock => "BEDROCK_API_KEY",
        }
    }

    /// The environment variable of the provider's API base.
    pub fn base_env(self) -> &'static str {
        match self {
            PassThroughProvider::OpenAi => "OPENAI_API_BASE",
            PassThroughProvider::Anthropic => "ANTHROPIC_API_BASE",
            PassThroughProvider::Gemini => "GEMINI_API_BASE",
            PassThroughProvider::Cohere => "COHERE_API_BASE",
            PassThroughProvider::Mistral => "MISTRAL_API_BASE",
            PassThroughProvider::Azure => "AZURE_API_BASE",
            PassThroughProvider::VertexAi => "VERTEXAI_API_BASE",
            PassThroughProvider::Bedrock => "BEDROCK_API_BASE",
        }
    }

    /// Where the client's key is read: Google AI Studio's clients send it
    /// as `?key=` or `x-goog-api-key`, the others as on every route.
    pub fn reads_google_key(self) -> bool {
        self == PassThroughProvider::Gemini
    }

    /// The headers that carry `key` to the provider (Gemini's goes in the
    /// query, see [`upstream_target`]).
    pub fn credential_headers(self, key: &str) -> Vec<(&'static str, String)> {
        match self {
            PassThroughProvider::Anthropic => vec![("x-api-key", key.to_string())],
            // LiteLLM's OpenAI pass-through sends both, so an Azure-style
            // OpenAI-compatible base accepts it too.
            PassThroughProvider::OpenAi | PassThroughProvider::Azure => vec![
                ("authorization", format!("Bearer {key}")),
                ("api-key", key.to_string()),
            ],
            PassThroughProvider::Cohere | PassThroughProvider::Mistral => {
                vec![("authorization", format!("Bearer {key}"))]
            }
            PassThroughProvider::Gemini
            | PassThroughProvider::VertexAi
            | PassThroughProvider::Bedrock => Vec::new(),
        }
    }

    /// The format of an answer to `path` whose usage the gateway reads, and
    /// whether it is a stream (`body_stream` is the request body's
    /// `stream`): chat, Messages, Responses, embeddings, generateContent and
    /// Cohere's v2 chat. `None` for every other route (billed nothing).
    pub fn usage_format(self, path: &str, body_stream: bool) -> Option<(Format, bool)> {
        let ends = |s: &str| path.ends_with(s);
        match self {
            PassThroughProvider::OpenAi
            | PassThroughProvider::Azure
            | PassThroughProvider::Mistral => {
                if ends("/chat/completions") || ends("/completions") || ends("/embeddings") {
                    Some((Format::OpenAi, body_stream))
                } else if ends("/responses") {
                    Some((Format::Responses, body_stream))
                } else {
                    None
                }
            }
            PassThroughProvider::Anthropic if ends("/v1/messages") => {
                Some((Format::Anthropic, body_stream))
            }
            PassThroughProvider::Gemini if ends(":generateContent") => {
                Some((Format::Gemini, false))
            }
            PassThroughProvider::Gemini if ends(":streamGenerateContent") => {
                Some((Format::Gemini, true))
            }
            PassThroughProvider::Cohere if ends("/v2/chat") => Some((Format::Cohere, body_stream)),
            PassThroughProvider::VertexAi if ends(":generateContent") => {
                Some((Format::Gemini, false))
            }
            PassThroughProvider::VertexAi if ends(":streamGenerateContent") => {
                Some((Format::Gemini, true))
            }
            PassThroughProvider::VertexAi if ends(":rawPredict") => {
                Some((Format::Anthropic, body_stream))
            }
            PassThroughProvider::VertexAi if ends(":streamRawPredict") => {
                Some((Format::Anthropic, true))
            }
            PassThroughProvider::Bedrock if ends("/converse") => Some((Format::Bedrock, false)),
            PassThroughProvider::Bedrock if ends("/converse-stream") => {
                Some((Format::Bedrock, true))
            }
            // InvokeModel's body is the model's own: Anthropic's Messages
            // answer is read, others are not.
            PassThroughProvider::Bedrock
                if ends("/invoke") && path.contains("/model/") && path.contains("anthropic.") =>
            {
                Some((Format::Anthropic, false))
            }
            _ => None,
        }
    }

    /// The model a Gemini or Vertex AI path names
    /// (`…/models/{model}:{method}`), or a Bedrock path
    /// (`/model/{id}/{action}`).
    pub fn model_in_path(self, path: &str) -> Option<String> {
        match self {
            PassThroughProvider::Gemini | PassThroughProvider::VertexAi => {
                let (_, tail) = path.split_once("/models/")?;
                let model = tail.split(':').next()?;
                (!model.is_empty() && !model.contains('/')).then(|| model.to_string())
            }
            PassThroughProvider::Bedrock => super::passthrough_cloud::bedrock_model(path),
            _ => None,
        }
    }
}

/// Where one provider's pass-through calls go, and with which key.
#[derive(Debug, Clone)]
pub struct PassThroughTarget {
    /// The provider's API base.
    pub base: UpstreamBase,
    /// The key the gateway adds (never the caller's).
    pub key: Option<String>,
}

/// The pass-through target of every provider, resolved at start-up, and
/// the config's own pass-through endpoints.
#[derive(Debug, Clone, Default)]
pub struct PassThroughTargets {
    targets: [Option<PassThroughTarget>; ALL.len()],
    /// `/vertex_ai/*`'s projects and locations, from `use_in_pass_through`
    /// Vertex AI deployments, in config order.
    pub vertex: Vec<VertexTarget>,
    /// `/vertex_ai/*`'s credentials for paths no deployment matches
    /// (LiteLLM's `default_vertex_config`).
    pub vertex_default: Option<VertexTarget>,
    /// `/bedrock/*`'s keys and endpoints.
    pub bedrock: Option<BedrockTarget>,
    /// `general_settings.pass_through_endpoints`.
    pub custom: Vec<CustomEndpoint>,
    /// LiteLLM's top-level `files_settings`: where `/v1/files` and
    /// `/v1/batches` calls naming a `custom_llm_provider` go.
    pub files: Vec<super::files::FilesSetting>,
}

/// One of `general_settings.pass_through_endpoints`: requests to `path`
/// (and below it with `include_subpath`) go to `target`.
#[derive(Debug, Clone)]
pub struct CustomEndpoint {
    /// The gateway's path, without a trailing `/`.
    pub path: String,
    /// Where the requests go (its path is the upstream path).
    pub target: UpstreamBase,
    /// Headers added to every call (the target's credentials).
    pub headers: Vec<(String, String)>,
    /// Whether the client's headers are forwarded (never its credentials).
    pub forward_headers: bool,
    /// Whether a virtual key is required (and its budgets and limits
    /// apply); LiteLLM's default is no.
    pub auth: bool,
    /// Whether paths below `path` are served too, appended to the target's.
    pub include_subpath: bool,
}

/// The config's `pass_through_endpoints` list, as LiteLLM reads it.
#[derive(serde::Deserialize)]
struct CustomView {
    path: String,
    target: String,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    forward_headers: bool,
    #[serde(default)]
    auth: bool,
    #[serde(default)]
    include_subpath: bool,
}

impl CustomEndpoint {
    /// Reads `general_settings.pass_through_endpoints`. A path the
    /// gateway serves itself is never reached (its routes come first);
    /// a provider route's prefix is refused.
    pub fn parse_all(value: &serde_yaml::Value) -> Result<Vec<CustomEndpoint>, String> {
        let views: Vec<CustomView> =
            serde_yaml::from_value(value.clone()).map_err(|e| e.to_string())?;
        let mut out: Vec<CustomEndpoint> = Vec::with_capacity(views.len());
        for (i, v) in views.into_iter().enumerate() {
            let at = |m: String| format!("[{i}] (path \"{}\"): {m}", v.path);
            let path = v.path.trim_end_matches('/').to_string();
            if !path.starts_with('/')
                || upstream_target(PassThroughProvider::Cohere, "", &path, "", None).is_err()
            {
                return Err(at(
                    "the path must start with / and hold no `.`, `..` or empty segments".into(),
                ));
            }
            if PassThroughProvider::parse(&path).is_some() {
                return Err(at(
                    "the path is one of the provider pass-through routes".into()
                ));
            }
            if out.iter().any(|c| c.path == path) {
                return Err(at("two endpoints share this path".into()));
            }
            let target = parse_base(v.target.trim()).map_err(|e| at(format!("target: {e}")))?;
            let bad = |s: &str| s.bytes().any(|b| b == b'\r' || b == b'\n');
            if v.headers
                .iter()
                .any(|(n, val)| bad(n) || bad(val) || n.is_empty())
            {
                return Err(at("a header name or value holds a line break".into()));
            }
            out.push(CustomEndpoint {
                path,
                target,
                headers: v.headers.into_iter().collect(),
                forward_headers: v.forward_headers,
                auth: v.auth,
                include_subpath: v.include_subpath,
            });
        }
        Ok(out)
    }

    /// The upstream request target for the client's `path` (this
    /// endpoint's, or one below it) and `query`; `None` when `path` is not
    /// this endpoint's.
    pub fn upstream_target(&self, path: &str, query: &str) -> Option<Result<String, BadPath>> {
        let rest = path.strip_prefix(self.path.as_str())?;
        let below = self.include_subpath && rest.starts_with('/');
        if !(rest.is_empty() || below) {
            return None;
        }
        let base = &self.target.path;
        if !rest.is_empty() {
            return Some(upstream_target(
                PassThroughProvider::Cohere,
                base,
                rest,
                query,
                None,
            ));
        }
        // The target's own path: only the query to check and append.
        let visible = query.bytes().all(|b| b.is_ascii_graphic() && b != b'#');
        if query.len() > MAX_TARGET || !visible {
            return Some(Err(BadPath(
                "the query may hold only visible ASCII, without `#`",
            )));
        }
        let path = if base.is_empty() { "/" } else { base.as_str() };
        Some(Ok(match query {
            "" => path.to_string(),
            q => format!("{path}?{q}"),
        }))
    }
}

/// A credential a deployment offers to the pass-through routes
/// (`litellm_params.use_in_pass_through: true`).
pub struct DeploymentCredential<'a> {
    /// The deployment's provider name (`openai`, `anthropic`, ...).
    pub provider: &'a str,
    /// Its `api_key`.
    pub key: Option<&'a str>,
    /// Its Vertex AI settings and server, for `/vertex_ai/*`.
    pub vertex: Option<(&'a VertexSettings, &'a UpstreamBase)>,
    /// Its AWS settings and runtime endpoint, for `/bedrock/*`.
    pub aws: Option<(&'a AwsSettings, &'a UpstreamBase)>,
}

impl PassThroughTargets {
    /// Resolves each provider's target as LiteLLM does: the key of the
    /// first deployment of that provider marked `use_in_pass_through`, else
    /// `{PROVIDER}_API_KEY`; the base from `{PROVIDER}_API_BASE`, else the
    /// provider's public API. A base that does not parse is an error naming
    /// its variable.
    pub fn resolve(
        lookup: &dyn Fn(&str) -> Option<String>,
        deployments: &[DeploymentCredential<'_>],
    ) -> Result<PassThroughTargets, String> {
        let mut targets = PassThroughTargets::default();
        for d in deployments {
            if let Some((settings, base)) = d.vertex {
                let mut base = base.clone();
                base.path.clear();
                targets.vertex.push(VertexTarget {
                    settings: settings.clone(),
                    base,
                });
            }
        }
        let offered_aws = deployments
            .iter()
            .find_map(|d| d.aws)
            .map(|(aws, base)| (aws.clone(), base.clone()));
        let aws = match offered_aws {
            Some(found) => Some(found),
            // LiteLLM's Bedrock pass-through signs with the `AWS_*` keys.
            None => {
                let (aws, endpoint) = crate::providers::bedrock::resolve(
                    &crate::providers::bedrock::AwsParams::default(),
                    lookup,
                )?;
                match aws.credentials {
                    Some(_) => {
                        let base = parse_base(endpoint.trim()).map_err(|e| {
                            format!("AWS_BEDROCK_RUNTIME_ENDPOINT \"{endpoint}\": {e}")
                        })?;
                        Some((aws, base))
                    }
                    None => None,
                }
            }
        };
        if let Some((aws, runtime)) = aws {
            let agent = runtime
                .url
                .replace("bedrock-runtime", "bedrock-agent-runtime");
            let agent_runtime = parse_base(&agent).map_err(|e| format!("\"{agent}\": {e}"))?;
            targets.bedrock = Some(BedrockTarget {
                aws,
                runtime,
                agent_runtime,
            });
        }
        for provider in ALL.into_iter().filter(|p| !p.is_cloud()) {
            let from_env = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
            let base = from_env(provider.base_env())
                .or_else(|| provider.default_base().map(str::to_string));
            let Some(url) = base else { continue };
            let base = parse_base(url.trim())
                .map_err(|e| format!("{} \"{}\": {e}", provider.base_env(), url.trim()))?;
            let key = deployments
                .iter()
                .find(|d| d.provider == provider.name() && d.key.is_some())
                .and_then(|d| d.key.map(str::to_string))
                .or_else(|| from_env(provider.key_env()));
            targets.targets[provider.index()] = Some(PassThroughTarget { base, key });
        }
        Ok(targets)
    }

    /// The custom endpoint serving `path`, by its index.
    pub fn custom_for(&self, path: &str) -> Option<usize> {
        self.custom
            .iter()
            .position(|c| c.upstream_target(path, "").is_some())
    }

    /// The target of `provider`, when it has a base.
    pub fn get(&self, provider: PassThroughProvider) -> Option<&PassThroughTarget> {
        self.targets[provider.index()].as_ref()
    }
}

/// Why a client's pass-through path is refused.
#[derive(Debug, PartialEq, Eq)]
pub struct BadPath(pub &'static str);

/// Longest path and query a pass-through request may carry.
const MAX_TARGET: usize = 8 * 1024;

/// The upstream request target (path and query) for the client's `rest`
/// (the path after the route's prefix) and `query`, below `base_path`.
/// Refused: a segment `.` or `..` (also percent-encoded), an encoded `/`
/// or `\`, a backslash, a `?` in the path, an empty segment (`//` would read as a host to
/// some servers), a fragment and bytes outside visible ASCII, so the
/// upstream path can never leave the base path nor name another host.
/// Gemini's `key` parameter (the caller's virtual key) is dropped and
/// `gemini_key` added in its place.
pub fn upstream_target(
    provider: PassThroughProvider,
    base_path: &str,
    rest: &str,
    query: &str,
    gemini_key: Option<&str>,
) -> Result<String, BadPath> {
    if rest.len() + query.len() > MAX_TARGET {
        return Err(BadPath("the path is too long"));
    }
    let visible = |s: &str| s.bytes().all(|b| b.is_ascii_graphic());
    if !visible(rest) || !visible(query) || rest.contains(['\\', '#', '?']) || query.contains('#') {
        return Err(BadPath(
            "the path may hold only visible ASCII, without `\\`, `?` or `#`",
        ));
    }
    if rest.is_empty() || rest == "/" {
        return Err(BadPath("the path names no endpoint of the provider"));
    }
    let segments: Vec<&str> = rest[1..].split('/').collect();
    for (i, segment) in segments.iter().enumerate() {
        let decoded = segment
            .to_ascii_lowercase()
            .replace("%2e", ".")
            .replace("%2f", "/")
            .replace("%5c", "\\");
        if decoded == "." || decoded == ".." {
            return Err(BadPath("the path may not hold `.` or `..` segments"));
        }
        if decoded.contains(['/', '\\']) {
            return Err(BadPath("the path may not hold an encoded `/` or `\\`"));
        }
        if segment.is_empty() && i + 1 != segments.len() {
            return Err(BadPath("the path may not hold empty segments"));
        }
    }
    let mut target = String::with_capacity(base_path.len() + rest.len() + query.len() + 64);
    target.push_str(base_path.trim_end_matches('/'));
    // LiteLLM's OpenAI pass-through puts `/v1` in front of a path without it.
    if provider == PassThroughProvider::OpenAi
        && !target.ends_with("/v1")
        && !rest.starts_with("/v1/")
    {
        target.push_str("/v1");
    }
    target.push_str(rest);
    let mut first = true;
    let mut push = |pair: &str, target: &mut String| {
        target.push(if first { '?' } else { '&' });
        first = false;
        target.push_str(pair);
    };
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let name = pair.split('=').next().unwrap_or_default();
        if provider == PassThroughProvider::Gemini && name == "key" {
            continue;
        }
        push(pair, &mut target);
    }
    if let Some(key) = gemini_key {
        push(&format!("key={}", percent_encode(key)), &mut target);
    }
    Ok(target)
}

/// `value` with every byte outside the URL's unreserved set escaped.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The client's `key` query parameter (Google AI Studio's clients).
pub fn query_key(query: &str) -> Option<&str> {
    query
        .split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(name, _)| *name == "key")
        .map(|(_, value)| value)
        .filter(|v| !v.is_empty())
}

/// Whether a client's request header is forwarded to the provider: not
/// hop-by-hop headers, not the caller's credentials or cookies, and none
/// that could name another host or method (`host`, `forwarded`,
/// `x-forwarded-*`, `x-http-method-override`, ...). The gateway writes
/// `content-length` and `accept-encoding` itself.
pub fn forwards_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    !(matches!(
        name.as_str(),
        "host"
            | "content-length"
            | "transfer-encoding"
            | "connection"
            | "keep-alive"
            | "te"
            | "trailer"
            | "upgrade"
            | "expect"
            | "accept-encoding"
            | "authorization"
            | "api-key"
            | "x-api-key"
            | "x-goog-api-key"
            | "cookie"
            | "forwarded"
            | "x-http-method-override"
            | "x-method-override"
            | "x-original-url"
            | "x-rewrite-url"
            | "traceparent"
    ) || name.starts_with("proxy-")
        || name.starts_with("x-forwarded-")
        || name.starts_with("x-litellm-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(provider: PassThroughProvider, rest: &str, query: &str) -> Result<String, BadPath> {
        upstream_target(provider, "", rest, query, None)
    }

    #[test]
    fn routes_name_their_provider() {
        assert_eq!(
            PassThroughProvider::parse("/openai/v1/chat/completions"),
            Some((PassThroughProvider::OpenAi, "/v1/chat/completions"))
        );
        assert_eq!(
            PassThroughProvider::parse("/vertex-ai/v1/x"),
            Some((PassThroughProvider::VertexAi, "/v1/x"))
        );
        assert_eq!(
            PassThroughProvider::parse("/gemini"),
            Some((PassThroughProvider::Gemini, ""))
        );
        assert_eq!(PassThroughProvider::parse("/openaix/v1"), None);
        assert_eq!(PassThroughProvider::parse("/v1/chat/completions"), None);
    }

    #[test]
    fn a_path_never_leaves_its_base() {
        for bad in [
            "/v1/../admin",
            "/v1/%2e%2E/admin",
            "/v1/./x",
            "/v1/a%2Fb",
            "/v1/a%5cb",
            "/v1\\x",
            "//evil.example/v1",
            "/v1//x",
            "/",
            "",
            "/v1/caf\u{e9}",
        ] {
            assert!(
                target(PassThroughProvider::Anthropic, bad, "").is_err(),
                "{bad:?} was accepted"
            );
        }
        assert!(target(PassThroughProvider::Cohere, "/v2/chat", "a#b").is_err());
        assert_eq!(
            upstream_target(
                PassThroughProvider::Anthropic,
                "/base/",
                "/v1/messages",
                "beta=true",
                None
            ),
            Ok("/base/v1/messages?beta=true".to_string())
        );
        assert_eq!(
            target(PassThroughProvider::Cohere, "/v2/models/", ""),
            Ok("/v2/models/".to_string()),
            "a trailing slash is kept"
        );
    }

    #[test]
    fn openai_paths_get_their_v1() {
        assert_eq!(
            target(PassThroughProvider::OpenAi, "/chat/completions", ""),
            Ok("/v1/chat/completions".to_string())
        );
        assert_eq!(
            target(PassThroughProvider::OpenAi, "/v1/models", ""),
            Ok("/v1/models".to_string())
        );
        assert_eq!(
            upstream_target(PassThroughProvider::OpenAi, "/v1", "/models", "", None),
            Ok("/v1/models".to_string())
        );
    }

    #[test]
    fn the_callers_gemini_key_is_replaced() {
        let t = upstream_target(
            PassThroughProvider::Gemini,
            "",
            "/v1beta/models/gemini-2.0-flash:generateContent",
            "key=sk-virtual&alt=sse",
            Some("AIza+/="),
        );
        assert_eq!(
            t,
            Ok("/v1beta/models/gemini-2.0-flash:generateContent?alt=sse&key=AIza%2B%2F%3D".into())
        );
        assert_eq!(query_key("alt=sse&key=sk-1"), Some("sk-1"));
        assert_eq!(query_key("key="), None);
        assert_eq!(
            PassThroughProvider::Gemini
                .model_in_path("/v1beta/models/gemini-2.0-flash:generateContent")
                .as_deref(),
            Some("gemini-2.0-flash")
        );
    }

    #[test]
    fn credentials_and_hosts_are_never_forwarded() {
        for name in [
            "Authorization",
            "x-api-key",
            "API-KEY",
            "x-goog-api-key",
            "Host",
            "X-Forwarded-Host",
            "Forwarded",
            "Cookie",
            "Proxy-Authorization",
            "content-length",
            "Transfer-Encoding",
        ] {
            assert!(!forwards_header(name), "{name} is forwarded");
        }
        for name in [
            "anthropic-version",
            "anthropic-beta",
            "content-type",
            "OpenAI-Beta",
            "accept",
        ] {
            assert!(forwards_header(name), "{name} is dropped");
        }
    }

    #[test]
    fn targets_come_from_deployments_then_the_environment() {
        let env = |name: &str| match name {
            "ANTHROPIC_API_KEY" => Some("sk-ant-env".to_string()),
            "ANTHROPIC_API_BASE" => Some("http://127.0.0.1:9".to_string()),
            "OPENAI_API_KEY" => Some("sk-env".to_string()),
            _ => None,
        };
        let deps = [DeploymentCredential {
            provider: "openai",
            key: Some("sk-dep"),
            vertex: None,
            aws: None,
        }];
        let t = PassThroughTargets::resolve(&env, &deps).unwrap();
        let openai = t.get(PassThroughProvider::OpenAi).unwrap();
        assert_eq!(openai.key.as_deref(), Some("sk-dep"));
        assert_eq!(&*openai.base.host, "api.openai.com");
        let anthropic = t.get(PassThroughProvider::Anthropic).unwrap();
        assert_eq!(
            (anthropic.key.as_deref(), anthropic.base.port),
            (Some("sk-ant-env"), 9)
        );
        assert!(t.get(PassThroughProvider::Cohere).unwrap().key.is_none());
        assert!(
            t.get(PassThroughProvider::Azure).is_none(),
            "no AZURE_API_BASE"
        );
        assert!(t.get(PassThroughProvider::Bedrock).is_none());
        let bad = |name: &str| (name == "COHERE_API_BASE").then(|| "ftp://x".to_string());
        assert!(PassThroughTargets::resolve(&bad, &[])
            .unwrap_err()
            .starts_with("COHERE_API_BASE"));
    }

    #[test]
    fn usage_is_read_on_the_routes_the_gateway_understands() {
        use PassThroughProvider::*;
        assert_eq!(
            OpenAi.usage_format("/v1/chat/completions", true),
            Some((Format::OpenAi, true))
        );
        assert_eq!(
            Anthropic.usage_format("/v1/messages", false),
            Some((Format::Anthropic, false))
        );
        assert_eq!(
            Anthropic.usage_format("/v1/messages/count_tokens", false),
            None
        );
        assert_eq!(
            Gemini.usage_format("/v1beta/models/g:streamGenerateContent", false),
            Some((Format::Gemini, true))
        );
        assert_eq!(
            Cohere.usage_format("/v2/chat", false),
            Some((Format::Cohere, false))
        );
        assert_eq!(OpenAi.usage_format("/v1/files", false), None);
    }

    #[test]
    fn custom_endpoints_are_read_and_keep_below_their_target() {
        let yaml: serde_yaml::Value = serde_yaml::from_str(
            "- {path: /bria/, target: 'https://api.bria.ai/v1', headers: {api_token: x}, auth: true, include_subpath: true}\n- {path: /exact, target: 'http://h:9/a/b'}\n",
        )
        .unwrap();
        let all = CustomEndpoint::parse_all(&yaml).unwrap();
        assert_eq!((all[0].path.as_str(), all[0].auth), ("/bria", true));
        assert_eq!(
            all[0].upstream_target("/bria/text-to-image", "x=1"),
            Some(Ok("/v1/text-to-image?x=1".to_string()))
        );
        assert!(matches!(
            all[0].upstream_target("/bria/../x", ""),
            Some(Err(_))
        ));
        assert_eq!(all[0].upstream_target("/briax", ""), None);
        assert_eq!(
            all[1].upstream_target("/exact", ""),
            Some(Ok("/a/b".to_string()))
        );
        assert_eq!(
            all[1].upstream_target("/exact/more", ""),
            None,
            "no include_subpath"
        );
        for bad in [
            "- {path: /x, target: 'ftp://h'}",
            "- {path: 'no-slash', target: 'http://h'}",
            "- {path: /a/../b, target: 'http://h'}",
            "- {path: /anthropic/v1, target: 'http://h'}",
            "- {path: /x, target: 'http://h', headers: {a: \"b\\r\\nhost: evil\"}}",
            "- {path: /x, target: 'http://h'}\n- {path: /x/, target: 'http://h'}",
        ] {
            let yaml: serde_yaml::Value = serde_yaml::from_str(bad).unwrap();
            assert!(CustomEndpoint::parse_all(&yaml).is_err(), "{bad}");
        }
    }
}
