//! The one declaration of every setting: its variable, its table, default, rule and
//! documentation (docs/configuration.md's tables are generated from them, `doc_tables.rs`),
//! its `mmcache.Loader` keyword, how its text is read (the environment's, the builder's
//! [`LoaderBuilder::with_setting`](crate::LoaderBuilder::with_setting) and Python's keywords
//! alike) and whose rule checks it. This file holds the shape of a declaration and the order;
//! the declarations themselves are in one file per table of docs/configuration.md. A tier
//! crate's field is checked by that crate's own `validate`; the loader's fields and the rules
//! spanning crates, in `validate.rs`.

use super::Config;
use super::error::{ConfigError, Refusal};

pub(super) mod disk;
pub(super) mod dynamo;
pub(super) mod own;
pub(super) mod process;
pub(super) mod shared_cache;

/// One setting of [`Config`].
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Its environment variable (one of [`crate::env`]).
    pub name: &'static str,
    /// Its default, as docs/configuration.md states it: a value in backticks, or words.
    pub default: &'static str,
    /// Which table of docs/configuration.md lists it.
    pub section: Section,
    /// The start of its rule in docs/configuration.md: its bounds, which a test holds to the
    /// checked ones.
    pub rule: &'static str,
    /// What follows the rule in docs/configuration.md (the setting's documentation), as
    /// written: a fact another crate owns appears as a placeholder that
    /// [`Setting::doc_text`] fills in from its constant.
    pub doc: &'static str,
    /// The keyword argument of `mmcache.Loader(...)` that sets the same thing, and the other
    /// name [`LoaderBuilder::with_setting`](crate::LoaderBuilder::with_setting) knows it by.
    pub python: &'static str,
    /// What that keyword takes, as docs/configuration.md states it.
    pub python_value: &'static str,
    /// How its text is read into the configuration; bounds come later.
    pub(super) read: Read,
    /// Whose rule checks the value read.
    pub(super) checked_by: CheckedBy,
}

/// Reads a setting's text into the configuration. The environment never hands it a blank text
/// (a blank variable is unset); [`LoaderBuilder::with_setting`](crate::LoaderBuilder::with_setting)
/// may, to unset a setting.
pub(super) type Reader = fn(&mut Config, &str) -> Result<(), Refusal>;

/// How a setting's text is read, by its variable's name and by its keyword.
#[derive(Debug, Clone, Copy)]
pub(super) enum Read {
    /// Both names take the same text, read by the same reader.
    Same(Reader),
    /// The keyword takes a text of its own (bytes where the variable counts MiB, the PEM
    /// itself where the variable names its file), read by its own reader.
    Apart {
        /// The variable's reader.
        variable: Reader,
        /// The keyword's reader.
        keyword: Reader,
    },
}

/// Placeholders of [`Setting::doc`] and the constants they stand for, so a number is written
/// once, where its crate declares it.
const DOC_CONSTANTS: [(&str, u64); 1] = [(
    "{ENTRY_OVERHEAD_BYTES}",
    mmcache_decode::ENTRY_OVERHEAD_BYTES,
)];

impl Setting {
    /// [`Setting::doc`] with its placeholders filled in: the text docs/configuration.md shows.
    pub fn doc_text(&self) -> String {
        DOC_CONSTANTS
            .iter()
            .fold(self.doc.to_owned(), |doc, (name, value)| {
                doc.replace(name, &value.to_string())
            })
    }

    /// The setting whose variable or keyword is `name`.
    pub fn named(name: &str) -> Option<&'static Setting> {
        SETTINGS.iter().find(|s| s.name == name || s.python == name)
    }

    /// Reads `text` into `config` as the name it was given under (its variable or its keyword)
    /// takes it; a refusal names the setting by that name.
    pub(crate) fn read_as(
        &self,
        name: &str,
        config: &mut Config,
        text: &str,
    ) -> Result<(), ConfigError> {
        let by_keyword = name == self.python;
        let read = match self.read {
            Read::Apart { keyword, .. } if by_keyword => keyword,
            Read::Same(read) | Read::Apart { variable: read, .. } => read,
        };
        let name = if by_keyword { self.python } else { self.name };
        read(config, text).map_err(|refusal| refusal.naming(name, text))
    }
}

/// A variable read outside a loader's configuration (by the `mmcache` command, the Python
/// runtime or a Python module, as its documentation says), listed with the settings so that
/// every variable the package reads is declared once. [`Config`] never reads it.
#[derive(Debug, Clone, Copy)]
pub struct Variable {
    /// The variable (one of [`crate::env`]).
    pub name: &'static str,
    /// Its default, as docs/configuration.md states it.
    pub default: &'static str,
    /// The start of its rule in docs/configuration.md.
    pub rule: &'static str,
    /// What follows the rule: what it does, and who reads it.
    pub doc: &'static str,
}

/// Every variable read outside a loader's configuration.
pub const PROCESS_VARIABLES: [Variable; 3] = process::VARIABLES;

/// Whose rule checks a setting: a tier crate's `validate`, by the field it sets (its refusal
/// is shown under this setting's variable), or the loader's (`validate.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CheckedBy {
    /// The loader.
    Loader,
    /// [`mmcache_shared_cache::SharedCacheConfig::validate`].
    SharedCache(mmcache_shared_cache::Field),
    /// [`mmcache_disk_cache::DiskCacheConfig::validate`].
    Disk(mmcache_disk_cache::Field),
}

/// The tables of docs/configuration.md, each generated from the settings declared in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Variables the Python implementation (ai-dynamo) reads too, with the same meaning.
    Dynamo,
    /// mmcache's own variables.
    Own,
    /// The shared cache's breakers, stampede lease and write-behind queue.
    SharedCache,
    /// The host disk tier.
    Disk,
    /// Hedged reads and bounded writes of the shared cache.
    Hedge,
}

impl Section {
    /// Every section, in the order of docs/configuration.md.
    pub const ALL: [Section; 5] = [
        Section::Dynamo,
        Section::Own,
        Section::SharedCache,
        Section::Disk,
        Section::Hedge,
    ];

    /// The name of its table's marker in docs/configuration.md.
    pub fn marker(self) -> &'static str {
        match self {
            Section::Dynamo => "dynamo",
            Section::Own => "own",
            Section::SharedCache => "shared-cache",
            Section::Disk => "disk",
            Section::Hedge => "hedge",
        }
    }
}

/// The runs of declarations, in the order of [`SETTINGS`] (the order of the Python keyword
/// table in docs/configuration.md, and of [`Config::from_lookup`]).
const RUNS: [&[Setting]; 7] = [
    &dynamo::SETTINGS,
    &own::CACHES_AND_ORIGIN,
    &shared_cache::SHARED_CACHE,
    &shared_cache::HEDGE,
    &own::DECODE_AND_POLICY,
    &disk::SETTINGS,
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

/// Every setting, in the order [`Config::from_lookup`] reads them.
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

fn saturating_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}
