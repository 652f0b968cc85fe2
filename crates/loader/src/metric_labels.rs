//! Label values and handle tables shared by the loader's metrics and its embeddings' metrics
//! (both declared in their own `metrics` modules, which take these from here).

mmcache_metrics::label_values! {
    /// The `outcome` label of [`LOADS`](crate::metrics::LOADS),
    /// [`ORIGIN_FETCH_DURATION`](crate::metrics::ORIGIN_FETCH_DURATION) and the embeddings'
    /// fleet writes.
    pub enum Outcome: "outcome" { Ok = "ok", Error = "error" }
}

mmcache_metrics::label_values! {
    /// The `reason` label of [`BYPASSES`](crate::metrics::BYPASSES) and of the embeddings'
    /// bypasses.
    pub enum BypassReason: "reason" { NoScope = "no_scope" }
}

/// One handle per value of a label enum, resolved when built.
pub(crate) struct PerLabel<T>(Vec<T>);

impl<T> PerLabel<T> {
    pub(crate) fn new<E: Copy>(all: &[E], make: impl Fn(E) -> T) -> Self {
        Self(all.iter().map(|e| make(*e)).collect())
    }

    /// The handle of `value` (`value as usize` indexes the enum's `ALL`).
    pub(crate) fn get(&self, index: usize) -> &T {
        &self.0[index]
    }
}

impl<T> std::fmt::Debug for PerLabel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerLabel").finish_non_exhaustive()
    }
}
