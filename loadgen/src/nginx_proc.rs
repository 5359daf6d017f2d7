//! nginx as a plain reverse proxy to the mock: the floor any HTTP/1.1
//! proxy pays on this machine for two loopback sockets per request, measured
//! beside the gateway with the same worker count, pinning and keep-alive to
//! the upstream.

use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::affinity::CpuSet;
use crate::procfs;

/// How long nginx may take to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where Debian installs it.
const NGINX_BIN: &str = "/usr/sbin/nginx";

/// A running nginx master with its workers.
pub struct NginxProcess {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

/// The nginx binary, if installed.
pub fn binary() -> Option<PathBuf> {
    let bin = Path::new(NGINX_BIN);
    bin.is_file().then(|| bin.to_path_buf())
}

impl NginxProcess {
    /// Starts nginx with `workers` worker processes proxying every request
    /// to `upstream` over kept-alive connections, pinned to `cpus` if given.
    pub fn start(
        workers: usize,
        upstream: SocketAddr,
        cpus: Option<CpuSet>,
    ) -> Result<NginxProcess, String> {
        let bin = binary().ok_or_else(|| {
            format!("{NGINX_BIN} not found: install Debian's nginx package (scripts/bench.sh does)")
        })?;
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("loadgen-nginx-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = crate::gateway_proc::free_port()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(workers, upstream, addr, &dir))
            .map_err(|e| format!("{}: {e}", conf.display()))?;
        let log = std::fs::File::create(dir.join("nginx.log"))
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut cmd = Command::new(bin);
        cmd.arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        if let Some(cpus) = cpus {
            // SAFETY: the closure makes one async-signal-safe system call.
            unsafe {
                cmd.pre_exec(move || cpus.apply_to_current_thread());
            }
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start nginx: {e}"))?;
        let mut nginx = NginxProcess { child, addr, dir };
        nginx.wait_ready()?;
        Ok(nginx)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// CPU time of the master and every worker so far.
    pub fn cpu_time(&self) -> Result<Duration, String> {
        let master = self.child.id();
        let mut total = procfs::cpu_time(master)?;
        for pid in children(master) {
            // A worker that just exited has nothing more to count.
            total += procfs::cpu_time(pid).unwrap_or_default();
        }
        Ok(total)
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join("nginx.log")).unwrap_or_default();
                return Err(format!("nginx exited during start-up ({status}): {log}"));
            }
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(100)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("nginx did not listen within {STARTUP_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NginxProcess {
    fn drop(&mut self) {
        // SIGTERM lets the master take its workers down with it.
        // SAFETY: kill(2) on our own child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Child processes of `pid`, from `/proc/<pid>/task/*/children`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The configuration: no access log, HTTP/1.1 keep-alive to the upstream,
/// no buffering (so streams pass as they come), one listener per worker.
fn config(workers: usize, upstream: SocketAddr, listen: SocketAddr, dir: &Path) -> String {
    let dir = dir.display();
    format!(
        "worker_processes {workers};
daemon off;
master_process on;
pid {dir}/nginx.pid;
error_log stderr warn;
worker_rlimit_nofile 65536;
events {{ worker_connections 16384; multi_accept on; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    client_max_body_size 64m;
    client_body_buffer_size 1m;
    keepalive_requests 1000000;
    upstream mock {{ server {upstream}; keepalive 1024; keepalive_requests 1000000; }}
    server {{
        listen {listen} reuseport;
        location / {{
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_buffering off;
            proxy_request_buffering off;
        }}
    }}
}}
"
    )
}
