//! The heartbeat: every [`INTERVAL`] this replica writes itself to Redis
//! for [`TTL`] and reads back every replica whose heartbeat has not lapsed,
//! a service on the control plane (through the cooldowns' Redis client:
//! the limiter's codec, log-in, TLS and Cluster routing).
//!
//! Keys, all in one Cluster slot (`{gateway:replicas}`):
//! - `{gateway:replicas}:<id>`: the replica's JSON ([`Seen`]), `SET .. PX`
//!   [`TTL`], so Redis itself forgets a replica that stopped beating;
//! - `{gateway:replicas}`: the set of ids, from which a reader removes the
//!   ids whose key has expired.
//!
//! Two round trips a beat: `SET`, `SADD`, `PEXPIRE`, `SMEMBERS`; then `MGET`
//! of at most [`MAX_LISTED`] ids and `SREM` of the lapsed. Each has
//! [`DEADLINE`]; a failure keeps the last list, marked with its error.

use super::{Replicas, Seen};
use crate::redis::resp::Reply;
use crate::router::cooldowns::store::{Pipeline, Store, StoreConn};
use std::sync::Arc;
use std::time::Duration;

/// Time between heartbeats.
pub const INTERVAL: Duration = Duration::from_secs(2);
/// How long a heartbeat keeps a replica listed: three beats.
pub const TTL: Duration = Duration::from_secs(6);
/// Deadline of one heartbeat (both round trips).
const DEADLINE: Duration = Duration::from_secs(1);
/// Replicas read at most per beat.
pub const MAX_LISTED: usize = 1000;
/// Longest heartbeat value read; a longer one is skipped.
const MAX_VALUE: usize = 4096;
/// How long the set of ids lives without any heartbeat.
const SET_TTL_MS: u64 = 24 * 3600 * 1000;
/// The set of ids.
const SET: &str = "{gateway:replicas}";

/// The key of replica `id`'s heartbeat.
fn key(id: &str) -> String {
    format!("{SET}:{id}")
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Beats until the process ends, with Redis at `url` (a Cluster when
/// `cluster` names its startup nodes).
pub async fn run(replicas: Arc<Replicas>, url: String, cluster: Vec<String>) {
    let client = match Store::new(&url, &cluster) {
        Ok(c) => c,
        Err(e) => {
            replicas.failed(format!("invalid Redis URL: {e}"));
            return;
        }
    };
    let mut conn: Option<StoreConn> = None;
    let mut down = false;
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let result = tokio::time::timeout(DEADLINE, beat(&client, &mut conn, &replicas))
            .await
            .unwrap_or_else(|_| Err(format!("Redis did not answer within {DEADLINE:?}")));
        match result {
            Ok(seen) => {
                if std::mem::take(&mut down) {
                    tracing::info!(
                        "Redis is back: this replica's heartbeat reaches the fleet again"
                    );
                }
                replicas.saw(seen, now());
            }
            Err(e) => {
                conn = None;
                if !std::mem::replace(&mut down, true) {
                    tracing::warn!(error = %e, "replica heartbeat failed: the other replicas see this one lapse, and its list of them stays as last read");
                }
                replicas.failed(e);
            }
        }
    }
}

/// One heartbeat: this replica written, the fleet read.
async fn beat(
    client: &Store,
    conn: &mut Option<StoreConn>,
    replicas: &Replicas,
) -> Result<Vec<Seen>, String> {
    let me = Seen {
        replica: replicas.me().clone(),
        last_seen: now(),
    };
    let c = match conn {
        Some(c) => c,
        None => conn.insert(client.connect().await.map_err(|e| e.to_string())?),
    };
    let replies = c.query(&announce(&me)).await.map_err(|e| e.to_string())?;
    let ids = members(&replies);
    if ids.is_empty() {
        return Ok(vec![me]);
    }
    let values = c.query(&read(&ids)).await.map_err(|e| e.to_string())?;
    let (seen, lapsed) = parse(&ids, &values);
    if !lapsed.is_empty() {
        c.query(&forget(&lapsed)).await.map_err(|e| e.to_string())?;
    }
    Ok(seen)
}

fn args(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

/// This replica's heartbeat and the read of the set of ids (the only reply
/// kept).
fn announce(me: &Seen) -> Pipeline {
    let value = serde_json::to_vec(me).expect("a replica serializes");
    let id = me.replica.id.as_bytes();
    let mut pipe = Pipeline::default();
    let ttl = TTL.as_millis().to_string();
    pipe.push(
        false,
        args(&[
            b"SET",
            key(&me.replica.id).as_bytes(),
            &value,
            b"PX",
            ttl.as_bytes(),
        ]),
    );
    pipe.push(false, args(&[b"SADD", SET.as_bytes(), id]));
    pipe.push(
        false,
        args(&[
            b"PEXPIRE",
            SET.as_bytes(),
            SET_TTL_MS.to_string().as_bytes(),
        ]),
    );
    pipe.push(true, args(&[b"SMEMBERS", SET.as_bytes()]));
    pipe
}

/// The ids of a `SMEMBERS` reply, at most [`MAX_LISTED`].
fn members(replies: &[Reply]) -> Vec<String> {
    let Some(Reply::Array(Some(items))) = replies.first() else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|r| match r {
            Reply::Bulk(Some(id)) => String::from_utf8(id.clone()).ok(),
            _ => None,
        })
        .take(MAX_LISTED)
        .collect()
}

/// The `MGET` of `ids`' heartbeats.
fn read(ids: &[String]) -> Pipeline {
    let mut command = vec![b"MGET".to_vec()];
    command.extend(ids.iter().map(|id| key(id).into_bytes()));
    let mut pipe = Pipeline::default();
    pipe.push(true, command);
    pipe
}

/// The replicas of an `MGET` reply over `ids`, and the ids whose heartbeat
/// has lapsed (nil). A value that is too long or not a replica is skipped
/// (another version's, or not ours), not forgotten.
fn parse(ids: &[String], replies: &[Reply]) -> (Vec<Seen>, Vec<String>) {
    let Some(Reply::Array(Some(values))) = replies.first() else {
        return (Vec::new(), Vec::new());
    };
    let mut seen = Vec::new();
    let mut lapsed = Vec::new();
    for (id, value) in ids.iter().zip(values) {
        match value {
            Reply::Bulk(Some(v)) if v.len() <= MAX_VALUE => {
                if let Ok(s) = serde_json::from_slice::<Seen>(v) {
                    if s.replica.id == *id {
                        seen.push(s);
                    }
                }
            }
            Reply::Bulk(None) => lapsed.push(id.clone()),
            _ => {}
        }
    }
    (seen, lapsed)
}

/// The `SREM` of lapsed ids.
fn forget(lapsed: &[String]) -> Pipeline {
    let mut command = vec![b"SREM".to_vec(), SET.as_bytes().to_vec()];
    command.extend(lapsed.iter().map(|id| id.as_bytes().to_vec()));
    let mut pipe = Pipeline::default();
    pipe.push(false, command);
    pipe
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replicas::Replica;

    fn seen(id: &str) -> Seen {
        Seen {
            replica: Replica {
                id: id.into(),
                ..Replica::this_process("0.0.0.0:4000".into(), 1)
            },
            last_seen: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_beat_writes_itself_with_its_ttl_and_reads_the_set() {
        let packed = announce(&seen("abc")).packed();
        assert!(
            packed.contains("$3\r\nSET\r\n$22\r\n{gateway:replicas}:abc\r\n"),
            "{packed}"
        );
        assert!(packed.contains("$2\r\nPX\r\n$4\r\n6000\r\n"), "{packed}");
        assert!(packed.contains("$4\r\nSADD\r\n$18\r\n{gateway:replicas}\r\n$3\r\nabc\r\n"));
        assert!(packed.ends_with("$8\r\nSMEMBERS\r\n$18\r\n{gateway:replicas}\r\n"));
    }

    /// Live heartbeats are listed; a lapsed one is forgotten; a foreign or
    /// oversized value, or one naming another id, is skipped.
    #[test]
    fn a_read_lists_the_live_and_forgets_the_lapsed() {
        let ids: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        let bulk = |v: Vec<u8>| Reply::Bulk(Some(v));
        let replies = vec![Reply::Array(Some(vec![
            bulk(serde_json::to_vec(&seen("a")).unwrap()),
            Reply::Bulk(None),
            bulk(b"not json".to_vec()),
            bulk(serde_json::to_vec(&seen("x")).unwrap()),
            bulk(vec![b' '; MAX_VALUE + 1]),
        ]))];
        let (live, lapsed) = parse(&ids, &replies);
        assert_eq!(live, vec![seen("a")]);
        assert_eq!(lapsed, ["b"]);
        assert!(forget(&lapsed)
            .packed()
            .contains("SREM\r\n$18\r\n{gateway:replicas}\r\n$1\r\nb\r\n"));
        let members_reply = vec![Reply::Array(Some(
            (0..MAX_LISTED + 5)
                .map(|i| bulk(format!("r{i}").into_bytes()))
                .collect(),
        ))];
        assert_eq!(members(&members_reply).len(), MAX_LISTED);
        assert!(read(&ids).packed().starts_with("*6\r\n$4\r\nMGET\r\n"));
    }
}
