//! The [`Loader`] handle: what its clones share. Its public methods are the crate's face
//! (`lib.rs`); the tier path they call is [`Tiers`]'s.

use std::sync::Arc;

use crate::embeddings::Embeddings;
use crate::tiers::Tiers;

/// The facade: loads image URLs through every cache layer. Cheap to clone (two `Arc`s).
#[derive(Clone)]
pub struct Loader {
    /// Every tier and the loads in flight.
    pub(crate) tiers: Arc<Tiers>,
    /// The embedding caches (their fleet tiers share the disk tier and the shared cache).
    pub(crate) embeddings: Embeddings,
}

impl std::fmt::Debug for Loader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("config", &self.tiers.config)
            .finish_non_exhaustive()
    }
}
