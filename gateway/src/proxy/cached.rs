//! The cache phase's answers: a stored answer sent as the client asked for
//! it (whole, or played back as a stream), with `x-litellm-cache-key`.

use super::headers::litellm_headers;
use super::Outcome;
use crate::cache::{stream, Plan, Stored};
use crate::downstream::Responder;
use crate::error::GatewayError;
use bytes::Bytes;

/// A stored answer in the form `plan`'s client asked for: the body, or SSE
/// for a stream; `None` when it cannot be played back (then a miss).
pub(super) fn answer_of(plan: &Plan, stored: &Stored) -> Option<Bytes> {
    match plan.stream {
        true => stream::replay(plan.endpoint, &stored.body, plan.include_usage).map(Bytes::from),
        false => Some(stored.body.clone()),
    }
}

/// Sends `answer` (from [`answer_of`]) for `plan`.
pub(super) async fn send(
    plan: &Plan,
    answer: &[u8],
    out: &mut Responder<'_>,
    outcome: &Outcome,
) -> Result<(), GatewayError> {
    let mut headers = litellm_headers(200, outcome);
    headers.header("x-litellm-cache-key", &plan.key);
    let io = |_| GatewayError::Unavailable("client connection lost");
    if !plan.stream {
        return out
            .send(200, headers, "application/json", answer)
            .await
            .map_err(io);
    }
    out.start_stream(200, headers, "text/event-stream")
        .await
        .map_err(io)?;
    out.send_chunk(answer).await.map_err(io)?;
    out.end_stream().await.map_err(io)
}
