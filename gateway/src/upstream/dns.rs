//! Host name resolution off the core: `getaddrinfo` blocks, so each lookup
//! runs on a short-lived thread and the core awaits its answer. Answers are
//! cached per core for [`ANSWER_TTL`], failures for [`FAILURE_TTL`] (the
//! system resolver reports no TTL), and callers asking for a name already
//! being looked up wait for that lookup instead of starting another.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long resolved addresses are reused.
pub const ANSWER_TTL: Duration = Duration::from_secs(60);
/// How long a failed lookup is remembered, so a dead name cannot make every
/// request start a lookup.
pub const FAILURE_TTL: Duration = Duration::from_secs(5);

/// The outcome of one lookup.
pub type Answer = Result<Vec<SocketAddr>, String>;

enum Entry {
    Known { answer: Answer, until: Instant },
    Pending(watch::Receiver<Option<Answer>>),
}

/// The resolver of one core.
#[derive(Default)]
pub struct Resolver {
    entries: RefCell<HashMap<(String, u16), Entry>>,
}

impl Resolver {
    /// The addresses of `host:port`; IP literals never touch DNS.
    pub async fn resolve(&self, host: &str, port: u16) -> Answer {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let key = (host.to_string(), port);
        let mut rx = {
            let mut entries = self.entries.borrow_mut();
            match entries.get(&key) {
                Some(Entry::Known { answer, until }) if Instant::now() < *until => {
                    return answer.clone();
                }
                Some(Entry::Pending(rx)) => rx.clone(),
                _ => {
                    let rx = lookup_on_a_thread(host.to_string(), port);
                    entries.insert(key.clone(), Entry::Pending(rx.clone()));
                    rx
                }
            }
        };
        let answer = loop {
            if let Some(answer) = rx.borrow_and_update().clone() {
                break answer;
            }
            if rx.changed().await.is_err() {
                // The thread ended (or never started) without an answer,
                // unless it answered just before ending.
                break rx
                    .borrow()
                    .clone()
                    .unwrap_or_else(|| Err(format!("resolve {host}: resolver thread failed")));
            }
        };
        let ttl = if answer.is_ok() {
            ANSWER_TTL
        } else {
            FAILURE_TTL
        };
        self.entries.borrow_mut().insert(
            key,
            Entry::Known {
                answer: answer.clone(),
                until: Instant::now() + ttl,
            },
        );
        answer
    }
}

/// Starts `getaddrinfo` for `host:port` on its own thread.
fn lookup_on_a_thread(host: String, port: u16) -> watch::Receiver<Option<Answer>> {
    let (tx, rx) = watch::channel(None);
    // A failure to spawn drops `tx`: the waiters see the channel close.
    let _ = std::thread::Builder::new()
        .name("gateway-dns".into())
        .spawn(move || {
            let answer = (host.as_str(), port)
                .to_socket_addrs()
                .map(|addrs| addrs.collect::<Vec<_>>())
                .map_err(|e| format!("resolve {host}: {e}"))
                .and_then(|addrs| {
                    if addrs.is_empty() {
                        Err(format!("resolve {host}: no address"))
                    } else {
                        Ok(addrs)
                    }
                });
            let _ = tx.send(Some(answer));
        });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    #[test]
    fn literals_skip_dns_and_names_resolve_off_the_core_once_per_ttl() {
        block_on(async {
            let r = Resolver::default();
            assert_eq!(
                r.resolve("127.0.0.1", 9).await.unwrap(),
                vec!["127.0.0.1:9".parse().unwrap()]
            );
            assert_eq!(
                r.resolve("::1", 9).await.unwrap(),
                vec!["[::1]:9".parse().unwrap()]
            );
            // Concurrent callers share one lookup; the answer is cached.
            let (a, b) =
                futures_util::future::join(r.resolve("localhost", 80), r.resolve("localhost", 80))
                    .await;
            let a = a.unwrap();
            assert!(
                a.iter().all(|s| s.ip().is_loopback() && s.port() == 80),
                "{a:?}"
            );
            assert_eq!(Ok(a), b);
            assert!(matches!(
                r.entries.borrow().get(&("localhost".to_string(), 80)),
                Some(Entry::Known { answer: Ok(_), .. })
            ));
        });
    }

    #[test]
    fn failures_are_cached_briefly() {
        block_on(async {
            let r = Resolver::default();
            let name = "no-such-host.invalid";
            let err = r.resolve(name, 80).await.unwrap_err();
            assert!(err.contains(name), "{err}");
            let entries = r.entries.borrow();
            let Some(Entry::Known {
                answer: Err(_),
                until,
            }) = entries.get(&(name.to_string(), 80))
            else {
                panic!("failure not cached");
            };
            assert!(*until <= Instant::now() + FAILURE_TTL);
        });
    }
}
