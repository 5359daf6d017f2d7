//! An upstream call that the end of the grace period cuts off: counted in
//! [`Worker::attempts_in_flight`] while it runs, so the core's shutdown
//! (`server::shutdown`) knows when the cut calls have recorded their rows.

use crate::error::GatewayError;
use crate::state::Worker;
use std::future::Future;

/// Runs an upstream call (`fut`) until it ends or the grace period is over;
/// then it is dropped (its upstream connection closes) and the request gets
/// [`GatewayError::CutOff`], which its spend row records.
pub async fn unless_cut_off<F>(worker: &Worker, fut: F) -> Result<(), GatewayError>
where
    F: Future<Output = Result<(), GatewayError>>,
{
    let _running = InFlight::enter(worker);
    monoio::select! {
        result = fut => result,
        _ = worker.cut_off.wait() => Err(GatewayError::CutOff),
    }
}

/// Counts one upstream call in [`Worker::attempts_in_flight`] while it lives.
struct InFlight<'w>(&'w Worker);

impl<'w> InFlight<'w> {
    fn enter(worker: &'w Worker) -> Self {
        let n = &worker.attempts_in_flight;
        n.set(n.get() + 1);
        InFlight(worker)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let n = &self.0.attempts_in_flight;
        n.set(n.get().saturating_sub(1));
    }
}
