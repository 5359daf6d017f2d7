//! Where the scenarios that share counters through Redis put them: one
//! private `redis-server` ([`RedisProcess`]) or a private three-master
//! Redis Cluster ([`ClusterProcess`]), configured on the gateway the way
//! LiteLLM configures each (`REDIS_URL`, `REDIS_CLUSTER_NODES`).

use crate::command_stats::CommandStats;
use crate::redis_proc::{self, RedisProcess};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// Which kind of Redis a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisKind {
    /// One `redis-server`.
    Single,
    /// A three-master Redis Cluster.
    Cluster,
}

impl RedisKind {
    /// Parses `single` or `cluster`.
    pub fn parse(s: &str) -> Result<RedisKind, String> {
        match s.trim() {
            "single" => Ok(RedisKind::Single),
            "cluster" => Ok(RedisKind::Cluster),
            other => Err(format!("--redis: {other:?} is not single or cluster")),
        }
    }

    /// `single` or `cluster`, for reports.
    pub fn name(self) -> &'static str {
        match self {
            RedisKind::Single => "single",
            RedisKind::Cluster => "cluster",
        }
    }
}

/// A private Redis of either kind; stopped on drop.
pub enum RedisTarget {
    /// One server.
    Single(RedisProcess),
    /// A Cluster.
    Cluster(ClusterProcess),
}

impl RedisTarget {
    /// Starts a Redis of `kind`.
    pub fn start(kind: RedisKind) -> Result<RedisTarget, String> {
        Ok(match kind {
            RedisKind::Single => RedisTarget::Single(RedisProcess::start()?),
            RedisKind::Cluster => RedisTarget::Cluster(ClusterProcess::start()?),
        })
    }

    /// The gateway's environment variable naming it, and its value.
    pub fn env(&self) -> (String, String) {
        match self {
            RedisTarget::Single(r) => ("REDIS_URL".into(), r.url()),
            RedisTarget::Cluster(c) => ("REDIS_CLUSTER_NODES".into(), c.nodes_json()),
        }
    }

    /// Scripts run so far, over every master.
    pub fn script_calls(&self) -> Result<u64, String> {
        Ok(self.command_stats()?.scripts().calls)
    }

    /// What every master ran so far (`INFO commandstats`), summed.
    pub fn command_stats(&self) -> Result<CommandStats, String> {
        match self {
            RedisTarget::Single(r) => r.command_stats(),
            RedisTarget::Cluster(c) => c.command_stats(),
        }
    }

    /// Empties every master and its command statistics.
    pub fn reset(&self) -> Result<(), String> {
        match self {
            RedisTarget::Single(r) => r.reset(),
            RedisTarget::Cluster(c) => c.reset(),
        }
    }

    /// The process id of every server (one, or each master), for their CPU
    /// time.
    pub fn pids(&self) -> Vec<u32> {
        match self {
            RedisTarget::Single(r) => vec![r.pid()],
            RedisTarget::Cluster(c) => c.masters.iter().map(|(_, child)| child.id()).collect(),
        }
    }

    /// Bytes held, summed over every server.
    pub fn used_memory(&self) -> Result<u64, String> {
        match self {
            RedisTarget::Single(r) => r.used_memory(),
            RedisTarget::Cluster(c) => {
                let mut total = 0u64;
                for (port, _) in &c.masters {
                    let info = redis_proc::command(*port, &["INFO", "memory"])?;
                    total = total.saturating_add(redis_proc::used_memory_in(&info)?);
                }
                Ok(total)
            }
        }
    }
}

/// Three `redis-server` masters joined into a Cluster covering every slot
/// (`redis-cli --cluster create`), without persistence; killed on drop.
pub struct ClusterProcess {
    masters: Vec<(u16, Child)>,
    dir: PathBuf,
}

impl ClusterProcess {
    /// Starts the masters, joins them and waits until every one reports
    /// `cluster_state:ok`.
    pub fn start() -> Result<ClusterProcess, String> {
        let dir = std::env::temp_dir().join(format!(
            "loadgen-cluster-{}-{}",
            std::process::id(),
            redis_proc::free_port()?
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut cluster = ClusterProcess {
            masters: Vec::with_capacity(3),
            dir,
        };
        for _ in 0..3 {
            let port = redis_proc::free_port()?;
            let conf = format!("nodes-{port}.conf");
            let dir = cluster.dir.to_str().ok_or("temp dir is not UTF-8")?;
            let child = redis_proc::spawn_with(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &conf,
                    "--cluster-node-timeout",
                    "1000",
                    "--dir",
                    dir,
                ],
            )?;
            cluster.masters.push((port, child));
        }
        for (port, _) in &cluster.masters {
            wait(*port, |info| !info.is_empty(), &["PING"])?;
        }
        let addrs: Vec<String> = cluster
            .masters
            .iter()
            .map(|(p, _)| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .map_err(|e| format!("cannot run redis-cli (install redis-tools): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        for (port, _) in &cluster.masters {
            wait(
                *port,
                |info| info.contains("cluster_state:ok"),
                &["CLUSTER", "INFO"],
            )?;
        }
        Ok(cluster)
    }

    /// `[{"host", "port"}, ...]`, as `REDIS_CLUSTER_NODES` takes it.
    pub fn nodes_json(&self) -> String {
        let nodes: Vec<serde_json::Value> = self
            .masters
            .iter()
            .map(|(p, _)| serde_json::json!({"host": "127.0.0.1", "port": p}))
            .collect();
        serde_json::Value::Array(nodes).to_string()
    }

    /// What the masters ran so far (`INFO commandstats`), summed.
    pub fn command_stats(&self) -> Result<CommandStats, String> {
        let mut total = CommandStats::default();
        for (port, _) in &self.masters {
            let info = redis_proc::command(*port, &["INFO", "commandstats"])?;
            total.add(&CommandStats::parse(&info));
        }
        Ok(total)
    }

    /// Empties every master and its command statistics.
    pub fn reset(&self) -> Result<(), String> {
        for (port, _) in &self.masters {
            redis_proc::command(*port, &["FLUSHALL"])?;
            redis_proc::command(*port, &["CONFIG", "RESETSTAT"])?;
        }
        Ok(())
    }
}

/// Waits up to 10 s until `command` on `port` answers text `ready` accepts.
fn wait(port: u16, ready: impl Fn(&str) -> bool, command: &[&str]) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if redis_proc::command(port, command).is_ok_and(|t| ready(&t)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "redis-server on {port}: {command:?} not ready within 10 s"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for ClusterProcess {
    fn drop(&mut self) {
        for (_, child) in &mut self.masters {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse() {
        assert_eq!(RedisKind::parse("cluster"), Ok(RedisKind::Cluster));
        assert_eq!(RedisKind::parse(" single"), Ok(RedisKind::Single));
        assert!(RedisKind::parse("sentinel").is_err());
        assert_eq!(RedisKind::Cluster.name(), "cluster");
    }
}
