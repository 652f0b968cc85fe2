//! The `mmcache` binary's integration tests, one module per former test file, linked into one
//! binary.

mod cli;
mod common;
mod disk_tier;
mod doctor;
mod doctor_data_path;
mod host_pixels;
mod ops;
mod warm;
