//! TLS for clients: the gateway terminates it itself when given a
//! certificate chain and key (LiteLLM's `--ssl_certfile_path` /
//! `--ssl_keyfile_path`, or `SSL_CERTFILE_PATH` / `SSL_KEYFILE_PATH`),
//! HTTP/1.1 over rustls on each core's runtime. [`ClientTls::reload`] reads
//! the files again (on SIGHUP): new connections get the new certificate,
//! open ones keep theirs; a bad file keeps the one in use.

use arc_swap::ArcSwap;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    /// A file is unreadable or holds no PEM item of the kind needed.
    #[error("{path}: {reason}")]
    File {
        /// The path.
        path: String,
        /// What failed.
        reason: String,
    },
    /// The key does not fit the certificate, or rustls refused them.
    #[error("certificate {cert} with key {key}: {reason}")]
    Pair {
        /// The certificate's path.
        cert: String,
        /// The key's path.
        key: String,
        /// What rustls said.
        reason: String,
    },
}

/// The server side of client TLS: the files and the config built from them.
pub struct ClientTls {
    cert: PathBuf,
    key: PathBuf,
    config: ArcSwap<ServerConfig>,
}

impl ClientTls {
    /// Reads the PEM certificate chain at `cert` and the key at `key`.
    pub fn load(cert: &Path, key: &Path) -> Result<ClientTls, ClientTlsError> {
        let config = build(cert, key)?;
        Ok(ClientTls {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            config: ArcSwap::from_pointee(config),
        })
    }

    /// Reads the files again; on success new handshakes use them, on
    /// failure the config in use stays.
    pub fn reload(&self) -> Result<(), ClientTlsError> {
        let config = build(&self.cert, &self.key)?;
        self.config.store(Arc::new(config));
        Ok(())
    }

    /// An acceptor with the current config.
    pub fn acceptor(&self) -> monoio_rustls::TlsAcceptor {
        monoio_rustls::TlsAcceptor::from(self.config.load_full())
    }

    /// The certificate file, for logs.
    pub fn cert_path(&self) -> &Path {
        &self.cert
    }
}

fn build(cert: &Path, key: &Path) -> Result<ServerConfig, ClientTlsError> {
    let file_err = |path: &Path, reason: String| ClientTlsError::File {
        path: path.display().to_string(),
        reason,
    };
    let open = |path: &Path| {
        std::fs::File::open(path)
            .map(std::io::BufReader::new)
            .map_err(|e| file_err(path, e.to_string()))
    };
    let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut open(cert)?)
        .collect::<Result<_, _>>()
        .map_err(|e| file_err(cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(file_err(cert, "no PEM certificate found".into()));
    }
    let private: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut open(key)?)
        .map_err(|e| file_err(key, e.to_string()))?
        .ok_or_else(|| file_err(key, "no PEM private key found".into()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| pair_err(cert, key, e))?
        .with_no_client_auth()
        .with_single_cert(chain, private)
        .map_err(|e| pair_err(cert, key, e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn pair_err(cert: &Path, key: &Path, e: rustls::Error) -> ClientTlsError {
    ClientTlsError::Pair {
        cert: cert.display().to_string(),
        key: key.display().to_string(),
        reason: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_files_are_named_and_keep_the_config_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        let err = ClientTls::load(&cert, &key).err().expect("no files");
        assert!(err.to_string().contains("c.pem"), "{err}");
        std::fs::write(&cert, "not pem").unwrap();
        let err = ClientTls::load(&cert, &key).err().expect("no certificate");
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
    }
}
