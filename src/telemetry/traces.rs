//! Traces: the OpenTelemetry tracer provider chosen by `plugins.telemetry`, and the health of its exporter.
//!
//! The gateway's spans (`telemetry/spans.rs`) are ordinary `tracing` spans on one target, [`spans::TARGET`]. When
//! traces are on, [`layer`] returns a `tracing_opentelemetry` layer, filtered to that target only, that the logging
//! subscriber (`telemetry/logging.rs`) installs next to its JSON formatter. Closed spans go to the SDK's batch span
//! processor (its own thread; `OTEL_BSP_SCHEDULE_DELAY` and the other standard `OTEL_BSP_*` variables apply) and from
//! there to one exporter:
//!
//! - provider `opentelemetry`: OTLP over gRPC (tonic; built here, inside the tokio runtime, because its channel needs
//!   one) or over HTTP/protobuf (reqwest's blocking client, which suits the processor's thread), per
//!   `config.protocol`; `https://` URLs use TLS (rustls with ring) against the system's roots;
//! - provider `stdout`: one JSON object per span on **stderr** (`telemetry/stderr_spans.rs`); stdout carries MCP
//!   messages in stdio mode and must never see anything else;
//! - disabled (`enabled: false`, or no `plugins.telemetry`): no layer at all, so a span costs one cached interest
//!   check.
//!
//! Every export result passes through [`Observed`], which counts failures for [`exporter_status`] (the system health
//! reports `degraded` while the exporter fails) and logs once when exporting starts or stops failing.
//!
//! The provider is chosen once, at start: a change of `plugins.telemetry` takes effect after a restart. On exit,
//! [`shutdown`] flushes the spans still queued, bounded by a timeout.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::tonic_types::transport::ClientTlsConfig;
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanData, SpanExporter};
use serde_json::Value;
use tracing::Subscriber;
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{Filtered, LevelFilter, Targets};
use tracing_subscriber::registry::LookupSpan;

use super::logging::SERVICE_NAME;
use super::spans;
use super::stderr_spans::StderrSpanExporter;

/// Where spans go, decided from `plugins.telemetry`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceExport {
    /// OTLP to a collector; `url` is the endpoint as sent (for HTTP, with `/v1/traces`).
    Otlp { url: String, protocol: OtlpProtocol },
    /// One JSON line per span on stderr.
    Stderr,
}

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    Http,
}

impl TraceExport {
    /// The export of an enabled `plugins.telemetry` with this provider and config; `None` for other providers.
    pub fn from_plugin(provider: &str, config: &serde_json::Map<String, Value>) -> Option<TraceExport> {
        match provider {
            "stdout" => Some(TraceExport::Stderr),
            "opentelemetry" => {
                let url = config.get("url").and_then(Value::as_str)?.trim();
                let protocol = match config.get("protocol").and_then(Value::as_str) {
                    Some("http") => OtlpProtocol::Http,
                    _ => OtlpProtocol::Grpc,
                };
                let url = match protocol {
                    OtlpProtocol::Grpc => url.to_string(),
                    OtlpProtocol::Http => http_traces_url(url),
                };
                Some(TraceExport::Otlp { url, protocol })
            }
            _ => None,
        }
    }
}

/// An OTLP/HTTP URL with no path (`http://collector:4318`) gets the traces path `/v1/traces`; one with a path is used
/// as written.
pub fn http_traces_url(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = after_scheme.find(['/', '?']).map_or("", |i| &after_scheme[i..]);
    if path.is_empty() || path == "/" { format!("{}/v1/traces", url.trim_end_matches('/')) } else { url.to_string() }
}

/// Why the tracer provider could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the OTLP trace exporter: {0}")]
pub struct TraceError(#[from] opentelemetry_otlp::ExporterBuildError);

/// The health of the span exporter, for the system health report and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExporterStatus {
    /// Traces are being exported (a provider was installed at start).
    pub enabled: bool,
    /// The last export failed (or the exporter could not be built).
    pub failing: bool,
    /// Failed exports since start.
    pub errors: u64,
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static FAILING: AtomicBool = AtomicBool::new(false);
static ERRORS: AtomicU64 = AtomicU64::new(0);
/// The installed provider, kept for [`shutdown`].
static PROVIDER: Mutex<Option<SdkTracerProvider>> = Mutex::new(None);
/// The export chosen at start, and the last different one a reload asked for (warned about once).
static CHOSEN: OnceLock<Option<TraceExport>> = OnceLock::new();
static ASKED: Mutex<Option<Option<TraceExport>>> = Mutex::new(None);

/// The exporter's health now.
pub fn exporter_status() -> ExporterStatus {
    ExporterStatus {
        enabled: ENABLED.load(Ordering::Relaxed),
        failing: FAILING.load(Ordering::Relaxed),
        errors: ERRORS.load(Ordering::Relaxed),
    }
}

fn note_export(result: &OTelSdkResult) {
    match result {
        Ok(()) => {
            if FAILING.swap(false, Ordering::Relaxed) {
                tracing::info!("telemetry exporter recovered");
            }
        }
        Err(e) => {
            let errors = ERRORS.fetch_add(1, Ordering::Relaxed) + 1;
            if !FAILING.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %e, errors, "telemetry exporter failing; spans are being dropped");
            }
        }
    }
}

/// An exporter whose results are counted for [`exporter_status`].
#[derive(Debug)]
pub struct Observed<E>(pub E);

impl<E: SpanExporter> SpanExporter for Observed<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.0.export(batch).await;
        note_export(&result);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

fn resource() -> Resource {
    // `Resource::builder` also reads OTEL_RESOURCE_ATTRIBUTES, so a deployment can add its own (pod, region).
    Resource::builder()
        .with_service_name(SERVICE_NAME)
        .with_attribute(KeyValue::new("service.version", crate::VERSION))
        .build()
}

/// Builds the tracer provider for `export`. Must run inside the tokio runtime (the gRPC channel spawns onto it).
pub fn provider(export: &TraceExport) -> Result<SdkTracerProvider, TraceError> {
    // reqwest and tonic are built with rustls and no provider of their own: ring must be the process default first.
    crate::outbound::ensure_crypto_provider();
    let builder = SdkTracerProvider::builder().with_resource(resource());
    let builder = match export {
        TraceExport::Stderr => builder.with_batch_exporter(Observed(StderrSpanExporter)),
        TraceExport::Otlp { url, protocol: OtlpProtocol::Grpc } => {
            let mut exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic().with_endpoint(url.clone());
            if url.starts_with("https://") {
                exporter = exporter.with_tls_config(ClientTlsConfig::new().with_native_roots());
            }
            builder.with_batch_exporter(Observed(exporter.build()?))
        }
        TraceExport::Otlp { url, protocol: OtlpProtocol::Http } => {
            let exporter =
                opentelemetry_otlp::SpanExporter::builder().with_http().with_endpoint(url.clone()).build()?;
            builder.with_batch_exporter(Observed(exporter))
        }
    };
    Ok(builder.build())
}

/// The trace layer over a subscriber `S`, filtered to the gateway's spans.
pub type TraceLayer<S> = Filtered<OpenTelemetryLayer<S, SdkTracer>, Targets, S>;

/// The layer a subscriber installs to export the gateway's spans: `Ok(None)` when traces are off. Installs the
/// provider for [`shutdown`] and marks the exporter enabled; a provider that cannot be built counts as a failing
/// exporter (the caller logs the error once logging is up).
pub fn layer<S>(chosen: Option<TraceExport>) -> Result<Option<TraceLayer<S>>, TraceError>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let _ = CHOSEN.set(chosen.clone());
    let Some(export) = chosen else { return Ok(None) };
    ENABLED.store(true, Ordering::Relaxed);
    let provider = provider(&export).inspect_err(|_| {
        FAILING.store(true, Ordering::Relaxed);
        ERRORS.fetch_add(1, Ordering::Relaxed);
    })?;
    let tracer = provider.tracer(SERVICE_NAME);
    if let Ok(mut slot) = PROVIDER.lock() {
        *slot = Some(provider);
    }
    // Only the gateway's own spans, whatever `gw_log_level` says; no events (log records stay out of traces), no
    // source locations or thread names.
    let only_ours = Targets::new().with_target(spans::TARGET, LevelFilter::TRACE);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        .with_tracked_inactivity(false);
    Ok(Some(layer.with_filter(only_ours)))
}

/// Called with each reloaded configuration: the trace export is chosen at start only, so a reload that asks for
/// another one is logged (once per change) as needing a restart.
pub fn warn_if_changed(wanted: Option<TraceExport>) {
    let Some(chosen) = CHOSEN.get() else { return };
    let Ok(mut asked) = ASKED.lock() else { return };
    if wanted != *chosen && asked.as_ref() != Some(&wanted) {
        tracing::warn!("plugins.telemetry changed; the trace exporter changes at the next restart");
    }
    *asked = Some(wanted);
}

/// Flushes the queued spans and stops the exporter, waiting at most `timeout`. Does nothing when traces are off.
pub async fn shutdown(timeout: Duration) {
    let provider = PROVIDER.lock().ok().and_then(|mut slot| slot.take());
    let Some(provider) = provider else { return };
    // The SDK's shutdown blocks (it waits for the processor's thread), so it runs off the async workers.
    let flushing = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(timeout));
    match tokio::time::timeout(timeout + Duration::from_millis(100), flushing).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "flushing traces failed"),
        Ok(Err(_)) | Err(_) => tracing::warn!(timeout_ms = timeout.as_millis() as u64, "flushing traces timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plugin(value: Value) -> (String, serde_json::Map<String, Value>) {
        (value["provider"].as_str().unwrap().to_string(), value["config"].as_object().unwrap().clone())
    }

    #[test]
    fn http_urls_get_the_traces_path_when_they_have_none() {
        assert_eq!(http_traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(http_traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(http_traces_url("https://c/otlp/v1/traces"), "https://c/otlp/v1/traces");
    }

    #[test]
    fn providers_map_to_exports() {
        let grpc = plugin(json!({"provider": "opentelemetry", "config": {"url": "http://c:4317", "protocol": "grpc"}}));
        assert_eq!(
            TraceExport::from_plugin(&grpc.0, &grpc.1),
            Some(TraceExport::Otlp { url: "http://c:4317".into(), protocol: OtlpProtocol::Grpc })
        );
        let http = plugin(json!({"provider": "opentelemetry", "config": {"url": "http://c:4318", "protocol": "http"}}));
        assert_eq!(
            TraceExport::from_plugin(&http.0, &http.1),
            Some(TraceExport::Otlp { url: "http://c:4318/v1/traces".into(), protocol: OtlpProtocol::Http })
        );
        let stdout = plugin(json!({"provider": "stdout", "config": {"enabled": true}}));
        assert_eq!(TraceExport::from_plugin(&stdout.0, &stdout.1), Some(TraceExport::Stderr));
    }
}
