//! Enforced parameters: the request parameters every LLM request must
//! carry, as LiteLLM's `_enforced_params_check` requires them: the config's
//! `general_settings.enforced_params` (every caller, the master key's
//! requests included), `service_account_settings.enforced_params` (keys
//! whose `metadata` has a `service_account_id`), then the key's own
//! (kept in its `metadata`, as LiteLLM keeps them), in LiteLLM's order. A
//! name is a top-level member (`user`) or one level down
//! (`metadata.generation_name`); a request without one is a 400 with
//! LiteLLM's message. LiteLLM's proxy always adds a `metadata` of its own
//! to the body it checks on the routes that keep their metadata there (all
//! but `/v1/messages` and `/v1/responses`), so `metadata` alone is always
//! present on them.
//!
//! A multipart form (audio transcriptions and translations, image edits)
//! is read as LiteLLM's proxy reads it: every part is a member by its name
//! (a transcription's `file` excepted; an edit's `image[]` and `mask[]` as
//! `image` and `mask`, and its `prompt` and `image` always present), a
//! field's value its text, and `metadata` the JSON object its text holds.
//! A streamed upload (over 256 KiB, fields first) is checked on the parts
//! before its file: a parameter sent after the file is reported missing,
//! saying so.
//!
//! A realtime session is checked against the body LiteLLM's proxy makes
//! for one ([`check_realtime`]), before the upgrade; a Files API upload
//! ([`check_upload`]) and a batch creation ([`check_batch`]) likewise.
//!
//! LiteLLM answers the missing parameter with a 500 (a bare `ValueError`)
//! and asks for an enterprise licence; the gateway answers 400, naming the
//! parameter, and asks for none.

use crate::auth::Principal;
use crate::config::EnforcedParams;
use crate::error::GatewayError;
use crate::inbound::form;
use crate::inbound::Endpoint;
use serde_json::{Map, Value};

/// Said after LiteLLM's message when a streamed upload lacks a parameter
/// before its file.
const STREAMED_NOTE: &str =
    " (a form over 256 KiB is checked on the fields before its first file: send it before the file)";

/// What a request's body is, for the check.
pub(crate) struct Body<'a> {
    /// The bytes received: a JSON body, a whole form, or a streamed
    /// upload's first bytes.
    pub bytes: &'a [u8],
    /// The form's content type, when the endpoint takes a form.
    pub form: Option<&'a str>,
    /// Whether `bytes` is a streamed upload's first bytes only.
    pub streamed: bool,
}

/// Refuses a request whose body lacks a parameter the config or the
/// caller's key enforces.
pub(crate) fn check(
    config: &EnforcedParams,
    principal: &Principal,
    endpoint: Endpoint,
    body: Body<'_>,
) -> Result<(), GatewayError> {
    let Some(names) = required(config, principal) else {
        return Ok(());
    };
    let members = match body.form {
        Some(content_type) => form_members(endpoint, content_type, &body)?,
        None => serde_json::from_slice(body.bytes).unwrap_or_default(),
    };
    let proxy_metadata = !matches!(endpoint, Endpoint::Messages | Endpoint::Responses);
    let note = if body.streamed { STREAMED_NOTE } else { "" };
    verify(names, &members, proxy_metadata, note)
}

/// [`check`] for a realtime session asking for `model`: LiteLLM checks the
/// body its proxy makes for one (`model`, `websocket`, `query_params`,
/// `realtime_mode`, in `_route_realtime_websocket_session`) with its own
/// `metadata`, so a key that enforces `user` opens no session there.
pub(crate) fn check_realtime(
    config: &EnforcedParams,
    principal: &Principal,
    model: &str,
) -> Result<(), GatewayError> {
    let Some(names) = required(config, principal) else {
        return Ok(());
    };
    let mut members = Map::new();
    members.insert("model".into(), Value::String(model.to_string()));
    for made in ["websocket", "query_params", "realtime_mode"] {
        members.insert(made.into(), Value::Null);
    }
    verify(names, &members, true, "")
}

/// [`check`] for a Files API upload (`body`, a form): LiteLLM checks the
/// body its proxy makes for one (`create_file`): none of the form's fields
/// but its `litellm_metadata[<name>]` ones, gathered in `litellm_metadata`,
/// which its proxy adds on the files and batches routes (they keep its
/// metadata there, not in `metadata`). So a key that enforces `user` or
/// `metadata` uploads no file there.
pub(crate) fn check_upload(
    config: &EnforcedParams,
    principal: &Principal,
    body: Body<'_>,
) -> Result<(), GatewayError> {
    let Some(names) = required(config, principal) else {
        return Ok(());
    };
    let boundary = form::boundary(body.form.unwrap_or_default())?;
    let mut metadata = Map::new();
    for (name, content) in form::members(body.bytes, boundary, body.streamed)? {
        let inner = name
            .strip_prefix("litellm_metadata[")
            .and_then(|n| n.strip_suffix(']'));
        if let (Some(inner), Some(range)) = (inner, content) {
            let text = String::from_utf8_lossy(&body.bytes[range]).into_owned();
            metadata.insert(inner.to_string(), Value::String(text));
        }
    }
    let mut members = Map::new();
    members.insert("litellm_metadata".into(), Value::Object(metadata));
    let note = if body.streamed { STREAMED_NOTE } else { "" };
    verify(names, &members, false, note)
}

/// [`check`] for a batch creation (`body`, its JSON): LiteLLM checks the
/// body as sent, with the `litellm_metadata` its proxy adds on the batches
/// route (not `metadata`, which must then be sent).
pub(crate) fn check_batch(
    config: &EnforcedParams,
    principal: &Principal,
    body: &[u8],
) -> Result<(), GatewayError> {
    let Some(names) = required(config, principal) else {
        return Ok(());
    };
    let mut members: Map<String, Value> = serde_json::from_slice(body).unwrap_or_default();
    members
        .entry("litellm_metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    verify(names, &members, false, "")
}

/// The names the config and the caller's key enforce, in LiteLLM's order;
/// `None` when there are none.
fn required<'a>(
    config: &'a EnforcedParams,
    principal: &'a Principal,
) -> Option<impl Iterator<Item = &'a str>> {
    let key_metadata = match principal {
        Principal::Key(key) => Some(&key.record.metadata),
        Principal::Master | Principal::Anonymous => None,
    };
    let service_account = key_metadata.is_some_and(|m| m.contains_key("service_account_id"));
    let of_key = match key_metadata.and_then(|m| m.get("enforced_params")) {
        Some(Value::Array(names)) => names.as_slice(),
        _ => &[],
    };
    let config_names = config
        .all
        .iter()
        .chain(
            config
                .service_accounts
                .iter()
                .filter(move |_| service_account),
        )
        .map(String::as_str);
    let mut names = config_names
        .chain(of_key.iter().filter_map(Value::as_str))
        .peekable();
    names.peek()?;
    Some(names)
}

/// The error for the first of `names` that `members` lacks.
fn verify<'a>(
    names: impl Iterator<Item = &'a str>,
    members: &Map<String, Value>,
    proxy_metadata: bool,
    note: &'static str,
) -> Result<(), GatewayError> {
    for name in names {
        missing(members, name, proxy_metadata, note).map_or(Ok(()), Err)?;
    }
    Ok(())
}

/// The members LiteLLM's proxy reads from a form on `endpoint`.
fn form_members(
    endpoint: Endpoint,
    content_type: &str,
    body: &Body<'_>,
) -> Result<Map<String, Value>, GatewayError> {
    let parts = form::members(body.bytes, form::boundary(content_type)?, body.streamed)?;
    let mut members = Map::new();
    let edit = endpoint == Endpoint::ImageEdits;
    if edit {
        members.insert("prompt".into(), Value::Null);
        members.insert("image".into(), Value::Null);
    }
    for (name, content) in parts {
        if name == "file" && !edit {
            continue;
        }
        let name = match name.as_str() {
            "image[]" if edit => "image".to_string(),
            "mask[]" if edit => "mask".to_string(),
            _ => name,
        };
        let text = content.map(|r| String::from_utf8_lossy(&body.bytes[r]).into_owned());
        let value = match (name.as_str(), text) {
            (_, None) => Value::Null,
            ("metadata", Some(text)) => serde_json::from_str::<Map<String, Value>>(&text)
                .map(Value::Object)
                .unwrap_or(Value::String(text)),
            (_, Some(text)) => Value::String(text),
        };
        members.insert(name, value);
    }
    Ok(members)
}

/// The error for `name` when `members` lacks it.
fn missing(
    members: &Map<String, Value>,
    name: &str,
    proxy_metadata: bool,
    note: &'static str,
) -> Option<GatewayError> {
    let mut parts = name.split('.');
    let top = parts.next().unwrap_or_default();
    let inner = parts.next();
    // LiteLLM checks one or two levels; a longer name is not checked there.
    if parts.next().is_some() {
        return None;
    }
    let error = |shown: String| GatewayError::EnforcedParamMissing {
        shown,
        param: name.to_string(),
        note,
    };
    let value = members.get(top);
    // The proxy's own `metadata` is there, empty, when the body has none.
    if value.is_none() && !(proxy_metadata && top == "metadata") {
        return Some(error(top.to_string()));
    }
    let inner = inner?;
    let held = match value {
        Some(Value::Object(m)) => m.contains_key(inner),
        Some(Value::Array(items)) => items.iter().any(|i| i.as_str() == Some(inner)),
        Some(Value::String(s)) => s.contains(inner),
        _ => false,
    };
    (!held).then(|| error(format!("[{top}][{inner}]")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn names_the_missing_parameter_as_litellm_does() {
        let body = map(serde_json::json!({"user": "u", "metadata": {"generation_name": "g"}}));
        assert!(missing(&body, "user", true, "").is_none());
        assert!(missing(&body, "metadata.generation_name", true, "").is_none());
        let e = missing(&body, "metadata.trace", true, "").unwrap();
        assert_eq!(
            e.to_string(),
            "BadRequest please pass param=[metadata][trace] in request body. This is a required param"
        );
        assert_eq!(e.param(), Some("metadata.trace"));
        let e = missing(&body, "temperature", true, "").unwrap();
        assert_eq!(e.status(), 400);
        assert!(e.to_string().contains("param=temperature "));
        let empty = Map::new();
        assert!(missing(&empty, "metadata", true, "").is_none());
        assert!(missing(&empty, "metadata", false, "").is_some());
        let e = missing(&empty, "metadata.x", true, "").unwrap();
        assert!(e.to_string().contains("param=[metadata][x] "), "{e}");
        assert!(missing(&empty, "a.b.c", true, "").is_none());
        let e = missing(&empty, "user", true, STREAMED_NOTE).unwrap();
        assert!(e.to_string().ends_with("send it before the file)"), "{e}");
    }

    const FORM: &[u8] = b"--B\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper\r\n--B\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"generation_name\": \"g\"}\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n--B\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nu-1\r\n--B--\r\n";

    #[test]
    fn a_forms_parts_are_its_members() {
        let whole = Body {
            bytes: FORM,
            form: Some("multipart/form-data; boundary=B"),
            streamed: false,
        };
        let members = form_members(
            Endpoint::AudioTranscriptions,
            "multipart/form-data; boundary=B",
            &whole,
        )
        .unwrap();
        assert_eq!(members["user"], "u-1");
        assert_eq!(members["metadata"]["generation_name"], "g");
        assert!(!members.contains_key("file"), "LiteLLM leaves the file out");
        let edit = form_members(
            Endpoint::ImageEdits,
            "multipart/form-data; boundary=B",
            &whole,
        )
        .unwrap();
        assert!(edit.contains_key("file") && edit.contains_key("prompt"));
        let streamed = Body {
            streamed: true,
            ..whole
        };
        let head = form_members(
            Endpoint::AudioTranscriptions,
            "multipart/form-data; boundary=B",
            &streamed,
        )
        .unwrap();
        assert!(head.contains_key("metadata") && !head.contains_key("user"));
    }

    #[test]
    fn an_upload_holds_only_its_litellm_metadata_fields() {
        let config = |names: &[&str]| EnforcedParams {
            all: names.iter().map(|n| n.to_string()).collect(),
            service_accounts: Vec::new(),
        };
        let upload = b"--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n--B\r\nContent-Disposition: form-data; name=\"user\"\r\n\r\nu-1\r\n--B\r\nContent-Disposition: form-data; name=\"litellm_metadata[tag]\"\r\n\r\nt\r\n--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n\r\n{}\r\n--B--\r\n";
        let body = || Body {
            bytes: upload,
            form: Some("multipart/form-data; boundary=B"),
            streamed: false,
        };
        let check = |names: &[&str]| check_upload(&config(names), &Principal::Master, body());
        assert!(check(&[]).is_ok());
        assert!(check(&["litellm_metadata", "litellm_metadata.tag"]).is_ok());
        for refused in ["user", "purpose", "metadata", "litellm_metadata.other"] {
            let err = check(&[refused]).unwrap_err();
            assert_eq!(err.param(), Some(refused), "{err}");
        }
        let batch =
            |names: &[&str], json: &[u8]| check_batch(&config(names), &Principal::Master, json);
        assert!(batch(&["litellm_metadata"], b"{}").is_ok());
        assert!(batch(&["metadata"], b"{}").is_err());
        assert!(batch(&["metadata.p"], br#"{"metadata": {"p": 1}}"#).is_ok());
    }
}
