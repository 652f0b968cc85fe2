//! The one declaration of every setting: its variable, its table, default, rule and
//! documentation (docs/configuration.md's tables are generated from them, `doc_tables.rs`),
//! its `mmcache.Loader` keyword, how its text is read (the environment's, the builder's
//! [`LoaderBuilder::with_setting`](crate::LoaderBuilder::with_setting) and Python's keywords
//! alike) and whose rule checks it. This file gathers the declarations in order (their shape is
//! `shape.rs`'s), from one file per table of docs/configuration.md. A tier
//! crate's field is checked by that crate's own `validate`; the loader's fields and the rules
//! spanning crates, in `validate.rs`.

pub(super) mod disk;
pub(super) mod dynamo;
pub(super) mod host;
pub(super) mod own;
pub(super) mod process;
mod shape;
pub(super) mod shared_cache;

pub(super) use shape::CheckedBy;
pub use shape::{Section, Setting, Variable};

/// Every variable read outside a loader's configuration.
pub const PROCESS_VARIABLES: [Variable; 3] = process::VARIABLES;

impl Setting {
    /// The setting whose variable or keyword is `name`.
    pub fn named(name: &str) -> Option<&'static Setting> {
        SETTINGS.iter().find(|s| s.name == name || s.python == name)
    }
}

/// The runs of declarations, in the order of [`SETTINGS`] (the order of the Python keyword
/// table in docs/configuration.md, and of [`Config::from_lookup`](crate::Config::from_lookup)).
const RUNS: [&[Setting]; 8] = [
    &dynamo::SETTINGS,
    &own::CACHES_AND_ORIGIN,
    &shared_cache::SHARED_CACHE,
    &shared_cache::HEDGE,
    &own::DECODE_AND_POLICY,
    &disk::SETTINGS,
    &host::SETTINGS,
    &own::BUDGETS_AND_EMBEDDINGS,
];

/// How many settings there are.
pub(super) const COUNT: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < RUNS.len() {
        n += RUNS[i].len();
        i += 1;
    }
    n
};

/// Every setting, in the order [`Config::from_lookup`](crate::Config::from_lookup) reads them.
pub const SETTINGS: [Setting; COUNT] = {
    let mut out = [RUNS[0][0]; COUNT];
    let (mut at, mut run) = (0, 0);
    while run < RUNS.len() {
        let mut i = 0;
        while i < RUNS[run].len() {
            out[at] = RUNS[run][i];
            at += 1;
            i += 1;
        }
        run += 1;
    }
    out
};

/// The variable names of [`SETTINGS`], in order (what [`super::env::ALL`] is).
pub(super) const fn names() -> [&'static str; COUNT] {
    let mut out = [""; COUNT];
    let mut i = 0;
    while i < COUNT {
        out[i] = SETTINGS[i].name;
        i += 1;
    }
    out
}

/// The variable of the setting checked by `checked_by`.
pub(super) fn name_checked_by(checked_by: CheckedBy) -> Option<&'static str> {
    SETTINGS
        .iter()
        .find(|s| s.checked_by == checked_by)
        .map(|s| s.name)
}
