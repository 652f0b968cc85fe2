//! The loader's integration tests, one module per former test file, linked into one binary.
//! Tests that need process-wide state of their own (a counting global allocator, the global
//! metrics recorder, the process-wide digest count, a binary that re-runs itself as workers)
//! keep a binary of their own beside this folder, each saying why at its top.

mod common;
mod deploy_worker;
mod disk_fill_lock;
mod disk_stall;
mod disk_writes;
mod dns;
mod dynamo_keys;
mod embeddings;
mod embeddings_bypass;
mod embeddings_find;
mod embeddings_fleet;
mod embeddings_fleet_keep;
mod embeddings_timeout;
mod error_messages;
mod fleet_common;
mod fuzz_regressions;
mod hedge;
mod host_pixels;
mod load_timeout;
mod local_path;
mod shared;
mod write_budget;
