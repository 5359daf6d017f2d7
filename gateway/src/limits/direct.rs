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
        if settlements_only(&batch) {
            // Nobody waits for a settlement: it rides with the next
            // admission's round trip, ahead of it, when one comes soon.
            hold_settlements(&link, &mut batch, FINISH_HOLD).await;
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

/// Whether `batch` holds settlements and nothing else.
fn settlements_only(batch: &[Call]) -> bool {
    batch.iter().all(|call| matches!(call, Call::Finish { .. }))
}

/// Takes what is queued on `link` into `batch` (settlements only) until it
/// holds something else (an admission to ride with) or `hold` has passed.
/// Other settlements arriving meanwhile, or a wake-up left by calls a
/// previous flush already took, do not end the wait: each would otherwise
/// send the settlements in a round trip (and a script call) of their own.
async fn hold_settlements(link: &Link, batch: &mut Vec<Call>, hold: Duration) {
    let mut until = std::pin::pin!(monoio::time::sleep(hold));
    loop {
        let ended = monoio::select! {
            _ = link.wake.notified() => false,
            _ = &mut until => true,
        };
        batch.append(&mut link.queue.borrow_mut());
        if ended || !settlements_only(batch) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::verdict::Verdict;
    use crate::redis::RemoteError;
    use tokio::sync::oneshot;

    fn settlement(id: &str) -> Call {
        Call::Finish {
            entries: Vec::new(),
            request_id: id.into(),
            tick: 0,
            ticks: Vec::new(),
            tokens_used: 0,
        }
    }

    fn admission(id: &str) -> (Call, oneshot::Receiver<Result<Verdict, RemoteError>>) {
        let (reply, rx) = oneshot::channel();
        let call = Call::Admit {
            entries: Vec::new(),
            request_id: id.into(),
            deadline: Instant::now(),
            reply,
        };
        (call, rx)
    }

    fn ids(batch: &[Call]) -> Vec<&str> {
        batch
            .iter()
            .map(|call| match call {
                Call::Admit { request_id, .. } | Call::Finish { request_id, .. } => {
                    request_id.as_str()
                }
                Call::Script { .. } => "script",
            })
            .collect()
    }

    /// Queues `call` as `submit` does.
    fn push(link: &Link, call: Call) {
        link.queue.borrow_mut().push(call);
        link.wake.notify_one();
    }

    #[test]
    fn settlements_wait_past_other_settlements_for_the_admission_they_ride_with() {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("runtime")
            .block_on(async {
                let link = Rc::new(Link {
                    queue: RefCell::new(Vec::new()),
                    wake: Notify::new(),
                });
                // A wake-up left by a call the last flush already took.
                link.wake.notify_one();
                let mut batch = vec![settlement("f1")];
                let (a, _rx) = admission("a1");
                let feeder = {
                    let link = link.clone();
                    monoio::spawn(async move {
                        push(&link, settlement("f2"));
                        monoio::time::sleep(Duration::from_millis(1)).await;
                        push(&link, a);
                    })
                };
                // A hold far longer than the feeder takes: only the
                // admission ends it.
                hold_settlements(&link, &mut batch, Duration::from_secs(60)).await;
                feeder.await;
                assert_eq!(ids(&batch), ["f1", "f2", "a1"]);
            });
    }

    #[test]
    fn settlements_alone_go_when_the_hold_ends() {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("runtime")
            .block_on(async {
                let link = Link {
                    queue: RefCell::new(Vec::new()),
                    wake: Notify::new(),
                };
                let mut batch = vec![settlement("f1")];
                push(&link, settlement("f2"));
                hold_settlements(&link, &mut batch, Duration::from_millis(1)).await;
                assert_eq!(ids(&batch), ["f1", "f2"]);
            });
    }
}
