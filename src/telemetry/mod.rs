//! Observability: Prometheus metrics, JSON logs (and the bound on records of refused requests), traces
//! (OpenTelemetry), and the probe/metrics listener.

pub mod logging;
pub mod metrics;
pub mod probes;
pub mod refusals;
pub mod spans;
mod stderr_spans;
pub mod traces;
