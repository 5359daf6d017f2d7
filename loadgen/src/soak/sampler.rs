//! Once-a-second samples of the gateway process and of the streams held.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::load::progress::ProgressSnapshot;
use crate::procfs;

/// One sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since sampling began.
    pub t_s: f64,
    /// Gateway resident memory, KiB.
    pub rss_kib: u64,
    /// Gateway CPU use since the previous sample, % of one CPU.
    pub cpu_pct: f64,
    /// Gateway open file descriptors (client and upstream sockets, plus a
    /// few fixed ones).
    pub open_fds: usize,
    /// Streams in flight on the client side.
    pub streams_open: u64,
    /// Streams completed so far.
    pub completed: u64,
    /// Streams failed so far.
    pub failed: u64,
    /// Requests of every kind (streams and non-streaming) completed so far.
    pub all_completed: u64,
}

/// Takes [`Sample`]s of one process.
pub struct Sampler {
    pid: u32,
    start: Instant,
    last: (Instant, Duration),
}

impl Sampler {
    /// Starts sampling process `pid`.
    pub fn new(pid: u32) -> Result<Sampler, String> {
        let now = Instant::now();
        Ok(Sampler {
            pid,
            start: now,
            last: (now, procfs::cpu_time(pid)?),
        })
    }

    /// Takes a sample now: the streams' progress, and the requests of
    /// every kind completed so far.
    pub fn sample(
        &mut self,
        progress: ProgressSnapshot,
        all_completed: u64,
    ) -> Result<Sample, String> {
        let now = Instant::now();
        let cpu = procfs::cpu_time(self.pid)?;
        let (then, cpu_then) = std::mem::replace(&mut self.last, (now, cpu));
        let wall = now.duration_since(then).as_secs_f64();
        Ok(Sample {
            t_s: now.duration_since(self.start).as_secs_f64(),
            rss_kib: procfs::memory(self.pid)?.rss_kib,
            cpu_pct: if wall > 0.0 {
                100.0 * cpu.saturating_sub(cpu_then).as_secs_f64() / wall
            } else {
                0.0
            },
            open_fds: procfs::open_fds(self.pid)?,
            streams_open: progress.in_flight,
            completed: progress.completed,
            failed: progress.failed,
            all_completed,
        })
    }
}

/// Smallest, largest and last value of a series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Range {
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Last.
    pub last: f64,
}

impl Range {
    /// The range of `values`; `None` when empty.
    pub fn of(values: impl IntoIterator<Item = f64>) -> Option<Range> {
        values.into_iter().fold(None, |acc, v| {
            Some(match acc {
                None => Range {
                    min: v,
                    max: v,
                    last: v,
                },
                Some(r) => Range {
                    min: r.min.min(v),
                    max: r.max.max(v),
                    last: v,
                },
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(Range::of([]), None);
        assert_eq!(
            Range::of([3.0, 1.0, 5.0, 2.0]),
            Some(Range {
                min: 1.0,
                max: 5.0,
                last: 2.0
            })
        );
    }

    #[test]
    fn samples_this_process() {
        let mut s = Sampler::new(std::process::id()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let sample = s
            .sample(
                ProgressSnapshot {
                    in_flight: 2,
                    completed: 5,
                    failed: 0,
                },
                7,
            )
            .unwrap();
        assert!(sample.rss_kib > 0 && sample.open_fds >= 3);
        assert_eq!((sample.streams_open, sample.all_completed), (2, 7));
        assert!(sample.t_s > 0.0);
    }
}
