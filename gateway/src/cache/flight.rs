//! Single flight: concurrent identical requests on one replica make one
//! upstream call. The first miss for a key leads (it makes the call); a
//! later miss for the same key, on any core, follows: it waits, at most
//! the cache's follow deadline, for the leader's stored answer and is
//! answered with it as a hit. A leader that fails, is cut off, is dropped
//! or whose answer is not stored lets its followers go, and each makes its
//! own call, as does a follower whose wait ran out.
//!
//! The registry is a lock-free map (papaya) of key to flight, shared by
//! every core. A flight's answer is published once through a one-shot slot
//! under the flight's own mutex (taken by the requests of that key only:
//! once by a leader nobody follows), which wakes the followers' wakers.

use super::Stored;
use crate::keyed_hash::KeyedHash;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// One upstream call that requests for the same key wait on.
#[derive(Default)]
struct Flight {
    state: Mutex<State>,
}

/// A flight's answer once it ended (`Some(None)`: none, its followers make
/// their own calls) and the wakers of the followers waiting for it.
#[derive(Default)]
struct State {
    ended: Option<Option<Stored>>,
    waiters: Vec<Waker>,
}

impl Flight {
    /// Ends the flight with `stored` unless it has ended, waking every
    /// follower.
    fn end(&self, stored: Option<Stored>) {
        let waiters = {
            let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            if state.ended.is_some() {
                return;
            }
            state.ended = Some(stored);
            std::mem::take(&mut state.waiters)
        };
        for waker in waiters {
            waker.wake();
        }
    }
}

/// The replica's flights in progress, by cache key.
#[derive(Default)]
pub struct Flights {
    map: papaya::HashMap<Arc<str>, Arc<Flight>, KeyedHash>,
}

/// How a miss takes part in its key's flight.
pub enum Join {
    /// It leads: it makes the call and hands its answer to [`Lead::finish`].
    Lead(Lead),
    /// Another request leads: wait on it with [`Follow::wait`].
    Follow(Follow),
    /// It neither leads nor follows (it may not store, and nobody leads).
    Alone,
}

/// The leader's side of a flight: ends it when finished or dropped.
pub struct Lead {
    flights: Arc<Flights>,
    key: Arc<str>,
    flight: Arc<Flight>,
}

/// A follower's side of a flight.
pub struct Follow {
    flight: Arc<Flight>,
}

impl Flights {
    /// Joins the flight of `key`: leads when none is in progress and
    /// `may_lead`, follows one in progress when `may_follow`.
    pub fn join(self: &Arc<Self>, key: &Arc<str>, may_lead: bool, may_follow: bool) -> Join {
        let map = self.map.pin();
        if let Some(flight) = map.get(&**key) {
            return match may_follow {
                true => Join::Follow(Follow {
                    flight: flight.clone(),
                }),
                false => Join::Alone,
            };
        }
        if !may_lead {
            return Join::Alone;
        }
        let mine = Arc::new(Flight::default());
        let key = key.clone();
        match map.try_insert(key.clone(), mine.clone()) {
            Ok(_) => Join::Lead(Lead {
                flights: self.clone(),
                key,
                flight: mine,
            }),
            // Another core led first.
            Err(taken) if may_follow => Join::Follow(Follow {
                flight: taken.current.clone(),
            }),
            Err(_) => Join::Alone,
        }
    }

    /// Flights in progress.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no flight is in progress.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl Lead {
    /// Ends the flight with the answer stored for it (`None`: its followers
    /// make their own calls).
    pub fn finish(self, stored: Option<Stored>) {
        self.flight.end(stored);
        // `Drop` takes the flight out of the registry.
    }
}

impl Drop for Lead {
    fn drop(&mut self) {
        // A leader dropped before it finished (cancelled, panicked) lets
        // its followers go.
        self.flight.end(None);
        let map = self.flights.map.pin();
        let _ = map.remove_if(&*self.key, |_, f| Arc::ptr_eq(f, &self.flight));
    }
}

impl Follow {
    /// The leader's stored answer, waited for at most `wait`; `None` when
    /// it has none or took longer.
    pub async fn wait(self, wait: Duration) -> Option<Stored> {
        let ended = Ended {
            flight: self.flight,
            slot: None,
        };
        monoio::time::timeout(wait, ended).await.ok().flatten()
    }
}

/// A follower's wait for its flight's end: its answer, or none.
struct Ended {
    flight: Arc<Flight>,
    /// Where this wait's waker sits in the flight's list, once registered.
    slot: Option<usize>,
}

impl Future for Ended {
    type Output = Option<Stored>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Stored>> {
        let this = &mut *self;
        let mut state = this
            .flight
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(stored) = &state.ended {
            return Poll::Ready(stored.clone());
        }
        match this.slot {
            Some(i) => state.waiters[i].clone_from(cx.waker()),
            None => {
                this.slot = Some(state.waiters.len());
                state.waiters.push(cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored() -> Stored {
        Stored::new(bytes::Bytes::from_static(b"{}"), 1)
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn one_leads_others_follow_and_get_its_answer() {
        let flights = Arc::new(Flights::default());
        let Join::Lead(lead) = flights.join(&"k".into(), true, true) else {
            panic!("the first miss leads")
        };
        let Join::Follow(follow) = flights.join(&"k".into(), true, true) else {
            panic!("the second follows")
        };
        assert!(matches!(
            flights.join(&"k".into(), true, false),
            Join::Alone
        ));
        assert!(matches!(
            flights.join(&"other".into(), false, true),
            Join::Alone
        ));
        lead.finish(Some(stored()));
        assert!(flights.is_empty());
        let got = run(follow.wait(Duration::from_secs(5))).unwrap();
        assert_eq!(&got.body[..], b"{}");
    }

    #[test]
    fn a_dropped_or_failed_leader_lets_followers_go() {
        let flights = Arc::new(Flights::default());
        let Join::Lead(lead) = flights.join(&"k".into(), true, true) else {
            panic!()
        };
        let Join::Follow(follow) = flights.join(&"k".into(), true, true) else {
            panic!()
        };
        drop(lead);
        assert_eq!(flights.len(), 0);
        assert!(run(follow.wait(Duration::from_secs(5))).is_none());
        let Join::Lead(lead) = flights.join(&"k".into(), true, true) else {
            panic!("a new miss leads again")
        };
        let Join::Follow(follow) = flights.join(&"k".into(), true, true) else {
            panic!()
        };
        lead.finish(None);
        assert!(run(follow.wait(Duration::from_secs(5))).is_none());
    }

    #[test]
    fn a_follower_waits_no_longer_than_its_bound() {
        let flights = Arc::new(Flights::default());
        let Join::Lead(_lead) = flights.join(&"k".into(), true, true) else {
            panic!()
        };
        let Join::Follow(follow) = flights.join(&"k".into(), true, true) else {
            panic!()
        };
        assert!(run(follow.wait(Duration::from_millis(10))).is_none());
    }

    #[test]
    fn a_follower_on_another_thread_is_woken() {
        let flights = Arc::new(Flights::default());
        let Join::Lead(lead) = flights.join(&"k".into(), true, true) else {
            panic!()
        };
        let Join::Follow(follow) = flights.join(&"k".into(), true, true) else {
            panic!()
        };
        let waiter = std::thread::spawn(move || run(follow.wait(Duration::from_secs(30))));
        lead.finish(Some(stored()));
        assert!(waiter.join().unwrap().is_some());
    }
}
