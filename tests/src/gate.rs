//! A gate a stand-in server waits at before it answers: held, a request is
//! read and counted but its answer waits until the test releases it (at
//! most [`MAX_HOLD`]), so a test can order events without timing them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// Longest a held answer waits before it goes out anyway.
pub const MAX_HOLD: Duration = Duration::from_secs(30);

/// Open unless held; shared by the server's threads.
#[derive(Clone, Default)]
pub struct Gate(Arc<AtomicBool>);

impl Gate {
    /// Answers wait from now on.
    pub fn hold(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Waiting answers go out, and later ones at once.
    pub fn release(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    /// Waits while the gate is held (at most [`MAX_HOLD`]).
    pub fn pass(&self) {
        let since = Instant::now();
        while self.0.load(Ordering::SeqCst) && since.elapsed() < MAX_HOLD {
            thread::sleep(Duration::from_millis(2));
        }
    }
}
