//! The Python scripts under `tests/python/` (OpenAI and Anthropic SDKs,
//! Selenium), run by `E2E_PYTHON` or the workspace's `.venv`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// `E2E_PYTHON`, else `.venv/bin/python` at the workspace root; panics
/// with how to make it when it is missing.
pub fn interpreter() -> PathBuf {
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
         openai, anthropic and selenium packages) or set E2E_PYTHON",
        python.display()
    );
    python
}

/// What a script did: its exit status (`None`: killed at the deadline)
/// and everything it printed.
pub struct ScriptRun {
    /// The exit status, `None` when it outlived its deadline.
    pub status: Option<ExitStatus>,
    /// Its stdout and stderr, interleaved.
    pub output: String,
}

/// Runs `tests/python/<script>` with `envs` (and `PYTHONUNBUFFERED`),
/// killing it after `timeout`.
pub fn run_script(script: &str, envs: &[(&str, &str)], timeout: Duration) -> ScriptRun {
    let python = interpreter();
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(script);
    let mut cmd = Command::new(&python);
    cmd.arg(&script).env("PYTHONUNBUFFERED", "1");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_with_deadline(&mut cmd, timeout)
}

/// Runs `cmd` with no input, its stdout and stderr into one file, killing
/// it after `timeout`.
pub fn run_with_deadline(cmd: &mut Command, timeout: Duration) -> ScriptRun {
    let dir = tempfile::tempdir().expect("temp dir");
    let out_path = dir.path().join("run.out");
    let out = std::fs::File::create(&out_path).expect("output file");
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().expect("clone output file"))
        .stderr(out);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("run {:?}: {e}", cmd.get_program()));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
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
    ScriptRun { status, output }
}
