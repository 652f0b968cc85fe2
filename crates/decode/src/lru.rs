//! A byte-weighted LRU with an optional entry cap, keyed by 32-byte digests.
//!
//! Built for a read-mostly cache shared by every worker thread: a hit takes only a **read**
//! lock and records its time in the entry with one relaxed atomic store, so concurrent hits
//! never wait for each other. An insert takes the write lock and, when over budget, evicts the
//! entries with the oldest access times (exact LRU order) by scanning the entries. That scan is
//! O(entries), paid only by inserts, which follow a download and a decode costing milliseconds.
//! Keys are uniformly random digests, so the hasher just takes 8 of their bytes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A 32-byte digest key (blake3 of the cache identity).
pub(crate) type Key = [u8; 32];

#[derive(Default)]
pub(crate) struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Called once with the 32 key bytes (arrays hash as their bytes, plus no length prefix).
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 ^= u64::from_le_bytes(b);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 ^= n as u64;
    }
}

struct Entry<V> {
    value: V,
    weight: u64,
    /// Nanoseconds since the cache's epoch at the last access (insert or hit).
    last_used: AtomicU64,
}

/// What an insert evicted, so the owner can update its gauges.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) entries: i64,
    pub(crate) weight: i64,
}

pub(crate) struct Lru<V> {
    map: HashMap<Key, Entry<V>, BuildHasherDefault<DigestHasher>>,
    epoch: Instant,
    weight: u64,
    max_weight: u64,
    max_entries: usize,
}

impl<V> Lru<V> {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn weight(&self) -> u64 {
        self.weight
    }
}

impl<V: Clone> Lru<V> {
    pub(crate) fn new(max_weight: u64, max_entries: usize) -> Self {
        Self {
            map: HashMap::default(),
            epoch: Instant::now(),
            weight: 0,
            max_weight,
            max_entries,
        }
    }

    /// The monotonic clock in nanoseconds: no shared counter, so hits on different threads
    /// write nothing in common but their own entries.
    fn stamp(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Returns a clone of the value and marks it most recently used. Needs only `&self`.
    pub(crate) fn get(&self, key: &Key) -> Option<V> {
        let entry = self.map.get(key)?;
        entry.last_used.store(self.stamp(), Ordering::Relaxed);
        Some(entry.value.clone())
    }

    /// Inserts or replaces; evicts least recently used entries until both limits hold.
    /// A value heavier than the whole budget is not stored.
    pub(crate) fn insert(&mut self, key: Key, value: V, weight: u64) -> Change {
        let mut change = self.remove(&key);
        if weight > self.max_weight || self.max_entries == 0 {
            return change;
        }
        while !self.map.is_empty()
            && (self.weight + weight > self.max_weight || self.map.len() >= self.max_entries)
        {
            let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, e)| e.last_used.load(Ordering::Relaxed))
                .map(|(k, _)| *k)
            else {
                break;
            };
            let c = self.remove(&oldest);
            change.entries += c.entries;
            change.weight += c.weight;
        }
        let entry = Entry {
            value,
            weight,
            last_used: AtomicU64::new(self.stamp()),
        };
        self.map.insert(key, entry);
        self.weight += weight;
        change.entries += 1;
        change.weight += weight as i64;
        change
    }

    pub(crate) fn remove(&mut self, key: &Key) -> Change {
        let Some(entry) = self.map.remove(key) else {
            return Change::default();
        };
        self.weight -= entry.weight;
        Change {
            entries: -1,
            weight: -(entry.weight as i64),
        }
    }

    pub(crate) fn clear(&mut self) -> Change {
        let change = Change {
            entries: -(self.map.len() as i64),
            weight: -(self.weight as i64),
        };
        self.map.clear();
        self.weight = 0;
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(n: u8) -> Key {
        [n; 32]
    }

    #[test]
    fn evicts_least_recently_used_by_weight() {
        let mut lru = Lru::new(30, usize::MAX);
        lru.insert(k(1), 1, 10);
        lru.insert(k(2), 2, 10);
        lru.insert(k(3), 3, 10);
        assert_eq!(lru.get(&k(1)), Some(1)); // 1 is now most recent; 2 is least
        lru.insert(k(4), 4, 10);
        assert_eq!(lru.get(&k(2)), None);
        assert_eq!(lru.get(&k(1)), Some(1));
        assert_eq!(lru.get(&k(3)), Some(3));
        assert_eq!(lru.get(&k(4)), Some(4));
        assert_eq!(lru.weight(), 30);
        // A heavy entry evicts as many as needed, least recent first.
        lru.insert(k(5), 5, 25);
        assert_eq!(lru.len(), 1);
        assert_eq!(lru.get(&k(5)), Some(5));
    }

    #[test]
    fn entry_cap_and_oversize() {
        let mut lru = Lru::new(1000, 2);
        lru.insert(k(1), 1, 1);
        lru.insert(k(2), 2, 1);
        lru.insert(k(3), 3, 1);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.get(&k(1)), None);
        // Heavier than the budget: not stored, and an older value under that key is gone.
        lru.insert(k(2), 22, 5000);
        assert_eq!(lru.get(&k(2)), None);
        assert_eq!(lru.len(), 1);
        let mut off = Lru::new(1000, 0);
        off.insert(k(1), 1, 1);
        assert_eq!(off.len(), 0);
    }

    #[test]
    fn replace_and_slot_reuse_keep_accounts() {
        let mut lru = Lru::new(100, usize::MAX);
        for round in 0..50u8 {
            lru.insert(k(round % 7), round, u64::from(round % 13) + 1);
            assert!(lru.weight() <= 100);
        }
        let total: u64 = (0..7)
            .filter_map(|n| lru.map.get(&k(n)).map(|e| e.weight))
            .sum();
        assert_eq!(total, lru.weight());
        let c = lru.clear();
        assert_eq!(lru.len(), 0);
        assert!(c.entries < 0);
    }
}
