//! The connection to the shared (external) cache: one Redis server that every gateway instance uses.
//!
//! [`ExternalCache`] follows the configuration: [`ExternalCache::configure`] runs for every snapshot, and when
//! `gw_mcp_use_external_cache`, host, port, db or password change, the Redis client is rebuilt (a rename of nothing
//! else, such as `cache_timeout`, only changes the bound). The client is redis-rs's `ConnectionManager`, created
//! lazily, so a Redis that is down at start never delays the gateway.
//!
//! Every operation is bounded by `cache_timeout`. A failed or timed-out operation counts an error, marks Redis
//! unreachable, drops the connection and makes the next operations skip Redis for [`BACKOFF`], so a Redis that is down
//! costs callers a fast "unavailable" instead of a connect timeout each; callers then use their local cache. A probe
//! task PINGs Redis every second while the external cache is enabled, so reachability (the health report) follows
//! Redis even without traffic, and the first successful operation or probe brings the shared cache back. The warning
//! is logged when the state changes (reachable to unreachable and back), never per call. The password never leaves
//! this module: it is not logged, not shown by `Debug`, not reported.

use std::future::Future;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use redis::RedisResult;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::Serialize;

use crate::config::redis_store::connection_info;
use crate::config::settings::Settings;

/// How long Redis is skipped after a failure before it is tried again.
pub const BACKOFF: Duration = Duration::from_secs(1);
/// How often the probe task PINGs Redis.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

const UNKNOWN: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

/// Why an operation on the shared cache did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExternalError {
    #[error("the external cache is not enabled")]
    Disabled,
    #[error("the external cache is unreachable (backing off)")]
    BackingOff,
    #[error("the external cache did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the external cache failed: {0}")]
    Failed(String),
}

/// Where Redis is. `Debug` leaves the password out.
#[derive(Clone, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
    db: u32,
    password: Option<String>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "redis at {}:{} db {}", self.host, self.port, self.db)
    }
}

/// What a connection is for: which settings switch it on, and how its log records name it.
#[derive(Debug, Clone, Copy)]
pub struct Role {
    /// How log records name it: `external cache`.
    pub name: &'static str,
    /// What callers do while Redis is down, as the warning says it.
    pub fallback: &'static str,
    /// Whether the settings want this connection.
    pub wanted: fn(&Settings) -> bool,
}

/// The shared cache of `gw_mcp_use_external_cache`.
pub const SHARED_CACHE: Role = Role {
    name: "external cache",
    fallback: "using the local cache until it answers again",
    wanted: |settings| settings.use_external_cache,
};

impl Target {
    fn from_settings(settings: &Settings, role: &Role) -> Option<Target> {
        (role.wanted)(settings).then(|| Target {
            host: settings.cache_host.clone(),
            port: settings.cache_port,
            db: settings.cache_db,
            password: settings.cache_password.clone().filter(|p| !p.is_empty()),
        })
    }

    /// A client whose connects are bounded by `connect_timeout` (`connectivity_timeout`) and answers by `timeout`.
    fn connect_lazily(&self, connect_timeout: Duration, timeout: Duration) -> RedisResult<ConnectionManager> {
        let info = connection_info(&self.host, self.port, self.db, self.password.as_deref())?;
        let client = redis::Client::open(info)?;
        // One attempt per use: the back-off and the retry are ours (see the module documentation).
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(0)
            .set_connection_timeout(Some(connect_timeout.min(timeout)))
            .set_response_timeout(Some(timeout));
        ConnectionManager::new_lazy_with_config(client, config)
    }
}

/// What `gw_get_cache_status` and the health report say about the shared cache (never the password).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ExternalReport {
    pub reachable: bool,
    /// False until the first operation or probe has answered or failed.
    #[serde(skip)]
    pub known: bool,
    pub host: String,
    pub port: u16,
    pub db: u32,
    pub errors: u64,
}

impl ExternalReport {
    /// The reason the health report gives while Redis is unreachable, if it is.
    pub fn degraded_reason(&self) -> Option<String> {
        (self.known && !self.reachable)
            .then(|| format!("external cache (redis at {}:{}) unreachable", self.host, self.port))
    }
}

struct State {
    target: Option<Target>,
    /// Bumped when the target changes, so the outcome of an operation on an old client is ignored.
    generation: u64,
    manager: Option<ConnectionManager>,
    skip_until: Option<Instant>,
    timeout: Duration,
    connect_timeout: Duration,
}

/// See the module documentation.
pub struct ExternalCache {
    role: Role,
    state: Mutex<State>,
    health: AtomicU8,
    errors: AtomicU64,
}

impl ExternalCache {
    /// A shared cache configured from `settings`, with its probe task (needs a Tokio runtime).
    pub fn new(settings: &Settings) -> Arc<ExternalCache> {
        ExternalCache::with_role(settings, SHARED_CACHE)
    }

    /// A connection to the same Redis for another purpose (`role`), with its own probe task.
    pub fn with_role(settings: &Settings, role: Role) -> Arc<ExternalCache> {
        let cache = Arc::new(ExternalCache {
            role,
            state: Mutex::new(State {
                target: None,
                generation: 0,
                manager: None,
                skip_until: None,
                timeout: settings.timeouts.cache,
                connect_timeout: settings.timeouts.connectivity,
            }),
            health: AtomicU8::new(UNKNOWN),
            errors: AtomicU64::new(0),
        });
        cache.configure(settings);
        probe_forever(Arc::downgrade(&cache));
        cache
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows a new snapshot: a changed target (or the switch) rebuilds the client.
    pub fn configure(&self, settings: &Settings) {
        let target = Target::from_settings(settings, &self.role);
        let mut state = self.state();
        state.timeout = settings.timeouts.cache;
        state.connect_timeout = settings.timeouts.connectivity;
        if state.target == target {
            return;
        }
        if let Some(t) = &target {
            tracing::info!(host = %t.host, port = t.port, db = t.db, "{} (redis) configured", self.role.name);
        }
        state.target = target;
        state.generation += 1;
        state.manager = None;
        state.skip_until = None;
        self.health.store(UNKNOWN, Ordering::Relaxed);
    }

    /// The health report's reason while this connection's Redis is known to be unreachable: its role, where, and what
    /// the gateway does meanwhile.
    pub fn degraded_reason(&self) -> Option<String> {
        let report = self.report()?;
        (report.known && !report.reachable).then(|| {
            format!("{} (redis at {}:{}) unreachable; {}", self.role.name, report.host, report.port, self.role.fallback)
        })
    }

    /// Whether the external cache is switched on in the current configuration.
    pub fn enabled(&self) -> bool {
        self.state().target.is_some()
    }

    /// Failed operations (timeouts, connection failures, errors from Redis, failed probes) since start: for metrics.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// The report for status and health; `None` when the external cache is off.
    pub fn report(&self) -> Option<ExternalReport> {
        let state = self.state();
        let target = state.target.as_ref()?;
        let health = self.health.load(Ordering::Relaxed);
        Some(ExternalReport {
            reachable: health == UP,
            known: health != UNKNOWN,
            host: target.host.clone(),
            port: target.port,
            db: target.db,
            errors: self.errors(),
        })
    }

    /// A client for the current target, unless the cache is off or backing off after a failure (`probe` ignores the
    /// back-off).
    fn connection(&self, probe: bool) -> Result<(ConnectionManager, u64, Duration), ExternalError> {
        let mut state = self.state();
        let Some(target) = state.target.clone() else { return Err(ExternalError::Disabled) };
        if !probe && state.skip_until.is_some_and(|until| Instant::now() < until) {
            return Err(ExternalError::BackingOff);
        }
        let manager = match &state.manager {
            Some(manager) => manager.clone(),
            None => {
                let manager = target
                    .connect_lazily(state.connect_timeout, state.timeout)
                    .map_err(|e| ExternalError::Failed(e.to_string()))?;
                state.manager = Some(manager.clone());
                manager
            }
        };
        Ok((manager, state.generation, state.timeout))
    }

    /// Runs one Redis operation under `cache_timeout`, recording its outcome.
    pub async fn run<T, F, Fut>(&self, op: F) -> Result<T, ExternalError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        self.run_inner(false, op).await
    }

    async fn run_inner<T, F, Fut>(&self, probe: bool, op: F) -> Result<T, ExternalError>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (manager, generation, limit) = self.connection(probe)?;
        match tokio::time::timeout(limit, op(manager)).await {
            Ok(Ok(value)) => {
                self.succeeded(generation);
                Ok(value)
            }
            Ok(Err(e)) => {
                let error = ExternalError::Failed(e.to_string());
                self.failed(generation, &error);
                Err(error)
            }
            Err(_) => {
                let error = ExternalError::Timeout(limit);
                self.failed(generation, &error);
                Err(error)
            }
        }
    }

    /// PING; the probe task calls it every second.
    pub async fn ping(&self) -> Result<(), ExternalError> {
        self.run_inner(true, |mut c| async move { redis::cmd("PING").query_async::<String>(&mut c).await.map(drop) })
            .await
    }

    fn succeeded(&self, generation: u64) {
        let mut state = self.state();
        if state.generation != generation {
            return;
        }
        state.skip_until = None;
        if self.health.swap(UP, Ordering::Relaxed) == DOWN
            && let Some(t) = &state.target
        {
            tracing::info!(host = %t.host, port = t.port, "{} (redis) reachable again", self.role.name);
        }
    }

    /// Counts the error, marks Redis down, drops the client (a wrong password or a lost connection leaves nothing
    /// worth keeping; the next attempt connects afresh) and starts the back-off. Our keys are namespaced, so an error
    /// is about the server or the connection, not about one command.
    fn failed(&self, generation: u64, error: &ExternalError) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        if state.generation != generation {
            return;
        }
        state.manager = None;
        state.skip_until = Some(Instant::now() + BACKOFF);
        if self.health.swap(DOWN, Ordering::Relaxed) != DOWN
            && let Some(t) = &state.target
        {
            tracing::warn!(
                host = %t.host, port = t.port, error = %error,
                "{} (redis) unreachable; {}", self.role.name, self.role.fallback
            );
        }
    }
}

/// PINGs Redis every [`PROBE_INTERVAL`] while the external cache is enabled; ends when the cache is dropped.
fn probe_forever(cache: Weak<ExternalCache>) {
    tokio::spawn(async move {
        loop {
            let Some(strong) = cache.upgrade() else { break };
            if strong.enabled() {
                let _ = strong.ping().await;
            }
            drop(strong);
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
    });
}
