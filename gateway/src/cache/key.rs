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

use super::key_skim;
use super::settings::Scope;
use crate::auth::Principal;
use crate::inbound::Endpoint;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::cell::Cell;
use std::sync::Arc;

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

/// The key of a request on `endpoint` for model `group` with `body` (the
/// JSON object's bytes), owned by `owner`, under `namespace`; and whether
/// the body asks for a usage chunk (`stream_options.include_usage`). The
/// body is read once into a tree that borrows its strings (no copy of the
/// prompt, no map built), then hashed in canonical order: by
/// [`key_skim`] into one buffer hashed at once, or, for what it leaves,
/// through serde_json (same bytes fed, same key).
pub fn key(
    endpoint: Endpoint,
    group: &str,
    owner: Owner<'_>,
    body: &[u8],
    namespace: Option<&str>,
) -> Result<(Arc<str>, bool), serde_json::Error> {
    // The thread's buffer, kept between keys (`take`: nothing else may
    // borrow it meanwhile).
    let mut head = HEAD.take();
    head.clear();
    head.reserve(body.len().saturating_add(256));
    head.extend_from_slice(endpoint.path_suffix().as_bytes());
    head.push(0);
    head.extend_from_slice(group.as_bytes());
    head.push(0);
    // `Everyone` adds nothing: a global key is the one before scopes.
    let tagged = |head: &mut Vec<u8>, tag: u8, s: &str| {
        head.push(tag);
        head.extend_from_slice(&(s.len() as u64).to_le_bytes());
        head.extend_from_slice(s.as_bytes());
    };
    match owner {
        Owner::Everyone => {}
        Owner::Team(id) => tagged(&mut head, b'T', id),
        Owner::Key(token) => tagged(&mut head, b'K', token),
        Owner::Master => head.push(b'M'),
    }
    let len = head.len();
    let read = match key_skim::feed_members(body, EXCLUDED, &mut head) {
        Some(usage) => Ok((Sha256::digest(&head), usage)),
        None => serde_feed(&head[..len], body),
    };
    if head.capacity() <= KEPT_HEAD {
        HEAD.set(head);
    }
    let (digest, include_usage) = read?;
    Ok((text(namespace, &digest), include_usage))
}

thread_local! {
    /// What [`key`] hashes, each thread's buffer kept between requests.
    static HEAD: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Most bytes of a kept [`HEAD`]: a larger body's buffer is let go.
const KEPT_HEAD: usize = 64 << 10;

/// `[namespace:]hex` of `digest`, written on the stack (a namespace of up
/// to 256 bytes, the most a request may name) and shared from its one
/// allocation: the plan, the spend row, the flight and the entry hold the
/// same text.
fn text(namespace: Option<&str>, digest: &[u8]) -> Arc<str> {
    let mut buf = [0u8; 256 + 1 + 64];
    let mut len = 0;
    if let Some(ns) = namespace.filter(|ns| ns.len() <= 256) {
        buf[..ns.len()].copy_from_slice(ns.as_bytes());
        buf[ns.len()] = b':';
        len = ns.len() + 1;
    } else if let Some(ns) = namespace {
        // Longer than a request may name (a configured one): on the heap.
        let mut key = String::with_capacity(ns.len() + 65);
        key.push_str(ns);
        key.push(':');
        key.push_str(&hex::encode(digest));
        return key.into();
    }
    // Cannot fail: 64 digits for 32 bytes.
    let _ = hex::encode_to_slice(digest, &mut buf[len..len + 64]);
    // Cannot fail: a `str`'s bytes, `:` and hex digits.
    std::str::from_utf8(&buf[..len + 64])
        .unwrap_or_default()
        .into()
}

/// The digest of `head` and the members of `body` read with serde_json
/// (what [`key_skim`] leaves), and whether the body asks for usage.
fn serde_feed(
    head: &[u8],
    body: &[u8],
) -> Result<(sha2::digest::Output<Sha256>, bool), serde_json::Error> {
    let mut root: Node<'_> = serde_json::from_slice(body)?;
    let mut h = Sha256::new();
    h.update(head);
    let mut include_usage = false;
    if let Node::Obj(members) = &mut root {
        sort(members);
        for i in 0..members.len() {
            if shadowed(members, i) {
                continue;
            }
            let (name, value) = &mut members[i];
            if name == "stream_options" {
                include_usage = usage_asked(value);
            }
            if EXCLUDED.contains(&name.as_ref()) {
                continue;
            }
            feed_str(&mut h, name);
            feed(&mut h, value);
        }
    }
    Ok((h.finalize(), include_usage))
}

/// A JSON value read for hashing: strings borrowed from the body unless
/// escaped, objects as member lists (sorted before hashing), numbers as
/// serde_json reads them (so a key is the one a `serde_json::Value` gives).
enum Node<'a> {
    Null,
    Bool(bool),
    Num(serde_json::Number),
    Str(Cow<'a, str>),
    Arr(Vec<Node<'a>>),
    Obj(Vec<(Cow<'a, str>, Node<'a>)>),
}

/// `stream_options.include_usage` is `true`.
fn usage_asked(options: &Node<'_>) -> bool {
    let Node::Obj(members) = options else {
        return false;
    };
    // The last of repeated names counts, as in serde_json.
    members
        .iter()
        .rev()
        .find(|(n, _)| n == "include_usage")
        .is_some_and(|(_, v)| matches!(v, Node::Bool(true)))
}

/// Members by name, stable: of repeated names the last stays last.
fn sort(members: &mut [(Cow<'_, str>, Node<'_>)]) {
    members.sort_by(|a, b| a.0.cmp(&b.0));
}

/// Whether member `i` of sorted `members` is followed by one of its name
/// (serde_json keeps the last of repeated names).
fn shadowed(members: &[(Cow<'_, str>, Node<'_>)], i: usize) -> bool {
    members
        .get(i + 1)
        .is_some_and(|next| next.0 == members[i].0)
}

/// Feeds `v` with a type tag and lengths, so no two values hash alike by
/// concatenation; members sorted by name at every depth (in place).
fn feed(h: &mut Sha256, v: &mut Node<'_>) {
    match v {
        Node::Null => h.update(b"n"),
        Node::Bool(b) => h.update(if *b { b"t" } else { b"f" }),
        Node::Num(n) => {
            h.update(b"#");
            let mut buf = NumText::default();
            // A number's text fits: at most 24 bytes (ryu, itoa).
            let _ = std::fmt::Write::write_fmt(&mut buf, format_args!("{n}"));
            feed_bytes(h, buf.text());
        }
        Node::Str(s) => {
            h.update(b"s");
            feed_str(h, s);
        }
        Node::Arr(items) => {
            h.update(b"[");
            h.update((items.len() as u64).to_le_bytes());
            for item in items {
                feed(h, item);
            }
        }
        Node::Obj(members) => {
            sort(members);
            let kept = (0..members.len())
                .filter(|i| !shadowed(members, *i))
                .count();
            h.update(b"{");
            h.update((kept as u64).to_le_bytes());
            for i in 0..members.len() {
                if shadowed(members, i) {
                    continue;
                }
                let (name, value) = &mut members[i];
                feed_str(h, name);
                feed(h, value);
            }
        }
    }
}

fn feed_str(h: &mut Sha256, s: &str) {
    feed_bytes(h, s.as_bytes());
}

fn feed_bytes(h: &mut Sha256, s: &[u8]) {
    h.update((s.len() as u64).to_le_bytes());
    h.update(s);
}

/// A number's text on the stack.
#[derive(Default)]
struct NumText {
    buf: [u8; 32],
    len: usize,
}

impl NumText {
    fn text(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl std::fmt::Write for NumText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(std::fmt::Error)?;
        self.buf
            .get_mut(self.len..end)
            .ok_or(std::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Node<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Node<'de>, E> {
        Ok(Node::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Node<'de>, E> {
        Ok(Node::Bool(b))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Node<'de>, E> {
        Ok(Node::Num(n.into()))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Node<'de>, E> {
        Ok(Node::Num(n.into()))
    }
    fn visit_f64<E>(self, n: f64) -> Result<Node<'de>, E> {
        // serde_json reads only finite numbers; `Value` keeps none else.
        Ok(serde_json::Number::from_f64(n).map_or(Node::Null, Node::Num))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Owned(s.to_string())))
    }
    fn visit_string<E>(self, s: String) -> Result<Node<'de>, E> {
        Ok(Node::Str(Cow::Owned(s)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Arr(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node<'de>, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some(Name(name)) = map.next_key()? {
            members.push((name, map.next_value()?));
        }
        Ok(Node::Obj(members))
    }
}

/// A member name, borrowed from the body unless escaped.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s.to_string())))
            }
            fn visit_string<E>(self, s: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn key_of(group: &str, owner: Owner<'_>, body: &Value, ns: Option<&str>) -> String {
        let bytes = serde_json::to_vec(body).unwrap();
        key(Endpoint::ChatCompletions, group, owner, &bytes, ns)
            .unwrap()
            .0
            .to_string()
    }

    fn k(body: Value) -> String {
        key_of("gpt-4o", Owner::Everyone, &body, None)
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
        assert_ne!(key, key_of("other", Owner::Everyone, &base, None));
        assert_ne!(
            key,
            super::key(
                Endpoint::Completions,
                "gpt-4o",
                Owner::Everyone,
                &serde_json::to_vec(&base).unwrap(),
                None
            )
            .unwrap()
            .0
            .to_string()
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
        let plain = key_of("g", Owner::Everyone, &body, None);
        assert_eq!(
            key_of("g", Owner::Everyone, &body, Some("team-a")),
            format!("team-a:{plain}")
        );
    }

    #[test]
    fn the_kept_buffer_leaves_nothing_behind() {
        let small = json!({"messages": [{"role": "user", "content": "hi"}]});
        let first = k(small.clone());
        // A body the one-pass reading leaves to serde_json, then one over
        // the kept buffer's bound, between two keys of the small body.
        k(json!({"messages": [{"role": "user", "content": "h\u{1}i"}]}));
        k(json!({"messages": [{"role": "user", "content": "x".repeat(100_000)}]}));
        assert_eq!(k(small.clone()), first);
        assert_eq!(first, value_key("gpt-4o", &small));
    }

    #[test]
    fn key_text_with_any_namespace() {
        let digest = [0xabu8; 32];
        let hex = "ab".repeat(32);
        assert_eq!(&*text(None, &digest), hex);
        for ns in [
            "",
            "team-a",
            &"n".repeat(256),
            &"m".repeat(257),
            &"é".repeat(200),
        ] {
            assert_eq!(&*text(Some(ns), &digest), format!("{ns}:{hex}"));
        }
    }

    #[test]
    fn owners_never_share_a_key() {
        let body = json!({"messages": []});
        let of = |owner| key_of("g", owner, &body, None);
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

    /// The key as it was computed over a `serde_json::Value` before the
    /// borrowed reading: entries stored then are found now.
    fn value_key(group: &str, body: &Value) -> String {
        fn feed_value(h: &mut Sha256, v: &Value) {
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
                    items.iter().for_each(|i| feed_value(h, i));
                }
                Value::Object(map) => {
                    h.update(b"{");
                    h.update((map.len() as u64).to_le_bytes());
                    let mut names: Vec<&String> = map.keys().collect();
                    names.sort_unstable();
                    for name in names {
                        feed_str(h, name);
                        feed_value(h, &map[name]);
                    }
                }
            }
        }
        let mut h = Sha256::new();
        h.update(Endpoint::ChatCompletions.path_suffix().as_bytes());
        h.update([0]);
        h.update(group.as_bytes());
        h.update([0]);
        if let Value::Object(map) = body {
            let mut names: Vec<&String> = map
                .keys()
                .filter(|k| !EXCLUDED.contains(&k.as_str()))
                .collect();
            names.sort_unstable();
            for name in names {
                feed_str(&mut h, name);
                feed_value(&mut h, &map[name]);
            }
        }
        hex::encode(h.finalize())
    }

    #[test]
    fn the_key_is_the_one_a_value_gave() {
        for text in [
            r#"{"model":"m","messages":[{"role":"user","content":"hi \"there\" \u00e9\n"}]}"#,
            r#"{"b":1,"a":-2,"c":3.5,"d":1e300,"e":-0.0,"f":18446744073709551615,"g":-9223372036854775808}"#,
            r#"{"tools":[{"type":"function","function":{"name":"f","parameters":{"z":{},"a":[null,true,false]}}}]}"#,
            r#"{"x":1,"x":2,"y":{"k":"first","k":"last"}}"#,
            r#"{"\u0061":"escaped name","a":"plain"}"#,
            r#"[1,2]"#,
            r#""text""#,
            r#"{}"#,
            r#"{"t":0.2,"n":-3,"z":-0,"e":1E2,"big":12345678901234567890,"f":[1.5e-7,0,10]}"#,
            r#"{"s":"line\nbreak \"quoted\" back\\slash \/ \t\b\f\r","u":"héllo ✓ 😀"}"#,
            r#"{"messages":[{"role":"user","content":"hi"},{"content":"x","role":"assistant"}],"tools":null,"seed":7}"#,
            r#"{"stream_options":{"include_usage":true},"a":{"b":{"c":{"d":[[],{}]}}}}"#,
            r#" {"a":1}"#,
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            let (got, _) = key(
                Endpoint::ChatCompletions,
                "g",
                Owner::Everyone,
                text.as_bytes(),
                None,
            )
            .unwrap();
            assert_eq!(*got, value_key("g", &value), "{text}");
        }
    }

    /// A JSON text of random members: numbers in every form JSON allows,
    /// strings with escapes and UTF-8, repeated names, nesting.
    fn random_json(rng: &mut fastrand::Rng, depth: usize, out: &mut String) {
        const NUMBERS: &[&str] = &[
            "0",
            "7",
            "-0",
            "-12",
            "0.2",
            "1.50",
            "1e3",
            "1E+2",
            "-2.5e-3",
            "123456789012345678",
            "12345678901234567890",
            "-9223372036854775808",
            "1e300",
            "0.0",
        ];
        const STRINGS: &[&str] = &[
            "",
            "hi",
            "a\\nb",
            "\\\"q\\\"",
            "\\/\\t\\b\\f\\r",
            "héllo ✓",
            "\\u00e9",
            "model",
        ];
        const NAMES: &[&str] = &[
            "a",
            "b",
            "model",
            "user",
            "stream",
            "stream_options",
            "include_usage",
            "é",
            "a",
        ];
        match rng.u8(0..if depth > 3 { 5 } else { 7 }) {
            0 => out.push_str(NUMBERS[rng.usize(0..NUMBERS.len())]),
            1 => out.push_str(["null", "true", "false"][rng.usize(0..3)]),
            2..=4 => {
                out.push('"');
                out.push_str(STRINGS[rng.usize(0..STRINGS.len())]);
                out.push('"');
            }
            5 => {
                out.push('[');
                for i in 0..rng.usize(0..4) {
                    if i > 0 {
                        out.push_str(if rng.bool() { "," } else { " , " });
                    }
                    random_json(rng, depth + 1, out);
                }
                out.push(']');
            }
            _ => {
                out.push('{');
                for i in 0..rng.usize(0..5) {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&format!("\"{}\": ", NAMES[rng.usize(0..NAMES.len())]));
                    random_json(rng, depth + 1, out);
                }
                out.push('}');
            }
        }
    }

    #[test]
    fn random_bodies_give_the_key_a_value_gave() {
        let mut rng = fastrand::Rng::with_seed(33);
        for _ in 0..3000 {
            let mut text = String::from("{\"messages\": ");
            random_json(&mut rng, 1, &mut text);
            text.push_str(", \"x\": ");
            random_json(&mut rng, 1, &mut text);
            text.push('}');
            let value: Value = serde_json::from_str(&text).unwrap();
            let (got, _) = key(
                Endpoint::ChatCompletions,
                "g",
                Owner::Everyone,
                text.as_bytes(),
                None,
            )
            .unwrap();
            assert_eq!(*got, value_key("g", &value), "{text}");
        }
    }

    #[test]
    fn common_bodies_are_read_in_one_pass() {
        for text in [
            r#"{"model":"m","messages":[{"role":"user","content":"hi\n"}],"temperature":0.2,"max_tokens":16}"#,
            r#"{"input":["a","b"],"model":"e","dimensions":-1,"x":{"k":"v","k":"w"}}"#,
        ] {
            let mut out = Vec::new();
            assert!(
                key_skim::feed_members(text.as_bytes(), EXCLUDED, &mut out).is_some(),
                "{text}"
            );
        }
        for text in [
            r#"{"a":"\u00e9"}"#,
            r#"{"\n":1}"#,
            r#"{"a":1e400}"#,
            r#"{"a":1} x"#,
        ] {
            let mut out = Vec::new();
            assert!(
                key_skim::feed_members(text.as_bytes(), EXCLUDED, &mut out).is_none(),
                "{text}"
            );
        }
    }

    #[test]
    fn include_usage_is_read_and_bad_json_refused() {
        let of = |text: &str| {
            key(
                Endpoint::ChatCompletions,
                "g",
                Owner::Everyone,
                text.as_bytes(),
                None,
            )
            .map(|(_, usage)| usage)
        };
        assert!(of(r#"{"stream_options":{"include_usage":true}}"#).unwrap());
        assert!(!of(r#"{"stream_options":{"include_usage":false}}"#).unwrap());
        assert!(!of(r#"{"stream_options":{"include_usage":"yes"}}"#).unwrap());
        assert!(!of(r#"{"messages":[]}"#).unwrap());
        assert!(of(r#"{"messages":[}"#).is_err());
        assert!(of(r#"{"a":1} trailing"#).is_err());
    }
}
