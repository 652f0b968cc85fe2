//! The workspace's documentation checks, one module per test file, linked into one binary.

mod docs;
