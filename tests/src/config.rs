//! Gateway config builders. Configs are built as JSON values and written as
//! block-style YAML (the LiteLLM `config.yaml` format) by [`to_yaml`].

use serde_json::{json, Value};

/// The master key every [`base_config`] uses.
pub const MASTER_KEY: &str = "sk-test-master";

/// The upstream API key the entries made by [`openai_model`] send.
pub const UPSTREAM_KEY: &str = "sk-upstream-key";

/// `http://127.0.0.1:<port>/v1`, the api_base of a mock on `port`.
pub fn mock_api_base(port: u16) -> String {
    format!("http://127.0.0.1:{port}/v1")
}

/// A `model_list` entry for an OpenAI-compatible upstream:
/// `model_name` → `openai/upstream-gpt` at `api_base`, with `model_info.id = id`
/// and api_key [`UPSTREAM_KEY`]. Keys of `extra_params` (an object) are merged
/// into `litellm_params`, e.g. `{"extra_headers": {"x-mock-fault": "hang"}, "timeout": 1}`.
pub fn openai_model(model_name: &str, id: &str, api_base: &str, extra_params: Value) -> Value {
    let mut params = json!({
        "model": "openai/upstream-gpt",
        "api_base": api_base,
        "api_key": UPSTREAM_KEY,
        "timeout": 10,
        "stream_timeout": 10,
    });
    if let (Some(p), Value::Object(extra)) = (params.as_object_mut(), extra_params) {
        p.extend(extra);
    }
    json!({
        "model_name": model_name,
        "litellm_params": params,
        "model_info": {"id": id},
    })
}

/// The default test config: model group `gpt-4o` (id `dep-1`) on the mock at
/// `mock_port`, `local-mock` on the in-process mock provider (replying
/// "Hello from the mock"), master key [`MASTER_KEY`], a 1 MB body limit and
/// 500 ms header/body timeouts.
pub fn base_config(mock_port: u16) -> Value {
    json!({
        "model_list": [
            openai_model("gpt-4o", "dep-1", &mock_api_base(mock_port), json!({})),
            {
                "model_name": "local-mock",
                "litellm_params": {
                    "model": "mock/local",
                    "mock_response": "Hello from the mock",
                },
                "model_info": {"id": "local-1"},
            },
        ],
        "general_settings": {
            "master_key": MASTER_KEY,
            "max_request_size_mb": 1,
        },
        "gateway_settings": {
            "header_timeout_ms": 500,
            "body_timeout_ms": 500,
            "max_connections": 1000,
            "shutdown_grace_secs": 10,
        },
    })
}

/// Appends `entry` to the `model_list` of `config`.
pub fn add_model(config: &mut Value, entry: Value) {
    config["model_list"]
        .as_array_mut()
        .expect("config has a model_list array")
        .push(entry);
}

/// Writes a JSON value as block-style YAML. Strings are double-quoted (JSON
/// escapes are valid YAML escapes); keys are plain when they are simple.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    emit(value, 0, &mut out);
    out
}

fn emit(value: &Value, indent: usize, out: &mut String) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, val) in map {
                out.push_str(&" ".repeat(indent));
                out.push_str(&yaml_key(key));
                out.push(':');
                if is_inline(val) {
                    out.push(' ');
                    out.push_str(&scalar(val));
                    out.push('\n');
                } else {
                    out.push('\n');
                    emit(val, indent + 2, out);
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for item in items {
                out.push_str(&" ".repeat(indent));
                out.push_str("- ");
                if is_inline(item) {
                    out.push_str(&scalar(item));
                    out.push('\n');
                } else {
                    // Render the item one level deeper, then let the "- "
                    // marker stand in for the indentation of its first line.
                    let mut child = String::new();
                    emit(item, indent + 2, &mut child);
                    out.push_str(&child[indent + 2..]);
                }
            }
        }
        other => {
            out.push_str(&" ".repeat(indent));
            out.push_str(&scalar(other));
            out.push('\n');
        }
    }
}

fn is_inline(value: &Value) -> bool {
    match value {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => true,
    }
}

fn scalar(value: &Value) -> String {
    match value {
        Value::Object(_) => "{}".to_string(),
        Value::Array(_) => "[]".to_string(),
        other => other.to_string(),
    }
}

fn yaml_key(key: &str) -> String {
    let simple = !key.is_empty()
        && !key.starts_with('-')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if simple {
        key.to_string()
    } else {
        Value::String(key.to_string()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_writer_nests_lists_and_maps() {
        // Keys in sorted order, so the result is the same with or without
        // serde_json's `preserve_order`.
        let v = json!({
            "a_list": [{"litellm_params": {"extra_headers": {"x-h": "1"}, "model": "openai/x"}, "model_name": "a"}],
            "b_settings": {"empty": {}, "master_key": "k", "n": 1, "s": ["x", 2]},
        });
        assert_eq!(
            to_yaml(&v),
            "a_list:\n  - litellm_params:\n      extra_headers:\n        x-h: \"1\"\n      model: \"openai/x\"\n    model_name: \"a\"\nb_settings:\n  empty: {}\n  master_key: \"k\"\n  n: 1\n  s:\n    - \"x\"\n    - 2\n"
        );
    }
}
