//! Rate limits per API key (`rate_limits` in the config: `per_key_requests_per_second`, `burst`; 0 means no limit),
//! with governor's keyed GCRA limiter, keyed by the key's SHA-256 digest so the limiter never holds a raw key.
//!
//! The admission step ([`super::admission`]) takes one cell per request (over HTTP, every authenticated request; over
//! stdio, every tool call) and one more per upstream call the request asks for (the calls of a batch); a request over the limit gets `RATE_LIMITED` (over HTTP 429 with `Retry-After`, whole
//! seconds, at least 1). One key's traffic
//! never limits another key. A reload that changes the limits starts a fresh limiter with the new quota; other
//! reloads keep the buckets as they are.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use crate::config::settings::Settings;
use crate::error::{ErrorCode, GatewayError};

type Limiter = DefaultKeyedRateLimiter<[u8; 32]>;

/// A limiter with the limits it was built for.
struct Current {
    per_second: f64,
    burst: u32,
    limiter: Option<Arc<Limiter>>,
}

/// The per-key limiter of the current limits.
#[derive(Default)]
pub struct RateLimits {
    current: Mutex<Option<Current>>,
}

/// A request over its key's limit; retry after `wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub wait: Duration,
}

impl Limited {
    /// The `Retry-After` value: whole seconds, at least 1.
    pub fn retry_after_seconds(&self) -> u64 {
        (self.wait.as_secs_f64().ceil() as u64).max(1)
    }
}

impl From<Limited> for GatewayError {
    /// `RATE_LIMITED` of contract section 4, with `Retry-After`.
    fn from(limited: Limited) -> GatewayError {
        let seconds = limited.retry_after_seconds();
        let message = format!("rate limit exceeded for this API key; retry after {seconds} s");
        GatewayError::new(ErrorCode::RateLimited, message).retry_after(seconds)
    }
}

/// governor's quota for the configured limits; `None` when there is no limit.
fn quota(per_second: f64, burst: u32) -> Option<Quota> {
    if per_second <= 0.0 || !per_second.is_finite() {
        return None;
    }
    let period = Duration::from_secs_f64(1.0 / per_second);
    // Without a burst, a key may send one second's worth at once (at least one request).
    let burst = if burst == 0 { per_second.ceil().min(f64::from(u32::MAX)) as u32 } else { burst };
    Some(Quota::with_period(period)?.allow_burst(NonZeroU32::new(burst.max(1))?))
}

impl RateLimits {
    /// Takes one cell of `key_digest`'s bucket under the limits of `settings`.
    pub fn check(&self, settings: &Settings, key_digest: &[u8; 32]) -> Result<(), Limited> {
        let Some(limiter) = self.limiter(settings.rate_limit_per_second, settings.rate_limit_burst) else {
            return Ok(());
        };
        limiter
            .check_key(key_digest)
            .map_err(|not_until| Limited { wait: not_until.wait_time_from(DefaultClock::default().now()) })
    }

    /// Takes `n` more cells of `key_digest`'s bucket at once (the upstream calls a request asks for), or none; more
    /// cells than the bucket can ever hold are refused as over the limit, with the wait for a full bucket.
    pub fn check_n(&self, settings: &Settings, key_digest: &[u8; 32], n: u32) -> Result<(), Limited> {
        let Some(n) = NonZeroU32::new(n) else { return Ok(()) };
        let Some(limiter) = self.limiter(settings.rate_limit_per_second, settings.rate_limit_burst) else {
            return Ok(());
        };
        let full =
            || Duration::from_secs_f64(f64::from(n.get()) / settings.rate_limit_per_second.max(f64::MIN_POSITIVE));
        match limiter.check_key_n(key_digest, n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(Limited { wait: not_until.wait_time_from(DefaultClock::default().now()) }),
            Err(_insufficient) => Err(Limited { wait: full().min(Duration::from_secs(3600)) }),
        }
    }

    fn limiter(&self, per_second: f64, burst: u32) -> Option<Arc<Limiter>> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match &*current {
            Some(c) if c.per_second == per_second && c.burst == burst => c.limiter.clone(),
            _ => {
                let limiter = quota(per_second, burst).map(|q| Arc::new(Limiter::keyed(q)));
                *current = Some(Current { per_second, burst, limiter: limiter.clone() });
                limiter
            }
        }
    }

    /// Forgets buckets that are full again (keys idle long enough); called now and then so that many short-lived
    /// keys do not grow the table.
    pub fn shrink(&self) {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(limiter) = current.as_ref().and_then(|c| c.limiter.as_ref()) {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn settings(per_second: f64, burst: u32) -> Settings {
        let file = crate::config::ConfigFile::from_value(json!({})).unwrap();
        let mut settings = Settings::resolve(&file, &mut Vec::new());
        settings.rate_limit_per_second = per_second;
        settings.rate_limit_burst = burst;
        settings
    }

    #[test]
    fn each_key_has_its_own_bucket_and_zero_means_no_limit() {
        let limits = RateLimits::default();
        let tight = settings(1.0, 2);
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert!(limits.check(&tight, &a).is_ok());
        assert!(limits.check(&tight, &a).is_ok());
        let limited = limits.check(&tight, &a).unwrap_err();
        assert!(limited.wait > Duration::ZERO && limited.wait <= Duration::from_secs(1), "{limited:?}");
        assert_eq!(limited.retry_after_seconds(), 1);
        assert!(limits.check(&tight, &b).is_ok(), "another key is not limited");
        let unlimited = settings(0.0, 0);
        for _ in 0..100 {
            assert!(limits.check(&unlimited, &a).is_ok());
        }
    }

    #[test]
    fn a_batch_takes_a_cell_per_call_or_none() {
        let limits = RateLimits::default();
        let tight = settings(1.0, 5);
        let key = [3u8; 32];
        assert!(limits.check_n(&tight, &key, 3).is_ok());
        assert!(limits.check_n(&tight, &key, 3).is_err(), "2 cells left, 3 asked: none taken");
        assert!(limits.check_n(&tight, &key, 2).is_ok(), "the 2 cells were still there");
        assert!(limits.check_n(&tight, &key, 50).is_err(), "more than the bucket holds");
        assert!(limits.check_n(&settings(0.0, 0), &key, 1000).is_ok(), "no limit");
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(Limited { wait: Duration::from_millis(1) }.retry_after_seconds(), 1);
        assert_eq!(Limited { wait: Duration::from_millis(2500) }.retry_after_seconds(), 3);
        assert_eq!(Limited { wait: Duration::from_secs(2) }.retry_after_seconds(), 2);
        assert_eq!(Limited { wait: Duration::ZERO }.retry_after_seconds(), 1);
    }

    #[test]
    fn quotas() {
        assert!(quota(0.0, 10).is_none());
        assert!(quota(f64::NAN, 10).is_none());
        assert_eq!(quota(5.0, 0).map(|q| q.burst_size().get()), Some(5));
        assert_eq!(quota(0.5, 0).map(|q| q.burst_size().get()), Some(1));
        assert_eq!(quota(10.0, 3).map(|q| q.burst_size().get()), Some(3));
    }
}
