//! Observability: Prometheus metrics, JSON logs, traces (OpenTelemetry), and the probe/metrics listener.

pub mod logging;
pub mod metrics;
pub mod probes;
pub mod spans;
mod stderr_spans;
pub mod traces;
