//! Why a Redis exchange gave no answer.

use std::time::Duration;

/// Why a Redis call gave no answer; the caller falls back (local counters,
/// a cache miss, its own cooldowns).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteError {
    /// Redis could not be reached or did not answer within the deadline.
    #[error("redis unreachable: {0}")]
    Unreachable(String),
    /// Redis answered with an error.
    #[error("redis error: {0}")]
    Failed(String),
}

impl RemoteError {
    /// The error of an exchange that did not finish within `deadline`.
    pub fn timed_out(deadline: Duration) -> RemoteError {
        RemoteError::Unreachable(format!("no answer within {} ms", deadline.as_millis()))
    }
}
