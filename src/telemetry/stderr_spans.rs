//! The `stdout` telemetry provider's exporter: each finished span as one JSON object per line on **stderr**.
//!
//! The name says stdout for compatibility with the configuration the spec defines, but stdout is the MCP channel in
//! stdio mode, so spans go where the logs go. A line carries the log record's fields (`timestamp`, `level`,
//! `message: "span"`, `service_name`) so one parser reads both, then the span: `span_name`, `trace_id`, `span_id`,
//! `parent_span_id` (null for a root), `start_time`, `end_time`, `duration_ms` and `attributes`. A batch is written
//! with one `write_all`, so lines from the batch thread and the logger do not interleave mid-line.

use std::io::Write;
use std::time::SystemTime;

use chrono::{DateTime, SecondsFormat, Utc};
use opentelemetry::trace::SpanId;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use serde_json::{Map, Value, json};

use super::logging::SERVICE_NAME;

/// Writes spans to stderr as JSON lines.
#[derive(Debug)]
pub struct StderrSpanExporter;

fn time(t: SystemTime) -> String {
    DateTime::<Utc>::from(t).to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn attribute(value: &opentelemetry::Value) -> Value {
    match value {
        opentelemetry::Value::Bool(b) => json!(b),
        opentelemetry::Value::I64(i) => json!(i),
        opentelemetry::Value::F64(f) => json!(f),
        opentelemetry::Value::String(s) => json!(s.as_str()),
        other => json!(other.to_string()),
    }
}

/// One span as its JSON line (without the newline).
pub fn span_line(span: &SpanData) -> Value {
    let duration = span.end_time.duration_since(span.start_time).unwrap_or_default();
    let attributes: Map<String, Value> =
        span.attributes.iter().map(|kv| (kv.key.as_str().to_string(), attribute(&kv.value))).collect();
    let parent = (span.parent_span_id != SpanId::INVALID).then(|| span.parent_span_id.to_string());
    json!({
        "timestamp": time(span.end_time),
        "level": "INFO",
        "message": "span",
        "service_name": SERVICE_NAME,
        "span_name": span.name,
        "trace_id": span.span_context.trace_id().to_string(),
        "span_id": span.span_context.span_id().to_string(),
        "parent_span_id": parent,
        "start_time": time(span.start_time),
        "end_time": time(span.end_time),
        "duration_ms": duration.as_secs_f64() * 1000.0,
        "attributes": attributes,
    })
}

impl SpanExporter for StderrSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let mut text = String::new();
        for span in &batch {
            text.push_str(&span_line(span).to_string());
            text.push('\n');
        }
        std::io::stderr().lock().write_all(text.as_bytes()).map_err(|e| OTelSdkError::InternalFailure(e.to_string()))
    }
}
