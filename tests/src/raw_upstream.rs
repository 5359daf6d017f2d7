//! A scripted upstream: a plain TCP server that reads each request (head and
//! Content-Length body) and answers with fixed bytes, for wire-level faults
//! the mock provider cannot produce (bad chunked framing, interim heads).

use crate::gate::Gate;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// The server, stopped on drop.
pub struct RawUpstream {
    port: u16,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
    last_request: Arc<Mutex<Vec<u8>>>,
    gate: Gate,
}

impl RawUpstream {
    /// Serves every request on every connection with `reply`, then closes
    /// the connection when `close_after` is set.
    pub fn start(reply: Vec<u8>, close_after: bool) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind raw upstream");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let port = listener.local_addr().expect("local addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let last_request = Arc::new(Mutex::new(Vec::new()));
        let gate = Gate::default();
        let (s, r, l, g) = (
            stop.clone(),
            requests.clone(),
            last_request.clone(),
            gate.clone(),
        );
        let reply = Arc::new(reply);
        thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (reply, r, l, g) = (reply.clone(), r.clone(), l.clone(), g.clone());
                        thread::spawn(move || serve(stream, &reply, close_after, (&r, &l), &g));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        RawUpstream {
            port,
            stop,
            requests,
            last_request,
            gate,
        }
    }

    /// An OpenAI chat upstream answering every request with one completion
    /// of `model` saying `content` (usage 14 + 12 = 26 tokens).
    pub fn chat_completion(model: &str, content: &str) -> RawUpstream {
        let answer = serde_json::json!({"id": "chatcmpl-held", "object": "chat.completion", "created": 1,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 14, "completion_tokens": 12, "total_tokens": 26}})
        .to_string();
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        RawUpstream::start(reply.into_bytes(), false)
    }

    /// Runs `sends` at once, each on its own thread, with this upstream's
    /// answers held until every send has either come back or reached the
    /// upstream: no request admitted by a limiter ends (and frees what it
    /// holds) before the last one is decided, however slowly the threads
    /// run. The results in the order of `sends`.
    pub fn burst<T: Send>(&self, sends: Vec<Box<dyn FnOnce() -> T + Send + '_>>) -> Vec<T> {
        let sent = sends.len();
        let answered = AtomicUsize::new(0);
        self.gate.hold();
        let reached_before = self.requests();
        thread::scope(|s| {
            let answered = &answered;
            let handles: Vec<_> = sends
                .into_iter()
                .map(|send| {
                    s.spawn(move || {
                        let r = send();
                        answered.fetch_add(1, Ordering::SeqCst);
                        r
                    })
                })
                .collect();
            crate::eventually(
                "every request of the burst answered or held upstream",
                Duration::from_secs(30),
                || {
                    let waiting = self.requests() - reached_before;
                    (answered.load(Ordering::SeqCst) + waiting >= sent).then_some(())
                },
            );
            self.gate.release();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// The gate its answers wait at (open unless held): a request is
    /// read and counted at once, its answer waits.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// `http://127.0.0.1:<port>/v1`.
    pub fn api_base(&self) -> String {
        crate::config::mock_api_base(self.port)
    }

    /// Requests read so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }

    /// The bytes of the last request read (head and body).
    pub fn last_request(&self) -> Vec<u8> {
        self.last_request
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(
    mut stream: TcpStream,
    reply: &[u8],
    close_after: bool,
    (requests, last): (&AtomicUsize, &Mutex<Vec<u8>>),
    gate: &Gate,
) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut buf = Vec::new();
    loop {
        let Some(len) = read_request(&mut stream, &mut buf) else {
            return;
        };
        if let Ok(mut l) = last.lock() {
            *l = buf[..len].to_vec();
        }
        buf.drain(..len);
        requests.fetch_add(1, Ordering::Relaxed);
        gate.pass();
        if stream.write_all(reply).is_err() || close_after {
            return;
        }
    }
}

/// Reads one whole request into `buf`; returns its length.
pub(crate) fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let body = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + body {
                return Some(end + 4 + body);
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}
