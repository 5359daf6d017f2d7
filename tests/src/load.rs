//! Steady load for the fault tests: a few client threads send requests
//! one after another (a new connection each, so no request can be mistaken
//! for a stale keep-alive), and record for each what a client saw and when,
//! tagged with the phase the test was in when it was sent.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::http::{is_timeout, Conn};

/// What a client saw of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// A whole response with this status.
    Answer(u16),
    /// A response head with this status, then a body cut short in a way
    /// the client can tell (chunked framing or Content-Length unfinished).
    Truncated(u16),
    /// No response (or no end of it) within the read timeout.
    Hung,
    /// The connection failed before a response head (refused, reset).
    ConnError(String),
}

/// One request of the load.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The phase (set by [`Load::phase`]) when it was sent.
    pub phase: u32,
    /// When it was sent, from the start of the load.
    pub sent: Duration,
    /// How long until the answer (or the failure).
    pub latency: Duration,
    /// What came back.
    pub seen: Seen,
    /// `x-litellm-call-id`, when a head came back.
    pub call_id: Option<String>,
    /// Whether it asked for a stream.
    pub stream: bool,
}

/// Builds request `n` of client thread `thread` in phase `phase` (the tag its
/// sample gets, so what a request asks for and the phase it is counted in
/// cannot disagree): the raw request bytes and whether it asks for a stream.
pub type MakeRequest = dyn Fn(usize, u64, u32) -> (Vec<u8>, bool) + Send + Sync;

/// The load's settings.
pub struct LoadSpec {
    /// The gateway's port.
    pub port: u16,
    /// Client threads.
    pub threads: usize,
    /// Pause between two requests of one thread.
    pub pause: Duration,
    /// How long a client waits for any byte before it calls it a hang.
    pub read_timeout: Duration,
    /// The requests.
    pub request: Arc<MakeRequest>,
}

/// A running load.
pub struct Load {
    stop: Arc<AtomicBool>,
    phase: Arc<AtomicU32>,
    sent: Arc<AtomicUsize>,
    samples: Arc<Mutex<Vec<Sample>>>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts the client threads.
    pub fn start(spec: LoadSpec) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let phase = Arc::new(AtomicU32::new(0));
        let sent = Arc::new(AtomicUsize::new(0));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let began = Instant::now();
        let spec = Arc::new(spec);
        let threads = (0..spec.threads)
            .map(|t| {
                let (stop, phase, sent, samples, spec) = (
                    stop.clone(),
                    phase.clone(),
                    sent.clone(),
                    samples.clone(),
                    spec.clone(),
                );
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Acquire) {
                        let tag = phase.load(Ordering::Acquire);
                        let (bytes, stream) = (spec.request)(t, n, tag);
                        n += 1;
                        let at = began.elapsed();
                        let started = Instant::now();
                        let (seen, call_id) = one(spec.port, &bytes, spec.read_timeout);
                        let sample = Sample {
                            phase: tag,
                            sent: at,
                            latency: started.elapsed(),
                            seen,
                            call_id,
                            stream,
                        };
                        samples
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(sample);
                        sent.fetch_add(1, Ordering::AcqRel);
                        std::thread::sleep(spec.pause);
                    }
                })
            })
            .collect();
        Load {
            stop,
            phase,
            sent,
            samples,
            threads,
        }
    }

    /// Tags the requests sent from now on with `phase`.
    pub fn phase(&self, phase: u32) {
        self.phase.store(phase, Ordering::Release);
    }

    /// Requests answered (or failed) so far.
    pub fn count(&self) -> usize {
        self.sent.load(Ordering::Acquire)
    }

    /// Waits until at least `n` more requests have finished, up to `timeout`.
    pub fn wait_for_more(&self, n: usize, timeout: Duration) {
        let target = self.count() + n;
        crate::eventually("the load to make progress", timeout, || {
            (self.count() >= target).then_some(())
        });
    }

    /// Stops the threads and returns every sample.
    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Release);
        for t in self.threads {
            let _ = t.join();
        }
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.clone()
    }
}

/// Sends one request on a new connection and reads its whole response.
fn one(port: u16, bytes: &[u8], read_timeout: Duration) -> (Seen, Option<String>) {
    let mut conn = match Conn::try_connect(port) {
        Ok(c) => c,
        Err(e) => return (Seen::ConnError(format!("connect: {e}")), None),
    };
    conn.set_read_timeout(read_timeout);
    if let Err(e) = conn.try_send(bytes) {
        return (Seen::ConnError(format!("send: {e}")), None);
    }
    let head = match conn.read_head() {
        Ok(h) => h,
        Err(e) if is_timeout(&e) => return (Seen::Hung, None),
        Err(e) => return (Seen::ConnError(format!("head: {e}")), None),
    };
    let call_id = head.header("x-litellm-call-id").map(str::to_string);
    match conn.try_read_body(&head) {
        Ok(_) => (Seen::Answer(head.status), call_id),
        Err(e) if is_timeout(&e) => (Seen::Hung, call_id),
        Err(_) => (Seen::Truncated(head.status), call_id),
    }
}

/// What the samples of one phase add up to.
#[derive(Debug, Clone, Default)]
pub struct PhaseReport {
    /// Requests sent.
    pub sent: usize,
    /// Complete 2xx answers.
    pub ok: usize,
    /// Answers by status class: 4xx, 5xx.
    pub client_errors: usize,
    /// 5xx answers.
    pub server_errors: usize,
    /// Bodies cut short (the client could tell).
    pub truncated: usize,
    /// Hangs.
    pub hung: usize,
    /// Connection errors before a head.
    pub conn_errors: usize,
    /// The slowest request.
    pub worst: Duration,
}

impl PhaseReport {
    /// Adds up the samples of `phase`.
    pub fn of(samples: &[Sample], phase: u32) -> PhaseReport {
        let mut r = PhaseReport::default();
        for s in samples.iter().filter(|s| s.phase == phase) {
            r.sent += 1;
            r.worst = r.worst.max(s.latency);
            match &s.seen {
                Seen::Answer(200..=299) => r.ok += 1,
                Seen::Answer(500..) => r.server_errors += 1,
                Seen::Answer(_) => r.client_errors += 1,
                Seen::Truncated(_) => r.truncated += 1,
                Seen::Hung => r.hung += 1,
                Seen::ConnError(_) => r.conn_errors += 1,
            }
        }
        r
    }
}

impl std::fmt::Display for PhaseReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "sent {}, 2xx {}, 4xx {}, 5xx {}, truncated {}, hung {}, connection errors {}, worst {} ms",
            self.sent,
            self.ok,
            self.client_errors,
            self.server_errors,
            self.truncated,
            self.hung,
            self.conn_errors,
            self.worst.as_millis()
        )
    }
}
