//! The configuration's errors, at the bottom of the config layer: the readers, the checks and
//! the builder return them, and nothing here knows any of those.

/// A start-up configuration error. It names the variable (or builder setting) and, except for
/// URLs, the value it got.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// An environment variable or setting holds a value outside its rule.
    #[error("{name}={value:?} is invalid: expected {expected}")]
    Invalid {
        /// The variable or setting name.
        name: &'static str,
        /// The value it got (truncated to 64 characters).
        value: String,
        /// The rule.
        expected: &'static str,
    },
    /// No setting has this name, as a variable or as a keyword
    /// ([`LoaderBuilder::with_setting`](crate::LoaderBuilder::with_setting)).
    #[error("no setting is named {0:?}")]
    Unknown(String),
    /// The shared cache is enabled but has no URL.
    #[error("DYN_MM_SHARED_IMAGE_CACHE_URL is required when DYN_MM_SHARED_IMAGE_CACHE_ENABLED=1")]
    MissingCacheUrl,
    /// The shared-cache URL or its TLS setup was refused (the URL is never echoed).
    #[error("DYN_MM_SHARED_IMAGE_CACHE_URL: {0}")]
    SharedCache(#[from] mmcache_shared_cache::Error),
    /// A file named by a variable could not be read.
    #[error("{name}: cannot read {path}: {reason}")]
    File {
        /// The variable name.
        name: &'static str,
        /// The path it named.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// `MMCACHE_JPEG_DECODER=libjpeg-turbo` and libturbojpeg did not load.
    #[error("MMCACHE_JPEG_DECODER=libjpeg-turbo: {0}")]
    JpegDecoder(String),
    /// The HTTP client could not be built.
    #[error("origin client: {0}")]
    Origin(String),
}

impl ConfigError {
    pub(crate) fn invalid(name: &'static str, value: &str, expected: &'static str) -> Self {
        Self::Invalid {
            name,
            value: truncated(value),
            expected,
        }
    }

    pub(crate) fn unknown(name: &str) -> Self {
        Self::Unknown(truncated(name))
    }
}

/// At most 64 characters of a value, for messages.
fn truncated(value: &str) -> String {
    value.chars().take(64).collect()
}

/// Why a setting's reader refused a text. The reader knows neither the name it was given
/// under (its variable or its keyword) nor the whole text: [`Refusal::naming`] adds both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The text is outside the rule, which says what was expected.
    Expected(&'static str),
    /// The text names a file that could not be read, for this reason.
    Unreadable(String),
}

impl Refusal {
    /// The error naming the setting as `name`, echoing `text`.
    pub(crate) fn naming(self, name: &'static str, text: &str) -> ConfigError {
        match self {
            Self::Expected(expected) => ConfigError::invalid(name, text, expected),
            Self::Unreadable(reason) => ConfigError::File {
                name,
                path: text.to_owned(),
                reason,
            },
        }
    }
}
