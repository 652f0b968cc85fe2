//! The decode crate's integration tests, one module per former test file, linked into one
//! binary. The tests that measure allocations with a counting global allocator (`hostile`,
//! `fuzz_regressions`) keep a binary of their own beside this folder.

mod content_key;
mod decode;
mod metrics_names;
mod pillow_cases;
mod pillow_parity;
mod profile_parity;
mod vllm_hash;
