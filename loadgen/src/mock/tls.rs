//! TLS server configuration from PEM files.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;
use std::sync::Arc;

use monoio_rustls::TlsAcceptor;

/// Builds an acceptor serving the certificate chain in `cert` with the
/// private key in `key` (PKCS#8, PKCS#1 or SEC1), offering ALPN `http/1.1`.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    let open = |p: &Path| {
        File::open(p)
            .map(BufReader::new)
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    let certs = rustls_pemfile::certs(&mut open(cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificates found", cert.display()));
    }
    let key_der = rustls_pemfile::private_key(&mut open(key)?)
        .map_err(|e| format!("{}: {e}", key.display()))?
        .ok_or_else(|| format!("{}: no private key found", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)
        .map_err(|e| format!("TLS certificate/key: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
