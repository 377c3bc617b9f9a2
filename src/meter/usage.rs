//! Usage figures (contract 17): for every call of an upstream tool, prompt or resource, counts per project, user,
//! server and tool by the hour (UTC), read back by `GET /api/v1/usage`.
//!
//! Each call adds to six counters of its hour in each of the four dimensions: `calls`; `errors` (every result that is
//! not a success, refusals included); `guardrail_blocks`; `policy_denials`; `quota_rejections`; `bytes` (the call's
//! arguments and its result, as JSON). A tool is grouped by its server and name.
//!
//! This process always keeps its own counts (35 days of hours, at most [`MAX_GROUPS`] groups per dimension and hour:
//! the rest is counted under the group `(other)`). With Redis the counts are also added to hashes there
//! (`mcpgw:usage:{dimension}:{hour}`, field `{counter}|{group}`, kept 35 days) once a second, so that a query on any
//! replica sees every replica's calls; a query flushes this process's counts first. A flush that fails keeps its
//! counts for the next one; a query while Redis is down answers from this process's counts and says so (`source`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, Weak};
use std::time::Duration;

use serde_json::{Map, Value};

use super::Meter;

/// The dimensions a query may group by.
pub const DIMENSIONS: [&str; 4] = ["project", "user", "server", "tool"];
/// The counters of each group.
pub const COUNTERS: [&str; 6] = ["calls", "errors", "guardrail_blocks", "policy_denials", "quota_rejections", "bytes"];
/// The most groups of one dimension in one hour.
pub const MAX_GROUPS: usize = 10_000;
/// How many hours are kept.
pub const HOURS_KEPT: i64 = 35 * 24;
/// The group that groups past [`MAX_GROUPS`] count under.
const OTHER: &str = "(other)";
/// Between a tool's server and its name in the group's key.
const SEPARATOR: char = '\u{1f}';

type Counts = [u64; 6];

/// One call, as usage counts it.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    pub project: &'a str,
    pub user: &'a str,
    pub server: &'a str,
    pub tool: &'a str,
    /// The result's `status` and `error_code`.
    pub status: &'a str,
    pub error_code: Option<&'a str>,
    pub bytes: u64,
}

impl Sample<'_> {
    fn counts(&self) -> Counts {
        let code = |c: &str| u64::from(self.error_code == Some(c));
        [
            1,
            u64::from(self.status != "success"),
            u64::from(self.status == "blocked"),
            code("POLICY_DENIED"),
            code("QUOTA_EXCEEDED"),
            self.bytes,
        ]
    }
}

/// Counts by (hour, dimension, group).
#[derive(Default)]
struct Table {
    hours: BTreeMap<i64, [HashMap<String, Counts>; 4]>,
}

impl Table {
    fn add(&mut self, hour: i64, dimension: usize, group: &str, counts: &Counts) {
        let groups = &mut self.hours.entry(hour).or_default()[dimension];
        if let Some(slot) = groups.get_mut(group) {
            return bump(slot, counts);
        }
        let group = if groups.len() < MAX_GROUPS { group } else { OTHER };
        bump(groups.entry(group.to_string()).or_default(), counts);
    }

    fn prune(&mut self, now_hour: i64) {
        while let Some((&oldest, _)) = self.hours.first_key_value() {
            if oldest > now_hour - HOURS_KEPT {
                break;
            }
            self.hours.pop_first();
        }
    }

    fn sum(&self, dimension: usize, since_hour: i64, into: &mut HashMap<String, Counts>) {
        for (_, dimensions) in self.hours.range(since_hour..) {
            for (group, counts) in &dimensions[dimension] {
                bump(into.entry(group.clone()).or_default(), counts);
            }
        }
    }
}

fn bump(total: &mut Counts, counts: &Counts) {
    for (t, n) in total.iter_mut().zip(counts) {
        *t = t.saturating_add(*n);
    }
}

/// See the module documentation.
#[derive(Default)]
pub struct Usage {
    local: Mutex<Table>,
    /// What has not reached Redis yet.
    pending: Mutex<Table>,
}

impl Usage {
    /// Counts one call; `shared` adds it to what the next flush sends to Redis.
    pub fn record(&self, sample: &Sample<'_>, shared: bool) {
        let hour = now_hour();
        let counts = sample.counts();
        let tool = format!("{}{SEPARATOR}{}", sample.server, sample.tool);
        let groups = [sample.project, sample.user, sample.server, tool.as_str()];
        let add = |table: &Mutex<Table>| {
            let mut table = table.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for (dimension, group) in groups.iter().enumerate() {
                table.add(hour, dimension, group, &counts);
            }
        };
        add(&self.local);
        if shared {
            add(&self.pending);
        }
    }

    fn take_pending(&self) -> Table {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    fn put_back(&self, table: Table) {
        let mut pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (hour, dimensions) in table.hours {
            for (dimension, groups) in dimensions.into_iter().enumerate() {
                for (group, counts) in groups {
                    pending.add(hour, dimension, &group, &counts);
                }
            }
        }
        pending.prune(now_hour());
    }
}

/// The hour a time falls in, as hours since the epoch.
fn hour_of(seconds: i64) -> i64 {
    seconds.div_euclid(3600)
}

fn now_hour() -> i64 {
    hour_of(chrono::Utc::now().timestamp())
}

fn hash_key(dimension: usize, hour: i64) -> String {
    format!("mcpgw:usage:{}:{hour}", DIMENSIONS[dimension])
}

impl Meter {
    /// Sends this process's counts not yet in Redis (nothing without Redis); a failure keeps them for the next flush.
    pub async fn flush_usage(&self) {
        if !self.redis.enabled() {
            return;
        }
        let table = self.usage.take_pending();
        if table.hours.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for (hour, dimensions) in &table.hours {
            for (dimension, groups) in dimensions.iter().enumerate() {
                if groups.is_empty() {
                    continue;
                }
                let key = hash_key(dimension, *hour);
                for (group, counts) in groups {
                    for (name, n) in COUNTERS.iter().zip(counts).filter(|(_, n)| **n > 0) {
                        pipe.hincr(&key, format!("{name}|{group}"), *n).ignore();
                    }
                }
                pipe.expire(&key, HOURS_KEPT * 3600).ignore();
            }
        }
        if let Err(error) = self.redis.run(|mut c| async move { pipe.query_async::<()>(&mut c).await }).await {
            tracing::debug!(%error, "usage counts not sent to Redis; kept for the next flush");
            self.usage.put_back(table);
        }
    }

    /// The usage since `since` (seconds since the epoch; rounded down to its hour) grouped by `dimension` (an index
    /// into [`DIMENSIONS`]): one object per group, the most calls first, and where the figures come from (`redis`:
    /// every replica; `memory`: this process).
    pub async fn usage(&self, dimension: usize, since: i64) -> (Vec<Value>, &'static str) {
        let now = now_hour();
        let since_hour = hour_of(since).max(now - HOURS_KEPT + 1);
        let mut totals: HashMap<String, Counts> = HashMap::new();
        let mut source = "memory";
        if self.redis.enabled() {
            self.flush_usage().await;
            let keys: Vec<String> = (since_hour..=now).map(|hour| hash_key(dimension, hour)).collect();
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.hgetall(key);
            }
            let read =
                self.redis.run(|mut c| async move { pipe.query_async::<Vec<HashMap<String, u64>>>(&mut c).await });
            if let Ok(hashes) = read.await {
                source = "redis";
                for (field, n) in hashes.into_iter().flatten() {
                    let Some((name, group)) = field.split_once('|') else { continue };
                    let Some(i) = COUNTERS.iter().position(|c| *c == name) else { continue };
                    let total = totals.entry(group.to_string()).or_default();
                    total[i] = total[i].saturating_add(n);
                }
            }
        }
        if source == "memory" {
            let mut local = self.usage.local.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            local.prune(now);
            local.sum(dimension, since_hour, &mut totals);
        }
        let mut groups: Vec<(String, Counts)> = totals.into_iter().collect();
        groups.sort_by(|(a, x), (b, y)| y[0].cmp(&x[0]).then_with(|| a.cmp(b)));
        let rows = groups.into_iter().map(|(group, counts)| row(dimension, &group, &counts)).collect();
        (rows, source)
    }
}

/// One group's answer: its name (a tool's as `server` and `tool`) and its counters.
fn row(dimension: usize, group: &str, counts: &Counts) -> Value {
    let mut row = Map::new();
    match (DIMENSIONS[dimension], group.split_once(SEPARATOR)) {
        ("tool", Some((server, tool))) => {
            row.insert("server".into(), Value::from(server));
            row.insert("tool".into(), Value::from(tool));
        }
        (name, _) => {
            row.insert(name.into(), Value::from(group));
        }
    }
    for (name, n) in COUNTERS.iter().zip(counts) {
        row.insert((*name).into(), Value::from(*n));
    }
    Value::Object(row)
}

/// Flushes the counts to Redis every second; ends when the meter is dropped.
pub fn flush_forever(meter: Weak<Meter>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let Some(meter) = meter.upgrade() else { break };
            meter.flush_usage().await;
            meter.usage.local.lock().unwrap_or_else(std::sync::PoisonError::into_inner).prune(now_hour());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_past_the_bound_count_under_other() {
        let mut table = Table::default();
        for i in 0..MAX_GROUPS + 5 {
            table.add(10, 0, &format!("p{i}"), &[1, 0, 0, 0, 0, 3]);
        }
        let mut totals = HashMap::new();
        table.sum(0, 0, &mut totals);
        assert_eq!(totals.len(), MAX_GROUPS + 1);
        assert_eq!(totals[OTHER], [5, 0, 0, 0, 0, 15]);
        table.prune(10 + HOURS_KEPT);
        assert!(table.hours.is_empty());
    }

    #[test]
    fn a_sample_counts_its_outcome() {
        let sample = |status, error_code| {
            Sample { project: "p", user: "u", server: "s", tool: "t", status, error_code, bytes: 7 }.counts()
        };
        assert_eq!(sample("success", None), [1, 0, 0, 0, 0, 7]);
        assert_eq!(sample("blocked", None), [1, 1, 1, 0, 0, 7]);
        assert_eq!(sample("error", Some("POLICY_DENIED")), [1, 1, 0, 1, 0, 7]);
        assert_eq!(sample("error", Some("QUOTA_EXCEEDED")), [1, 1, 0, 0, 1, 7]);
    }
}
