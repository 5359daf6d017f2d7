//! Postgres for the end-to-end tests, driven through the `psql`, `initdb` and
//! `pg_ctl` command-line tools (no client library):
//!
//! - [`TestDb`]: a scratch database on the machine's shared Postgres, dropped
//!   when the test ends.
//! - [`PrivatePostgres`]: a whole Postgres server of the test's own, in a
//!   temp dir on a free port, that the test may kill and restart.
//!
//! Postgres must be installed and (for [`TestDb`]) running — `scripts/test.sh`
//! starts it; these helpers panic with a clear message rather than skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

use crate::procs::free_port;

/// The admin URL [`TestDb`] uses when neither `E2E_PG_ADMIN_URL` nor
/// `DATABASE_URL_ADMIN` is set.
pub const DEFAULT_PG_ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The URL of a database the tests may create and drop databases through:
/// `E2E_PG_ADMIN_URL`, else `DATABASE_URL_ADMIN` (the gateway's own Postgres
/// tests), else [`DEFAULT_PG_ADMIN_URL`].
pub fn pg_admin_url() -> String {
    ["E2E_PG_ADMIN_URL", "DATABASE_URL_ADMIN"]
        .iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|url| !url.is_empty())
        .unwrap_or_else(|| DEFAULT_PG_ADMIN_URL.to_string())
}

/// `url` with its database name replaced by `dbname` (query kept).
fn with_dbname(url: &str, dbname: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let host_end = base[authority_start..]
        .find('/')
        .map_or(base.len(), |i| authority_start + i);
    format!("{}/{dbname}{query}", &base[..host_end])
}

/// Runs `cmd`, panicking with `what`, its status and output unless it succeeds.
fn run_ok(mut cmd: Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {cmd:?} failed with {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `psql <url> -X -At -v ON_ERROR_STOP=1 -c <sql>`; panics with psql's
/// output on failure. Returns stdout without the trailing newline.
fn psql(url: &str, sql: &str) -> String {
    let mut cmd = Command::new("psql");
    cmd.args([
        "-X",
        "-q",
        "-At",
        "-v",
        "ON_ERROR_STOP=1",
        "-d",
        url,
        "-c",
        sql,
    ]);
    let out = run_ok(cmd, "psql (is Postgres installed and running?)");
    String::from_utf8_lossy(&out.stdout)
        .trim_end_matches('\n')
        .to_string()
}

/// A name unique to this process and call, usable unquoted in SQL.
fn unique_name(prefix: &str) -> String {
    crate::unique_id(prefix)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// A fresh, empty database `gw_e2e_<unique>` on the shared Postgres (see
/// [`pg_admin_url`]), dropped with `DROP DATABASE ... WITH (FORCE)` on drop.
/// The gateway creates its tables in it at start-up.
pub struct TestDb {
    name: String,
    url: String,
    admin_url: String,
}

impl TestDb {
    /// Creates the database; panics if Postgres cannot be reached.
    pub fn create() -> TestDb {
        let admin_url = pg_admin_url();
        let name = unique_name("gw_e2e");
        psql(&admin_url, &format!("CREATE DATABASE {name}"));
        TestDb {
            url: with_dbname(&admin_url, &name),
            name,
            admin_url,
        }
    }

    /// The database's URL, for the gateway's `DATABASE_URL`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `sql` in the database with `psql -At` (unaligned, tuples only:
    /// one line per row, columns separated by `|`) and returns its output
    /// without the trailing newline; panics on an SQL error.
    pub fn query(&self, sql: &str) -> String {
        psql(&self.url, sql)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args(["-X", "-q", "-d", &self.admin_url, "-c"])
            .arg(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .output();
    }
}

/// The directory of the newest installed Postgres server binaries: the
/// highest `/usr/lib/postgresql/<version>/bin` holding `initdb`, else the
/// directory of an `initdb` on `PATH`.
fn pg_bin_dir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .unwrap_or_else(|| {
            panic!(
                "Postgres server binaries (initdb, pg_ctl) not found in \
                 /usr/lib/postgresql/*/bin or on PATH: install postgresql \
                 (scripts/test.sh does)"
            )
        })
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A Postgres server of the test's own: `initdb` into a temp dir, listening
/// on 127.0.0.1 at a free port with trust authentication, its socket in the
/// same dir. It can be killed (as a crash would) and restarted on the same
/// data and port. Stopped and removed on drop.
///
/// Postgres refuses to run as root, so as root the data dir is given to the
/// `postgres` OS user and `initdb`/`pg_ctl` run through `runuser -u postgres`.
pub struct PrivatePostgres {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
    /// Server options beyond the port, socket and durability ones.
    extra_options: String,
}

impl PrivatePostgres {
    /// Creates the cluster and starts the server; panics (with the tool's
    /// output) if the binaries are missing or the server does not start.
    pub fn start() -> PrivatePostgres {
        Self::start_with(None)
    }

    /// [`start`](PrivatePostgres::start) with TLS on (`ssl = on`), serving
    /// the PEM certificate chain and key at the given paths (copied into
    /// the server's dir); clients may still connect without TLS.
    pub fn start_tls(cert: &Path, key: &Path) -> PrivatePostgres {
        Self::start_with(Some((cert, key)))
    }

    fn start_with(tls: Option<(&Path, &Path)>) -> PrivatePostgres {
        let bin = pg_bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("e2e-pg-")
            .tempdir()
            .expect("temp dir for the private Postgres");
        let as_postgres = is_root();
        if as_postgres {
            let mut chown = Command::new("chown");
            chown.args(["-R", "postgres:postgres"]).arg(dir.path());
            run_ok(
                chown,
                "giving the private Postgres dir to the postgres user",
            );
        }
        let mut pg = PrivatePostgres {
            dir,
            bin,
            port: free_port(),
            as_postgres,
            extra_options: String::new(),
        };
        if let Some((cert, key)) = tls {
            pg.install_tls(cert, key);
        }
        let mut initdb = pg.tool("initdb");
        initdb.arg("-D").arg(pg.data_dir()).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        ]);
        run_ok(initdb, "initdb of the private Postgres");
        // The free port may be taken by another test between the probe and
        // the start; try a few.
        for attempt in 1.. {
            match pg.try_start() {
                Ok(()) => break,
                Err(log) if attempt < 3 => {
                    eprintln!("private Postgres did not start on port {}; retrying on another port:\n{log}", pg.port);
                    pg.port = free_port();
                }
                Err(log) => panic!("the private Postgres did not start:\n{log}"),
            }
        }
        pg
    }

    /// Copies the certificate and key where the server reads them (the key
    /// readable by its owner only, as Postgres requires) and turns TLS on.
    fn install_tls(&mut self, cert: &Path, key: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let tls_dir = self.dir.path().join("tls");
        std::fs::create_dir_all(&tls_dir).expect("tls dir");
        let (cert_to, key_to) = (tls_dir.join("server.crt"), tls_dir.join("server.key"));
        std::fs::copy(cert, &cert_to).expect("copy the server certificate");
        std::fs::copy(key, &key_to).expect("copy the server key");
        std::fs::set_permissions(&key_to, std::fs::Permissions::from_mode(0o600))
            .expect("chmod the server key");
        if self.as_postgres {
            let mut chown = Command::new("chown");
            chown.args(["-R", "postgres:postgres"]).arg(&tls_dir);
            run_ok(chown, "giving the TLS files to the postgres user");
        }
        self.extra_options = format!(
            " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            cert_to.display(),
            key_to.display()
        );
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// `<bin>/<name>`, run as the `postgres` user when the tests run as root.
    fn tool(&self, name: &str) -> Command {
        let path = self.bin.join(name);
        assert!(
            path.is_file(),
            "Postgres tool {} not found: install postgresql (scripts/test.sh does)",
            path.display()
        );
        if self.as_postgres {
            let mut cmd = Command::new("runuser");
            cmd.args(["-u", "postgres", "--"]).arg(path);
            cmd
        } else {
            Command::new(path)
        }
    }

    /// `pg_ctl start -w` on the data dir; on failure returns the server log.
    fn try_start(&self) -> Result<(), String> {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c max_connections=100{}",
            self.port,
            self.dir.path().display(),
            self.extra_options
        );
        let out = self
            .tool("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log_path())
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run pg_ctl: {e}"));
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl start failed with {}\n{}{}\n--- server log ---\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.log()
            ))
        }
    }

    /// `pg_ctl stop` in `mode`; panics on failure.
    fn stop(&self, mode: &str) {
        let mut cmd = self.tool("pg_ctl");
        cmd.arg("-D")
            .arg(self.data_dir())
            .args(["-w", "-t", "60", "-m", mode, "stop"]);
        run_ok(cmd, "stopping the private Postgres");
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Kills the server as a crash would (`pg_ctl stop -m immediate`): every
    /// connection drops at once and new ones are refused until [`restart`].
    ///
    /// [`restart`]: PrivatePostgres::restart
    pub fn kill(&self) {
        self.stop("immediate");
    }

    /// Starts the server again on the same data dir and port (after crash
    /// recovery when it was killed); panics with the log if it fails.
    pub fn restart(&self) {
        if let Err(log) = self.try_start() {
            panic!("the private Postgres did not restart:\n{log}");
        }
    }

    /// Runs `sql` with `psql -At` (one line per row, columns separated by
    /// `|`) and returns its output without the trailing newline.
    pub fn query(&self, sql: &str) -> String {
        psql(&self.url(), sql)
    }

    /// The server's process ids: the postmaster, then its children (every
    /// backend and background worker).
    fn pids(&self) -> Vec<libc::pid_t> {
        let pid_file = self.data_dir().join("postmaster.pid");
        let main = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<libc::pid_t>().ok());
        let Some(main) = main else {
            return Vec::new(); // not running
        };
        let mut pids = vec![main];
        pids.extend(crate::procs::children_of(main));
        pids
    }

    /// Freezes the server (SIGSTOP to the postmaster and every backend):
    /// connections stay open and new ones are accepted by the kernel, but
    /// nothing answers until [`thaw`](PrivatePostgres::thaw). The nastiest
    /// outage for a client: no error, only silence.
    pub fn freeze(&self) {
        for pid in self.pids() {
            crate::procs::signal_pid(pid, libc::SIGSTOP);
        }
    }

    /// Resumes a frozen server.
    pub fn thaw(&self) {
        for pid in self.pids().into_iter().rev() {
            crate::procs::signal_pid(pid, libc::SIGCONT);
        }
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        std::fs::read(self.log_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The directory holding the data dir, the socket and the log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // Stopped whatever its state (a frozen one is thawed first); an
        // already stopped server makes pg_ctl fail, which is fine. The temp
        // dir is removed after this.
        self.thaw();
        let _ = self
            .tool("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-w", "-t", "30", "-m", "immediate", "stop"])
            .output();
    }
}

#[cfg(test)]
mod tests {
    use super::with_dbname;

    #[test]
    fn replaces_the_database_name() {
        assert_eq!(
            with_dbname("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_dbname("postgres://u:p@h:1/db?sslmode=disable", "x"),
            "postgres://u:p@h:1/x?sslmode=disable"
        );
        assert_eq!(with_dbname("postgres://h", "x"), "postgres://h/x");
    }
}
