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

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use pin_project_lite::pin_project;
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

pin_project! {
    /// `work` run as a span's, then `latency_ms` and whatever `record` takes from the output recorded on it.
    ///
    /// A future of its own rather than an `async fn`: an `async fn` keeps its argument and the future it awaits side by
    /// side, so each helper would double the size of the work it wraps, and every caller would copy that size.
    pub struct Traced<F, R> {
        #[pin]
        work: F,
        // `None` when the span is off (no trace layer wants it): the work then runs as is.
        span: Option<(Span, Instant)>,
        record: Option<R>,
    }
}

fn traced<F: Future, R: FnOnce(&Span, &F::Output)>(span: Span, work: F, record: R) -> Traced<F, R> {
    let span = (!span.is_disabled()).then(|| (span, Instant::now()));
    Traced { work, span, record: Some(record) }
}

impl<F: Future, R: FnOnce(&Span, &F::Output)> Future for Traced<F, R> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let Some((span, started)) = this.span.as_ref() else {
            return this.work.poll(cx);
        };
        // The span is the parent of the spans the work opens while it runs.
        let output = std::task::ready!(PARENT.sync_scope(span.clone(), || this.work.poll(cx)));
        span.record("latency_ms", i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX));
        if let Some(record) = this.record.take() {
            record(span, &output);
        }
        Poll::Ready(output)
    }
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
pub fn gateway_tool<W: Future<Output = Value>>(
    tool_name: &'static str,
    project_id: &str,
    mcp_config_id: Option<&str>,
    work: W,
) -> Traced<W, impl FnOnce(&Span, &Value)> {
    let span = tracing::info_span!(target: TARGET, parent: parent(), "gw_tool_call", tool_name, project_id,
        mcp_config_id = mcp_config_id.unwrap_or(""), success = Empty, latency_ms = Empty, otel.status_code = Empty);
    traced(span, work, |span: &Span, answer: &Value| outcome(span, answered_success(answer)))
}

/// The span of one upstream tool call, guardrails included; successful when the call's result is a success.
pub fn tool_execution<E, W: Future<Output = Result<Value, E>>>(
    server_name: &str,
    tool_name: &str,
    project_id: &str,
    transport: &str,
    work: W,
) -> Traced<W, impl FnOnce(&Span, &Result<Value, E>)> {
    let span = tracing::info_span!(target: TARGET, parent: parent(), "tool_execution", server_name, tool_name, project_id,
        transport, success = Empty, latency_ms = Empty, otel.status_code = Empty);
    traced(span, work, |span: &Span, result: &Result<Value, E>| {
        outcome(span, result.as_ref().is_ok_and(answered_success))
    })
}

/// The span of one guardrail policy check; `Err` is the blocked call's result.
pub fn guardrail_check<T, B, W: Future<Output = Result<T, B>>>(
    stage: &'static str,
    detector: &str,
    work: W,
) -> Traced<W, impl FnOnce(&Span, &Result<T, B>)> {
    let span = tracing::info_span!(target: TARGET, parent: parent(), "guardrail_check", stage, detector, blocked = Empty,
        latency_ms = Empty);
    traced(span, work, |span: &Span, result: &Result<T, B>| {
        span.record("blocked", result.is_err());
    })
}

/// The span of one discovery of a server's tools; `source` names where a success came from.
pub fn discovery<T, E, W: Future<Output = Result<T, E>>>(
    server_name: &str,
    work: W,
    source: impl FnOnce(&T) -> &'static str,
) -> Traced<W, impl FnOnce(&Span, &Result<T, E>)> {
    let span = tracing::info_span!(target: TARGET, parent: parent(), "discovery", server_name, source = Empty, success = Empty,
        latency_ms = Empty, otel.status_code = Empty);
    traced(span, work, |span: &Span, result: &Result<T, E>| {
        if let Ok(found) = result {
            span.record("source", source(found));
        }
        outcome(span, result.is_ok());
    })
}
