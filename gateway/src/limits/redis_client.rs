//! The control plane's Redis client (leases, shared cooldowns, and the
//! limiter's calls when the cores cannot reach Redis themselves), with the
//! same trust as every other TLS client of the gateway: for `rediss://`,
//! the platform's roots plus the bundle named by `SSL_CERT_FILE`
//! (`rediss://...#insecure` skips the check, as the redis crate reads it).

use base64::Engine;

/// A client for `url`.
pub fn client(url: &str) -> Result<redis::Client, String> {
    if !url.starts_with("rediss://") {
        return redis::Client::open(url).map_err(|e| e.to_string());
    }
    let tls = redis::TlsCertificates {
        client_tls: None,
        root_cert: roots_pem()?,
    };
    redis::Client::build_with_tls(url, tls).map_err(|e| e.to_string())
}

/// The trusted roots as one PEM bundle (the redis crate takes them so);
/// `None` when there are none to add to the redis crate's own search.
fn roots_pem() -> Result<Option<Vec<u8>>, String> {
    let mut certs: Vec<Vec<u8>> = rustls_native_certs::load_native_certs()
        .certs
        .into_iter()
        .map(|c| c.as_ref().to_vec())
        .collect();
    if let Ok(path) = std::env::var("SSL_CERT_FILE") {
        let file = std::fs::File::open(&path).map_err(|e| format!("SSL_CERT_FILE {path}: {e}"))?;
        for cert in rustls_pemfile::certs(&mut std::io::BufReader::new(file)) {
            let cert = cert.map_err(|e| format!("SSL_CERT_FILE {path}: {e}"))?;
            certs.push(cert.as_ref().to_vec());
        }
    }
    if certs.is_empty() {
        return Ok(None);
    }
    let mut pem = Vec::new();
    for der in certs {
        pem.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        let text = base64::engine::general_purpose::STANDARD.encode(der);
        for line in text.as_bytes().chunks(64) {
            pem.extend_from_slice(line);
            pem.push(b'\n');
        }
        pem.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }
    Ok(Some(pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_tls_urls_make_clients() {
        assert!(client("redis://127.0.0.1:6379").is_ok());
        assert!(client("rediss://127.0.0.1:6380").is_ok());
        assert!(client("not a url").is_err());
    }
}
