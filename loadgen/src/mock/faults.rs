//! Connection-level fault helpers: abortive close and the process-wide
//! `reset-once` registry.

use std::collections::HashSet;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::Mutex;
use std::time::Duration;

/// Makes the socket `fd` send a TCP RST instead of a FIN when it is closed
/// (`SO_LINGER` with a zero timeout). The caller must still own `fd` and
/// close it by dropping its stream right after.
pub fn arm_reset(fd: RawFd) {
    // SAFETY: the caller owns the open socket `fd` for the duration of
    // this call; the borrow does not outlive it.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let _ = socket2::SockRef::from(&fd).set_linger(Some(Duration::ZERO));
}

/// Ids already seen with `x-mock-fault: reset-once:<id>`, shared by all
/// worker threads. Only requests carrying that header touch the lock.
#[derive(Default)]
pub struct ResetOnce {
    seen: Mutex<HashSet<String>>,
}

impl ResetOnce {
    /// True the first time `id` is seen in this process, false afterwards.
    pub fn first(&self, id: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.contains(id) {
            false
        } else {
            seen.insert(id.to_string());
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_once_fires_once_per_id() {
        let r = ResetOnce::default();
        assert!(r.first("a"));
        assert!(!r.first("a"));
        assert!(r.first("b"));
        assert!(!r.first("b"));
    }
}
