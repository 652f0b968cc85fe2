//! Shared pieces of the fuzz targets in `src/bin/` (one per input surface; see
//! docs/fuzzing.md). Each target is an `afl::fuzz!` loop that feeds AFL++'s inputs to the real
//! code and asserts what must hold for any input; a broken assertion aborts, which AFL++ records
//! as a crash.

pub mod alloc;

/// Splits `data` at its first `\n`: the head (without the newline) and the rest, empty when
/// there is no newline. Several targets take a line of settings before their payload.
pub fn first_line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}
