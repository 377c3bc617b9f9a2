//! Identifiers and timestamps in the formats the contract fixes: UUID v4 ids, and ISO 8601 timestamps without a
//! zone, with microseconds (`2026-11-21T23:50:20.752804`), always in UTC.

use std::cell::Cell;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// A new random UUID v4 as a string.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SS.ffffff`.
pub fn timestamp() -> String {
    let mut text = String::with_capacity(26);
    push_timestamp(&mut text, SystemTime::now());
    text
}

/// `time` in UTC as [`timestamp`] writes it (chrono's `%Y-%m-%dT%H:%M:%S%.6f`), appended to `out`: the digits written
/// into place, the text up to the seconds worked out once a second per thread (the logs and exported spans write
/// about ten of these times a call, with a `Z` after: `json_text.rs`; an audit write one).
pub fn push_timestamp(out: &mut String, time: SystemTime) {
    thread_local! {
        /// The last second written on this thread, and its text up to the seconds.
        static LAST: Cell<(u64, [u8; 19])> = const { Cell::new((u64::MAX, [0; 19])) };
    }
    let Ok(since_epoch) = time.duration_since(UNIX_EPOCH) else {
        return push_timestamp_slowly(out, time);
    };
    let second = since_epoch.as_secs();
    let (last, mut text) = LAST.get();
    if last != second {
        let mut fresh = String::with_capacity(32);
        push_timestamp_slowly(&mut fresh, time);
        // A year of four digits gives `YYYY-MM-DDTHH:MM:SS.ffffff`; any other is chrono's own text every time.
        let head = (fresh.len() == 26).then(|| <[u8; 19]>::try_from(&fresh.as_bytes()[..19]).ok()).flatten();
        let Some(head) = head else {
            out.push_str(&fresh);
            return;
        };
        text = head;
        LAST.set((second, text));
    }
    out.push_str(std::str::from_utf8(&text).unwrap_or_default());
    out.push('.');
    let micros = since_epoch.subsec_micros();
    push_2(out, micros / 10_000);
    push_2(out, micros / 100 % 100);
    push_2(out, micros % 100);
}

/// [`push_timestamp`] without the text of the last second.
fn push_timestamp_slowly(out: &mut String, time: SystemTime) {
    use chrono::{Datelike, Timelike};
    let time = chrono::DateTime::<chrono::Utc>::from(time);
    let Ok(year @ 0..=9999) = u32::try_from(time.year()) else {
        // Outside four digits chrono adds a sign; such a clock is not worth a fast path.
        let _ = write!(out, "{}", time.format("%Y-%m-%dT%H:%M:%S%.6f"));
        return;
    };
    push_2(out, year / 100);
    push_2(out, year % 100);
    out.push('-');
    push_2(out, time.month());
    out.push('-');
    push_2(out, time.day());
    out.push('T');
    push_2(out, time.hour());
    out.push(':');
    push_2(out, time.minute());
    out.push(':');
    // A leap second (nanoseconds from 1,000,000,000) is written as chrono writes it: second 60.
    let nanos = time.nanosecond();
    push_2(out, time.second() + nanos / 1_000_000_000);
    out.push('.');
    let micros = nanos % 1_000_000_000 / 1_000;
    push_2(out, micros / 10_000);
    push_2(out, micros / 100 % 100);
    push_2(out, micros % 100);
}

/// Pushes `n` as two digits.
fn push_2(out: &mut String, n: u32) {
    out.push(char::from(b'0' + (n / 10 % 10) as u8));
    out.push(char::from(b'0' + (n % 10) as u8));
}

/// A request correlation id (spec 2.7 `custom_id`): 34 characters (`gw` and 32 hex digits), an underscore and the
/// Unix time in milliseconds.
pub fn correlation_id() -> String {
    format!("gw{}_{}", uuid::Uuid::new_v4().simple(), chrono::Utc::now().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correlation_ids_have_34_characters_an_underscore_and_a_timestamp() {
        let id = correlation_id();
        let (head, time) = id.split_once('_').unwrap();
        assert_eq!(head.len(), 34, "{id}");
        assert!(time.parse::<i64>().unwrap() > 1_700_000_000_000, "{id}");
        assert_ne!(correlation_id(), id);
    }

    #[test]
    fn timestamp_has_microseconds_and_no_zone() {
        let ts = timestamp();
        assert_eq!(ts.len(), 26, "{ts}");
        assert_eq!(&ts[10..11], "T");
        assert_eq!(&ts[19..20], ".");
        assert!(!ts.ends_with('Z'));
        for (seconds, nanos) in
            [(0, 0), (1_764_669_600, 123_456_789), (1_798_761_599, 999_999_999), (951_782_400, 1_000)]
        {
            let time = chrono::DateTime::from_timestamp(seconds, nanos).unwrap().naive_utc();
            let mut ours = String::new();
            push_timestamp(&mut ours, UNIX_EPOCH + std::time::Duration::new(seconds as u64, nanos));
            assert_eq!(ours, time.format("%Y-%m-%dT%H:%M:%S%.6f").to_string());
        }
    }

    #[test]
    fn ids_are_uuid_v4() {
        let id = new_id();
        let parsed = uuid::Uuid::parse_str(&id).map(|u| u.get_version_num());
        assert_eq!(parsed.ok(), Some(4));
    }
}
