//! Every timeout of spec section 8, enforced in one place and counted per kind for `gw_get_timeout_metrics`.
//!
//! [`TimeoutMetrics::run`] wraps an operation: it finishes (successful), runs out of time (timeout: the future is
//! dropped, which for an upstream call kills the process), or is dropped by its caller first (cancelled: the client
//! went away or cancelled the request).
//!
//! Counts are kept per tenant, the caller's MCP configuration ([`TimeoutsByTenant::of`]), and a caller is shown its
//! own (contract 14): how often another project's calls time out is that project's business.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
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

    /// The kind's place in [`TimeoutKind::ALL`].
    fn index(self) -> usize {
        self as usize
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

/// The counters of one kind: atomics, so that counting takes no lock on the path of every call.
#[derive(Default)]
struct KindCounts {
    total: AtomicU64,
    successful: AtomicU64,
    timeouts: AtomicU64,
    cancelled: AtomicU64,
}

impl KindCounts {
    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn read(&self) -> Counts {
        Counts {
            total: self.total.load(Ordering::Relaxed),
            successful: self.successful.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            cancelled: self.cancelled.load(Ordering::Relaxed),
        }
    }
}

/// Counters per kind, in the order of [`TimeoutKind::ALL`]: one tenant's.
#[derive(Default)]
pub struct TimeoutMetrics {
    counts: [KindCounts; TimeoutKind::ALL.len()],
}

/// At most this many tenants get counters of their own; the operations of any beyond are counted nowhere (their
/// report stays empty) rather than with another tenant's.
const MAX_TENANTS: usize = 4096;

/// The [`TimeoutMetrics`] of each tenant: the MCP configuration of the caller (`""` for a project without one).
///
/// A tenant's counters live as long as the gateway (a few hundred bytes for each configuration ever served, at most
/// [`MAX_TENANTS`]), so that a request borrows them for its whole length, guardrail stage included, without a
/// reference count or a lock held; finding them takes a read lock.
#[derive(Default)]
pub struct TimeoutsByTenant {
    /// foldhash rather than SipHash: looked up twice a request, by ids the operator chose.
    tenants: RwLock<HashMap<String, &'static TimeoutMetrics, foldhash::fast::RandomState>>,
    /// Where the operations of tenants past [`MAX_TENANTS`] are counted; never reported.
    uncounted: TimeoutMetrics,
}

impl TimeoutsByTenant {
    /// The counters of tenant `mcp_config_id`, made on its first operation.
    pub fn of(&self, mcp_config_id: Option<&str>) -> &TimeoutMetrics {
        let id = mcp_config_id.unwrap_or_default();
        if let Some(found) = self.tenants.read().unwrap_or_else(|p| p.into_inner()).get(id) {
            return found;
        }
        let mut tenants = self.tenants.write().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = tenants.get(id) {
            return found;
        }
        if tenants.len() >= MAX_TENANTS {
            return &self.uncounted;
        }
        let made: &'static TimeoutMetrics = Box::leak(Box::default());
        tenants.insert(id.to_string(), made);
        made
    }

    /// The `timeout_metrics` object of `gw_get_timeout_metrics` for tenant `mcp_config_id`: its operations only.
    pub fn report(&self, mcp_config_id: Option<&str>) -> Value {
        let id = mcp_config_id.unwrap_or_default();
        let found = self.tenants.read().unwrap_or_else(|p| p.into_inner()).get(id).copied();
        match found {
            Some(metrics) => metrics.report(),
            None => TimeoutMetrics::default().report(),
        }
    }
}

pin_project! {
    /// An operation under its timeout, counted (see [`TimeoutMetrics::run_classified`]): counted in `total` when first
    /// polled, then as successful, a timeout, or cancelled when dropped before it finished.
    ///
    /// A future of its own rather than an `async fn`, which would hold the operation twice (its argument, and the
    /// timeout it awaits).
    pub struct Bounded<'a, F, C> {
        #[pin]
        timed: tokio::time::Timeout<F>,
        counts: &'a KindCounts,
        limit: Duration,
        timed_out_inside: Option<C>,
        started: bool,
        done: bool,
    }

    impl<'a, F, C> PinnedDrop for Bounded<'a, F, C> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if *this.started && !*this.done {
                KindCounts::count(&this.counts.cancelled);
            }
        }
    }
}

impl<F: Future, C: FnOnce(&F::Output) -> bool> Future for Bounded<'_, F, C> {
    type Output = Result<F::Output, TimedOut>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if !*this.started {
            *this.started = true;
            KindCounts::count(&this.counts.total);
        }
        let finished = std::task::ready!(this.timed.poll(cx));
        *this.done = true;
        Poll::Ready(match finished {
            Ok(value) => {
                let inside = this.timed_out_inside.take().is_some_and(|timed_out| timed_out(&value));
                KindCounts::count(if inside { &this.counts.timeouts } else { &this.counts.successful });
                Ok(value)
            }
            Err(_) => {
                KindCounts::count(&this.counts.timeouts);
                Err(TimedOut(*this.limit))
            }
        })
    }
}

/// The classifier of [`TimeoutMetrics::run`]: nothing inside the operation is a timeout.
fn never<T>(_: &T) -> bool {
    false
}

impl TimeoutMetrics {
    /// Runs `op` with the timeout `limit`, counting the outcome under `kind`.
    pub fn run<F: Future>(&self, kind: TimeoutKind, limit: Duration, op: F) -> Bounded<'_, F, fn(&F::Output) -> bool> {
        self.run_classified(kind, limit, op, never::<F::Output>)
    }

    /// Like [`TimeoutMetrics::run`], for an operation that enforces the same limit itself (an upstream call kills its
    /// process when time is up): `timed_out_inside` says whether its result is such a timeout, so it is counted as one.
    pub fn run_classified<F: Future, C: FnOnce(&F::Output) -> bool>(
        &self,
        kind: TimeoutKind,
        limit: Duration,
        op: F,
        timed_out_inside: C,
    ) -> Bounded<'_, F, C> {
        Bounded {
            timed: tokio::time::timeout(limit, op),
            counts: &self.counts[kind.index()],
            limit,
            timed_out_inside: Some(timed_out_inside),
            started: false,
            done: false,
        }
    }

    /// Counts an operation that was bounded elsewhere and finished in time (an authentication: its tenant is known
    /// only once it has succeeded).
    pub fn count_success(&self, kind: TimeoutKind) {
        let counts = &self.counts[kind.index()];
        KindCounts::count(&counts.total);
        KindCounts::count(&counts.successful);
    }

    /// The `timeout_metrics` object of `gw_get_timeout_metrics`. Process starts are not among them: they are bounded
    /// by `upstream_pool.start_timeout_seconds` and counted by the upstream pool (`mcpgw_upstream_start_*`).
    pub fn report(&self) -> Value {
        let mut total = Counts::default();
        let mut by_kind = serde_json::Map::new();
        for kind in TimeoutKind::ALL {
            let c = self.counts[kind.index()].read();
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

    #[test]
    fn each_kind_has_its_own_counters() {
        for (at, kind) in TimeoutKind::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), at, "{kind:?}");
        }
    }

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

    #[tokio::test(start_paused = true)]
    async fn each_tenant_sees_its_own_counts() {
        let by_tenant = TimeoutsByTenant::default();
        let late = tokio::time::sleep(Duration::from_secs(5));
        let _ = by_tenant.of(Some("alpha")).run(TimeoutKind::ToolExecution, Duration::from_secs(1), late).await;
        let _ = by_tenant.of(Some("alpha")).run(TimeoutKind::Discovery, Duration::from_secs(1), async {}).await;
        by_tenant.of(Some("beta")).count_success(TimeoutKind::Auth);
        let alpha = by_tenant.report(Some("alpha"));
        assert_eq!((alpha["total_operations"].as_u64(), alpha["timeout_operations"].as_u64()), (Some(2), Some(1)));
        let beta = by_tenant.report(Some("beta"));
        assert_eq!((beta["total_operations"].as_u64(), beta["timeout_operations"].as_u64()), (Some(1), Some(0)));
        assert_eq!(beta["by_kind"]["auth"]["successful_operations"], 1);
        assert_eq!(by_tenant.report(None)["total_operations"], 0);
        assert!(std::ptr::eq(by_tenant.of(Some("alpha")), by_tenant.of(Some("alpha"))));
    }
}
