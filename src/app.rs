//! The running service: loads the configuration, starts the watcher and the listeners, and drains on SIGTERM.
//!
//! Start-up order matters: the config is loaded and validated first (an invalid file stops the start with every
//! problem listed), then every listener is bound (a busy port stops the start before anything serves), and only then
//! does `/readyz` turn true. Shutdown runs the other way: readiness turns false, the admin listener stops accepting,
//! the gateway keeps serving the MCP sessions that exist (on new connections too) until they are closed and nothing
//! is in flight, or until the grace period ends; then the sessions and the upstream processes end, and the process
//! exits 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::admin::AppState;
use crate::config::defaults::{InitError, init_file};
use crate::config::{ConfigStore, LoadError, sync as config_sync, watch as config_watch};
use crate::gateway::{self, GatewayContext};
use crate::listener::{self, Front};
use crate::telemetry::logging::{self, LogHandle};
use crate::telemetry::metrics::Metrics;
use crate::{admin, signal, telemetry};

/// How MCP clients reach the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    #[value(alias = "streamable-http", alias = "streamable_http")]
    Http,
    Stdio,
}

/// What `serve` was asked to do.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub config_path: PathBuf,
    pub transport: Transport,
    pub gateway_addr: Option<SocketAddr>,
    pub admin_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    pub shutdown_grace: Duration,
    /// The async runtime's worker threads (logged when ready).
    pub worker_threads: usize,
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] LoadError),
    #[error("cannot create the default config: {0}")]
    Init(#[from] InitError),
    #[error("cannot listen on {addr} ({listener}): {source}")]
    Bind { listener: &'static str, addr: SocketAddr, source: std::io::Error },
    #[error("cannot watch the config file for changes: {0}")]
    Watch(#[from] notify::Error),
}

/// Default listener addresses (contract section 1).
pub const DEFAULT_GATEWAY_ADDR: &str = "0.0.0.0:8000";
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:8001";
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:9464";

fn default_addr(text: &str) -> Option<SocketAddr> {
    text.parse().ok()
}

/// Runs the service until SIGTERM or SIGINT.
pub async fn serve(opts: ServeOptions) -> Result<(), ServeError> {
    let path = &opts.config_path;
    if !path.exists() && std::fs::symlink_metadata(path).is_err() {
        let keys = init_file(path, false)?;
        eprintln!("No config file at {}; created one with new keys (shown once):", path.display());
        eprintln!("Admin API key: {}", keys.admin_key);
        eprintln!("Gateway API key: {}", keys.gateway_key);
    }
    let metrics = Arc::new(Metrics::new());
    let store = Arc::new(ConfigStore::open_serving(path.clone(), Arc::clone(&metrics))?);
    // Also the trace exporter, chosen here once: a change of `plugins.telemetry` needs a restart.
    let settings = &store.snapshot().settings;
    let log = logging::init(settings.log_level, settings.trace_export());
    follow_log_level(&store, log);

    match listener::raise_descriptor_limit() {
        Ok((before, now)) if before != now => tracing::info!(before, now, "descriptor limit raised"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the descriptor limit"),
    }
    // With the Redis store, the configuration is read from it before anything serves (the file when it cannot be
    // reached), then followed; the file is not watched.
    let following = CancellationToken::new();
    config_sync::follow(Arc::clone(&store), following.clone()).await;
    let ctx = GatewayContext::new(Arc::clone(&store));
    // Over HTTP every listener has a default address; over stdio only the listeners asked for are opened.
    let (gateway_addr, admin_addr, metrics_addr) = match opts.transport {
        Transport::Http => (
            opts.gateway_addr.or_else(|| default_addr(DEFAULT_GATEWAY_ADDR)),
            opts.admin_addr.or_else(|| default_addr(DEFAULT_ADMIN_ADDR)),
            opts.metrics_addr.or_else(|| default_addr(DEFAULT_METRICS_ADDR)),
        ),
        Transport::Stdio => (None, opts.admin_addr, opts.metrics_addr),
    };
    let state = Arc::new(AppState {
        store: Arc::clone(&store),
        metrics,
        started: Instant::now(),
        ready: Arc::new(AtomicBool::new(false)),
        external_cache: Arc::clone(&ctx.external_cache),
        jwks: Arc::clone(&ctx.jwks),
        pins: Arc::clone(&ctx.pins),
        audit: Arc::clone(&ctx.audit),
        refusals: telemetry::refusals::RefusalLog::new("admin"),
        broker: Arc::clone(&ctx.broker),
        meter: Arc::clone(&ctx.meter),
        pool: Arc::clone(&ctx.pool),
    });

    let sessions = CancellationToken::new();
    let mut listeners: Vec<(&'static str, TcpListener, Router)> = Vec::new();
    let gateway_router = gateway_addr.map(|_| gateway::http::router(Arc::clone(&ctx), sessions.clone()));
    if let (Some(addr), Some(router)) = (gateway_addr, &gateway_router) {
        listeners.push(("gateway", bind("gateway", addr).await?, router.clone()));
    }
    if let Some(addr) = admin_addr {
        // The console (`/ui/`) lives on the admin listener and calls the admin API's router in-process (and the
        // gateway's, for its playground).
        let api = admin::router(Arc::clone(&state));
        let router = crate::console::router(Arc::clone(&state), api.clone(), gateway_router.clone()).merge(api);
        listeners.push(("admin", bind("admin", addr).await?, router));
    }
    if let Some(addr) = metrics_addr {
        listeners.push((
            "metrics",
            bind("metrics", addr).await?,
            telemetry::probes::router(telemetry::probes::ProbeState {
                ready: Arc::clone(&state.ready),
                metrics: Arc::clone(&state.metrics),
            }),
        ));
    }
    let _watcher = match store.redis() {
        None => Some(config_watch::watch(Arc::clone(&store))?),
        Some(_) => None,
    };
    signal::reload_on_hangup(Arc::clone(&store));

    // The admin listener stops at the start of the drain; the gateway's at its end (sessions that exist are served
    // until then, on new connections too); the probes and metrics last (readiness answers 503 through the drain, and
    // the last metrics can be scraped).
    let (stop_admin_tx, stop_admin_rx) = watch::channel(false);
    let (stop_gateway_tx, stop_gateway_rx) = watch::channel(false);
    let (stop_probes_tx, stop_probes_rx) = watch::channel(false);
    let mut servers = JoinSet::new();
    let mut probes = JoinSet::new();
    for (name, listener, router) in listeners {
        let addr = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(listener = name, addr = %addr, "listening");
        let (stop, set) = match name {
            "metrics" => (stop_probes_rx.clone(), &mut probes),
            "gateway" => (stop_gateway_rx.clone(), &mut servers),
            _ => (stop_admin_rx.clone(), &mut servers),
        };
        let front = match name {
            "metrics" => Front::Metrics,
            "gateway" => Front::Gateway,
            _ => Front::Admin,
        };
        set.spawn(listener::listen(front, listener, router, Arc::clone(&store), stop));
    }
    state.ready.store(true, Ordering::SeqCst);
    tracing::info!(
        config_path = %store.path().display(),
        version = crate::VERSION,
        transport = ?opts.transport,
        worker_threads = opts.worker_threads,
        "mcpgw ready"
    );

    let reason = match opts.transport {
        Transport::Http => signal::terminated().await,
        Transport::Stdio => {
            let mut signalled = None;
            let on_signal = async { signalled = Some(signal::terminated().await) };
            let ended = gateway::stdio::serve(Arc::clone(&ctx), on_signal, opts.shutdown_grace);
            if let Err(e) = ended.await {
                tracing::error!(error = %e, "stdio front failed");
            }
            signalled.unwrap_or("stdin closed")
        }
    };
    let stops = Stops { admin: stop_admin_tx, gateway: stop_gateway_tx };
    drain(&state, &ctx, reason, opts.shutdown_grace, stops, sessions, servers).await;
    let _ = stop_probes_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(2), async { while probes.join_next().await.is_some() {} }).await;
    following.cancel();
    tracing::info!("stopped");
    Ok(())
}

/// What ends the listeners' accepting (see [`listen`]).
struct Stops {
    admin: watch::Sender<bool>,
    gateway: watch::Sender<bool>,
}

/// The drain (contract section 7): readiness off and the admin listener closed at once; the gateway goes on accepting
/// and serves the MCP sessions that exist, while new sessions are refused (see `gateway/middleware/drain.rs`). It ends
/// when nothing is in flight and no session is open any more (closed by their clients, or idle), or when `grace` is
/// over. Then the gateway listener stops, the MCP sessions and streams end, and every upstream process ends with its
/// process group. The probe listener is stopped after this.
async fn drain(
    state: &AppState,
    ctx: &GatewayContext,
    reason: &str,
    grace: Duration,
    stops: Stops,
    sessions: CancellationToken,
    mut servers: JoinSet<()>,
) {
    tracing::info!(
        reason,
        grace_seconds = grace.as_secs(),
        in_flight = ctx.in_flight.count(),
        sessions = ctx.sessions.len(),
        "draining"
    );
    state.ready.store(false, Ordering::SeqCst);
    ctx.draining.store(true, Ordering::SeqCst);
    ctx.drain_begun.cancel();
    let _ = stops.admin.send(true);
    let settled = async {
        // Either may change while waiting for the other (a session's last call ends after its DELETE, say): look again.
        while ctx.in_flight.count() > 0 || !ctx.sessions.is_empty() {
            ctx.in_flight.wait_idle().await;
            ctx.sessions.wait_empty().await;
        }
    };
    if tokio::time::timeout(grace, settled).await.is_err() {
        tracing::warn!(
            in_flight = ctx.in_flight.count(),
            sessions = ctx.sessions.len(),
            "grace period over; ending the sessions and the calls still running"
        );
    }
    let _ = stops.gateway.send(true);
    sessions.cancel();
    let closed =
        tokio::time::timeout(Duration::from_secs(2), async { while servers.join_next().await.is_some() {} }).await;
    if closed.is_err() {
        servers.abort_all();
    }
    ctx.shutdown().await;
    telemetry::traces::shutdown(Duration::from_secs(2)).await;
}

async fn bind(listener: &'static str, addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr).await.map_err(|source| ServeError::Bind { listener, addr, source })
}

/// Applies `gw_log_level` again after every reload (and warns when `plugins.telemetry` changed).
fn follow_log_level(store: &ConfigStore, log: LogHandle) {
    let mut changes = store.subscribe();
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            let snapshot = changes.borrow_and_update().clone();
            log.apply(snapshot.settings.log_level, snapshot.settings.trace_export());
        }
    });
}
