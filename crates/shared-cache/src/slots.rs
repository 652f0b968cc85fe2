//! Which node serves a key: the cluster's slot map, read with `CLUSTER SLOTS`, so circuit
//! breakers can be kept per node (the cluster client does not expose its routing).

use std::sync::{Arc, RwLock};
use std::time::Instant;

/// Slot of a key: CRC16 (XMODEM) of its hash tag (or of the whole key), modulo 16384.
pub(crate) fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &bytes[open + 1..open + 1 + close])
    });
    crc16::State::<crc16::XMODEM>::calculate(tagged.unwrap_or(bytes)) % 16384
}

/// Node label used when the slot map does not know the key's node.
pub(crate) const UNKNOWN_NODE: &str = "*";

#[derive(Debug, Default)]
pub(crate) struct SlotMap {
    inner: RwLock<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ranges: Vec<(u16, u16, Arc<str>)>,
    /// Distinct nodes of `ranges`: the masters.
    masters: usize,
    refreshed_at: Option<Instant>,
}

impl SlotMap {
    pub(crate) fn node_for(&self, key: &str) -> Arc<str> {
        self.known_node_for(key)
            .unwrap_or_else(|| Arc::from(UNKNOWN_NODE))
    }

    /// The node serving `key`, when the map knows it.
    pub(crate) fn known_node_for(&self, key: &str) -> Option<Arc<str>> {
        let slot = slot_of(key);
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner
            .ranges
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|(_, _, node)| node.clone())
    }

    /// The masters of the map (0 until it is read).
    pub(crate) fn masters(&self) -> usize {
        self.inner.read().unwrap_or_else(|p| p.into_inner()).masters
    }

    pub(crate) fn refreshed_at(&self) -> Option<Instant> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .refreshed_at
    }

    /// Replaces the map with a `CLUSTER SLOTS` reply; ignores replies it cannot read.
    pub(crate) fn update(&self, reply: &redis::Value, now: Instant) {
        let Some(ranges) = parse(reply) else { return };
        let masters = ranges
            .iter()
            .map(|(_, _, node)| node)
            .collect::<std::collections::HashSet<_>>()
            .len();
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.ranges = ranges;
        inner.masters = masters;
        inner.refreshed_at = Some(now);
    }

    /// Marks an attempt, so failed refreshes are not retried on every operation.
    pub(crate) fn touch(&self, now: Instant) {
        self.inner
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .refreshed_at = Some(now);
    }
}

pub(crate) fn parse(reply: &redis::Value) -> Option<Vec<(u16, u16, Arc<str>)>> {
    use redis::Value;
    let Value::Array(entries) = reply else {
        return None;
    };
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return None;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return None;
        };
        let host = match master.first()? {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            _ => return None,
        };
        let Value::Int(port) = master.get(1)? else {
            return None;
        };
        out.push((
            u16::try_from(*start).ok()?,
            u16::try_from(*end).ok()?,
            Arc::from(format!("{host}:{port}")),
        ));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("bar"), 5061);
        assert_eq!(
            slot_of("{user1000}.following"),
            slot_of("{user1000}.followers")
        );
        assert_eq!(slot_of("{}x"), slot_of("{}x"));
        assert_eq!(slot_of("123456789"), 0x31c3); // the CRC16-XMODEM check value
    }

    #[test]
    fn parses_cluster_slots() {
        use redis::Value;
        let node = |h: &str, p: i64| {
            Value::Array(vec![
                Value::BulkString(h.into()),
                Value::Int(p),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8191),
                node("127.0.0.1", 7000),
            ]),
            Value::Array(vec![
                Value::Int(8192),
                Value::Int(16383),
                node("127.0.0.2", 7001),
                node("127.0.0.3", 7002),
            ]),
        ]);
        let map = SlotMap::default();
        map.update(&reply, Instant::now());
        assert_eq!(&*map.node_for("foo"), "127.0.0.2:7001");
        assert_eq!(&*map.node_for("bar"), "127.0.0.1:7000");
        assert_eq!(map.masters(), 2);
        map.update(&Value::Nil, Instant::now());
        assert_eq!(
            &*map.node_for("bar"),
            "127.0.0.1:7000",
            "a bad reply keeps the old map"
        );
    }
}
