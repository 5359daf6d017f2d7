//! The CPU that one database's work costs Postgres, read from `/proc`: the
//! backends connected to that database and the cluster's shared processes
//! (the postmaster, WAL writer, checkpointer, background writer, autovacuum)
//! that its writes keep busy. Other databases' backends are left out; the
//! shared processes also work for anything else on the same cluster, so a
//! figure taken while other clients write is an upper bound.

use std::collections::HashMap;
use std::time::Duration;

use crate::procfs;

/// Processes of the cluster every database's writes use.
const SHARED: [&str; 8] = [
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum launcher",
    "logical replication launcher",
    "walsummarizer",
    "archiver",
    "stats collector",
];

/// Finds the Postgres processes that serve one database.
#[derive(Debug, Clone)]
pub struct PostgresProcs {
    database: String,
}

/// CPU time used so far by each process counted, by pid.
#[derive(Debug, Clone, Default)]
pub struct CpuSnapshot(HashMap<u32, Duration>);

impl PostgresProcs {
    /// The processes serving the database named in `url`
    /// (`postgres://user@host:port/<database>?...`).
    pub fn for_url(url: &str) -> Result<PostgresProcs, String> {
        let database = database_of(url).ok_or_else(|| format!("no database name in {url}"))?;
        Ok(PostgresProcs {
            database: database.to_string(),
        })
    }

    /// The CPU time of every process counted, now.
    pub fn snapshot(&self) -> Result<CpuSnapshot, String> {
        let dir = std::fs::read_dir("/proc").map_err(|e| format!("/proc: {e}"))?;
        let mut cpu = HashMap::new();
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim_end() != "postgres" {
                continue;
            }
            let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let title = String::from_utf8_lossy(&raw).replace('\0', " ");
            if !counts(&title, &self.database) {
                continue;
            }
            // A process that ended between the listing and this read
            // used nothing more; skip it.
            if let Ok(used) = procfs::cpu_time(pid) {
                cpu.insert(pid, used);
            }
        }
        Ok(CpuSnapshot(cpu))
    }
}

impl CpuSnapshot {
    /// CPU used between `earlier` and this snapshot: the growth of every
    /// process in both, and all of a process that started in between.
    /// (A backend that ended in between is not counted: the gateway keeps
    /// its connections open.)
    pub fn used_since(&self, earlier: &CpuSnapshot) -> Duration {
        self.0
            .iter()
            .map(|(pid, now)| {
                earlier
                    .0
                    .get(pid)
                    .map_or(*now, |before| now.saturating_sub(*before))
            })
            .sum()
    }
}

/// The database name of a `postgres://` URL.
fn database_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let path = rest.split_once('/')?.1;
    let name = path.split(['?', '#']).next()?;
    (!name.is_empty()).then_some(name)
}

/// Whether the process titled `title` (its command line) works for
/// `database`: the postmaster, a shared helper, or a backend or
/// autovacuum worker of that database.
fn counts(title: &str, database: &str) -> bool {
    let Some(rest) = title.trim().strip_prefix("postgres: ") else {
        // The postmaster keeps its real command line.
        return true;
    };
    // Titles carry the cluster name first when one is set
    // (`postgres: 15/main: checkpointer`).
    let rest = match rest.split_once(' ') {
        Some((first, tail)) if first.ends_with(':') => tail,
        _ => rest,
    };
    if SHARED.iter().any(|name| rest.starts_with(name)) {
        return true;
    }
    if let Some(worker) = rest.strip_prefix("autovacuum worker") {
        return worker.split_whitespace().next() == Some(database);
    }
    // A backend: `<user> <database> <host(port)> <state>`.
    rest.split_whitespace().nth(1) == Some(database)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_database_of_a_url() {
        assert_eq!(
            database_of("postgres://postgres@127.0.0.1:5432/bench_full"),
            Some("bench_full")
        );
        assert_eq!(
            database_of("postgresql://u:p@h/db?sslmode=disable"),
            Some("db")
        );
        assert_eq!(database_of("postgres://h:5432/"), None);
        assert_eq!(database_of("postgres://h:5432"), None);
        assert!(PostgresProcs::for_url("nonsense").is_err());
    }

    #[test]
    fn counts_the_databases_backends_and_the_shared_processes_only() {
        let db = "bench_full";
        for title in [
            "/usr/lib/postgresql/15/bin/postgres -D /var/lib/postgresql/15/main",
            "postgres: 15/main: checkpointer ",
            "postgres: 15/main: background writer ",
            "postgres: walwriter ",
            "postgres: 15/main: postgres bench_full 127.0.0.1(51234) idle",
            "postgres: postgres bench_full 127.0.0.1(51234) INSERT",
            "postgres: 15/main: autovacuum worker bench_full",
        ] {
            assert!(counts(title, db), "{title}");
        }
        for title in [
            "postgres: 15/main: postgres other_db 127.0.0.1(51234) idle",
            "postgres: 15/main: autovacuum worker other_db",
            "postgres: 15/main: postgres bench_full_2 127.0.0.1(1) idle",
        ] {
            assert!(!counts(title, db), "{title}");
        }
    }

    #[test]
    fn a_snapshot_difference_counts_growth_and_new_processes() {
        let ms = Duration::from_millis;
        let before = CpuSnapshot(HashMap::from([(1, ms(100)), (2, ms(50)), (3, ms(9))]));
        let after = CpuSnapshot(HashMap::from([(1, ms(130)), (2, ms(50)), (4, ms(7))]));
        assert_eq!(after.used_since(&before), ms(37));
    }
}
