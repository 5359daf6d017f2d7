//! The io driver of the per-core runtimes: io_uring with COOP_TASKRUN and
//! SINGLE_ISSUER where the kernel allows it, epoll otherwise.

use std::future::Future;

/// The driver every core runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoDriver {
    /// io_uring.
    Uring,
    /// epoll (monoio's legacy driver).
    Legacy,
}

/// `GATEWAY_IO_DRIVER` could not be honoured.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// Not one of auto, uring, legacy.
    #[error("GATEWAY_IO_DRIVER={0}: expected auto, uring or legacy")]
    Unknown(String),
    /// io_uring was required but does not work here.
    #[error("GATEWAY_IO_DRIVER=uring but io_uring is unavailable: {0}")]
    UringUnavailable(std::io::Error),
}

impl std::fmt::Display for IoDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IoDriver::Uring => "io_uring",
            IoDriver::Legacy => "epoll",
        })
    }
}

/// Picks the driver from `GATEWAY_IO_DRIVER` (`auto` probes io_uring).
pub fn choose(setting: Option<&str>) -> Result<IoDriver, DriverError> {
    match setting
        .unwrap_or("auto")
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "legacy" | "epoll" => Ok(IoDriver::Legacy),
        "uring" | "io_uring" => probe_uring()
            .map(|_| IoDriver::Uring)
            .map_err(DriverError::UringUnavailable),
        "auto" | "" => Ok(if probe_uring().is_ok() {
            IoDriver::Uring
        } else {
            IoDriver::Legacy
        }),
        other => Err(DriverError::Unknown(other.to_string())),
    }
}

fn uring_flags() -> io_uring::Builder {
    let mut b = io_uring::IoUring::builder();
    b.setup_coop_taskrun().setup_single_issuer();
    b
}

fn probe_uring() -> std::io::Result<()> {
    monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
        .uring_builder(uring_flags())
        .build()
        .map(drop)
}

/// Runs `fut` to completion on a new runtime of `driver` on this thread.
pub fn block_on<F: Future>(driver: IoDriver, fut: F) -> std::io::Result<F::Output> {
    match driver {
        IoDriver::Uring => {
            let mut rt = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
                .uring_builder(uring_flags())
                .enable_timer()
                .build()?;
            Ok(rt.block_on(fut))
        }
        IoDriver::Legacy => {
            let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
                .enable_timer()
                .build()?;
            Ok(rt.block_on(fut))
        }
    }
}
