//! Node control: kill, hang (SIGSTOP), resume, restart, and move nodes to new addresses.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::Context;

use super::{RedisCluster, free_port};

impl RedisCluster {
    /// Kills node `i` (SIGKILL) and reaps it.
    pub fn kill(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        node.stopped = true;
    }

    /// Stops node `i` in place (SIGSTOP): it keeps its sockets but answers nothing.
    ///
    /// # Errors
    ///
    /// When the signal cannot be sent.
    pub fn hang(&self, i: usize) -> anyhow::Result<()> {
        self.signal(i, "-STOP")?;
        self.nodes[i].hung.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Resumes a hung node (SIGCONT).
    ///
    /// # Errors
    ///
    /// When the signal cannot be sent.
    pub fn resume(&self, i: usize) -> anyhow::Result<()> {
        self.signal(i, "-CONT")?;
        self.nodes[i].hung.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Puts node `i` behind a [`Forwarder`](crate::forward::Forwarder) that it announces as
    /// its address (see [`RedisCluster::announce_port`]): clients built with
    /// `url_at(forwarder.addr())` reach it only through the forwarder, whose
    /// [`set_reply_delay`](crate::forward::Forwarder::set_reply_delay) makes it a slow node.
    ///
    /// # Errors
    ///
    /// When the forwarder cannot bind or the node refuses the setting.
    pub fn behind_forwarder(&self, i: usize) -> anyhow::Result<crate::forward::Forwarder> {
        let node = self.nodes[i].addr();
        let forwarder = crate::forward::Forwarder::start(node.ip(), Some(node))?;
        self.announce_port(i, forwarder.addr().port())?;
        Ok(forwarder)
    }

    /// Makes node `i` announce `port` on 127.0.0.1 as its client address (`CONFIG SET
    /// cluster-announce-port`), so that clients reach it through whatever listens there (a
    /// [`Forwarder`](crate::forward::Forwarder) with a reply delay: a slow node). The harness
    /// itself keeps talking to the node's own port.
    ///
    /// # Errors
    ///
    /// When the node refuses the setting.
    pub fn announce_port(&self, i: usize, port: u16) -> anyhow::Result<()> {
        self.cli_ok(i, &["CONFIG", "SET", "cluster-announce-ip", "127.0.0.1"])?;
        self.cli_ok(
            i,
            &["CONFIG", "SET", "cluster-announce-port", &port.to_string()],
        )
    }

    fn signal(&self, i: usize, sig: &str) -> anyhow::Result<()> {
        let pid = self.nodes[i].pid().context("node not running")?;
        let status = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill {sig} {pid} failed");
        Ok(())
    }

    /// Restarts a killed node at its address, from its `nodes.conf`.
    ///
    /// # Errors
    ///
    /// When it does not start.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.respawn(i)?;
        self.await_start(i, false)
    }

    /// Kills every node, restarts each at `ips[i % len]` on a fresh port, keeping its identity
    /// and slots (`nodes.conf`), then re-forms the cluster with `CLUSTER MEET` between all
    /// pairs. Returns when the cluster is ok again.
    ///
    /// # Errors
    ///
    /// When the moved cluster does not become ok within 30 s.
    pub fn move_all(&mut self, ips: &[Ipv4Addr]) -> anyhow::Result<()> {
        self.kill_all();
        self.restart_all_at(ips)?;
        self.wait_ok(Duration::from_secs(30))
    }

    /// Kills every node (an outage).
    pub fn kill_all(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }

    /// Restarts every (killed) node at new addresses and re-forms the cluster, without waiting
    /// for `cluster_state:ok`.
    ///
    /// # Errors
    ///
    /// When a node does not start.
    pub fn restart_all_at(&mut self, ips: &[Ipv4Addr]) -> anyhow::Result<()> {
        for i in 0..self.nodes.len() {
            let ip = ips[i % ips.len()];
            self.nodes[i].ip = ip;
            self.nodes[i].port = free_port(ip)?;
            self.respawn(i)?;
            self.await_start(i, true)?;
        }
        self.meet_all()
    }
}
