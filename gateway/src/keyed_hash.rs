//! The hasher of the maps read on every request: aHash under random keys
//! drawn once per map, several times cheaper than the standard SipHash on
//! short keys and, keyed, as hard to flood with colliding names.

use std::hash::BuildHasher;

/// Builds aHash hashers under keys drawn at random when the map is made.
#[derive(Clone)]
pub struct KeyedHash(ahash::RandomState);

impl Default for KeyedHash {
    fn default() -> Self {
        let key = || fastrand::u64(..);
        KeyedHash(ahash::RandomState::with_seeds(key(), key(), key(), key()))
    }
}

impl BuildHasher for KeyedHash {
    type Hasher = ahash::AHasher;

    fn build_hasher(&self) -> ahash::AHasher {
        self.0.build_hasher()
    }
}

#[cfg(test)]
mod tests {
    use super::KeyedHash;
    use std::collections::HashMap;
    use std::hash::BuildHasher;

    #[test]
    fn maps_find_what_they_hold_and_keys_differ_per_map() {
        let mut map: HashMap<String, u32, KeyedHash> = HashMap::default();
        map.insert("gpt-4o".into(), 1);
        map.insert("gpt-4o-mini".into(), 2);
        assert_eq!(map.get("gpt-4o"), Some(&1));
        assert_eq!(map.get("gpt-4o-mini"), Some(&2));
        assert_eq!(map.get("gpt-4"), None);
        let (a, b) = (KeyedHash::default(), KeyedHash::default());
        assert_ne!(a.hash_one("x"), b.hash_one("x"));
    }
}
