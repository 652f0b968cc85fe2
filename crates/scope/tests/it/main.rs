//! The scope crate's integration tests, one module per test file, linked into one binary.

mod dynamo_url_keys;
