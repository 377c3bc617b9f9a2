//! Upstream MCP servers: the pool of child processes that the gateway forwards tool calls to.
//!
//! Data flows one way through this module. A caller (discovery or a secure tool call) names a pool with a [`PoolKey`]
//! (MCP config id and server name) and says how its server is started with a [`ServerSpec`]. [`UpstreamPool`]
//! (`pool.rs`, one `server_pool.rs` per key and spec) lends the caller one warm process of that pool, or starts one
//! when none is idle and the pool is below its maximum, or makes the caller wait for a process to come back. The call
//! (`lease.rs`) then travels over our JSON-RPC client (`rpc.rs`, which keeps results as JSON), reading through
//! `transport.rs` (which notices when the server writes something that is not MCP), to the child process that
//! `process.rs` spawned with a minimal environment (`environment.rs`) in its own process group, and that one supervisor
//! task owns until it is reaped (`supervisor.rs`). Its stderr goes, line by line and bounded, to our logs
//! (`stderr.rs`). When the call is done the process goes back to the pool, or is ended with its whole process group
//! when it crashed, hung past the timeout, broke the protocol, or its configuration changed.
//!
//! Concurrency: by default one call at a time per process. A pool grows to `max_processes_per_server` processes under
//! load, and a call that finds every process busy waits for one. Giving each call its own process keeps failures apart:
//! a crash, a hang that gets its process killed, or garbage on stdout costs exactly one call, and servers that handle
//! requests one after another (many do) never make a call queue behind another inside the server. For servers that do
//! handle requests concurrently, [`UpstreamPool::set_max_calls_per_process`] (`upstream_pool.max_calls_per_process`)
//! lets calls share a process once all the pool's processes are busy (the client multiplexes them on one connection by
//! request id), for more throughput; a process that fails then ends only after the other calls on it are done, but a
//! crash or garbage fails every call sharing it.

mod environment;
mod lease;
pub mod oauth;
mod pool;
mod process;
mod rpc;
mod server_pool;
mod stderr;
mod supervisor;
mod transport;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::config::model::ServerEntry;

pub use pool::UpstreamPool;

/// The largest single message (one JSON-RPC line, in practice one tool result) read from an upstream by default.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Which pool: one per (MCP config id, server name).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub mcp_config_id: String,
    pub server_name: String,
}

impl PoolKey {
    pub fn new(mcp_config_id: impl Into<String>, server_name: impl Into<String>) -> PoolKey {
        PoolKey { mcp_config_id: mcp_config_id.into(), server_name: server_name.into() }
    }
}

/// How to start a server; equality decides whether running processes must be retired after a config change.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerSpec {
    pub command: String,
    pub args: Vec<String>,
    /// The server's `config.env` (later also the OAuth variables), set last so they win.
    pub env: Vec<(String, String)>,
    /// Names copied from the gateway's own environment when set there (`GW_*` names are never copied).
    pub inherit_env: Vec<String>,
}

impl ServerSpec {
    /// The start recipe of one server entry of the configuration.
    pub fn from_entry(entry: &ServerEntry) -> ServerSpec {
        let config = &entry.config;
        ServerSpec {
            command: config.command.clone(),
            args: config.args.clone(),
            env: config.env.iter().flatten().map(|(name, value)| (name.clone(), value.clone())).collect(),
            inherit_env: config.inherit_env.clone().unwrap_or_default(),
        }
    }
}

/// How big pools grow and when idle processes end; changed by [`UpstreamPool::set_settings`] after a reload.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub max_processes_per_server: usize,
    pub idle_timeout: Duration,
    /// How long starting a process and its `initialize` handshake may take (`connectivity_timeout`).
    pub connect_timeout: Duration,
}

impl Default for PoolSettings {
    /// The contract's defaults (`upstream_pool`: 4 processes, 300 s).
    fn default() -> PoolSettings {
        PoolSettings {
            max_processes_per_server: 4,
            idle_timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

/// What a live discovery returns: the tools, and who the server says it is in its `initialize` result.
#[derive(Clone, Debug)]
pub struct Discovered {
    pub tools: Vec<rmcp::model::Tool>,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    /// The server's own description, or else its instructions.
    pub server_description: Option<String>,
}

/// Counters of the pool, for health and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Processes running now (idle, busy or starting).
    pub processes: usize,
    /// Processes that ended abnormally and so were (or will be) replaced: crashed, killed after a timeout, killed
    /// after a protocol violation, or killed because their caller gave up mid-call.
    pub restarts: u64,
    /// Processes started since the pool was created.
    pub started: u64,
    /// Process starts attempted (spawn and `initialize`).
    pub connect_attempts: u64,
    /// Process starts that ran out of `connect_timeout`.
    pub connect_timeouts: u64,
}

/// Why an upstream operation failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The process could not be started or did not initialize.
    #[error("the upstream server could not be started: {0}")]
    Start(String),
    /// The operation exceeded its timeout; a process that was working on it was killed and will be replaced.
    #[error("operation timed out after {} seconds", .0.as_secs_f64())]
    Timeout(Duration),
    /// The process died during the call.
    #[error("the upstream server crashed: {0}")]
    Crashed(String),
    /// Garbage or an invalid reply on the server's stdout, or a JSON-RPC error answered by the server.
    #[error("upstream protocol error: {0}")]
    Protocol(String),
    /// The server's reply was longer than the message limit; it was dropped without being buffered.
    #[error("the upstream reply exceeded the limit of {limit} bytes")]
    OutputTooLarge { limit: usize },
    /// The pool is shutting down and starts no more calls.
    #[error("the gateway is shutting down")]
    ShuttingDown,
}

/// Locks a mutex of this module; a panic elsewhere while it was held leaves plain data behind, so poisoning is ignored.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::ServerCommand;
    use indexmap::IndexMap;

    #[test]
    fn spec_from_entry_copies_command_args_env_and_inherited_names() {
        let entry = ServerEntry {
            server_name: "echo".into(),
            config: ServerCommand {
                command: "python3".into(),
                args: vec!["echo.py".into()],
                env: Some(IndexMap::from([("TOKEN".to_string(), "t".to_string()), ("B".into(), "2".into())])),
                inherit_env: Some(vec!["HTTPS_PROXY".into()]),
                ..ServerCommand::default()
            },
            ..ServerEntry::default()
        };
        let spec = ServerSpec::from_entry(&entry);
        assert_eq!(spec.command, "python3");
        assert_eq!(spec.args, vec!["echo.py"]);
        assert_eq!(spec.env, vec![("TOKEN".to_string(), "t".to_string()), ("B".into(), "2".into())]);
        assert_eq!(spec.inherit_env, vec!["HTTPS_PROXY"]);
    }

    #[test]
    fn spec_without_env_is_empty_and_a_changed_env_is_a_different_spec() {
        let entry = ServerEntry {
            config: ServerCommand { command: "srv".into(), ..ServerCommand::default() },
            ..ServerEntry::default()
        };
        let spec = ServerSpec::from_entry(&entry);
        assert!(spec.env.is_empty() && spec.inherit_env.is_empty());
        let mut changed = spec.clone();
        changed.env.push(("A".into(), "1".into()));
        assert_ne!(spec, changed);
    }

    #[test]
    fn timeout_message_names_the_seconds() {
        assert_eq!(UpstreamError::Timeout(Duration::from_secs(5)).to_string(), "operation timed out after 5 seconds");
    }
}
