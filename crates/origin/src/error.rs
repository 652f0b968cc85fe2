//! Typed errors of the origin layer.

use std::net::IpAddr;

/// A result with the origin [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a URL was refused before any request was sent (or on a redirect hop).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyViolation {
    /// The URL does not parse.
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    /// `file:` or a scheme-less path.
    #[error("local file access is not allowed")]
    LocalFile,
    /// A scheme other than `https` (or `http` with internal access allowed).
    #[error("URL scheme `{0}` is not allowed")]
    Scheme(String),
    /// `user:password@` in the URL.
    #[error("credentials in the URL are not allowed")]
    Userinfo,
    /// The URL has no host.
    #[error("URL has no host")]
    NoHost,
    /// The host is, or resolves to, a private, loopback, link-local or metadata address.
    #[error("address {0} is internal and not allowed")]
    InternalAddress(IpAddr),
    /// The host is not on the allowed media domains (`MMCACHE_ALLOWED_MEDIA_DOMAINS`).
    #[error("host {0} is not an allowed media domain")]
    DomainNotAllowed(String),
}

impl PolicyViolation {
    /// 403 for internal addresses (the request is understood and refused), 400 otherwise.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::InternalAddress(_) | Self::DomainNotAllowed(_) => 403,
            _ => 400,
        }
    }
}

/// An origin download failure.
///
/// Exhaustive on purpose (not `#[non_exhaustive]`), as `mmcache_loader::Error`: a new variant
/// is a breaking change that must come with its mapping.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The URL (or a redirect target) broke the URL policy.
    #[error("URL policy: {0}")]
    Policy(#[from] PolicyViolation),
    /// The origin answered with a non-success status.
    #[error("origin returned HTTP {0}")]
    Status(u16),
    /// More than the allowed number of redirects.
    #[error("too many redirects (limit {0})")]
    TooManyRedirects(u8),
    /// A redirect pointed back at a URL already visited.
    #[error("redirect loop")]
    RedirectLoop,
    /// A redirect without a usable `Location`.
    #[error("redirect without a valid Location header")]
    BadRedirect,
    /// The body is larger than the cap (announced or counted).
    #[error("origin body exceeds the {limit}-byte limit")]
    TooLarge {
        /// The cap in bytes.
        limit: u64,
    },
    /// The body needs more than the whole download budget (`MMCACHE_DOWNLOAD_MEMORY_BYTES`);
    /// nothing more was read.
    #[error("body of {needed} bytes exceeds the download budget of {budget} bytes")]
    OverDownloadBudget {
        /// Bytes the body needs (announced, or read so far).
        needed: u64,
        /// The whole budget.
        budget: u64,
    },
    /// Other downloads held the download budget for the whole wait.
    #[error("downloads busy: no download budget freed within {waited:?}")]
    DownloadBusy {
        /// How long the download waited.
        waited: std::time::Duration,
    },
    /// The origin sent no bytes.
    #[error("origin returned an empty body")]
    EmptyBody,
    /// Connect or overall deadline passed.
    #[error("origin timed out")]
    Timeout,
    /// Could not connect, or the connection broke mid-response.
    #[error("origin connection failed: {0}")]
    Connect(String),
    /// The HTTP client could not be built (bad TLS setup).
    #[error("HTTP client setup failed: {0}")]
    Client(String),
}

impl Error {
    /// An HTTP status a worker can return for this error: origin status as is, timeout 408,
    /// connection failure 400, URL policy 400/403, too large 413.
    pub fn http_status(&self) -> u16 {
        match self {
            Self::Policy(p) => p.http_status(),
            Self::Status(s) => *s,
            Self::Timeout => 408,
            Self::TooLarge { .. } | Self::OverDownloadBudget { .. } => 413,
            Self::DownloadBusy { .. } => 503,
            Self::Client(_) => 500,
            Self::TooManyRedirects(_)
            | Self::RedirectLoop
            | Self::BadRedirect
            | Self::EmptyBody
            | Self::Connect(_) => 400,
        }
    }

    /// True for the connect timeout or the overall deadline.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Timeout)
    }

    /// True when the body was over the size cap or the whole download budget.
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            Self::TooLarge { .. } | Self::OverDownloadBudget { .. }
        )
    }

    /// True when the URL policy refused the URL or a redirect hop.
    pub fn is_policy(&self) -> bool {
        matches!(self, Self::Policy(_))
    }

    /// The origin's own status code, when it answered with one.
    pub fn origin_status(&self) -> Option<u16> {
        match self {
            Self::Status(s) => Some(*s),
            _ => None,
        }
    }
}
