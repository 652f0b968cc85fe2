//! Parsers of one setting's text. A refusal says what was expected; the caller names the
//! setting (its variable or its keyword) and echoes the text.

use std::time::Duration;

use super::error::Refusal;

pub(super) fn parse_flag(v: &str) -> Result<bool, Refusal> {
    match v.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(Refusal::Expected("0 or 1")),
    }
}

pub(super) fn parse_int(v: &str, expected: &'static str) -> Result<u64, Refusal> {
    let t = v.trim();
    // Digits only: no sign, no exponent, no fraction.
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refusal::Expected(expected));
    }
    t.parse::<u64>().map_err(|_| Refusal::Expected(expected))
}

pub(super) fn parse_positive_int(v: &str) -> Result<u64, Refusal> {
    match parse_int(v, "an integer > 0")? {
        0 => Err(Refusal::Expected("an integer > 0")),
        n => Ok(n),
    }
}

pub(super) fn parse_millis(v: &str) -> Result<Duration, Refusal> {
    parse_positive_int(v).map(Duration::from_millis)
}

/// Whole seconds, as Dynamo's TTL variables take them.
pub(super) fn parse_whole_secs(v: &str) -> Result<Duration, Refusal> {
    parse_positive_int(v).map(Duration::from_secs)
}

pub(super) fn parse_secs(v: &str) -> Result<Duration, Refusal> {
    const EXPECTED: Refusal = Refusal::Expected("a finite number of seconds > 0");
    let secs: f64 = v.trim().parse().map_err(|_| EXPECTED)?;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(EXPECTED);
    }
    let d = Duration::try_from_secs_f64(secs).map_err(|_| EXPECTED)?;
    if d.is_zero() {
        return Err(EXPECTED);
    }
    Ok(d)
}

/// `parse` of a setting that may be unset: a blank text (a keyword's `None`) unsets it. The
/// environment never hands a reader a blank text: a blank variable is unset.
pub(super) fn optional<T>(
    v: &str,
    parse: impl FnOnce(&str) -> Result<T, Refusal>,
) -> Result<Option<T>, Refusal> {
    if v.trim().is_empty() {
        return Ok(None);
    }
    parse(v).map(Some)
}

/// A count in a `usize` field: one larger than the field holds counts as the largest it holds.
pub(super) fn saturating_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}
