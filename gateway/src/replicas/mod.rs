//! This replica among the fleet's: who it is (id, version, start time,
//! address, host, process) and which replicas are alive, for the console's
//! Health page (`GET /gateway/replicas`).
//!
//! With Redis, every replica heartbeats into it ([`heartbeat`], a service on
//! the control plane) and reads the others' heartbeats back; a replica whose
//! heartbeat lapses ([`heartbeat::TTL`]) is no longer listed. The list is a
//! snapshot swapped atomically after each beat, so reading it waits on
//! nothing. Without Redis the fleet is this replica alone.

pub mod heartbeat;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One replica as it announces itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replica {
    /// A random id drawn at start-up (also the one cooldown messages carry).
    pub id: String,
    /// The gateway's version.
    pub version: String,
    /// When the process started (RFC 3339, UTC).
    pub started_at: String,
    /// The address it listens on, as bound (`0.0.0.0:4000`).
    pub address: String,
    /// The host's name.
    pub hostname: String,
    /// The process id on that host.
    pub pid: u32,
    /// Request cores.
    pub workers: usize,
}

impl Replica {
    /// This process: a fresh id, listening on `address` with `workers` cores.
    pub fn this_process(address: String, workers: usize) -> Replica {
        Replica {
            id: uuid::Uuid::new_v4().simple().to_string(),
            version: crate::VERSION.to_string(),
            started_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            address,
            hostname: hostname(),
            pid: std::process::id(),
            workers,
        }
    }
}

/// The host's name (`gethostname`), empty when it cannot be read.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its whole length, which is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A replica seen alive, with when its last heartbeat was sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Who.
    #[serde(flatten)]
    pub replica: Replica,
    /// Its last heartbeat (RFC 3339, UTC, by its own clock).
    pub last_seen: String,
}

/// The fleet as the last heartbeat read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fleet {
    /// Every replica alive then, this one included.
    pub replicas: Vec<Seen>,
    /// When it was read (RFC 3339, UTC); `None` before the first read.
    pub as_of: Option<String>,
    /// Why the last heartbeat failed, when it did (the list is then the
    /// last one read).
    pub error: Option<String>,
}

/// This replica and the fleet it last saw.
#[derive(Debug)]
pub struct Replicas {
    me: Replica,
    shared: bool,
    fleet: ArcSwap<Fleet>,
}

impl Replicas {
    /// `me`, in a fleet that shares Redis when `shared`.
    pub fn new(me: Replica, shared: bool) -> Replicas {
        Replicas {
            me,
            shared,
            fleet: ArcSwap::from_pointee(Fleet::default()),
        }
    }

    /// This replica.
    pub fn me(&self) -> &Replica {
        &self.me
    }

    /// Whether replicas find each other through Redis.
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// The fleet to show: without Redis, or before the first heartbeat
    /// read it, this replica alone.
    pub fn fleet(&self) -> Fleet {
        let fleet = self.fleet.load_full();
        let mut out = (*fleet).clone();
        if !out.replicas.iter().any(|s| s.replica.id == self.me.id) {
            out.replicas.push(Seen {
                replica: self.me.clone(),
                last_seen: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            });
        }
        out.replicas.sort_by(|a, b| {
            (&a.replica.hostname, &a.replica.address, &a.replica.id).cmp(&(
                &b.replica.hostname,
                &b.replica.address,
                &b.replica.id,
            ))
        });
        out
    }

    /// Records a heartbeat's reading of the fleet.
    pub fn saw(&self, replicas: Vec<Seen>, as_of: String) {
        self.fleet.store(Arc::new(Fleet {
            replicas,
            as_of: Some(as_of),
            error: None,
        }));
    }

    /// Records a failed heartbeat: the last list stays, with `error`.
    pub fn failed(&self, error: String) {
        let last = self.fleet.load_full();
        self.fleet.store(Arc::new(Fleet {
            error: Some(error),
            ..(*last).clone()
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(id: &str, host: &str) -> Replica {
        Replica {
            id: id.into(),
            hostname: host.into(),
            ..Replica::this_process("0.0.0.0:4000".into(), 2)
        }
    }

    #[test]
    fn this_process_names_itself() {
        let me = Replica::this_process("127.0.0.1:4000".into(), 3);
        assert_eq!(me.id.len(), 32);
        assert_eq!(me.version, crate::VERSION);
        assert_eq!(me.pid, std::process::id());
        assert!(chrono::DateTime::parse_from_rfc3339(&me.started_at).is_ok());
    }

    /// Alone until a heartbeat reads the fleet; then the fleet, sorted,
    /// itself included once; a failed beat keeps the list with its error.
    #[test]
    fn the_fleet_is_this_replica_until_a_heartbeat_reads_it() {
        let me = replica("me", "b-host");
        let replicas = Replicas::new(me.clone(), true);
        let alone = replicas.fleet();
        assert_eq!(alone.replicas.len(), 1);
        assert_eq!(alone.replicas[0].replica, me);
        assert_eq!(alone.as_of, None);

        let seen = |r: &Replica| Seen {
            replica: r.clone(),
            last_seen: "2026-01-01T00:00:00Z".into(),
        };
        let other = replica("other", "a-host");
        replicas.saw(vec![seen(&me), seen(&other)], "t1".into());
        let fleet = replicas.fleet();
        let ids: Vec<&str> = fleet
            .replicas
            .iter()
            .map(|s| s.replica.id.as_str())
            .collect();
        assert_eq!(ids, ["other", "me"]);
        assert_eq!(fleet.as_of.as_deref(), Some("t1"));

        replicas.failed("redis did not answer".into());
        let fleet = replicas.fleet();
        assert_eq!(fleet.replicas.len(), 2);
        assert_eq!(fleet.error.as_deref(), Some("redis did not answer"));
        assert_eq!(fleet.as_of.as_deref(), Some("t1"));
        replicas.saw(vec![seen(&me)], "t2".into());
        assert_eq!(replicas.fleet().error, None);
    }
}
