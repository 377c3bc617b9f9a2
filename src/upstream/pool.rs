//! The pool of upstream processes: per (MCP config, server) a [`ServerPool`] of processes and the calls they serve;
//! for `per_session` servers one per MCP session, and one per key for its calls without a session (stateless
//! 2026-07-28 calls, discovery), whose processes are reused for `idle_process_timeout`.
//!
//! A call runs `checkout`: use an idle process (a warm call never waits for a start), else begin a start when the pool
//! is below `max_processes_per_server` (it runs on its own, see `server_pool.rs`), else share a busy one when sharing
//! is allowed, else wait. Time spent waiting while a start is under way does not count against the caller's timeout
//! (`tool_execution_timeout`, `discovery_timeout`): that bounds the upstream's own work, and the start is bounded by
//! `start_timeout_seconds`. Waiting for a busy process does count. The call ends with its `Lease`'s drop: the process
//! stays, or ends (and is replaced) when the call left it unusable. A reaper task ends processes idle longer than
//! `idle_timeout` and forgets empty pools. [`UpstreamPool::retain`] retires pools whose spec changed: their idle
//! processes end now, busy ones when their calls are done. [`UpstreamPool::end_session`] does the same for the pools
//! of an MCP session that ended.
//!
//! The processes of `per_session` servers, in all their pools, are counted per server and per key (`budget.rs`).
//! A call that finds its server's or its key's places all taken first ends an idle process that holds one (a key's
//! stateless process at once, a session's after `idle_process_timeout`), then waits for a place until its timeout,
//! and fails with [`UpstreamError::NoProcessSlot`] (`UPSTREAM_UNAVAILABLE` to the client).
//!
//! Pools are looked up by key and spec, so a request still holding the previous configuration snapshot during a
//! reload gets a process of the spec it holds; such a pool is not the live one and simply expires when idle.
//! Lock order: the map of pools, then one pool's state; nothing is awaited while a lock is held.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::Declared;
use super::budget::{Full, KeyId};
use super::lease::Lease;
use super::relay::Relay;
use super::server_pool::{Listener, PoolEvents, ServerPool, Shared, Take, Tenancy};
use super::supervisor::{STOP_GRACE, StopMode};
use super::{
    Caller, DEFAULT_MAX_MESSAGE_BYTES, Discovered, PoolKey, PoolSettings, PoolStats, ServerSpec, ServerStatus,
    UpstreamError, lock,
};

/// The most pages of `tools/list` read in one discovery (a server whose cursor never ends is refused).
const MAX_TOOL_PAGES: usize = 1000;

/// The pool of upstream MCP server processes, shared by every session of the gateway.
pub struct UpstreamPool {
    shared: Arc<Shared>,
    servers: Mutex<Pools>,
    reaper_started: AtomicBool,
    /// The servers of the last configuration and whether it had `prestart` on, for
    /// [`UpstreamPool::prestart_changed`].
    known_servers: Mutex<(HashMap<PoolKey, ServerSpec>, bool)>,
    this: Weak<UpstreamPool>,
}

/// The server pools: the shared ones by (config, server), each with its generations (specs); those of
/// `per_session` servers by MCP session, and by key for calls without a session.
#[derive(Default)]
struct Pools {
    shared: HashMap<PoolKey, Vec<Arc<ServerPool>>>,
    by_session: HashMap<Arc<str>, Vec<Arc<ServerPool>>>,
    by_key: HashMap<Option<KeyId>, Vec<Arc<ServerPool>>>,
}

impl Pools {
    fn all(&self) -> impl Iterator<Item = &Arc<ServerPool>> {
        self.shared.values().chain(self.by_session.values()).chain(self.by_key.values()).flatten()
    }

    /// The pool `caller` uses for (key, spec), if there is one.
    fn find(&self, key: &PoolKey, spec: &ServerSpec, caller: Caller<'_>) -> Option<&Arc<ServerPool>> {
        let found = match (spec.per_session, caller.session) {
            (false, _) => self.shared.get(key),
            (true, Some(session)) => self.by_session.get(session),
            (true, None) => self.by_key.get(&caller.key.copied()),
        };
        found.into_iter().flatten().find(|server| server.key == *key && server.spec == *spec)
    }

    /// Keeps the pools for which `keep` holds, in both maps, and forgets the emptied entries.
    fn retain(&mut self, mut keep: impl FnMut(&Arc<ServerPool>) -> bool) {
        self.shared.retain(|_, generations| {
            generations.retain(&mut keep);
            !generations.is_empty()
        });
        self.by_session.retain(|_, servers| {
            servers.retain(&mut keep);
            !servers.is_empty()
        });
        self.by_key.retain(|_, servers| {
            servers.retain(&mut keep);
            !servers.is_empty()
        });
    }
}

impl UpstreamPool {
    pub fn new(settings: PoolSettings) -> Arc<UpstreamPool> {
        let shared = Shared {
            settings: Mutex::new(settings),
            max_message_bytes: AtomicUsize::new(DEFAULT_MAX_MESSAGE_BYTES),
            calls_per_process: AtomicUsize::new(1),
            ..Shared::default()
        };
        Arc::new_cyclic(|this| UpstreamPool {
            shared: Arc::new(shared),
            servers: Mutex::default(),
            reaper_started: AtomicBool::new(false),
            known_servers: Mutex::default(),
            this: this.clone(),
        })
    }

    /// Tells `listener` what an upstream process says that belongs to no call (one of its lists changed, a resource
    /// was updated).
    pub fn on_events(&self, listener: PoolEvents) {
        *lock(&self.shared.events) = Listener(Some(listener));
    }

    /// New limits after a config reload; a lower maximum or idle timeout takes effect at the next reaper tick, a new
    /// start timeout with the next start.
    pub fn set_settings(&self, settings: PoolSettings) {
        *lock(&self.shared.settings) = settings;
        // A higher maximum lets waiting callers start processes.
        self.wake_all();
        self.shared.budget.freed.notify_waiters();
    }

    /// The longest upstream message (one tool result) read; applies to processes started from now on.
    pub fn set_max_message_bytes(&self, bytes: usize) {
        self.shared.max_message_bytes.store(bytes.max(1), Ordering::Relaxed);
    }

    /// How many calls may share one process once a pool has all its processes busy (default 1: every call has a
    /// process to itself). Sharing raises throughput with servers that handle requests concurrently; the price is that
    /// a crash or garbage on stdout fails every call sharing the process.
    pub fn set_max_calls_per_process(&self, calls: usize) {
        self.shared.calls_per_process.store(calls.max(1), Ordering::Relaxed);
        self.wake_all();
    }

    fn wake_all(&self) {
        for server in lock(&self.servers).all() {
            server.returned.notify_waiters();
        }
    }

    /// Starts the first process of (key, spec) now, before any call needs it (`upstream_pool.prestart`). Nothing
    /// happens when it has a process or a start under way, or for a `per_session` server (its processes belong to
    /// sessions).
    pub fn prestart(&self, key: &PoolKey, spec: &ServerSpec) {
        if spec.per_session || key.user.is_some() || self.shared.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        self.start_reaper();
        self.server_pool(key, spec, Caller::default()).prestart();
    }

    /// After a configuration load: remembers `servers` and, when `prestart` is on, starts the first process of each
    /// one that is new or whose spec changed since the last call (of every one when `prestart` was off until now).
    pub fn prestart_changed(&self, servers: HashMap<PoolKey, ServerSpec>, prestart: bool) {
        let (previous, was_on) = std::mem::replace(&mut *lock(&self.known_servers), (servers.clone(), prestart));
        if !prestart {
            return;
        }
        for (key, spec) in &servers {
            if !was_on || previous.get(key) != Some(spec) {
                tracing::info!(server = %key.server_name, config = %key.mcp_config_id, "prestarting upstream server");
                self.prestart(key, spec);
            }
        }
    }

    /// An MCP session ended: the processes of its `per_session` servers end (idle ones now, busy ones when their
    /// calls are done).
    pub fn end_session(&self, session: &str) {
        let Some(servers) = lock(&self.servers).by_session.remove(session) else { return };
        for server in servers {
            let idle = server.retire();
            tracing::info!(server = %server.label, config = %server.key.mcp_config_id, idle = idle.len(),
                "MCP session ended; ending its upstream process");
            drop(idle);
        }
    }

    /// Lists the server's tools on a pooled process (live discovery), with what the server says about itself.
    /// `caller`'s session picks the process of a `per_session` server (see [`Caller`]).
    pub async fn list_tools(
        &self,
        key: &PoolKey,
        spec: &ServerSpec,
        caller: Caller<'_>,
        timeout: Duration,
    ) -> Result<Discovered, UpstreamError> {
        let (mut lease, deadline) = self.checkout(key, spec, caller, timeout).await?;
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = match &cursor {
                Some(cursor) => serde_json::json!({ "cursor": cursor }),
                None => Value::Object(Map::new()),
            };
            let mut page = lease.request(deadline, timeout, "tools/list", params, None).await?;
            let listed = page.get_mut("tools").map(Value::take).unwrap_or(Value::Null);
            // Each definition is checked against MCP's shape but kept as the server sent it: pins and the
            // poisoning checks cover every field (contract section 14), fields rmcp does not know included.
            let Value::Array(listed) = listed else {
                return Err(UpstreamError::Protocol("the server's tools/list result has no list of tools".to_string()));
            };
            for tool in &listed {
                <rmcp::model::Tool as serde::Deserialize>::deserialize(tool).map_err(|error| {
                    UpstreamError::Protocol(format!("the server's tools/list result is not valid: {error}"))
                })?;
            }
            tools.extend(listed);
            cursor = match page.get("nextCursor") {
                Some(Value::String(next)) if Some(next) != cursor.as_ref() => Some(next.clone()),
                _ => None,
            };
            if cursor.is_none() {
                break;
            }
        }
        if cursor.is_some() {
            return Err(UpstreamError::Protocol(format!("the server's tool list goes on past {MAX_TOOL_PAGES} pages")));
        }
        let info = lease.server_info();
        let implementation = info.server_info.as_ref();
        let description = implementation
            .and_then(|implementation| implementation.description.clone())
            .or_else(|| info.instructions.clone());
        Ok(Discovered {
            tools,
            server_name: implementation.map(|implementation| implementation.name.clone()),
            server_version: implementation.map(|implementation| implementation.version.clone()),
            server_description: description,
        })
    }

    /// Calls one tool on a pooled process and returns the server's `CallToolResult` as it came, as JSON. `caller`'s
    /// session picks the process of a `per_session` server (see [`Caller`]).
    ///
    /// With a `relay`, the server's messages during the call reach it (see [`relay`](super::relay)) where no other
    /// caller can share the process: it serves one call at a time, or belongs to the caller's session.
    #[allow(clippy::too_many_arguments)]
    pub async fn call_tool(
        &self,
        key: &PoolKey,
        spec: &ServerSpec,
        caller: Caller<'_>,
        name: &str,
        args: Map<String, Value>,
        timeout: Duration,
        relay: Option<&Relay>,
    ) -> Result<Value, UpstreamError> {
        #[derive(Serialize)]
        struct Params<'a> {
            name: &'a str,
            arguments: &'a Map<String, Value>,
            #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
            meta: Option<&'a Value>,
        }
        let relay = self.relay_for(spec, relay);
        let meta = relay.and_then(|relay| relay.meta.as_ref());
        let (mut lease, deadline) = self.checkout(key, spec, caller, timeout).await?;
        let params = Params { name, arguments: &args, meta };
        let result = lease.request(deadline, timeout, "tools/call", params, relay).await?;
        check_tool_result(result)
    }

    /// `relay` where the server's messages can only belong to its caller (see [`UpstreamPool::call_tool`]).
    pub(super) fn relay_for<'r>(&self, spec: &ServerSpec, relay: Option<&'r Relay>) -> Option<&'r Relay> {
        let one_call_at_a_time = self.shared.calls_per_process.load(Ordering::Relaxed) <= 1;
        relay.filter(|_| one_call_at_a_time || spec.per_session)
    }

    /// One request of `method` on a pooled process, for what transparent mode relays besides tools (prompts,
    /// resources, completion, logging level): the server's result as it came. `None`, with nothing sent, when the
    /// server's `initialize` did not declare what the request needs (`declared` says).
    #[allow(clippy::too_many_arguments)]
    pub async fn request(
        &self,
        key: &PoolKey,
        spec: &ServerSpec,
        caller: Caller<'_>,
        method: &str,
        params: Value,
        timeout: Duration,
        declared: impl Fn(&rmcp::model::ServerCapabilities) -> bool,
        relay: Option<&Relay>,
    ) -> Result<Option<Value>, UpstreamError> {
        let relay = self.relay_for(spec, relay);
        let (mut lease, deadline) = self.checkout(key, spec, caller, timeout).await?;
        if !declared(&lease.server_info().capabilities) {
            lease.unused();
            return Ok(None);
        }
        lease.request(deadline, timeout, method, params, relay).await.map(Some)
    }

    /// After a config change: retire the pools whose spec changed or whose (config, server) no longer exists (a
    /// user's pool of a `per_user` server: whose entry changed). Their idle processes end now; lent ones finish
    /// their call first.
    pub fn retain(&self, live: &HashMap<PoolKey, ServerSpec>) {
        let mut retired = Vec::new();
        lock(&self.servers).retain(|server| {
            // A user's pool of a `per_user` server is compared by the spec its entry makes (its template).
            let keep = live.get(&server.key.server_key()) == Some(server.spec.template());
            if !keep {
                retired.push(server.clone());
            }
            keep
        });
        for server in retired {
            let idle = server.retire();
            tracing::info!(server = %server.label, config = %server.key.mcp_config_id, idle = idle.len(),
                "upstream server configuration changed or removed; retiring its processes");
            drop(idle);
        }
    }

    /// Ends every process with its whole process group (SIGTERM, then SIGKILL after a short grace) and refuses new
    /// calls. Returns when the processes are gone. Idempotent.
    pub async fn shutdown(&self) {
        self.shared.shutting_down.store(true, Ordering::SeqCst);
        let servers: Vec<Arc<ServerPool>> = std::mem::take(&mut *lock(&self.servers)).all().cloned().collect();
        let idle: Vec<_> = servers.iter().flat_map(|server| server.retire()).collect();
        let live = self.shared.processes.close();
        for control in &live {
            control.request_stop(StopMode::Graceful);
        }
        drop(idle);
        let all_ended = async {
            for control in &live {
                control.exited().await;
            }
        };
        if tokio::time::timeout(STOP_GRACE + Duration::from_secs(3), all_ended).await.is_err() {
            tracing::warn!("some upstream processes did not end in time");
        }
    }

    /// The state of server `server` of MCP configuration `config_id` now, over all its pools.
    pub fn server_status(&self, config_id: &str, server: &str) -> ServerStatus {
        let mut status = ServerStatus::default();
        let pools = lock(&self.servers);
        for pool in pools.all().filter(|p| p.key.mcp_config_id == config_id && p.key.server_name == server) {
            pool.add_status(&mut status);
        }
        status
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            processes: self.shared.processes.len(),
            restarts: self.shared.restarts.load(Ordering::Relaxed),
            started: self.shared.started.load(Ordering::Relaxed),
            start_attempts: self.shared.start_attempts.load(Ordering::Relaxed),
            start_failures: self.shared.start_failures.load(Ordering::Relaxed),
            start_timeouts: self.shared.start_timeouts.load(Ordering::Relaxed),
            connections: self.shared.connections.counts(),
        }
    }

    /// Lends a process of the pool of (key, spec, caller): an idle one, a new one, or the next one given back. Returns
    /// the lease and the deadline of the work on it: `timeout` from now, plus the time spent waiting for starts.
    pub(super) async fn checkout(
        &self,
        key: &PoolKey,
        spec: &ServerSpec,
        caller: Caller<'_>,
        timeout: Duration,
    ) -> Result<(Lease, Instant), UpstreamError> {
        self.start_reaper();
        let mut deadline = Instant::now() + timeout;
        let mut seen_failures = None;
        loop {
            if self.shared.shutting_down.load(Ordering::SeqCst) {
                return Err(UpstreamError::ShuttingDown);
            }
            let server = self.server_pool(key, spec, caller);
            let mut returned = std::pin::pin!(server.returned.notified());
            // Registered before the budget is looked at, so that a place freed after that wakes this caller.
            let mut freed = std::pin::pin!(self.shared.budget.freed.notified());
            if server.counted() {
                freed.as_mut().enable();
            }
            let (starts_under_way, full) = match server.take(&mut seen_failures, returned.as_mut()) {
                Take::Use(process) => return Ok((Lease::new(server.clone(), process), deadline)),
                Take::Start(slot) => {
                    server.begin_start(slot);
                    (true, None)
                }
                Take::Wait { starts_under_way, full } => (starts_under_way, full),
                Take::LookUpAgain => {
                    // Another pool (a new generation) keeps its own count of failures.
                    seen_failures = None;
                    continue;
                }
                Take::Failed(message) => return Err(UpstreamError::Start(message.to_string())),
                Take::CoolingDown { failures, retry_after, last } => {
                    return Err(UpstreamError::Unavailable { failures, retry_after, last: last.to_string() });
                }
            };
            // Taken by `take` with the decision (no await in between), released when this wait ends.
            let _waiting = server.waiting();
            if starts_under_way {
                // A start ends by itself (joining the pool or failing) within its own timeout, and wakes us either
                // way; the caller's timeout does not run meanwhile.
                let waiting = Instant::now();
                let patience = lock(&self.shared.settings).start_timeout + Duration::from_secs(1);
                let _ = tokio::time::timeout(patience, returned).await;
                deadline += waiting.elapsed();
            } else if let Some(full) = full {
                if self.end_idle_holder(&server, full) {
                    continue;
                }
                let place = async {
                    tokio::select! {
                        () = returned => {},
                        () = freed => {},
                    }
                };
                if tokio::time::timeout_at(deadline, place).await.is_err() {
                    return Err(UpstreamError::NoProcessSlot {
                        limit: full.label(),
                        setting: full.setting(),
                        waited: timeout,
                    });
                }
            } else if tokio::time::timeout_at(deadline, returned).await.is_err() {
                return Err(UpstreamError::Timeout(timeout));
            }
        }
    }

    /// For a caller of `waiting` that finds the `full` limit reached: ends one idle process that holds a place under
    /// that limit (of the same server, or of the same key): one of a key's stateless processes at once, a session's
    /// after `idle_process_timeout`. Returns whether it ended one (its place is then free).
    fn end_idle_holder(&self, waiting: &ServerPool, full: Full) -> bool {
        let idle_process_timeout = lock(&self.shared.settings).idle_process_timeout;
        let now = Instant::now();
        let ended = {
            let servers = lock(&self.servers);
            let holders = servers.all().filter(|server| match full {
                Full::Server => server.counted() && server.key.server_key() == waiting.key.server_key(),
                Full::Key => server.counted() && server.owner.is_some() && server.owner == waiting.owner,
            });
            holders
                .filter_map(|server| {
                    let idle_for = if server.tenancy == Tenancy::Key { Duration::ZERO } else { idle_process_timeout };
                    server.end_one_idle(now, idle_for)
                })
                .next()
        };
        let Some(process) = ended else { return false };
        tracing::info!(server = %waiting.label, pid = process.pid(), limit = full.label(),
            "ending an idle upstream process so that a waiting call can have its place");
        drop(process);
        true
    }

    /// The pool of (key, spec, caller), created when missing: the shared one of a shared server; for a `per_session`
    /// server the caller's session's, or without a session the caller's key's.
    /// Whether the pool `caller` would use for (key, spec) has a process running or starting now; starts none
    /// (`logging/setLevel` reaches only servers already running: contract 15).
    pub fn has_process(&self, key: &PoolKey, spec: &ServerSpec, caller: Caller<'_>) -> bool {
        let servers = lock(&self.servers);
        servers.find(key, spec, caller).is_some_and(|server| server.has_process())
    }

    fn server_pool(&self, key: &PoolKey, spec: &ServerSpec, caller: Caller<'_>) -> Arc<ServerPool> {
        let owner = caller.key.copied();
        let mut servers = lock(&self.servers);
        if let Some(server) = servers.find(key, spec, caller) {
            return server.clone();
        }
        let (tenancy, owner, declares) = match (spec.per_session, caller.session) {
            (false, _) => (Tenancy::Shared, None, Declared::ALL),
            (true, Some(session)) => (Tenancy::Session(Arc::from(session)), owner, caller.declares),
            (true, None) => (Tenancy::Key, owner, Declared::ALL),
        };
        let server =
            Arc::new(ServerPool::new(key.clone(), spec.clone(), tenancy, owner, declares, self.shared.clone()));
        match &server.tenancy {
            Tenancy::Shared => servers.shared.entry(key.clone()).or_default().push(server.clone()),
            Tenancy::Session(session) => servers.by_session.entry(session.clone()).or_default().push(server.clone()),
            Tenancy::Key => servers.by_key.entry(owner).or_default().push(server.clone()),
        }
        server
    }

    /// Starts the idle reaper on first use (so `new` needs no runtime). It stops when the pool is dropped or shut down.
    fn start_reaper(&self) {
        if self.reaper_started.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.this.clone();
        tokio::spawn(async move {
            loop {
                let tick = match this.upgrade() {
                    Some(pool) if !pool.shared.shutting_down.load(Ordering::SeqCst) => pool.reap(),
                    _ => return,
                };
                tokio::time::sleep(tick).await;
            }
        });
    }

    /// One reaper pass: ends idle processes past the idle timeout or over the maximum and dead ones, forgets empty
    /// pools. Returns how long to sleep until the next pass.
    fn reap(&self) -> Duration {
        let settings = lock(&self.shared.settings).clone();
        let now = Instant::now();
        let mut ended = Vec::new();
        lock(&self.servers).retain(|server| {
            let (idle, empty) = server.expire(now, &settings);
            ended.extend(idle);
            !empty
        });
        drop(ended);
        (settings.idle_timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
    }
}

/// A `tools/call` result must be a complete `CallToolResult`: an object whose `content`, when present, is a list and
/// whose `isError`, when present, is a boolean. A request for client input or a task is refused (the gateway relays
/// neither).
pub(super) fn check_tool_result(result: Value) -> Result<Value, UpstreamError> {
    let wrong = || UpstreamError::Protocol("the server answered with the wrong kind of result".to_string());
    let Value::Object(object) = &result else {
        return Err(wrong());
    };
    match object.get("resultType").and_then(Value::as_str) {
        None | Some("complete") => {}
        Some("input_required") => {
            return Err(UpstreamError::Protocol(
                "the server asked for client input, which the gateway does not relay".to_string(),
            ));
        }
        Some(_) => return Err(UpstreamError::Protocol("the server answered with a task instead of a result".into())),
    }
    if object.contains_key("task") {
        return Err(UpstreamError::Protocol("the server answered with a task instead of a result".into()));
    }
    let content_ok = object.get("content").is_none_or(Value::is_array);
    let is_error_ok = object.get("isError").is_none_or(|v| v.is_boolean() || v.is_null());
    if content_ok && is_error_ok { Ok(result) } else { Err(wrong()) }
}
