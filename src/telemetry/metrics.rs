//! Prometheus metrics. One [`Metrics`] per process, shared by everything that counts; labels are of bounded
//! cardinality (never keys, user ids or free text).

use std::sync::Mutex;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Latency buckets (seconds): sub-millisecond gateway work up to the longest default timeout.
const LATENCY_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The seven gateway tools: the only values of the `tool` label.
pub const GW_TOOLS: [&str; 7] = [
    "gw_list_all_servers",
    "gw_get_server_info",
    "gw_discover_all_tools",
    "gw_secure_call_tools",
    "gw_get_cache_status",
    "gw_clear_cache",
    "gw_get_timeout_metrics",
];

/// The `limit` label values of `mcpgw_limit_hits_total`: request body (gateway or admin), request headers, sessions
/// (one more than `max_sessions`, or than `max_sessions_per_key` for one key), idle sessions closed, slow clients (headers or body not sent in time), tool results
/// over the size limit, calls that waited because every upstream process had `max_calls_per_process` calls, batches
/// over `max_calls_per_request`, requests whose results reached `max_response_bytes`, connections closed at once
/// because their listener was full (`connections` on the gateway, `admin_connections`, `metrics_connections`), and
/// connections closed after `idle_connection_seconds` without a request; the per-key budgets of contract 14 (requests
/// in flight, answers not taken, connections closed after `write_timeout_seconds`, `initialize` params too large) and
/// unauthenticated connections closed past `max_unauthenticated_connections` or `max_connections_per_ip`; calls
/// that found every place for a `per_session` process taken (`processes_per_server`, `processes_per_key`), waiting
/// rounds refused over `max_waiting_rounds_per_key` and rounds ended after `input_required_seconds` without an answer
/// (`input_required`), task-augmented calls refused over `max_tasks_per_key` (`tasks_per_key`) and tasks ended after
/// `max_task_seconds` (`task_seconds`).
pub const LIMITS: [&str; 26] = [
    "request_body",
    "request_headers",
    "sessions",
    "sessions_per_key",
    "session_idle",
    "read_timeout",
    "tool_result",
    "calls_per_process",
    "calls_per_request",
    "response_bytes",
    "connections",
    "admin_connections",
    "metrics_connections",
    "connection_idle",
    "inflight_per_key",
    "pending_answer_bytes",
    "write_timeout",
    "initialize_params",
    "unauthenticated_connections",
    "connections_per_ip",
    "processes_per_server",
    "processes_per_key",
    "waiting_rounds_per_key",
    "input_required",
    "tasks_per_key",
    "task_seconds",
];

/// Called before every scrape to bring values kept elsewhere (pool and cache statistics) up to date.
type ScrapeHook = Box<dyn Fn(&Metrics) + Send + Sync>;

/// The process's metrics and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    hooks: Mutex<Vec<ScrapeHook>>,
    /// `mcpgw_requests_total{transport, method, status}`: gateway requests (HTTP: method and status code; stdio:
    /// the JSON-RPC method class and `ok`/`error`).
    pub requests: IntCounterVec,
    /// `mcpgw_request_duration_seconds{transport}`: until the answer's head is ready (SSE streams end later).
    pub request_duration: HistogramVec,
    /// `mcpgw_tool_calls_total{tool, outcome}`: gateway tool calls by their answer (`success` or the error code).
    pub tool_calls: IntCounterVec,
    /// `mcpgw_tool_call_duration_seconds{tool}`.
    pub tool_call_duration: HistogramVec,
    /// `mcpgw_upstream_calls_total{outcome}`: the calls inside `gw_secure_call_tools`, one per upstream tool call.
    pub upstream_calls: IntCounterVec,
    /// `mcpgw_cache_hits_total{cache="tools"|"gateway_config"}`.
    pub cache_hits: IntCounterVec,
    /// `mcpgw_cache_misses_total{cache}`.
    pub cache_misses: IntCounterVec,
    /// `mcpgw_cache_errors_total{cache="external"}`: failed or timed-out operations on the shared cache.
    pub cache_errors: IntCounterVec,
    /// `mcpgw_upstream_processes`: upstream processes running now.
    pub upstream_processes: IntGauge,
    /// `mcpgw_upstream_connections{transport}`: processes and remote sessions open now.
    pub upstream_connections: IntGaugeVec,
    /// `mcpgw_tool_scan_findings_total{server,kind}`: poisoning findings on discovered tool definitions.
    pub tool_scan_findings: IntCounterVec,
    /// `mcpgw_tool_pin_mismatches_total{server}`: tool definitions that changed or are new against their pins.
    pub tool_pin_mismatches: IntCounterVec,
    /// `mcpgw_upstream_restarts_total`: upstream processes that ended abnormally (crash, hang, garbage).
    pub upstream_restarts: IntCounter,
    /// `mcpgw_upstream_starts_total`: upstream processes started.
    pub upstream_starts: IntCounter,
    /// `mcpgw_upstream_start_failures_total`: upstream process starts that failed (could not run, exited before
    /// `initialize`, an `initialize` error, or out of `start_timeout_seconds`).
    pub upstream_start_failures: IntCounter,
    /// `mcpgw_rate_limited_total`: requests refused with 429.
    pub rate_limited: IntCounter,
    /// `mcpgw_limit_hits_total{limit}`: requests, connections, sessions and tool calls stopped by one of the limits of
    /// `common_mcp_gateway_config.limits` (see [`LIMITS`]).
    pub limit_hits: IntCounterVec,
    /// `mcpgw_user_credential_events_total{kind, event}`: each user's own upstream tokens (contract 16): `connected`,
    /// `connect_refused`, `refreshed`, `refresh_refused` (kind `oauth`), `exchanged`, `exchange_refused` (kind
    /// `token_exchange`), `required` (a call answered `CREDENTIALS_REQUIRED`, any kind). Never a value.
    pub user_credential_events: IntCounterVec,
    /// `mcpgw_quota_rejections_total{quota}`: calls refused with `QUOTA_EXCEEDED`, by quota name (contract 17).
    pub quota_rejections: IntCounterVec,
    /// `mcpgw_sessions`: MCP sessions open now.
    pub sessions: IntGauge,
    /// `mcpgw_sessions_dormant`: of those, the sessions dormant now (no protocol worker: `limits.session_dormant_seconds`).
    pub sessions_dormant: IntGauge,
    /// `mcpgw_session_streams`: of the sessions open, those with their `GET` stream open now (dormant or not).
    pub session_streams: IntGauge,
    /// `mcpgw_connections{listener="gateway"|"admin"|"metrics"}`: client connections open now.
    pub connections: IntGaugeVec,
    /// `mcpgw_trace_export_errors_total`: span batches the trace exporter failed to deliver.
    pub trace_export_errors: IntCounter,
    /// `mcpgw_config_reloads_total{result="ok"|"error"}`.
    pub config_reloads: IntCounterVec,
    /// `mcpgw_config_store_up`: with the Redis configuration store, 1 while it is reachable, 0 while not.
    pub config_store_up: IntGauge,
    /// `mcpgw_config_version`: with the Redis configuration store, the version serving on this replica.
    pub config_version: IntGauge,
    /// `mcpgw_admin_requests_total{status}`: admin API answers by status class.
    pub admin_requests: IntCounterVec,
    /// `mcpgw_guardrail_blocks_total{stage="input"|"output", detector}`: blocked tool calls, by the detector that
    /// blocked them (`custom_keyword`, `gw`, `thirdparty_moderation`, `unavailable` for a provider that failed closed).
    pub guardrail_blocks: IntCounterVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let r = &registry;
        let requests = counter_vec(r, "mcpgw_requests_total", "Gateway requests", &["transport", "method", "status"]);
        let request_duration = histogram_vec(
            r,
            "mcpgw_request_duration_seconds",
            "Gateway request latency until the answer starts",
            &["transport"],
        );
        let tool_calls =
            counter_vec(r, "mcpgw_tool_calls_total", "Gateway tool calls by tool and outcome", &["tool", "outcome"]);
        let tool_call_duration =
            histogram_vec(r, "mcpgw_tool_call_duration_seconds", "Gateway tool call latency", &["tool"]);
        let upstream_calls = counter_vec(
            r,
            "mcpgw_upstream_calls_total",
            "Upstream tool calls made by gw_secure_call_tools, by outcome",
            &["outcome"],
        );
        let cache_hits = counter_vec(r, "mcpgw_cache_hits_total", "Cache hits", &["cache"]);
        let cache_misses = counter_vec(r, "mcpgw_cache_misses_total", "Cache misses", &["cache"]);
        let cache_errors = counter_vec(r, "mcpgw_cache_errors_total", "Failed shared cache operations", &["cache"]);
        let upstream_processes = register(r, IntGauge::new("mcpgw_upstream_processes", "Upstream processes running"));
        let upstream_connections = register(
            r,
            IntGaugeVec::new(
                Opts::new("mcpgw_upstream_connections", "Upstream connections open: processes and remote sessions"),
                &["transport"],
            ),
        );
        let tool_scan_findings = counter_vec(
            r,
            "mcpgw_tool_scan_findings_total",
            "Poisoning findings on discovered tool definitions, by server and kind",
            &["server", "kind"],
        );
        let tool_pin_mismatches = counter_vec(
            r,
            "mcpgw_tool_pin_mismatches_total",
            "Tool definitions that changed or are new against their pins, by server",
            &["server"],
        );
        // Every transport's series is set at each scrape (`gateway::GatewayContext::report`), zeros included.
        let upstream_restarts =
            register(r, IntCounter::new("mcpgw_upstream_restarts_total", "Upstream processes that ended abnormally"));
        let upstream_starts = register(r, IntCounter::new("mcpgw_upstream_starts_total", "Upstream processes started"));
        let upstream_start_failures =
            register(r, IntCounter::new("mcpgw_upstream_start_failures_total", "Upstream process starts that failed"));
        let rate_limited =
            register(r, IntCounter::new("mcpgw_rate_limited_total", "Requests refused by the per-key rate limit"));
        let limit_hits = counter_vec(r, "mcpgw_limit_hits_total", "Requests and calls stopped by a limit", &["limit"]);
        for limit in LIMITS {
            limit_hits.with_label_values(&[limit]);
        }
        let user_credential_events = counter_vec(
            r,
            "mcpgw_user_credential_events_total",
            "Users' own upstream tokens connected, refreshed, exchanged or refused, and calls that required them",
            &["kind", "event"],
        );
        let quota_rejections =
            counter_vec(r, "mcpgw_quota_rejections_total", "Calls refused because a quota had no room", &["quota"]);
        let sessions = register(r, IntGauge::new("mcpgw_sessions", "MCP sessions open"));
        let sessions_dormant =
            register(r, IntGauge::new("mcpgw_sessions_dormant", "MCP sessions open and dormant (no protocol worker)"));
        let session_streams =
            register(r, IntGauge::new("mcpgw_session_streams", "MCP sessions open with their GET stream open"));
        let connections = register(
            r,
            IntGaugeVec::new(Opts::new("mcpgw_connections", "Client connections open, by listener"), &["listener"]),
        );
        for listener in ["gateway", "admin", "metrics"] {
            connections.with_label_values(&[listener]);
        }
        let trace_export_errors = register(
            r,
            IntCounter::new("mcpgw_trace_export_errors_total", "Span batches the trace exporter failed to deliver"),
        );
        let config_reloads = counter_vec(
            r,
            "mcpgw_config_reloads_total",
            "Config file reloads by result (error: the file failed validation and was not used)",
            &["result"],
        );
        let config_store_up = register(
            r,
            IntGauge::new("mcpgw_config_store_up", "The Redis configuration store is reachable (1) or not (0)"),
        );
        let config_version =
            register(r, IntGauge::new("mcpgw_config_version", "Version of the Redis configuration store serving here"));
        let admin_requests =
            counter_vec(r, "mcpgw_admin_requests_total", "Admin API requests by status class", &["status"]);
        let guardrail_blocks = counter_vec(
            r,
            "mcpgw_guardrail_blocks_total",
            "Tool calls blocked by guardrails, by stage and detector",
            &["stage", "detector"],
        );
        // Label values known in advance exist from the start, so a scrape shows zero rather than nothing.
        for result in ["ok", "error"] {
            config_reloads.with_label_values(&[result]);
        }
        for stage in ["input", "output"] {
            for detector in ["custom_keyword", "gw", "thirdparty_moderation", "unavailable"] {
                guardrail_blocks.with_label_values(&[stage, detector]);
            }
        }
        for cache in ["tools", "gateway_config"] {
            cache_hits.with_label_values(&[cache]);
            cache_misses.with_label_values(&[cache]);
        }
        cache_errors.with_label_values(&["external"]);
        for tool in GW_TOOLS {
            tool_calls.with_label_values(&[tool, "success"]);
            tool_call_duration.with_label_values(&[tool]);
        }
        for transport in ["http", "stdio"] {
            request_duration.with_label_values(&[transport]);
        }
        upstream_calls.with_label_values(&["success"]);
        let metrics = Metrics {
            registry,
            hooks: Mutex::default(),
            requests,
            request_duration,
            tool_calls,
            tool_call_duration,
            upstream_calls,
            cache_hits,
            cache_misses,
            cache_errors,
            upstream_processes,
            upstream_connections,
            tool_scan_findings,
            tool_pin_mismatches,
            upstream_restarts,
            upstream_starts,
            upstream_start_failures,
            rate_limited,
            limit_hits,
            user_credential_events,
            quota_rejections,
            sessions,
            sessions_dormant,
            session_streams,
            connections,
            trace_export_errors,
            config_reloads,
            config_store_up,
            config_version,
            admin_requests,
            guardrail_blocks,
        };
        metrics.on_scrape(|m| catch_up(&m.trace_export_errors, crate::telemetry::traces::exporter_status().errors));
        metrics
    }

    /// Counts one hit of `limit` (one of [`LIMITS`]).
    pub fn limit_hit(&self, limit: &str) {
        self.limit_hits.with_label_values(&[limit]).inc();
    }

    /// Counts one `event` of users' own credentials of `kind` (see [`Metrics::user_credential_events`]).
    pub fn user_credential_event(&self, kind: &str, event: &str) {
        self.user_credential_events.with_label_values(&[kind, event]).inc();
    }

    /// Runs `hook` before every scrape (to copy in values that are counted elsewhere).
    pub fn on_scrape(&self, hook: impl Fn(&Metrics) + Send + Sync + 'static) {
        self.hooks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Box::new(hook));
    }

    /// The metrics in Prometheus text format.
    pub fn render(&self) -> String {
        for hook in self.hooks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
            hook(self);
        }
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// Raises `counter` to `total` (a count kept elsewhere that only grows).
pub fn catch_up(counter: &prometheus::core::GenericCounter<prometheus::core::AtomicU64>, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

fn register<M: prometheus::core::Collector + Clone + 'static>(registry: &Registry, metric: prometheus::Result<M>) -> M {
    // Names are constants of this file; a failure here is a programming error caught by the unit test.
    let metric = metric.unwrap_or_else(|e| panic!("metric: {e}"));
    let _ = registry.register(Box::new(metric.clone()));
    metric
}

fn histogram_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
    register(registry, HistogramVec::new(opts, labels))
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(registry, IntCounterVec::new(Opts::new(name, help), labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_render_with_zeroes() {
        let m = Metrics::new();
        m.requests.with_label_values(&["http", "POST", "200"]).inc();
        let text = m.render();
        assert!(text.contains("mcpgw_config_reloads_total{result=\"error\"} 0"), "{text}");
        m.config_reloads.with_label_values(&["ok"]).inc();
        assert!(m.render().contains("mcpgw_config_reloads_total{result=\"ok\"} 1"));
        for name in [
            "mcpgw_requests_total",
            "mcpgw_request_duration_seconds",
            "mcpgw_tool_calls_total",
            "mcpgw_tool_call_duration_seconds",
            "mcpgw_cache_hits_total",
            "mcpgw_cache_misses_total",
            "mcpgw_guardrail_blocks_total",
            "mcpgw_upstream_processes",
            "mcpgw_upstream_restarts_total",
            "mcpgw_rate_limited_total",
        ] {
            assert!(text.contains(&format!("# TYPE {name} ")), "{name} missing:\n{text}");
        }
    }

    #[test]
    fn scrape_hooks_catch_counters_up() {
        let m = Metrics::new();
        m.on_scrape(|m| catch_up(&m.upstream_restarts, 3));
        assert!(m.render().contains("mcpgw_upstream_restarts_total 3"));
        assert!(m.render().contains("mcpgw_upstream_restarts_total 3"), "a second scrape adds nothing");
    }
}
