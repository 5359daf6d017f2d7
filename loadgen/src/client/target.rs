//! `--url` parsing: `http://host:port[/path]`.

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
}

impl Target {
    /// Parses and resolves `url`. Only plain `http://` is supported.
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("--url {url:?}: only http:// URLs are supported (no TLS client)")
        })?;
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
            format!("{authority}:80")
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
        Ok(Target {
            addr,
            host: authority.to_string(),
            path,
        })
    }

    /// The target as a URL, for reports.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.host, self.path)
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
        assert!(Target::parse("https://x:1")
            .unwrap_err()
            .contains("only http://"));
        assert!(Target::parse("http:///v1").is_err());
    }
}
