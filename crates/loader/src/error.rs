//! Typed errors of a load. (Configuration errors are the config layer's own: `config/error.rs`.)

use std::sync::Arc;

use crate::config::env;

pub use mmcache_decode::Error as DecodeError;
pub use mmcache_origin::Error as OriginError;

/// A result with the load [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub use mmcache_origin::DataUrlError;

/// A failed load. Cloneable, because every waiter of a joined load gets the same error.
///
/// Exhaustive on purpose (not `#[non_exhaustive]`): the workspace's consumers (the Python
/// exception classes) map every variant with a `match` the compiler checks, so a new variant
/// is a breaking change that must come with its mapping.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The origin (or the URL policy) refused or failed the download. The message names the
    /// setting that changes the outcome, when one does ([`Error::setting`]).
    #[error("{inner}{note}", inner = .0, note = note(self))]
    Origin(OriginError),
    /// The bytes are not a supported image, or exceed a limit (named as for `Origin`).
    #[error("{inner}{note}", inner = .0, note = note(self))]
    Decode(DecodeError),
    /// A bad `data:` URL.
    #[error("invalid data URL: {inner}{note}", inner = .0, note = note(self))]
    DataUrl(#[from] DataUrlError),
    /// Several loads of a batch failed; none of them with an origin status or a policy error.
    #[error("{} of the batch's loads failed: {}", .0.len(), summary(.0))]
    Batch(Arc<[(usize, Error)]>),
    /// The image needs more memory to decode than the whole decode budget
    /// (`MMCACHE_DECODE_MEMORY_BYTES`), estimated from its headers; nothing was allocated.
    #[error("image needs about {} MiB to decode, more than the decode budget of {} MiB{}", .needed >> 20, .budget >> 20, note(self))]
    OverDecodeBudget {
        /// Estimated bytes.
        needed: u64,
        /// The budget.
        budget: u64,
    },
    /// Other decodes held the decode budget for the whole wait (`MMCACHE_DECODE_WAIT_SECS`).
    #[error("decoder busy: no decode budget freed within {waited:?}{}", note(self))]
    DecodeBusy {
        /// How long the load waited.
        waited: std::time::Duration,
    },
    /// The load did not finish within its overall deadline (`MMCACHE_LOAD_TIMEOUT_SECS`);
    /// every caller waiting for it gets this error (408), and the next load starts afresh.
    #[error("load timed out after {after:?}{}", note(self))]
    LoadTimeout {
        /// The deadline.
        after: std::time::Duration,
    },
    /// The load task died (a bug): reported, never cached.
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<OriginError> for Error {
    fn from(e: OriginError) -> Self {
        Self::Origin(e)
    }
}

impl From<DecodeError> for Error {
    fn from(e: DecodeError) -> Self {
        Self::Decode(e)
    }
}

/// What a message adds after the failure: the setting that changes it, in words.
fn note(e: &Error) -> String {
    use mmcache_origin::PolicyViolation as P;
    let Some(name) = e.setting() else {
        return String::new();
    };
    match e {
        Error::Origin(OriginError::Policy(P::Scheme(_))) => {
            format!(" (only https; http too with {name}=1)")
        }
        Error::Origin(OriginError::Policy(P::InternalAddress(_))) => {
            format!(" ({name}=1 allows internal addresses)")
        }
        Error::Origin(OriginError::Policy(P::DomainNotAllowed(_))) => {
            format!(" (the allowed hosts: {name})")
        }
        Error::Decode(DecodeError::FormatNotAccepted { .. }) => {
            format!(" (the accepted formats: {name})")
        }
        Error::Decode(DecodeError::JpegDecoderUnavailable(_)) => format!(" ({name})"),
        Error::DecodeBusy { .. } => {
            format!(
                " (the wait: {name}; the budget: {})",
                env::DECODE_MEMORY_BYTES
            )
        }
        Error::Origin(OriginError::DownloadBusy { .. }) => {
            format!(
                " (the wait: {name}; the budget: {})",
                env::DOWNLOAD_MEMORY_BYTES
            )
        }
        _ => format!(" (the limit: {name})"),
    }
}

fn summary(failures: &[(usize, Error)]) -> String {
    failures
        .iter()
        .map(|(i, e)| format!("#{i}: {e}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// An HTTP status a worker can return: the origin's status as is, timeout 408, connection
    /// failure 400, unsupported or invalid image 415, too large or too many pixels 413, URL
    /// policy 400/403, bad data URL 400.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Origin(e) => e.http_status(),
            Self::Decode(e) => e.http_status(),
            Self::DataUrl(DataUrlError::TooLarge { .. }) => 413,
            Self::DataUrl(DataUrlError::NotImage) => 415,
            Self::DataUrl(_) => 400,
            Self::Batch(failures) => failures.first().map_or(500, |(_, e)| e.http_status()),
            Self::OverDecodeBudget { .. } => 413,
            Self::DecodeBusy { .. } => 503,
            Self::LoadTimeout { .. } => 408,
            Self::Internal(_) => 500,
        }
    }

    /// The setting (its environment variable) that changes this outcome, when one does: the
    /// limit that was reached, the switch that would allow the URL, the list of accepted
    /// formats. Messages name it too.
    pub fn setting(&self) -> Option<&'static str> {
        use mmcache_origin::PolicyViolation as P;
        Some(match self {
            Self::Origin(OriginError::Policy(P::Scheme(_) | P::InternalAddress(_))) => {
                env::ALLOW_INTERNAL
            }
            Self::Origin(OriginError::Policy(P::DomainNotAllowed(_))) => env::ALLOWED_MEDIA_DOMAINS,
            Self::Origin(OriginError::TooLarge { .. })
            | Self::DataUrl(DataUrlError::TooLarge { .. }) => env::MAX_FILE_SIZE_MB,
            Self::Origin(OriginError::OverDownloadBudget { .. }) => env::DOWNLOAD_MEMORY_BYTES,
            Self::Origin(OriginError::DownloadBusy { .. }) | Self::DecodeBusy { .. } => {
                env::DECODE_WAIT_SECS
            }
            Self::Decode(DecodeError::FormatNotAccepted { .. }) => env::IMAGE_FORMATS,
            Self::Decode(DecodeError::TooManyPixels { .. }) => env::MAX_PIXELS,
            Self::Decode(DecodeError::JpegDecoderUnavailable(_)) => env::JPEG_DECODER,
            Self::OverDecodeBudget { .. } => env::DECODE_MEMORY_BYTES,
            Self::LoadTimeout { .. } => env::LOAD_TIMEOUT_SECS,
            _ => return None,
        })
    }

    /// True for origin timeouts and the load deadline.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Origin(e) if e.is_timeout())
            || matches!(self, Self::LoadTimeout { .. })
    }

    /// True for size and pixel limits.
    pub fn is_too_large(&self) -> bool {
        match self {
            Self::Origin(e) => e.is_too_large(),
            Self::Decode(e) => e.is_too_large(),
            Self::DataUrl(DataUrlError::TooLarge { .. }) | Self::OverDecodeBudget { .. } => true,
            _ => false,
        }
    }

    /// True when the URL policy refused the URL or a redirect.
    pub fn is_policy(&self) -> bool {
        matches!(self, Self::Origin(e) if e.is_policy())
    }

    /// The origin's own HTTP status, when it answered with an error status.
    pub fn origin_status(&self) -> Option<u16> {
        match self {
            Self::Origin(e) => e.origin_status(),
            _ => None,
        }
    }

    /// The failure that stands for a failed batch (the rule of
    /// [`Loader::load_batch`](crate::Loader::load_batch), and of the Python binding's): the
    /// first with an origin HTTP status, else the first URL-policy refusal ([`Self::is_policy`]);
    /// `None` when neither is there and the batch reports every failure ([`Self::Batch`]).
    pub fn batch_representative(failures: &[(usize, Error)]) -> Option<&(usize, Error)> {
        failures
            .iter()
            .find(|(_, e)| e.origin_status().is_some())
            .or_else(|| failures.iter().find(|(_, e)| e.is_policy()))
    }
}
