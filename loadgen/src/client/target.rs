//! `--url` parsing: `http://host:port[/path]` or `https://...` (TLS with
//! the gateway's trust: the platform's roots plus `SSL_CERT_FILE`).

use rustls::pki_types::ServerName;
use std::net::{SocketAddr, ToSocketAddrs};

/// Request path used when the URL has none.
pub const DEFAULT_PATH: &str = "/v1/chat/completions";

/// Where requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The resolved server address.
    pub addr: SocketAddr,
    /// Value of the `Host` header (`host:port` as written).
    pub host: String,
    /// Request path; [`DEFAULT_PATH`] when the URL has none.
    pub path: String,
    /// `https://`: how connections are wrapped.
    pub tls: Option<TlsTarget>,
}

/// The TLS side of an `https://` target.
#[derive(Clone)]
pub struct TlsTarget {
    /// The connector (the trusted roots).
    pub connector: monoio_rustls::TlsConnector,
    /// The name the server's certificate must carry.
    pub name: ServerName<'static>,
}

impl std::fmt::Debug for TlsTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTarget")
            .field("name", &self.name)
            .finish()
    }
}

impl PartialEq for TlsTarget {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for TlsTarget {}

impl Target {
    /// Parses and resolves `url`, `http://` or `https://`.
    pub fn parse(url: &str) -> Result<Target, String> {
        let (rest, secure) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            _ => return Err(format!("--url {url:?}: expected http:// or https://")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(format!("--url {url:?}: missing host"));
        }
        let with_port = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.contains(']'))
        {
            authority.to_string()
        } else {
            format!("{authority}:{}", if secure { 443 } else { 80 })
        };
        let addr = with_port
            .to_socket_addrs()
            .map_err(|e| format!("--url {url:?}: cannot resolve {with_port}: {e}"))?
            .next()
            .ok_or_else(|| format!("--url {url:?}: {with_port} has no address"))?;
        let path = match path {
            "" | "/" => DEFAULT_PATH.to_string(),
            p => p.to_string(),
        };
        let tls = if secure {
            let host = with_port
                .rsplit_once(':')
                .map_or(with_port.as_str(), |(h, _)| h)
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string();
            let config = gateway::upstream::client_config().map_err(|e| e.to_string())?;
            Some(TlsTarget {
                connector: monoio_rustls::TlsConnector::from(config),
                name: ServerName::try_from(host)
                    .map_err(|e| format!("--url {url:?}: bad TLS name: {e}"))?,
            })
        } else {
            None
        };
        Ok(Target {
            addr,
            host: authority.to_string(),
            path,
            tls,
        })
    }

    /// The target as a URL, for reports.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}{}", self.host, self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_host_port_and_path() {
        let t = Target::parse("http://127.0.0.1:4000").unwrap();
        assert_eq!(t.addr, "127.0.0.1:4000".parse().unwrap());
        assert_eq!(
            (t.host.as_str(), t.path.as_str()),
            ("127.0.0.1:4000", DEFAULT_PATH)
        );
        let t = Target::parse("http://127.0.0.1:9/v1/embeddings").unwrap();
        assert_eq!(t.path, "/v1/embeddings");
        assert_eq!(t.url(), "http://127.0.0.1:9/v1/embeddings");
        assert_eq!(Target::parse("http://127.0.0.1/").unwrap().addr.port(), 80);
        assert_eq!(Target::parse("http://[::1]:7").unwrap().addr.port(), 7);
    }

    #[test]
    fn rejects_other_schemes() {
        assert!(Target::parse("ftp://x:1")
            .unwrap_err()
            .contains("expected http:// or https://"));
        assert!(Target::parse("http:///v1").is_err());
    }

    #[test]
    fn https_targets_carry_the_tls_name() {
        let t = Target::parse("https://localhost:4443/v1/completions").unwrap();
        assert_eq!(t.url(), "https://localhost:4443/v1/completions");
        assert_eq!(
            t.tls.map(|tls| tls.name),
            Some(ServerName::try_from("localhost").unwrap())
        );
        assert_eq!(Target::parse("https://127.0.0.1").unwrap().addr.port(), 443);
        assert!(Target::parse("http://127.0.0.1:1").unwrap().tls.is_none());
    }
}
