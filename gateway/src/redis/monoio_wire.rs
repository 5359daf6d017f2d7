//! A core's socket to Redis: a monoio TCP stream, wrapped by
//! monoio-rustls for `rediss://`, under the same [`Conn`](super::conn::Conn)
//! (codec, log-in, scripts) as the control plane's connections.

use super::conn::Wire;
use super::endpoint::RedisTls;
use super::error::RemoteError;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio_rustls::ClientTlsStream;
use std::time::Duration;

/// A core's socket to Redis: plain, or TLS for `rediss://`, with the
/// buffer reads land in (monoio reads into owned buffers).
pub struct MonoioWire {
    stream: Stream,
    scratch: Vec<u8>,
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<ClientTlsStream<TcpStream>>),
}

impl Wire for MonoioWire {
    async fn connect(addr: &str, tls: Option<&RedisTls>) -> Result<MonoioWire, RemoteError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| RemoteError::Unreachable(format!("connect {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        let stream = match tls {
            None => Stream::Plain(stream),
            Some(tls) => {
                let secured = monoio_rustls::TlsConnector::from(tls.config.clone())
                    .connect(tls.name.clone(), stream)
                    .await
                    .map_err(|e| {
                        RemoteError::Unreachable(format!("TLS handshake with {addr}: {e}"))
                    })?;
                Stream::Tls(Box::new(secured))
            }
        };
        Ok(MonoioWire {
            stream,
            scratch: Vec::with_capacity(16 * 1024),
        })
    }

    async fn connect_unix(path: &str) -> Result<MonoioWire, RemoteError> {
        Err(RemoteError::Failed(format!(
            "{path}: the cores reach Redis over TCP only (Unix sockets go through the control plane)"
        )))
    }

    async fn send(&mut self, buf: Vec<u8>) -> (std::io::Result<()>, Vec<u8>) {
        match &mut self.stream {
            Stream::Plain(s) => {
                let (sent, buf) = s.write_all(buf).await;
                (sent.map(drop), buf)
            }
            Stream::Tls(s) => {
                let (sent, buf) = s.write_all(buf).await;
                match sent {
                    Ok(_) => (s.flush().await, buf),
                    Err(e) => (Err(e), buf),
                }
            }
        }
    }

    async fn receive(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let (read, scratch) = match &mut self.stream {
            Stream::Plain(s) => s.read(scratch).await,
            Stream::Tls(s) => s.read(scratch).await,
        };
        if let Ok(n) = read {
            buf.extend_from_slice(&scratch[..n]);
        }
        self.scratch = scratch;
        read
    }

    async fn timeout<F: std::future::Future>(limit: Duration, f: F) -> Option<F::Output> {
        monoio::time::timeout(limit, f).await.ok()
    }
}
