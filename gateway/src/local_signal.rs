//! A one-shot signal for the tasks of one thread: once fired, it wakes every
//! task waiting on it, and every later wait ends at once.
//!
//! A core's connections wait on one between requests (shutdown) and its
//! upstream calls while they run (the end of the grace period). It takes no
//! lock and no atomic: a process-wide `tokio::sync::watch` would lock its
//! waiter list, shared by every core, twice a request.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A signal fired at most once and waited on by tasks of the thread that
/// owns it (it is neither `Send` nor `Sync`).
#[derive(Default)]
pub struct LocalSignal {
    fired: Cell<bool>,
    waiters: RefCell<Waiters>,
}

/// The wakers of pending waits, in slots a dropped wait gives back.
#[derive(Default)]
struct Waiters {
    slots: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl LocalSignal {
    /// Fires the signal: every pending wait is woken (later fires do
    /// nothing).
    pub fn fire(&self) {
        if self.fired.replace(true) {
            return;
        }
        let woken = std::mem::take(&mut *self.waiters.borrow_mut());
        for waker in woken.slots.into_iter().flatten() {
            waker.wake();
        }
    }

    /// Whether the signal has fired.
    pub fn fired(&self) -> bool {
        self.fired.get()
    }

    /// A future that ends when the signal fires (at once if it has).
    pub fn wait(&self) -> Wait<'_> {
        Wait {
            signal: self,
            slot: None,
        }
    }

    /// Waits registered and not yet dropped or woken.
    #[cfg(test)]
    fn pending(&self) -> usize {
        let w = self.waiters.borrow();
        w.slots.len() - w.free.len()
    }
}

/// What [`LocalSignal::wait`] returns; dropping it before the signal fires
/// gives its slot back.
pub struct Wait<'a> {
    signal: &'a LocalSignal,
    slot: Option<usize>,
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.fired.get() {
            self.slot = None;
            return Poll::Ready(());
        }
        let mut waiters = self.signal.waiters.borrow_mut();
        match self.slot {
            Some(i) => match &mut waiters.slots[i] {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            },
            None => {
                let waker = Some(cx.waker().clone());
                let i = match waiters.free.pop() {
                    Some(i) => {
                        waiters.slots[i] = waker;
                        i
                    }
                    None => {
                        waiters.slots.push(waker);
                        waiters.slots.len() - 1
                    }
                };
                drop(waiters);
                self.slot = Some(i);
            }
        }
        Poll::Pending
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        // Once fired, the slots are gone with the wakers they held.
        if let (Some(i), false) = (self.slot, self.signal.fired.get()) {
            let mut waiters = self.signal.waiters.borrow_mut();
            waiters.slots[i] = None;
            waiters.free.push(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn a_wait_is_pending_until_the_signal_fires_and_is_woken_once() {
        let signal = LocalSignal::default();
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let mut a = signal.wait();
        let mut b = signal.wait();
        assert!(Pin::new(&mut a).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut a).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut b).poll(&mut cx).is_pending());
        assert_eq!(signal.pending(), 2);
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        signal.fire();
        signal.fire();
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert!(signal.fired.get());
        assert!(Pin::new(&mut a).poll(&mut cx).is_ready());
        assert!(Pin::new(&mut b).poll(&mut cx).is_ready());
    }

    #[test]
    fn a_wait_after_the_signal_fired_ends_at_once() {
        let signal = LocalSignal::default();
        let (_, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        signal.fire();
        assert!(Pin::new(&mut signal.wait()).poll(&mut cx).is_ready());
        assert_eq!(signal.pending(), 0);
    }

    #[test]
    fn dropped_waits_give_their_slots_back_and_are_not_woken() {
        let signal = LocalSignal::default();
        let (dropped, dropped_waker) = counting();
        let (kept, kept_waker) = counting();
        let mut kept_wait = signal.wait();
        assert!(Pin::new(&mut kept_wait)
            .poll(&mut Context::from_waker(&kept_waker))
            .is_pending());
        for _ in 0..1000 {
            let mut w = signal.wait();
            assert!(Pin::new(&mut w)
                .poll(&mut Context::from_waker(&dropped_waker))
                .is_pending());
        }
        assert_eq!(signal.pending(), 1);
        assert!(signal.waiters.borrow().slots.len() <= 2);
        signal.fire();
        assert_eq!(dropped.0.load(Ordering::SeqCst), 0);
        assert_eq!(kept.0.load(Ordering::SeqCst), 1);
        drop(kept_wait);
    }

    #[test]
    fn a_wait_polled_by_another_task_wakes_that_task() {
        let signal = LocalSignal::default();
        let (first, first_waker) = counting();
        let (second, second_waker) = counting();
        let mut w = signal.wait();
        assert!(Pin::new(&mut w)
            .poll(&mut Context::from_waker(&first_waker))
            .is_pending());
        assert!(Pin::new(&mut w)
            .poll(&mut Context::from_waker(&second_waker))
            .is_pending());
        signal.fire();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }
}
