//! A private Redis Cluster: three masters (no replicas) on free ports, each
//! in a temporary directory with an append-only file synced on every write,
//! so a master killed and started again comes back with its slots and its
//! counters. Built with `redis-cli --cluster create`; killed on drop.

use crate::procs::free_port_for_server;
use crate::redis::{read_reply, window_total_of, Reply};
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One master: its ports and process.
struct Node {
    port: u16,
    bus: u16,
    dir: tempfile::TempDir,
    child: Mutex<Option<Child>>,
}

impl Node {
    /// A node not started yet, on ports found free and an empty directory.
    fn on_free_ports() -> Node {
        Node {
            port: free_port_for_server(),
            bus: free_port_for_server(),
            dir: tempfile::tempdir().expect("temp dir"),
            child: Mutex::new(None),
        }
    }
}

/// A three-master Redis Cluster of the test's own.
pub struct PrivateCluster {
    nodes: Vec<Node>,
}

impl PrivateCluster {
    /// Starts three masters, joins them into a Cluster covering every slot
    /// and waits until every node reports `cluster_state:ok`.
    pub fn start() -> PrivateCluster {
        let nodes: Vec<Node> = (0..3).map(|_| Node::on_free_ports()).collect();
        let mut cluster = PrivateCluster { nodes };
        for i in 0..cluster.nodes.len() {
            // Another process may take a port between the check and the
            // bind: a node that exits at once starts again on other ports.
            let mut attempts = 0;
            while let Err(e) = cluster.try_spawn(i) {
                attempts += 1;
                assert!(attempts < 5, "redis-server {i} did not start: {e}");
                cluster.nodes[i] = Node::on_free_ports();
            }
        }
        let addrs: Vec<String> = cluster
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed (scripts/test.sh installs it)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cluster.wait_ok();
        cluster
    }

    fn spawn(&self, i: usize) {
        if let Err(e) = self.try_spawn(i) {
            panic!("redis-server {i} did not start: {e}");
        }
    }

    /// Starts node `i` and waits until it answers PING; an error when it
    /// exits first or does not answer within 10 s.
    fn try_spawn(&self, i: usize) -> Result<(), String> {
        let n = &self.nodes[i];
        let child = Command::new("redis-server")
            .args(["--port", &n.port.to_string()])
            .args(["--cluster-port", &n.bus.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-node-timeout", "1000"])
            // The other masters keep serving their slots while one is down.
            .args(["--cluster-require-full-coverage", "no"])
            .args(["--cluster-config-file", "nodes.conf"])
            .args(["--appendonly", "yes", "--appendfsync", "always"])
            .args(["--save", ""])
            .arg("--dir")
            .arg(n.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test.sh installs it)");
        *n.child.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.try_on(i, &["PING"]).is_err() {
            if let Some(Ok(Some(status))) = n.child.lock().unwrap().as_mut().map(Child::try_wait) {
                return Err(format!("exited with {status}"));
            }
            if Instant::now() >= deadline {
                return Err("no answer to PING within 10 s".to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Waits until every node answers and reports `cluster_state:ok`.
    pub fn wait_ok(&self) {
        crate::eventually(
            "the Cluster's state ok on every node",
            Duration::from_secs(20),
            || {
                (0..self.nodes.len())
                    .all(|i| {
                        matches!(self.try_on(i, &["CLUSTER", "INFO"]),
                        Ok(Reply::Bulk(Some(info))) if info.contains("cluster_state:ok"))
                    })
                    .then_some(())
            },
        );
    }

    /// `[{"host", "port"}, ...]`, as `REDIS_CLUSTER_NODES` takes it.
    pub fn nodes_json(&self) -> String {
        let nodes: Vec<serde_json::Value> = self
            .nodes
            .iter()
            .map(|n| serde_json::json!({"host": "127.0.0.1", "port": n.port}))
            .collect();
        serde_json::Value::Array(nodes).to_string()
    }

    /// Kills master `i` (SIGKILL): its connections drop.
    pub fn kill(&self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts master `i` again with its files: it rejoins with its slots
    /// and the counters it had written.
    pub fn restart(&self, i: usize) {
        self.kill(i);
        self.spawn(i);
    }

    /// The master serving `key`.
    pub fn node_of(&self, key: &str) -> usize {
        match self.try_on(0, &["EXISTS", key]) {
            Ok(Reply::Error(e)) if e.starts_with("MOVED") => self.index_of_redirect(&e),
            Ok(_) => 0,
            Err(e) => panic!("EXISTS {key}: {e}"),
        }
    }

    fn index_of_redirect(&self, error: &str) -> usize {
        let port: u16 = error
            .rsplit(':')
            .next()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("redirect {error:?}"));
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// Runs one command on the master serving its key (`args[1]`).
    pub fn command(&self, args: &[&str]) -> Reply {
        let i = self.node_of(args[1]);
        self.try_on(i, args)
            .unwrap_or_else(|e| panic!("redis {args:?}: {e}"))
    }

    /// Runs one command on master `i`.
    pub fn on(&self, i: usize, args: &[&str]) -> Reply {
        self.try_on(i, args)
            .unwrap_or_else(|e| panic!("redis {i} {args:?}: {e}"))
    }

    fn try_on(&self, i: usize, args: &[&str]) -> std::io::Result<Reply> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.nodes[i].port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.write_all(out.as_bytes())?;
        read_reply(&mut BufReader::new(stream))
    }

    /// Master `i`'s node id.
    pub fn id_of(&self, i: usize) -> String {
        match self.on(i, &["CLUSTER", "MYID"]) {
            Reply::Bulk(Some(id)) => id,
            other => panic!("CLUSTER MYID: {other:?}"),
        }
    }

    /// Hands the (empty) slot of `key` to master `to`, telling every
    /// master, as a resharding does; a client with the old map gets `MOVED`.
    pub fn move_slot_of(&self, key: &str, to: usize) {
        let slot = match self.on(0, &["CLUSTER", "KEYSLOT", key]) {
            Reply::Int(s) => s.to_string(),
            other => panic!("CLUSTER KEYSLOT: {other:?}"),
        };
        let id = self.id_of(to);
        self.on(to, &["CLUSTER", "SETSLOT", &slot, "NODE", &id]);
        for i in 0..self.nodes.len() {
            if i != to {
                self.on(i, &["CLUSTER", "SETSLOT", &slot, "NODE", &id]);
            }
        }
        crate::eventually(
            "every master agrees on the move",
            Duration::from_secs(10),
            || {
                (0..self.nodes.len())
                    .all(|i| self.node_of_from(i, key) == to)
                    .then_some(())
            },
        );
    }

    /// Starts moving the (empty) slot of `key` to master `to`: the owner
    /// marks it `MIGRATING`, `to` marks it `IMPORTING`, so the owner
    /// answers `ASK` for keys it does not hold. Returns the slot, for
    /// [`finish_migration`](Self::finish_migration).
    pub fn start_migration(&self, key: &str, to: usize) -> String {
        let slot = match self.on(0, &["CLUSTER", "KEYSLOT", key]) {
            Reply::Int(s) => s.to_string(),
            other => panic!("CLUSTER KEYSLOT: {other:?}"),
        };
        let from = self.node_of(key);
        let (from_id, to_id) = (self.id_of(from), self.id_of(to));
        self.on(to, &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
        self.on(from, &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
        slot
    }

    /// Ends a migration: every master hands `slot` to `to`.
    pub fn finish_migration(&self, slot: &str, to: usize) {
        let id = self.id_of(to);
        self.on(to, &["CLUSTER", "SETSLOT", slot, "NODE", &id]);
        for i in (0..self.nodes.len()).filter(|&i| i != to) {
            self.on(i, &["CLUSTER", "SETSLOT", slot, "NODE", &id]);
        }
    }

    fn node_of_from(&self, i: usize, key: &str) -> usize {
        match self.try_on(i, &["EXISTS", key]) {
            Ok(Reply::Error(e)) if e.starts_with("MOVED") => self.index_of_redirect(&e),
            _ => i,
        }
    }

    /// The sum of a rate-limit window counter (a hash of bucket to units).
    pub fn window_total(&self, key: &str) -> i64 {
        window_total_of(key, self.command(&["HGETALL", key]))
    }

    /// Parallel slots held on a counter.
    pub fn slots(&self, key: &str) -> i64 {
        match self.command(&["ZCARD", key]) {
            Reply::Int(n) => n,
            other => panic!("ZCARD {key}: {other:?}"),
        }
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
