//! One HTTP/1.1 exchange from the control plane over a fresh connection
//! (TLS for https, with the upstream CA roots): write a request built by
//! the caller with `connection: close`, read the answer until the peer
//! closes, up to a cap, and undo a chunked transfer coding. For health
//! probes, trace exports and token exchanges; the caller puts the deadline
//! around it.

use super::UpstreamBase;
use crate::http1::{parse_response_head, ResponseFraming};
use rustls::pki_types::ServerName;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Most bytes of an answer kept.
const MAX_ANSWER: usize = 64 << 10;

/// An answer: its status and the start of its body.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// Up to the cap of the body (the head removed).
    pub body: Vec<u8>,
}

/// The head of a request to `base` for `method path` with a body of
/// `body_len` bytes and `headers`; header values with line breaks are left
/// out.
pub fn head<'a>(
    base: &UpstreamBase,
    method: &str,
    path: &str,
    body_len: usize,
    headers: impl Iterator<Item = (&'a str, &'a str)>,
) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {}", base.host);
    if base.port != if base.tls { 443 } else { 80 } {
        head.push_str(&format!(":{}", base.port));
    }
    head.push_str(&format!(
        "\r\nuser-agent: gateway/{}\r\ncontent-length: {body_len}\r\nconnection: close\r\n",
        crate::VERSION
    ));
    for (name, value) in headers {
        if !value.bytes().any(|b| b == b'\r' || b == b'\n') {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    head.push_str("\r\n");
    head.into_bytes()
}

/// Sends `request` (head and body) to `base` and reads the answer.
pub async fn exchange(
    base: &UpstreamBase,
    request: &[u8],
    tls: &Arc<rustls::ClientConfig>,
) -> Result<Answer, String> {
    let tcp = TcpStream::connect((&*base.host, base.port))
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", base.url))?;
    let _ = tcp.set_nodelay(true);
    let bytes = if base.tls {
        let name = ServerName::try_from(base.host.to_string()).map_err(|e| e.to_string())?;
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {}: {e}", base.host))?;
        write_then_read(stream, request).await
    } else {
        write_then_read(tcp, request).await
    }
    .map_err(|e| format!("{}: {e}", base.url))?;
    match parse_response_head(&bytes) {
        Ok(Some((head, len))) => {
            let body = &bytes[len..];
            let body = if head.framing == ResponseFraming::Chunked {
                let mut decoded = Vec::with_capacity(body.len());
                crate::http1::ChunkedDecoder::default()
                    .decode(body, &mut decoded)
                    .map_err(|e| format!("{}: {e}", base.url))?;
                decoded
            } else {
                body.to_vec()
            };
            Ok(Answer {
                status: head.status,
                body,
            })
        }
        Ok(None) => Err(format!("{}: the answer ended before its head", base.url)),
        Err(e) => Err(format!("{}: not an HTTP answer: {e}", base.url)),
    }
}

async fn write_then_read<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &[u8],
) -> std::io::Result<Vec<u8>> {
    stream.write_all(request).await?;
    stream.flush().await?;
    let mut answer = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    while answer.len() < MAX_ANSWER {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
    }
    Ok(answer)
}
