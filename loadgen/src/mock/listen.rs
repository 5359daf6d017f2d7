//! `SO_REUSEPORT` listener group: one socket per worker, same port.

use std::io;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};

use socket2::{Domain, Protocol, Socket, Type};

/// Listen backlog of each socket.
const BACKLOG: i32 = 4096;

/// Resolves `host:port` to the first matching socket address.
pub fn resolve(host: &str, port: u16) -> io::Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("cannot resolve {host}")))
}

/// Binds `count` non-blocking listeners sharing `addr` through
/// `SO_REUSEPORT`. With port 0 the first socket picks the port and the rest
/// join it. Returns the listeners and the bound address.
pub fn bind_group(addr: SocketAddr, count: usize) -> io::Result<(Vec<TcpListener>, SocketAddr)> {
    let first = bind(addr)?;
    let bound = first.local_addr()?;
    let mut listeners = Vec::with_capacity(count);
    listeners.push(first);
    for _ in 1..count {
        listeners.push(bind(bound)?);
    }
    Ok((listeners, bound))
}

fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_shares_an_ephemeral_port() {
        let addr = resolve("127.0.0.1", 0).unwrap();
        let (ls, bound) = bind_group(addr, 3).unwrap();
        assert_ne!(bound.port(), 0);
        assert_eq!(ls.len(), 3);
        for l in &ls {
            assert_eq!(l.local_addr().unwrap(), bound);
        }
    }
}
