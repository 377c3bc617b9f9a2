//! The pool of upstream processes: per (MCP config, server) a [`ServerPool`] of processes and the calls they serve.
//!
//! A call runs `checkout`: use an idle process (a warm call never waits for a start), else start one when the pool is
//! below `max_processes_per_server`, else share a busy one when sharing is allowed, else wait until a call ends. The
//! whole operation, waiting and starting included, is bounded by the caller's timeout. The call ends with its `Lease`'s
//! drop: the process stays, or ends when the call left it unusable. A reaper task ends processes idle longer than
//! `idle_timeout` and forgets empty pools. [`UpstreamPool::retain`] retires pools whose spec changed: their idle
//! processes end now, busy ones when their calls are done.
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

use super::lease::{Lease, Slot};
use super::process::{self, StartOptions};
use super::server_pool::{ServerPool, Shared, Take};
use super::supervisor::{STOP_GRACE, StopMode};
use super::{DEFAULT_MAX_MESSAGE_BYTES, Discovered, PoolKey, PoolSettings, PoolStats, ServerSpec, UpstreamError, lock};

/// The most pages of `tools/list` read in one discovery (a server whose cursor never ends is refused).
const MAX_TOOL_PAGES: usize = 1000;

/// The pool of upstream MCP server processes, shared by every session of the gateway.
pub struct UpstreamPool {
    shared: Arc<Shared>,
    settings: Mutex<PoolSettings>,
    max_message_bytes: AtomicUsize,
    calls_per_process: AtomicUsize,
    servers: Mutex<HashMap<PoolKey, Vec<Arc<ServerPool>>>>,
    reaper_started: AtomicBool,
    this: Weak<UpstreamPool>,
}

impl UpstreamPool {
    pub fn new(settings: PoolSettings) -> Arc<UpstreamPool> {
        Arc::new_cyclic(|this| UpstreamPool {
            shared: Arc::default(),
            settings: Mutex::new(settings),
            max_message_bytes: AtomicUsize::new(DEFAULT_MAX_MESSAGE_BYTES),
            calls_per_process: AtomicUsize::new(1),
            servers: Mutex::default(),
            reaper_started: AtomicBool::new(false),
            this: this.clone(),
        })
    }

    /// New limits after a config reload; a lower maximum or idle timeout takes effect at the next reaper tick.
    pub fn set_settings(&self, settings: PoolSettings) {
        *lock(&self.settings) = settings;
        // A higher maximum lets waiting callers start processes.
        for server in lock(&self.servers).values().flatten() {
            server.returned.notify_waiters();
        }
    }

    /// The longest upstream message (one tool result) read; applies to processes started from now on.
    pub fn set_max_message_bytes(&self, bytes: usize) {
        self.max_message_bytes.store(bytes.max(1), Ordering::Relaxed);
    }

    /// How many calls may share one process once a pool has all its processes busy (default 1: every call has a
    /// process to itself). Sharing raises throughput with servers that handle requests concurrently; the price is that
    /// a crash or garbage on stdout fails every call sharing the process.
    pub fn set_max_calls_per_process(&self, calls: usize) {
        self.calls_per_process.store(calls.max(1), Ordering::Relaxed);
        for server in lock(&self.servers).values().flatten() {
            server.returned.notify_waiters();
        }
    }

    /// Lists the server's tools on a pooled process (live discovery), with what the server says about itself.
    pub async fn list_tools(
        &self,
        key: &PoolKey,
        spec: &ServerSpec,
        timeout: Duration,
    ) -> Result<Discovered, UpstreamError> {
        let deadline = Instant::now() + timeout;
        let mut lease = self.checkout(key, spec, deadline, timeout).await?;
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TOOL_PAGES {
            let params = match &cursor {
                Some(cursor) => serde_json::json!({ "cursor": cursor }),
                None => Value::Object(Map::new()),
            };
            let mut page = lease.request(deadline, timeout, "tools/list", params).await?;
            let listed = page.get_mut("tools").map(Value::take).unwrap_or(Value::Null);
            let listed: Vec<rmcp::model::Tool> = serde_json::from_value(listed).map_err(|error| {
                UpstreamError::Protocol(format!("the server's tools/list result is not valid: {error}"))
            })?;
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

    /// Calls one tool on a pooled process and returns the server's `CallToolResult` as it came, as JSON.
    pub async fn call_tool(
        &self,
        key: &PoolKey,
        spec: &ServerSpec,
        name: &str,
        args: Map<String, Value>,
        timeout: Duration,
    ) -> Result<Value, UpstreamError> {
        #[derive(Serialize)]
        struct Params<'a> {
            name: &'a str,
            arguments: &'a Map<String, Value>,
        }
        let deadline = Instant::now() + timeout;
        let mut lease = self.checkout(key, spec, deadline, timeout).await?;
        let result = lease.request(deadline, timeout, "tools/call", Params { name, arguments: &args }).await?;
        check_tool_result(result)
    }

    /// After a config change: retire the pools whose spec changed or whose (config, server) no longer exists.
    /// Their idle processes end now; lent ones finish their call first.
    pub fn retain(&self, live: &HashMap<PoolKey, ServerSpec>) {
        let mut retired = Vec::new();
        lock(&self.servers).retain(|key, generations| {
            generations.retain(|server| {
                let keep = live.get(key) == Some(&server.spec);
                if !keep {
                    retired.push(server.clone());
                }
                keep
            });
            !generations.is_empty()
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
        let servers: Vec<Arc<ServerPool>> = lock(&self.servers).drain().flat_map(|(_, servers)| servers).collect();
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

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            processes: self.shared.processes.len(),
            restarts: self.shared.restarts.load(Ordering::Relaxed),
            started: self.shared.started.load(Ordering::Relaxed),
            connect_attempts: self.shared.connect_attempts.load(Ordering::Relaxed),
            connect_timeouts: self.shared.connect_timeouts.load(Ordering::Relaxed),
        }
    }

    /// Lends a process of the (key, spec) pool: an idle one, a new one, or the next one given back.
    async fn checkout(
        &self,
        key: &PoolKey,
        spec: &ServerSpec,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Lease, UpstreamError> {
        self.start_reaper();
        loop {
            if self.shared.shutting_down.load(Ordering::SeqCst) {
                return Err(UpstreamError::ShuttingDown);
            }
            let server = self.server_pool(key, spec);
            let max = lock(&self.settings).max_processes_per_server.max(1);
            let calls_per_process = self.calls_per_process.load(Ordering::Relaxed);
            let mut returned = std::pin::pin!(server.returned.notified());
            match server.take(max, calls_per_process, returned.as_mut()) {
                Take::Use(process) => return Ok(Lease::new(server.clone(), process)),
                Take::Start => {
                    let slot = Slot::new(server.clone());
                    let options = StartOptions {
                        label: server.label.clone(),
                        max_message_bytes: self.max_message_bytes.load(Ordering::Relaxed),
                    };
                    let start = process::start(spec, &options, &self.shared.processes);
                    // Starting is bounded by the connectivity timeout as well as by the caller's deadline.
                    let connect_timeout = lock(&self.settings).connect_timeout;
                    let connect_deadline = deadline.min(Instant::now() + connect_timeout);
                    self.shared.connect_attempts.fetch_add(1, Ordering::Relaxed);
                    return match tokio::time::timeout_at(connect_deadline, start).await {
                        Ok(Ok(process)) => {
                            self.shared.started.fetch_add(1, Ordering::Relaxed);
                            Ok(slot.into_lease(process))
                        }
                        Ok(Err(error)) => {
                            tracing::warn!(server = %server.label, %error, "upstream process did not start");
                            Err(error)
                        }
                        Err(_elapsed) if connect_deadline < deadline => {
                            self.shared.connect_timeouts.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(server = %server.label, "upstream process did not start within connectivity_timeout");
                            Err(UpstreamError::Timeout(connect_timeout))
                        }
                        Err(_elapsed) => Err(UpstreamError::Timeout(timeout)),
                    };
                }
                Take::Wait => {
                    if tokio::time::timeout_at(deadline, returned).await.is_err() {
                        return Err(UpstreamError::Timeout(timeout));
                    }
                }
                Take::LookUpAgain => {}
            }
        }
    }

    /// The pool of (key, spec), created when missing.
    fn server_pool(&self, key: &PoolKey, spec: &ServerSpec) -> Arc<ServerPool> {
        let mut servers = lock(&self.servers);
        if let Some(generations) = servers.get(key)
            && let Some(server) = generations.iter().find(|server| server.spec == *spec)
        {
            return server.clone();
        }
        let server = Arc::new(ServerPool::new(key.clone(), spec.clone(), self.shared.clone()));
        servers.entry(key.clone()).or_default().push(server.clone());
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
        let settings = lock(&self.settings).clone();
        let now = Instant::now();
        let mut ended = Vec::new();
        lock(&self.servers).retain(|_, generations| {
            generations.retain(|server| {
                let (idle, empty) = server.expire(now, &settings);
                ended.extend(idle);
                !empty
            });
            !generations.is_empty()
        });
        drop(ended);
        (settings.idle_timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
    }
}

/// A `tools/call` result must be a complete `CallToolResult`: an object whose `content`, when present, is a list and
/// whose `isError`, when present, is a boolean. A request for client input or a task is refused (the gateway relays
/// neither).
fn check_tool_result(result: Value) -> Result<Value, UpstreamError> {
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
