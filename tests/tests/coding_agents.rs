//! Real coding agents through the gateway, against the mock upstreams:
//! the Codex CLI (`codex exec`, Responses API) on a deployment bridged to
//! chat completions (`use_chat_completions_api: true`), and Claude Code
//! (`claude -p`) through `/v1/messages`. Each completes a turn with one
//! tool-call round trip: the mock calls the agent's first tool when the
//! prompt says `mock-tool-use` and answers in text once the tool's result
//! comes back. Only 127.0.0.1 is reached: the CLIs' telemetry, update
//! checks and other traffic are switched off.

use e2e::{base_config, to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::{json, Value};
use std::time::Duration;

/// A whole agent turn, tool included, with a CLI's own start-up.
const TURN: Duration = Duration::from_secs(120);

fn gateway(mock: &MockServer) -> Gateway {
    let mut config = base_config(mock.port());
    config["model_list"] = json!([
        {
            "model_name": "codex-model",
            "litellm_params": {
                "model": "openai/upstream-gpt",
                "api_base": mock.api_base(),
                "api_key": e2e::config::UPSTREAM_KEY,
                "use_chat_completions_api": true,
            },
        },
        {
            "model_name": "claude-model",
            "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": format!("http://127.0.0.1:{}", mock.port()),
                "api_key": e2e::config::UPSTREAM_KEY,
            },
        },
    ]);
    // CLI requests are large (tool schemas, instructions).
    config["general_settings"]["max_request_size_mb"] = json!(16);
    Gateway::start(&to_yaml(&config), &[])
}

/// The JSON lines a CLI printed.
fn events(output: &str) -> Vec<Value> {
    output
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn codex_exec_completes_a_turn_with_a_tool_call_through_the_chat_bridge() {
    let mock = MockServer::start(&[]);
    let gw = gateway(&mock);
    let home = tempfile::tempdir().expect("codex home");
    let work = tempfile::tempdir().expect("work dir");
    let config = format!(
        "model = \"codex-model\"\n\
         model_provider = \"gateway\"\n\
         check_for_update_on_startup = false\n\
         [analytics]\nenabled = false\n\
         [features]\nplugins = false\nremote_plugin = false\nplugin_sharing = false\n\
         apps = false\nin_app_updates = false\n\
         [model_providers.gateway]\n\
         name = \"gateway\"\n\
         base_url = \"http://127.0.0.1:{}/v1\"\n\
         wire_api = \"responses\"\n\
         env_key = \"GATEWAY_KEY\"\n",
        gw.port()
    );
    std::fs::write(home.path().join("config.toml"), config).expect("codex config");
    let home_dir = home.path().to_str().expect("utf-8 path");
    let run = e2e::node::run(
        "codex",
        &[
            "exec",
            "--skip-git-repo-check",
            "--json",
            "please mock-tool-use",
        ],
        work.path(),
        &[
            ("CODEX_HOME", home_dir),
            ("HOME", home_dir),
            ("GATEWAY_KEY", MASTER_KEY),
        ],
        TURN,
    );
    let output = &run.output;
    assert!(
        run.status.is_some_and(|s| s.success()),
        "codex exec failed:\n{output}"
    );
    let events = events(output);
    let completed = |kind: &str| {
        events
            .iter()
            .find(|e| e["type"] == "item.completed" && e["item"]["type"] == kind)
            .unwrap_or_else(|| panic!("no completed {kind} item:\n{output}"))
    };
    // The mock's call reached Codex as its own tool, which ran it...
    let command = completed("command_execution");
    assert!(
        command["item"]["command"]
            .as_str()
            .is_some_and(|c| c.contains("mock")),
        "{command}"
    );
    // ...and the result went back: the mock then answers in text.
    let message = completed("agent_message");
    assert!(
        message["item"]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("lorem ipsum")),
        "{message}"
    );
    assert!(
        events.iter().any(|e| e["type"] == "turn.completed"),
        "{output}"
    );
}

#[test]
fn claude_code_completes_a_turn_with_a_tool_call_through_messages() {
    let mock = MockServer::start(&[]);
    let gw = gateway(&mock);
    let home = tempfile::tempdir().expect("home");
    let work = tempfile::tempdir().expect("work dir");
    let base_url = format!("http://127.0.0.1:{}", gw.port());
    let home_dir = home.path().to_str().expect("utf-8 path");
    let run = e2e::node::run(
        "claude",
        &[
            "-p",
            "--model",
            "claude-model",
            "--tools",
            "Bash",
            "--allowedTools",
            "Bash",
            "--output-format",
            "stream-json",
            "--verbose",
            "please mock-tool-use",
        ],
        work.path(),
        &[
            ("HOME", home_dir),
            ("ANTHROPIC_BASE_URL", &base_url),
            ("ANTHROPIC_API_KEY", MASTER_KEY),
            ("ANTHROPIC_MODEL", "claude-model"),
            ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "claude-model"),
            ("ANTHROPIC_SMALL_FAST_MODEL", "claude-model"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
        ],
        TURN,
    );
    let output = &run.output;
    assert!(
        run.status.is_some_and(|s| s.success()),
        "claude -p failed:\n{output}"
    );
    let events = events(output);
    let blocks: Vec<&Value> = events
        .iter()
        .filter_map(|e| e["message"]["content"].as_array())
        .flatten()
        .collect();
    let call = blocks
        .iter()
        .find(|b| b["type"] == "tool_use" && b["name"] == "Bash")
        .unwrap_or_else(|| panic!("no Bash tool_use:\n{output}"));
    assert!(
        blocks
            .iter()
            .any(|b| b["type"] == "tool_result" && b["tool_use_id"] == call["id"]),
        "the tool's result never went back:\n{output}"
    );
    let result = events
        .iter()
        .find(|e| e["type"] == "result")
        .unwrap_or_else(|| panic!("no result:\n{output}"));
    assert_eq!(result["is_error"], false, "{result}");
    assert!(
        result["result"]
            .as_str()
            .is_some_and(|t| t.starts_with("lorem ipsum")),
        "{result}"
    );
}
