//! A core's tracking connection for its near copies ([`super::near`]):
//! subscribed to `__redis__:invalidate` (RESP2), it is where the data
//! connection's `CLIENT TRACKING on REDIRECT <id>` sends the keys Redis
//! invalidates. A key named there loses its near copy; a flush of the
//! database (no keys) empties it; the connection lost empties it and stops
//! it serving until a new one subscribed and the data connection
//! redirects to it.

use super::near::Near;
use crate::redis::{Conn, Endpoint, MonoioWire, Reply};
use std::rc::Rc;
use std::time::Duration;

/// The name the tracking connection gives itself (`CLIENT SETNAME`).
const TRACKING_NAME: &str = "gateway-cache-tracking";
/// The channel Redis publishes invalidations on.
const CHANNEL: &[u8] = b"__redis__:invalidate";
/// First and longest wait before connecting again.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(2));

/// Keeps `near` told of invalidations from the Redis of `endpoint` for as
/// long as the core runs, connecting again after a loss.
pub async fn track(near: Rc<Near>, endpoint: Endpoint, deadline: Duration) {
    let mut endpoint = endpoint;
    endpoint.name = TRACKING_NAME;
    let mut wait = BACKOFF.0;
    let mut complained = false;
    loop {
        let error = match subscribe(&endpoint, deadline).await {
            Ok((mut conn, id)) => {
                near.tracker_up(id);
                wait = BACKOFF.0;
                complained = false;
                let e = listen(&mut conn, &near).await;
                near.tracker_down();
                e
            }
            Err(e) => e,
        };
        if !complained {
            tracing::warn!(error = %error, "response cache: Redis tracking connection lost; the near cache is off until it is back");
            complained = true;
        }
        monoio::time::sleep(wait).await;
        wait = (wait * 2).min(BACKOFF.1);
    }
}

/// A connection subscribed to the invalidation channel, and its client id.
async fn subscribe(
    endpoint: &Endpoint,
    deadline: Duration,
) -> Result<(Conn<MonoioWire>, i64), String> {
    let setup = async {
        let mut conn = Conn::<MonoioWire>::open(endpoint, &endpoint.addr)
            .await
            .map_err(|e| e.to_string())?;
        let id = match conn.exchange([["CLIENT", "ID"]].iter()).await {
            Ok(r) => match r.first() {
                Some(Reply::Int(id)) => *id,
                other => return Err(format!("CLIENT ID: {other:?}")),
            },
            Err(e) => return Err(e.to_string()),
        };
        let subscribed = conn
            .exchange([[&b"SUBSCRIBE"[..], CHANNEL]].iter())
            .await
            .map_err(|e| e.to_string())?;
        match subscribed.first() {
            Some(Reply::Array(Some(items))) if is_bulk(items.first(), b"subscribe") => {}
            other => return Err(format!("SUBSCRIBE: {other:?}")),
        }
        Ok((conn, id))
    };
    monoio::time::timeout(deadline, setup)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {deadline:?}")))
}

/// Applies what arrives until the connection fails; returns why.
async fn listen(conn: &mut Conn<MonoioWire>, near: &Near) -> String {
    loop {
        match conn.receive().await {
            Ok(reply) => apply(&reply, near),
            Err(e) => return e.to_string(),
        }
    }
}

/// One pushed message: `["message", channel, keys]`, the keys `nil` when
/// the whole database was flushed.
fn apply(reply: &Reply, near: &Near) {
    let Reply::Array(Some(items)) = reply else {
        return;
    };
    if !is_bulk(items.first(), b"message") || !is_bulk(items.get(1), CHANNEL) {
        return;
    }
    match items.get(2) {
        Some(Reply::Array(Some(keys))) => {
            for key in keys {
                match key {
                    Reply::Bulk(Some(k)) => near.invalidate(k),
                    _ => near.flush(),
                }
            }
        }
        Some(Reply::Bulk(Some(k))) => near.invalidate(k),
        _ => near.flush(),
    }
}

fn is_bulk(reply: Option<&Reply>, text: &[u8]) -> bool {
    matches!(reply, Some(Reply::Bulk(Some(b))) if b.eq_ignore_ascii_case(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::local::Stored;
    use crate::cache::near::NearBounds;
    use std::time::Instant;

    fn bulk(b: &[u8]) -> Reply {
        Reply::Bulk(Some(b.to_vec()))
    }

    fn filled(keys: &[&str]) -> Near {
        let n = Near::default();
        n.fit(
            NearBounds {
                max_entries: 10,
                max_bytes: 1 << 20,
                ttl: None,
            },
            1,
        );
        n.tracker_up(1);
        n.data_opened(Some(1));
        n.answered(Instant::now());
        for k in keys {
            let stored = Stored::new(bytes::Bytes::from_static(b"{}"), 0);
            n.fill(&(*k).into(), n.ticket(k, Instant::now()), &stored, -1);
        }
        n
    }

    #[test]
    fn invalidations_and_flushes_apply() {
        let n = filled(&["a", "b", "c"]);
        let message = |keys: Reply| Reply::Array(Some(vec![bulk(b"message"), bulk(CHANNEL), keys]));
        apply(&message(Reply::Array(Some(vec![bulk(b"a")]))), &n);
        assert!(n.get("a", Instant::now()).is_none());
        assert!(n.get("b", Instant::now()).is_some());
        // Another channel's message changes nothing.
        let other = Reply::Array(Some(vec![
            bulk(b"message"),
            bulk(b"elsewhere"),
            Reply::Array(Some(vec![bulk(b"b")])),
        ]));
        apply(&other, &n);
        assert!(n.get("b", Instant::now()).is_some());
        // A flushed database: no keys, everything goes.
        apply(&message(Reply::Array(None)), &n);
        assert_eq!(n.usage().0, 0);
    }
}
