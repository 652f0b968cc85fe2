//! What an operator's check (`mmcache doctor`) asks of the cluster: can it be reached, are all
//! 16384 slots served, by how many nodes, and which engine and version run there.

use std::collections::BTreeSet;

use crate::client::SharedCache;

/// Slots of a Redis Cluster.
pub const CLUSTER_SLOTS: u32 = 16384;

/// The cluster as one client sees it through the configured URL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ClusterReport {
    /// Whether the cluster answered `CLUSTER SLOTS` within the operation deadline.
    pub reachable: bool,
    /// Slots some master serves (of [`CLUSTER_SLOTS`]).
    pub slots_covered: u32,
    /// Masters that serve at least one slot.
    pub masters: usize,
    /// Every node the slot map names (masters and replicas).
    pub nodes: usize,
    /// `redis`, `valkey` or `dragonfly`, from `INFO server` of one node.
    pub engine: Option<String>,
    /// That engine's version.
    pub version: Option<String>,
    /// Why it is not reachable (a failure kind; never the URL).
    pub error: Option<String>,
}

impl ClusterReport {
    /// Whether every slot is served.
    pub fn fully_covered(&self) -> bool {
        self.slots_covered == CLUSTER_SLOTS
    }
}

impl SharedCache {
    /// Asks the cluster for its slot map and one node's `INFO server`, each bounded by the
    /// operation deadline. Never fails: an unreachable cluster is a report saying so.
    pub async fn inspect(&self) -> ClusterReport {
        let deadline = self.inner.config.op_deadline();
        let mut report = ClusterReport::default();
        let mut conn = match tokio::time::timeout(deadline, self.connection()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(crate::conn::NoConn::Failed(kind))) => {
                report.error = Some(format!("connect failed ({})", kind.as_str()));
                return report;
            }
            Ok(Err(crate::conn::NoConn::Denied)) => {
                report.error = Some("connect denied (credentials or ACL)".into());
                return report;
            }
            Err(_) => {
                report.error = Some("connect timed out".into());
                return report;
            }
        };
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let reply = match tokio::time::timeout(deadline, cmd.query_async::<redis::Value>(&mut conn))
            .await
        {
            Ok(Ok(reply)) => reply,
            Ok(Err(e)) => {
                report.error = Some(format!("CLUSTER SLOTS failed ({:?})", e.kind()));
                return report;
            }
            Err(_) => {
                report.error = Some("CLUSTER SLOTS timed out".into());
                return report;
            }
        };
        report.reachable = true;
        let (covered, masters, nodes) = count(&reply);
        (report.slots_covered, report.masters, report.nodes) = (covered, masters, nodes);
        let mut info = redis::cmd("INFO");
        info.arg("server");
        let answer =
            tokio::time::timeout(deadline, info.query_async::<redis::Value>(&mut conn)).await;
        if let Some(text) = answer
            .ok()
            .and_then(Result::ok)
            .as_ref()
            .and_then(first_text)
        {
            (report.engine, report.version) = engine_of(&text);
        }
        report
    }
}

/// Slots covered, masters serving slots, and distinct nodes of a `CLUSTER SLOTS` reply.
fn count(reply: &redis::Value) -> (u32, usize, usize) {
    let Some(ranges) = crate::slots::parse(reply) else {
        return (0, 0, 0);
    };
    // Ranges do not overlap in a sane map; a set of slots is exact even if they did.
    let mut slots = BTreeSet::new();
    let mut masters = BTreeSet::new();
    for (start, end, master) in &ranges {
        slots.extend(*start..=*end);
        masters.insert(master.clone());
    }
    let mut nodes = masters.clone();
    if let redis::Value::Array(entries) = reply {
        for entry in entries {
            if let redis::Value::Array(fields) = entry {
                for node in fields.iter().skip(3) {
                    if let Some(addr) = node_addr(node) {
                        nodes.insert(addr);
                    }
                }
            }
        }
    }
    let covered = u32::try_from(slots.len()).unwrap_or(CLUSTER_SLOTS);
    (covered, masters.len(), nodes.len())
}

fn node_addr(node: &redis::Value) -> Option<std::sync::Arc<str>> {
    let redis::Value::Array(f) = node else {
        return None;
    };
    let host = text_of(f.first()?)?;
    let redis::Value::Int(port) = f.get(1)? else {
        return None;
    };
    Some(format!("{host}:{port}").into())
}

fn text_of(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// `INFO` sent through a cluster connection goes to every master and comes back as a map
/// of node to text; take one node's text.
fn first_text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::Map(pairs) => pairs.iter().find_map(|(_, v)| text_of(v)),
        other => text_of(other),
    }
}

/// Engine and version from `INFO server`: Valkey says `server_name:valkey` and
/// `valkey_version`, Dragonfly `dragonfly_version`, Redis `redis_version` (Valkey and
/// Dragonfly also report a `redis_version` for compatibility, so theirs are looked for first).
pub(crate) fn engine_of(info: &str) -> (Option<String>, Option<String>) {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    };
    for engine in ["valkey", "dragonfly"] {
        if let Some(v) = field(&format!("{engine}_version")) {
            return (Some(engine.into()), Some(v));
        }
    }
    if field("server_name").as_deref() == Some("valkey") {
        return (Some("valkey".into()), field("redis_version"));
    }
    match field("redis_version") {
        Some(v) => (Some("redis".into()), Some(v)),
        None => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_from_info() {
        let redis = "# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\n";
        assert_eq!(
            engine_of(redis),
            (Some("redis".into()), Some("7.0.15".into()))
        );
        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.0.0\r\n";
        assert_eq!(
            engine_of(valkey),
            (Some("valkey".into()), Some("9.0.0".into()))
        );
        let dfly = "# Server\r\nredis_version:7.4.0\r\ndragonfly_version:df-v1.30.0\r\n";
        assert_eq!(
            engine_of(dfly),
            (Some("dragonfly".into()), Some("df-v1.30.0".into()))
        );
        assert_eq!(engine_of("nothing"), (None, None));
    }
}
