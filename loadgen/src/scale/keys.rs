//! The virtual keys of `loadgen scale`: deterministic plain keys, their rows
//! in `LiteLLM_VerificationToken` written by one `COPY` through `psql`, a
//! check through `/key/info`, and the walk over them.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use gateway::auth::{hash_key, token_hex};

use crate::gateway_proc::{self, MASTER_KEY};

/// Plain key number `i`: `sk-scale-` and twelve digits (the length of a
/// LiteLLM key's random part is immaterial: the gateway hashes any key).
pub fn key(i: usize) -> String {
    format!("sk-scale-{i:012}")
}

/// LiteLLM's `key_name` for a key: `sk-...` and its last four characters.
fn key_name(key: &str) -> String {
    format!("sk-...{}", &key[key.len() - 4..])
}

/// The `COPY` statement [`copy_rows`] feeds: the hashed token and the
/// display name; every other column keeps its default (no limits, no
/// budget, all models, not blocked), as `/key/generate` with an empty body
/// writes them.
pub const COPY: &str =
    r#"COPY "LiteLLM_VerificationToken" (token, key_name) FROM STDIN WITH (FORMAT text)"#;

/// `COPY` text rows (tab-separated, one a line) of keys `from..to`.
pub fn copy_rows(from: usize, to: usize, out: &mut Vec<u8>) {
    for i in from..to {
        let k = key(i);
        out.extend_from_slice(token_hex(&hash_key(&k)).as_bytes());
        out.push(b'\t');
        out.extend_from_slice(key_name(&k).as_bytes());
        out.push(b'\n');
    }
}

/// Runs `sql` on `url` through `psql`.
pub fn psql(url: &str, sql: &str) -> Result<String, String> {
    let out = Command::new("psql")
        .args([url, "-qAtX", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Inserts keys `from..to` into the migrated database at `url` with one
/// `COPY`.
pub fn insert(url: &str, from: usize, to: usize) -> Result<(), String> {
    let mut rows = Vec::with_capacity((to - from) * 80);
    copy_rows(from, to, &mut rows);
    let mut child = Command::new("psql")
        .args([url, "-qX", "-v", "ON_ERROR_STOP=1", "-c", COPY])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run psql: {e}"))?;
    let write = child.stdin.take().expect("stdin is piped").write_all(&rows);
    let out = child
        .wait_with_output()
        .map_err(|e| format!("psql COPY: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "psql COPY: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    write.map_err(|e| format!("psql COPY: {e}"))
}

/// Asks the gateway at `addr` for key `i` through `GET /key/info` (master
/// key) and checks that it answers with that key's row.
pub fn verify(addr: SocketAddr, i: usize) -> Result<(), String> {
    let k = key(i);
    let request = format!(
        "GET /key/info?key={k} HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {MASTER_KEY}\r\nConnection: close\r\n\r\n"
    );
    let response = gateway_proc::exchange_once(addr, request.as_bytes())
        .map_err(|e| format!("GET /key/info for key {i}: {e}"))?;
    // The answer leaves the token out; the key name the row holds shows
    // that the key's hash found it.
    let expected = format!("\"key_name\":\"{}\"", key_name(&k));
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.1 200") && body.contains(&expected) => {
            Ok(())
        }
        _ => Err(format!(
            "GET /key/info for key {i} did not return its row: {}",
            response.chars().take(300).collect::<String>()
        )),
    }
}

/// The walk over `n` keys: request `p` of the whole setting (warm-up,
/// measured runs and priming counted alike) uses key `p % n`, so a key is
/// a cache miss exactly the first time the walk reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Walk {
    /// Number of keys.
    pub n: usize,
    /// Requests sent so far.
    pub position: u64,
}

impl Walk {
    /// A walk over `n` keys, nothing sent.
    pub fn new(n: usize) -> Walk {
        Walk { n, position: 0 }
    }

    /// The keys of the next `count` requests, in order (at most `n` of
    /// them, since requests rotate over the list), and the number of those
    /// requests that use a key for the first time; advances the walk.
    pub fn take(&mut self, count: u64) -> (Vec<String>, u64) {
        let start = self.position;
        let first_uses = self.first_uses(count);
        self.position += count;
        let len = count.min(self.n as u64) as usize;
        let keys = (0..len)
            .map(|j| key(((start + j as u64) % self.n as u64) as usize))
            .collect();
        (keys, first_uses)
    }

    /// How many of the next `count` requests use a key not used before.
    pub fn first_uses(&self, count: u64) -> u64 {
        let n = self.n as u64;
        (self.position + count).min(n) - self.position.min(n)
    }

    /// Requests that would use every key not used yet, once each.
    pub fn unused(&self) -> u64 {
        (self.n as u64).saturating_sub(self.position)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_the_gateways_tokens() {
        let mut out = Vec::new();
        copy_rows(5, 7, &mut out);
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        let (token, name) = lines[0].split_once('\t').unwrap();
        assert_eq!(token, token_hex(&hash_key("sk-scale-000000000005")));
        assert_eq!(token.len(), 64);
        assert_eq!(name, "sk-...0005");
        assert!(lines[1].starts_with(&token_hex(&hash_key(&key(6)))));
        assert_ne!(key(5), key(6));
    }

    #[test]
    fn walk_counts_first_uses_and_wraps() {
        let mut w = Walk::new(3);
        let (keys, first) = w.take(2);
        assert_eq!(keys, [key(0), key(1)]);
        assert_eq!(first, 2);
        assert_eq!(w.unused(), 1);
        let (keys, first) = w.take(5);
        // Five requests rotate over three keys: the list starts at key 2.
        assert_eq!(keys, [key(2), key(0), key(1)]);
        assert_eq!(first, 1, "only key 2 was new");
        assert_eq!((w.position, w.unused()), (7, 0));
        assert_eq!(w.take(4).1, 0);
        let mut big = Walk::new(1_000_000);
        let (keys, first) = big.take(10);
        assert_eq!((keys.len(), first), (10, 10));
        assert_eq!(big.unused(), 999_990);
        assert_eq!(big.first_uses(2_000_000), 999_990);
    }
}
