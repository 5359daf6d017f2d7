//! Routes that exist only in debug builds run with `GATEWAY_TEST_HOOKS=1`,
//! for end-to-end tests of failure handling that no real input should reach.

use crate::error::GatewayError;
use crate::panic_guard::test_hooks_enabled as enabled;
use crate::server::{HeadBuilder, Responder};

/// Serves `path` when it is a test hook: `/__test/panic` panics before any
/// byte is sent, `/__test/panic-mid-stream` after the head and one chunk.
pub(super) async fn handle(
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
        _ => None,
    }
}
