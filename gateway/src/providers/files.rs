//! OpenAI's Files and Batch APIs (`/v1/files`, `/v1/batches`) as OpenAI and
//! Azure OpenAI serve them: which operation a method and path name, the
//! upstream path of each (Azure's under `/openai` with `api-version`), the
//! provider ids the gateway accepts, and the usage of a batch's output
//! file. Pure data.

use crate::spend::Usage;
use crate::upstream::{parse_base, UpstreamBase};

/// One Files or Batch API operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesOp<'a> {
    /// `POST /files` (multipart).
    Upload,
    /// `GET /files`.
    ListFiles,
    /// `GET /files/{id}`.
    RetrieveFile(&'a str),
    /// `DELETE /files/{id}`.
    DeleteFile(&'a str),
    /// `GET /files/{id}/content`.
    FileContent(&'a str),
    /// `POST /batches`.
    CreateBatch,
    /// `GET /batches`.
    ListBatches,
    /// `GET /batches/{id}`.
    RetrieveBatch(&'a str),
    /// `POST /batches/{id}/cancel`.
    CancelBatch(&'a str),
}

impl<'a> FilesOp<'a> {
    /// The operation `method` on `path` (without `/v1`) names, if any. An
    /// id that is not a provider id still names the operation (refused by
    /// [`valid_id`] later, with a clear error).
    pub fn parse(method: &str, path: &'a str) -> Option<FilesOp<'a>> {
        let get = method == "GET";
        if let Some(rest) = path.strip_prefix("/files") {
            return match rest.strip_prefix('/') {
                None if rest.is_empty() && method == "POST" => Some(FilesOp::Upload),
                None if rest.is_empty() && get => Some(FilesOp::ListFiles),
                Some(id) => match id.strip_suffix("/content") {
                    Some(id) if get => Some(FilesOp::FileContent(id)),
                    Some(_) => None,
                    None if get => Some(FilesOp::RetrieveFile(id)),
                    None if method == "DELETE" => Some(FilesOp::DeleteFile(id)),
                    None => None,
                },
                None => None,
            };
        }
        if let Some(rest) = path.strip_prefix("/batches") {
            return match rest.strip_prefix('/') {
                None if rest.is_empty() && method == "POST" => Some(FilesOp::CreateBatch),
                None if rest.is_empty() && get => Some(FilesOp::ListBatches),
                Some(id) => match id.strip_suffix("/cancel") {
                    Some(id) if method == "POST" => Some(FilesOp::CancelBatch(id)),
                    Some(_) => None,
                    None if get => Some(FilesOp::RetrieveBatch(id)),
                    None => None,
                },
                None => None,
            };
        }
        None
    }

    /// LiteLLM's provider-scoped forms, `/{provider}/v1/files…` and
    /// `/{provider}/v1/batches…`: the provider the path's first segment
    /// names (any: LiteLLM's route takes any) and the operation.
    pub fn parse_scoped(method: &str, path: &'a str) -> Option<(&'a str, FilesOp<'a>)> {
        let (provider, tail) = path.strip_prefix('/')?.split_once('/')?;
        if provider.is_empty() {
            return None;
        }
        let op = FilesOp::parse(method, tail.strip_prefix("v1")?)?;
        Some((provider, op))
    }

    /// The id the operation names, if any.
    pub fn id(self) -> Option<&'a str> {
        match self {
            FilesOp::RetrieveFile(id)
            | FilesOp::DeleteFile(id)
            | FilesOp::FileContent(id)
            | FilesOp::RetrieveBatch(id)
            | FilesOp::CancelBatch(id) => Some(id),
            _ => None,
        }
    }

    /// Whether the operation is on batches.
    pub fn is_batch(self) -> bool {
        matches!(
            self,
            FilesOp::CreateBatch
                | FilesOp::ListBatches
                | FilesOp::RetrieveBatch(_)
                | FilesOp::CancelBatch(_)
        )
    }

    /// LiteLLM's call type for the operation (its spend rows' `call_type`).
    pub fn call_type(self) -> &'static str {
        match self {
            FilesOp::Upload => "acreate_file",
            FilesOp::ListFiles => "afile_list",
            FilesOp::RetrieveFile(_) => "afile_retrieve",
            FilesOp::DeleteFile(_) => "afile_delete",
            FilesOp::FileContent(_) => "afile_content",
            FilesOp::CreateBatch => "acreate_batch",
            FilesOp::ListBatches => "alist_batches",
            FilesOp::RetrieveBatch(_) => "aretrieve_batch",
            FilesOp::CancelBatch(_) => "acancel_batch",
        }
    }

    /// The path after the API's root (`/files/{id}/content`, ...).
    fn suffix(self) -> String {
        match self {
            FilesOp::Upload | FilesOp::ListFiles => "/files".to_string(),
            FilesOp::RetrieveFile(id) | FilesOp::DeleteFile(id) => format!("/files/{id}"),
            FilesOp::FileContent(id) => format!("/files/{id}/content"),
            FilesOp::CreateBatch | FilesOp::ListBatches => "/batches".to_string(),
            FilesOp::RetrieveBatch(id) => format!("/batches/{id}"),
            FilesOp::CancelBatch(id) => format!("/batches/{id}/cancel"),
        }
    }
}

/// Which API serves the files and batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesApi {
    /// OpenAI's (`{api_base}/files`).
    OpenAi,
    /// Azure OpenAI's (`{api_base}/openai/files?api-version=…`).
    Azure,
}

impl FilesApi {
    /// LiteLLM's `custom_llm_provider` names the gateway serves files for.
    pub fn parse(provider: &str) -> Option<FilesApi> {
        match provider.trim() {
            "openai" => Some(FilesApi::OpenAi),
            "azure" => Some(FilesApi::Azure),
            _ => None,
        }
    }

    /// The provider's name (`custom_llm_provider`).
    pub fn name(self) -> &'static str {
        match self {
            FilesApi::OpenAi => "openai",
            FilesApi::Azure => "azure",
        }
    }

    /// The upstream request target of `op`: the base's path, the API's
    /// path, then `query` (the client's, already checked) and Azure's
    /// `api-version`.
    pub fn target(self, base_path: &str, op: FilesOp<'_>, query: &str, version: &str) -> String {
        let suffix = op.suffix();
        let mut target = match self {
            FilesApi::OpenAi => format!("{base_path}{suffix}"),
            FilesApi::Azure if is_v1(version) => format!("{base_path}/openai/v1{suffix}"),
            FilesApi::Azure => format!("{base_path}/openai{suffix}?api-version={version}"),
        };
        if !query.is_empty() {
            target.push(if target.contains('?') { '&' } else { '?' });
            target.push_str(query);
        }
        target
    }

    /// The credential headers for `key`.
    pub fn credential(self, key: &str) -> (&'static str, String) {
        match self {
            FilesApi::OpenAi => ("authorization", format!("Bearer {key}")),
            FilesApi::Azure => ("api-key", key.to_string()),
        }
    }
}

/// One entry of LiteLLM's top-level `files_settings`: where calls naming
/// its `custom_llm_provider` go.
#[derive(Debug, Clone)]
pub struct FilesSetting {
    /// `openai` or `azure`.
    pub api: FilesApi,
    /// `api_base` (OpenAI's public API when not set).
    pub base: UpstreamBase,
    /// `api_key`.
    pub key: Option<String>,
    /// `api_version` (Azure).
    pub version: Option<String>,
}

impl FilesSetting {
    /// Reads `files_settings` (a list; `os.environ/` references already
    /// resolved). An entry for a provider the gateway does not serve files
    /// for is returned as a warning and skipped (calls naming it are
    /// refused); a malformed entry is an error.
    pub fn parse_all(
        value: &serde_yaml::Value,
    ) -> Result<(Vec<FilesSetting>, Vec<String>), String> {
        let list = value
            .as_sequence()
            .ok_or("files_settings must be a list of {custom_llm_provider, api_base, api_key, api_version}")?;
        let (mut out, mut warnings) = (Vec::new(), Vec::new());
        for (i, entry) in list.iter().enumerate() {
            let text = |name: &str| -> Result<Option<String>, String> {
                match entry.get(name) {
                    None | Some(serde_yaml::Value::Null) => Ok(None),
                    Some(serde_yaml::Value::String(s)) => Ok(Some(s.trim().to_string())),
                    Some(_) => Err(format!("files_settings[{i}].{name} must be a string")),
                }
            };
            let provider = text("custom_llm_provider")?
                .ok_or_else(|| format!("files_settings[{i}] has no custom_llm_provider"))?;
            let Some(api) = FilesApi::parse(&provider) else {
                warnings.push(format!(
                    "files_settings[{i}]: files and batches are served for openai and azure only; calls naming {provider:?} are refused"
                ));
                continue;
            };
            let base = match (text("api_base")?, api) {
                (Some(b), _) => b,
                (None, FilesApi::OpenAi) => "https://api.openai.com/v1".to_string(),
                (None, FilesApi::Azure) => {
                    return Err(format!("files_settings[{i}] (azure) has no api_base"))
                }
            };
            let base =
                parse_base(&base).map_err(|e| format!("files_settings[{i}].api_base: {e}"))?;
            let version = text("api_version")?;
            if version.as_deref().is_some_and(|v| !valid_id(v)) {
                return Err(format!("files_settings[{i}].api_version is not a version"));
            }
            out.push(FilesSetting {
                api,
                base,
                key: text("api_key")?.filter(|k| !k.is_empty()),
                version,
            });
        }
        Ok((out, warnings))
    }
}

/// The `api-version` an Azure upstream gets when none is configured
/// (LiteLLM's default).
pub const AZURE_DEFAULT_API_VERSION: &str = super::azure::DEFAULT_API_VERSION;

/// Azure's unversioned `/openai/v1` API versions.
fn is_v1(version: &str) -> bool {
    matches!(version, "v1" | "latest" | "preview")
}

/// Longest provider id accepted.
pub const MAX_ID: usize = 256;

/// Whether `id` can be a provider's file or batch id: 1 to [`MAX_ID`]
/// letters, digits, `-`, `_` or `.` (never `/` or `..`), so it can only
/// name an object under the API's own path.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && !id.contains("..")
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Query parameters the gateway forwards (OpenAI's paging and filters);
/// each value is percent-encoded already or made only of safe bytes.
const FORWARDED_QUERY: &[&str] = &["after", "limit", "order", "purpose"];

/// The client's query reduced to the parameters OpenAI's list endpoints
/// read, each value checked (at most 256 bytes of URL-safe characters).
pub fn forwarded_query(query: &str) -> String {
    let safe = |v: &str| {
        v.len() <= 256
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'%'))
    };
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .filter(|(k, v)| FORWARDED_QUERY.contains(k) && safe(v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The value of parameter `name` in `query`, if present (not decoded:
/// the values read here are provider and model names).
pub fn query_param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// What a completed batch's output file says it used: the usage of every
/// line answered with status 200 (`response.body.usage`), and the model
/// the lines name (the first one's).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BatchUsage {
    /// Summed usage.
    pub usage: Usage,
    /// The model of the answers.
    pub model: Option<String>,
    /// Lines counted.
    pub lines: u64,
}

/// Reads a batch output file (JSON lines, OpenAI's shape:
/// `{"custom_id", "response": {"status_code", "body": {..., "usage"}}}`).
/// Lines that are not JSON or did not succeed count nothing, as LiteLLM's
/// batch cost calculator skips them.
pub fn batch_usage(content: &[u8]) -> BatchUsage {
    #[derive(serde::Deserialize)]
    struct Line {
        response: Option<Answer>,
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        status_code: Option<u16>,
        body: Option<Body>,
    }
    #[derive(serde::Deserialize)]
    struct Body {
        model: Option<String>,
        usage: Option<LineUsage>,
    }
    #[derive(serde::Deserialize)]
    struct LineUsage {
        #[serde(default, alias = "input_tokens")]
        prompt_tokens: u64,
        #[serde(default, alias = "output_tokens")]
        completion_tokens: u64,
        #[serde(default)]
        prompt_tokens_details: Option<Details>,
    }
    #[derive(serde::Deserialize)]
    struct Details {
        #[serde(default)]
        cached_tokens: u64,
    }
    let mut out = BatchUsage::default();
    for line in content.split(|&b| b == b'\n') {
        let Ok(line) = serde_json::from_slice::<Line>(line) else {
            continue;
        };
        let Some(answer) = line.response else {
            continue;
        };
        if answer.status_code != Some(200) {
            continue;
        }
        let Some(body) = answer.body else { continue };
        if out.model.is_none() {
            out.model = body.model;
        }
        if let Some(u) = body.usage {
            let usage = &mut out.usage;
            usage.prompt_tokens = usage.prompt_tokens.saturating_add(u.prompt_tokens);
            usage.completion_tokens = usage.completion_tokens.saturating_add(u.completion_tokens);
            let cached = u.prompt_tokens_details.map_or(0, |d| d.cached_tokens);
            usage.cached_tokens = usage.cached_tokens.saturating_add(cached);
            out.lines = out.lines.saturating_add(1);
        }
    }
    out
}

/// The most one line of a batch input file (OpenAI's shape:
/// `{"custom_id", "method", "url", "body": {...}}`) may use, for the
/// batch's budget hold: its length in bytes bounds its prompt tokens
/// (byte-level BPE spends at least one byte a token), its output is its
/// cap (`max_tokens`, else `max_completion_tokens`, else
/// `max_output_tokens`, LiteLLM's order) times its candidates (`n` or
/// `best_of`, at least 1), none for an embeddings line.
#[derive(Debug, Clone, PartialEq)]
pub struct LineBound {
    /// The model the line's body names.
    pub model: Option<String>,
    /// Prompt tokens at most.
    pub prompt_tokens: u64,
    /// Output tokens at most; `None` when the line gives no cap (the model's
    /// own cap applies, once per candidate: see `candidates`).
    pub output_tokens: Option<u64>,
    /// Answers the line asks for.
    pub candidates: u64,
}

/// The bound of one input line; `None` for a blank one. A line that is not
/// JSON counts its bytes and no cap (the upstream refuses it, but the hold
/// does not trust that).
pub fn input_line_bound(line: &[u8]) -> Option<LineBound> {
    #[derive(serde::Deserialize)]
    struct Line {
        #[serde(default)]
        url: Option<String>,
        #[serde(default)]
        body: Option<serde_json::Map<String, serde_json::Value>>,
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let prompt_tokens = line.len() as u64;
    let Ok(parsed) = serde_json::from_slice::<Line>(line) else {
        return Some(LineBound {
            model: None,
            prompt_tokens,
            output_tokens: None,
            candidates: 1,
        });
    };
    let body = parsed.body.unwrap_or_default();
    let count = |v: Option<&serde_json::Value>| v.and_then(serde_json::Value::as_u64);
    let candidates = count(body.get("n"))
        .into_iter()
        .chain(count(body.get("best_of")))
        .fold(1, u64::max);
    let embeddings = parsed
        .url
        .as_deref()
        .is_some_and(|u| u.contains("embeddings"));
    let cap = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|f| body.get(*f).filter(|v| !v.is_null()))
        .map(|v| v.as_u64().unwrap_or(u64::MAX));
    Some(LineBound {
        model: body
            .get("model")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string),
        prompt_tokens,
        output_tokens: if embeddings {
            Some(0)
        } else {
            cap.map(|c| c.saturating_mul(candidates))
        },
        candidates,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_lines_are_bounded_by_their_bytes_and_caps() {
        let line = br#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":100,"n":3}}"#;
        let b = input_line_bound(line).unwrap();
        assert_eq!(b.model.as_deref(), Some("gpt-4o-mini"));
        assert_eq!(b.prompt_tokens, line.len() as u64);
        assert_eq!((b.output_tokens, b.candidates), (Some(300), 3));
        let b = input_line_bound(
            br#"{"url":"/v1/chat/completions","body":{"model":"m","max_completion_tokens":7}}"#,
        )
        .unwrap();
        assert_eq!(b.output_tokens, Some(7));
        let b =
            input_line_bound(br#"{"url":"/v1/chat/completions","body":{"model":"m","best_of":2}}"#)
                .unwrap();
        assert_eq!((b.output_tokens, b.candidates), (None, 2));
        let b = input_line_bound(br#"{"url":"/v1/embeddings","body":{"model":"e","input":"x"}}"#)
            .unwrap();
        assert_eq!(b.output_tokens, Some(0));
        let b = input_line_bound(br#"{"url":"/v1/chat/completions","body":{"max_tokens":-1}}"#)
            .unwrap();
        assert_eq!(
            b.output_tokens,
            Some(u64::MAX),
            "a cap that is no count bounds nothing"
        );
        let b = input_line_bound(b"not json").unwrap();
        assert_eq!((b.prompt_tokens, b.output_tokens), (8, None));
        assert_eq!(input_line_bound(b"  \r"), None);
    }

    #[test]
    fn operations_are_read_from_method_and_path() {
        assert_eq!(FilesOp::parse("POST", "/files"), Some(FilesOp::Upload));
        assert_eq!(FilesOp::parse("GET", "/files"), Some(FilesOp::ListFiles));
        assert_eq!(
            FilesOp::parse("GET", "/files/file-1/content"),
            Some(FilesOp::FileContent("file-1"))
        );
        assert_eq!(
            FilesOp::parse("DELETE", "/files/file-1"),
            Some(FilesOp::DeleteFile("file-1"))
        );
        assert_eq!(
            FilesOp::parse("POST", "/batches/batch_1/cancel"),
            Some(FilesOp::CancelBatch("batch_1"))
        );
        assert_eq!(FilesOp::parse("PUT", "/files"), None);
        assert_eq!(
            FilesOp::parse_scoped("POST", "/openai/v1/files"),
            Some(("openai", FilesOp::Upload))
        );
        assert_eq!(
            FilesOp::parse_scoped("GET", "/azure/v1/files/file-1/content"),
            Some(("azure", FilesOp::FileContent("file-1")))
        );
        assert_eq!(
            FilesOp::parse_scoped("POST", "/openai/v1/batches/b/cancel"),
            Some(("openai", FilesOp::CancelBatch("b")))
        );
        for other in [
            "/v1/files",
            "/openai/files",
            "/openai/v1/chat/completions",
            "//v1/files",
            "/openai/v2/files",
        ] {
            assert_eq!(FilesOp::parse_scoped("POST", other), None, "{other}");
        }
        assert_eq!(FilesOp::parse("GET", "/filesystem"), None);
    }

    #[test]
    fn ids_never_leave_the_api_path() {
        assert!(valid_id("file-abc_12.jsonl"));
        for bad in ["", "a/b", "..", "a..b", "a%2Fb", "a?b", &"x".repeat(300)] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn azure_paths_carry_the_api_version() {
        let op = FilesOp::RetrieveBatch("batch_1");
        assert_eq!(
            FilesApi::Azure.target("", op, "", "2024-10-21"),
            "/openai/batches/batch_1?api-version=2024-10-21"
        );
        assert_eq!(
            FilesApi::Azure.target("/x", FilesOp::ListFiles, "limit=2", "v1"),
            "/x/openai/v1/files?limit=2"
        );
        assert_eq!(
            FilesApi::OpenAi.target("/v1", FilesOp::ListFiles, "limit=2", ""),
            "/v1/files?limit=2"
        );
    }

    #[test]
    fn only_paging_parameters_are_forwarded() {
        assert_eq!(
            forwarded_query("limit=2&custom_llm_provider=openai&after=file-1&x=%0d"),
            "limit=2&after=file-1"
        );
        assert_eq!(forwarded_query("after=a/b"), "");
    }

    #[test]
    fn files_settings_are_read_per_provider() {
        let yaml: serde_yaml::Value = serde_yaml::from_str(
            "- {custom_llm_provider: azure, api_base: 'https://r.openai.azure.com', api_key: k, api_version: '2024-10-21'}\n- {custom_llm_provider: openai, api_key: sk}\n- {custom_llm_provider: vertex_ai}\n",
        )
        .unwrap();
        let (settings, warnings) = FilesSetting::parse_all(&yaml).unwrap();
        assert_eq!(settings.len(), 2);
        assert_eq!(settings[0].api, FilesApi::Azure);
        assert_eq!(settings[0].version.as_deref(), Some("2024-10-21"));
        assert_eq!(&*settings[1].base.host, "api.openai.com");
        assert_eq!(settings[1].base.path, "/v1");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let bad: serde_yaml::Value =
            serde_yaml::from_str("- {custom_llm_provider: azure}").unwrap();
        assert!(FilesSetting::parse_all(&bad).is_err());
    }

    #[test]
    fn batch_usage_sums_successful_lines() {
        let content = br#"{"custom_id":"a","response":{"status_code":200,"body":{"model":"gpt-4o-mini","usage":{"prompt_tokens":10,"completion_tokens":5}}}}
{"custom_id":"b","response":{"status_code":400,"body":{"usage":{"prompt_tokens":100,"completion_tokens":100}}}}
not json
{"custom_id":"c","response":{"status_code":200,"body":{"model":"gpt-4o-mini","usage":{"prompt_tokens":7,"completion_tokens":3}}}}
"#;
        let u = batch_usage(content);
        assert_eq!(u.usage.prompt_tokens, 17);
        assert_eq!(u.usage.completion_tokens, 8);
        assert_eq!(u.lines, 2);
        assert_eq!(u.model.as_deref(), Some("gpt-4o-mini"));
    }
}
