//! Real Redis Cluster processes on loopback, for tests, chaos and benchmarks.
//!
//! A [`RedisCluster`] starts `redis-server --cluster-enabled yes` processes on free 127.0.0.x
//! ports in a scratch directory (`/dev/shm` when roomy), assigns the slots, joins the nodes with `CLUSTER MEET`,
//! attaches replicas, waits for `cluster_state:ok`, and kills its processes (by PID) on drop.
//! Nodes can be killed, hung (SIGSTOP/SIGCONT), restarted, and moved to new addresses. A TLS
//! variant makes its CA and server certificate with `rcgen` at start.
//!
//! The harness talks to each node with the `redis` crate's synchronous client, one connection
//! per command with connect and response timeouts (`client`); forming and watching the
//! cluster is in `forming`, killing, hanging and moving nodes in `control`, ACL users (and the
//! worker user's recipe, read from docs/deployment.md) in `acl`.

mod acl;
mod client;
mod control;
mod forming;

pub use acl::{AclRecipe, acl_recipe};

use forming::StartFailure;

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::redis_files::{all_loopback_ips, make_tls_files, scratch_dir};

const SLOTS: u16 = 16384;

/// The node settings of the operator's kit, which every test node starts from.
const DEPLOY_NODE_CONF: &str = include_str!("../../../deploy/redis/node.conf");

/// The server binary the harness starts: `redis-server`, or the one named by
/// `MMCACHE_TEST_SERVER` (a `valkey-server`, to run the same tests against Valkey; the
/// harness's `redis` client speaks to both).
pub fn server_binary() -> String {
    std::env::var("MMCACHE_TEST_SERVER")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "redis-server".into())
}

/// Whether a Redis test can run: the server binary is installed.
pub fn redis_available() -> bool {
    Command::new(server_binary())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Returns `true` when Redis tests can run. Outside CI a missing `redis-server` makes the test
/// print why and return early; in CI (`CI` set) it panics, so a missing server is never a pass.
pub fn require_redis(test: &str) -> bool {
    if redis_available() {
        return true;
    }
    let msg = format!(
        "{test}: {} not found. Install it (Debian: apt-get install -y redis-server) or run \
         `cargo xtask test`, which installs it.",
        server_binary()
    );
    if crate::in_ci() {
        panic!("{msg}");
    }
    eprintln!("SKIPPED outside CI: {msg}");
    false
}

/// Shape of a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Masters (1 gives the single-node cluster Dragonfly's emulated mode looks like).
    pub masters: usize,
    /// Replicas per master.
    pub replicas: usize,
    /// Serve TLS only (`rediss://`), with a CA made at start.
    pub tls: bool,
    /// `cluster-node-timeout` in milliseconds (failure detection and failover speed).
    pub node_timeout_ms: u64,
    /// Loopback addresses for the nodes, cycled; default all on 127.0.0.1.
    pub ips: Vec<Ipv4Addr>,
    /// `requirepass` for every node, when set.
    pub password: Option<String>,
    /// Hostnames the nodes announce (`cluster-announce-hostname`, node `i` the `i`-th, masters
    /// first), with `cluster-preferred-endpoint-type hostname`, so `CLUSTER SLOTS` names them
    /// and clients resolve them; empty: the nodes announce their addresses.
    pub hostnames: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            masters: 3,
            replicas: 0,
            tls: false,
            node_timeout_ms: 1000,
            ips: vec![Ipv4Addr::LOCALHOST],
            password: None,
            hostnames: Vec::new(),
        }
    }
}

/// One `redis-server` process of the cluster.
#[derive(Debug)]
pub struct Node {
    /// Announced address.
    pub ip: Ipv4Addr,
    /// Client port (TLS port in TLS mode).
    pub port: u16,
    /// Announced hostname ([`ClusterOptions::hostnames`]), if any.
    pub hostname: Option<String>,
    dir: PathBuf,
    child: Option<Child>,
    stopped: bool,
    /// SIGSTOPped: it accepts connections but answers nothing, so the helpers that talk to
    /// every node skip it (a command would only wait for its response timeout).
    hung: AtomicBool,
}

impl Node {
    /// A placeholder while a node is moved out to be respawned.
    fn vacant() -> Self {
        Self {
            ip: Ipv4Addr::LOCALHOST,
            port: 0,
            hostname: None,
            dir: PathBuf::new(),
            child: None,
            stopped: true,
            hung: AtomicBool::new(false),
        }
    }

    /// The last `n` lines of the server's log, for error messages.
    fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Running and not hung: safe to talk to.
    fn answering(&self) -> bool {
        !self.stopped && !self.hung.load(Ordering::Relaxed)
    }

    /// `ip:port`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip, self.port))
    }

    /// The PID of the running server, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// A running Redis Cluster on loopback. Killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    /// Nodes: masters first, then replicas.
    pub nodes: Vec<Node>,
    opts: ClusterOptions,
    root: PathBuf,
    tls_dir: Option<PathBuf>,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A free port on `ip` whose cluster-bus port (+10000) is free too.
///
/// Both lie below Linux's ephemeral range (32768 and up), so an outgoing connection of
/// another process cannot take them between this check and the server's bind; a collision
/// with another harness is still possible, and the caller retries on an exit
/// ([`RedisCluster`] does).
pub fn free_port(ip: Ipv4Addr) -> anyhow::Result<u16> {
    const LOW: u32 = 12_000;
    const SPAN: u32 = 10_000; // bus ports up to 31_999
    // A small xorshift seeded per call: different processes and threads start apart.
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.subsec_nanos())
        ^ std::process::id().rotate_left(16)
        ^ SEQ
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9)
        | 1;
    for _ in 0..500 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let port = u16::try_from(LOW + x % SPAN).expect("below 65536");
        let Ok(l) = TcpListener::bind((ip, port)) else {
            continue;
        };
        if TcpListener::bind((ip, port + 10_000)).is_ok() {
            drop(l);
            return Ok(port);
        }
    }
    bail!("no free port pair on {ip} in 500 tries")
}

impl RedisCluster {
    /// Starts a cluster and waits until every node reports `cluster_state:ok`.
    ///
    /// # Errors
    ///
    /// When a process cannot start or the cluster does not form within 30 s.
    pub fn start(opts: ClusterOptions) -> anyhow::Result<Self> {
        let cluster = Self::spawn_nodes(opts)?;
        cluster.form()?;
        Ok(cluster)
    }

    /// Starts every node (answering PING) without forming the cluster.
    fn spawn_nodes(opts: ClusterOptions) -> anyhow::Result<Self> {
        anyhow::ensure!(opts.masters >= 1, "a cluster needs a master");
        let root = scratch_dir().join(format!(
            "mmcache-redis-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)?;
        let tls_dir = if opts.tls {
            Some(make_tls_files(&root.join("tls"), &all_loopback_ips())?)
        } else {
            None
        };
        let mut cluster = Self {
            nodes: Vec::new(),
            opts: opts.clone(),
            root,
            tls_dir,
        };
        let total = opts.masters * (1 + opts.replicas);
        for i in 0..total {
            let ip = opts.ips[i % opts.ips.len()];
            let port = free_port(ip)?;
            let dir = cluster.root.join(format!("node-{i}"));
            std::fs::create_dir_all(&dir)?;
            let mut node = Node {
                ip,
                port,
                hostname: opts.hostnames.get(i).cloned(),
                dir,
                child: None,
                stopped: true,
                hung: AtomicBool::new(false),
            };
            cluster.spawn(&mut node)?;
            cluster.nodes.push(node);
        }
        for i in 0..total {
            cluster.await_start(i, true)?;
        }
        Ok(cluster)
    }

    /// Waits for the just-spawned node `i` to answer. When `fresh_port` (the harness picked
    /// the port), a server that exited at once lost its port to another process between
    /// `free_port` and its bind; it is started again on a new port, up to 5 times.
    fn await_start(&mut self, i: usize, fresh_port: bool) -> anyhow::Result<()> {
        const TRIES: usize = 5;
        for attempt in 1.. {
            match self.wait_ping(i, Duration::from_secs(10)) {
                Ok(()) => return Ok(()),
                Err(StartFailure::Exited(e)) if fresh_port && attempt < TRIES => {
                    eprintln!("redis harness: {e:#}\nretrying on a fresh port");
                    self.kill(i);
                    self.nodes[i].port = free_port(self.nodes[i].ip)?;
                    self.respawn(i)?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        unreachable!("the loop returns")
    }

    /// Assigns slots, joins the nodes, attaches replicas and waits for `cluster_state:ok`.
    fn form(&self) -> anyhow::Result<()> {
        // Slots in contiguous ranges over the masters.
        for m in 0..self.opts.masters {
            let start = (usize::from(SLOTS) * m / self.opts.masters) as u16;
            let end = (usize::from(SLOTS) * (m + 1) / self.opts.masters) as u16 - 1;
            self.cli_ok(
                m,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &start.to_string(),
                    &end.to_string(),
                ],
            )?;
        }
        self.meet_all()?;
        self.wait_known_nodes(Duration::from_secs(20))?;
        for r in 0..self.opts.masters * self.opts.replicas {
            let master = r % self.opts.masters;
            let id = self.cli(master, &["CLUSTER", "MYID"])?.trim().to_owned();
            self.cli_ok(self.opts.masters + r, &["CLUSTER", "REPLICATE", &id])?;
        }
        self.wait_ok(Duration::from_secs(30))
    }

    /// The options it was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.opts
    }

    /// `redis://ip:port` (or `rediss://`) of node `i`, with the password when one is set.
    pub fn node_url(&self, i: usize) -> String {
        self.url_at(self.nodes[i].addr())
    }

    /// `redis://ip:port` (or `rediss://`) of any address, with the password when one is set.
    pub fn url_at(&self, addr: SocketAddr) -> String {
        let scheme = if self.opts.tls { "rediss" } else { "redis" };
        let auth = self
            .opts
            .password
            .as_ref()
            .map(|p| format!(":{p}@"))
            .unwrap_or_default();
        format!("{scheme}://{auth}{addr}")
    }

    /// The URL of the first node: a discovery endpoint for clients.
    pub fn url(&self) -> String {
        self.node_url(0)
    }

    /// The CA certificate (PEM) of a TLS cluster.
    pub fn ca_pem(&self) -> Option<Vec<u8>> {
        self.tls_dir
            .as_ref()
            .and_then(|d| std::fs::read(d.join("ca.crt")).ok())
    }

    /// Path of the CA certificate of a TLS cluster.
    pub fn ca_path(&self) -> Option<PathBuf> {
        self.tls_dir.as_ref().map(|d| d.join("ca.crt"))
    }

    /// Starts node `i`'s server again at its (current) address, from its directory.
    fn respawn(&mut self, i: usize) -> anyhow::Result<()> {
        let mut node = std::mem::replace(&mut self.nodes[i], Node::vacant());
        let result = self.spawn(&mut node);
        self.nodes[i] = node;
        result
    }

    fn spawn(&self, node: &mut Node) -> anyhow::Result<()> {
        // Every node starts from the settings operators deploy (deploy/redis/node.conf); the
        // command line adds what is per node or per test and overrides the rest.
        let conf = node.dir.join("deploy-node.conf");
        std::fs::write(&conf, DEPLOY_NODE_CONF).with_context(|| format!("write {conf:?}"))?;
        let mut cmd = Command::new(server_binary());
        cmd.arg(&conf);
        let port = node.port.to_string();
        let ip = node.ip.to_string();
        if let Some(tls) = &self.tls_dir {
            cmd.args([
                "--port",
                "0",
                "--tls-port",
                &port,
                "--tls-cluster",
                "yes",
                "--tls-replication",
                "yes",
            ])
            .args(["--tls-auth-clients", "no"])
            .arg("--tls-cert-file")
            .arg(tls.join("server.crt"))
            .arg("--tls-key-file")
            .arg(tls.join("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(tls.join("ca.crt"));
        } else {
            cmd.args(["--port", &port]);
        }
        cmd.args(["--bind", &ip, "--cluster-announce-ip", &ip]);
        if let Some(name) = &node.hostname {
            cmd.args(["--cluster-announce-hostname", name])
                .args(["--cluster-preferred-endpoint-type", "hostname"]);
        }
        cmd
            // Tests fail over faster than a deployment would.
            .args([
                "--cluster-node-timeout",
                &self.opts.node_timeout_ms.to_string(),
            ])
            .args([
                "--repl-diskless-sync",
                "yes",
                "--repl-diskless-sync-delay",
                "0",
            ])
            .args(["--daemonize", "no", "--logfile", "redis.log"]);
        if let Some(pw) = &self.opts.password {
            cmd.args(["--requirepass", pw, "--masterauth", pw]);
        }
        cmd.arg("--dir").arg(&node.dir);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .with_context(|| format!("spawn {} (is it installed?)", server_binary()))?;
        node.child = Some(child);
        node.stopped = false;
        node.hung.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// The directory holding the nodes' files (logs included).
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            // A hung node must be resumed to die promptly under some kernels; SIGKILL works
            // on stopped processes on Linux, but be explicit.
            let _ = self.resume(i);
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
