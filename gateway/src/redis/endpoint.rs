//! Where a Redis connection goes, read from its URL, the same for the
//! cores and the control plane: `redis://` and `rediss://` (with
//! `#insecure`), and `unix://` / `redis+unix://` sockets.

use rustls::pki_types::ServerName;
use std::sync::Arc;

/// How a `rediss://` connection is secured: the client config (the
/// gateway's roots) and the server's name.
#[derive(Clone)]
pub struct RedisTls {
    /// The rustls client config.
    pub config: Arc<rustls::ClientConfig>,
    /// The name the server's certificate must carry.
    pub name: ServerName<'static>,
}

impl std::fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTls")
            .field("name", &self.name)
            .finish()
    }
}

/// Where a connection goes and how it logs in.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `host:port`, or the socket's path when `unix`.
    pub addr: String,
    /// A Unix socket (`unix://` or `redis+unix://`).
    pub unix: bool,
    /// `AUTH` user, with the password.
    pub username: Option<String>,
    /// `AUTH` password.
    pub password: Option<String>,
    /// `SELECT` database.
    pub db: Option<u32>,
    /// `rediss://`: how the connection is secured.
    pub tls: Option<RedisTls>,
    /// What the connection calls itself (`CLIENT SETNAME`).
    pub name: &'static str,
}

impl Endpoint {
    /// Reads `redis://[[user]:password@]host[:port][/db]`, and the same
    /// with `rediss://` (`#insecure` at the end: the certificate is not
    /// checked) when `tls` gives a client config for it (`tls(true)` checks
    /// the certificate, `tls(false)` does not); `None` for anything else.
    pub fn from_url(
        url: &str,
        name: &'static str,
        tls: impl FnOnce(bool) -> Option<Arc<rustls::ClientConfig>>,
    ) -> Option<Endpoint> {
        if url.starts_with("unix://") || url.starts_with("redis+unix://") {
            return Self::from_unix_url(url, name);
        }
        let (rest, secure) = match (url.strip_prefix("redis://"), url.strip_prefix("rediss://")) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            _ => return None,
        };
        let (rest, verify) = match (secure, rest.split_once('#')) {
            (false, _) | (true, None) => (rest, true),
            (true, Some((rest, "insecure"))) => (rest, false),
            (true, Some(_)) => return None,
        };
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((auth, rest)) => (Some(auth), rest),
            None => (None, rest),
        };
        let (hostport, db) = match rest.split_once('/') {
            Some((h, "")) => (h, None),
            Some((h, db)) => (h, Some(db.parse().ok()?)),
            None => (rest, None),
        };
        if hostport.is_empty() {
            return None;
        }
        let addr = if hostport.starts_with('[') || hostport.matches(':').count() == 1 {
            hostport.to_string()
        } else {
            format!("{hostport}:6379")
        };
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .ok()
                .map(|s| s.into_owned())
                .filter(|s| !s.is_empty())
        };
        let (username, password) = match auth.map(|a| a.split_once(':')) {
            Some(Some((user, pass))) => (decode(user), decode(pass)),
            Some(None) => (None, auth.and_then(decode)),
            None => (None, None),
        };
        let tls = match secure {
            true => {
                let host = match addr.rsplit_once(':') {
                    Some((host, _)) => host.trim_start_matches('[').trim_end_matches(']'),
                    None => addr.as_str(),
                };
                Some(RedisTls {
                    config: tls(verify)?,
                    name: ServerName::try_from(host.to_string()).ok()?,
                })
            }
            false => None,
        };
        Some(Endpoint {
            addr,
            unix: false,
            username,
            password,
            db,
            tls,
            name,
        })
    }

    /// Reads `unix:///path` or `redis+unix:///path`, with `db`, `user`
    /// and `pass` in the query (as the redis crate and redis-py read them).
    fn from_unix_url(url: &str, name: &'static str) -> Option<Endpoint> {
        let parsed = url::Url::parse(url).ok()?;
        let path = parsed.to_file_path().ok()?;
        let mut endpoint = Endpoint {
            addr: path.to_str()?.to_string(),
            unix: true,
            username: None,
            password: None,
            db: None,
            tls: None,
            name,
        };
        for (k, v) in parsed.query_pairs() {
            match &*k {
                "db" => endpoint.db = Some(v.parse().ok()?),
                "user" => endpoint.username = Some(v.into_owned()),
                "pass" | "password" => endpoint.password = Some(v.into_owned()),
                _ => {}
            }
        }
        Some(endpoint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_read_the_same_for_every_runtime() {
        let tls = |verify: bool| verify.then(crate::upstream::unverified_client_config);
        let e = Endpoint::from_url("redis://u:p%40ss@[::1]:7000/3", "n", tls).unwrap();
        assert_eq!(
            (
                e.addr.as_str(),
                e.username.as_deref(),
                e.password.as_deref(),
                e.db
            ),
            ("[::1]:7000", Some("u"), Some("p@ss"), Some(3))
        );
        assert_eq!(
            Endpoint::from_url("redis://h", "n", tls).unwrap().addr,
            "h:6379"
        );
        assert!(Endpoint::from_url("rediss://h:1", "n", tls)
            .unwrap()
            .tls
            .is_some());
        assert!(
            Endpoint::from_url("rediss://h:1#insecure", "n", tls).is_none(),
            "no unchecked config given"
        );
        assert!(Endpoint::from_url("rediss://h:1#other", "n", |_| None).is_none());
        let hash = Endpoint::from_url("redis://:pa#ss@h:1", "n", tls).unwrap();
        assert_eq!(
            hash.password.as_deref(),
            Some("pa#ss"),
            "redis:// has no fragment"
        );
        assert!(Endpoint::from_url("http://h:1", "n", tls).is_none());
        let unix = Endpoint::from_url("redis+unix:///tmp/r.sock?db=2&pass=p%20w", "n", tls);
        let unix = unix.unwrap();
        assert_eq!(
            (
                unix.unix,
                unix.addr.as_str(),
                unix.db,
                unix.password.as_deref()
            ),
            (true, "/tmp/r.sock", Some(2), Some("p w"))
        );
        assert!(
            Endpoint::from_url("unix:///tmp/r.sock", "n", tls)
                .unwrap()
                .unix
        );
        assert!(Endpoint::from_url("unix:///tmp/r.sock?db=x", "n", tls).is_none());
    }
}
