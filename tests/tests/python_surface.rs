//! The rest of the API surface through Python clients
//! (`tests/python/test_surface.py`): the official OpenAI SDK on Cohere chat,
//! streaming and embeddings and on moderations, httpx on `/v1/rerank` and
//! `/v2/rerank`, against a gateway on the faithful mock.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::{to_yaml, Gateway, MockServer, MASTER_KEY};
use serde_json::json;

/// `E2E_PYTHON`, else `.venv/bin/python` at the workspace root (made by
/// `scripts/test.sh` with the openai package, which brings httpx).
fn python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf();
    let python = std::env::var_os("E2E_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv/bin/python"));
    assert!(
        python.exists(),
        "Python interpreter {} not found: run scripts/test.sh or set E2E_PYTHON",
        python.display()
    );
    python
}

#[test]
fn openai_sdk_and_httpx_on_cohere_rerank_and_moderations() {
    let mock = MockServer::start(&["--completion-tokens", "4"]);
    let cohere = |group: &str, model: &str| {
        json!({"model_name": group, "litellm_params": {
            "model": model,
            "api_base": format!("http://127.0.0.1:{}", mock.port()),
            "api_key": "mock-cohere-api-key",
        }})
    };
    let config = json!({
        "model_list": [
            cohere("command", "cohere/command-r-08-2024"),
            cohere("embed", "cohere/embed-english-v3.0"),
            cohere("reranker", "cohere/rerank-v3.5"),
            {"model_name": "omni-moderation-latest", "litellm_params": {
                "model": "openai/omni-moderation-latest", "api_key": "sk-up", "api_base": mock.api_base(),
            }},
        ],
        "general_settings": {"master_key": MASTER_KEY},
    });
    let gw = Gateway::start(&to_yaml(&config), &[]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/test_surface.py");
    let dir = tempfile::tempdir().expect("temp dir");
    let out_path = dir.path().join("python.out");
    let out = std::fs::File::create(&out_path).expect("output file");
    let mut child = Command::new(python())
        .arg(&script)
        .env(
            "GATEWAY_BASE_URL",
            format!("http://127.0.0.1:{}/v1", gw.port()),
        )
        .env("GATEWAY_MASTER_KEY", MASTER_KEY)
        .env("GATEWAY_CHAT_MODEL", "command")
        .env("GATEWAY_EMBEDDING_MODEL", "embed")
        .env("GATEWAY_RERANK_MODEL", "reranker")
        .env("GATEWAY_MODERATION_MODEL", "omni-moderation-latest")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("clone output file"))
        .stderr(out)
        .spawn()
        .expect("run python");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for python") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} timed out after 120 s", script.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    assert!(status.success(), "{text}\n{}", gw.output());
    assert_eq!(text.matches("PASS ").count(), 5, "{text}");
}
