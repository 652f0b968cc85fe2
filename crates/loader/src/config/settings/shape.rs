//! The shape of a declaration: a [`Setting`] (its variable, documentation, keyword and
//! reader), a [`Variable`] read outside a loader's configuration, and the tables they belong to.
//! The declarations themselves are in the other files of this folder, gathered by
//! `settings.rs`.

use crate::config::Config;
use crate::config::error::{ConfigError, Refusal};

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
    pub(in crate::config) read: Read,
    /// Whose rule checks the value read.
    pub(in crate::config) checked_by: CheckedBy,
}

/// Reads a setting's text into the configuration. The environment never hands it a blank text
/// (a blank variable is unset); [`LoaderBuilder::with_setting`](crate::LoaderBuilder::with_setting)
/// may, to unset a setting.
pub(in crate::config) type Reader = fn(&mut Config, &str) -> Result<(), Refusal>;

/// How a setting's text is read, by its variable's name and by its keyword.
#[derive(Debug, Clone, Copy)]
pub(in crate::config) enum Read {
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

    /// Whether its keyword takes a value of its own (another unit, or more than the
    /// variable's text), read by a reader of its own.
    #[cfg(test)]
    pub(crate) fn keyword_reads_apart(&self) -> bool {
        matches!(self.read, Read::Apart { .. })
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

/// Whose rule checks a setting: a tier crate's `validate`, by the field it sets (its refusal
/// is shown under this setting's variable), or the loader's (`validate.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::config) enum CheckedBy {
    /// The loader.
    Loader,
    /// [`mmcache_shared_cache::SharedCacheConfig::validate`].
    SharedCache(mmcache_shared_cache::Field),
    /// [`mmcache_disk_cache::DiskCacheConfig::validate`].
    Disk(mmcache_disk_cache::Field),
    /// The same, of the host pixel tier's configuration.
    Host(mmcache_disk_cache::Field),
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
    /// The host pixel tier.
    Host,
    /// Hedged reads and bounded writes of the shared cache.
    Hedge,
}

impl Section {
    /// Every section, in the order of docs/configuration.md.
    pub const ALL: [Section; 6] = [
        Section::Dynamo,
        Section::Own,
        Section::SharedCache,
        Section::Disk,
        Section::Host,
        Section::Hedge,
    ];

    /// The name of its table's marker in docs/configuration.md.
    pub fn marker(self) -> &'static str {
        match self {
            Section::Dynamo => "dynamo",
            Section::Own => "own",
            Section::SharedCache => "shared-cache",
            Section::Disk => "disk",
            Section::Host => "host-pixels",
            Section::Hedge => "hedge",
        }
    }
}
