//! A client connection's socket: plain TCP, or TLS the gateway terminates,
//! behind the one read/write API the connection loop and the responder use.

use monoio::buf::{IoBuf, IoBufMut, IoVecBuf, IoVecBufMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::BufResult;
use monoio_rustls::ServerTlsStream;
use std::os::fd::{AsRawFd, RawFd};

/// An accepted client connection.
pub enum ClientStream {
    /// HTTP.
    Plain(TcpStream),
    /// HTTPS, with the descriptor of the TCP socket under it.
    Tls(Box<ServerTlsStream<TcpStream>>, RawFd),
}

impl ClientStream {
    /// Wraps a socket in TLS with the given acceptor (the handshake).
    pub async fn accept_tls(
        tcp: TcpStream,
        acceptor: &monoio_rustls::TlsAcceptor,
    ) -> std::io::Result<ClientStream> {
        let fd = tcp.as_raw_fd();
        let tls = acceptor.accept(tcp).await.map_err(std::io::Error::from)?;
        Ok(ClientStream::Tls(Box::new(tls), fd))
    }

    /// The TCP socket's descriptor (for a non-blocking peek).
    pub fn raw_fd(&self) -> RawFd {
        match self {
            ClientStream::Plain(s) => s.as_raw_fd(),
            ClientStream::Tls(_, fd) => *fd,
        }
    }

    /// Writes all of `buf`; over TLS its records are flushed to the socket.
    pub async fn write_all<T: IoBuf + 'static>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            ClientStream::Plain(s) => s.write_all(buf).await,
            ClientStream::Tls(s, _) => {
                let (res, buf) = s.write_all(buf).await;
                match res {
                    Ok(n) => (s.flush().await.map(|()| n), buf),
                    Err(e) => (Err(e), buf),
                }
            }
        }
    }

    /// Closes the write side (after a TLS close_notify).
    pub async fn shutdown(&mut self) -> std::io::Result<()> {
        match self {
            ClientStream::Plain(s) => s.shutdown().await,
            ClientStream::Tls(s, _) => s.shutdown().await,
        }
    }
}

impl AsyncReadRent for ClientStream {
    async fn read<T: IoBufMut>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            ClientStream::Plain(s) => s.read(buf).await,
            ClientStream::Tls(s, _) => s.read(buf).await,
        }
    }

    async fn readv<T: IoVecBufMut>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            ClientStream::Plain(s) => s.readv(buf).await,
            ClientStream::Tls(s, _) => s.readv(buf).await,
        }
    }
}

/// Writes without the TLS flush [`ClientStream::write_all`] adds: what a
/// connection split into halves (the realtime relay) writes through.
impl AsyncWriteRent for ClientStream {
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            ClientStream::Plain(s) => s.write(buf).await,
            ClientStream::Tls(s, _) => s.write(buf).await,
        }
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            ClientStream::Plain(s) => s.writev(buf).await,
            ClientStream::Tls(s, _) => s.writev(buf).await,
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        match self {
            ClientStream::Plain(s) => s.flush().await,
            ClientStream::Tls(s, _) => s.flush().await,
        }
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        match self {
            ClientStream::Plain(s) => s.shutdown().await,
            ClientStream::Tls(s, _) => s.shutdown().await,
        }
    }
}

// SAFETY: reads and writes of both variants are independent, as monoio
// declares for `TcpStream` and monoio-rustls for its TLS stream over one
// (both `Split`); a split connection runs on one thread.
unsafe impl monoio::io::Split for ClientStream {}
