//! The data plane's server: one monoio runtime per core, each with its own
//! SO_REUSEPORT listener, connections and upstream pools; graceful shutdown.

mod conn;
mod listener;
mod memory;
mod runtime;
mod shutdown;
mod socket;

pub use listener::{bind_listeners, BindError};
pub use runtime::{choose as choose_io_driver, DriverError, IoDriver};

use crate::downstream::{ClientStream, Responder};
use crate::panic_guard::CatchPanic;
use crate::state::{Shared, Worker};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Serves on `listeners` (one per core) until shutdown, then waits for
/// in-flight requests up to the grace period. Returns when every core is done.
pub fn run(
    shared: Arc<Shared>,
    listeners: Vec<std::net::TcpListener>,
    driver: IoDriver,
) -> std::io::Result<()> {
    let workers = listeners.len();
    let handles: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(core, listener)| {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("gateway-core-{core}"))
                .spawn(move || runtime::block_on(driver, serve_core(shared, listener, workers)))
        })
        .collect::<Result<_, _>>()?;
    for h in handles {
        match h.join() {
            Ok(res) => res?,
            Err(_) => return Err(std::io::Error::other("a core's thread panicked")),
        }
    }
    Ok(())
}

/// How often each core hands its spend rows to the control plane and its log
/// lines to the writer thread.
const FLUSH_EVERY: Duration = Duration::from_millis(20);

async fn serve_core(shared: Arc<Shared>, listener: std::net::TcpListener, workers: usize) {
    let listener = match monoio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "cannot register the listener with the runtime");
            shared.begin_shutdown();
            return;
        }
    };
    let worker = Rc::new(Worker::new(shared.clone(), workers));
    shared.metrics.attach_this_thread();
    shared.tracer.attach_this_thread();
    let sweeper = worker.clone();
    spawn_guarded("sweeper", async move {
        let mut open_before: usize = 0;
        loop {
            monoio::time::sleep(Duration::from_secs(10)).await;
            sweeper.upstream.expire_idle();
            sweeper.shared.limiter.sweep();
            // Many connections closed since the last sweep (thousands of
            // streams ended): give their memory back. Not for every close:
            // a forced collect costs the pages the next requests fault in.
            let open = sweeper.open_connections.get();
            if open_before.saturating_sub(open) >= memory::COLLECT_AFTER_CLOSED {
                memory::collect_freed();
            }
            open_before = open;
        }
    });
    if shared.limiter.shared() && shared.limiter.settings().budget_slices {
        let slicer = worker.clone();
        spawn_guarded("budget slices", async move {
            let limiter = &slicer.shared.limiter;
            let every = crate::budget::slice::sweep_every(limiter);
            loop {
                monoio::time::sleep(every).await;
                crate::budget::slice::sweep(limiter).await;
            }
        });
    }
    if let Some(every) = shared.batch_polling {
        // One core a process polls the open batches (the store shares them
        // out among replicas).
        if shared.managed.take_poller() {
            spawn_guarded(
                "batch poller",
                crate::proxy::poll_batches(worker.clone(), every),
            );
        }
    }
    crate::logging::buffer_this_thread();
    let flusher = worker.clone();
    spawn_guarded("flusher", async move {
        loop {
            monoio::time::sleep(FLUSH_EVERY).await;
            crate::proxy::flush_spend(&flusher);
            crate::otel::flush_this_thread();
            crate::logging::flush_this_thread();
        }
    });
    let mut shutdown = shared.shutdown_signal();
    loop {
        if shared.is_shutting_down() {
            break;
        }
        // A connection the kernel has already accepted is taken before
        // shutdown is seen: dropping its finished accept would close it
        // unread.
        let accepted = monoio::select! {
            biased;
            a = listener.accept() => a,
            _ = shutdown.changed() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                monoio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
        };
        if worker.open_connections.get() >= worker.max_connections {
            if shared.client_tls.is_none() {
                monoio::spawn(refuse(stream));
            }
            continue;
        }
        // Counted before the task first runs, so a shutdown that begins
        // meanwhile waits for this connection.
        let slot = conn::OpenConnection::count(worker.clone());
        monoio::spawn(conn::task(stream, slot));
    }
    drop(listener);
    worker.shutdown.fire();
    let deadline = Instant::now() + shared.limits.shutdown_grace;
    shutdown::finish_core(&worker, deadline).await;
    crate::logging::flush_this_thread();
}

/// Spawns a core's background loop so that a panic in it is logged and ends
/// that loop only, never the core.
fn spawn_guarded(what: &'static str, fut: impl std::future::Future<Output = ()> + 'static) {
    monoio::spawn(async move {
        if let Err(panic) = CatchPanic::new(fut).await {
            tracing::error!(task = what, panic = %panic, "a core's background task panicked and stopped");
        }
    });
}

/// Answers a connection over the cap with 503 and closes it (with client
/// TLS it is closed unanswered: a handshake is what the cap saves).
async fn refuse(stream: monoio::net::TcpStream) {
    let mut stream = ClientStream::Plain(stream);
    let err = crate::error::GatewayError::Unavailable("too many open connections");
    let mut out = Responder::new(&mut stream, false, false, false);
    let _ = out.send_error(&err, None).await;
}
