//! The load engine behind `run`, `overhead` and `soak`: worker threads, each
//! a monoio runtime driving its share of keep-alive connections, in open
//! loop (a fixed schedule, see [`crate::schedule`]) or closed loop (each
//! connection sends as soon as its previous response ends).

pub mod config;
pub mod progress;
pub mod report;
pub mod result;
mod worker;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use config::{LoadConfig, Mode};
pub use progress::Progress;
pub use report::LoadSummary;
pub use result::LoadResult;

use crate::client::RequestMix;

/// Time allowed for opening the connections before the first send, per
/// connection (the run starts after `STARTUP_BASE + connections * this`).
const STARTUP_PER_CONNECTION: Duration = Duration::from_micros(50);
/// Fixed part of the start-up allowance.
const STARTUP_BASE: Duration = Duration::from_millis(50);

/// State shared by all worker threads of one run.
struct Shared {
    config: LoadConfig,
    mix: RequestMix,
    start: Instant,
    /// Closed loop: requests claimed so far (for the request cap).
    claimed: AtomicU64,
    progress: Arc<Progress>,
}

/// Runs `config` to completion on `config.workers` threads and merges their
/// results. `progress` is updated live for samplers on other threads.
pub fn run(config: &LoadConfig, progress: &Arc<Progress>) -> Result<LoadResult, String> {
    config.validate()?;
    let startup = if config.ramp.is_zero() {
        STARTUP_BASE + STARTUP_PER_CONNECTION * config.connections as u32
    } else {
        STARTUP_BASE
    };
    let shared = Arc::new(Shared {
        mix: RequestMix::new(&config.spec, &config.target),
        config: config.clone(),
        start: Instant::now() + startup,
        claimed: AtomicU64::new(0),
        progress: progress.clone(),
    });
    let threads = (0..config.workers)
        .map(|index| {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("loadgen-{index}"))
                .spawn(move || worker::run(shared, index))
                .map_err(|e| format!("cannot start a load worker thread: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut total = LoadResult::default();
    for t in threads {
        let part = t
            .join()
            .map_err(|_| "a load worker thread panicked".to_string())?;
        total.merge(&part);
    }
    Ok(total)
}
