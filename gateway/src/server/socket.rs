//! Options of accepted client sockets that let the kernel find dead peers:
//! TCP_USER_TIMEOUT (unacknowledged data) and keep-alive probes (silence).

use monoio::net::TcpStream;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Silence before the first keep-alive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Time between probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes before the peer is declared dead.
const KEEPALIVE_PROBES: u32 = 3;

/// Sets TCP_NODELAY, keep-alive probes and a TCP_USER_TIMEOUT of
/// `write_timeout` on an accepted socket. Failures are ignored: the
/// options only make dead peers visible sooner.
pub fn tune(stream: &TcpStream, write_timeout: Duration) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_tcp_keepalive(
        Some(KEEPALIVE_IDLE),
        Some(KEEPALIVE_INTERVAL),
        Some(KEEPALIVE_PROBES),
    );
    // SAFETY: the descriptor belongs to `stream`, which outlives this borrow.
    let fd = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
    let _ = socket2::SockRef::from(&fd).set_tcp_user_timeout(Some(write_timeout));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_user_timeout_and_keepalive() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap();
        rt.block_on(async move {
            let stream = TcpStream::from_std(accepted).unwrap();
            tune(&stream, Duration::from_millis(1500));
            let fd = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
            let sock = socket2::SockRef::from(&fd);
            assert_eq!(
                sock.tcp_user_timeout().unwrap(),
                Some(Duration::from_millis(1500))
            );
            assert!(sock.keepalive().unwrap());
            assert_eq!(sock.keepalive_time().unwrap(), KEEPALIVE_IDLE);
            assert_eq!(sock.keepalive_retries().unwrap(), KEEPALIVE_PROBES);
            assert!(sock.nodelay().unwrap());
        });
    }
}
