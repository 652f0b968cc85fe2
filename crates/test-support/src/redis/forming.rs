//! Forming the cluster and watching its state: PING, `CLUSTER MEET` (re-sent for dropped
//! handshakes), `cluster_state:ok`, failover, and the slot owner of a key.

use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use super::{RedisCluster, SLOTS};

/// Why a node did not come up.
#[derive(Debug)]
pub(super) enum StartFailure {
    /// The process exited (a port lost to another process, a bad option).
    Exited(anyhow::Error),
    /// It runs but did not answer in time.
    Silent(anyhow::Error),
}

impl From<StartFailure> for anyhow::Error {
    fn from(f: StartFailure) -> Self {
        match f {
            StartFailure::Exited(e) | StartFailure::Silent(e) => e,
        }
    }
}

impl RedisCluster {
    /// Waits for node `i` to answer PING. A server that exits first is reported at once
    /// as [`StartFailure::Exited`] (typically its port was taken between `free_port` and its
    /// bind), so the caller can retry it on a fresh port.
    pub(super) fn wait_ping(&mut self, i: usize, within: Duration) -> Result<(), StartFailure> {
        let deadline = Instant::now() + within;
        let pid = self.nodes[i].pid().map(|p| p.to_string());
        let mut served_by = None;
        loop {
            // Exit first: whatever answers on the port then is not ours.
            let exited = self.nodes[i]
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(StartFailure::Exited(anyhow!(
                    "node {i} at {} exited before answering PING ({status}); its log ends:\n{}",
                    self.nodes[i].addr(),
                    self.nodes[i].log_tail(8)
                )));
            }
            if self.cli(i, &["PING"]).is_ok_and(|o| o.trim() == "PONG") {
                // Ours, not a server that held the port first (ours then exits).
                served_by = self
                    .cli(i, &["INFO", "server"])
                    .ok()
                    .and_then(|info| info_field(&info, "process_id"));
                if served_by.is_some() && served_by == pid {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(StartFailure::Silent(anyhow!(
                    "node {i} at {} did not answer PING within {within:?} (our pid {pid:?}, \
                     answered by pid {served_by:?}); its log ends:\n{}",
                    self.nodes[i].addr(),
                    self.nodes[i].log_tail(8)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every live node MEETs every other live node (both directions, so no node keeps a stale
    /// peer address).
    pub(super) fn meet_all(&self) -> anyhow::Result<()> {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].answering())
            .collect();
        for &a in &live {
            for &b in &live {
                if a != b {
                    let n = &self.nodes[b];
                    self.cli_ok(
                        a,
                        &["CLUSTER", "MEET", &n.ip.to_string(), &n.port.to_string()],
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Waits until every live node knows every other live node as a full member, re-sending
    /// `CLUSTER MEET` for missing pairs each second: a handshake that times out (a slow disk
    /// delaying the `nodes.conf` fsync, a loaded machine) is dropped by Redis, never retried.
    pub(super) fn wait_known_nodes(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        let mut next_nudge = Instant::now() + Duration::from_secs(1);
        loop {
            let missing = self.missing_peers();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "nodes did not all meet within {within:?}; missing (node, peer): {missing:?}\n{}",
                    self.diagnostics()
                );
            }
            if Instant::now() >= next_nudge {
                self.meet_pairs(&missing);
                next_nudge = Instant::now() + Duration::from_secs(1);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Pairs `(a, b)` of live nodes where `a` does not list `b`'s current address as a member
    /// past the handshake. A node that does not answer misses every peer.
    pub(super) fn missing_peers(&self) -> Vec<(usize, usize)> {
        let live: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].answering())
            .collect();
        let mut missing = Vec::new();
        for &a in &live {
            let table = self.cli(a, &["CLUSTER", "NODES"]).unwrap_or_default();
            for &b in &live {
                let needle = format!("{}@", self.nodes[b].addr());
                let known = table.lines().any(|l| {
                    let mut fields = l.split(' ');
                    let addr = fields.nth(1).unwrap_or("");
                    let flags = fields.next().unwrap_or("");
                    addr.starts_with(&needle)
                        && !flags.split(',').any(|f| f == "handshake" || f == "noaddr")
                });
                if !known {
                    missing.push((a, b));
                }
            }
        }
        missing
    }

    /// `CLUSTER MEET` for each pair; errors are ignored (the caller polls again).
    fn meet_pairs(&self, pairs: &[(usize, usize)]) {
        for &(a, b) in pairs {
            if a != b {
                let n = &self.nodes[b];
                let _ = self.cli(
                    a,
                    &["CLUSTER", "MEET", &n.ip.to_string(), &n.port.to_string()],
                );
            }
        }
    }

    /// Each node's view of the cluster and the end of its log, for an error message.
    pub(super) fn diagnostics(&self) -> String {
        let mut out = String::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let view = if !n.answering() {
                "(stopped or hung)".to_owned()
            } else {
                self.cli(i, &["CLUSTER", "NODES"])
                    .unwrap_or_else(|e| format!("(CLUSTER NODES failed: {e:#})"))
            };
            let log = std::fs::read_to_string(n.dir.join("redis.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(12).collect();
            out.push_str(&format!(
                "--- node {i} at {}\n{}",
                n.addr(),
                view.trim_end()
            ));
            out.push_str("\n    log tail:\n");
            for line in tail.iter().rev() {
                out.push_str("    ");
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Waits until every live node reports `cluster_state:ok` and all slots assigned.
    ///
    /// # Errors
    ///
    /// When that does not happen `within`.
    pub fn wait_ok(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        let mut next_nudge = Instant::now() + Duration::from_secs(1);
        loop {
            let ok = self
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.answering())
                .all(|(i, _)| {
                    self.cli(i, &["CLUSTER", "INFO"]).is_ok_and(|info| {
                        info_field(&info, "cluster_state").as_deref() == Some("ok")
                            && info_field(&info, "cluster_slots_ok").as_deref() == Some("16384")
                    })
                });
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("cluster not ok within {within:?}\n{}", self.diagnostics());
            }
            if Instant::now() >= next_nudge {
                // Re-MEET peers whose handshake was dropped (see `wait_known_nodes`).
                self.meet_pairs(&self.missing_peers());
                next_nudge = Instant::now() + Duration::from_secs(1);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// After killing master `i`, waits until the others flag it as failed and a replica has
    /// taken over its slots (`cluster_state:ok` with every slot served).
    ///
    /// # Errors
    ///
    /// When no failover completes `within`.
    pub fn wait_failover(&self, i: usize, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        let needle = format!("{}:{}@", self.nodes[i].ip, self.nodes[i].port);
        loop {
            let flagged = self
                .nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.answering())
                .all(|(j, _)| {
                    self.cli(j, &["CLUSTER", "NODES"]).is_ok_and(|nodes| {
                        nodes.lines().any(|l| {
                            l.contains(&needle)
                                && l.split(' ')
                                    .nth(2)
                                    .is_some_and(|f| f.split(',').any(|x| x == "fail"))
                        })
                    })
                });
            if flagged {
                return self.wait_ok(deadline.saturating_duration_since(Instant::now()));
            }
            if Instant::now() > deadline {
                bail!("node {i} was not flagged as failed within {within:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Node index of the master serving `key`'s slot.
    ///
    /// # Errors
    ///
    /// When the slot map cannot be read.
    pub fn master_of(&self, key: &str) -> anyhow::Result<usize> {
        let live = self
            .nodes
            .iter()
            .position(|n| n.answering())
            .context("no live node")?;
        let slot: u16 = self
            .cli(live, &["CLUSTER", "KEYSLOT", key])?
            .trim()
            .parse()?;
        let m = self.opts.masters;
        (0..m)
            .find(|&i| {
                let start = (usize::from(SLOTS) * i / m) as u16;
                let end = (usize::from(SLOTS) * (i + 1) / m) as u16 - 1;
                (start..=end).contains(&slot)
            })
            .context("slot out of range")
    }
}

fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')
            .map(|v| v.trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::{ClusterOptions, require_redis};

    /// A node that stalls past the handshake timeout while being met is dropped by Redis and
    /// never retried; waiting for the nodes to meet must heal that (it re-sends the MEET).
    #[test]
    fn a_dropped_handshake_is_met_again() {
        if !require_redis("a_dropped_handshake_is_met_again") {
            return;
        }
        let opts = ClusterOptions {
            masters: 2,
            ..Default::default()
        };
        let cluster = RedisCluster::spawn_nodes(opts).expect("nodes start");
        cluster.hang(1).expect("SIGSTOP node 1");
        let peer = &cluster.nodes[1];
        let meet = [
            "CLUSTER",
            "MEET",
            &peer.ip.to_string(),
            &peer.port.to_string(),
        ];
        cluster.cli_ok(0, &meet).expect("MEET accepted");
        // Past the 1 s handshake timeout: node 0 drops the half-made peer.
        std::thread::sleep(Duration::from_millis(2500));
        cluster.resume(1).expect("SIGCONT node 1");
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            cluster.missing_peers().contains(&(0, 1)),
            "node 0 should have dropped the stalled handshake:\n{}",
            cluster.diagnostics()
        );
        cluster
            .wait_known_nodes(Duration::from_secs(10))
            .expect("waiting re-sends the MEET");
        assert!(cluster.missing_peers().is_empty());
    }

    /// A port taken by another process between `free_port` and the server's bind (seen in
    /// CI as "did not answer PING"): the server exits, which is reported at once with its
    /// log, and a node on a harness-picked port is started again on a fresh one.
    #[test]
    fn a_node_whose_port_was_taken_starts_on_another() {
        if !require_redis("a_node_whose_port_was_taken_starts_on_another") {
            return;
        }
        let opts = ClusterOptions {
            masters: 1,
            ..Default::default()
        };
        let mut cluster = RedisCluster::spawn_nodes(opts).expect("node starts");
        cluster.kill(0);
        let ip = cluster.nodes[0].ip;
        let taken = std::net::TcpListener::bind((ip, super::super::free_port(ip).unwrap()))
            .expect("hold a port");
        let port = taken.local_addr().unwrap().port();
        cluster.nodes[0].port = port;

        // At a fixed address (a restart), the exit is reported (not the PING timeout), with the log.
        let err = cluster.restart(0).expect_err("the port is taken");
        let msg = format!("{err:#}");
        assert!(msg.contains("exited before answering PING"), "{msg}");
        assert!(
            msg.to_lowercase().contains("address already in use"),
            "{msg}"
        );

        // On a harness-picked port, it moves.
        cluster.kill(0);
        cluster.respawn(0).expect("spawn");
        cluster
            .await_start(0, true)
            .expect("started on a fresh port");
        assert_ne!(cluster.nodes[0].port, port);
        assert_eq!(cluster.cli(0, &["PING"]).expect("answers").trim(), "PONG");
        drop(taken);
    }
}
