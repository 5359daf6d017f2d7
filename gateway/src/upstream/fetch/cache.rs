//! The images one core inlined lately, by URL, as LiteLLM keeps its last
//! 10: bounded in entries and in bytes, the least recently used leaving
//! first.

use std::collections::VecDeque;
use std::rc::Rc;

/// Recently inlined images of one core: URL → data URL.
pub struct ImageCache {
    entries: VecDeque<(Box<str>, Rc<str>)>,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl ImageCache {
    /// A cache of at most `max_entries` images and `max_bytes` bytes.
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        ImageCache {
            entries: VecDeque::with_capacity(max_entries),
            bytes: 0,
            max_entries,
            max_bytes,
        }
    }

    /// The data URL of `url`, now the most recently used.
    pub fn get(&mut self, url: &str) -> Option<Rc<str>> {
        let i = self.entries.iter().position(|(u, _)| &**u == url)?;
        let entry = self.entries.remove(i)?;
        let data = entry.1.clone();
        self.entries.push_back(entry);
        Some(data)
    }

    /// Keeps `data` for `url`, dropping the least recently used entries
    /// until both bounds hold; an image larger than the byte bound is not
    /// kept.
    pub fn insert(&mut self, url: &str, data: Rc<str>) {
        let size = url.len().saturating_add(data.len());
        if size > self.max_bytes || self.max_entries == 0 {
            return;
        }
        if let Some(i) = self.entries.iter().position(|(u, _)| &**u == url) {
            self.remove(i);
        }
        while self.entries.len() >= self.max_entries || self.bytes + size > self.max_bytes {
            self.remove(0);
        }
        self.bytes += size;
        self.entries.push_back((url.into(), data));
    }

    fn remove(&mut self, i: usize) {
        if let Some((u, d)) = self.entries.remove(i) {
            self.bytes -= u.len() + d.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_by_entries_and_bytes_least_recent_first() {
        let mut c = ImageCache::new(2, 100);
        c.insert("a", "1".into());
        c.insert("b", "2".into());
        assert_eq!(c.get("a").as_deref(), Some("1"));
        c.insert("c", "3".into());
        assert!(c.get("b").is_none(), "b was the least recently used");
        assert!(c.get("a").is_some() && c.get("c").is_some());
        c.insert("big", "x".repeat(200).into());
        assert!(c.get("big").is_none(), "larger than the byte bound");
        c.insert("d", "y".repeat(98).into());
        assert!(c.get("a").is_none() && c.get("c").is_none());
        assert_eq!(c.bytes, 99);
        c.insert("d", "z".into());
        assert_eq!((c.entries.len(), c.bytes), (1, 2));
    }
}
