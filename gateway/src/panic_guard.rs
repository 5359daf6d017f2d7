//! Panic containment. monoio does not catch a panic inside a task: it
//! unwinds through the runtime and takes the core's thread (and so the
//! process) down. Every unit of work that handles outside input (one request,
//! one connection, one control-plane job) runs inside [`CatchPanic`], so a
//! panic costs that unit only: it is caught, counted and logged once by the
//! caller, which then fails just that unit.

use pin_project_lite::pin_project;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

/// Panics caught since start-up, in every thread.
static CAUGHT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// How many [`CatchPanic`] polls are on this thread's stack: while
    /// non-zero, the panic hook records the message instead of printing it,
    /// so the catcher logs it once, with its context.
    static CATCHING: Cell<u32> = const { Cell::new(0) };
    /// The message and location of the last panic recorded on this thread.
    static LAST: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Installs the process's panic hook: panics inside [`CatchPanic`] are left
/// to their catcher to log; any other panic is printed as before.
pub fn install_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if CATCHING.with(Cell::get) > 0 {
            let location = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let text = format!("{}{location}", payload_text(info.payload()));
            LAST.with(|l| *l.borrow_mut() = Some(text));
        } else if crate::logging::json() {
            let location = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let thread = std::thread::current();
            let message = format!(
                "thread '{}' panicked: {}{location}",
                thread.name().unwrap_or("unnamed"),
                payload_text(info.payload())
            );
            crate::logging::emergency(true, "panic", &message);
        } else {
            previous(info);
        }
    }));
}

/// Panics caught so far (`/health/readiness` reports it).
pub fn caught() -> u64 {
    CAUGHT.load(Ordering::Relaxed)
}

/// A caught panic: what it said and where.
#[derive(Debug)]
pub struct Panicked {
    /// The panic message, with its source location when the hook is installed.
    pub message: String,
}

impl std::fmt::Display for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

pin_project! {
    /// `inner`, with any panic while polling it turned into `Err(Panicked)`.
    /// Nothing is kept beside `inner`: a flag would be padded to the
    /// future's alignment (128 bytes for one holding a monoio timer) in
    /// every open connection. Like any future it is not polled once ready
    /// (`.await` never does); polled again after a panic, an `async` inner
    /// future panics once more, and that is caught too.
    pub struct CatchPanic<F> {
        #[pin]
        inner: F,
    }
}

impl<F> CatchPanic<F> {
    /// Wraps `inner`.
    pub fn new(inner: F) -> Self {
        CatchPanic { inner }
    }
}

impl<F: Future> Future for CatchPanic<F> {
    type Output = Result<F::Output, Panicked>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.project().inner;
        CATCHING.with(|c| c.set(c.get() + 1));
        let polled = catch_unwind(AssertUnwindSafe(|| inner.poll(cx)));
        CATCHING.with(|c| c.set(c.get().saturating_sub(1)));
        match polled {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => {
                CAUGHT.fetch_add(1, Ordering::Relaxed);
                let message = LAST
                    .with(|l| l.borrow_mut().take())
                    .unwrap_or_else(|| payload_text(payload.as_ref()).to_string());
                Poll::Ready(Err(Panicked { message }))
            }
        }
    }
}

/// Whether the debug-build test hooks are on (`GATEWAY_TEST_HOOKS=1`, read
/// once): routes and a model name that panic on purpose, for the tests of
/// this module's guarantees. Release builds have no hooks.
#[cfg(debug_assertions)]
pub fn test_hooks_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("GATEWAY_TEST_HOOKS").is_ok_and(|v| v == "1"))
}

/// Whether `model` is the test hooks' model that makes the request path
/// panic after authentication (`__test_panic__`).
#[cfg(debug_assertions)]
pub fn test_panic_model(model: &str) -> bool {
    model == "__test_panic__" && test_hooks_enabled()
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "non-string panic payload"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready<F: Future>(f: F) -> F::Output {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("test future was pending"),
        }
    }

    #[test]
    fn a_panic_becomes_an_error_and_is_counted() {
        let before = caught();
        let out = ready(CatchPanic::new(async {
            let v: Vec<u8> = Vec::new();
            v[3]
        }));
        let err = out.unwrap_err();
        assert!(err.message.contains("index out of bounds"), "{err}");
        assert!(caught() > before);
        assert_eq!(ready(CatchPanic::new(async { 7 })).unwrap(), 7);
        assert_eq!(CATCHING.with(Cell::get), 0, "the guard depth is restored");
    }

    #[test]
    fn catching_adds_nothing_to_a_futures_size() {
        // Aligned as a future holding a monoio timer is.
        #[repr(align(128))]
        struct Aligned([u8; 8]);
        let inner = async {
            let kept = Aligned([7; 8]);
            std::future::ready(()).await;
            kept.0[0]
        };
        let size = std::mem::size_of_val(&inner);
        let caught = CatchPanic::new(inner);
        assert_eq!(std::mem::size_of_val(&caught), size);
        assert_eq!(ready(caught).unwrap(), 7);
    }
}
