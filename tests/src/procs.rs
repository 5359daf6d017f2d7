//! Child processes: the mock upstream (`loadgen mock`) and the gateway.

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use crate::config::{to_yaml, MASTER_KEY};
use crate::http::{request, Conn, Response};

/// How long a child gets to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The directory holding the workspace binaries: `E2E_BIN_DIR` if set, else
/// `target/<profile>/`, found from the test executable in `target/<profile>/deps/`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("E2E_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe
        .parent()
        .expect("test executable has a parent")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// The path of workspace binary `name`; panics if it has not been built.
pub fn bin_path(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "binary `{name}` not found at {}: run `cargo build --workspace --bins` first \
         (scripts/test.sh does), with the same profile and target dir as the tests",
        path.display()
    );
    path
}

/// A port that was free a moment ago (bound to 127.0.0.1:0, then released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// A free port below the kernel's ephemeral range (32768 and up), for a
/// server a test starts and that must get the port it was told: a port from
/// [`free_port`] is in that range, where the thousands of client sockets
/// other tests open at the same time can take it before the server binds.
pub fn free_port_for_server() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    // Spread over the range: tests in other processes pick too.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let seed = (std::process::id() ^ nanos).wrapping_mul(2_654_435_761);
    for i in 0..12_000u32 {
        let offset = seed
            .wrapping_add(NEXT.fetch_add(7_919, Ordering::Relaxed))
            .wrapping_add(i);
        let port = 20_000 + (offset % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000");
}

fn read_file(path: &Path) -> String {
    fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

fn stop(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
    }
    let _ = child.wait();
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` to `pid`, ignoring a process that is already gone.
pub(crate) fn signal_pid(pid: libc::pid_t, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// The processes whose parent is `parent` (read from `/proc/*/stat`).
pub(crate) fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<libc::pid_t>().ok())
        .filter(|pid| {
            // `pid (comm) state ppid ...`; comm may hold spaces and parens.
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<libc::pid_t>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// The mock LLM provider (`loadgen mock`), killed on drop.
pub struct MockServer {
    child: Child,
    port: u16,
    _dir: TempDir,
    stderr_path: PathBuf,
}

impl MockServer {
    /// Starts `loadgen mock --host 127.0.0.1 --port 0 --workers 1 [args]` and
    /// waits for its `mock listening on 127.0.0.1:PORT` line.
    pub fn start(args: &[&str]) -> MockServer {
        let dir = tempfile::tempdir().expect("temp dir");
        let stderr_path = dir.path().join("mock.stderr");
        let mut child = Command::new(bin_path("loadgen"))
            .args([
                "mock",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--workers",
                "1",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&stderr_path).expect("create mock stderr file"))
            .spawn()
            .expect("spawn loadgen mock");
        let stdout = child.stdout.take().expect("mock stdout");
        let (tx, rx) = mpsc::channel();
        // Keeps draining stdout after the line so the mock never blocks on it.
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.trim().strip_prefix("mock listening on ") {
                    let _ = tx.send(addr.to_string());
                }
            }
        });
        let addr = match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => addr,
            Err(e) => {
                stop(&mut child);
                panic!(
                    "loadgen mock did not print `mock listening on ...` ({e:?}); stderr:\n{}",
                    read_file(&stderr_path)
                );
            }
        };
        let port = addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("bad mock address {addr:?}"));
        MockServer {
            child,
            port,
            _dir: dir,
            stderr_path,
        }
    }

    /// The port the mock listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>/v1`.
    pub fn api_base(&self) -> String {
        crate::config::mock_api_base(self.port)
    }

    /// `GET /_stats` from the mock, as JSON.
    pub fn stats(&self) -> Value {
        let mut conn = Conn::connect(self.port);
        conn.roundtrip(&request("GET", "/_stats", &[], b""))
            .expect_status(200)
            .json()
    }

    /// What the mock wrote to stderr so far.
    pub fn stderr(&self) -> String {
        read_file(&self.stderr_path)
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// A gateway process on 127.0.0.1 with a config in a temp dir, killed on drop.
pub struct Gateway {
    child: Child,
    port: u16,
    dir: TempDir,
    config_path: PathBuf,
}

impl Gateway {
    /// Writes `config_yaml`, starts the gateway on a free port with 2 workers
    /// and the extra environment `envs`, and waits until it accepts TCP
    /// connections. Panics (with the gateway's output) if it exits or is not
    /// up within 20 s.
    pub fn start(config_yaml: &str, envs: &[(&str, &str)]) -> Gateway {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut gw = Gateway::spawn(config_yaml, envs, free_port(), &[]);
            match gw.wait_ready(START_TIMEOUT) {
                Ok(()) => return gw,
                // The free port may have been taken by another test meanwhile.
                Err(out) if attempt < 3 && out.to_ascii_lowercase().contains("in use") => {}
                Err(out) => panic!("gateway did not start:\n{out}"),
            }
        }
    }

    /// [`Gateway::start`] with a config given as JSON (written as YAML).
    pub fn start_json(config: &Value, envs: &[(&str, &str)]) -> Gateway {
        Gateway::start(&to_yaml(config), envs)
    }

    /// Writes `config_yaml` and spawns `gateway --config <file> --host
    /// 127.0.0.1 --port <port> --workers 2 [extra_args]` without waiting.
    pub fn spawn(
        config_yaml: &str,
        envs: &[(&str, &str)],
        port: u16,
        extra_args: &[&str],
    ) -> Gateway {
        let dir = tempfile::tempdir().expect("temp dir");
        let config_path = dir.path().join("config.yaml");
        fs::write(&config_path, config_yaml).expect("write config");
        let stdout = File::create(dir.path().join("gateway.stdout")).expect("stdout file");
        let stderr = File::create(dir.path().join("gateway.stderr")).expect("stderr file");
        let mut cmd = Command::new(bin_path("gateway"));
        cmd.arg("--config")
            .arg(&config_path)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--workers", "2"])
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn gateway");
        Gateway {
            child,
            port,
            dir,
            config_path,
        }
    }

    /// Waits until the gateway accepts a TCP connection and answers an HTTP
    /// request on it (`GET /health/liveliness`, any status): a bare connect
    /// can land on a socket that is closed again during start-up. On failure
    /// returns a description with the gateway's output.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let probe = request("GET", "/health/liveliness", &[("Connection", "close")], b"");
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("gateway exited with {status}\n{}", self.output()));
            }
            if let Ok(mut conn) = Conn::try_connect(self.port) {
                conn.set_read_timeout(Duration::from_secs(2));
                if conn.try_send(&probe).is_ok() && conn.try_read_response().is_ok() {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                stop(&mut self.child);
                return Err(format!(
                    "gateway not accepting on port {} after {timeout:?}\n{}",
                    self.port,
                    self.output()
                ));
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_exit(&mut self.child, timeout)
    }

    /// The gateway's stdout and stderr so far.
    pub fn output(&self) -> String {
        format!(
            "--- gateway stdout ---\n{}\n--- gateway stderr ---\n{}",
            read_file(&self.dir.path().join("gateway.stdout")),
            read_file(&self.dir.path().join("gateway.stderr"))
        )
    }

    /// The process id, for signals.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends signal `sig` (e.g. `libc::SIGTERM`) to the gateway.
    pub fn signal(&self, sig: libc::c_int) {
        let pid = libc::pid_t::try_from(self.pid()).expect("pid fits pid_t");
        // SAFETY: kill(2) has no memory-safety preconditions.
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(rc, 0, "kill({pid}, {sig}) failed");
    }

    /// The port the gateway was started on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The path of the config file it was started with.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// A new raw connection to the gateway.
    pub fn connect(&self) -> Conn {
        Conn::connect(self.port)
    }

    /// Sends one request on a new connection and reads the response; panics
    /// with the gateway's output if that fails.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let mut conn = self.connect();
        conn.send(&request(method, path, headers, body));
        conn.try_read_response().unwrap_or_else(|e| {
            panic!(
                "{method} {path}: no response from the gateway: {e}\n{}",
                self.output()
            )
        })
    }

    /// `GET path` with the master key.
    pub fn get(&self, path: &str) -> Response {
        let auth = format!("Bearer {MASTER_KEY}");
        self.call("GET", path, &[("Authorization", &auth)], b"")
    }

    /// `POST path` with a JSON body and the master key.
    pub fn post(&self, path: &str, body: &Value) -> Response {
        self.post_as(MASTER_KEY, path, body)
    }

    /// `POST path` with a JSON body and `key` as the bearer.
    pub fn post_as(&self, key: &str, path: &str, body: &Value) -> Response {
        let auth = format!("Bearer {key}");
        self.call(
            "POST",
            path,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.to_string().as_bytes(),
        )
    }

    /// The spend-log row of `request_id` (a call id or an answer's id),
    /// once the writer has it (up to 5 s).
    pub fn spend_row(&self, request_id: &str) -> Value {
        crate::eventually("the spend row", Duration::from_secs(5), || {
            let rows = self
                .get(&format!("/spend/logs?request_id={request_id}"))
                .json();
            rows.as_array().and_then(|r| r.first().cloned())
        })
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}
