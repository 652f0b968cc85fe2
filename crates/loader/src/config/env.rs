//! Environment variable names, each with what it sets. Each is declared beside its default,
//! rule, Python keyword and reader, in [`crate::SETTINGS`]'s declarations (or, read outside a
//! loader's configuration, in [`crate::PROCESS_VARIABLES`]), and re-exported here; [`ALL`] is
//! derived from them. This module reads the declarations; they never read it.

use super::error::ConfigError;

pub use super::settings::disk::*;
pub use super::settings::dynamo::*;
pub use super::settings::host::*;
pub use super::settings::own::*;
pub use super::settings::process::*;
pub use super::settings::shared_cache::*;

/// Every variable read by [`crate::Config::from_env`], in the order of [`crate::SETTINGS`].
pub const ALL: [&str; super::settings::COUNT] = super::settings::names();

/// Reads [`LOG`]'s text: blank is `warn`; otherwise `off`, `error`, `warn`, `info`, `debug` or
/// `trace`, and anything else is an error naming the variable.
pub fn log_level(value: &str) -> Result<tracing::level_filters::LevelFilter, ConfigError> {
    use tracing::level_filters::LevelFilter;
    Ok(match value.trim() {
        "" | "warn" => LevelFilter::WARN,
        "off" => LevelFilter::OFF,
        "error" => LevelFilter::ERROR,
        "info" => LevelFilter::INFO,
        "debug" => LevelFilter::DEBUG,
        "trace" => LevelFilter::TRACE,
        other => {
            return Err(ConfigError::invalid(
                LOG,
                other,
                "off, error, warn, info, debug or trace",
            ));
        }
    })
}
