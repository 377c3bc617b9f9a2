//! Quotas (contract 17): how often a key, a user or a project may call upstream tools, prompts and resources.
//!
//! A quota is `{"name", "per": "key"|"user"|"project", "when"?: "<CEL>", "rate"?: "N/second|minute|hour",
//! "burst"?, "limit"?: "N/hour|day|month"}`; [`Quota::compile`] checks it. Both parts are counted per subject (the
//! key, user or project the call comes from):
//!
//! - `rate` is a generic cell rate (GCRA): a call is let through when the subject's theoretical arrival time, less
//!   `burst` emission intervals, is not in the future. `burst` defaults to N, so a rate of N lets N calls through at
//!   once and then one every period/N. [`gcra`] is the arithmetic, shared by the in-memory counters and (as Lua) the
//!   Redis ones.
//! - `limit` counts calls in the calendar period (UTC) the call falls in; [`Window::of`] names the period and says
//!   when it ends (which is when a refused caller may try again).
//!
//! The counters themselves live in `meter/`; this module is a leaf.

use std::time::Duration;

use chrono::{DateTime, Datelike, TimeZone, Timelike, Utc};

use super::Rule;

/// Whose calls a quota counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Per {
    Key,
    User,
    Project,
}

impl Per {
    pub fn as_str(self) -> &'static str {
        match self {
            Per::Key => "key",
            Per::User => "user",
            Per::Project => "project",
        }
    }
}

/// A rate's period.
const RATE_PERIODS: [(&str, u64); 3] = [("second", 1), ("minute", 60), ("hour", 3600)];

/// A limit's calendar period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Hour,
    Day,
    Month,
}

/// One compiled quota.
#[derive(Debug)]
pub struct Quota {
    pub name: String,
    pub per: Per,
    /// Which calls it counts (`None`: all); compiled like a `deny` rule's `when`, so that a condition that fails to
    /// evaluate counts the call.
    pub when: Option<Rule>,
    /// Calls per period, and the period.
    pub rate: Option<(u64, Duration)>,
    /// How many calls may go at once (default: the rate's N).
    pub burst: u64,
    /// Calls per calendar period.
    pub limit: Option<(u64, Period)>,
}

/// The largest N of a rate or limit, and of `burst` (counters stay far from float precision).
pub const MAX_COUNT: u64 = 1_000_000_000;

impl Quota {
    /// A quota from its fields; the error says which field is wrong and why.
    pub fn compile(
        name: &str,
        per: &str,
        when: Option<&str>,
        rate: Option<&str>,
        burst: Option<u64>,
        limit: Option<&str>,
    ) -> Result<Quota, String> {
        let per = match per {
            "key" => Per::Key,
            "user" => Per::User,
            "project" => Per::Project,
            other => return Err(format!("per: must be \"key\", \"user\" or \"project\", found {other:?}")),
        };
        let when = when.map(|when| Rule::compile(name, false, when, None).map_err(|why| format!("when: {why}")));
        let when = when.transpose()?;
        let rate = rate
            .map(|text| {
                let (n, unit) = count_per(text)
                    .ok_or_else(|| format!("rate: must be \"N/second\", \"N/minute\" or \"N/hour\", found {text:?}"))?;
                let seconds = RATE_PERIODS.iter().find(|(name, _)| *name == unit).map(|(_, s)| *s);
                let seconds = seconds
                    .ok_or_else(|| format!("rate: the period must be second, minute or hour, found {unit:?}"))?;
                Ok::<_, String>((n, Duration::from_secs(seconds)))
            })
            .transpose()?;
        let limit = limit
            .map(|text| {
                let (n, unit) = count_per(text)
                    .ok_or_else(|| format!("limit: must be \"N/hour\", \"N/day\" or \"N/month\", found {text:?}"))?;
                let period = match unit {
                    "hour" => Period::Hour,
                    "day" => Period::Day,
                    "month" => Period::Month,
                    other => return Err(format!("limit: the period must be hour, day or month, found {other:?}")),
                };
                Ok((n, period))
            })
            .transpose()?;
        if rate.is_none() && limit.is_none() {
            return Err("rate: a quota needs a rate, a limit or both".to_string());
        }
        let burst = match (burst, rate) {
            (Some(_), None) => return Err("burst: only a quota with a rate has a burst".to_string()),
            (Some(burst), Some(_)) if burst == 0 || burst > MAX_COUNT => {
                return Err(format!("burst: must be from 1 to {MAX_COUNT}, found {burst}"));
            }
            (Some(burst), Some(_)) => burst,
            (None, Some((n, _))) => n,
            (None, None) => 0,
        };
        Ok(Quota { name: name.to_string(), per, when, rate, burst, limit })
    }

    /// The time between two calls of the rate, in microseconds (0: no rate).
    pub fn interval_micros(&self) -> u64 {
        self.rate.map_or(0, |(n, period)| (period.as_micros() as u64).div_ceil(n.max(1)))
    }
}

/// `"N/unit"` with 1 <= N <= [`MAX_COUNT`].
fn count_per(text: &str) -> Option<(u64, &str)> {
    let (n, unit) = text.split_once('/')?;
    let n: u64 = n.trim().parse().ok()?;
    (1..=MAX_COUNT).contains(&n).then_some((n, unit.trim()))
}

/// The GCRA step: with the subject's stored theoretical arrival time `tat` (0: none) at `now`, both in microseconds,
/// `Ok(new tat)` lets the call through, `Err(wait)` says how long until one would be.
pub fn gcra(tat: u64, now: u64, interval: u64, burst: u64) -> Result<u64, u64> {
    let new_tat = tat.max(now).saturating_add(interval);
    let allow_at = new_tat.saturating_sub(burst.saturating_mul(interval));
    if allow_at > now { Err(allow_at - now) } else { Ok(new_tat) }
}

/// The calendar period a call falls in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// The period's name in counter keys: `2026-12-01T23`, `2026-12-01`, `2026-12`.
    pub id: String,
    /// When it ends, in seconds since the epoch.
    pub ends: i64,
}

impl Window {
    /// The period of kind `period` that `now` falls in.
    pub fn of(period: Period, now: DateTime<Utc>) -> Window {
        let start_of_day = |day: DateTime<Utc>| {
            Utc.with_ymd_and_hms(day.year(), day.month(), day.day(), 0, 0, 0).single().unwrap_or(day)
        };
        match period {
            Period::Hour => {
                let start = start_of_day(now) + chrono::Duration::hours(i64::from(now.hour()));
                Window {
                    id: now.format("%Y-%m-%dT%H").to_string(),
                    ends: (start + chrono::Duration::hours(1)).timestamp(),
                }
            }
            Period::Day => {
                let start = start_of_day(now);
                Window { id: now.format("%Y-%m-%d").to_string(), ends: (start + chrono::Duration::days(1)).timestamp() }
            }
            Period::Month => {
                let (year, month) = if now.month() == 12 { (now.year() + 1, 1) } else { (now.year(), now.month() + 1) };
                let next = Utc
                    .with_ymd_and_hms(year, month, 1, 0, 0, 0)
                    .single()
                    .map_or(now.timestamp() + 86400, |t| t.timestamp());
                Window { id: now.format("%Y-%m").to_string(), ends: next }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_are_checked_field_by_field() {
        let q = Quota::compile("q", "key", None, Some("5/minute"), None, None).unwrap();
        assert_eq!((q.burst, q.interval_micros()), (5, 12_000_000));
        assert!(Quota::compile("q", "team", None, Some("5/minute"), None, None).unwrap_err().starts_with("per:"));
        assert!(Quota::compile("q", "key", None, Some("5/week"), None, None).unwrap_err().starts_with("rate:"));
        assert!(Quota::compile("q", "key", None, Some("0/minute"), None, None).unwrap_err().starts_with("rate:"));
        assert!(Quota::compile("q", "key", None, None, None, Some("9/second")).unwrap_err().starts_with("limit:"));
        assert!(Quota::compile("q", "key", None, None, None, None).unwrap_err().contains("rate, a limit"));
        assert!(Quota::compile("q", "key", None, None, Some(3), Some("9/day")).unwrap_err().starts_with("burst:"));
        assert!(
            Quota::compile("q", "key", Some("user.id == 1"), None, None, Some("9/day"))
                .unwrap_err()
                .starts_with("when:")
        );
        let q = Quota::compile("q", "project", Some("target.server == 'gh'"), None, None, Some("10/month")).unwrap();
        assert_eq!(q.limit, Some((10, Period::Month)));
    }

    #[test]
    fn a_rate_of_n_lets_n_through_at_once_then_one_per_interval() {
        let (interval, burst) = (1_000, 3);
        let mut tat = 0;
        for _ in 0..3 {
            tat = gcra(tat, 10_000, interval, burst).unwrap();
        }
        assert_eq!(gcra(tat, 10_000, interval, burst), Err(1_000));
        assert!(gcra(tat, 11_000, interval, burst).is_ok());
    }

    #[test]
    fn windows_end_at_the_next_calendar_period() {
        let now = Utc.with_ymd_and_hms(2026, 12, 31, 23, 30, 0).unwrap();
        let next_year = Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap().timestamp();
        assert_eq!(Window::of(Period::Hour, now), Window { id: "2026-12-31T23".into(), ends: next_year });
        assert_eq!(Window::of(Period::Day, now), Window { id: "2026-12-31".into(), ends: next_year });
        assert_eq!(Window::of(Period::Month, now), Window { id: "2026-12".into(), ends: next_year });
    }
}
