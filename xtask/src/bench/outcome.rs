//! What a bench operation reports: `Ok`, or its failure's kind and the class of its URL (the
//! path without its last segment: the image set of one scenario). A run with failures fails
//! with every kind counted, so a busy machine's failed run says which loads failed and why.

use std::collections::BTreeMap;
use std::fmt::Display;

use mmcache_loader::{Error, Loaded, Source};

/// A failed operation: its kind and URL class.
pub(crate) type Failure = String;

/// One operation's outcome.
pub(crate) type Outcome = Result<(), Failure>;

/// `/hit-small-JPEG/*` for `http://127.0.0.1:8080/hit-small-JPEG/12`.
pub(crate) fn url_class(url: &str) -> String {
    let path = url
        .split_once("://")
        .map_or(url, |(_, rest)| rest.find('/').map_or("/", |i| &rest[i..]));
    match path.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/*"),
        None => path.to_owned(),
    }
}

/// A failure of `kind` on `url`.
pub(crate) fn failed(kind: impl Display, url: &str) -> Failure {
    format!("{kind} ({})", url_class(url))
}

/// A load that must succeed and come from one of `want`.
pub(crate) fn from_sources(
    r: &mmcache_loader::Result<Loaded>,
    want: &[Source],
    url: &str,
) -> Outcome {
    match r {
        Ok(l) if want.contains(&l.source) => Ok(()),
        Ok(l) => {
            let want: Vec<&str> = want.iter().map(|s| s.as_str()).collect();
            Err(failed(
                format_args!("came from {}, not {}", l.source.as_str(), want.join(" or ")),
                url,
            ))
        }
        Err(e) => Err(load_error(e, url)),
    }
}

/// A load that must succeed, from anywhere.
pub(crate) fn loaded<T>(r: &mmcache_loader::Result<T>, url: &str) -> Outcome {
    r.as_ref().map(|_| ()).map_err(|e| load_error(e, url))
}

/// A load's error, with its status.
pub(crate) fn load_error(e: &Error, url: &str) -> Failure {
    failed(format_args!("error {}: {e}", e.http_status()), url)
}

/// The failures of a run, counted by kind.
#[derive(Debug, Default)]
pub(crate) struct Failures(BTreeMap<Failure, usize>);

impl Failures {
    /// Counts `outcome` when it failed.
    pub(crate) fn add(&mut self, outcome: Outcome) {
        if let Err(f) = outcome {
            *self.0.entry(f).or_default() += 1;
        }
    }

    /// Adds another tally.
    pub(crate) fn merge(&mut self, other: Failures) {
        for (f, n) in other.0 {
            *self.0.entry(f).or_default() += n;
        }
    }

    /// `Ok` when none failed, else an error listing each kind with its count (the 10
    /// commonest; the rest counted).
    pub(crate) fn check(self, ops: usize) -> anyhow::Result<()> {
        let total: usize = self.0.values().sum();
        if total == 0 {
            return Ok(());
        }
        let mut kinds: Vec<(Failure, usize)> = self.0.into_iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let shown: Vec<String> = kinds
            .iter()
            .take(10)
            .map(|(f, n)| format!("{n} x {f}"))
            .collect();
        let more = kinds.len().saturating_sub(10);
        let more = if more > 0 {
            format!("; {more} other kinds")
        } else {
            String::new()
        };
        anyhow::bail!(
            "{total} of {ops} operations failed: {}{more}",
            shown.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_run_says_which_loads_failed_and_why() {
        assert_eq!(
            url_class("http://127.0.0.1:1/hit-small-JPEG/12"),
            "/hit-small-JPEG/*"
        );
        assert_eq!(url_class("http://127.0.0.1:1/a"), "/*");
        let mut f = Failures::default();
        f.add(Ok(()));
        for _ in 0..3 {
            f.add(Err(failed(
                "came from origin, not shared",
                "http://h/hit-PNG/1",
            )));
        }
        f.add(Err(failed(
            "error 408: origin timed out",
            "http://h/hit-PNG/2",
        )));
        let err = f.check(4000).unwrap_err().to_string();
        assert_eq!(
            err,
            "4 of 4000 operations failed: 3 x came from origin, not shared (/hit-PNG/*); \
             1 x error 408: origin timed out (/hit-PNG/*)"
        );
        assert!(Failures::default().check(10).is_ok());
    }
}
