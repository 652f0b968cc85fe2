//! A byte-weighted LRU with an optional entry cap, keyed by 32-byte digests.
//!
//! Nodes live in a slab (`Vec`) linked by indices, so a hit is one hash lookup and a few index
//! writes, and eviction never allocates. Keys are uniformly random digests, so the hasher just
//! takes 8 of their bytes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A 32-byte digest key (blake3 of the cache identity).
pub(crate) type Key = [u8; 32];

const NIL: usize = usize::MAX;

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

struct Node<V> {
    key: Key,
    value: Option<V>,
    weight: u64,
    prev: usize,
    next: usize,
}

/// What an insert evicted, so the owner can update its gauges.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) entries: i64,
    pub(crate) weight: i64,
}

pub(crate) struct Lru<V> {
    map: HashMap<Key, usize, BuildHasherDefault<DigestHasher>>,
    nodes: Vec<Node<V>>,
    free: Vec<usize>,
    head: usize, // most recently used
    tail: usize, // least recently used
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
            nodes: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            weight: 0,
            max_weight,
            max_entries,
        }
    }

    /// Returns a clone of the value and marks it most recently used.
    pub(crate) fn get(&mut self, key: &Key) -> Option<V> {
        let i = *self.map.get(key)?;
        self.unlink(i);
        self.push_front(i);
        self.nodes[i].value.clone()
    }

    /// Inserts or replaces; evicts least recently used entries until both limits hold.
    /// A value heavier than the whole budget is not stored.
    pub(crate) fn insert(&mut self, key: Key, value: V, weight: u64) -> Change {
        let mut change = self.remove(&key);
        if weight > self.max_weight || self.max_entries == 0 {
            return change;
        }
        while self.tail != NIL
            && (self.weight + weight > self.max_weight || self.map.len() >= self.max_entries)
        {
            let lru_key = self.nodes[self.tail].key;
            let c = self.remove(&lru_key);
            change.entries += c.entries;
            change.weight += c.weight;
        }
        let node = Node {
            key,
            value: Some(value),
            weight,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.push_front(i);
        self.map.insert(key, i);
        self.weight += weight;
        change.entries += 1;
        change.weight += weight as i64;
        change
    }

    pub(crate) fn remove(&mut self, key: &Key) -> Change {
        let Some(i) = self.map.remove(key) else {
            return Change::default();
        };
        self.unlink(i);
        let node = &mut self.nodes[i];
        node.value = None; // drop the value now, not when the slot is reused
        self.weight -= node.weight;
        self.free.push(i);
        Change {
            entries: -1,
            weight: -(node.weight as i64),
        }
    }

    pub(crate) fn clear(&mut self) -> Change {
        let change = Change {
            entries: -(self.map.len() as i64),
            weight: -(self.weight as i64),
        };
        *self = Self::new(self.max_weight, self.max_entries);
        change
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.nodes[i].prev, self.nodes[i].next);
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next].prev = prev;
        }
    }

    fn push_front(&mut self, i: usize) {
        self.nodes[i].prev = NIL;
        self.nodes[i].next = self.head;
        if self.head != NIL {
            self.nodes[self.head].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
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
            .filter_map(|n| lru.map.get(&k(n)).map(|&i| lru.nodes[i].weight))
            .sum();
        assert_eq!(total, lru.weight());
        assert!(lru.nodes.len() <= 8, "slots are reused");
        let c = lru.clear();
        assert_eq!(lru.len(), 0);
        assert!(c.entries < 0);
    }
}
