//! One worker thread: a monoio runtime running one task per connection.
//! Tasks take the next request from a shared source (the open-loop schedule
//! or the closed-loop budget) whenever their connection is free.

use std::cell::{Cell, RefCell};

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{LoadResult, Mode, Shared};
use crate::client::{Connection, Failure, RequestMix, Response, Target};
use crate::rt;
use crate::schedule::{self, Schedule};

/// Pause after a failed connect, so a refused port cannot spin a task.
const CONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// One request to send.
struct Job {
    /// Request number (selects model and key).
    index: u64,
    /// Open loop: when it is due.
    due: Option<Instant>,
}

/// This worker's view of the run.
struct Ctx {
    shared: Arc<Shared>,
    index: usize,
    /// Open loop: this worker's next schedule position.
    next: Cell<u64>,
    result: RefCell<LoadResult>,
    last_done: Cell<Instant>,
}

impl Ctx {
    /// The next request for any free connection of this worker, or `None`
    /// when the run is over.
    fn next_job(&self) -> Option<Job> {
        let cfg = &self.shared.config;
        match cfg.mode {
            Mode::Open { rate } => {
                // Worker w owns slots w, w + W, w + 2W, … of the schedule.
                let n = self.next.get();
                self.next.set(n + 1);
                let slot = n * cfg.workers as u64 + self.index as u64;
                (slot < cfg.open_slots(rate)).then(|| Job {
                    index: slot,
                    due: Some(self.shared.start + Schedule::new(rate).due(slot)),
                })
            }
            Mode::Closed => {
                let end = cfg.duration.map(|d| self.shared.start + d);
                if end.is_some_and(|end| Instant::now() >= end) {
                    return None;
                }
                let index = self.shared.claimed.fetch_add(1, Ordering::Relaxed);
                (index < cfg.requests.unwrap_or(u64::MAX)).then_some(Job { index, due: None })
            }
        }
    }
}

/// Runs worker `index` of a run to completion on the calling thread.
pub(super) fn run(shared: Arc<Shared>, index: usize) -> LoadResult {
    let start = shared.start;
    let ctx = Rc::new(Ctx {
        shared,
        index,
        next: Cell::new(0),
        result: RefCell::new(LoadResult::default()),
        last_done: Cell::new(start),
    });
    let workers = ctx.shared.config.workers;
    let connections = ctx.shared.config.connections;
    let task_ctx = ctx.clone();
    rt::block_on(async move {
        let tasks: Vec<_> = (index..connections)
            .step_by(workers)
            .map(|conn| monoio::spawn(connection_task(task_ctx.clone(), conn)))
            .collect();
        for t in tasks {
            t.await;
        }
    });
    let mut result = ctx.result.take();
    result.elapsed = ctx.last_done.get().saturating_duration_since(start);
    result
}

/// Drives connection number `conn` until the run has no more requests.
async fn connection_task(ctx: Rc<Ctx>, conn: usize) {
    let shared = &ctx.shared;
    let cfg = &shared.config;
    let target = &cfg.target;
    let offset = cfg
        .ramp
        .mul_f64(conn as f64 / cfg.connections.max(1) as f64);
    let mut connection = None;
    if offset.is_zero() {
        // Connect before the start so the first sends do not pay for it.
        connection = Connection::open(target).await.ok();
    }
    monoio::time::sleep_until((shared.start + offset).into()).await;
    while let Some(job) = ctx.next_job() {
        let claimed = Instant::now();
        if let Some(due) = job.due.filter(|&due| due > claimed) {
            monoio::time::sleep_until(due.into()).await;
        }
        let sent = Instant::now();
        let from = match job.due {
            Some(due) => {
                let offset = |t: Instant| t.saturating_duration_since(shared.start);
                let (due, claimed, sent) = (offset(due), offset(claimed), offset(sent));
                if schedule::is_late(due, claimed) {
                    ctx.result.borrow_mut().late += 1;
                }
                shared.start + schedule::charged_from(due, claimed, sent)
            }
            None => sent,
        };
        shared.progress.start();
        let outcome = monoio::time::timeout(
            cfg.timeout,
            exchange(&mut connection, target, &shared.mix, job.index),
        )
        .await
        .unwrap_or(Err(Failure::Timeout));
        let done = Instant::now();
        shared.progress.finish(outcome.is_ok());
        ctx.last_done.set(ctx.last_done.get().max(done));
        {
            let mut result = ctx.result.borrow_mut();
            result.sent += 1;
            result.record(&outcome, from, done, cfg.spec.stream);
        }
        match outcome {
            Ok(r) if r.keep_alive => {}
            Ok(_) => connection = None,
            Err(failure) => {
                connection = None;
                if failure == Failure::Connect {
                    monoio::time::sleep(CONNECT_BACKOFF).await;
                }
            }
        }
    }
}

/// Sends request `index` on `slot`'s connection, opening one if needed.
async fn exchange(
    slot: &mut Option<Connection>,
    target: &Target,
    mix: &RequestMix,
    index: u64,
) -> Result<Response, Failure> {
    let conn = match slot {
        Some(c) => c,
        None => slot.insert(Connection::open(target).await?),
    };
    mix.write(index, conn.request_buf());
    conn.exchange().await
}
