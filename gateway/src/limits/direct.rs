//! Each core's own pipelined connection to Redis for per-request limiter
//! calls, so the request path makes one Redis round trip and no hop to
//! another thread. Calls queued on a core while a round trip is in flight
//! go out together in the next one (one pipeline per flush, per core).
//!
//! Every round trip has the limiter's deadline; connection errors and
//! timeouts feed the shared [`Breaker`] and drop the connection (a reply
//! may be in flight), script errors only fail their calls. A `NOSCRIPT`
//! reply loads the scripts again and resends those calls once. The flush
//! itself is [`super::link`], shared with the control plane.

use super::call::Call;
use super::link::{LinkConfig, Upstream};
use super::outcome::Reporter;
use super::release::Releases;
use crate::redis::MonoioWire;
use std::cell::{OnceCell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Calls waiting on one core before new ones are refused (the request then
/// is limited locally), so a stalled Redis cannot grow memory.
const MAX_QUEUED: usize = 4096;

/// Longest a batch of settlements alone waits for an admission to share its
/// round trip: at a steady rate each request then costs one round trip, not
/// two, and settlements still reach Redis before the admission queued after
/// them (a client's next request finds its slot free). Other replicas see a
/// slot freed this much later.
const FINISH_HOLD: Duration = Duration::from_millis(2);

/// One core's queue of calls and the task that sends them.
struct Link {
    queue: RefCell<Vec<Call>>,
    wake: Notify,
}

thread_local! {
    static LINK: OnceCell<Rc<Link>> = const { OnceCell::new() };
}

/// Queues `call` on this core's link, starting the link on first use.
/// Refused (`Err` with the call) when too many calls are waiting.
pub fn submit(config: &Arc<LinkConfig>, call: Call) -> Result<(), Call> {
    LINK.with(|cell| {
        let link = cell.get_or_init(|| {
            let link = Rc::new(Link {
                queue: RefCell::new(Vec::new()),
                wake: Notify::new(),
            });
            monoio::spawn(drive(link.clone(), config.clone()));
            link
        });
        let mut queue = link.queue.borrow_mut();
        if queue.len() >= MAX_QUEUED {
            return Err(call);
        }
        queue.push(call);
        drop(queue);
        link.wake.notify_one();
        Ok(())
    })
}

/// Sends whatever is queued, one round trip at a time, for as long as the
/// core runs; slot releases a failed round trip left go once they are due.
async fn drive(link: Rc<Link>, config: Arc<LinkConfig>) {
    let mut upstream = Upstream::<MonoioWire>::new(&config);
    let mut report = Reporter {
        breaker: &config.breaker,
        fallback_note: &config.fallback_note,
        last_complaint: None,
    };
    let mut releases = Releases::default();
    loop {
        let mut batch = std::mem::take(&mut *link.queue.borrow_mut());
        batch.extend(releases.due(Instant::now()));
        if batch.is_empty() {
            match releases.next_due() {
                Some(at) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    monoio::select! {
                        _ = link.wake.notified() => {}
                        _ = monoio::time::sleep(wait) => {}
                    }
                }
                None => link.wake.notified().await,
            }
            continue;
        }
        if batch.iter().all(|call| matches!(call, Call::Finish { .. })) {
            // Nobody waits for a settlement: it rides with the next
            // admission's round trip, ahead of it, when one comes soon.
            monoio::select! {
                _ = link.wake.notified() => {}
                _ = monoio::time::sleep(FINISH_HOLD) => {}
            }
            batch.append(&mut link.queue.borrow_mut());
        }
        // An admission whose request already gave up (deadline) and was
        // limited locally is not sent: nothing was charged for it yet.
        batch.retain(|call| !matches!(call, Call::Admit { reply, .. } if reply.is_closed()));
        if batch.is_empty() {
            continue;
        }
        config
            .calls
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        let next = upstream
            .flush(&config, &mut report, &mut releases, batch)
            .await;
        link.queue.borrow_mut().extend(next);
    }
}
