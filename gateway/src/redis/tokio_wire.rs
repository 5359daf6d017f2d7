//! The control plane's socket to Redis: a tokio TCP stream, wrapped by
//! tokio-rustls for `rediss://`, under the same [`Conn`](super::conn::Conn)
//! (codec, log-in, scripts) as the cores' links.

use super::conn::Wire;
use super::endpoint::{Endpoint, RedisTls};
use super::error::RemoteError;
use std::future::Future;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
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

/// A tokio socket to Redis: plain, TLS for `rediss://`, or a Unix socket.
pub enum TokioWire {
    /// `redis://`.
    Plain(TcpStream),
    /// `rediss://`.
    Tls(Box<TlsStream<TcpStream>>),
    /// `unix://`, `redis+unix://`.
    Unix(UnixStream),
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

    async fn connect_unix(path: &str) -> Result<TokioWire, RemoteError> {
        UnixStream::connect(path)
            .await
            .map(TokioWire::Unix)
            .map_err(|e| RemoteError::Unreachable(format!("connect {path}: {e}")))
    }

    async fn send(&mut self, out: Vec<u8>) -> (std::io::Result<()>, Vec<u8>) {
        let sent = match self {
            TokioWire::Plain(s) => s.write_all(&out).await,
            TokioWire::Unix(s) => s.write_all(&out).await,
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
            TokioWire::Unix(s) => s.read_buf(buf).await,
        }
    }

    async fn timeout<F: Future>(limit: Duration, f: F) -> Option<F::Output> {
        tokio::time::timeout(limit, f).await.ok()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::redis::conn::{self, Conn, Picks, Plain};
    use crate::redis::resp::{self, Reply};
    use std::sync::Arc;
    use tokio::net::TcpListener;

    /// The reply a fake Redis gives one command (its arguments).
    pub(crate) type Answer = dyn Fn(&[Vec<u8>]) -> Vec<u8> + Send + Sync;

    /// A fake Redis on a local port: each command it reads gets the RESP
    /// bytes `answer` gives it, written a byte at a time (so replies reach
    /// the client split across reads). Its `host:port`.
    pub(crate) async fn fake_redis(answer: Arc<Answer>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, answer.clone()));
            }
        });
        addr
    }

    /// Answers the commands read on `socket` until it closes.
    async fn serve(mut socket: impl AsyncReadExt + AsyncWriteExt + Unpin, answer: Arc<Answer>) {
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
            let mut out = Vec::new();
            while let Ok(Some((Reply::Array(Some(items)), used))) = resp::parse(&seen) {
                let args: Vec<Vec<u8>> = items
                    .into_iter()
                    .filter_map(|i| match i {
                        Reply::Bulk(Some(b)) => Some(b),
                        _ => None,
                    })
                    .collect();
                out.extend(answer(&args));
                seen.drain(..used);
            }
            for byte in out {
                if socket.write_all(&[byte]).await.is_err() {
                    return;
                }
            }
        }
    }

    /// `args` as text, for assertions.
    pub(crate) fn text(args: &[Vec<u8>]) -> String {
        args.iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    pub(crate) fn endpoint(addr: &str) -> Endpoint {
        Endpoint::from_url(&format!("redis://{addr}"), "t", |_| None).unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_pipeline_gets_one_reply_per_command_split_across_reads() {
        let addr = fake_redis(Arc::new(|args| match text(args).as_str() {
            "INCR a" => b":1\r\n".to_vec(),
            "INCR b" => b"-ERR wrong type\r\n".to_vec(),
            "PTTL c" => b"*2\r\n$1\r\na\r\n:-2\r\n".to_vec(),
            _ => b"+OK\r\n".to_vec(),
        }))
        .await;
        let mut conn = Conn::<TokioWire>::open(&endpoint(&addr), &addr)
            .await
            .unwrap();
        let commands: Vec<Vec<Vec<u8>>> = [["INCR", "a"], ["INCR", "b"], ["PTTL", "c"]]
            .iter()
            .map(|c| c.iter().map(|a| a.as_bytes().to_vec()).collect())
            .collect();
        for _ in 0..2 {
            let replies = conn::send(&mut conn, &Plain(&commands), Picks::All)
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
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_closed_connection_is_unreachable_and_refused_set_up_a_failure() {
        let addr = fake_redis(Arc::new(|args| match text(args).starts_with("AUTH") {
            true => b"-WRONGPASS invalid password\r\n".to_vec(),
            false => b"+OK\r\n".to_vec(),
        }))
        .await;
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

    #[test]
    fn control_endpoints_take_insecure_tls_and_refuse_other_urls() {
        let secure = control_endpoint("rediss://:pw@secure.example:6380/1").unwrap();
        assert!(secure.tls.is_some());
        assert_eq!(secure.name, CONTROL_NAME);
        let insecure = control_endpoint("rediss://secure.example:6380/#insecure").unwrap();
        assert!(insecure.tls.is_some(), "TLS without the check");
        let err = control_endpoint("http://u:secret@h:1/").unwrap_err();
        assert!(!err.contains("secret"), "{err}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn unix_sockets_are_reached_with_their_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("redis.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            if let Ok((socket, _)) = listener.accept().await {
                serve(
                    socket,
                    Arc::new(|args| match text(args).as_str() {
                        "SELECT 3" => b"+OK\r\n".to_vec(),
                        "INCR a" => b":1\r\n".to_vec(),
                        c if c.starts_with("CLIENT SETNAME") => b"+OK\r\n".to_vec(),
                        _ => b"-ERR unexpected\r\n".to_vec(),
                    }),
                )
                .await
            }
        });
        let endpoint = control_endpoint(&format!("unix://{}?db=3", path.display())).unwrap();
        let mut conn = Conn::<TokioWire>::open(&endpoint, &endpoint.addr)
            .await
            .unwrap();
        let replies = conn.exchange([["INCR", "a"]].iter()).await.unwrap();
        assert_eq!(replies, [Reply::Int(1)]);
    }
}
