//! The rustls client configuration for HTTPS upstreams: the platform's root
//! store, plus the CA bundle named by `SSL_CERT_FILE`.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;

/// Root certificates could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// `SSL_CERT_FILE` is unreadable or holds no certificate.
    #[error("SSL_CERT_FILE {path}: {reason}")]
    CertFile {
        /// The path.
        path: String,
        /// What failed.
        reason: String,
    },
}

/// The platform's root certificates (webpki's when it has none), plus the
/// CA bundle named by `SSL_CERT_FILE`: what every TLS client of the gateway
/// trusts (upstreams, Postgres, Redis).
pub fn root_store() -> Result<RootCertStore, TlsSetupError> {
    let mut roots = RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _ignored) = roots.add_parsable_certificates(native.certs);
    if added == 0 {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    if let Ok(path) = std::env::var("SSL_CERT_FILE") {
        add_pem_file(&mut roots, &path)?;
    }
    Ok(roots)
}

/// Adds the certificates of the PEM file at `path` to `roots`.
pub fn add_pem_file(roots: &mut RootCertStore, path: &str) -> Result<(), TlsSetupError> {
    for cert in read_pem_file(path)? {
        roots.add(cert).map_err(|e| TlsSetupError::CertFile {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
    }
    Ok(())
}

/// Builds the client config shared by every core.
pub fn client_config() -> Result<Arc<ClientConfig>, TlsSetupError> {
    let roots = root_store()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A client config that checks no certificate (encryption without
/// authentication), for the clients a setting tells so: Postgres's
/// `sslmode=prefer` / `require`, Redis's `rediss://...#insecure`.
pub fn unverified_client_config() -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate::new(provider)))
        .with_no_client_auth();
    Arc::new(config)
}

/// Accepts any certificate: encryption without authentication; the
/// handshake's signatures are still checked.
#[derive(Debug)]
pub struct AnyCertificate(Arc<CryptoProvider>);

impl AnyCertificate {
    /// The verifier, checking signatures with `provider`'s algorithms.
    pub fn new(provider: Arc<CryptoProvider>) -> AnyCertificate {
        AnyCertificate(provider)
    }
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn read_pem_file(path: &str) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let err = |reason: String| TlsSetupError::CertFile {
        path: path.to_string(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let certs = rustls_pemfile::certs(&mut std::io::BufReader::new(file))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(e.to_string()))?;
    if certs.is_empty() {
        return Err(err("no PEM certificate found".into()));
    }
    Ok(certs)
}
