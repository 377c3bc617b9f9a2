//! JSON text written straight into a line: what the log records (`telemetry/logging.rs`), the exported spans
//! (`telemetry/stderr_spans.rs`) and the audit records (`audit/record.rs`) are made of, without building a
//! `serde_json::Value` first.
//!
//! The logs and spans wrote every line as a `Value` object, serialised, and their timestamps through chrono's
//! formatting: at INFO with the `stdout` provider that was more instructions per call than the rest of the call
//! (BENCHMARKS.md, "A Python agent's call"). These write the same text: strings escaped as `serde_json` escapes them
//! (which is also the canonical form's escaping, [`crate::json_strict::canonical`]), numbers as it writes them (a
//! float that is not finite is `null`), times as `2026-12-02T14:12:44.607950Z`.

use std::fmt::Write as _;
use std::time::SystemTime;

/// `text` as a JSON string, quotes included, escaped as `serde_json` escapes it: `"` and `\`, and the control
/// characters below U+0020 (`\b`, `\t`, `\n`, `\f`, `\r`, the others as `\u00XX`); nothing else.
pub fn push_str(out: &mut String, text: &str) {
    out.push('"');
    push_escaped(out, text);
    out.push('"');
}

/// What goes between a JSON string's quotes for `text` (see [`push_str`]). Most texts need no escape: the runs
/// between escapes are found first and copied whole.
pub fn push_escaped(out: &mut String, text: &str) {
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(offset) = first_escape(&bytes[start..]) {
        let at = start + offset;
        out.push_str(&text[start..at]);
        let byte = bytes[at];
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                out.push_str("\\u00");
                crate::secrets::push_hex(out, &[byte]);
            }
        }
        start = at + 1;
    }
    out.push_str(&text[start..]);
}

fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Where the first byte that needs an escape is, looked for eight bytes at a time: a word with a byte below 0x20, a
/// `"` or a `\` has a high bit set in `control`, `quote` or `backslash` (the usual "has a byte less than" and "has a
/// zero byte" tests), and only such a word is looked at byte by byte.
fn first_escape(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |word: u64| word.wrapping_sub(ONES) & !word & HIGHS;
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let word = <[u8; 8]>::try_from(chunk).map_or(0, u64::from_le_bytes);
        let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
        let quote = zero_byte(word ^ (ONES * u64::from(b'"')));
        let backslash = zero_byte(word ^ (ONES * u64::from(b'\\')));
        if control | quote | backslash != 0
            && let Some(offset) = chunk.iter().position(|&b| needs_escape(b))
        {
            return Some(at + offset);
        }
        at += 8;
    }
    chunks.remainder().iter().position(|&b| needs_escape(b)).map(|offset| at + offset)
}

/// A `fmt::Write` that escapes what is written to it into a JSON string's inside, so that a `Debug` or `Display`
/// value is escaped as it is formatted, without a copy of its text first.
pub struct Escaping<'a>(pub &'a mut String);

impl std::fmt::Write for Escaping<'_> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        push_escaped(self.0, text);
        Ok(())
    }
}

/// A float as `serde_json` writes it; `null` when it is not finite (what `Value::from(f64)` holds then).
pub fn push_f64(out: &mut String, value: f64) {
    match serde_json::Number::from_f64(value) {
        // A `Number` is written with ryu, as serde_json writes it in a value.
        Some(number) => {
            let _ = write!(out, "{number}");
        }
        None => out.push_str("null"),
    }
}

/// `time` in UTC as RFC 3339 with microseconds and `Z`, as chrono's `to_rfc3339_opts(SecondsFormat::Micros, true)`
/// and its format `%Y-%m-%dT%H:%M:%S%.6fZ` write it, quotes not included ([`crate::ids::push_timestamp`] and `Z`).
pub fn push_time(out: &mut String, time: SystemTime) {
    crate::ids::push_timestamp(out, time);
    out.push('Z');
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut every: String = (0u32..0x80).filter_map(char::from_u32).collect();
        every.push_str("é\u{2028}\u{7f}😀 \"quoted\" back\\slash");
        for text in [every.as_str(), "", "plain", "\u{0}", "end\n"] {
            let mut ours = String::new();
            push_str(&mut ours, text);
            assert_eq!(ours, serde_json::to_string(text).unwrap(), "{text:?}");
            // The same text in pieces, as a formatter writes it.
            let mut pieces = String::from("\"");
            for piece in text.split_inclusive(['\n', '"', 'a']) {
                Escaping(&mut pieces).write_str(piece).unwrap();
            }
            pieces.push('"');
            assert_eq!(pieces, ours);
        }
    }

    #[test]
    fn every_byte_that_needs_an_escape_is_found_wherever_it_is() {
        for special in [0u8, 0x1f, b'\n', b'"', b'\\'] {
            for len in 0..20 {
                for at in 0..len {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = special;
                    assert_eq!(first_escape(&bytes), Some(at), "{special:#x} at {at} of {len}");
                }
                assert_eq!(first_escape(&vec![b'a'; len]), None);
            }
        }
        // Bytes that need none, around the ones that do: everything from 0x20 up, UTF-8 continuation bytes included.
        let plain: Vec<u8> = (0x20..=0xffu8).filter(|&b| !needs_escape(b)).collect();
        assert_eq!(first_escape(&plain), None);
        for byte in 0..=0xffu8 {
            let mut bytes = plain.clone();
            bytes.insert(37, byte);
            assert_eq!(first_escape(&bytes), needs_escape(byte).then_some(37), "{byte:#x}");
        }
    }

    #[test]
    fn floats_are_written_as_serde_json_writes_values() {
        for value in [0.0, -0.0, 1.5, 3.006354, 1e21, 1e-7, 123456789.125, f64::MAX, f64::MIN_POSITIVE] {
            let mut ours = String::new();
            push_f64(&mut ours, value);
            assert_eq!(ours, serde_json::Value::from(value).to_string(), "{value}");
        }
        for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let mut ours = String::new();
            push_f64(&mut ours, value);
            assert_eq!(ours, "null");
        }
    }

    #[test]
    fn times_are_written_as_chrono_writes_them() {
        let cases = [
            UNIX_EPOCH,
            UNIX_EPOCH + Duration::new(1_796_220_764, 607_950_123),
            UNIX_EPOCH + Duration::new(951_782_400, 999), // 2000-02-29, a nanosecond count below a microsecond
            UNIX_EPOCH + Duration::new(253_402_300_799, 999_999_999), // 9999-12-31T23:59:59.999999
            UNIX_EPOCH + Duration::new(253_402_300_800, 0), // year 10000: chrono's own text
            SystemTime::now(),
            UNIX_EPOCH + Duration::new(1_796_220_764, 999_999_999), // the same second again, from the thread's text
            UNIX_EPOCH + Duration::new(1_796_220_765, 1_000),       // the next second
            UNIX_EPOCH - Duration::new(86_400, 500_000_000),        // before 1970
        ];
        for time in cases {
            let mut ours = String::new();
            push_time(&mut ours, time);
            let theirs = DateTime::<Utc>::from(time);
            assert_eq!(ours, theirs.to_rfc3339_opts(chrono::SecondsFormat::Micros, true), "{time:?}");
            assert_eq!(ours, theirs.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(), "{time:?}");
        }
    }
}
