//! Redis Cluster's key space: which of the 16384 hash slots a key lives in
//! (CRC16 of the key, or of its `{hash tag}`), which master serves each
//! slot (read from `CLUSTER SLOTS`), and the `MOVED` / `ASK` redirects a
//! node answers with when it does not serve a key.

use super::resp::Reply;

/// Hash slots of a Redis Cluster.
pub const SLOTS: usize = 16384;

/// Nodes a topology may name; a reply naming more is refused.
const MAX_NODES: usize = 1024;

/// The slot of `key`: CRC16 (XMODEM) of its hash tag (the bytes between
/// the first `{` and the next `}`, when not empty), else of the whole key.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(0) | None => key,
            Some(len) => &key[open + 1..open + 1 + len],
        },
        None => key,
    };
    crc16(hashed) % SLOTS as u16
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Which master serves each slot.
#[derive(Debug, Clone)]
pub struct Topology {
    /// `host:port` of each master.
    nodes: Vec<String>,
    /// Index into `nodes` per slot; `u16::MAX` for a slot nobody serves.
    owner: Box<[u16]>,
}

impl Topology {
    /// Reads a `CLUSTER SLOTS` reply; `asked` is the `host:port` the reply
    /// came from (a node that names itself with an empty address means it).
    pub fn from_cluster_slots(reply: &Reply, asked: &str) -> Result<Topology, String> {
        let Reply::Array(Some(ranges)) = reply else {
            return Err(format!("CLUSTER SLOTS: unexpected reply {reply:?}"));
        };
        let mut t = Topology {
            nodes: Vec::new(),
            owner: vec![u16::MAX; SLOTS].into_boxed_slice(),
        };
        let asked_host = asked.rsplit_once(':').map_or(asked, |(h, _)| h);
        for range in ranges {
            let Reply::Array(Some(items)) = range else {
                return Err("CLUSTER SLOTS: a range is not an array".into());
            };
            let (Some(Reply::Int(start)), Some(Reply::Int(end)), Some(Reply::Array(Some(master)))) =
                (items.first(), items.get(1), items.get(2))
            else {
                return Err("CLUSTER SLOTS: a range lacks its slots or master".into());
            };
            let (start, end) = match (usize::try_from(*start), usize::try_from(*end)) {
                (Ok(s), Ok(e)) if s <= e && e < SLOTS => (s, e),
                _ => return Err(format!("CLUSTER SLOTS: bad range {start}-{end}")),
            };
            let host = match master.first() {
                Some(Reply::Bulk(Some(h))) if h.is_empty() => asked_host.to_string(),
                Some(Reply::Bulk(Some(h))) => {
                    String::from_utf8(h.clone()).map_err(|_| "CLUSTER SLOTS: host not UTF-8")?
                }
                _ => return Err("CLUSTER SLOTS: a master lacks its host".into()),
            };
            let port = match master.get(1) {
                Some(Reply::Int(p)) => u16::try_from(*p)
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("CLUSTER SLOTS: bad port {p}"))?,
                _ => return Err("CLUSTER SLOTS: a master lacks its port".into()),
            };
            let index = t.node_index(&join_host_port(&host, port))?;
            t.owner[start..=end].fill(index);
        }
        Ok(t)
    }

    fn node_index(&mut self, addr: &str) -> Result<u16, String> {
        if let Some(i) = self.nodes.iter().position(|n| n == addr) {
            return Ok(i as u16);
        }
        if self.nodes.len() >= MAX_NODES {
            return Err(format!("CLUSTER SLOTS: more than {MAX_NODES} masters"));
        }
        self.nodes.push(addr.to_string());
        Ok((self.nodes.len() - 1) as u16)
    }

    /// The master serving `slot`, if any.
    pub fn node_of(&self, slot: u16) -> Option<&str> {
        let i = *self.owner.get(usize::from(slot))?;
        self.nodes.get(usize::from(i)).map(String::as_str)
    }

    /// Records a `MOVED`: `slot` is now served by `addr`.
    pub fn moved(&mut self, slot: u16, addr: &str) {
        if let (Ok(i), Some(owner)) = (self.node_index(addr), self.owner.get_mut(usize::from(slot)))
        {
            *owner = i;
        }
    }

    /// Every master's `host:port`.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }
}

/// `host:port`, with brackets around an IPv6 host.
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A node's answer that the key lives elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// `MOVED slot addr`: the slot has a new owner for good.
    Moved {
        /// The slot.
        slot: u16,
        /// Its owner now.
        addr: String,
    },
    /// `ASK slot addr`: this one command goes to `addr`, after `ASKING`.
    Ask {
        /// Where to ask.
        addr: String,
    },
}

/// Reads a `MOVED` / `ASK` error; `None` for any other error.
pub fn redirect(error: &str) -> Option<Redirect> {
    let mut words = error.split_ascii_whitespace();
    let kind = words.next()?;
    let slot: u16 = words
        .next()?
        .parse()
        .ok()
        .filter(|s| usize::from(*s) < SLOTS)?;
    let addr = words.next()?;
    // Redis 7 may answer `:port` when the node's host is unknown to it.
    if addr.rsplit_once(':')?.1.parse::<u16>().is_err() {
        return None;
    }
    match kind {
        "MOVED" => Some(Redirect::Moved {
            slot,
            addr: addr.to_string(),
        }),
        "ASK" => Some(Redirect::Ask {
            addr: addr.to_string(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{api_key:k}:tokens"), key_slot(b"api_key:k"));
        assert_eq!(key_slot(b"{api_key:k}:requests"), key_slot(b"api_key:k"));
        // An empty tag hashes the whole key; only the first tag counts.
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"{unclosed"), crc16(b"{unclosed") % 16384);
    }

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(Some(s.as_bytes().to_vec()))
    }

    fn range(start: i64, end: i64, host: &str, port: i64) -> Reply {
        Reply::Array(Some(vec![
            Reply::Int(start),
            Reply::Int(end),
            Reply::Array(Some(vec![bulk(host), Reply::Int(port), bulk("id")])),
        ]))
    }

    #[test]
    fn topology_from_cluster_slots() {
        let reply = Reply::Array(Some(vec![
            range(0, 5460, "10.0.0.1", 7000),
            range(5461, 10922, "", 7001),
            range(10923, 16383, "10.0.0.1", 7000),
        ]));
        let mut t = Topology::from_cluster_slots(&reply, "10.0.0.9:7005").unwrap();
        assert_eq!(t.node_of(0), Some("10.0.0.1:7000"));
        assert_eq!(t.node_of(6000), Some("10.0.0.9:7001"));
        assert_eq!(t.node_of(16383), Some("10.0.0.1:7000"));
        assert_eq!(t.nodes().len(), 2);
        t.moved(6000, "10.0.0.2:7002");
        assert_eq!(t.node_of(6000), Some("10.0.0.2:7002"));
        assert_eq!(t.node_of(6001), Some("10.0.0.9:7001"));
        let partial = Reply::Array(Some(vec![range(0, 10, "h", 1)]));
        assert_eq!(
            Topology::from_cluster_slots(&partial, "h:1")
                .unwrap()
                .node_of(11),
            None
        );
        for bad in [
            Reply::Int(1),
            Reply::Array(Some(vec![range(10, 5, "h", 1)])),
            Reply::Array(Some(vec![range(0, 16384, "h", 1)])),
            Reply::Array(Some(vec![range(0, 1, "h", 0)])),
            Reply::Array(Some(vec![range(0, 1, "h", 70000)])),
            Reply::Array(Some(vec![Reply::Array(Some(vec![Reply::Int(0)]))])),
        ] {
            assert!(
                Topology::from_cluster_slots(&bad, "h:1").is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(join_host_port("::1", 7000), "[::1]:7000");
    }

    #[test]
    fn redirects_are_read() {
        assert_eq!(
            redirect("MOVED 3999 127.0.0.1:6381"),
            Some(Redirect::Moved {
                slot: 3999,
                addr: "127.0.0.1:6381".into()
            })
        );
        assert_eq!(
            redirect("ASK 3999 [::1]:6381"),
            Some(Redirect::Ask {
                addr: "[::1]:6381".into()
            })
        );
        for other in [
            "NOSCRIPT No matching script",
            "MOVED 99999 h:1",
            "MOVED 1",
            "MOVED 1 h",
            "CLUSTERDOWN The cluster is down",
        ] {
            assert_eq!(redirect(other), None, "{other}");
        }
    }
}
