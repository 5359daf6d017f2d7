//! The control plane's socket to Redis: a tokio TCP stream, wrapped by
//! tokio-rustls for `rediss://`, under the same [`Conn`](super::conn::Conn)
//! (codec, log-in, scripts) as the cores' links.

use super::conn::{Endpoint, RedisTls, Wire};
use super::remote::RemoteError;
use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

/// The name the control plane's connections give themselves.
pub const CONTROL_NAME: &str = "gateway-control";

/// The control plane's endpoint for `url`: for `rediss://`, the gateway's
/// roots (the platform's plus `SSL_CERT_FILE`), or no check at all with
/// `#insecure`; why not when the URL (or the roots) cannot be read.
pub fn control_endpoint(url: &str) -> Result<Endpoint, String> {
    let mut roots_error = None;
    let endpoint = Endpoint::from_url(url, CONTROL_NAME, |verify| match verify {
        true => crate::upstream::client_config()
            .map_err(|e| roots_error = Some(e.to_string()))
            .ok(),
        false => Some(crate::upstream::unverified_client_config()),
    });
    match (endpoint, roots_error) {
        (Some(endpoint), _) => Ok(endpoint),
        (None, Some(e)) => Err(e),
        (None, None) => Err(format!("not a redis:// or rediss:// URL: {}", redact(url))),
    }
}

/// `url` without its credentials, for a log line.
fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rsplit_once('@')) {
        (Some((scheme, _)), Some((_, rest))) => format!("{scheme}://***@{rest}"),
        _ => url.to_string(),
    }
}

/// Bytes read from the socket at most per read.
const READ_CHUNK: usize = 16 * 1024;

/// A tokio socket to Redis: plain, or TLS for `rediss://`.
pub enum TokioWire {
    /// `redis://`.
    Plain(TcpStream),
    /// `rediss://`.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Wire for TokioWire {
    async fn connect(addr: &str, tls: Option<&RedisTls>) -> Result<TokioWire, RemoteError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| RemoteError::Unreachable(format!("connect {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        Ok(match tls {
            None => TokioWire::Plain(stream),
            Some(tls) => {
                let secured = tokio_rustls::TlsConnector::from(tls.config.clone())
                    .connect(tls.name.clone(), stream)
                    .await
                    .map_err(|e| {
                        RemoteError::Unreachable(format!("TLS handshake with {addr}: {e}"))
                    })?;
                TokioWire::Tls(Box::new(secured))
            }
        })
    }

    async fn send(&mut self, out: Vec<u8>) -> (std::io::Result<()>, Vec<u8>) {
        let sent = match self {
            TokioWire::Plain(s) => s.write_all(&out).await,
            TokioWire::Tls(s) => match s.write_all(&out).await {
                Ok(()) => s.flush().await,
                Err(e) => Err(e),
            },
        };
        (sent, out)
    }

    async fn receive(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        buf.reserve(READ_CHUNK);
        match self {
            TokioWire::Plain(s) => s.read_buf(buf).await,
            TokioWire::Tls(s) => s.read_buf(buf).await,
        }
    }

    async fn timeout<F: Future>(limit: Duration, f: F) -> Option<F::Output> {
        tokio::time::timeout(limit, f).await.ok()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::limits::conn::{self, Conn, Plain};
    use crate::limits::resp::Reply;
    use tokio::net::TcpListener;

    /// A fake Redis on a local port: answers each connection's bytes with
    /// `answer` (what it read so far, all of it), until it closes.
    pub(crate) async fn fake_redis(
        answer: impl Fn(&[u8]) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let answer = std::sync::Arc::new(answer);
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        let Ok(n) = socket.read(&mut chunk).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&chunk[..n]);
                        if let Some(reply) = answer(&seen) {
                            seen.clear();
                            if socket.write_all(&reply).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    fn endpoint(addr: &str) -> Endpoint {
        Endpoint::from_url(&format!("redis://{addr}"), "t", |_| None).unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_pipeline_gets_one_reply_per_command_split_across_reads() {
        // Replies only once all four commands (set-up, then three) arrived,
        // each then dribbled in one write: the parser waits for more.
        let addr = fake_redis(|seen| {
            let text = String::from_utf8_lossy(seen);
            if text.contains("SETNAME") {
                return Some(b"+OK\r\n".to_vec());
            }
            (text.matches("INCR").count() == 2 && text.contains("PTTL"))
                .then(|| b":1\r\n-ERR wrong type\r\n*2\r\n$1\r\na\r\n:-2\r\n".to_vec())
        })
        .await;
        let mut conn = Conn::<TokioWire>::open(&endpoint(&addr), &addr)
            .await
            .unwrap();
        let commands: Vec<Vec<Vec<u8>>> = [["INCR", "a"], ["INCR", "b"], ["PTTL", "c"]]
            .iter()
            .map(|c| c.iter().map(|a| a.as_bytes().to_vec()).collect())
            .collect();
        let picks = [(0, false), (1, false), (2, false)];
        let replies = conn::send(&mut conn, &Plain(&commands), &picks)
            .await
            .unwrap();
        assert_eq!(
            replies,
            [
                Reply::Int(1),
                Reply::Error("ERR wrong type".into()),
                Reply::Array(Some(vec![Reply::Bulk(Some(b"a".to_vec())), Reply::Int(-2)])),
            ]
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_closed_connection_is_unreachable_and_refused_set_up_a_failure() {
        let addr = fake_redis(|_| Some(b"-WRONGPASS invalid password\r\n".to_vec())).await;
        let mut with_password = endpoint(&addr);
        with_password.password = Some("x".into());
        let err = Conn::<TokioWire>::open(&with_password, &addr)
            .await
            .err()
            .unwrap();
        assert!(
            matches!(&err, RemoteError::Failed(e) if e.contains("WRONGPASS")),
            "{err:?}"
        );
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed_addr = closed.local_addr().unwrap().to_string();
        drop(closed);
        let err = Conn::<TokioWire>::open(&endpoint(&closed_addr), &closed_addr)
            .await
            .err()
            .unwrap();
        assert!(matches!(err, RemoteError::Unreachable(_)), "{err:?}");
    }
}
