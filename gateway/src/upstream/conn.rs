//! One upstream connection, plain TCP or TLS, behind one read/write API.

use monoio::buf::{IoBuf, IoBufMut, IoVecBuf};
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use monoio::BufResult;
use monoio_rustls::ClientTlsStream;

/// A connection to a provider.
pub enum UpstreamConn {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`.
    Tls(Box<ClientTlsStream<TcpStream>>),
}

impl UpstreamConn {
    /// Writes all of `buf`.
    pub async fn write_all<T: IoBuf + 'static>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            UpstreamConn::Plain(s) => s.write_all(buf).await,
            UpstreamConn::Tls(s) => s.write_all(buf).await,
        }
    }

    /// Flushes buffered TLS records.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        match self {
            UpstreamConn::Plain(_) => Ok(()),
            UpstreamConn::Tls(s) => s.flush().await,
        }
    }
}

impl AsyncReadRent for UpstreamConn {
    async fn read<T: IoBufMut>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            UpstreamConn::Plain(s) => s.read(buf).await,
            UpstreamConn::Tls(s) => s.read(buf).await,
        }
    }

    async fn readv<T: monoio::buf::IoVecBufMut>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            UpstreamConn::Plain(s) => s.readv(buf).await,
            UpstreamConn::Tls(s) => s.readv(buf).await,
        }
    }
}

/// The plain write API, for a connection split into halves (the realtime
/// relay); [`UpstreamConn::write_all`] and [`UpstreamConn::flush`] serve the
/// rest.
impl AsyncWriteRent for UpstreamConn {
    async fn write<T: IoBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            UpstreamConn::Plain(s) => s.write(buf).await,
            UpstreamConn::Tls(s) => s.write(buf).await,
        }
    }

    async fn writev<T: IoVecBuf>(&mut self, buf: T) -> BufResult<usize, T> {
        match self {
            UpstreamConn::Plain(s) => s.writev(buf).await,
            UpstreamConn::Tls(s) => s.writev(buf).await,
        }
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        match self {
            UpstreamConn::Plain(_) => Ok(()),
            UpstreamConn::Tls(s) => s.flush().await,
        }
    }

    async fn shutdown(&mut self) -> std::io::Result<()> {
        match self {
            UpstreamConn::Plain(s) => s.shutdown().await,
            UpstreamConn::Tls(s) => s.shutdown().await,
        }
    }
}

// SAFETY: reads and writes of both variants are independent, as monoio
// declares for `TcpStream` and monoio-rustls for its TLS stream over one
// (both `Split`); a split connection runs on one thread.
unsafe impl monoio::io::Split for UpstreamConn {}
