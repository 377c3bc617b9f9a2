//! Prometheus metrics. One [`Metrics`] per process, shared by everything that counts; labels are of bounded
//! cardinality (never keys, user ids or free text).

use prometheus::{Encoder, IntCounterVec, Opts, Registry, TextEncoder};

/// The process's metrics and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    /// `mcpgw_config_reloads_total{result="ok"|"error"}`.
    pub config_reloads: IntCounterVec,
    /// `mcpgw_admin_requests_total{status}`: admin API answers by status class.
    pub admin_requests: IntCounterVec,
    /// `mcpgw_guardrail_blocks_total{stage="input"|"output", detector}`: blocked tool calls, by the detector that
    /// blocked them (`custom_keyword`, `gw`, `thirdparty_moderation`, `unavailable` for a provider that failed closed).
    pub guardrail_blocks: IntCounterVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let config_reloads = counter_vec(
            &registry,
            "mcpgw_config_reloads_total",
            "Config file reloads by result (error: the file failed validation and was not used)",
            &["result"],
        );
        let admin_requests =
            counter_vec(&registry, "mcpgw_admin_requests_total", "Admin API requests by status class", &["status"]);
        let guardrail_blocks = counter_vec(
            &registry,
            "mcpgw_guardrail_blocks_total",
            "Tool calls blocked by guardrails, by stage and detector",
            &["stage", "detector"],
        );
        // Both label values exist from the start, so a scrape shows zero rather than nothing.
        for result in ["ok", "error"] {
            config_reloads.with_label_values(&[result]);
        }
        for stage in ["input", "output"] {
            for detector in ["custom_keyword", "gw", "thirdparty_moderation", "unavailable"] {
                guardrail_blocks.with_label_values(&[stage, detector]);
            }
        }
        Metrics { registry, config_reloads, admin_requests, guardrail_blocks }
    }

    /// The metrics in Prometheus text format.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    // Names and labels are constants of this file; a failure here is a programming error caught by the unit test.
    let counter = IntCounterVec::new(Opts::new(name, help), labels).unwrap_or_else(|e| panic!("metric {name}: {e}"));
    let _ = registry.register(Box::new(counter.clone()));
    counter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_render_with_zeroes() {
        let m = Metrics::new();
        let text = m.render();
        assert!(text.contains("mcpgw_config_reloads_total{result=\"error\"} 0"), "{text}");
        m.config_reloads.with_label_values(&["ok"]).inc();
        assert!(m.render().contains("mcpgw_config_reloads_total{result=\"ok\"} 1"));
    }
}
