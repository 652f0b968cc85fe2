//! Commands to single nodes through the `redis` crate's synchronous client, with this
//! cluster's TLS and password settings: one connection per command (nodes restart and move),
//! bounded by a connect timeout and a response timeout, so a node that stopped answering
//! (SIGSTOP) costs a bounded wait and an error, never a hang.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, bail};
use redis::Value;

use super::RedisCluster;

/// Time to open a connection (TCP, TLS handshake, `AUTH`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Time for each read or write of a command once connected.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// `MOVED`/`ASK` redirections followed by the cluster-mode helpers.
const MAX_REDIRECTS: usize = 5;

impl RedisCluster {
    /// Sends a command to node `i` and returns its reply as text (see [`RedisCluster::cli_at`]).
    ///
    /// # Errors
    ///
    /// When the node cannot be reached, does not answer in time, or answers with an error.
    pub fn cli(&self, i: usize, args: &[&str]) -> anyhow::Result<String> {
        self.cli_at(self.nodes[i].addr(), args)
    }

    /// Keys matching `pattern` on every master (`KEYS` answers for one node only).
    ///
    /// # Panics
    ///
    /// When a master does not answer.
    pub fn keys_on_masters(&self, pattern: &str) -> Vec<String> {
        (0..self.opts.masters)
            .flat_map(|i| {
                let out = self.cli(i, &["KEYS", pattern]).expect("KEYS");
                out.lines()
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Sends a command to any address with this cluster's TLS and password settings and
    /// returns its reply as text, the way `redis-cli` prints it to a pipe: strings as they are,
    /// integers in decimal, nil as nothing, array elements one a line, then a newline.
    ///
    /// # Errors
    ///
    /// When the node cannot be reached, does not answer in time, or answers with an error.
    pub fn cli_at(&self, addr: SocketAddr, args: &[&str]) -> anyhow::Result<String> {
        let reply = self
            .query(addr, &command(args), false)
            .with_context(|| format!("{args:?} at {addr}"))?;
        Ok(reply_text(&reply))
    }

    /// The TTL of `key` in seconds (`-2` absent, `-1` no TTL), as `TTL` reports it.
    ///
    /// # Errors
    ///
    /// When the command fails or answers something else.
    pub fn ttl(&self, key: &str) -> anyhow::Result<i64> {
        Ok(self.cli_cluster(&["TTL", key])?.trim().parse()?)
    }

    /// Like [`RedisCluster::cli`] but in cluster mode, following `MOVED`/`ASK` redirections
    /// from the first answering node: for reading and writing keys as another client (a
    /// Python worker, say) would.
    ///
    /// # Errors
    ///
    /// When the command fails.
    pub fn cli_cluster(&self, args: &[&str]) -> anyhow::Result<String> {
        let reply = self
            .query_cluster(&command(args))
            .with_context(|| format!("{args:?} in cluster mode"))?;
        Ok(reply_text(&reply))
    }

    /// Writes raw bytes at `key` in cluster mode (any byte sequence works), then sets the
    /// TTL with `EXPIRE` when one is given.
    ///
    /// # Errors
    ///
    /// When a command fails.
    pub fn set_raw(&self, key: &str, value: &[u8], ttl_secs: Option<u64>) -> anyhow::Result<()> {
        let mut set = redis::cmd("SET");
        set.arg(key).arg(value);
        let reply = self.query_cluster(&set).context("SET failed")?;
        anyhow::ensure!(
            matches!(reply, Value::Okay),
            "SET failed: {}",
            reply_text(&reply).trim_end()
        );
        if let Some(ttl) = ttl_secs {
            self.cli_cluster(&["EXPIRE", key, &ttl.to_string()])?;
        }
        Ok(())
    }

    /// Reads the raw bytes at `key` (`None` when absent) as another client would.
    ///
    /// # Errors
    ///
    /// When the command fails or the value is not a string.
    pub fn get_raw(&self, key: &str) -> anyhow::Result<Option<Vec<u8>>> {
        let mut get = redis::cmd("GET");
        get.arg(key);
        match self
            .query_cluster(&get)
            .with_context(|| format!("GET {key}"))?
        {
            Value::Nil => Ok(None),
            Value::BulkString(bytes) => Ok(Some(bytes)),
            Value::SimpleString(s) => Ok(Some(s.into_bytes())),
            other => bail!("GET {key}: unexpected reply {other:?}"),
        }
    }

    /// Sends a command that must answer `OK` to node `i`.
    pub(super) fn cli_ok(&self, i: usize, args: &[&str]) -> anyhow::Result<()> {
        let out = self.cli(i, args)?;
        anyhow::ensure!(out.trim() == "OK", "{args:?} on node {i}: {out}");
        Ok(())
    }

    fn live_addr(&self) -> anyhow::Result<SocketAddr> {
        let live = self
            .nodes
            .iter()
            .find(|n| n.answering())
            .context("no live node")?;
        Ok(live.addr())
    }

    /// `cmd` at the first answering node, following up to [`MAX_REDIRECTS`] redirections.
    fn query_cluster(&self, cmd: &redis::Cmd) -> anyhow::Result<Value> {
        let mut addr = self.live_addr()?;
        let mut asking = false;
        for _ in 0..=MAX_REDIRECTS {
            match self.query(addr, cmd, asking) {
                Ok(reply) => return Ok(reply),
                Err(e) => {
                    // `(address, slot)`, the address as `ip:port`.
                    let Some((to, _slot)) = e.redirect_node() else {
                        return Err(anyhow::Error::new(e).context(format!("at {addr}")));
                    };
                    addr = to
                        .parse()
                        .with_context(|| format!("redirected from {addr} to {to}"))?;
                    asking = matches!(
                        e.kind(),
                        redis::ErrorKind::Server(redis::ServerErrorKind::Ask)
                    );
                }
            }
        }
        bail!("more than {MAX_REDIRECTS} redirections")
    }

    /// `cmd` at `addr` on a new connection (preceded by `ASKING` after an `ASK` redirection).
    pub(super) fn query(
        &self,
        addr: SocketAddr,
        cmd: &redis::Cmd,
        asking: bool,
    ) -> redis::RedisResult<Value> {
        let mut con = self.connect(addr)?;
        if asking {
            redis::cmd("ASKING").exec(&mut con)?;
        }
        cmd.query(&mut con)
    }

    /// A connection to `addr` with this cluster's TLS and password settings and the timeouts.
    fn connect(&self, addr: SocketAddr) -> redis::RedisResult<redis::Connection> {
        let url = self.url_at(addr);
        let client = match self.ca_pem() {
            Some(ca) => {
                install_crypto_provider();
                redis::Client::build_with_tls(
                    url,
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(ca),
                    },
                )?
            }
            None => redis::Client::open(url)?,
        };
        let con = client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
        con.set_read_timeout(Some(RESPONSE_TIMEOUT))?;
        con.set_write_timeout(Some(RESPONSE_TIMEOUT))?;
        Ok(con)
    }
}

/// The rustls the `redis` client builds its TLS configuration with takes the process default
/// crypto provider: ring, as in the library crates.
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may win the race; either way a provider is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn command(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    cmd
}

/// A reply as `redis-cli` prints it to a pipe (its raw output), ending in a newline.
fn reply_text(reply: &Value) -> String {
    let mut out = String::new();
    push_raw(reply, &mut out);
    out.push('\n');
    out
}

fn push_raw(reply: &Value, out: &mut String) {
    let push_all = |items: &mut dyn Iterator<Item = &Value>, out: &mut String| {
        for (n, item) in items.enumerate() {
            if n > 0 {
                out.push('\n');
            }
            push_raw(item, out);
        }
    };
    match reply {
        Value::Nil => {}
        Value::Okay => out.push_str("OK"),
        Value::Int(n) => out.push_str(&n.to_string()),
        Value::Double(d) => out.push_str(&d.to_string()),
        Value::Boolean(b) => out.push_str(if *b { "1" } else { "0" }),
        Value::SimpleString(s) => out.push_str(s),
        Value::BulkString(bytes) => out.push_str(&String::from_utf8_lossy(bytes)),
        Value::VerbatimString { text, .. } => out.push_str(text),
        Value::Array(items) | Value::Set(items) => push_all(&mut items.iter(), out),
        Value::Map(pairs) => push_all(&mut pairs.iter().flat_map(|(k, v)| [k, v]), out),
        other => out.push_str(&format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ClusterOptions, RedisCluster};

    /// Nodes start from deploy/redis/node.conf (a setting only that file sets is live), and the
    /// command line still overrides it (the test's node timeout, not the file's 5000 ms).
    #[test]
    fn nodes_run_the_deployed_settings() {
        let cluster = RedisCluster::start(ClusterOptions {
            masters: 1,
            node_timeout_ms: 1500,
            ..ClusterOptions::default()
        })
        .expect("start a one-node cluster");
        let get = |name: &str| {
            cluster
                .cli(0, &["CONFIG", "GET", name])
                .expect("CONFIG GET")
        };
        assert_eq!(get("maxmemory-policy"), "maxmemory-policy\nallkeys-lru\n");
        assert_eq!(
            get("cluster-allow-reads-when-down"),
            "cluster-allow-reads-when-down\nno\n"
        );
        assert_eq!(get("cluster-node-timeout"), "cluster-node-timeout\n1500\n");
    }
}
