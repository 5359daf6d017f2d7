//! A private `redis-server` for the scenarios that share limits through
//! Redis, and the two things loadgen asks it: what it ran (`INFO
//! commandstats`) and to forget everything between runs.

use crate::command_stats::CommandStats;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` on a free loopback port, without persistence; killed on
/// drop.
pub struct RedisProcess {
    child: Child,
    port: u16,
}

impl RedisProcess {
    /// Starts the server and waits until it answers PING.
    pub fn start() -> Result<RedisProcess, String> {
        let port = free_port()?;
        let child = spawn(port)?;
        let redis = RedisProcess { child, port };
        redis.wait_ready()?;
        Ok(redis)
    }

    /// Kills the server (as a crash would: everything in it is lost) and
    /// starts it again, empty, on the same port.
    pub fn restart(&mut self) -> Result<(), String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(self.port)?;
        self.wait_ready()
    }

    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.command(&["PING"]).is_err() {
            if Instant::now() > deadline {
                return Err("redis-server did not answer PING within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The server's process id, for its CPU time.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// What the server ran so far (`INFO commandstats`).
    pub fn command_stats(&self) -> Result<CommandStats, String> {
        Ok(CommandStats::parse(
            &self.command(&["INFO", "commandstats"])?,
        ))
    }

    /// Bytes the server holds (`used_memory` of `INFO memory`).
    pub fn used_memory(&self) -> Result<u64, String> {
        used_memory_in(&self.command(&["INFO", "memory"])?)
    }

    /// Empties the database and the command statistics.
    pub fn reset(&self) -> Result<(), String> {
        self.command(&["FLUSHALL"])?;
        self.command(&["CONFIG", "RESETSTAT"])?;
        Ok(())
    }

    /// Sends one command and returns the reply's text.
    fn command(&self, args: &[&str]) -> Result<String, String> {
        command(self.port, args)
    }
}

/// A free loopback port.
pub(crate) fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// Sends one command to the server on loopback `port` and returns the
/// reply's text (a bulk string's contents, or the status line).
pub(crate) fn command(port: u16, args: &[&str]) -> Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut out = format!("*{}\r\n", args.len());
    for a in args {
        out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(out.as_bytes()).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| e.to_string())?;
    match line.as_bytes().first() {
        Some(b'$') => {
            let n: usize = line[1..]
                .trim()
                .parse()
                .map_err(|_| format!("bad reply {line:?}"))?;
            let mut buf = vec![0; n + 2];
            reader.read_exact(&mut buf).map_err(|e| e.to_string())?;
            buf.truncate(n);
            Ok(String::from_utf8_lossy(&buf).into())
        }
        Some(b'-') => Err(line.trim().to_string()),
        _ => Ok(line.trim().to_string()),
    }
}

/// `redis-server` on `port`, without persistence (with `extra` arguments).
pub(crate) fn spawn_with(port: u16, extra: &[&str]) -> Result<Child, String> {
    Command::new("redis-server")
        .args(extra)
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server (install redis-server): {e}"))
}

fn spawn(port: u16) -> Result<Child, String> {
    spawn_with(port, &[])
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `used_memory` of an `INFO memory` reply.
pub(crate) fn used_memory_in(info: &str) -> Result<u64, String> {
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "INFO memory has no used_memory".to_string())
}
