//! The connection and the one attempt of every operation: lazy background connect,
//! rediscovery through the configured URL, per-node breakers, the overall deadline, failure
//! accounting and rate-limited warnings.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis::cluster_async::ClusterConnection;

use crate::breaker;
use crate::client::{ConnState, SharedCache};
use crate::commands;
use crate::denied::{self, DENIED_COOLDOWN, Denial};
use crate::error::FailureKind;
use crate::metrics::{Op, SkipReason};
use crate::slots;
use crate::stats::bump;

/// Pause after a failed connect before the next attempt.
pub const RECONNECT_BACKOFF: Duration = Duration::from_millis(250);
/// After this long with nothing but failures, rediscover through the configured URL.
pub const REDISCOVER_AFTER: Duration = Duration::from_secs(2);
/// The slot map (for per-node breakers) is re-read this often while things work...
const SLOT_MAP_MAX_AGE: Duration = Duration::from_secs(10);
/// ...and this often while operations fail (nodes may have moved).
const SLOT_MAP_MAX_AGE_FAILING: Duration = Duration::from_secs(1);

impl SharedCache {
    /// Runs one operation on `key`, which sends the commands `sent` (every command it may
    /// send, a script's calls included: a denial of any of them holds it back): skipped while
    /// one of them is denied on the key's key space or the key's node has an open breaker,
    /// else one attempt under the overall deadline, with failures accounted.
    pub(crate) async fn run<'k, T, F, Fut>(
        &self,
        op: Op,
        sent: &'static [&'static str],
        key: &'k str,
        f: F,
    ) -> Result<T, Failure>
    where
        F: FnOnce(ClusterConnection, &'k str) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let inner = &self.inner;
        // Denied commands are looked up only while some command is denied.
        let mut gates = GateProbes {
            cache: self,
            gates: Vec::new(),
        };
        if !inner.gates.is_idle() {
            match inner.gates.admit(sent, key, inner.config.clock.now()) {
                None => {
                    inner.metrics.record_skip(op, SkipReason::Denied);
                    return Err(Failure::Skipped);
                }
                Some(probes) => gates.gates = probes,
            }
        }
        // The slot map is consulted only while some node's breaker is tracking failures.
        let node = (!inner.breakers.is_idle()).then(|| inner.slots.node_for(key));
        let mut admit = breaker::Admit::Run;
        if let Some(node) = &node {
            let (a, transition) = inner.breakers.admit(node, inner.config.clock.now());
            self.on_transition(transition);
            admit = a;
        }
        if admit == breaker::Admit::Skip {
            self.inner.metrics.record_skip(op, SkipReason::BreakerOpen);
            return Err(Failure::Skipped);
        }
        // A probe whose caller is cancelled must not leave the breaker half-open forever.
        let mut probe = ProbeGuard {
            cache: self,
            node: node.as_deref().unwrap_or(slots::UNKNOWN_NODE),
            armed: admit == breaker::Admit::Probe,
        };
        let attempt = async {
            let conn = match self.connection().await {
                Ok(conn) => conn,
                Err(NoConn::Denied) => return Err(Attempt::Skip),
                Err(NoConn::Failed(kind)) => return Err(Attempt::Failed(kind, None)),
            };
            f(conn, key).await.map_err(|e| {
                let kind = FailureKind::of(&e);
                let denial =
                    (kind == FailureKind::Denied).then(|| denied::describe(&e, sent, Some(key)));
                Attempt::Failed(kind, denial)
            })
        };
        let result = match tokio::time::timeout(inner.config.op_deadline(), attempt).await {
            Ok(r) => r,
            Err(_) => Err(Attempt::Failed(FailureKind::Timeout, None)),
        };
        probe.armed = false;
        drop(probe);
        match result {
            Ok(v) => {
                gates.gates.clear(); // settled: every gate of `sent` closes
                inner.gates.on_success(sent, key);
                self.node_answered(node.as_deref());
                Ok(v)
            }
            Err(Attempt::Skip) => {
                inner.metrics.record_skip(op, SkipReason::Denied);
                Err(Failure::Skipped)
            }
            Err(Attempt::Failed(FailureKind::Denied, denial)) => {
                // The node answered: the user is refused, the node and connection are fine.
                self.node_answered(node.as_deref());
                inner.metrics.record_error(op, FailureKind::Denied);
                // A denied connect has no denial here: it was logged where it happened.
                if let Some(denial) = denial {
                    let gate = denied::Gates::gate_of(&denial);
                    gates.gates.retain(|g| *g != gate); // settled; the others are given back
                    if inner.gates.on_denied(&denial, inner.config.clock.now()) {
                        denied::log(&denial);
                    }
                }
                Err(Failure::Failed(FailureKind::Denied))
            }
            Err(Attempt::Failed(FailureKind::Reply, _)) => {
                // The node answered: the operation failed, the node did not.
                self.node_answered(node.as_deref());
                self.record_failure(op, FailureKind::Reply);
                Err(Failure::Failed(FailureKind::Reply))
            }
            Err(Attempt::Failed(kind, _)) => {
                let node = node.unwrap_or_else(|| inner.slots.node_for(key));
                let now = inner.config.clock.now();
                self.on_transition(inner.breakers.on_failure(&node, now));
                self.on_failure(op, kind);
                self.maybe_refresh_slots(SLOT_MAP_MAX_AGE_FAILING);
                Err(Failure::Failed(kind))
            }
        }
    }

    /// A node answered (with a value or an error reply): it and the connection work.
    fn node_answered(&self, node: Option<&str>) {
        if let Some(node) = node {
            self.on_transition(self.inner.breakers.on_success(node));
        }
        self.on_success();
        self.maybe_refresh_slots(SLOT_MAP_MAX_AGE);
    }

    /// Re-reads the slot map in the background when it is older than `max_age`.
    fn maybe_refresh_slots(&self, max_age: Duration) {
        let inner = &self.inner;
        let now = Instant::now();
        if inner
            .slots
            .refreshed_at()
            .is_some_and(|t| now.duration_since(t) < max_age)
        {
            return;
        }
        let Some(conn) = self.lock().conn.clone() else {
            return;
        };
        inner.slots.touch(now); // one refresh at a time, even if it fails
        let inner = inner.clone();
        tokio::spawn(async move {
            let mut conn = conn;
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SLOTS");
            let query = cmd.query_async::<redis::Value>(&mut conn);
            if let Ok(Ok(reply)) = tokio::time::timeout(inner.config.op_deadline(), query).await {
                inner.slots.update(&reply, Instant::now());
            }
        });
    }

    fn on_transition(&self, transition: breaker::Transition) {
        let Some((from, to)) = transition else { return };
        self.inner.metrics.record_breaker(from, to);
        tracing::debug!(
            from = from.as_str(),
            to = to.as_str(),
            "shared image cache breaker"
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ConnState> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn on_success(&self) {
        // Lock-free in steady state: only a success after failures touches the state.
        if self.inner.failing.swap(false, Ordering::AcqRel) {
            self.lock().failing_since = None;
        }
    }

    /// Counts, logs and (rate-limited) warns about a failed operation.
    fn record_failure(&self, op: Op, kind: FailureKind) {
        self.inner.metrics.record_error(op, kind);
        tracing::debug!(
            op = op.as_str(),
            kind = kind.as_str(),
            "shared image cache operation failed"
        );
        if let Some(count) = self.inner.warn.on_failure() {
            bump(&self.inner.counters.warnings);
            tracing::warn!(
                failures = count,
                kind = kind.as_str(),
                "shared image cache unavailable; loads continue from the origin"
            );
        }
    }

    /// A node failure: also starts or extends the run of failures that leads to rediscovery.
    fn on_failure(&self, op: Op, kind: FailureKind) {
        self.record_failure(op, kind);
        let now = self.inner.config.clock.now();
        self.inner.failing.store(true, Ordering::Release);
        let mut st = self.lock();
        let since = *st.failing_since.get_or_insert(now);
        if st.conn.is_some() && now.duration_since(since) >= REDISCOVER_AFTER {
            // Nothing has worked for a while: forget every node and rediscover through the URL.
            st.conn = None;
            st.failing_since = Some(now);
            bump(&self.inner.counters.rediscoveries);
            tracing::debug!("shared image cache: rediscovering through the configured URL");
        }
    }

    /// The shared connection, connecting in the background when there is none. Within
    /// [`DENIED_COOLDOWN`] of a denied connect, no connect is tried ([`NoConn::Denied`]).
    pub(crate) async fn connection(&self) -> Result<ClusterConnection, NoConn> {
        if let Some(conn) = &self.lock().conn {
            return Ok(conn.clone()); // the common case: no channel subscription
        }
        let mut changed = self.inner.connected.subscribe();
        {
            let mut st = self.lock();
            if let Some(conn) = &st.conn {
                return Ok(conn.clone());
            }
            if !st.connecting {
                // After a denied connect the cool-down is the back-off.
                if let Some((at, _)) = &st.denied {
                    let now = self.inner.config.clock.now();
                    if now.duration_since(*at) < DENIED_COOLDOWN {
                        return Err(NoConn::Denied);
                    }
                } else if st
                    .last_failed_connect
                    .is_some_and(|t| t.elapsed() < RECONNECT_BACKOFF)
                {
                    return Err(NoConn::Failed(FailureKind::Connect));
                }
                st.connecting = true;
                self.spawn_connect();
            }
        }
        // Wait for the attempt in progress; the caller's deadline bounds the wait.
        let _ = changed.changed().await;
        let st = self.lock();
        match (&st.conn, &st.denied) {
            (Some(conn), _) => Ok(conn.clone()),
            (None, Some(_)) => Err(NoConn::Failed(FailureKind::Denied)),
            (None, None) => Err(NoConn::Failed(FailureKind::Connect)),
        }
    }

    fn spawn_connect(&self) {
        let inner = self.inner.clone();
        // Discovery: connect to the endpoint, read the slot map, connect to the masters.
        // Saturating: a config built by hand may hold any duration (the loader bounds its own).
        let budget = inner.config.op_deadline().saturating_mul(2);
        tokio::spawn(async move {
            let result = tokio::time::timeout(budget, inner.client.get_async_connection()).await;
            {
                let mut st = inner.state.lock().unwrap_or_else(|p| p.into_inner());
                st.connecting = false;
                match result {
                    Ok(Ok(conn)) => {
                        st.conn = Some(conn);
                        st.last_failed_connect = None;
                        st.denied = None;
                    }
                    Ok(Err(e)) if denied::is_denial(&e) => {
                        // Credentials, or discovery's own commands: nothing works until fixed.
                        let denial = denied::describe(&e, commands::CONNECT, None);
                        denied::log(&denial);
                        st.last_failed_connect = Some(Instant::now());
                        st.denied = Some((inner.config.clock.now(), denial));
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(
                            kind = FailureKind::of(&e).as_str(),
                            "shared image cache connect failed"
                        );
                        st.last_failed_connect = Some(Instant::now());
                        st.denied = None;
                    }
                    Err(_) => {
                        tracing::debug!("shared image cache connect timed out");
                        st.last_failed_connect = Some(Instant::now());
                    }
                }
            }
            inner.connected.send_modify(|generation| *generation += 1);
        });
    }
}

/// Why [`SharedCache::connection`] has no connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoConn {
    /// The last connect was denied less than [`DENIED_COOLDOWN`] ago: none is tried.
    Denied,
    /// The connect failed (a denied one: [`FailureKind::Denied`]).
    Failed(FailureKind),
}

/// How one attempt ended without a value.
enum Attempt {
    /// Not made: the connect is denied, within its cool-down.
    Skip,
    /// Failed; a denial says what was refused (none when the connect was).
    Failed(FailureKind, Option<Denial>),
}

/// The probes of denied commands' gates an operation holds, given back when it ends with
/// neither a success nor their denial (a timeout, a cancelled caller): the next operation
/// probes instead.
struct GateProbes<'a> {
    cache: &'a SharedCache,
    gates: Vec<String>,
}

impl Drop for GateProbes<'_> {
    fn drop(&mut self) {
        for gate in &self.gates {
            self.cache.inner.gates.abandon_probe(gate);
        }
    }
}

/// Why an operation produced no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Not attempted: the node's breaker is open.
    Skipped,
    /// Attempted and failed.
    Failed(FailureKind),
}

impl From<FailureKind> for Failure {
    fn from(kind: FailureKind) -> Self {
        Self::Failed(kind)
    }
}

struct ProbeGuard<'a> {
    cache: &'a SharedCache,
    node: &'a str,
    armed: bool,
}

impl Drop for ProbeGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.cache.inner.breakers.abandon_probe(self.node);
        }
    }
}
