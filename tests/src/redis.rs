//! A Redis server of the test's own (`redis-server` on a free port, no
//! persistence), which a test can stop and start again to play an outage,
//! and a tiny RESP client to read the limiter's counters.

use crate::procs::free_port_for_server;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A private `redis-server`; killed on drop.
pub struct PrivateRedis {
    port: u16,
    /// With TLS: its port and the server's certificate and key files.
    tls: Option<(u16, String, String)>,
    child: Mutex<Option<Child>>,
}

impl PrivateRedis {
    /// Starts the server and waits until it answers PING; panics if
    /// `redis-server` is missing (scripts/test.sh installs it).
    pub fn start() -> PrivateRedis {
        Self::start_on_free_ports(|| None)
    }

    /// [`start`](PrivateRedis::start) with a TLS port besides the plain
    /// one (which the test's own checks use), serving the PEM certificate
    /// chain and key at the given paths; clients need no certificate.
    pub fn start_tls(cert: &str, key: &str) -> PrivateRedis {
        Self::start_on_free_ports(|| {
            Some((free_port_for_server(), cert.to_string(), key.to_string()))
        })
    }

    /// Starts on ports found free; another process may take a port between
    /// the check and the server's bind, so a server that exits at once is
    /// started again on other ports (a few times).
    fn start_on_free_ports(tls: impl Fn() -> Option<(u16, String, String)>) -> PrivateRedis {
        let mut last_error = String::new();
        for _ in 0..5 {
            let r = PrivateRedis {
                port: free_port_for_server(),
                tls: tls(),
                child: Mutex::new(None),
            };
            match r.try_restart() {
                Ok(()) => return r,
                Err(e) => last_error = e,
            }
        }
        panic!("private redis-server did not start: {last_error}");
    }

    /// `rediss://localhost:<tls port>` (started with [`start_tls`]).
    ///
    /// [`start_tls`]: PrivateRedis::start_tls
    pub fn tls_url(&self) -> String {
        let (port, _, _) = self.tls.as_ref().expect("started with TLS");
        format!("rediss://localhost:{port}")
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server at once (connections drop, new ones are refused).
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open and the kernel
    /// still accepts new ones, but nothing answers until
    /// [`thaw`](PrivateRedis::thaw).
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Resumes a frozen server.
    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(child) = self.child.lock().unwrap().as_ref() {
            let pid = libc::pid_t::try_from(child.id()).expect("pid fits pid_t");
            crate::procs::signal_pid(pid, sig);
        }
    }

    /// Starts the server (again) on the same port, empty.
    pub fn restart(&self) {
        if let Err(e) = self.try_restart() {
            panic!("private redis-server did not start: {e}");
        }
    }

    /// Starts the server and waits until it answers PING; the server's own
    /// output when it exits first, or a timeout.
    fn try_restart(&self) -> Result<(), String> {
        self.stop();
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]);
        if let Some((port, cert, key)) = &self.tls {
            cmd.args(["--tls-port", &port.to_string()])
                .args(["--tls-cert-file", cert, "--tls-key-file", key])
                .args(["--tls-auth-clients", "no"]);
        }
        let log = std::fs::File::create(self.log_path()).map_err(|e| format!("log file: {e}"))?;
        let child = cmd
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test.sh installs it)");
        *self.child.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.try_command(&["PING"]).is_err() {
            if let Some(output) = self.output_if_exited() {
                return Err(output);
            }
            if Instant::now() >= deadline {
                return Err("no answer to PING within 10 s".to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Where the server writes its log (a file, so that a chatty server
    /// never blocks on a full pipe).
    fn log_path(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!(
            "e2e-redis-{}-{}.log",
            std::process::id(),
            self.port
        ))
    }

    /// The server's log, when it has exited.
    fn output_if_exited(&self) -> Option<String> {
        let mut guard = self.child.lock().unwrap();
        let child = guard.as_mut()?;
        let status = child.try_wait().ok()??;
        *guard = None;
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        Some(format!("exited with {status}: {}", log.trim()))
    }

    /// Runs one command; panics on a connection error.
    pub fn command(&self, args: &[&str]) -> Reply {
        self.try_command(args)
            .unwrap_or_else(|e| panic!("redis {args:?}: {e}"))
    }

    fn try_command(&self, args: &[&str]) -> std::io::Result<Reply> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.try_command_bytes(&args)
    }

    /// [`command`](PrivateRedis::command) with arguments of any bytes (a
    /// script's packed numbers).
    pub fn command_bytes(&self, args: &[&[u8]]) -> Reply {
        self.try_command_bytes(args)
            .unwrap_or_else(|e| panic!("redis {} arguments: {e}", args.len()))
    }

    fn try_command_bytes(&self, args: &[&[u8]]) -> std::io::Result<Reply> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        stream.write_all(&out)?;
        read_reply(&mut BufReader::new(stream))
    }

    /// The sum of a rate-limit window counter (`{scope:value}:tokens` or
    /// `:requests`, a hash of bucket to units); see [`window_total_of`].
    pub fn window_total(&self, key: &str) -> i64 {
        window_total_of(key, self.command(&["HGETALL", key]))
    }

    /// Parallel slots held on a counter (`{scope:value}:parallel`).
    pub fn slots(&self, key: &str) -> i64 {
        match self.command(&["ZCARD", key]) {
            Reply::Int(n) => n,
            other => panic!("ZCARD {key}: {other:?}"),
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(self.log_path());
    }
}

/// The units of a window counter's buckets, from its `HGETALL` reply. The
/// fields named by negative numbers are the limiter's bookkeeping; when
/// present, its running sum (`-1`) must equal the buckets' sum, so every test
/// that reads a counter also checks that the sum has not drifted.
pub fn window_total_of(key: &str, reply: Reply) -> i64 {
    let Reply::Array(items) = reply else {
        panic!("HGETALL {key}: {reply:?}");
    };
    let number = |r: &Reply| match r {
        Reply::Bulk(Some(s)) => s.parse::<i64>().unwrap_or_else(|_| panic!("{key}: {s}")),
        other => panic!("HGETALL {key}: {other:?}"),
    };
    let mut buckets = 0;
    let mut sum = None;
    for pair in items.chunks(2) {
        let field = number(&pair[0]);
        match field {
            -1 => sum = Some(number(&pair[1])),
            f if f < 0 => {}
            _ => buckets += number(&pair[1]),
        }
    }
    if let Some(sum) = sum {
        assert_eq!(
            sum, buckets,
            "{key}: the running sum differs from its buckets"
        );
    }
    buckets
}

/// A RESP reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+OK`.
    Status(String),
    /// `-ERR ...`.
    Error(String),
    /// `:n`.
    Int(i64),
    /// `$n ...` (None: nil).
    Bulk(Option<String>),
    /// `*n ...`.
    Array(Vec<Reply>),
}

pub(crate) fn read_reply(r: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let line = line.trim_end();
    let (tag, rest) = line.split_at(1.min(line.len()));
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("bad RESP line {line:?}"),
        )
    };
    Ok(match tag {
        "+" => Reply::Status(rest.into()),
        "-" => Reply::Error(rest.into()),
        ":" => Reply::Int(rest.parse().map_err(|_| bad())?),
        "$" => {
            let n: i64 = rest.parse().map_err(|_| bad())?;
            if n < 0 {
                Reply::Bulk(None)
            } else {
                let mut buf = vec![0; n as usize + 2];
                r.read_exact(&mut buf)?;
                buf.truncate(n as usize);
                Reply::Bulk(Some(String::from_utf8_lossy(&buf).into()))
            }
        }
        "*" => {
            let n: i64 = rest.parse().map_err(|_| bad())?;
            let mut items = Vec::new();
            for _ in 0..n.max(0) {
                items.push(read_reply(r)?);
            }
            Reply::Array(items)
        }
        _ => return Err(bad()),
    })
}
