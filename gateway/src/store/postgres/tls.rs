//! TLS to Postgres over rustls, as libpq's `sslmode` in `DATABASE_URL`
//! asks for it:
//!
//! | `sslmode` | TLS | certificate checked |
//! | --- | --- | --- |
//! | `disable` | never | - |
//! | `allow`, `prefer` (default) | when the server offers it | no |
//! | `require` | always | no; with `sslrootcert`, its chain (as libpq) |
//! | `verify-ca` | always | its chain |
//! | `verify-full` | always | its chain and the host name |
//!
//! Chains are checked against the gateway's roots (the platform's plus the
//! bundle named by `SSL_CERT_FILE`) and the file named by `sslrootcert`.

use super::super::StoreError;
use crate::upstream::AnyCertificate;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;
use tokio_postgres::config::SslMode as DriverMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// `disable`.
    Disable,
    /// `allow` or `prefer`.
    Prefer,
    /// `require`.
    Require,
    /// `verify-ca`.
    VerifyCa,
    /// `verify-full`.
    VerifyFull,
}

impl SslMode {
    /// Reads an `sslmode` value.
    pub fn parse(value: &str) -> Result<SslMode, StoreError> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "allow" | "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => {
                return Err(StoreError::Query(format!(
                    "sslmode={other}: expected disable, allow, prefer, require, verify-ca or verify-full"
                )))
            }
        })
    }

    /// What the driver is told: whether TLS is tried, and required.
    pub fn driver(self) -> DriverMode {
        match self {
            SslMode::Disable => DriverMode::Disable,
            SslMode::Prefer => DriverMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => DriverMode::Require,
        }
    }
}

/// The connector for `mode`, trusting `rootcert` (a PEM file) besides the
/// gateway's roots.
pub fn connector(mode: SslMode, rootcert: Option<&str>) -> Result<MakeRustlsConnect, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let check = match (mode, rootcert) {
        (SslMode::Disable | SslMode::Prefer, _) | (SslMode::Require, None) => Check::Nothing,
        (SslMode::Require | SslMode::VerifyCa, _) => Check::Chain,
        (SslMode::VerifyFull, _) => Check::ChainAndName,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Nothing => Arc::new(AnyCertificate::new(provider.clone())),
        Check::Chain | Check::ChainAndName => {
            let mut roots = crate::upstream::root_store().map_err(setup)?;
            if let Some(path) = rootcert {
                crate::upstream::add_pem_file(&mut roots, path).map_err(setup)?;
            }
            let webpki =
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| StoreError::Query(format!("Postgres TLS roots: {e}")))?;
            if check == Check::Chain {
                Arc::new(ChainOnly(webpki))
            } else {
                webpki
            }
        }
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Query(format!("Postgres TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn setup(e: crate::upstream::TlsSetupError) -> StoreError {
    StoreError::Query(format!("Postgres TLS: {e}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

/// `verify-ca`: the chain must lead to a trusted root; the name is not
/// checked.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libpq_modes() {
        assert_eq!(SslMode::parse("verify-full").unwrap(), SslMode::VerifyFull);
        assert_eq!(SslMode::parse("allow").unwrap(), SslMode::Prefer);
        assert_eq!(SslMode::Require.driver(), DriverMode::Require);
        assert_eq!(SslMode::Disable.driver(), DriverMode::Disable);
        assert!(SslMode::parse("verify_full").is_err());
        assert!(connector(SslMode::Require, Some("/nonexistent/ca.pem")).is_err());
        assert!(connector(SslMode::Prefer, None).is_ok());
    }
}
