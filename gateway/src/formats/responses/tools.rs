//! Responses tools a chat upstream cannot carry as they are, flattened or
//! dropped as LiteLLM 1.110.2's bridge does, and the way back for the calls
//! a model makes to them.
//!
//! - `function`: the chat function tool (`parameters` get `"type":
//!   "object"` when they name no type).
//! - `namespace`: each member function (or custom tool) becomes a function
//!   named `<namespace>__<name>`, its description prefixed with the
//!   namespace's; a namespace without members is one function of its own
//!   name. A top-level function of a flattened name is a client error.
//! - `custom` (free-form text tools such as Codex's `apply_patch`): a
//!   function taking one string, `content`, the grammar appended to the
//!   description.
//! - every other type (`web_search`, `web_search_preview`, `file_search`,
//!   `code_interpreter`, `computer_use`, `image_generation`, `local_shell`,
//!   `shell`, `mcp`, `tool_search`...): dropped. LiteLLM derives
//!   `web_search_options` from a web search tool and forwards `mcp` and
//!   unknown types to the upstream, which a chat upstream without them
//!   refuses; here the turn is served without them.
//!
//! A call to `<namespace>__<name>` comes back as a `function_call` with
//! `namespace` and `name`; a call to a custom tool as a `custom_tool_call`
//! whose `input` is the `content` argument.

use crate::error::GatewayError;
use serde_json::{json, Map, Value};

/// Joins a namespace's description and a member's, as LiteLLM does.
const DESCRIPTION_SEPARATOR: &str = "\n\n";

/// Joins a namespace's name and a member's in the flattened name.
const NAMESPACE_SEPARATOR: &str = "__";

fn invalid(message: impl Into<String>) -> GatewayError {
    GatewayError::InvalidParam {
        param: "tools",
        message: message.into(),
    }
}

/// The chat tools for the Responses `tools`.
pub(super) fn to_chat(tools: &[Value]) -> Result<Vec<Value>, GatewayError> {
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        match tool["type"].as_str() {
            Some("function") => out.push(function(tool, name_of(tool)?, description(tool))),
            Some("custom") => out.push(custom(tool, name_of(tool)?, description(tool))),
            Some("namespace") => namespace(tool, &mut out)?,
            _ => {}
        }
    }
    let top_level: Vec<&str> = tools
        .iter()
        .filter(|t| t["type"] == "function")
        .filter_map(|t| t["name"].as_str())
        .collect();
    let clashes: Vec<String> = tools
        .iter()
        .filter(|t| t["type"] == "namespace")
        .flat_map(|t| members(t).iter().map(move |m| (&t["name"], m)))
        .filter(|(_, m)| m["type"] == "function")
        .map(|(ns, m)| {
            let (ns, name) = (
                ns.as_str().unwrap_or_default(),
                m["name"].as_str().unwrap_or_default(),
            );
            format!("{ns}{NAMESPACE_SEPARATOR}{name}")
        })
        .filter(|flat| top_level.contains(&flat.as_str()))
        .collect();
    if !clashes.is_empty() {
        return Err(invalid(format!(
            "top-level function names conflict with flattened namespace tools: {}",
            clashes.join(", ")
        )));
    }
    Ok(out)
}

fn name_of(tool: &Value) -> Result<&str, GatewayError> {
    tool["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid(format!("each {} tool needs a name", tool["type"])))
}

fn description(tool: &Value) -> String {
    tool["description"].as_str().unwrap_or_default().to_string()
}

fn members(tool: &Value) -> &[Value] {
    tool["tools"].as_array().map_or(&[], Vec::as_slice)
}

/// A chat function tool of `name` from a Responses function tool.
fn function(tool: &Value, name: &str, description: String) -> Value {
    let mut parameters = match &tool["parameters"] {
        Value::Object(p) => p.clone(),
        _ => Map::new(),
    };
    parameters
        .entry("type")
        .or_insert_with(|| Value::String("object".into()));
    let mut function = Map::new();
    function.insert("name".into(), json!(name));
    if !description.is_empty() {
        function.insert("description".into(), json!(description));
    }
    function.insert("parameters".into(), Value::Object(parameters));
    if let Some(strict) = tool["strict"].as_bool() {
        function.insert("strict".into(), json!(strict));
    }
    json!({"type": "function", "function": function})
}

/// A chat function tool of `name` taking a custom tool's text as `content`.
fn custom(tool: &Value, name: &str, mut description: String) -> Value {
    if let Some(definition) = tool["format"]["definition"]
        .as_str()
        .filter(|d| !d.is_empty())
    {
        let syntax = tool["format"]["syntax"].as_str().unwrap_or_default();
        description.push_str(&format!("\n\nFormat:\n```{syntax}\n{definition}\n```"));
    }
    json!({"type": "function", "function": {
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {"content": {"type": "string", "description": format!("The {name} content following the specified format")}},
            "required": ["content"],
        },
    }})
}

/// Appends a namespace tool's members as flattened functions.
fn namespace(tool: &Value, out: &mut Vec<Value>) -> Result<(), GatewayError> {
    let ns = name_of(tool)?;
    let ns_description = description(tool);
    if tool["tools"].is_null() {
        out.push(function(tool, ns, ns_description));
        return Ok(());
    }
    for member in members(tool) {
        let kind = member["type"].as_str();
        if !matches!(kind, Some("function" | "custom")) {
            continue;
        }
        let own = description(member);
        let joined = match (ns_description.is_empty(), own.is_empty()) {
            (false, false) => format!("{ns_description}{DESCRIPTION_SEPARATOR}{own}"),
            (false, true) => ns_description.clone(),
            _ => own,
        };
        let name = name_of(member)?;
        if kind == Some("custom") {
            // LiteLLM keeps a custom member's own name.
            out.push(custom(member, name, joined));
        } else {
            let flat = format!("{ns}{NAMESPACE_SEPARATOR}{name}");
            out.push(function(member, &flat, joined));
        }
    }
    Ok(())
}

/// The chat tool call for a `function_call` or `custom_tool_call` input
/// item: a namespaced function under its flattened name, a custom call's
/// `input` as the `content` argument.
pub(super) fn call_of(item: &Value) -> Value {
    let name = item["name"].as_str().unwrap_or_default();
    let custom = item["type"] == "custom_tool_call";
    let name = match item["namespace"].as_str().filter(|ns| !ns.is_empty()) {
        Some(ns) if !custom => format!("{ns}{NAMESPACE_SEPARATOR}{name}"),
        _ => name.to_string(),
    };
    let arguments = match &item["arguments"] {
        Value::String(s) if !s.is_empty() => s.clone(),
        Value::Null | Value::String(_) => match item["input"].as_str() {
            Some(input) if custom && !input.is_empty() => json!({"content": input}).to_string(),
            _ => "{}".to_string(),
        },
        other => other.to_string(),
    };
    let id = item["call_id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .or_else(|| item["id"].as_str());
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
}

/// What a request's tools make of the calls a model answers with: which
/// names are custom tools and which are flattened namespace members.
#[derive(Debug, Default, Clone)]
pub struct CallNames {
    custom: Vec<String>,
    /// (flattened name, namespace, member name).
    namespaced: Vec<(String, String, String)>,
}

impl CallNames {
    /// The names of the Responses request `body`'s tools (none when it has
    /// no tools or is not JSON).
    pub fn of(body: &[u8]) -> CallNames {
        #[derive(serde::Deserialize)]
        struct Tools {
            #[serde(default)]
            tools: Vec<Value>,
        }
        let Ok(Tools { tools }) = serde_json::from_slice::<Tools>(body) else {
            return CallNames::default();
        };
        let mut names = CallNames::default();
        for tool in &tools {
            match (tool["type"].as_str(), tool["name"].as_str()) {
                (Some("custom"), Some(name)) => names.custom.push(name.to_string()),
                (Some("namespace"), Some(ns)) => {
                    for member in members(tool) {
                        match (member["type"].as_str(), member["name"].as_str()) {
                            (Some("custom"), Some(name)) => names.custom.push(name.to_string()),
                            (Some("function"), Some(name)) => names.namespaced.push((
                                format!("{ns}{NAMESPACE_SEPARATOR}{name}"),
                                ns.to_string(),
                                name.to_string(),
                            )),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        names
    }

    /// Shapes the output item `item` (a `function_call` made from a chat
    /// tool call) for the tool it calls: a custom tool's call becomes a
    /// `custom_tool_call` with `input`, a namespace member's gets its
    /// `namespace` and own name back. Only a completed call's arguments
    /// are unwrapped.
    pub fn shape(&self, item: &mut Value) {
        let Some(name) = item["name"].as_str().map(str::to_string) else {
            return;
        };
        if self.custom.contains(&name) {
            let args = item["arguments"].as_str().unwrap_or_default();
            let input = if item["status"] == "completed" {
                unwrap_content(args)
            } else {
                String::new()
            };
            if let Some(fields) = item.as_object_mut() {
                fields.remove("arguments");
                fields.insert("type".into(), json!("custom_tool_call"));
                fields.insert("input".into(), json!(input));
            }
        } else if let Some((_, ns, own)) = self.namespaced.iter().find(|(flat, ..)| *flat == name) {
            item["name"] = json!(own);
            item["namespace"] = json!(ns);
        }
    }

    /// Whether `name` is a custom tool's (its arguments stream as `input`).
    pub fn is_custom(&self, name: &str) -> bool {
        self.custom.iter().any(|c| c == name)
    }
}

/// The `content` of a custom tool call's JSON arguments, else the
/// arguments as they are.
fn unwrap_content(args: &str) -> String {
    match serde_json::from_str::<Value>(args) {
        Ok(Value::Object(mut fields)) => match fields.remove("content") {
            Some(Value::String(s)) => s,
            Some(other) => other.to_string(),
            None => args.to_string(),
        },
        _ => args.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_flattened_custom_tools_become_functions_built_ins_dropped() {
        let tools = json!([
            {"type": "function", "name": "exec_command", "parameters": {"properties": {}}, "strict": false},
            {"type": "namespace", "name": "agents", "description": "Sub-agents.", "tools": [
                {"type": "function", "name": "spawn", "description": "Start one.", "parameters": {"type": "object"}},
                {"type": "function", "name": "wait"},
                {"type": "web_search"},
            ]},
            {"type": "custom", "name": "apply_patch", "description": "Patch files.", "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
            {"type": "web_search", "external_web_access": false},
            {"type": "web_search_preview"},
            {"type": "local_shell"},
            {"type": "image_generation"},
            {"type": "mcp", "server_label": "s"},
            {"type": "file_search", "vector_store_ids": ["v"]},
        ]);
        let out = to_chat(tools.as_array().unwrap()).unwrap();
        assert_eq!(
            Value::Array(out),
            json!([
                {"type": "function", "function": {"name": "exec_command", "parameters": {"type": "object", "properties": {}}, "strict": false}},
                {"type": "function", "function": {"name": "agents__spawn", "description": "Sub-agents.\n\nStart one.", "parameters": {"type": "object"}}},
                {"type": "function", "function": {"name": "agents__wait", "description": "Sub-agents.", "parameters": {"type": "object"}}},
                {"type": "function", "function": {"name": "apply_patch", "description": "Patch files.\n\nFormat:\n```lark\nstart: x\n```", "parameters": {
                    "type": "object",
                    "properties": {"content": {"type": "string", "description": "The apply_patch content following the specified format"}},
                    "required": ["content"],
                }}},
            ])
        );
    }

    #[test]
    fn a_top_level_function_of_a_flattened_name_is_a_client_error() {
        let tools = json!([
            {"type": "function", "name": "ns__f"},
            {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "f"}]},
        ]);
        let err = to_chat(tools.as_array().unwrap()).unwrap_err();
        assert_eq!(err.status(), 400);
        assert!(to_chat(&[json!({"type": "function"})]).is_err());
    }

    #[test]
    fn calls_go_out_flattened_and_come_back_shaped() {
        let ns_call = json!({"type": "function_call", "call_id": "c1", "namespace": "agents", "name": "spawn", "arguments": "{}"});
        assert_eq!(
            call_of(&ns_call),
            json!({"id": "c1", "type": "function", "function": {"name": "agents__spawn", "arguments": "{}"}})
        );
        let custom_call = json!({"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"});
        assert_eq!(
            call_of(&custom_call)["function"]["arguments"],
            json!({"content": "*** Begin Patch"}).to_string()
        );
        let body = json!({"tools": [
            {"type": "custom", "name": "apply_patch"},
            {"type": "namespace", "name": "agents", "tools": [{"type": "function", "name": "spawn"}]},
        ]});
        let names = CallNames::of(body.to_string().as_bytes());
        let mut item = json!({"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "agents__spawn", "arguments": "{}", "status": "completed"});
        names.shape(&mut item);
        assert_eq!(item["name"], "spawn");
        assert_eq!(item["namespace"], "agents");
        let mut item = json!({"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "apply_patch", "arguments": "{\"content\":\"patch\"}", "status": "completed"});
        names.shape(&mut item);
        assert_eq!(
            item,
            json!({"type": "custom_tool_call", "id": "fc_2", "call_id": "c2", "name": "apply_patch", "input": "patch", "status": "completed"})
        );
        assert!(names.is_custom("apply_patch"));
        let mut plain = json!({"type": "function_call", "name": "exec_command", "arguments": "{}"});
        names.shape(&mut plain);
        assert_eq!(plain["name"], "exec_command");
        assert!(CallNames::of(b"nope").custom.is_empty());
    }
}
