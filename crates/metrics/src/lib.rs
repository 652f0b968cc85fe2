//! Metric declarations for mmcache's crates, at the bottom of the workspace: every crate that
//! records metrics declares them with these shapes ([`metric`]) and records the events its own
//! stats count through these handles ([`counted`]). The loader gathers the declarations of every
//! crate (its `metrics::ALL`) and sets up the exporter on top; this crate records nothing and
//! installs no recorder.

pub mod counted;
pub mod metric;

/// The README's example, compiled as a doctest so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
