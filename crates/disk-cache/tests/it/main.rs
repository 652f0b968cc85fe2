//! The disk tier's integration tests, one module per former test file, linked into one binary.
//! `fork.rs` keeps a binary of its own beside this folder: its forked child inherits every
//! file descriptor of the process.

mod bounds;
mod common;
mod disk;
mod hostile;
mod kubernetes;
