//! Host name resolution off the core: `getaddrinfo` blocks, so each lookup
//! runs on a short-lived thread and the core awaits its answer. Answers are
//! cached per core for [`ANSWER_TTL`], failures for [`FAILURE_TTL`] (the
//! system resolver reports no TTL), and callers asking for a name already
//! being looked up wait for that lookup instead of starting another.
//!
//! Names can come from clients (image URLs), so both costs are bounded: at
//! most [`MAX_IN_FLIGHT`] lookup threads per resolver (a further name is
//! refused until one ends) and at most [`MAX_ENTRIES`] cached names (expired
//! ones are dropped when it is full; past that, answers are not cached).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long resolved addresses are reused.
pub const ANSWER_TTL: Duration = Duration::from_secs(60);
/// How long a failed lookup is remembered, so a dead name cannot make every
/// request start a lookup.
pub const FAILURE_TTL: Duration = Duration::from_secs(5);
/// Most names one resolver caches.
pub const MAX_ENTRIES: usize = 4096;
/// Most lookup threads one resolver runs at once.
pub const MAX_IN_FLIGHT: usize = 32;

/// The outcome of one lookup.
pub type Answer = Result<Vec<SocketAddr>, String>;

/// A blocking lookup of `host:port`, run on a lookup thread.
type Lookup = fn(&str, u16) -> Answer;

enum Entry {
    Known { answer: Answer, until: Instant },
    Pending(watch::Receiver<Option<Answer>>),
}

/// The resolver of one core.
pub struct Resolver {
    entries: RefCell<HashMap<(String, u16), Entry>>,
    /// Lookup threads running (each decrements it when it ends).
    in_flight: Arc<AtomicUsize>,
    max_entries: usize,
    max_in_flight: usize,
    lookup: Lookup,
}

impl Default for Resolver {
    fn default() -> Self {
        Resolver {
            entries: RefCell::default(),
            in_flight: Arc::default(),
            max_entries: MAX_ENTRIES,
            max_in_flight: MAX_IN_FLIGHT,
            lookup: system_lookup,
        }
    }
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
                    let rx = self.start_lookup(host, port)?;
                    if self.room_for(&mut entries, &key) {
                        entries.insert(key.clone(), Entry::Pending(rx.clone()));
                    }
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
        let mut entries = self.entries.borrow_mut();
        if self.room_for(&mut entries, &key) {
            entries.insert(
                key,
                Entry::Known {
                    answer: answer.clone(),
                    until: Instant::now() + ttl,
                },
            );
        }
        answer
    }

    /// Whether `key` may be cached: it is already, or there is room once
    /// expired answers are dropped.
    fn room_for(&self, entries: &mut HashMap<(String, u16), Entry>, key: &(String, u16)) -> bool {
        if entries.contains_key(key) || entries.len() < self.max_entries {
            return true;
        }
        let now = Instant::now();
        entries.retain(|_, e| match e {
            Entry::Known { until, .. } => now < *until,
            Entry::Pending(_) => true,
        });
        entries.len() < self.max_entries
    }

    /// Starts a lookup of `host:port` on its own thread, unless
    /// [`MAX_IN_FLIGHT`] are running already.
    fn start_lookup(
        &self,
        host: &str,
        port: u16,
    ) -> Result<watch::Receiver<Option<Answer>>, String> {
        let running = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if running >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(format!(
                "resolve {host}: {running} host name lookups are running already"
            ));
        }
        let (tx, rx) = watch::channel(None);
        let in_flight = self.in_flight.clone();
        let lookup = self.lookup;
        let host = host.to_string();
        let spawned = std::thread::Builder::new()
            .name("gateway-dns".into())
            .spawn(move || {
                let answer = lookup(&host, port);
                // Counted out before answering, so a caller that got its
                // answer sees room for the next lookup.
                in_flight.fetch_sub(1, Ordering::AcqRel);
                let _ = tx.send(Some(answer));
            });
        // A failure to spawn drops `tx`: the waiters see the channel close.
        if spawned.is_err() {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(rx)
    }
}

/// `getaddrinfo` for `host:port`.
fn system_lookup(host: &str, port: u16) -> Answer {
    (host, port)
        .to_socket_addrs()
        .map(|addrs| addrs.collect::<Vec<_>>())
        .map_err(|e| format!("resolve {host}: {e}"))
        .and_then(|addrs| {
            if addrs.is_empty() {
                Err(format!("resolve {host}: no address"))
            } else {
                Ok(addrs)
            }
        })
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

    fn slow_lookup(_: &str, port: u16) -> Answer {
        std::thread::sleep(Duration::from_millis(300));
        Ok(vec![SocketAddr::new(IpAddr::from([127, 0, 0, 1]), port)])
    }

    #[test]
    fn lookup_threads_are_bounded() {
        block_on(async {
            let r = Resolver {
                max_in_flight: 2,
                lookup: slow_lookup,
                ..Resolver::default()
            };
            let (a, b, c) = futures_util::future::join3(
                r.resolve("a.example", 80),
                r.resolve("b.example", 80),
                r.resolve("c.example", 80),
            )
            .await;
            assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
            let err = c.unwrap_err();
            assert!(err.contains("lookups are running already"), "{err}");
            // A refusal is not cached: once the others ended, it resolves.
            assert!(r.resolve("c.example", 80).await.is_ok());
            assert_eq!(r.in_flight.load(Ordering::Acquire), 0);
        });
    }

    #[test]
    fn the_cache_is_bounded() {
        block_on(async {
            let r = Resolver {
                max_entries: 4,
                ..Resolver::default()
            };
            for port in 1..=20 {
                assert!(r.resolve("localhost", port).await.is_ok());
                assert!(r.entries.borrow().len() <= 4);
            }
            // Expired answers make room for new ones.
            for entry in r.entries.borrow_mut().values_mut() {
                if let Entry::Known { until, .. } = entry {
                    *until = Instant::now();
                }
            }
            assert!(r.resolve("localhost", 21).await.is_ok());
            assert!(r
                .entries
                .borrow()
                .contains_key(&("localhost".to_string(), 21)));
        });
    }
}
