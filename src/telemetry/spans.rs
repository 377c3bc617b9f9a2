//! The gateway's trace spans (spec section 6), one helper per span, each wrapping the work it measures:
//!
//! ```text
//! gw_tool_call        tool_name (the gw_* tool), project_id, mcp_config_id, success, latency_ms
//! ├── discovery       server_name, source (cache | config | discovery), success, latency_ms
//! └── tool_execution  server_name, tool_name, project_id, success, latency_ms   (one per upstream call)
//!     ├── guardrail_check  stage (input | output), detector, blocked, latency_ms
//!     └── guardrail_check  ...
//! ```
//!
//! Attributes are names, ids and outcomes only: never API keys, arguments, results, tokens or other secrets. A failed
//! span also gets the OpenTelemetry error status (`otel.status_code`).
//!
//! The spans live on their own target, [`TARGET`], which the log formatter ignores and only the trace layer
//! (`telemetry/traces.rs`) enables. With traces off no layer wants the target, so `tracing` caches "never" for each
//! call site: a helper then costs one relaxed load and runs its work as is, and field values are never formatted.
//!
//! The spans are never *entered*: the parent of a span is the span of the enclosing helper, kept in a task-local
//! ([`PARENT`]) and named explicitly. Entered spans would be `Span::current()` for everything the work runs, and a
//! library that captures the current span for a task it spawns (rmcp does, for an upstream's connection, which lives
//! as long as the process) would keep our span open, and so unexported, for as long as that task runs.

use std::time::Instant;

use serde_json::Value;
use tracing::Span;
use tracing::field::Empty;
use tracing::span::Id;

/// The `tracing` target of every span here.
pub const TARGET: &str = "mcpgw::trace";

tokio::task_local! {
    /// The span of the helper whose work is running: the parent of the spans that work opens.
    static PARENT: Span;
}

/// The parent for a new span: the enclosing helper's span, or none (a root span).
fn parent() -> Option<Id> {
    PARENT.try_with(Span::id).ok().flatten()
}

/// Runs `work` as `span`'s, then records `latency_ms` and whatever `record` takes from the output.
async fn traced<F: Future>(span: Span, work: F, record: impl FnOnce(&Span, &F::Output)) -> F::Output {
    if span.is_disabled() {
        return work.await;
    }
    let started = Instant::now();
    let output = PARENT.scope(span.clone(), work).await;
    span.record("latency_ms", i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX));
    record(&span, &output);
    output
}

fn outcome(span: &Span, success: bool) {
    span.record("success", success);
    if !success {
        span.record("otel.status_code", "ERROR");
    }
}

/// Whether a tool's answer object reports success.
fn answered_success(answer: &Value) -> bool {
    answer.get("status").and_then(Value::as_str) == Some("success")
}

/// The span of one gateway tool call (`gw_*`); successful when its answer's `status` is `success`.
pub async fn gateway_tool(
    tool_name: &'static str,
    project_id: &str,
    mcp_config_id: Option<&str>,
    work: impl Future<Output = Value>,
) -> Value {
    let span = tracing::info_span!(target: TARGET, parent: parent(), "gw_tool_call", tool_name, project_id,
        mcp_config_id = mcp_config_id.unwrap_or(""), success = Empty, latency_ms = Empty, otel.status_code = Empty);
    traced(span, work, |span, answer| outcome(span, answered_success(answer))).await
}

/// The span of one upstream tool call, guardrails included; successful when the call's result is a success.
pub async fn tool_execution<E>(
    server_name: &str,
    tool_name: &str,
    project_id: &str,
    transport: &str,
    work: impl Future<Output = Result<Value, E>>,
) -> Result<Value, E> {
    let span = tracing::info_span!(target: TARGET, parent: parent(), "tool_execution", server_name, tool_name, project_id,
        transport, success = Empty, latency_ms = Empty, otel.status_code = Empty);
    traced(span, work, |span, result| outcome(span, result.as_ref().is_ok_and(answered_success))).await
}

/// The span of one guardrail policy check; `Err` is the blocked call's result.
pub async fn guardrail_check<T, B>(
    stage: &'static str,
    detector: &str,
    work: impl Future<Output = Result<T, B>>,
) -> Result<T, B> {
    let span = tracing::info_span!(target: TARGET, parent: parent(), "guardrail_check", stage, detector, blocked = Empty,
        latency_ms = Empty);
    traced(span, work, |span, result| {
        span.record("blocked", result.is_err());
    })
    .await
}

/// The span of one discovery of a server's tools; `source` names where a success came from.
pub async fn discovery<T, E>(
    server_name: &str,
    work: impl Future<Output = Result<T, E>>,
    source: impl FnOnce(&T) -> &'static str,
) -> Result<T, E> {
    let span = tracing::info_span!(target: TARGET, parent: parent(), "discovery", server_name, source = Empty, success = Empty,
        latency_ms = Empty, otel.status_code = Empty);
    traced(span, work, |span, result| {
        if let Ok(found) = result {
            span.record("source", source(found));
        }
        outcome(span, result.is_ok());
    })
    .await
}
