//! `type: local`: one least-recently-used cache per core, bounded in
//! entries and bytes, each entry with its expiry. A core owns its cache
//! (no lock, no atomics): a replica's bounds are shared out among its
//! cores, and an answer stored on one core is served by that core only.

use crate::keyed_hash::KeyedHash;
use bytes::Bytes;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Bytes counted per entry beyond its key and body (slot, map entry).
const OVERHEAD: u64 = 96;
/// Index of no slot.
const NIL: usize = usize::MAX;

/// A stored answer.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The answer's body as the client got it (non-stream form).
    pub body: Bytes,
    /// When it was stored, Unix milliseconds (for `s-maxage`).
    pub stored_at_ms: u64,
    /// What a hit reports of the body, read by the first hit and shared
    /// by every clone (the entry, a near copy, a flight's followers).
    facts: Arc<OnceLock<HitFacts>>,
}

/// What a hit on a stored answer reports (its spend row, its metrics):
/// read from the body once, not by every hit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HitFacts {
    /// The answer's prompt tokens.
    pub prompt_tokens: u64,
    /// The answer's completion tokens.
    pub completion_tokens: u64,
    /// What its body counts as its total ([`super::total_tokens`]).
    pub total_tokens: u64,
    /// The answer's `id`.
    pub response_id: Option<Arc<str>>,
}

impl Stored {
    /// `body`, stored at `stored_at_ms` (Unix milliseconds).
    pub fn new(body: Bytes, stored_at_ms: u64) -> Stored {
        Stored {
            body,
            stored_at_ms,
            facts: Arc::default(),
        }
    }

    /// Its [`HitFacts`], `read` from the body by the first caller of any
    /// clone.
    pub fn facts(&self, read: impl FnOnce(&[u8]) -> HitFacts) -> &HitFacts {
        self.facts.get_or_init(|| read(&self.body))
    }
}

/// An entry's place in the recency list; a free slot holds no key or
/// answer.
struct Slot {
    /// Shared with the map.
    key: Option<Arc<str>>,
    stored: Option<Stored>,
    expires: Option<Instant>,
    prev: usize,
    next: usize,
}

/// One core's cache.
pub struct CoreCache {
    inner: RefCell<Lru>,
    /// The cores of the replica (the bounds are shared out among them).
    cores: u64,
    /// The cache it is fitted to (`crate::cache::Cache::fit`); 0: none.
    generation: Cell<u64>,
}

struct Lru {
    /// aHash, keyed per map: the keys are digests, SipHash's cost buys
    /// nothing here.
    map: HashMap<Arc<str>, usize, KeyedHash>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    /// Most recently used.
    head: usize,
    /// Least recently used: evicted first.
    tail: usize,
    bytes: u64,
    max_entries: u64,
    max_bytes: u64,
}

impl CoreCache {
    /// A cache of at most `max_entries` entries and `max_bytes` bytes.
    pub fn new(max_entries: u64, max_bytes: u64) -> CoreCache {
        CoreCache {
            inner: RefCell::new(Lru::new(max_entries, max_bytes)),
            cores: 1,
            generation: Cell::new(0),
        }
    }

    /// One of `cores` cores' caches, fitted to no cache yet: it holds
    /// nothing.
    pub fn idle(cores: usize) -> CoreCache {
        CoreCache {
            inner: RefCell::new(Lru::new(1, 0)),
            cores: (cores as u64).max(1),
            generation: Cell::new(0),
        }
    }

    /// The replica's cores, among which its bounds are shared out.
    pub fn cores(&self) -> u64 {
        self.cores
    }

    /// The cache it is fitted to.
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    /// Empties it and bounds it anew, fitted to cache `generation`.
    pub fn refit(&self, max_entries: u64, max_bytes: u64, generation: u64) {
        *self.inner.borrow_mut() = Lru::new(max_entries, max_bytes);
        self.generation.set(generation);
    }

    /// The entry under `key` when it has not expired at `now`; it becomes
    /// the most recently used.
    pub fn get(&self, key: &str, now: Instant) -> Option<Stored> {
        let mut lru = self.inner.borrow_mut();
        let i = *lru.map.get(key)?;
        if lru.slots[i].expires.is_some_and(|at| at <= now) {
            lru.remove(i);
            return None;
        }
        lru.unlink(i);
        lru.push_front(i);
        lru.slots[i].stored.clone()
    }

    /// Stores `stored` under `key` (shared, not copied) until `expires`,
    /// evicting the least recently used entries to stay in bounds; an
    /// entry larger than the whole cache is not stored.
    pub fn put(&self, key: &Arc<str>, stored: Stored, expires: Option<Instant>) {
        let mut lru = self.inner.borrow_mut();
        let size = cost(key, &stored);
        if let Some(&i) = lru.map.get(&**key) {
            lru.remove(i);
        }
        if size > lru.max_bytes {
            return;
        }
        while lru.tail != NIL
            && (lru.map.len() as u64 >= lru.max_entries || lru.bytes + size > lru.max_bytes)
        {
            let last = lru.tail;
            lru.remove(last);
        }
        let slot = Slot {
            key: Some(key.clone()),
            stored: Some(stored),
            expires,
            prev: NIL,
            next: NIL,
        };
        let i = match lru.free.pop() {
            Some(i) => {
                lru.slots[i] = slot;
                i
            }
            None => {
                lru.slots.push(slot);
                lru.slots.len() - 1
            }
        };
        lru.push_front(i);
        lru.map.insert(key.clone(), i);
        lru.bytes += size;
    }

    /// Forgets the entry under `key`, if any.
    pub fn remove(&self, key: &[u8]) {
        let Ok(key) = std::str::from_utf8(key) else {
            return;
        };
        let mut lru = self.inner.borrow_mut();
        if let Some(&i) = lru.map.get(key) {
            lru.remove(i);
        }
    }

    /// Forgets every entry, keeping the bounds.
    pub fn clear(&self) {
        let mut lru = self.inner.borrow_mut();
        let (entries, bytes) = (lru.max_entries, lru.max_bytes);
        *lru = Lru::new(entries, bytes);
    }

    /// Its bounds: most entries and bytes.
    pub fn bounds(&self) -> (u64, u64) {
        let lru = self.inner.borrow();
        (lru.max_entries, lru.max_bytes)
    }

    /// Entries and bytes held.
    #[cfg(test)]
    pub fn usage(&self) -> (u64, u64) {
        let lru = self.inner.borrow();
        (lru.map.len() as u64, lru.bytes)
    }
}

fn cost(key: &str, stored: &Stored) -> u64 {
    (key.len() + stored.body.len()) as u64 + OVERHEAD
}

impl Lru {
    fn new(max_entries: u64, max_bytes: u64) -> Lru {
        Lru {
            map: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            bytes: 0,
            max_entries: max_entries.max(1),
            max_bytes,
        }
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.slots[i].prev, self.slots[i].next);
        match prev {
            NIL => self.head = next,
            p => self.slots[p].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n].prev = prev,
        }
    }

    fn push_front(&mut self, i: usize) {
        self.slots[i].prev = NIL;
        self.slots[i].next = self.head;
        if self.head != NIL {
            self.slots[self.head].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    fn remove(&mut self, i: usize) {
        self.unlink(i);
        let slot = &mut self.slots[i];
        if let (Some(key), Some(stored)) = (slot.key.take(), slot.stored.take()) {
            self.bytes -= cost(&key, &stored);
            self.map.remove(&key);
        }
        self.free.push(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn stored(n: usize) -> Stored {
        Stored::new(Bytes::from(vec![b'x'; n]), 0)
    }

    #[test]
    fn facts_are_read_once_for_every_clone() {
        let reads = Cell::new(0);
        let read = |body: &[u8]| {
            reads.set(reads.get() + 1);
            HitFacts {
                total_tokens: body.len() as u64,
                ..HitFacts::default()
            }
        };
        let s = stored(3);
        let c = CoreCache::new(2, 1 << 20);
        c.put(&"a".into(), s.clone(), None);
        assert_eq!(s.facts(read).total_tokens, 3);
        let hit = c.get("a", Instant::now()).unwrap();
        assert_eq!(hit.facts(read).total_tokens, 3);
        assert_eq!(reads.get(), 1, "the entry's clone shares what was read");
        // Another answer is read on its own.
        assert_eq!(stored(5).facts(read).total_tokens, 5);
        assert_eq!(reads.get(), 2);
    }

    #[test]
    fn least_recently_used_goes_first() {
        let c = CoreCache::new(2, 1 << 20);
        let now = Instant::now();
        c.put(&"a".into(), stored(1), None);
        c.put(&"b".into(), stored(1), None);
        assert!(c.get("a", now).is_some());
        c.put(&"c".into(), stored(1), None);
        assert!(c.get("b", now).is_none(), "b was the least recently used");
        assert!(c.get("a", now).is_some() && c.get("c", now).is_some());
        assert_eq!(c.usage().0, 2);
    }

    #[test]
    fn expired_entries_are_misses() {
        let c = CoreCache::new(10, 1 << 20);
        let now = Instant::now();
        c.put(&"a".into(), stored(1), Some(now + Duration::from_secs(1)));
        assert!(c.get("a", now).is_some());
        assert!(c.get("a", now + Duration::from_secs(2)).is_none());
        assert_eq!(c.usage(), (0, 0));
    }

    #[test]
    fn memory_never_exceeds_its_bound() {
        let max = 64 * 1024;
        let c = CoreCache::new(1_000_000, max);
        for i in 0..10_000 {
            c.put(&format!("k{i}").into(), stored(1000 + i % 3000), None);
            let (_, bytes) = c.usage();
            assert!(bytes <= max, "{bytes} > {max} after {i}");
        }
        // Too large for the whole cache: not stored, nothing evicted for it.
        let before = c.usage();
        c.put(&"huge".into(), stored(max as usize), None);
        assert!(c.get("huge", Instant::now()).is_none());
        assert_eq!(c.usage(), before);
        // Replacing an entry keeps the count right.
        c.put(&"k9999".into(), stored(10), None);
        c.put(&"k9999".into(), stored(20), None);
        assert_eq!(c.get("k9999", Instant::now()).unwrap().body.len(), 20);
    }
}
