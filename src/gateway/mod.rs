//! The MCP gateway: what clients reach on port 8000 (`/mcp/`) or over stdio.
//!
//! - [`http`] builds the streamable HTTP front once, outermost first: the layers of [`middleware`] (request metrics,
//!   header size, `Host`/`Origin`, admission, JSON-RPC guard, sessions, drain), then [`fast_path`] for a plain
//!   `tools/call`, then rmcp's protocol layer and [`handler`].
//! - [`stdio`] serves the same [`handler`] on stdin/stdout; the handler runs the admission step itself.
//! - [`tools`] holds the seven `gw_*` tools; `gw_secure_call_tools` runs each upstream call through the per-call stack
//!   (guardrails around the pooled call under its timeout, [`middleware::guardrails`]).
//! - Every answer leaves in the one envelope of [`envelope`]; every refusal is a [`crate::error::GatewayError`].
//! - [`GatewayContext`] is what both fronts share: the config store, the upstream pool, the caches, sessions, the
//!   drain's state.

pub mod boundary;
pub mod capabilities;
pub mod envelope;
pub mod exposure;
pub mod fast_path;
pub mod handler;
pub mod http;
pub mod listen;
pub mod middleware;
pub mod notify;
pub mod oauth_routes;
pub mod session_id;
pub mod sessions;
pub mod stdio;
pub mod tools;
pub mod transparent;
pub mod user_secrets;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use serde_json::Value;

use crate::auth::{AuthFailure, Credentials, GatewayConfigCache, Identity, RemoteAuthCache};
use crate::cache::{ExternalCache, TtlCache};
use crate::config::model::ServerEntry;
use crate::config::{ConfigStore, Snapshot};
use crate::telemetry::metrics::{Metrics, catch_up};
use crate::timeouts::TimeoutsByTenant;
use crate::upstream::relay::ServerEvent;
use crate::upstream::{PoolKey, PoolSettings, ServerSpec, UpstreamPool};
use sessions::SessionRegistry;

/// Tools found by live discovery, with what the server said about itself.
#[derive(Debug)]
pub struct CachedTools {
    /// Shared, so a cache hit costs a pointer copy rather than a copy of every tool's schema.
    pub tools: Arc<Vec<Value>>,
    pub server_metadata: Value,
    /// The server entry they were discovered with; a changed entry drops them.
    pub entry: ServerEntry,
    /// The generation of the last snapshot whose entry was found the same as `entry` (0: none yet): under that
    /// snapshot a hit is not compared again (`tools/discovery.rs`, `same_entry`).
    pub same_in: AtomicU64,
    /// The review's findings and the tools it quarantined (left out of `tools`), contract section 11.
    pub findings: Arc<Vec<crate::guardrails::tool_scan::Finding>>,
    pub quarantined: Arc<Vec<String>>,
}

/// Everything the gateway's tools need, shared by both fronts.
pub struct GatewayContext {
    pub store: Arc<ConfigStore>,
    pub pool: Arc<UpstreamPool>,
    pub tool_cache: TtlCache<PoolKey, CachedTools>,
    pub config_cache: GatewayConfigCache,
    /// The shared cache (Redis) when `gw_mcp_use_external_cache` is on; it follows the configuration itself.
    pub external_cache: Arc<ExternalCache>,
    pub timeouts: TimeoutsByTenant,
    pub sessions: SessionRegistry,
    /// The remote authentication client of the current snapshot (auth provider `gw`).
    pub remote_auth: RemoteAuthCache,
    /// The guardrail provider of the current snapshot.
    pub guardrails: crate::guardrails::provider::ProviderCache,
    /// Upstream OAuth tokens per (server, MCP config, project).
    pub oauth: Arc<crate::upstream::oauth::TokenManager>,
    /// The OAuth issuer's signing keys, for provider `oauth` (clients' tokens).
    pub jwks: Arc<crate::auth::jwks::Jwks>,
    /// What the last discovery of each server found against its pins, and pins kept in memory (contract section 11).
    pub pins: Arc<crate::config::pins::PinBook>,
    /// The audit log (contract section 11), following `audit_log` in the configuration.
    pub audit: Arc<crate::audit::AuditLog>,
    /// Requests and tool calls being answered now; the drain waits for them.
    pub in_flight: InFlight,
    /// Per-key rate limits (`rate_limits`).
    pub rate_limits: middleware::rate_limit::RateLimits,
    /// Per-key requests in flight and bytes of answers not yet taken by the client (`limits`, contract 14).
    pub key_budgets: Arc<middleware::budgets::KeyBudgets>,
    /// Set when the drain starts: new sessions, and requests outside a session once nothing is in flight, are refused
    /// with 503 `SHUTTING_DOWN` (see [`crate::gateway::middleware::drain`]).
    pub draining: std::sync::atomic::AtomicBool,
    /// The bound on the records of refused requests (at most 10 a second, the rest counted).
    pub refusals: crate::telemetry::refusals::RefusalLog,
    /// Transparent calls answered on their own HTTP stream, and the questions put to their clients.
    pub relays: transparent::stream::RelayRegistry,
    /// Transparent calls of stateless clients waiting for their answers (multi round trips).
    pub rounds: transparent::rounds::PendingCalls,
    /// The tasks upstreams run for the clients (contract 15), per key.
    pub tasks: transparent::tasks::TaskRecords,
    /// The open 2026-07-28 `subscriptions/listen` streams (contract 15).
    pub listeners: notify::listeners::Listeners,
    /// Who holds each resource subscription of a shared upstream process (ended upstream with its last holder).
    pub subscriptions: transparent::subscriptions::Subscriptions,
    /// At most one relayed list change per server and list a second.
    pub coalesce: notify::coalesce::Coalescer,
    /// Servers left out of a listing (not ready within `discovery_timeout`), waited for in the background.
    pub late: transparent::late::LateServers,
    /// Cancelled when the drain begins: listen streams end then (their clients reconnect elsewhere).
    pub drain_begun: tokio_util::sync::CancellationToken,
    /// The context itself, for work that outlives the request that started it (a late server's wait).
    pub me: std::sync::Weak<GatewayContext>,
    /// Where each user's own values for `per_user` servers come from (contract 16): the vault.
    pub user_secrets: Arc<dyn user_secrets::UserSecrets>,
    /// Each user's own tokens for `per_user` servers of kinds `oauth` and `token_exchange` (contract 16).
    pub broker: Arc<crate::credentials::broker::Broker>,
    /// The quotas' counters and the usage figures (contract 17), in Redis when the gateway has one.
    pub meter: Arc<crate::meter::Meter>,
    /// Each cached tool list as a transparent `tools/list` shows it, written once (transparent/tool_list.rs).
    pub shown_tools: transparent::tool_list::ShownTools,
}

/// Counts work in progress so a drain can wait for it to finish.
#[derive(Default)]
pub struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    idle: tokio::sync::Notify,
}

/// Held while one tool call runs.
pub struct InFlightGuard<'a>(&'a InFlight);

/// Like [`InFlightGuard`], owned, so it can live in a response body until the answer is sent.
pub struct OwnedInFlightGuard(Arc<GatewayContext>);

impl OwnedInFlightGuard {
    /// Marks the start of a request whose answer is still to be sent.
    pub fn enter(ctx: &Arc<GatewayContext>) -> OwnedInFlightGuard {
        std::mem::forget(ctx.in_flight.enter());
        OwnedInFlightGuard(Arc::clone(ctx))
    }
}

impl Drop for OwnedInFlightGuard {
    fn drop(&mut self) {
        drop(InFlightGuard(&self.0.in_flight));
    }
}

impl InFlight {
    /// Marks the start of a call; the end is when the guard drops.
    pub fn enter(&self) -> InFlightGuard<'_> {
        self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InFlightGuard(self)
    }

    /// Calls running now.
    pub fn count(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until no call runs.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.count() == 0 {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The audit log follows `audit_log` of `snapshot`: its file (relative to the configuration's folder) and its key.
fn configure_audit(audit: &crate::audit::AuditLog, snapshot: &Snapshot, config_path: &std::path::Path) {
    let settings = &snapshot.settings;
    audit.configure(settings.audit_path_for(config_path).as_deref(), settings.audit_key.as_ref().map(|k| k.0.as_str()));
}

fn pool_settings(snapshot: &Snapshot) -> PoolSettings {
    PoolSettings {
        max_processes_per_server: snapshot.settings.max_processes_per_server as usize,
        max_processes_per_user_server: snapshot.settings.max_processes_per_user_server as usize,
        idle_timeout: snapshot.settings.idle_timeout,
        start_timeout: snapshot.settings.start_timeout,
        connect_timeout: snapshot.settings.timeouts.connectivity,
        max_processes_per_key: snapshot.settings.limits.max_processes_per_key,
        idle_process_timeout: snapshot.settings.limits.idle_process,
    }
}

impl GatewayContext {
    /// A context over `store`, following its reloads; users' values for `per_user` servers come from the vault.
    pub fn new(store: Arc<ConfigStore>) -> Arc<GatewayContext> {
        GatewayContext::with_user_secrets(store, Arc::new(user_secrets::StoredSecrets))
    }

    /// [`GatewayContext::new`] with users' values from `secrets` (an embedding or a test gives its own).
    pub fn with_user_secrets(
        store: Arc<ConfigStore>,
        secrets: Arc<dyn user_secrets::UserSecrets>,
    ) -> Arc<GatewayContext> {
        let snapshot = store.snapshot();
        let ctx = Arc::new_cyclic(|me| GatewayContext {
            pool: UpstreamPool::new(pool_settings(&snapshot)),
            tool_cache: TtlCache::new(snapshot.settings.tool_cache_expiry),
            config_cache: GatewayConfigCache::new(snapshot.settings.gateway_cache_expiry),
            external_cache: ExternalCache::new(&snapshot.settings),
            meter: crate::meter::Meter::new(&snapshot.settings),
            shown_tools: Default::default(),
            timeouts: TimeoutsByTenant::default(),
            sessions: SessionRegistry::default(),
            remote_auth: Default::default(),
            guardrails: Default::default(),
            oauth: Arc::new(crate::upstream::oauth::TokenManager::new(snapshot.settings.timeouts.auth)),
            jwks: crate::auth::jwks::Jwks::new(),
            pins: Arc::default(),
            audit: Arc::default(),
            in_flight: InFlight::default(),
            rate_limits: Default::default(),
            key_budgets: Arc::default(),
            draining: Default::default(),
            refusals: crate::telemetry::refusals::RefusalLog::new("gateway"),
            relays: Default::default(),
            rounds: Default::default(),
            tasks: Default::default(),
            listeners: Default::default(),
            subscriptions: Default::default(),
            coalesce: Default::default(),
            late: Default::default(),
            drain_begun: Default::default(),
            me: me.clone(),
            user_secrets: secrets,
            broker: Arc::new(crate::credentials::broker::Broker::new(
                snapshot.settings.timeouts.auth,
                Arc::clone(store.metrics()),
            )),
            store,
        });
        ctx.pool.set_max_calls_per_process(snapshot.settings.max_calls_per_process as usize);
        ctx.pool.set_max_message_bytes(snapshot.settings.limits.max_tool_result_bytes);
        // A session's `per_session` upstream processes end with it (closed by the client, idled out).
        // Its subscriptions of shared processes are let go; those nobody else holds end upstream.
        let pool = Arc::downgrade(&ctx.pool);
        let context = Arc::downgrade(&ctx);
        ctx.sessions.on_end(move |session| {
            if let Some(pool) = pool.upgrade() {
                pool.end_session(session);
            }
            let Some(ctx) = context.upgrade() else { return };
            let holder = transparent::subscriptions::Holder::Session(session.to_string());
            let released = ctx.subscriptions.release_all(&holder);
            if let (false, Ok(runtime)) = (released.is_empty(), tokio::runtime::Handle::try_current()) {
                runtime.spawn(async move { transparent::resources::unsubscribe_released(&ctx, released).await });
            }
        });
        ctx.prefetch_keys(&snapshot);
        configure_audit(&ctx.audit, &snapshot, ctx.store.path());
        ctx.keep_audit_key(&snapshot);
        // Every reload of the file is audited, the failed ones too (the last valid configuration keeps serving). The
        // log follows the new configuration first, so a reload that turns it on is its first record.
        let (audit, store) = (Arc::clone(&ctx.audit), Arc::downgrade(&ctx.store));
        ctx.store.on_reload(move |used, digest| {
            if let (true, Some(store)) = (used, store.upgrade()) {
                configure_audit(&audit, &store.snapshot(), store.path());
            }
            audit.record_blocking(crate::audit::Event {
                event: "config_reload",
                outcome: Some(if used { "ok" } else { "error" }),
                config_revision: digest.as_ref().map(crate::audit::revision),
                ..Default::default()
            });
        });
        let weak = Arc::downgrade(&ctx);
        ctx.pool.on_events(Arc::new(move |key, event| {
            if let Some(ctx) = weak.upgrade() {
                match event {
                    ServerEvent::ListChanged(list) => notify::relay::upstream_list_changed(&ctx, key, list),
                    ServerEvent::ResourceUpdated(params) => notify::relay::resource_updated(&ctx, key, params),
                }
            }
        }));
        ctx.prestart(&snapshot);
        ctx.follow_config();
        let weak = Arc::downgrade(&ctx);
        ctx.store.metrics().on_scrape(move |metrics| {
            if let Some(ctx) = weak.upgrade() {
                ctx.report(metrics);
            }
        });
        ctx
    }

    /// Who a call to `spec`'s server is made for: `identity`'s key and `session`, and, for a `per_session` server (whose
    /// process serves only this session), what the session's client declared it can relay (contract 15).
    pub fn caller<'a>(
        &self,
        identity: &'a crate::auth::Identity,
        session: Option<&'a str>,
        spec: &crate::upstream::ServerSpec,
    ) -> crate::upstream::Caller<'a> {
        let caller = crate::upstream::Caller::new(&identity.key_digest, session);
        match session {
            Some(session) if spec.per_session => caller.declaring(self.sessions.declared(session)),
            _ => caller,
        }
    }

    /// Copies the pool's and the caches' own counts into the Prometheus metrics (before a scrape).
    fn report(&self, metrics: &Metrics) {
        let pool = self.pool.stats();
        metrics.upstream_processes.set(i64::try_from(pool.processes).unwrap_or(i64::MAX));
        for (transport, open) in crate::upstream::TRANSPORTS.iter().zip(pool.connections) {
            metrics.upstream_connections.with_label_values(&[transport]).set(i64::try_from(open).unwrap_or(i64::MAX));
        }
        metrics.sessions.set(i64::try_from(self.sessions.len()).unwrap_or(i64::MAX));
        metrics.sessions_dormant.set(i64::try_from(self.sessions.dormant()).unwrap_or(i64::MAX));
        metrics.session_streams.set(i64::try_from(self.sessions.streams()).unwrap_or(i64::MAX));
        catch_up(&metrics.upstream_restarts, pool.restarts);
        catch_up(&metrics.upstream_starts, pool.started);
        catch_up(&metrics.upstream_start_failures, pool.start_failures);
        catch_up(&metrics.cache_errors.with_label_values(&["external"]), self.external_cache.errors());
        for (cache, stats) in [("tools", self.tool_cache.stats()), ("gateway_config", self.config_cache.stats())] {
            catch_up(&metrics.cache_hits.with_label_values(&[cache]), stats.hits);
            catch_up(&metrics.cache_misses.with_label_values(&[cache]), stats.misses);
        }
    }

    /// Applies every new snapshot: settings, caches, and retiring upstream processes whose server changed.
    fn follow_config(self: &Arc<Self>) {
        let mut changes = self.store.subscribe();
        let weak = Arc::downgrade(self);
        let housekeeping = weak.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(60));
            every.tick().await;
            loop {
                every.tick().await;
                let Some(ctx) = housekeeping.upgrade() else { break };
                ctx.rate_limits.shrink();
            }
        });
        // The snapshot before each swap, to tell open clients what the swap changed for them.
        let mut previous = changes.borrow_and_update().clone();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                let snapshot = changes.borrow_and_update().clone();
                let Some(ctx) = weak.upgrade() else { break };
                ctx.apply(&snapshot);
                notify::relay::reload(&ctx, &previous, &snapshot);
                previous = snapshot;
            }
        });
    }

    fn apply(&self, snapshot: &Snapshot) {
        let settings = &snapshot.settings;
        self.tool_cache.set_lifetime(settings.tool_cache_expiry);
        self.config_cache.set_lifetime(settings.gateway_cache_expiry);
        self.config_cache.clear();
        self.external_cache.configure(settings);
        self.meter.configure(settings);
        let live = live_servers(snapshot);
        self.tool_cache.remove_where(|key, cached| {
            server_entry(snapshot, &key.mcp_config_id, &key.server_name)
                .is_none_or(|entry| !entry.same_but_offer_pins(&cached.entry))
        });
        self.pool.set_settings(pool_settings(snapshot));
        self.pool.set_max_calls_per_process(settings.max_calls_per_process as usize);
        self.pool.set_max_message_bytes(settings.limits.max_tool_result_bytes);
        self.pool.retain(&live);
        self.prestart(snapshot);
        self.prefetch_keys(snapshot);
        configure_audit(&self.audit, snapshot, self.store.path());
        self.keep_audit_key(snapshot);
    }

    /// With the audit log on and no `audit_log.hmac_key` in the configuration (a file older than the setting), writes
    /// the key the log uses now (the process's own) into it, as a first discovery writes pins: the digests then stay
    /// comparable across restarts. When the file cannot be written the key stays in memory, and the log says so.
    fn keep_audit_key(&self, snapshot: &Snapshot) {
        let settings = &snapshot.settings;
        if settings.audit_log.is_none() || settings.audit_key.is_some() {
            return;
        }
        let Some(key) = self.audit.own_key().map(str::to_string) else { return };
        let store = Arc::clone(&self.store);
        // Off the reload path (the write causes a reload of its own), on a thread that may block on the file.
        tokio::task::spawn_blocking(move || {
            let written = store.update(move |file, _| -> Result<bool, crate::config::WriteError> {
                let audit = file.common_mcp_gateway_config.as_mut().and_then(|common| common.audit_log.as_mut());
                match audit {
                    Some(audit) if audit.hmac_key.is_none() => {
                        audit.hmac_key = Some(key);
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            });
            match written {
                Ok(true) => tracing::info!("audit_log.hmac_key generated and written to the configuration"),
                Ok(false) => {}
                Err(error) => tracing::warn!(%error,
                    "audit_log.hmac_key is kept in memory only (the configuration could not be written): \
                     args_hmac values compare only within this process; set audit_log.hmac_key in the file"),
            }
        });
    }

    /// Under the `oauth` provider, fetches the issuer's keys now (at start and after each reload), so that the health
    /// report knows at once whether they can be fetched and the first client does not wait for them.
    fn prefetch_keys(&self, snapshot: &Snapshot) {
        let Some(config) = snapshot.settings.client_oauth.clone() else { return };
        let (jwks, timeout) = (Arc::clone(&self.jwks), snapshot.settings.timeouts.auth);
        tokio::spawn(async move { jwks.prefetch(&config, timeout).await });
    }

    /// With `upstream_pool.prestart`, starts the first process of each server that is new or changed in `snapshot`.
    /// Servers with `oauth_config` are left out (their process needs a caller's token), as are `per_session` and
    /// `per_user` ones.
    fn prestart(&self, snapshot: &Snapshot) {
        let servers = snapshot.file.mcp_configs.iter().flat_map(|(config_id, config)| {
            let prestarted = |entry: &&ServerEntry| entry.oauth_config.is_none() && !entry.is_per_user();
            config.mcp_config.iter().filter(prestarted).map(|entry| {
                (PoolKey::new(config_id.clone(), entry.server_name.clone()), ServerSpec::from_entry(entry))
            })
        });
        self.pool.prestart_changed(servers.collect(), snapshot.settings.prestart);
    }

    /// Resolves credentials against `snapshot` with the configured authentication provider.
    pub async fn authenticate(
        &self,
        snapshot: &Arc<Snapshot>,
        creds: &Credentials,
    ) -> Result<Arc<Identity>, AuthFailure> {
        let (cache, remote, external) = (&self.config_cache, &self.remote_auth, &self.external_cache);
        crate::auth::authenticate(snapshot, creds, cache, remote, external, &self.jwks).await
    }

    /// Ends every upstream process.
    pub async fn shutdown(&self) {
        self.pool.shutdown().await;
    }
}

/// The server entry `server` of configuration `config_id`.
pub fn server_entry<'a>(snapshot: &'a Snapshot, config_id: &str, server: &str) -> Option<&'a ServerEntry> {
    snapshot.file.mcp_configs.get(config_id)?.mcp_config.iter().find(|s| s.server_name == server)
}

/// Every (config, server) of a snapshot with how to start it.
pub fn live_servers(snapshot: &Snapshot) -> HashMap<PoolKey, ServerSpec> {
    let mut live = HashMap::new();
    for (config_id, config) in &snapshot.file.mcp_configs {
        for entry in &config.mcp_config {
            let key = PoolKey::new(config_id.clone(), entry.server_name.clone());
            live.insert(key, ServerSpec::from_entry(entry));
        }
    }
    live
}
