//! The coding agents' CLIs from npm (`@openai/codex`, `@anthropic-ai/claude-code`),
//! installed by `scripts/test.sh` into `tests/node/`, run with a deadline.

use crate::python::{run_with_deadline, ScriptRun};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The CLI `name` under `E2E_NODE_BIN`, else `tests/node/node_modules/.bin`;
/// panics with how to install it when it is missing.
pub fn cli(name: &str) -> PathBuf {
    let dir = std::env::var_os("E2E_NODE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("node/node_modules/.bin"));
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} not found: run scripts/test.sh (it installs the pinned CLIs into tests/node) or set E2E_NODE_BIN",
        path.display()
    );
    path
}

/// Runs the CLI `name` with `args` in `cwd`, with only `envs` (and
/// `PATH`) in its environment, killing it after `timeout`.
pub fn run(
    name: &str,
    args: &[&str],
    cwd: &Path,
    envs: &[(&str, &str)],
    timeout: Duration,
) -> ScriptRun {
    let mut cmd = Command::new(cli(name));
    cmd.args(args).current_dir(cwd).env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_with_deadline(&mut cmd, timeout)
}
