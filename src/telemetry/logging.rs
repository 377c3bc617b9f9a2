//! JSON logs on stderr, one object per line: `timestamp` (ISO 8601 UTC), `level` (the spec's names), `message`,
//! `service_name`, then the event's own fields. The level follows `gw_log_level` and changes on reload.
//!
//! The same subscriber carries the trace layer (`telemetry/traces.rs`) when `plugins.telemetry` turns traces on. Each
//! layer has its own filter: the log level filters log records only, and the trace layer takes the gateway's spans
//! (target `spans::TARGET`, which the log formatter never sees) whatever the log level.

use std::fmt::{self, Write as _};
use std::ops::Range;
use std::time::SystemTime;

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

use super::{log_output, spans, traces};
use crate::json_text;

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
        .with_writer(log_output::LogOutput)
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
        Ok(()) => {
            log_output::flush_on_panic();
            LogHandle(Some(handle))
        }
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

/// The event's fields in the order they were recorded, each as its JSON text (a range of `text`); a name recorded
/// twice keeps its place and takes the last value, as a JSON object built field by field would.
#[derive(Default)]
struct Collect {
    fields: Vec<(&'static str, Range<usize>)>,
    text: String,
}

impl Collect {
    fn put(&mut self, field: &Field, write: impl FnOnce(&mut String)) {
        let start = self.text.len();
        write(&mut self.text);
        let value = start..self.text.len();
        match self.fields.iter_mut().find(|(name, _)| *name == field.name()) {
            Some((_, slot)) => *slot = value,
            None => self.fields.push((field.name(), value)),
        }
    }
}

impl Visit for Collect {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, |text| json_text::push_str(text, value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, |text| text.push_str(if value { "true" } else { "false" }));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, |text| {
            let _ = write!(text, "{value}");
        });
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, |text| {
            let _ = write!(text, "{value}");
        });
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, |text| json_text::push_f64(text, value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, |text| {
            text.push('"');
            let _ = write!(json_text::Escaping(text), "{value:?}");
            text.push('"');
        });
    }
}

/// The names the line itself starts with; an event's field of one of these names takes its value, in its place.
const HEAD: [&str; 4] = ["timestamp", "level", "message", "service_name"];

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    /// The line is written as the JSON object it used to be built as (`serde_json`'s map, which keeps insertion order)
    /// would be: the four head fields, then the event's; the event's `message` taken out of its fields the way that
    /// map removes a key (the last field moves into its place).
    fn format_event(&self, _ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let mut fields = Collect::default();
        event.record(&mut fields);
        let mut line = String::with_capacity(256 + fields.text.len());
        let mut head: [Option<Range<usize>>; 4] = Default::default();
        if let Some(at) = fields.fields.iter().position(|(name, _)| *name == "message") {
            head[2] = Some(fields.fields.swap_remove(at).1);
        }
        let mut rest = Vec::with_capacity(fields.fields.len());
        for (name, value) in fields.fields {
            match HEAD.iter().position(|head| *head == name) {
                Some(at) => head[at] = Some(value),
                None => rest.push((name, value)),
            }
        }
        let value = |line: &mut String, at: usize, default: &dyn Fn(&mut String)| match &head[at] {
            Some(range) => line.push_str(&fields.text[range.clone()]),
            None => default(line),
        };
        line.push_str("{\"timestamp\":");
        value(&mut line, 0, &|line| {
            line.push('"');
            json_text::push_time(line, SystemTime::now());
            line.push('"');
        });
        line.push_str(",\"level\":");
        value(&mut line, 1, &|line| json_text::push_str(line, level_name(event.metadata().level())));
        line.push_str(",\"message\":");
        value(&mut line, 2, &|line| line.push_str("\"\""));
        line.push_str(",\"service_name\":");
        value(&mut line, 3, &|line| json_text::push_str(line, SERVICE_NAME));
        for (name, value) in rest {
            line.push(',');
            json_text::push_str(&mut line, name);
            line.push(':');
            line.push_str(&fields.text[value]);
        }
        line.push_str("}\n");
        writer.write_str(&line)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::{Map, Value};
    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// The line as it was written before [`JsonLine`] wrote its text itself: a `serde_json` map (insertion order),
    /// the message removed from the fields as the map removes a key, the head fields, then the event's.
    struct LineAsAValue;

    #[derive(Default)]
    struct Fields(Map<String, Value>);

    impl Visit for Fields {
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

    impl<S, N> FormatEvent<S, N> for LineAsAValue
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        N: for<'a> FormatFields<'a> + 'static,
    {
        fn format_event(&self, _: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
            let mut fields = Fields::default();
            event.record(&mut fields);
            let mut line = Map::new();
            line.insert("timestamp".into(), Value::String("T".into()));
            line.insert("level".into(), Value::String(level_name(event.metadata().level()).into()));
            let message = fields.0.remove("message").unwrap_or(Value::String(String::new()));
            line.insert("message".into(), message);
            line.insert("service_name".into(), Value::String(SERVICE_NAME.into()));
            line.extend(fields.0);
            writeln!(writer, "{}", Value::Object(line))
        }
    }

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    /// The lines `events` log, through `format`.
    fn lines<F>(format: F, events: fn()) -> Vec<String>
    where
        F: FormatEvent<tracing_subscriber::Registry, tracing_subscriber::fmt::format::DefaultFields>
            + Send
            + Sync
            + 'static,
    {
        let out = Captured::default();
        let layer = tracing_subscriber::fmt::layer().with_writer(out.clone()).event_format(format);
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), events);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_log_line_is_the_text_the_json_map_gave() {
        fn events() {
            let email = "d***@example.com";
            let none: Option<&str> = None;
            tracing::info!(
                custom_id = %"gw948dc1e69348446596fd2344efd3f406_1796220764607",
                tool_name = "gw_secure_call_tools",
                server_name = Some("py"),
                email = %email,
                mcp_config_id = none,
                duration_ms = 5_u64,
                success = true,
                "tool call"
            );
            tracing::warn!(error = %"a \"quoted\"\nline\u{1}", errors = -3_i64, ratio = 0.5, nan = f64::NAN, "failing");
            tracing::error!(level = "mine", service_name = "other", timestamp = 7_u64, tail = ?vec![1, 2], "heads");
            tracing::info!(only = 1_u64);
            tracing::debug!(message = "named", after = "x");
        }
        let ours = lines(JsonLine, events);
        let theirs = lines(LineAsAValue, events);
        assert_eq!(ours.len(), 5);
        for (ours, theirs) in ours.iter().zip(&theirs) {
            // Ours carries the time; the reference a placeholder (unless the event has a `timestamp` of its own).
            let (head, rest) = ours.split_at(ours.find(",\"level\"").unwrap());
            if head.starts_with("{\"timestamp\":\"20") {
                assert!(head.ends_with("Z\"") && head.len() == "{\"timestamp\":\"2026-12-02T14:12:44.607950Z\"".len());
                assert_eq!(format!("{{\"timestamp\":\"T\"{rest}"), *theirs);
            } else {
                assert_eq!(ours, theirs);
            }
        }
        // The event's own `timestamp` field takes the head's place (the reference writes it there too).
        assert!(
            theirs[2]
                .starts_with("{\"timestamp\":7,\"level\":\"mine\",\"message\":\"heads\",\"service_name\":\"other\"")
        );
    }
}
