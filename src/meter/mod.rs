//! The gateway's counters of calls (contract 17): the quotas' counters and the usage figures, in Redis when the
//! gateway has one (a Redis config store or the external cache), so that every replica shares them, in memory
//! otherwise.
//!
//! [`Meter::admit`] takes the quotas one call matches ([`Charge`]s, built by the gateway) and lets the call through
//! only if every one of them has room, counting it in all of them at once: in Redis one Lua script checks and counts
//! every charge atomically, so two replicas cannot both take the last place. While Redis cannot be reached the
//! counters of this process stand in (the limits then hold per replica) and the connection's warning says so; Redis is
//! tried again after a second.
//!
//! [`usage`] keeps calls, errors, guardrail blocks, policy denials, quota rejections and bytes per project, user,
//! server and tool by the hour.
//!
//! Every bound is per process: at most [`memory::MAX_COUNTERS`] quota counters, [`usage::MAX_GROUPS`] groups per
//! dimension and hour, 35 days of hours. Depends on `cache` (the Redis connection), `config` and `policy`.

mod memory;
pub mod usage;

pub use memory::Counters;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::cache::external::{ExternalCache, ExternalError, Role};
use crate::config::settings::{Settings, StoreKind};
use crate::policy::quota::{Per, Quota, Window};

/// The connection the counters use: the Redis of the config store or of the external cache.
const COUNTERS: Role = Role {
    name: "quota and usage counters",
    fallback: "counting in this process (quotas hold per replica) until it answers again",
    wanted: |settings| settings.use_external_cache || settings.config_store == StoreKind::Redis,
};

/// One quota a call counts against, for one subject.
#[derive(Debug, Clone)]
pub struct Charge {
    pub quota: String,
    /// The counters' key prefix: the quota, and whose calls it counts.
    key: String,
    /// Microseconds between two calls of the rate (0: no rate).
    interval: u64,
    burst: u64,
    /// The limit, and the calendar period the call falls in.
    limit: Option<(u64, Window)>,
}

impl Charge {
    /// `quota` for the subject `subject` (the key, user or project id `quota.per` names), at `now`.
    pub fn new(quota: &Quota, subject: &str, now: chrono::DateTime<chrono::Utc>) -> Charge {
        let per = quota.per.as_str();
        Charge {
            quota: quota.name.clone(),
            key: format!("mcpgw:quota:{}:{}:{per}:{subject}", quota.name.len(), quota.name),
            interval: quota.interval_micros(),
            burst: quota.burst,
            limit: quota.limit.map(|(n, period)| (n, Window::of(period, now))),
        }
    }

    fn rate_key(&self) -> String {
        format!("{}:rate", self.key)
    }

    fn limit_key(&self) -> String {
        match &self.limit {
            Some((_, window)) => format!("{}:limit:{}", self.key, window.id),
            None => format!("{}:limit", self.key),
        }
    }
}

/// The subject a quota counts for a caller: its key, user or project id.
pub fn subject<'a>(per: Per, key_id: &'a str, user_id: &'a str, project_id: &'a str) -> &'a str {
    match per {
        Per::Key => key_id,
        Per::User => user_id,
        Per::Project => project_id,
    }
}

/// A call over a quota: which, and how long until the caller may try again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    pub quota: String,
    pub retry_after: Duration,
}

impl Exceeded {
    /// Whole seconds, at least 1.
    pub fn retry_after_seconds(&self) -> u64 {
        self.retry_after.as_secs_f64().ceil().max(1.0) as u64
    }
}

/// See the module documentation.
pub struct Meter {
    redis: Arc<ExternalCache>,
    memory: Mutex<memory::Counters>,
    pub usage: usage::Usage,
}

impl Meter {
    /// The counters of a gateway configured with `settings`, with their Redis connection's probe and the usage
    /// flush (needs a Tokio runtime).
    pub fn new(settings: &Settings) -> Arc<Meter> {
        let meter = Arc::new(Meter {
            redis: ExternalCache::with_role(settings, COUNTERS),
            memory: Mutex::new(memory::Counters::default()),
            usage: usage::Usage::default(),
        });
        usage::flush_forever(Arc::downgrade(&meter));
        meter
    }

    /// Follows a new snapshot.
    pub fn configure(&self, settings: &Settings) {
        self.redis.configure(settings);
    }

    /// The health report's reason while the counters' Redis is unreachable (quotas then hold per replica).
    pub fn degraded_reason(&self) -> Option<String> {
        self.redis.degraded_reason()
    }

    /// Whether the counters are in Redis (every replica shares them).
    pub fn shared(&self) -> bool {
        self.redis.enabled()
    }

    /// Lets a call through if every charge has room, counting it in each; else the first quota without room.
    pub async fn admit(&self, charges: &[Charge]) -> Result<(), Exceeded> {
        if charges.is_empty() {
            return Ok(());
        }
        if self.redis.enabled() {
            match self.admit_in_redis(charges).await {
                Ok(outcome) => return outcome,
                Err(error) => tracing::debug!(%error, "quota counters: Redis not used for this call"),
            }
        }
        let now = now_micros();
        self.memory.lock().unwrap_or_else(std::sync::PoisonError::into_inner).admit(charges, now)
    }

    async fn admit_in_redis(&self, charges: &[Charge]) -> Result<Result<(), Exceeded>, ExternalError> {
        let mut invocation = ADMIT.prepare_invoke();
        for charge in charges {
            invocation.key(charge.rate_key()).key(charge.limit_key());
            let (limit, ends) = charge.limit.as_ref().map_or((0, 0), |(n, window)| (*n, window.ends));
            invocation.arg(charge.interval).arg(charge.burst).arg(limit).arg(ends);
        }
        let (denied, wait): (usize, u64) =
            self.redis.run(|mut c| async move { invocation.invoke_async(&mut c).await }).await?;
        Ok(match denied.checked_sub(1).and_then(|i| charges.get(i)) {
            None => Ok(()),
            Some(charge) => Err(Exceeded { quota: charge.quota.clone(), retry_after: Duration::from_micros(wait) }),
        })
    }
}

/// Microseconds since the epoch.
fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// Every charge checked, then every one counted, atomically; Redis's own clock, so that replicas agree. KEYS: per
/// charge its rate key and its limit key; ARGV: per charge the interval (microseconds, 0: no rate), the burst, the
/// limit (0: none) and when the limit's period ends (seconds). Answers `{0, 0}` or `{the first charge without room
/// (from 1), microseconds to wait}`.
static ADMIT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n = #KEYS / 2
local tats = {}
for i = 1, n do
  local interval, burst = tonumber(ARGV[4 * i - 3]), tonumber(ARGV[4 * i - 2])
  local limit, ends = tonumber(ARGV[4 * i - 1]), tonumber(ARGV[4 * i])
  if interval > 0 then
    local tat = tonumber(redis.call('GET', KEYS[2 * i - 1]) or '0')
    if tat < now then tat = now end
    local allow_at = tat + interval - burst * interval
    if allow_at > now then return {i, allow_at - now} end
    tats[i] = tat + interval
  end
  if limit > 0 then
    local used = tonumber(redis.call('GET', KEYS[2 * i]) or '0')
    if used >= limit then return {i, math.max(ends * 1000000 - now, 1000000)} end
  end
end
for i = 1, n do
  if tats[i] then
    redis.call('SET', KEYS[2 * i - 1], string.format('%.0f', tats[i]), 'PX', math.ceil((tats[i] - now) / 1000) + 1000)
  end
  if tonumber(ARGV[4 * i - 1]) > 0 then
    redis.call('INCR', KEYS[2 * i])
    redis.call('EXPIREAT', KEYS[2 * i], tonumber(ARGV[4 * i]) + 60)
  end
end
return {0, 0}
",
    )
});
