//! Per-thread monoio runtimes: io_uring when the kernel allows it, epoll
//! (monoio's legacy driver) otherwise.

use std::future::Future;

/// Submission queue size of each io_uring runtime.
const URING_ENTRIES: u32 = 4096;

/// Environment variable that forces the legacy (epoll) driver when set to
/// `legacy`, e.g. to compare drivers or to test the fallback path.
pub const DRIVER_ENV: &str = "LOADGEN_DRIVER";

/// Runs `fut` to completion on a new runtime owned by the calling thread.
///
/// Tries an io_uring driver with `COOP_TASKRUN` and `SINGLE_ISSUER` first and
/// falls back to the legacy driver if that cannot be built (old kernel,
/// seccomp, `io_uring_disabled`) or if [`DRIVER_ENV`] is `legacy`.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    if std::env::var(DRIVER_ENV).is_ok_and(|v| v == "legacy") {
        return block_on_legacy(fut);
    }
    let mut uring = io_uring::IoUring::builder();
    uring.setup_coop_taskrun().setup_single_issuer();
    let built = monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
        .with_entries(URING_ENTRIES)
        .uring_builder(uring)
        .enable_timer()
        .build();
    match built {
        Ok(mut rt) => rt.block_on(fut),
        Err(e) => {
            eprintln!("io_uring runtime unavailable ({e}); using the legacy driver");
            block_on_legacy(fut)
        }
    }
}

fn block_on_legacy<F: Future>(fut: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("build legacy monoio runtime")
        .block_on(fut)
}
