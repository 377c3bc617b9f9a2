//! The quota counters of this process: what counts when the gateway has no Redis, or while it cannot reach it. The
//! same arithmetic as the Redis script (`crate::policy::quota::gcra`, and a count per calendar period).
//!
//! At most [`MAX_COUNTERS`] counters of each kind: a full table first drops the counters that have run out (a rate's
//! whose arrival time has passed, a limit's whose period has ended; at most once a second); a subject that still finds no place is let
//! through uncounted (with a warning at most once a minute) rather than denied, so that a flood of new identities
//! cannot lock out the callers already counted.

use std::collections::HashMap;
use std::time::Duration;

use super::{Charge, Exceeded};
use crate::policy::quota::gcra;

/// The most counters of each kind this process keeps.
pub const MAX_COUNTERS: usize = 100_000;

#[derive(Default)]
pub struct Counters {
    /// A rate's theoretical arrival time, in microseconds since the epoch.
    tats: HashMap<String, u64>,
    /// A limit's count in its period, and when that period ends (seconds since the epoch).
    counts: HashMap<String, (u64, i64)>,
    /// When the last "table full" warning was logged (microseconds).
    warned: u64,
    /// When a full table was last pruned (microseconds): at most once a second, so that a full table costs no scan
    /// per call.
    pruned: u64,
}

impl Counters {
    /// See [`super::Meter::admit`].
    pub fn admit(&mut self, charges: &[Charge], now: u64) -> Result<(), Exceeded> {
        let now_seconds = (now / 1_000_000) as i64;
        let mut tats = Vec::with_capacity(charges.len());
        for charge in charges {
            if charge.interval > 0 {
                let tat = self.tats.get(&charge.rate_key()).copied().unwrap_or(0);
                match gcra(tat, now, charge.interval, charge.burst) {
                    Ok(new_tat) => tats.push(Some(new_tat)),
                    Err(wait) => return Err(exceeded(charge, wait)),
                }
            } else {
                tats.push(None);
            }
            if let Some((limit, window)) = &charge.limit {
                let used = match self.counts.get(&charge.limit_key()) {
                    Some((used, ends)) if *ends > now_seconds => *used,
                    _ => 0,
                };
                if used >= *limit {
                    let wait = (window.ends - now_seconds).max(1) as u64 * 1_000_000;
                    return Err(exceeded(charge, wait));
                }
            }
        }
        for (charge, tat) in charges.iter().zip(tats) {
            if let Some(tat) = tat
                && self.room(now, true)
            {
                self.tats.insert(charge.rate_key(), tat);
            }
            if let Some((_, window)) = &charge.limit
                && self.room(now, false)
            {
                let entry = self.counts.entry(charge.limit_key()).or_insert((0, window.ends));
                if entry.1 != window.ends {
                    *entry = (0, window.ends);
                }
                entry.0 += 1;
            }
        }
        Ok(())
    }

    /// Whether a counter of the kind (`rate`) may be added, after dropping the ones that ran out when full.
    fn room(&mut self, now: u64, rate: bool) -> bool {
        let full = if rate { self.tats.len() } else { self.counts.len() } >= MAX_COUNTERS;
        if !full {
            return true;
        }
        if now.saturating_sub(self.pruned) < 1_000_000 {
            return false;
        }
        self.pruned = now;
        if rate {
            self.tats.retain(|_, tat| *tat > now);
        } else {
            let now_seconds = (now / 1_000_000) as i64;
            self.counts.retain(|_, (_, ends)| *ends > now_seconds);
        }
        let room = if rate { self.tats.len() } else { self.counts.len() } < MAX_COUNTERS;
        if !room && now.saturating_sub(self.warned) > 60_000_000 {
            self.warned = now;
            tracing::warn!(
                max = MAX_COUNTERS,
                "the quota counters of this process are full; new subjects go uncounted"
            );
        }
        room
    }
}

fn exceeded(charge: &Charge, wait: u64) -> Exceeded {
    Exceeded { quota: charge.quota.clone(), retry_after: Duration::from_micros(wait) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::quota::Quota;

    #[test]
    fn every_charge_must_have_room_and_a_refused_call_counts_in_none() {
        let now = chrono::Utc::now();
        let minute = Quota::compile("per-minute", "key", None, Some("2/minute"), None, None).unwrap();
        let daily = Quota::compile("daily", "user", None, None, None, Some("3/day")).unwrap();
        let charges = [Charge::new(&minute, "k1", now), Charge::new(&daily, "u1", now)];
        let mut counters = Counters::default();
        let t = 1_000_000_000_000;
        assert!(counters.admit(&charges, t).is_ok());
        assert!(counters.admit(&charges, t).is_ok());
        let refused = counters.admit(&charges, t).unwrap_err();
        assert_eq!((refused.quota.as_str(), refused.retry_after_seconds()), ("per-minute", 30));
        // 30 s later one more fits the rate; the day's limit then has 3 and refuses the next until the day ends.
        assert!(counters.admit(&charges, t + 30_000_000).is_ok());
        let refused = counters.admit(&charges[1..], t + 31_000_000).unwrap_err();
        assert_eq!(refused.quota, "daily");
    }

    #[test]
    fn a_full_table_drops_what_ran_out_and_lets_new_subjects_through_uncounted() {
        let now = chrono::Utc::now();
        let quota = Quota::compile("q", "key", None, Some("1/second"), None, None).unwrap();
        let mut counters = Counters::default();
        let t = 1_000_000_000_000;
        for i in 0..MAX_COUNTERS {
            assert!(counters.admit(&[Charge::new(&quota, &format!("k{i}"), now)], t).is_ok());
        }
        // Full, and nothing has run out: a new subject goes through, uncounted; the counted ones still hold.
        let newcomer = [Charge::new(&quota, "new", now)];
        assert!(counters.admit(&newcomer, t).is_ok() && counters.admit(&newcomer, t).is_ok());
        assert!(counters.admit(&[Charge::new(&quota, "k7", now)], t).is_err());
        assert_eq!(counters.tats.len(), MAX_COUNTERS);
        // Two seconds on, every counter has run out: the table is pruned and the newcomer counted.
        let later = t + 2_000_000;
        assert!(counters.admit(&newcomer, later).is_ok());
        assert!(counters.admit(&newcomer, later).is_err());
        assert_eq!(counters.tats.len(), 1);
    }
}
