//! A growable read buffer with a consumed prefix, filled through monoio's
//! owned-buffer reads without copying.

use monoio::buf::{IoBufMut, SliceMut};
use monoio::io::AsyncReadRent;
use std::cell::RefCell;

/// What a buffer with no memory (new, or released) allocates to read into.
const RELEASED_REFILL: usize = 8 * 1024;

/// Released buffers of [`RELEASED_REFILL`] bytes each thread keeps for the
/// next one it needs: every request takes two (its client's read buffer,
/// freed while it is answered, and its upstream's), and an allocation of
/// that size misses the allocator's fast path.
const SPARES_KEPT: usize = 32;

thread_local! {
    static SPARES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer of [`RELEASED_REFILL`] bytes, a kept one when there is.
fn spare() -> Vec<u8> {
    SPARES
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| Vec::with_capacity(RELEASED_REFILL))
}

/// Keeps `data` for [`spare`] when it is of that size and fewer than
/// [`SPARES_KEPT`] are kept; frees it otherwise.
fn keep_spare(mut data: Vec<u8>) {
    if data.capacity() != RELEASED_REFILL {
        return;
    }
    data.clear();
    let _ = SPARES.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARES_KEPT {
            s.push(data);
        }
    });
}

/// Bytes read from a socket and not yet consumed by the parser.
#[derive(Debug, Default)]
pub struct ReadBuffer {
    data: Vec<u8>,
    start: usize,
}

impl ReadBuffer {
    /// An empty buffer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        let data = match capacity {
            RELEASED_REFILL => spare(),
            _ => Vec::with_capacity(capacity),
        };
        ReadBuffer { data, start: 0 }
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

    /// Frees the memory when nothing is buffered: a connection whose
    /// request is being answered (a stream held open for minutes) reads
    /// nothing meanwhile. The next [`ReadBuffer::fill`] allocates again.
    pub fn release_if_empty(&mut self) {
        if self.is_empty() {
            keep_spare(std::mem::take(&mut self.data));
            self.start = 0;
        }
    }

    /// Moves what is buffered into an allocation of `capacity` bytes (or
    /// of what is buffered, when more), when that is smaller than now.
    pub fn shrink_to(&mut self, capacity: usize) {
        let capacity = capacity.max(self.len());
        if capacity < self.data.capacity() {
            let mut data = Vec::with_capacity(capacity);
            data.extend_from_slice(self.bytes());
            self.data = data;
            self.start = 0;
        }
    }

    /// Reads once from `io`, appending; returns the bytes read (0 at EOF).
    pub async fn fill<R: AsyncReadRent>(&mut self, io: &mut R) -> std::io::Result<usize> {
        if self.start > 0 && self.start * 2 >= self.data.capacity() {
            self.data.drain(..self.start);
            self.start = 0;
        }
        if self.data.capacity() == 0 {
            self.data = spare();
        } else if self.data.capacity() - self.data.len() < (self.data.capacity() / 2).min(4096) {
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

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        keep_spare(std::mem::take(&mut self.data));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_buffer_holds_no_memory_and_reads_again() {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .unwrap()
            .block_on(async {
                let mut buf = ReadBuffer::with_capacity(8 * 1024);
                let mut input: &[u8] = b"GET / HTTP/1.1\r\n\r\n";
                assert_eq!(buf.fill(&mut input).await.unwrap(), 18);
                // Something unread: kept.
                buf.release_if_empty();
                assert_eq!(buf.bytes(), b"GET / HTTP/1.1\r\n\r\n");
                buf.consume(18);
                buf.release_if_empty();
                assert_eq!(buf.data.capacity(), 0);
                let mut more: &[u8] = b"next";
                assert_eq!(buf.fill(&mut more).await.unwrap(), 4);
                assert_eq!(buf.bytes(), b"next");
                assert_eq!(buf.data.capacity(), RELEASED_REFILL);
            });
    }

    #[test]
    fn a_freed_buffer_of_the_usual_size_is_reused_on_its_thread() {
        let first = ReadBuffer::with_capacity(RELEASED_REFILL);
        let memory = first.data.as_ptr();
        drop(first);
        let second = ReadBuffer::with_capacity(RELEASED_REFILL);
        assert_eq!(second.data.as_ptr(), memory, "the freed buffer, kept");
        assert_eq!(second.data.capacity(), RELEASED_REFILL);
        assert!(second.is_empty());
        let mut other = ReadBuffer::with_capacity(RELEASED_REFILL);
        assert_ne!(other.data.as_ptr(), memory, "one buffer, one owner");
        other.release_if_empty();
        assert_eq!(other.data.capacity(), 0, "released, and kept for the next");
        // Other sizes are freed, and never more than SPARES_KEPT are kept.
        drop(ReadBuffer::with_capacity(100));
        let held: Vec<ReadBuffer> = (0..SPARES_KEPT + 4)
            .map(|_| ReadBuffer::with_capacity(RELEASED_REFILL))
            .collect();
        drop(held);
        assert_eq!(SPARES.with(|s| s.borrow().len()), SPARES_KEPT);
        assert!(SPARES.with(|s| s.borrow().iter().all(|b| b.capacity() == RELEASED_REFILL)));
        drop(second);
    }

    #[test]
    fn a_shrunk_buffer_keeps_its_bytes_and_reads_without_growing() {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .unwrap()
            .block_on(async {
                let mut buf = ReadBuffer::with_capacity(8 * 1024);
                let mut input: &[u8] = b"head+data: 1";
                buf.fill(&mut input).await.unwrap();
                buf.consume(5);
                buf.shrink_to(1024);
                assert_eq!(buf.bytes(), b"data: 1");
                assert_eq!(buf.data.capacity(), 1024);
                buf.consume(7);
                // An empty small buffer reads into what it has.
                let mut event: &[u8] = b"data: 2\n\n";
                buf.fill(&mut event).await.unwrap();
                assert_eq!(buf.bytes(), b"data: 2\n\n");
                assert_eq!(buf.data.capacity(), 1024);
                // Never below what is buffered, never grown by shrinking.
                buf.shrink_to(4);
                assert_eq!(buf.bytes(), b"data: 2\n\n");
                assert_eq!(buf.data.capacity(), 9);
                buf.shrink_to(64 * 1024);
                assert_eq!(buf.data.capacity(), 9);
            });
    }
}
