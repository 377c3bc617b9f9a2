//! Observability: Prometheus metrics, JSON logs, and the probe/metrics listener.

pub mod logging;
pub mod metrics;
pub mod probes;
