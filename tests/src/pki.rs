//! A throwaway PKI for the TLS tests: a CA of the test's own and a server
//! certificate for `localhost` and 127.0.0.1 signed by it, written as PEM
//! files into a temp dir.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use tempfile::TempDir;

/// The files of a test PKI; removed on drop.
pub struct TestPki {
    dir: TempDir,
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// The server certificate for `localhost` and 127.0.0.1 (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

impl TestPki {
    /// Makes the CA and a first server certificate.
    pub fn new() -> TestPki {
        let dir = tempfile::tempdir().expect("temp dir for the PKI");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "gateway e2e test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().expect("ca key");
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, ca_cert.pem()).expect("write ca");
        let mut pki = TestPki {
            issuer: Issuer::new(ca_params, ca_key),
            cert: dir.path().join("server.pem"),
            key: dir.path().join("server.key"),
            ca,
            dir,
        };
        pki.issue("first");
        pki
    }

    /// Issues a new server certificate (its common name `name`) and writes
    /// it over [`cert`](TestPki::cert) and [`key`](TestPki::key).
    pub fn issue(&mut self, name: &str) {
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
                .expect("server params");
        params.distinguished_name.push(DnType::CommonName, name);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().expect("server key");
        let cert = params.signed_by(&key, &self.issuer).expect("server cert");
        std::fs::write(&self.cert, cert.pem()).expect("write cert");
        std::fs::write(&self.key, key.serialize_pem()).expect("write key");
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Default for TestPki {
    fn default() -> Self {
        TestPki::new()
    }
}

/// A path as the `&str` a config or an environment variable takes.
pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}
