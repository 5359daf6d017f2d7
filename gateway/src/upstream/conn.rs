//! One upstream connection, plain TCP or TLS, behind one read/write API.

use monoio::buf::{IoBuf, IoBufMut};
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
