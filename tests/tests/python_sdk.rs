//! The official OpenAI Python SDK against the gateway
//! (`tests/python/test_openai_sdk.py`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use e2e::config::add_model;
use e2e::{base_config, openai_model, Gateway, MockServer, MASTER_KEY};
use serde_json::json;

/// `E2E_PYTHON`, else `.venv/bin/python` at the workspace root.
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
        "Python interpreter {} not found: run scripts/test.sh (it creates .venv with the \
         openai package) or set E2E_PYTHON",
        python.display()
    );
    python
}

#[test]
fn openai_python_sdk() {
    let python = python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/test_openai_sdk.py");
    let mock = MockServer::start(&[]);
    let mut config = base_config(mock.port());
    add_model(
        &mut config,
        openai_model(
            "text-embedding-3-small",
            "dep-embed",
            &mock.api_base(),
            json!({"model": "openai/upstream-embed"}),
        ),
    );
    let gw = Gateway::start_json(&config, &[]);

    let dir = tempfile::tempdir().expect("temp dir");
    let out_path = dir.path().join("python.out");
    let out = std::fs::File::create(&out_path).expect("output file");
    let mut child = Command::new(&python)
        .arg(&script)
        .env(
            "GATEWAY_BASE_URL",
            format!("http://127.0.0.1:{}/v1", gw.port()),
        )
        .env("GATEWAY_MASTER_KEY", MASTER_KEY)
        .env("GATEWAY_MODEL", "gpt-4o")
        .env("GATEWAY_EMBEDDING_MODEL", "text-embedding-3-small")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("clone output file"))
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", python.display()));

    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for python") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    println!("{output}");
    let hint = if output.contains("No module named 'openai'") {
        "\n(the interpreter lacks the openai package: run scripts/test.sh)"
    } else {
        ""
    };
    match status {
        Some(s) => assert!(
            s.success(),
            "OpenAI SDK checks failed ({s}):\n{output}{hint}\n{}",
            gw.output()
        ),
        None => panic!("OpenAI SDK checks timed out after 120 s:\n{output}"),
    }
}
