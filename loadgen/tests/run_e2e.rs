//! `loadgen run`'s engine against the in-process mock: every 2xx the load
//! generator counts is a request the mock served, and vice versa.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use loadgen::client::{RequestSpec, Target};
use loadgen::load::{self, LoadConfig, Mode};
use loadgen::mock::{self, MockConfig};

fn start_mock() -> SocketAddr {
    let server = mock::start(MockConfig {
        port: 0,
        workers: 1,
        ..MockConfig::default()
    })
    .expect("start mock");
    let addr = server.addr();
    // Workers run for the rest of the test process.
    std::mem::forget(server);
    addr
}

/// `GET /_stats` over a plain socket; returns the served-request count.
fn served(addr: SocketAddr) -> u64 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /_stats HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let body = text.split_once("\r\n\r\n").unwrap().1;
    let stats: serde_json::Value = serde_json::from_str(body).unwrap();
    stats["requests"].as_u64().unwrap()
}

fn config(addr: SocketAddr, mode: Mode, stream: bool) -> LoadConfig {
    LoadConfig {
        target: Target::parse(&format!("http://{addr}")).unwrap(),
        spec: RequestSpec {
            models: vec!["gpt-4o".into(), "gpt-4o-mini".into()],
            keys: vec!["sk-a".into(), "sk-b".into()],
            body_size: 2048,
            stream,
            max_tokens: 8,
            extra: None,
        },
        mode,
        connections: 4,
        workers: 1,
        duration: Some(Duration::from_secs(5)),
        requests: None,
        timeout: Duration::from_secs(10),
        ramp: Duration::ZERO,
    }
}

#[test]
fn counts_match_the_mock() {
    let addr = start_mock();

    let mut closed = config(addr, Mode::Closed, false);
    closed.requests = Some(300);
    let r = load::run(&closed, &Arc::default()).unwrap();
    assert_eq!((r.sent, r.ok(), r.failed()), (300, 300, 0));
    assert_eq!(r.latency.count(), 300);
    assert_eq!(
        r.first_byte.count(),
        0,
        "first byte is recorded for streams only"
    );
    assert_eq!(served(addr), 300);

    let mut open = config(addr, Mode::Open { rate: 400.0 }, true);
    open.duration = Some(Duration::from_millis(500));
    let r = load::run(&open, &Arc::default()).unwrap();
    assert_eq!((r.sent, r.ok(), r.failed()), (200, 200, 0));
    assert_eq!(r.first_byte.count(), 200);
    let s = r.latency.summary();
    assert!(s.p50_us > 0 && s.p50_us <= s.p99_us && s.p99_us <= s.max_us);
    assert!(r.first_byte.summary().p50_us <= s.p50_us);
    assert!(
        (300.0..=420.0).contains(&r.achieved_rps()),
        "open loop keeps its schedule: {}",
        r.achieved_rps()
    );
    assert_eq!(served(addr), 500);
}

#[test]
fn refused_connections_are_failures_not_hangs() {
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap();
    drop(free);
    let mut c = config(addr, Mode::Closed, false);
    c.duration = Some(Duration::from_millis(200));
    let r = load::run(&c, &Arc::default()).unwrap();
    assert_eq!(r.ok(), 0);
    assert!(r.failed() > 0 && r.failed() == r.sent);
}
