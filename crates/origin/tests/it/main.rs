//! The origin client's integration tests, one module per former test file, linked into one
//! binary.

mod allowlist_dots;
mod dns;
mod fetch;
