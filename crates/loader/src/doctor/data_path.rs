//! The data path as a worker runs it, on keys of the doctor's own (a random identity in each
//! key space, deleted at the end): for images and for embeddings, a write, a bounded read, a
//! lease, its compare-and-delete release and a delete (for embeddings also a second lease,
//! given up for the not-stored marker, and a third, renewed), each through the shared cache's own
//! operations, so each sends exactly the commands a worker sends.

use std::time::Duration;

use bytes::Bytes;
use mmcache_scope::{CacheIdentity, EmbeddingKey, EmbeddingKeyInput};
use mmcache_shared_cache::{
    Denial, GetOutcome, LeaseHolder, LeaseOutcome, Refused, SharedCache, SharedCacheStats,
    WriteOutcome, commands,
};

use crate::embeddings::fleet;

/// The key spaces, as the server's ACL sees them.
const IMAGES: &str = "dynamo:mm:image:";
const EMBEDDINGS: &str = "mmcache:emb:v1:";
/// Long enough for the doctor's few round trips, short enough that a killed doctor leaves
/// nothing behind for long.
const TTL: Duration = Duration::from_secs(60);

/// One operation of the data path and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Step {
    /// The key space (`dynamo:mm:image:` or `mmcache:emb:v1:`).
    pub key_space: &'static str,
    /// What it does: `write`, `read`, `lease`, `release`, `delete`.
    pub name: &'static str,
    /// The commands it sends (from [`mmcache_shared_cache::commands`]).
    pub commands: &'static [&'static str],
    /// How it ended.
    pub result: StepResult,
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepResult {
    /// It did what a worker needs.
    Ok,
    /// The server refused it (or it was held back by a refusal in force).
    Denied(Denial),
    /// It failed otherwise: why.
    Failed(String),
}

/// Runs the data path in both key spaces.
pub(super) async fn run(cache: &SharedCache) -> Vec<Step> {
    let nonce = nonce();
    let identity = CacheIdentity::unscoped(&format!("mmcache-doctor:{nonce}"));
    let embedding = EmbeddingKey::unscoped(
        &EmbeddingKeyInput::caller(format!("mmcache-doctor:{nonce}")),
        "mmcache-doctor",
    );
    let value = Bytes::from(format!("mmcache doctor {nonce}"));
    let mut steps = Vec::new();
    let mut check = Check {
        cache,
        steps: &mut steps,
    };

    // Images: the entry key of a random identity, as `Loader::load` writes and reads it.
    let wrote = cache.set(&identity, value.clone()).await;
    check.write(IMAGES, wrote);
    let (read, outcome) = cache.get_with_outcome(&identity).await;
    check.read(IMAGES, wrote, read, outcome, &value);
    match cache.try_lease(&identity, TTL).await {
        LeaseOutcome::Won(token) => {
            check.ok(IMAGES, "lease", commands::SET);
            let released = cache.release_lease(&identity, token).await;
            let lease = mmcache_shared_cache::lease_key(&identity);
            let left = still_there(cache.get_key(&lease, 64).await.1);
            check.release(IMAGES, released, left);
        }
        other => check.lease(IMAGES, other),
    }
    let deleted = cache.delete(&identity).await;
    let left = still_there(cache.get_with_outcome(&identity).await.1);
    check.delete(IMAGES, deleted, left);

    // Embeddings: the value key and the lease key of a random embedding key.
    let key = fleet::shared_key(&embedding);
    let wrote = cache.set_key(&key, value.clone(), TTL).await;
    check.write(EMBEDDINGS, wrote);
    let (read, outcome) = cache.get_key(&key, value.len()).await;
    check.read(EMBEDDINGS, wrote, read, outcome, &value);
    let lease = fleet::lease_key(&embedding);
    match cache.try_lease_key(&lease, TTL).await {
        LeaseOutcome::Won(token) => {
            check.ok(EMBEDDINGS, "lease", commands::SET);
            // The release, then the abandon, come before the renew: a refused renew (a
            // script's PEXPIRE; Redis 7.0 names only the script) holds the key space's scripts
            // back, and would hide whether the others work.
            let released = cache.release_lease_key(&lease, token).await;
            let left = still_there(cache.get_key(&lease, 64).await.1);
            check.release(EMBEDDINGS, released, left);
            // A compute whose value will not be stored leaves the not-stored marker ...
            match cache.try_lease_key(&lease, TTL).await {
                LeaseOutcome::Won(token) => {
                    cache.abandon_lease_key(&lease, token, TTL).await;
                    match cache.lease_holder(&lease).await {
                        LeaseHolder::NotStored => {
                            check.ok(EMBEDDINGS, "abandon", commands::ABANDON)
                        }
                        _ => check.failed(
                            EMBEDDINGS,
                            "abandon",
                            commands::ABANDON,
                            "the not-stored marker is not there",
                        ),
                    }
                }
                _ => {
                    let why = "no second lease after the release, to give up";
                    check.failed(EMBEDDINGS, "abandon", commands::ABANDON, why);
                }
            }
            let _ = cache.delete_key(&lease).await;
            // ... and a compute renews its lease while it runs.
            match cache.try_lease_key(&lease, TTL).await {
                LeaseOutcome::Won(token) => {
                    match cache.renew_lease_key(&lease, token, TTL).await {
                        Some(true) => check.ok(EMBEDDINGS, "renew", commands::RENEW),
                        _ => check.failed(EMBEDDINGS, "renew", commands::RENEW, "not renewed"),
                    }
                    let _ = cache.delete_key(&lease).await;
                }
                _ => {
                    let why = "no third lease after the marker was deleted, to renew";
                    check.failed(EMBEDDINGS, "renew", commands::RENEW, why);
                }
            }
        }
        other => check.lease(EMBEDDINGS, other),
    }
    let deleted = cache.delete_key(&key).await;
    let left = still_there(cache.get_key(&key, value.len()).await.1);
    check.delete(EMBEDDINGS, deleted, left);
    steps
}

/// Whether a read after a release or a delete found the key still there (`false` when it
/// could not tell: that read's own failure is reported by the read step).
fn still_there(outcome: GetOutcome) -> bool {
    matches!(outcome, GetOutcome::Hit | GetOutcome::Oversized)
}

/// 64 random bits in hex (std's randomly keyed hasher: no extra dependency).
fn nonce() -> String {
    use std::hash::BuildHasher;
    let bits = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    format!("{bits:016x}")
}

/// Records each step, explaining a failure from the denials in force and the cache's counts.
struct Check<'a> {
    cache: &'a SharedCache,
    steps: &'a mut Vec<Step>,
}

impl Check<'_> {
    fn push(
        &mut self,
        key_space: &'static str,
        name: &'static str,
        commands: &'static [&'static str],
        result: StepResult,
    ) {
        self.steps.push(Step {
            key_space,
            name,
            commands,
            result,
        });
    }

    fn ok(
        &mut self,
        key_space: &'static str,
        name: &'static str,
        commands: &'static [&'static str],
    ) {
        self.push(key_space, name, commands, StepResult::Ok);
    }

    /// A step that did not do its job: denied if a denial in force covers one of its
    /// commands on its key space (or the connect), else `why`.
    fn failed(
        &mut self,
        key_space: &'static str,
        name: &'static str,
        commands: &'static [&'static str],
        why: &str,
    ) {
        let denial = self
            .cache
            .denials()
            .into_iter()
            .find(|d| match &d.key_prefix {
                None => true,
                // A credentials denial (AUTH) refuses every command of its key space.
                Some(prefix) => {
                    prefix == key_space
                        && (d.refused == Refused::Credentials
                            || commands.contains(&d.command.as_str()))
                }
            });
        let result = match denial {
            Some(d) => StepResult::Denied(d),
            None => StepResult::Failed(format!("{why} ({})", explain(&self.cache.stats()))),
        };
        self.push(key_space, name, commands, result);
    }

    fn write(&mut self, key_space: &'static str, wrote: WriteOutcome) {
        if wrote == WriteOutcome::Success {
            self.ok(key_space, "write", commands::SET);
        } else {
            self.failed(key_space, "write", commands::SET, "not written");
        }
    }

    fn read(
        &mut self,
        key_space: &'static str,
        wrote: WriteOutcome,
        read: Option<Bytes>,
        outcome: GetOutcome,
        value: &Bytes,
    ) {
        let why = match (read, outcome) {
            (Some(v), _) if v == *value => return self.ok(key_space, "read", commands::READ),
            (Some(_), _) => "another value came back",
            // The read worked; there was nothing to read.
            (None, GetOutcome::Miss) if wrote != WriteOutcome::Success => {
                return self.ok(key_space, "read", commands::READ);
            }
            (None, GetOutcome::Miss) => "the value just written was not found",
            (None, GetOutcome::NoMemory) => "no room in the download budget",
            (None, _) => "no answer",
        };
        self.failed(key_space, "read", commands::READ, why);
    }

    fn lease(&mut self, key_space: &'static str, outcome: LeaseOutcome) {
        let why = match outcome {
            LeaseOutcome::Held => "the doctor's own fresh lease was held by someone else",
            _ => "not taken",
        };
        self.failed(key_space, "lease", commands::SET, why);
    }

    fn release(&mut self, key_space: &'static str, released: WriteOutcome, left: bool) {
        let why = "the lease is still there";
        let step = (
            "release",
            commands::RELEASE,
            why,
            "not released (it expires)",
        );
        self.settled(key_space, step, released, left);
    }

    fn delete(&mut self, key_space: &'static str, deleted: WriteOutcome, left: bool) {
        let step = (
            "delete",
            commands::DEL,
            "the value is still there",
            "not deleted",
        );
        self.settled(key_space, step, deleted, left);
    }

    /// A step that removes a key, checked by a read after it: `(name, commands, why when the
    /// key is left, why when the step failed)`.
    fn settled(
        &mut self,
        key_space: &'static str,
        (name, commands, left_why, failed_why): (&'static str, &'static [&'static str], &str, &str),
        outcome: WriteOutcome,
        left: bool,
    ) {
        match (outcome, left) {
            (WriteOutcome::Success, false) => self.ok(key_space, name, commands),
            (WriteOutcome::Success, true) => self.failed(key_space, name, commands, left_why),
            _ => self.failed(key_space, name, commands, failed_why),
        }
    }
}

/// What the cache's counts say about the failures so far.
fn explain(s: &SharedCacheStats) -> &'static str {
    if s.error_replies > 0 {
        "an error reply, such as OOM or WRONGTYPE"
    } else if s.skipped > 0 {
        "a node's breaker is open"
    } else {
        "a timeout or a lost connection; MMCACHE_LOG=debug shows each failure"
    }
}
