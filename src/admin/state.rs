//! What the admin API's handlers share: the config store, the metrics, the start time, readiness and the shared
//! cache's state (for the health report). `app.rs` builds it once; the probe listener gets only what it reads.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use crate::config::ConfigStore;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::refusals::RefusalLog;

/// Shared by the admin API's handlers.
pub struct AppState {
    pub store: Arc<ConfigStore>,
    pub metrics: Arc<Metrics>,
    pub started: Instant,
    /// True once every listener is up; false again while draining (shared with the probes' `/readyz`).
    pub ready: Arc<AtomicBool>,
    /// The shared cache's state, for the health report (the gateway context owns it).
    pub external_cache: Arc<crate::cache::ExternalCache>,
    /// The OAuth issuer's keys (provider `oauth`), for the health report (the gateway context owns them).
    pub jwks: Arc<crate::auth::jwks::Jwks>,
    /// The last discovery of each server against its pins (the gateway context fills it).
    pub pins: Arc<crate::config::pins::PinBook>,
    /// The audit log: every admin write is recorded (the gateway context configures it).
    pub audit: Arc<crate::audit::AuditLog>,
    /// The bound on the records of refused admin requests (`request_log.rs`).
    pub refusals: RefusalLog,
    /// The OAuth broker of users' own tokens: a `DELETE` of a user's tokens revokes them (the gateway context owns it).
    pub broker: Arc<crate::credentials::broker::Broker>,
    /// The quotas' counters and the usage figures (the gateway context owns them).
    pub meter: Arc<crate::meter::Meter>,
    /// The upstream processes, for each server's state on the console (the gateway context owns them).
    pub pool: Arc<crate::upstream::UpstreamPool>,
}
