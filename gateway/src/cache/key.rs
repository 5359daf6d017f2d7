//! The cache key of a request: `[namespace:]` and the hex SHA-256 of the
//! endpoint, the model group and every member of the body that changes the
//! answer (messages or input, every generation parameter, tools,
//! `response_format`, `seed`, ...), members in sorted order at every depth
//! so the order a client writes them in does not matter. Left out: what
//! does not change the answer (`user`, `metadata`, `litellm_metadata`), the
//! stream flag and its options (one entry serves both forms), `model`
//! (the group stands for it) and the gateway's own members (`cache`,
//! `fallbacks`, `num_retries`, `tags`, already cut from the body). The
//! prompt is never kept in clear. Under `cache_params.scope: team|key` the
//! entry's owner ([`Owner`]: a team, a key's token hash, the master key)
//! is hashed in too, so callers outside it never share the entry.

use super::settings::Scope;
use crate::auth::Principal;
use crate::inbound::Endpoint;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Top-level members left out of the key.
const EXCLUDED: &[&str] = &[
    "model",
    "user",
    "metadata",
    "litellm_metadata",
    "stream",
    "stream_options",
    "cache",
    "fallbacks",
    "num_retries",
    "tags",
];

/// Whose entries a request reads and writes (`cache_params.scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner<'a> {
    /// Shared by every caller (`scope: global`, or an open gateway).
    Everyone,
    /// The keys of a team (`team_id`).
    Team(&'a str),
    /// One virtual key (its sha256 hex token).
    Key(&'a str),
    /// The master key.
    Master,
}

impl<'a> Owner<'a> {
    /// The owner of `principal`'s entries under `scope`: under `team`, a key
    /// without a team keeps its own entries.
    pub fn of(scope: Scope, principal: &'a Principal) -> Owner<'a> {
        match (scope, principal) {
            (Scope::Global, _) | (_, Principal::Anonymous) => Owner::Everyone,
            (_, Principal::Master) => Owner::Master,
            (Scope::Team, Principal::Key(k)) => match k.record.team_id.as_deref() {
                Some(team) => Owner::Team(team),
                None => Owner::Key(&k.record.token),
            },
            (Scope::Key, Principal::Key(k)) => Owner::Key(&k.record.token),
        }
    }
}

/// The key of a request on `endpoint` for model `group` with `body` (a JSON
/// object), owned by `owner`, under `namespace`.
pub fn key(
    endpoint: Endpoint,
    group: &str,
    owner: Owner<'_>,
    body: &Value,
    namespace: Option<&str>,
) -> String {
    let mut h = Sha256::new();
    h.update(endpoint.path_suffix().as_bytes());
    h.update([0]);
    h.update(group.as_bytes());
    h.update([0]);
    // `Everyone` adds nothing: a global key is the one before scopes.
    match owner {
        Owner::Everyone => {}
        Owner::Team(id) => {
            h.update(b"T");
            feed_str(&mut h, id);
        }
        Owner::Key(token) => {
            h.update(b"K");
            feed_str(&mut h, token);
        }
        Owner::Master => h.update(b"M"),
    }
    if let Value::Object(map) = body {
        let mut names: Vec<&String> = map
            .keys()
            .filter(|k| !EXCLUDED.contains(&k.as_str()))
            .collect();
        names.sort_unstable();
        for name in names {
            feed_str(&mut h, name);
            feed(&mut h, &map[name]);
        }
    }
    let hex = hex::encode(h.finalize());
    match namespace {
        Some(ns) => format!("{ns}:{hex}"),
        None => hex,
    }
}

/// Feeds `v` with a type tag and lengths, so no two values hash alike by
/// concatenation.
fn feed(h: &mut Sha256, v: &Value) {
    match v {
        Value::Null => h.update(b"n"),
        Value::Bool(b) => h.update(if *b { b"t" } else { b"f" }),
        Value::Number(n) => {
            h.update(b"#");
            feed_str(h, &n.to_string());
        }
        Value::String(s) => {
            h.update(b"s");
            feed_str(h, s);
        }
        Value::Array(items) => {
            h.update(b"[");
            h.update((items.len() as u64).to_le_bytes());
            for item in items {
                feed(h, item);
            }
        }
        Value::Object(map) => {
            h.update(b"{");
            h.update((map.len() as u64).to_le_bytes());
            let mut names: Vec<&String> = map.keys().collect();
            names.sort_unstable();
            for name in names {
                feed_str(h, name);
                feed(h, &map[name]);
            }
        }
    }
}

fn feed_str(h: &mut Sha256, s: &str) {
    h.update((s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn k(body: Value) -> String {
        key(
            Endpoint::ChatCompletions,
            "gpt-4o",
            Owner::Everyone,
            &body,
            None,
        )
    }

    #[test]
    fn a_hash_of_what_changes_the_answer() {
        let base = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2});
        let key = k(base.clone());
        assert_eq!(key.len(), 64);
        assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!key.contains("hi"));
        for changed in [
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "ho"}], "temperature": 0.2}),
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.3}),
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2, "seed": 1}),
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2, "tools": []}),
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2,
                "response_format": {"type": "json_object"}}),
        ] {
            assert_ne!(k(changed), key);
        }
        assert_ne!(
            key,
            super::key(
                Endpoint::ChatCompletions,
                "other",
                Owner::Everyone,
                &base,
                None
            )
        );
        assert_ne!(
            key,
            super::key(
                Endpoint::Completions,
                "gpt-4o",
                Owner::Everyone,
                &base,
                None
            )
        );
    }

    #[test]
    fn user_metadata_stream_and_member_order_do_not_count() {
        let key = k(
            json!({"model": "a", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2}),
        );
        assert_eq!(
            k(
                json!({"temperature": 0.2, "stream": true, "stream_options": {"include_usage": true},
                "messages": [{"content": "hi", "role": "user"}], "user": "u1", "metadata": {"x": 1},
                "model": "b", "cache": {"ttl": 5}})
            ),
            key
        );
    }

    #[test]
    fn namespace_prefixes_the_hash() {
        let body = json!({"messages": []});
        let plain = key(Endpoint::ChatCompletions, "g", Owner::Everyone, &body, None);
        assert_eq!(
            key(
                Endpoint::ChatCompletions,
                "g",
                Owner::Everyone,
                &body,
                Some("team-a")
            ),
            format!("team-a:{plain}")
        );
    }

    #[test]
    fn owners_never_share_a_key() {
        let body = json!({"messages": []});
        let of = |owner| key(Endpoint::ChatCompletions, "g", owner, &body, None);
        let keys = [
            of(Owner::Everyone),
            of(Owner::Team("a")),
            of(Owner::Team("b")),
            of(Owner::Key("a")),
            of(Owner::Master),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(of(Owner::Team("a")), keys[1]);
    }
}
