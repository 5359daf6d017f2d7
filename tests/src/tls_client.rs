//! A blocking HTTPS client for the client-TLS tests: rustls over a std
//! socket, trusting one CA file; it reports the certificate the server
//! showed and reads the connection to its end.

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// An HTTPS connection to 127.0.0.1, named `localhost` for the handshake.
pub struct TlsConn {
    stream: StreamOwned<ClientConnection, TcpStream>,
}

/// The client config trusting only `ca` (a PEM file).
pub fn trusting(ca: &Path) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    let file = std::fs::File::open(ca).expect("open the CA file");
    for cert in rustls_pemfile::certs(&mut std::io::BufReader::new(file)) {
        roots.add(cert.expect("a PEM certificate")).expect("a CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("default versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// The DER of the first certificate in the PEM file at `path`.
pub fn cert_der(path: &Path) -> Vec<u8> {
    let file = std::fs::File::open(path).expect("open the certificate");
    rustls_pemfile::certs(&mut std::io::BufReader::new(file))
        .next()
        .expect("a certificate")
        .expect("a PEM certificate")
        .as_ref()
        .to_vec()
}

impl TlsConn {
    /// Connects to `127.0.0.1:port` and completes the handshake.
    pub fn connect(port: u16, config: &Arc<ClientConfig>) -> std::io::Result<TlsConn> {
        let tcp = TcpStream::connect(("127.0.0.1", port))?;
        tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
        let name = ServerName::try_from("localhost").expect("a name");
        let conn = ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
        let mut stream = StreamOwned::new(conn, tcp);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(TlsConn { stream })
    }

    /// The certificate the server showed (DER).
    pub fn peer_cert(&self) -> Vec<u8> {
        self.stream
            .conn
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c: &CertificateDer<'_>| c.as_ref().to_vec())
            .unwrap_or_default()
    }

    /// Sends `bytes`.
    pub fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Reads until `marker` has been seen `times` times (or the connection
    /// ends); returns what was read.
    pub fn read_until(&mut self, marker: &[u8], times: usize) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        while count(&out, marker) < times {
            match self.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// How often `needle` occurs in `hay`.
pub fn count(hay: &[u8], needle: &[u8]) -> usize {
    if needle.is_empty() {
        return 0;
    }
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}
