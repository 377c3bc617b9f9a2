//! JSON logs on stderr, one object per line: `timestamp` (ISO 8601 UTC), `level` (the spec's names), `message`,
//! `service_name`, then the event's own fields. The level follows `gw_log_level` and changes on reload.
//!
//! The same subscriber carries the trace layer (`telemetry/traces.rs`) when `plugins.telemetry` turns traces on. Each
//! layer has its own filter: the log level filters log records only, and the trace layer takes the gateway's spans
//! (target `spans::TARGET`, which the log formatter never sees) whatever the log level.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::FilterExt;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;

use super::{spans, traces};

/// The service name every record carries.
pub const SERVICE_NAME: &str = "mcpgw";

/// Log levels of the spec, in increasing severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Warning,
    Error,
    Critical,
}

impl LogLevel {
    /// Parses a spec level name (`DEBUG` … `CRITICAL`), case-insensitively.
    pub fn parse(name: &str) -> Option<LogLevel> {
        match name.to_ascii_uppercase().as_str() {
            "DEBUG" => Some(LogLevel::Debug),
            "INFO" => Some(LogLevel::Info),
            "WARNING" | "WARN" => Some(LogLevel::Warning),
            "ERROR" => Some(LogLevel::Error),
            "CRITICAL" => Some(LogLevel::Critical),
            _ => None,
        }
    }
}

/// Changes the log level of the running process.
#[derive(Clone)]
pub struct LogHandle(Option<reload::Handle<Targets, tracing_subscriber::Registry>>);

impl LogHandle {
    /// Applies a reloaded configuration: the log level (and a warning when the trace export it asks for changed,
    /// which needs a restart).
    pub fn apply(&self, level: LogLevel, traces: Option<traces::TraceExport>) {
        self.set_level(level);
        traces::warn_if_changed(traces);
    }

    /// Sets the level (CRITICAL maps to ERROR, the most severe level tracing has).
    pub fn set_level(&self, level: LogLevel) {
        if let Some(handle) = &self.0 {
            let _ = handle.modify(|f| *f = filter_for(level));
        }
    }
}

/// The filter for a level. The MCP library logs every process start and notification at INFO; it is held at WARNING
/// so the gateway's own records stay readable.
fn filter_for(level: LogLevel) -> Targets {
    let ours = match level {
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warning => LevelFilter::WARN,
        LogLevel::Error | LogLevel::Critical => LevelFilter::ERROR,
    };
    Targets::new()
        .with_default(ours)
        .with_target("rmcp", ours.min(LevelFilter::WARN))
        .with_target(spans::TARGET, LevelFilter::OFF)
}

/// rmcp's warning for every error a request is answered with ("response error", with a Rust debug dump of it): a
/// client's `prompts/list` in the gateway view (-32601), an unknown prompt (-32602). The client has the error; the log
/// is not the place for what a client asked wrongly (contract 15: a probe logs no warning).
fn is_answered_error(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() == Level::WARN
        && meta.target() == "rmcp::service"
        && meta.fields().field("error").is_some()
        && meta.fields().field("id").is_some()
}

/// The filter that leaves out [`is_answered_error`]'s events, with a level hint that leaves the level filter's in
/// charge: without one (a filter's "no hint" is "every level") every span of the request path was built (about 12 %
/// more instructions per call).
fn answered_errors_left_out<S>() -> impl tracing_subscriber::layer::Filter<S> {
    // A `FilterFn` reads the metadata only, so its answer is cached per callsite.
    tracing_subscriber::filter::FilterFn::new(|meta| !is_answered_error(meta)).with_max_level_hint(LevelFilter::TRACE)
}

/// Installs the JSON logger on stderr at `level`, with the trace export `traces` (`None`: no traces). Call it inside
/// the tokio runtime (a gRPC exporter needs one). Safe to call twice (the second call does nothing and returns a
/// no-op handle).
pub fn init(level: LogLevel, traces: Option<traces::TraceExport>) -> LogHandle {
    let (filter, handle) = reload::Layer::new(filter_for(level));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .event_format(JsonLine)
        .with_filter(filter.and(answered_errors_left_out()));
    let registry = tracing_subscriber::registry().with(fmt);
    let (traces, trace_error) = match traces::layer(traces) {
        Ok(layer) => (layer, None),
        Err(e) => (None, Some(e)),
    };
    let installed = registry.with(traces).try_init();
    if let Some(e) = trace_error {
        tracing::error!(error = %e, "traces are not exported");
    }
    match installed {
        Ok(()) => LogHandle(Some(handle)),
        Err(_) => LogHandle(None),
    }
}

struct JsonLine;

fn level_name(level: &Level) -> &'static str {
    match *level {
        Level::TRACE | Level::DEBUG => "DEBUG",
        Level::INFO => "INFO",
        Level::WARN => "WARNING",
        Level::ERROR => "ERROR",
    }
}

#[derive(Default)]
struct Collect(Map<String, Value>);

impl Visit for Collect {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), Value::String(value.to_string()));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), Value::Bool(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_string(), Value::String(format!("{value:?}")));
    }
}

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut fields = Collect::default();
        event.record(&mut fields);
        let mut line = Map::new();
        line.insert("timestamp".into(), Value::String(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()));
        line.insert("level".into(), Value::String(level_name(event.metadata().level()).into()));
        let message = fields.0.remove("message").unwrap_or(Value::String(String::new()));
        line.insert("message".into(), message);
        line.insert("service_name".into(), Value::String(SERVICE_NAME.into()));
        line.extend(fields.0);
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}
