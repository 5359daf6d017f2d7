//! The top-level `guardrails:` list of `config.yaml`, LiteLLM's shape:
//! `[{guardrail_name, litellm_params: {guardrail, mode, default_on, ...}}]`.
//! `litellm_content_filter`, `generic_guardrail_api`, `lakera_v2`,
//! `presidio`, `openai_moderation` and `bedrock` are built; any other type,
//! mode or parameter stops start-up with a message naming it.

use super::api::GenericApi;
use super::filter::{Action, ContentFilter, PatternSpec, WordSpec};
use super::patterns::Check;
use super::{Guardrail, Kind, Modes};
use serde_yaml::Value;
use std::path::Path;

/// Largest `blocked_words_file` read.
const MAX_WORDS_FILE: u64 = 16 << 20;

/// `litellm_params` keys a content filter reads.
const FILTER_PARAMS: &[&str] = &[
    "guardrail",
    "mode",
    "default_on",
    "patterns",
    "blocked_words",
    "blocked_words_file",
];

/// One `guardrails` entry; the error is what is wrong with it.
pub fn guardrail(entry: &Value) -> Result<Guardrail, String> {
    let name = entry
        .get("guardrail_name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or("guardrail_name is required")?;
    let params = entry
        .get("litellm_params")
        .and_then(Value::as_mapping)
        .ok_or("litellm_params is required")?;
    let kind = params
        .get("guardrail")
        .and_then(Value::as_str)
        .ok_or("litellm_params.guardrail (the guardrail type) is required")?;
    let known = match kind {
        "litellm_content_filter" => FILTER_PARAMS,
        "generic_guardrail_api" => super::api::PARAMS,
        "lakera_v2" => super::lakera::PARAMS,
        "presidio" => super::presidio::PARAMS,
        "openai_moderation" => super::moderation::PARAMS,
        "bedrock" => super::bedrock::PARAMS,
        _ => {
            return Err(format!(
                "guardrail type `{kind}` is not supported by this gateway (supported: litellm_content_filter, generic_guardrail_api, lakera_v2, presidio, openai_moderation, bedrock); remove the guardrail to start"
            ))
        }
    };
    for key in params.keys() {
        let key = key.as_str().unwrap_or("?");
        if !known.contains(&key) {
            return Err(format!(
                "litellm_params.{key} is not supported by this gateway's {kind}; remove it to start"
            ));
        }
    }
    let modes = modes(params.get("mode"))?;
    let default_on = match params.get("default_on") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("litellm_params.default_on must be true or false".into()),
    };
    let service = match kind {
        "generic_guardrail_api" => Some(Kind::Api(GenericApi::from_params(params)?)),
        "lakera_v2" => Some(Kind::Lakera(super::lakera::LakeraV2::from_params(params)?)),
        "presidio" => Some(Kind::Presidio(super::presidio::Presidio::from_params(
            params,
        )?)),
        "openai_moderation" => Some(Kind::Moderation(
            super::moderation::OpenAiModeration::from_params(params)?,
        )),
        "bedrock" => Some(Kind::Bedrock(super::bedrock::BedrockGuard::from_params(
            params,
            &|k| std::env::var(k).ok(),
        )?)),
        _ => None,
    };
    if let Some(kind) = service {
        return Ok(Guardrail {
            name: name.to_string(),
            modes,
            default_on,
            kind,
        });
    }
    let patterns = match params.get("patterns") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Sequence(list)) => list
            .iter()
            .enumerate()
            .map(|(i, p)| pattern(p).map_err(|e| format!("litellm_params.patterns[{i}]: {e}")))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("litellm_params.patterns must be a list".into()),
    };
    let mut words = match params.get("blocked_words") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => words(v).map_err(|e| format!("litellm_params.blocked_words{e}"))?,
    };
    if let Some(file) = params.get("blocked_words_file") {
        let path = file
            .as_str()
            .ok_or("litellm_params.blocked_words_file must be a path")?;
        words.extend(words_file(Path::new(path))?);
    }
    let filter = ContentFilter::new(patterns, words).map_err(|e| format!("litellm_params.{e}"))?;
    Ok(Guardrail {
        name: name.to_string(),
        modes,
        default_on,
        kind: Kind::Filter(filter),
    })
}

/// `mode`: one of `pre_call`, `during_call`, `post_call`, or a list of them.
fn modes(v: Option<&Value>) -> Result<Modes, String> {
    let mut modes = Modes::default();
    let names: Vec<&Value> = match v {
        None | Some(Value::Null) => {
            modes.pre = true;
            return Ok(modes);
        }
        Some(Value::Sequence(list)) => list.iter().collect(),
        Some(one) => vec![one],
    };
    for name in names {
        match name.as_str() {
            Some("pre_call") => modes.pre = true,
            Some("during_call") => modes.during = true,
            Some("post_call") => modes.post = true,
            other => {
                return Err(format!(
                    "litellm_params.mode `{}` is not supported (pre_call, during_call, post_call)",
                    other.unwrap_or("?")
                ))
            }
        }
    }
    if !(modes.pre || modes.during || modes.post) {
        return Err("litellm_params.mode is an empty list".into());
    }
    Ok(modes)
}

fn action(v: &Value) -> Result<Action, String> {
    let s = v.get("action").and_then(Value::as_str).unwrap_or("BLOCK");
    Action::parse(s).ok_or_else(|| format!("action `{s}` is not BLOCK or MASK"))
}

/// One `patterns` entry: `pattern_type: prebuilt` with `pattern_name`, or
/// `pattern_type: regex` with `pattern` (and an optional `name`).
fn pattern(p: &Value) -> Result<PatternSpec, String> {
    let action = action(p)?;
    match p.get("pattern_type").and_then(Value::as_str) {
        Some("prebuilt") => {
            let name = p
                .get("pattern_name")
                .and_then(Value::as_str)
                .ok_or("pattern_name is required for prebuilt patterns")?;
            PatternSpec::prebuilt(name, action).ok_or_else(|| {
                let known: Vec<&str> = super::patterns::PREBUILT.iter().map(|p| p.name).collect();
                format!(
                    "prebuilt pattern `{name}` is not supported by this gateway (supported: {})",
                    known.join(", ")
                )
            })
        }
        Some("regex") => {
            let regex = p
                .get("pattern")
                .and_then(Value::as_str)
                .ok_or("pattern is required for regex patterns")?;
            let name = p
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("custom_regex");
            Ok(PatternSpec {
                name: name.to_string(),
                regex: regex.to_string(),
                check: Check::None,
                action,
            })
        }
        other => Err(format!(
            "pattern_type `{}` is not prebuilt or regex",
            other.unwrap_or("?")
        )),
    }
}

/// A `blocked_words` list of `{keyword, action, description}`; the error
/// starts with where in the list.
fn words(v: &Value) -> Result<Vec<WordSpec>, String> {
    let list = v.as_sequence().ok_or(": must be a list")?;
    list.iter()
        .enumerate()
        .map(|(i, w)| {
            let keyword = w
                .get("keyword")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("[{i}]: keyword is required"))?;
            Ok(WordSpec {
                keyword: keyword.to_string(),
                action: action(w).map_err(|e| format!("[{i}]: {e}"))?,
                description: w
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            })
        })
        .collect()
}

/// A `blocked_words_file`: YAML with a `blocked_words` list.
fn words_file(path: &Path) -> Result<Vec<WordSpec>, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("blocked_words_file {shown}: cannot read: {e}"))?;
    if meta.len() > MAX_WORDS_FILE {
        return Err(format!(
            "blocked_words_file {shown}: larger than {MAX_WORDS_FILE} bytes"
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("blocked_words_file {shown}: cannot read: {e}"))?;
    let doc: Value =
        serde_yaml::from_str(&text).map_err(|e| format!("blocked_words_file {shown}: {e}"))?;
    let list = doc.get("blocked_words").ok_or_else(|| {
        format!("blocked_words_file {shown}: must contain a `blocked_words` list")
    })?;
    words(list).map_err(|e| format!("blocked_words_file {shown}: blocked_words{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Guardrail, String> {
        guardrail(&serde_yaml::from_str(yaml).unwrap())
    }

    #[test]
    fn other_types_modes_and_params_are_refused_by_name() {
        let err =
            parse("{guardrail_name: pii, litellm_params: {guardrail: aporia, mode: pre_call}}")
                .err()
                .unwrap();
        assert!(err.contains("`aporia`"), "{err}");
        let err = parse("{guardrail_name: f, litellm_params: {guardrail: litellm_content_filter, mode: logging_only}}")
            .err()
            .unwrap();
        assert!(err.contains("`logging_only`"), "{err}");
        let err = parse("{guardrail_name: f, litellm_params: {guardrail: litellm_content_filter, categories: []}}")
            .err()
            .unwrap();
        assert!(err.contains("litellm_params.categories"), "{err}");
        let err = parse("{guardrail_name: f, litellm_params: {guardrail: litellm_content_filter, patterns: [{pattern_type: prebuilt, pattern_name: ipv6}]}}")
            .err()
            .unwrap();
        assert!(err.contains("`ipv6`"), "{err}");
    }

    #[test]
    fn modes_default_to_pre_call_and_accept_a_list() {
        let g = parse("{guardrail_name: f, litellm_params: {guardrail: litellm_content_filter}}")
            .unwrap();
        assert!(g.modes.pre && !g.modes.post && !g.default_on);
        let g = parse("{guardrail_name: f, litellm_params: {guardrail: litellm_content_filter, mode: [pre_call, post_call], default_on: true}}").unwrap();
        assert!(g.modes.pre && g.modes.post && g.default_on);
    }

    #[test]
    fn blocked_words_file_is_read() {
        let dir = std::env::temp_dir().join(format!("gr-words-{}", std::process::id()));
        std::fs::write(
            &dir,
            "blocked_words:\n  - keyword: zeta\n    action: MASK\n",
        )
        .unwrap();
        let yaml = format!(
            "{{guardrail_name: f, litellm_params: {{guardrail: litellm_content_filter, blocked_words_file: {}}}}}",
            dir.display()
        );
        let g = parse(&yaml).unwrap();
        assert_eq!(
            g.filter().unwrap().apply("a ZETA b").unwrap(),
            "a [KEYWORD_REDACTED] b"
        );
        std::fs::remove_file(&dir).unwrap();
        assert!(parse(&yaml).err().unwrap().contains("blocked_words_file"));
    }
}
