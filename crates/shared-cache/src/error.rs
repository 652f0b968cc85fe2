//! Typed errors of the shared cache. Only configuration can fail: operations fail open.

/// A result with the shared-cache [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A configuration error, found by [`crate::SharedCache::new`] before any I/O.
/// Messages never contain the cache URL (it may hold a password).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL does not start with `redis://` or `rediss://`.
    #[error("shared cache URL must start with redis:// or rediss://")]
    Scheme,
    /// The URL could not be parsed by the client (details withheld: they would echo it).
    #[error("shared cache URL is invalid")]
    InvalidUrl,
    /// A setting outside its rule ([`crate::SharedCacheConfig::validate`]).
    #[error(transparent)]
    Invalid(#[from] crate::config::Invalid),
    /// The TLS root certificate could not be used.
    #[error("shared cache TLS setup failed: {0}")]
    Tls(String),
}

mmcache_metrics::label_values! {
    /// What kind of failure an operation met; a metric label (`kind`).
    #[non_exhaustive]
    pub enum FailureKind: "kind" {
        /// Connect or response timeout, or the overall deadline.
        Timeout = "timeout",
        /// No connection: refused, dropped, not connected yet.
        Connect = "connect",
        /// A cluster-level reply: CLUSTERDOWN, MOVED/ASK storms, TRYAGAIN, no node for a slot.
        Cluster = "cluster",
        /// The server refused the user a command, a key or its credentials (NOPERM, NOAUTH,
        /// WRONGPASS): a retry never heals it, so the command is not sent again for a cool-down
        /// (`crate::DENIED_COOLDOWN`); logged at error level. Like `reply`, it counts toward
        /// neither the node's breaker nor rediscovery.
        Denied = "denied",
        /// An error reply from a node that answered (WRONGTYPE, OOM, NOSCRIPT, ERR...):
        /// this operation failed, but the node and the connection are healthy, so it counts
        /// toward neither the node's breaker nor rediscovery.
        Reply = "reply",
        /// Anything else: protocol oddities, unexpected replies, a node still loading its data
        /// (LOADING) or busy with a script (BUSY).
        Other = "other",
    }
}

impl FailureKind {
    pub(crate) fn of(e: &redis::RedisError) -> Self {
        use redis::ErrorKind;
        if crate::denied::is_denial(e) {
            Self::Denied
        } else if e.is_timeout() {
            Self::Timeout
        } else if e.is_cluster_error()
            || matches!(
                e.kind(),
                ErrorKind::ClusterConnectionNotFound
                    | ErrorKind::Server(redis::ServerErrorKind::CrossSlot)
                    | ErrorKind::Server(redis::ServerErrorKind::MasterDown)
            )
        {
            Self::Cluster
        } else if e.is_io_error() || e.is_connection_refusal() || e.is_connection_dropped() {
            Self::Connect
        } else if matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
            // A node that is loading or running a stuck script answers nothing else: sick.
            && !matches!(e.code(), Some("LOADING" | "BUSY"))
            // A write that met a demoted master: the slot map is stale, a cluster matter.
            && e.kind() != ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        {
            Self::Reply
        } else if e.kind() == ErrorKind::Server(redis::ServerErrorKind::ReadOnly) {
            Self::Cluster
        } else {
            Self::Other
        }
    }
}
