//! Every timeout of spec section 8, enforced in one place and counted per kind for `gw_get_timeout_metrics`.
//!
//! [`TimeoutMetrics::run`] wraps an operation: it finishes (successful), runs out of time (timeout: the future is
//! dropped, which for an upstream call kills the process), or is dropped by its caller first (cancelled: the client
//! went away or cancelled the request).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::settings::Timeouts;

/// The kinds of timeout (spec 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimeoutKind {
    Default,
    Guardrail,
    Auth,
    ToolExecution,
    Discovery,
    Cache,
    Connectivity,
}

impl TimeoutKind {
    pub const ALL: [TimeoutKind; 7] = [
        TimeoutKind::Default,
        TimeoutKind::Guardrail,
        TimeoutKind::Auth,
        TimeoutKind::ToolExecution,
        TimeoutKind::Discovery,
        TimeoutKind::Cache,
        TimeoutKind::Connectivity,
    ];

    /// The setting's name in `timeout_settings`.
    pub fn setting(self) -> &'static str {
        match self {
            TimeoutKind::Default => "default_timeout",
            TimeoutKind::Guardrail => "guardrail_timeout",
            TimeoutKind::Auth => "auth_timeout",
            TimeoutKind::ToolExecution => "tool_execution_timeout",
            TimeoutKind::Discovery => "discovery_timeout",
            TimeoutKind::Cache => "cache_timeout",
            TimeoutKind::Connectivity => "connectivity_timeout",
        }
    }

    /// The kind's name in metrics (`tool_execution`, ...).
    pub fn name(self) -> &'static str {
        self.setting().trim_end_matches("_timeout")
    }

    /// This kind's duration in `timeouts`.
    pub fn of(self, timeouts: &Timeouts) -> Duration {
        match self {
            TimeoutKind::Default => timeouts.default,
            TimeoutKind::Guardrail => timeouts.guardrail,
            TimeoutKind::Auth => timeouts.auth,
            TimeoutKind::ToolExecution => timeouts.tool_execution,
            TimeoutKind::Discovery => timeouts.discovery,
            TimeoutKind::Cache => timeouts.cache,
            TimeoutKind::Connectivity => timeouts.connectivity,
        }
    }
}

/// An operation that ran out of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("operation timed out after {} seconds", format_seconds(*.0))]
pub struct TimedOut(pub Duration);

/// Seconds as the contract's messages write them: whole seconds without a fraction.
pub fn format_seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 { format!("{s:.0}") } else { format!("{s}") }
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    total: u64,
    successful: u64,
    timeouts: u64,
    cancelled: u64,
}

/// Counters per kind.
#[derive(Default)]
pub struct TimeoutMetrics {
    counts: Mutex<BTreeMap<TimeoutKind, Counts>>,
}

enum Outcome {
    Successful,
    Timeout,
}

/// Counts a cancellation when dropped before [`Pending::finish`].
struct Pending<'a> {
    metrics: &'a TimeoutMetrics,
    kind: TimeoutKind,
    done: bool,
}

impl Pending<'_> {
    fn finish(mut self, outcome: Outcome) {
        self.done = true;
        self.metrics.update(self.kind, |c| match outcome {
            Outcome::Successful => c.successful += 1,
            Outcome::Timeout => c.timeouts += 1,
        });
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.metrics.update(self.kind, |c| c.cancelled += 1);
        }
    }
}

impl TimeoutMetrics {
    fn update(&self, kind: TimeoutKind, f: impl FnOnce(&mut Counts)) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        f(counts.entry(kind).or_default());
    }

    /// Runs `op` with the timeout `limit`, counting the outcome under `kind`.
    pub async fn run<T>(&self, kind: TimeoutKind, limit: Duration, op: impl Future<Output = T>) -> Result<T, TimedOut> {
        self.run_classified(kind, limit, op, |_| false).await
    }

    /// Like [`TimeoutMetrics::run`], for an operation that enforces the same limit itself (an upstream call kills its
    /// process when time is up): `timed_out_inside` says whether its result is such a timeout, so it is counted as one.
    pub async fn run_classified<T>(
        &self,
        kind: TimeoutKind,
        limit: Duration,
        op: impl Future<Output = T>,
        timed_out_inside: impl FnOnce(&T) -> bool,
    ) -> Result<T, TimedOut> {
        self.update(kind, |c| c.total += 1);
        let pending = Pending { metrics: self, kind, done: false };
        match tokio::time::timeout(limit, op).await {
            Ok(value) => {
                let outcome = if timed_out_inside(&value) { Outcome::Timeout } else { Outcome::Successful };
                pending.finish(outcome);
                Ok(value)
            }
            Err(_) => {
                pending.finish(Outcome::Timeout);
                Err(TimedOut(limit))
            }
        }
    }

    /// The `timeout_metrics` object of `gw_get_timeout_metrics`. Process starts are not among them: they are bounded
    /// by `upstream_pool.start_timeout_seconds` and counted by the upstream pool (`mcpgw_upstream_start_*`).
    pub fn report(&self) -> Value {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut total = Counts::default();
        let mut by_kind = serde_json::Map::new();
        for kind in TimeoutKind::ALL {
            let c = counts.get(&kind).copied().unwrap_or_default();
            total.total += c.total;
            total.successful += c.successful;
            total.timeouts += c.timeouts;
            total.cancelled += c.cancelled;
            by_kind.insert(
                kind.name().to_string(),
                json!({"total_operations": c.total, "successful_operations": c.successful,
                       "timeout_operations": c.timeouts, "cancelled_operations": c.cancelled}),
            );
        }
        let finished = total.successful + total.timeouts + total.cancelled;
        let success_rate = if finished == 0 { 1.0 } else { total.successful as f64 / finished as f64 };
        json!({
            "total_operations": total.total,
            "successful_operations": total.successful,
            "timeout_operations": total.timeouts,
            "cancelled_operations": total.cancelled,
            "success_rate": success_rate,
            "by_kind": by_kind,
        })
    }
}

/// The `timeout_config` object: every timeout in seconds.
pub fn config_report(timeouts: &Timeouts) -> Value {
    let mut out = serde_json::Map::new();
    for kind in TimeoutKind::ALL {
        out.insert(kind.setting().to_string(), json!(kind.of(timeouts).as_secs_f64()));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn outcomes_are_counted_per_kind() {
        let m = TimeoutMetrics::default();
        let ok = m.run(TimeoutKind::Discovery, Duration::from_secs(1), async { 5 }).await;
        assert_eq!(ok, Ok(5));
        let late =
            m.run(TimeoutKind::ToolExecution, Duration::from_secs(1), tokio::time::sleep(Duration::from_secs(5)));
        assert_eq!(late.await, Err(TimedOut(Duration::from_secs(1))));
        {
            let fut = Box::pin(m.run(TimeoutKind::Auth, Duration::from_secs(1), std::future::pending::<()>()));
            let _ = tokio::time::timeout(Duration::from_millis(10), fut).await;
        }
        let report = m.report();
        assert_eq!(report["total_operations"], 3);
        assert_eq!(report["timeout_operations"], 1);
        assert_eq!(report["cancelled_operations"], 1);
        assert_eq!(report["by_kind"]["tool_execution"]["timeout_operations"], 1);
        assert_eq!(TimedOut(Duration::from_secs(60)).to_string(), "operation timed out after 60 seconds");
    }
}
