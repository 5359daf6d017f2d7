//! Worker threads: one runtime and one listener per thread, accepting
//! connections and handing them to [`super::conn`].

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use monoio::net::TcpListener;
use monoio_rustls::TlsAcceptor;

use super::config::MockConfig;
use super::conn;
use super::faults::ResetOnce;
use super::listen;
use super::stats::{Snapshot, Stats};
use super::tls;
use crate::rt;

/// State shared by all workers of one mock server.
pub struct Shared {
    /// The server's settings.
    pub config: MockConfig,
    /// Served-request counters.
    pub stats: Stats,
    /// Ids already reset by `x-mock-fault: reset-once:<id>`.
    pub reset_once: ResetOnce,
    /// TLS acceptor when serving HTTPS.
    pub tls: Option<TlsAcceptor>,
    /// Files and batches uploaded and created (OpenAI's Files and Batch
    /// APIs).
    pub files: super::api::files::Store,
    next_id: AtomicU64,
}

impl Shared {
    /// The next process-wide response sequence number.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// One worker thread's view: the shared state and its own index (its stats
/// shard).
pub struct Worker {
    /// State shared with the other workers.
    pub shared: Arc<Shared>,
    /// This worker's index.
    pub index: usize,
}

/// A running mock server.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl MockServer {
    /// The bound address (with the real port when started with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Current counters, as served by `GET /_stats`.
    pub fn stats(&self) -> Snapshot {
        self.shared.stats.snapshot()
    }

    /// Starts [`Snapshot::peak_in_flight`] again from the calls held now.
    pub fn reset_peak_in_flight(&self) {
        self.shared.stats.reset_peak();
    }

    /// Blocks until every worker thread exits (normally never).
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Binds all listeners and starts the worker threads. Listeners are bound
/// before this returns, so connections to [`MockServer::addr`] succeed at once.
pub fn start(config: MockConfig) -> io::Result<MockServer> {
    config
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let tls = match (&config.tls_cert, &config.tls_key) {
        (Some(cert), Some(key)) => Some(
            tls::acceptor(cert, key).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
        ),
        _ => None,
    };
    let addr = listen::resolve(&config.host, config.port)?;
    let (listeners, addr) = listen::bind_group(addr, config.workers)?;
    let shared = Arc::new(Shared {
        stats: Stats::new(config.workers),
        config,
        reset_once: ResetOnce::default(),
        tls,
        files: Default::default(),
        next_id: AtomicU64::new(1),
    });
    let mut threads = Vec::with_capacity(listeners.len());
    for (index, listener) in listeners.into_iter().enumerate() {
        let shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("mock-{index}"))
            .spawn(move || {
                let worker = Rc::new(Worker { shared, index });
                rt::block_on(accept_loop(listener, worker));
            })?;
        threads.push(thread);
    }
    Ok(MockServer {
        addr,
        shared,
        threads,
    })
}

async fn accept_loop(listener: std::net::TcpListener, worker: Rc<Worker>) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("mock worker {}: listener: {e}", worker.index);
            return;
        }
    };
    loop {
        let (stream, _peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Typically EMFILE; back off instead of spinning.
                eprintln!("mock worker {}: accept: {e}", worker.index);
                monoio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let fd = stream.as_raw_fd();
        let worker = worker.clone();
        monoio::spawn(async move {
            match worker.shared.tls.clone() {
                None => conn::serve(stream, fd, worker).await,
                Some(acceptor) => {
                    if let Ok(tls) = acceptor.accept(stream).await {
                        conn::serve(tls, fd, worker).await;
                    }
                }
            }
        });
    }
}
