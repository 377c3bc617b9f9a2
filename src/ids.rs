//! Identifiers and timestamps in the formats the contract fixes: UUID v4 ids, and ISO 8601 timestamps without a
//! zone, with microseconds (`2026-11-21T23:50:20.752804`), always in UTC.

/// A new random UUID v4 as a string.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The current UTC time as `YYYY-MM-DDTHH:MM:SS.ffffff`.
pub fn timestamp() -> String {
    timestamp_of(chrono::Utc::now().naive_utc())
}

/// `time` as [`timestamp`] writes it: the digits written into place, not through a format string (an audit write
/// takes one; `format!` of seven numbers was 3,600 instructions of it).
fn timestamp_of(time: chrono::NaiveDateTime) -> String {
    use chrono::{Datelike, Timelike};
    let micros = time.nanosecond() % 1_000_000_000 / 1_000;
    // Years outside 0..=9999 cannot be written in four digits: chrono's own form, as before (never from a clock).
    let Ok(year @ 0..=9999) = u32::try_from(time.year()) else {
        return time.format("%Y-%m-%dT%H:%M:%S%.6f").to_string();
    };
    let mut text = *b"0000-00-00T00:00:00.000000";
    for (at, width, value) in [
        (0, 4, year),
        (5, 2, time.month()),
        (8, 2, time.day()),
        (11, 2, time.hour()),
        (14, 2, time.minute()),
        (17, 2, time.second()),
        (20, 6, micros),
    ] {
        let mut value = value;
        for place in text[at..at + width].iter_mut().rev() {
            // A digit: `value % 10` is below 10.
            *place = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
    text.iter().map(|&b| char::from(b)).collect()
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
            assert_eq!(timestamp_of(time), time.format("%Y-%m-%dT%H:%M:%S%.6f").to_string());
        }
    }

    #[test]
    fn ids_are_uuid_v4() {
        let id = new_id();
        let parsed = uuid::Uuid::parse_str(&id).map(|u| u.get_version_num());
        assert_eq!(parsed.ok(), Some(4));
    }
}
