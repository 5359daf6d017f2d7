//! The end of a core's life: wait for in-flight requests up to the grace
//! period, cut off the upstream calls still running (each then records its
//! spend row saying so; see `proxy::cut_off`), and hand every queued spend
//! row to the control plane before the core's runtime stops.

use crate::state::Worker;
use std::time::{Duration, Instant};

/// How long a core waits, after the cut-off, for its cut calls to record
/// their rows (they do so at once when woken; the bound covers a core that
/// is stuck elsewhere).
const CUT_OFF_WAIT: Duration = Duration::from_secs(2);
/// How long a core keeps offering its last rows to a full control-plane
/// queue before it gives up and says how many were lost.
const FLUSH_WAIT: Duration = Duration::from_secs(5);
/// Poll interval of the waits above.
const POLL: Duration = Duration::from_millis(5);

/// After the listener closed: lets open connections finish until
/// `deadline`, then cuts off the upstream calls still running, waits for
/// their rows, and flushes this core's spend rows to the control plane.
pub(super) async fn finish_core(worker: &Worker, deadline: Instant) {
    while worker.open_connections.get() > 0 && Instant::now() < deadline {
        monoio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = worker.open_connections.get();
    if left > 0 {
        tracing::warn!(
            connections = left,
            calls = worker.attempts_in_flight.get(),
            "grace period over; cutting off requests still running"
        );
        worker.cut_off.fire();
        let until = Instant::now() + CUT_OFF_WAIT;
        while worker.attempts_in_flight.get() > 0 && Instant::now() < until {
            monoio::time::sleep(POLL).await;
        }
    }
    // Budget slices go back to Redis once this core's requests are done
    // (a slice still held by another core's requests shrinks to them).
    crate::budget::slice::return_all(&worker.shared.limiter, FLUSH_WAIT).await;
    flush_all(worker).await;
}

/// Hands every queued row to the control plane, waiting for room in its
/// queue up to [`FLUSH_WAIT`].
async fn flush_all(worker: &Worker) {
    let until = Instant::now() + FLUSH_WAIT;
    loop {
        crate::proxy::flush_spend(worker);
        let queued = worker.spend_backlog.borrow().len();
        if queued == 0 {
            return;
        }
        if Instant::now() >= until {
            tracing::error!(
                rows = queued,
                "spend rows LOST: the control plane's queue stayed full at shutdown"
            );
            return;
        }
        monoio::time::sleep(POLL).await;
    }
}
