//! Routes that exist only in debug builds run with `GATEWAY_TEST_HOOKS=1`,
//! for end-to-end tests of failure handling that no real input should reach.

use crate::downstream::{HeadBuilder, Responder};
use crate::error::GatewayError;
use crate::panic_guard::test_hooks_enabled as enabled;
use crate::state::Worker;

/// Serves `path` when it is a test hook: `/__test/panic` panics before any
/// byte is sent, `/__test/panic-mid-stream` after the head and one chunk,
/// `/__test/panic-control-job` sends the control plane a job that panics
/// (the caller gets the job's failure, a 503).
pub(super) async fn handle(
    worker: &Worker,
    path: &str,
    out: &mut Responder<'_>,
) -> Option<Result<(), GatewayError>> {
    if !enabled() {
        return None;
    }
    match path {
        "/__test/panic" => panic!("test hook: panic before the response"),
        "/__test/panic-mid-stream" => {
            let _ = out
                .start_stream(200, HeadBuilder::new(200), "text/event-stream")
                .await;
            let _ = out.send_chunk(b"data: {}\n\n").await;
            panic!("test hook: panic mid-stream")
        }
        "/__test/panic-control-job" => {
            let job = worker
                .shared
                .control
                .call(std::time::Duration::from_secs(5), |_ctx| async {
                    if enabled() {
                        panic!("test hook: a control-plane job panicked");
                    }
                });
            Some(job.await.map_err(|e| GatewayError::Store(e.to_string())))
        }
        _ => None,
    }
}
