//! A growable read buffer with a consumed prefix, filled through monoio's
//! owned-buffer reads without copying.

use monoio::buf::{IoBufMut, SliceMut};
use monoio::io::AsyncReadRent;

/// Bytes read from a socket and not yet consumed by the parser.
#[derive(Debug, Default)]
pub struct ReadBuffer {
    data: Vec<u8>,
    start: usize,
}

impl ReadBuffer {
    /// An empty buffer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        ReadBuffer {
            data: Vec::with_capacity(capacity),
            start: 0,
        }
    }

    /// The unconsumed bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data[self.start..]
    }

    /// Number of unconsumed bytes.
    pub fn len(&self) -> usize {
        self.data.len() - self.start
    }

    /// Whether nothing is buffered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Marks `n` bytes as consumed.
    pub fn consume(&mut self, n: usize) {
        self.start += n;
        debug_assert!(self.start <= self.data.len());
        if self.start == self.data.len() {
            self.data.clear();
            self.start = 0;
        }
    }

    /// Removes and returns the first `n` unconsumed bytes.
    pub fn take(&mut self, n: usize) -> Vec<u8> {
        let out = self.data[self.start..self.start + n].to_vec();
        self.consume(n);
        out
    }

    /// Reads once from `io`, appending; returns the bytes read (0 at EOF).
    pub async fn fill<R: AsyncReadRent>(&mut self, io: &mut R) -> std::io::Result<usize> {
        if self.start > 0 && self.start * 2 >= self.data.capacity() {
            self.data.drain(..self.start);
            self.start = 0;
        }
        if self.data.capacity() - self.data.len() < 4096 {
            self.data.reserve(16 * 1024);
        }
        let len = self.data.len();
        let cap = self.data.capacity();
        let tail: SliceMut<Vec<u8>> = std::mem::take(&mut self.data).slice_mut(len..cap);
        let (res, tail) = io.read(tail).await;
        self.data = tail.into_inner();
        res
    }
}
