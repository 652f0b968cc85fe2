//! Counts of loads by source, and the summary line `load` and `warm` print.

use mmcache_loader::Source;

/// Every source, in the order a load tries them (the order they are declared in).
const SOURCES: &[Source] = Source::ALL;

/// Loads that succeeded, by source, and loads that failed.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    by_source: [u64; SOURCES.len()],
    failed: u64,
}

impl Tally {
    pub(crate) fn ok(&mut self, source: Source) {
        if let Some(i) = SOURCES.iter().position(|&s| s == source) {
            self.by_source[i] += 1;
        }
    }

    pub(crate) fn failed(&mut self) {
        self.failed += 1;
    }

    pub(crate) fn any_failed(&self) -> bool {
        self.failed > 0
    }

    /// `N URLs, K ok, F failed (memory=… inflight=… host=… disk=… shared=… origin=… data=…)`.
    pub(crate) fn summary(&self) -> String {
        let ok: u64 = self.by_source.iter().sum();
        let sources: Vec<String> = SOURCES
            .iter()
            .zip(self.by_source)
            .map(|(s, n)| format!("{}={n}", s.as_str()))
            .collect();
        format!(
            "{} URLs, {ok} ok, {} failed ({})",
            ok + self.failed,
            self.failed,
            sources.join(" ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_every_source() {
        let mut t = Tally::default();
        t.ok(Source::Origin);
        t.ok(Source::Memory);
        t.failed();
        assert_eq!(
            t.summary(),
            "3 URLs, 2 ok, 1 failed (memory=1 inflight=0 host=0 disk=0 shared=0 origin=1 data=0)"
        );
        assert!(t.any_failed());
    }
}
