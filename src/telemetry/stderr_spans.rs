//! The `stdout` telemetry provider's exporter: each finished span as one JSON object per line on **stderr**.
//!
//! The name says stdout for compatibility with the configuration the spec defines, but stdout is the MCP channel in
//! stdio mode, so spans go where the logs go. A line carries the log record's fields (`timestamp`, `level`,
//! `message: "span"`, `service_name`) so one parser reads both, then the span: `span_name`, `trace_id`, `span_id`,
//! `parent_span_id` (null for a root), `start_time`, `end_time`, `duration_ms` and `attributes`. A batch is written
//! straight into one text (no `serde_json::Value` per span: that cost more than the rest of a call, BENCHMARKS.md "A
//! Python agent's call") and written with the log lines held back before it, in one `write`
//! (`telemetry/log_output.rs`), so lines from the batch thread and the logger do not interleave mid-line.

use std::fmt::Write as _;
use std::time::SystemTime;

use opentelemetry::trace::SpanId;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use super::logging::SERVICE_NAME;
use crate::json_text::{push_f64, push_str, push_time};
use crate::secrets::push_hex;

/// Writes spans to stderr as JSON lines.
#[derive(Debug)]
pub struct StderrSpanExporter;

fn push_quoted_time(out: &mut String, time: SystemTime) {
    out.push('"');
    push_time(out, time);
    out.push('"');
}

fn push_attribute(out: &mut String, value: &opentelemetry::Value) {
    match value {
        opentelemetry::Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        opentelemetry::Value::I64(i) => {
            let _ = write!(out, "{i}");
        }
        opentelemetry::Value::F64(f) => push_f64(out, *f),
        opentelemetry::Value::String(s) => push_str(out, s.as_str()),
        other => push_str(out, &other.to_string()),
    }
}

/// One span as its JSON line, newline included, appended to `out`: the fields in the order above, and the attributes
/// in the span's order (a key set twice appears once, where it was first set, with the last value).
pub fn push_span_line(out: &mut String, span: &SpanData) {
    let duration = span.end_time.duration_since(span.start_time).unwrap_or_default();
    out.push_str("{\"timestamp\":");
    push_quoted_time(out, span.end_time);
    out.push_str(",\"level\":\"INFO\",\"message\":\"span\",\"service_name\":");
    push_str(out, SERVICE_NAME);
    out.push_str(",\"span_name\":");
    push_str(out, &span.name);
    out.push_str(",\"trace_id\":\"");
    push_hex(out, &span.span_context.trace_id().to_bytes());
    out.push_str("\",\"span_id\":\"");
    push_hex(out, &span.span_context.span_id().to_bytes());
    out.push_str("\",\"parent_span_id\":");
    if span.parent_span_id == SpanId::INVALID {
        out.push_str("null");
    } else {
        out.push('"');
        push_hex(out, &span.parent_span_id.to_bytes());
        out.push('"');
    }
    out.push_str(",\"start_time\":");
    push_quoted_time(out, span.start_time);
    out.push_str(",\"end_time\":");
    push_quoted_time(out, span.end_time);
    out.push_str(",\"duration_ms\":");
    push_f64(out, duration.as_secs_f64() * 1000.0);
    out.push_str(",\"attributes\":{");
    for (i, kv) in span.attributes.iter().enumerate() {
        let key = kv.key.as_str();
        let earlier = span.attributes[..i].iter().any(|other| other.key.as_str() == key);
        if earlier {
            continue;
        }
        // The last value set for the key, at the place of its first.
        let value =
            span.attributes[i..].iter().rev().find(|other| other.key.as_str() == key).map_or(&kv.value, |kv| &kv.value);
        if !out.ends_with('{') {
            out.push(',');
        }
        push_str(out, key);
        out.push(':');
        push_attribute(out, value);
    }
    out.push_str("}}\n");
}

impl SpanExporter for StderrSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let mut text = String::with_capacity(batch.len() * 512);
        for span in &batch {
            push_span_line(&mut text, span);
        }
        super::log_output::write_now(text.as_bytes()).map_err(|e| OTelSdkError::InternalFailure(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use chrono::{DateTime, SecondsFormat, Utc};
    use opentelemetry::KeyValue;
    use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceFlags, TraceId, TraceState};
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use serde_json::{Map, Value, json};

    use super::*;

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

    /// The line as it was written before `push_span_line`: a `Value` built with `json!`.
    fn line_as_a_value(span: &SpanData) -> String {
        let duration = span.end_time.duration_since(span.start_time).unwrap_or_default();
        let attributes: Map<String, Value> =
            span.attributes.iter().map(|kv| (kv.key.as_str().to_string(), attribute(&kv.value))).collect();
        let parent = (span.parent_span_id != SpanId::INVALID).then(|| span.parent_span_id.to_string());
        let line = json!({
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
        });
        format!("{line}\n")
    }

    fn span(parent: SpanId, attributes: Vec<KeyValue>) -> SpanData {
        let start = UNIX_EPOCH + Duration::new(1_796_220_764, 395_262_417);
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(0xbbff47ab11c04645842f21f66c10cf7d_u128),
                SpanId::from(0x0a29b3e1a258221f_u64),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "tool_execution".into(),
            start_time: start,
            end_time: start + Duration::from_nanos(3_006_354_111),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }

    #[test]
    fn a_span_line_is_the_text_the_json_value_gave() {
        let attributes = vec![
            KeyValue::new("server_name", "py \"quoted\"\n"),
            KeyValue::new("latency_ms", 2_i64),
            KeyValue::new("success", true),
            KeyValue::new("ratio", 0.25),
            KeyValue::new("nan", f64::NAN),
            KeyValue::new("success", false),
            KeyValue::new("otel.status_code", "ERROR"),
        ];
        for span in [span(SpanId::from(0x68d5a3941d1c9369_u64), attributes), span(SpanId::INVALID, vec![])] {
            let mut ours = String::new();
            push_span_line(&mut ours, &span);
            assert_eq!(ours, line_as_a_value(&span));
        }
    }
}
