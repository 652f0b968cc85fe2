//! The shared cache's integration tests, one module per former test file, linked into one
//! binary. The gate runs `cluster::` (with its denial tests) once more on Valkey.

mod cluster;
mod hostnames;
mod samples;
mod server_errors;
mod wedged;
