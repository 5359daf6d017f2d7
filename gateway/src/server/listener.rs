//! Binding one SO_REUSEPORT listener per core, after checking that no other
//! process holds the port (SO_REUSEPORT would otherwise share it silently).

use socket2::{Domain, Protocol, Socket, Type};
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

/// The listen address cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Another process listens on the port.
    #[error("port {port} is already in use on {host}: stop the other process or pass --port")]
    InUse {
        /// Host as given.
        host: String,
        /// Port.
        port: u16,
    },
    /// The host does not resolve.
    #[error("cannot resolve listen address {0}")]
    Resolve(String),
    /// Any other socket error.
    #[error("cannot listen on {addr}: {source}")]
    Io {
        /// Address.
        addr: SocketAddr,
        /// OS error.
        source: std::io::Error,
    },
}

/// Binds `count` listeners sharing `host:port` (port 0 picks one port for all).
pub fn bind_listeners(host: &str, port: u16, count: usize) -> Result<Vec<TcpListener>, BindError> {
    let mut addr = (host, port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| BindError::Resolve(format!("{host}:{port}")))?;
    let probe = socket(addr, false).map_err(|source| match source.kind() {
        std::io::ErrorKind::AddrInUse => BindError::InUse {
            host: host.to_string(),
            port,
        },
        _ => BindError::Io { addr, source },
    })?;
    if port == 0 {
        let local = probe
            .local_addr()
            .map_err(|source| BindError::Io { addr, source })?;
        addr.set_port(local.as_socket().map_or(0, |a| a.port()));
    }
    drop(probe);
    (0..count)
        .map(|_| {
            socket(addr, true)
                .and_then(|s| {
                    s.listen(4096)?;
                    s.set_nonblocking(true)?;
                    Ok(s.into())
                })
                .map_err(|source| BindError::Io { addr, source })
        })
        .collect()
}

fn socket(addr: SocketAddr, reuse_port: bool) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if reuse_port {
        s.set_reuse_port(true)?;
    }
    // Without SO_REUSEPORT, bind fails against any socket listening on the
    // port, including another process's SO_REUSEPORT listeners.
    s.bind(&addr.into())?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_a_port_another_socket_listens_on() {
        let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = other.local_addr().unwrap().port();
        let err = bind_listeners("127.0.0.1", port, 2).unwrap_err();
        assert!(matches!(err, BindError::InUse { .. }), "{err}");
        assert!(err.to_string().contains(&port.to_string()));
    }

    #[test]
    fn binds_every_core_to_one_port() {
        let ls = bind_listeners("127.0.0.1", 0, 3).unwrap();
        let ports: Vec<u16> = ls.iter().map(|l| l.local_addr().unwrap().port()).collect();
        assert!(ports.iter().all(|p| *p == ports[0] && *p != 0));
    }
}
