//! Parsers of one variable's text: typed errors that name the variable and echo the value.

use std::time::Duration;

use super::error::ConfigError;

pub(super) fn parse_flag(name: &'static str, v: &str) -> Result<bool, ConfigError> {
    match v.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(ConfigError::invalid(name, v, "0 or 1")),
    }
}

pub(super) fn parse_int(
    name: &'static str,
    v: &str,
    expected: &'static str,
) -> Result<u64, ConfigError> {
    let t = v.trim();
    // Digits only: no sign, no exponent, no fraction.
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConfigError::invalid(name, v, expected));
    }
    t.parse::<u64>()
        .map_err(|_| ConfigError::invalid(name, v, expected))
}

pub(super) fn parse_positive_int(name: &'static str, v: &str) -> Result<u64, ConfigError> {
    match parse_int(name, v, "an integer > 0")? {
        0 => Err(ConfigError::invalid(name, v, "an integer > 0")),
        n => Ok(n),
    }
}

pub(super) fn parse_millis(name: &'static str, v: &str) -> Result<Duration, ConfigError> {
    parse_positive_int(name, v).map(Duration::from_millis)
}

pub(super) fn parse_secs(name: &'static str, v: &str) -> Result<Duration, ConfigError> {
    const EXPECTED: &str = "a finite number of seconds > 0";
    let secs: f64 = v
        .trim()
        .parse()
        .map_err(|_| ConfigError::invalid(name, v, EXPECTED))?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(ConfigError::invalid(name, v, EXPECTED));
    }
    let d =
        Duration::try_from_secs_f64(secs).map_err(|_| ConfigError::invalid(name, v, EXPECTED))?;
    if d.is_zero() {
        return Err(ConfigError::invalid(name, v, EXPECTED));
    }
    Ok(d)
}
