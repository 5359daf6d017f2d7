//! Delivery of budget alerts, on the control thread: one JSON POST per
//! target over a fresh connection (TLS for https), a hand-written HTTP/1.1
//! request, and only the status line read back. A failure is retried once
//! after a second, then logged with the URL's host (never the whole URL:
//! Slack's carries its secret).

use super::{AlertTarget, AlertUrl, BudgetAlert};
use rustls::pki_types::ServerName;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Time one attempt may take, connect to status line.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause before the one retry.
const RETRY_DELAY: Duration = Duration::from_secs(1);
/// Longest status line read.
const MAX_STATUS_LINE: usize = 8 << 10;

/// Why one POST failed.
#[derive(Debug, thiserror::Error)]
enum PostError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("answered {0}")]
    Status(u16),
    #[error("the answer is not HTTP")]
    NotHttp,
}

/// Sends `alert` to every target, concurrently.
pub async fn deliver(
    targets: Arc<Vec<AlertTarget>>,
    tls: Arc<rustls::ClientConfig>,
    alert: BudgetAlert,
) {
    let sends = targets.iter().map(|target| {
        let body = alert.body(target.channel);
        let tls = tls.clone();
        async move { send(target, &tls, &body).await }
    });
    futures_util::future::join_all(sends).await;
}

/// POSTs `body` to one target, retrying once.
async fn send(target: &AlertTarget, tls: &Arc<rustls::ClientConfig>, body: &[u8]) {
    let host = &target.url.host;
    let mut result = attempt(&target.url, tls, body).await;
    if let Err(e) = &result {
        tracing::debug!(target: "gateway::alerts", host, error = %e, "alert POST failed; retrying in 1 s");
        tokio::time::sleep(RETRY_DELAY).await;
        result = attempt(&target.url, tls, body).await;
    }
    match result {
        Ok(status) => {
            tracing::debug!(target: "gateway::alerts", host, status, channel = ?target.channel, "alert delivered")
        }
        Err(e) => {
            tracing::warn!(target: "gateway::alerts", host, error = %e, channel = ?target.channel, "alert delivery failed")
        }
    }
}

/// One POST within [`ATTEMPT_TIMEOUT`]; the 2xx status on success.
async fn attempt(
    url: &AlertUrl,
    tls: &Arc<rustls::ClientConfig>,
    body: &[u8],
) -> Result<u16, PostError> {
    let post = async {
        let tcp = TcpStream::connect((url.host.as_str(), url.port)).await?;
        tcp.set_nodelay(true)?;
        let request = request(url, body);
        if url.tls {
            let name = ServerName::try_from(url.host.clone()).map_err(|e| {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
            })?;
            let connector = tokio_rustls::TlsConnector::from(tls.clone());
            exchange(connector.connect(name, tcp).await?, &request).await
        } else {
            exchange(tcp, &request).await
        }
    };
    match tokio::time::timeout(ATTEMPT_TIMEOUT, post).await {
        Err(_) => Err(PostError::Timeout(ATTEMPT_TIMEOUT)),
        Ok(Ok(status)) if (200..300).contains(&status) => Ok(status),
        Ok(Ok(status)) => Err(PostError::Status(status)),
        Ok(Err(e)) => Err(e),
    }
}

/// The request bytes: head and JSON body, one request per connection.
fn request(url: &AlertUrl, body: &[u8]) -> Vec<u8> {
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: gateway/{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        url.target,
        url.host_header,
        crate::VERSION,
        body.len()
    );
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Writes `request` and reads the response's status line.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &[u8],
) -> Result<u16, PostError> {
    stream.write_all(request).await?;
    stream.flush().await?;
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    while !buf.contains(&b'\n') {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() > MAX_STATUS_LINE {
            return Err(PostError::NotHttp);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    status_of(&buf).ok_or(PostError::NotHttp)
}

/// The status code of a response starting `HTTP/1.x NNN`.
fn status_of(response: &[u8]) -> Option<u16> {
    let line = response.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    parts.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn reads_the_status_line() {
        assert_eq!(status_of(b"HTTP/1.1 204 No Content\r\n"), Some(204));
        assert_eq!(status_of(b"HTTP/1.0 500\r\n\r\n"), Some(500));
        assert_eq!(status_of(b"SSH-2.0-OpenSSH\r\n"), None);
    }

    #[test]
    fn the_request_is_a_complete_post() {
        let url = AlertUrl::parse("http://127.0.0.1:9/hook?a=b").unwrap();
        let text = String::from_utf8(request(&url, b"{}")).unwrap();
        assert!(
            text.starts_with("POST /hook?a=b HTTP/1.1\r\nHost: 127.0.0.1:9\r\n"),
            "{text}"
        );
        assert!(
            text.ends_with("Content-Length: 2\r\nConnection: close\r\n\r\n{}"),
            "{text}"
        );
    }

    /// Answers each connection with the next status, returns the bodies seen.
    async fn receiver(
        statuses: &'static [u16],
    ) -> (AlertUrl, tokio::task::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = tokio::spawn(async move {
            let mut seen = Vec::new();
            for status in statuses {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap();
                seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                let reply = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
                conn.write_all(reply.as_bytes()).await.unwrap();
            }
            seen
        });
        let url = AlertUrl::parse(&format!("http://127.0.0.1:{port}/hook")).unwrap();
        (url, seen)
    }

    #[test]
    fn a_failed_post_is_retried_once() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let tls = crate::upstream::client_config().unwrap();
            let (url, seen) = receiver(&[503, 200]).await;
            let target = AlertTarget {
                channel: crate::alerts::Channel::Slack,
                url,
            };
            assert!(matches!(
                attempt(&target.url, &tls, b"{}").await,
                Err(PostError::Status(503))
            ));
            assert!(matches!(attempt(&target.url, &tls, b"{}").await, Ok(200)));
            let seen = seen.await.unwrap();
            assert_eq!(seen.len(), 2);
            assert!(seen[1].ends_with("\r\n\r\n{}"), "{}", seen[1]);

            let (url, seen) = receiver(&[500, 204]).await;
            send(
                &AlertTarget {
                    channel: target.channel,
                    url,
                },
                &tls,
                b"{\"text\":\"x\"}",
            )
            .await;
            assert_eq!(seen.await.unwrap().len(), 2, "one retry after the 500");
        });
    }
}
