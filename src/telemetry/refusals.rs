//! A bound on the log records of refused requests (contract section 13): whoever sends them, refused requests cost
//! at most [`RECORDS_PER_SECOND`] records in any second per front, and the ones left out are counted, not lost.
//!
//! A front asks [`RefusalLog::admit`] before it writes a record: `Some(left_out)` lets the record through and says how
//! many were left out since the last one (the record carries that count as `left_out`); `None` leaves this one out.
//! When records were left out and no refusal follows to carry their count, a summary record (`refused requests left
//! out of the log`, with `front` and `left_out`) is written as soon as the second has passed, so a burst followed by
//! silence is still counted in the log.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// Records of refused requests per front in any one second.
pub const RECORDS_PER_SECOND: usize = 10;
const WINDOW: Duration = Duration::from_secs(1);

/// The records of one front's refused requests (one for the admin API, one for the gateway).
#[derive(Clone)]
pub struct RefusalLog {
    front: &'static str,
    state: Arc<Mutex<Recent>>,
}

/// When the last records were written, and how many were left out since.
#[derive(Debug, Default)]
struct Recent {
    written: VecDeque<Instant>,
    left_out: u64,
    summary_due: bool,
}

impl Recent {
    /// Takes a place for a record at `now` when fewer than [`RECORDS_PER_SECOND`] were written in the second before.
    fn take(&mut self, now: Instant) -> bool {
        while self.written.front().is_some_and(|at| now.saturating_duration_since(*at) >= WINDOW) {
            self.written.pop_front();
        }
        if self.written.len() < RECORDS_PER_SECOND {
            self.written.push_back(now);
            true
        } else {
            false
        }
    }

    /// When the next place frees up.
    fn next_free(&self, now: Instant) -> Instant {
        self.written.front().map_or(now, |oldest| *oldest + WINDOW)
    }

    /// `Some(left_out)` when a record may be written at `now`; otherwise counts it as left out.
    fn admit(&mut self, now: Instant) -> Option<u64> {
        if self.take(now) {
            Some(std::mem::take(&mut self.left_out))
        } else {
            self.left_out += 1;
            None
        }
    }
}

/// `text` cut to `max_chars` characters, the cut marked `…`: what a client sent (a `Host` header, a path segment) is
/// shown in a record at most this long.
pub fn bounded(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

impl RefusalLog {
    /// The log of `front` (`"admin"`, `"gateway"`), named in summary records.
    pub fn new(front: &'static str) -> RefusalLog {
        RefusalLog { front, state: Arc::new(Mutex::new(Recent::default())) }
    }

    /// `Some(left_out)` when the record of a refused request may be written now (with the count of those left out
    /// since the last one); `None` when it is left out.
    pub fn admit(&self) -> Option<u64> {
        let now = Instant::now();
        let mut recent = self.lock();
        let admitted = recent.admit(now);
        if admitted.is_none() && !recent.summary_due {
            // Only inside a runtime (every front runs in one); without it the count waits for the next record.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                recent.summary_due = true;
                runtime.spawn(self.clone().summarise(recent.next_free(now)));
            }
        }
        admitted
    }

    /// Writes the summary of the records left out once a place is free, unless a record has carried the count by then.
    async fn summarise(self, mut at: Instant) {
        loop {
            tokio::time::sleep_until(at).await;
            let now = Instant::now();
            let mut recent = self.lock();
            if recent.left_out == 0 {
                recent.summary_due = false;
                return;
            }
            if recent.take(now) {
                let left_out = std::mem::take(&mut recent.left_out);
                recent.summary_due = false;
                drop(recent);
                tracing::info!(front = self.front, left_out, "refused requests left out of the log");
                return;
            }
            at = recent.next_free(now);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_ten_records_in_any_second_and_the_next_one_carries_the_count() {
        let start = Instant::now();
        let mut recent = Recent::default();
        let admitted: Vec<Option<u64>> = (0..200).map(|_| recent.admit(start)).collect();
        assert_eq!(admitted.iter().filter(|a| a.is_some()).count(), RECORDS_PER_SECOND);
        assert!(admitted[..RECORDS_PER_SECOND].iter().all(|a| *a == Some(0)));
        assert_eq!(recent.admit(start + Duration::from_millis(999)), None, "still the same second");
        assert_eq!(recent.admit(start + WINDOW), Some(191), "190 of the burst and the one just before");
        assert_eq!(recent.admit(start + WINDOW), Some(0));
    }

    #[test]
    fn the_window_slides() {
        let start = Instant::now();
        let mut recent = Recent::default();
        for i in 0..10u32 {
            assert!(recent.take(start + Duration::from_millis(100) * i));
        }
        assert!(!recent.take(start + Duration::from_millis(950)));
        assert!(recent.take(start + Duration::from_millis(1000)), "the first record's second has passed");
        assert!(!recent.take(start + Duration::from_millis(1050)));
        assert!(recent.take(start + Duration::from_millis(1100)));
    }

    #[test]
    fn bounded_cuts_on_characters_and_marks_the_cut() {
        assert_eq!(bounded("short", 8), "short");
        assert_eq!(bounded("ééééé", 3), "ééé…");
        assert_eq!(bounded(&"x".repeat(60_000), 256).chars().count(), 257);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_followed_by_silence_is_summarised_after_the_second() {
        let log = RefusalLog::new("test");
        let admitted = (0..50).filter(|_| log.admit().is_some()).count();
        assert_eq!(admitted, RECORDS_PER_SECOND);
        assert_eq!(log.lock().left_out, 40);
        assert!(log.lock().summary_due);
        tokio::time::sleep(WINDOW + Duration::from_millis(10)).await;
        let recent = log.lock();
        assert_eq!((recent.left_out, recent.summary_due), (0, false), "the summary carried the count");
        assert_eq!(recent.written.len(), 1, "the summary is a record too");
    }

    #[tokio::test(start_paused = true)]
    async fn the_summary_counts_each_left_out_request_once() {
        let log = RefusalLog::new("test");
        (0..11).for_each(|_| {
            log.admit();
        });
        tokio::time::sleep(WINDOW * 2).await;
        assert_eq!(log.lock().left_out, 0, "the summary carried the one left out");
        assert_eq!(log.admit(), Some(0), "and the next record does not count it again");
        assert!(!log.lock().summary_due);
    }
}
