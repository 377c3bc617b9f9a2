//! Upstream MCP servers: the pool of child processes that the gateway forwards tool calls to.
//!
//! Data flows one way through this module. A caller (discovery or a secure tool call) names a pool with a [`PoolKey`]
//! (MCP config id and server name), says how its server is started with a [`ServerSpec`], and names its MCP session
//! (for `per_session` servers, which get a process per session). [`UpstreamPool`] (`pool.rs`, one `server_pool.rs`
//! per key, spec and session) lends the caller one warm process of that pool, or starts one when none is idle and the
//! pool is below its maximum, or makes the caller wait for a start under way or a process to come back. Starts run as
//! tasks of their own, bounded by `start_timeout_seconds` and never by a caller's patience (real servers started with
//! `npx` or `uvx` may download for a minute on their first start); failed starts cool the server down. The call
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

mod budget;
mod environment;
pub mod http_client;
mod lease;
pub mod oauth;
pub mod per_user;
mod pool;
mod process;
pub mod relay;
pub mod remote;
mod rpc;
mod server_pool;
mod sse;
mod sse_client;
mod stderr;
mod supervisor;
mod task_hold;
mod transport;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::config::model::ServerEntry;

pub use pool::UpstreamPool;
pub use server_pool::PoolEvents;
pub use task_hold::{MAX_TASK_ID_BYTES, TaskHold, upstream_task_id};

/// The largest single message (one JSON-RPC line, in practice one tool result) read from an upstream by default.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Which pool: one per (MCP config id, server name), and for a `per_user` server one per user as well (contract 16,
/// [`PoolKey::for_user`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub mcp_config_id: String,
    pub server_name: String,
    /// The user whose own processes these are (a `per_user` server's); `None` for every caller's.
    pub user: Option<std::sync::Arc<str>>,
}

impl PoolKey {
    pub fn new(mcp_config_id: impl Into<String>, server_name: impl Into<String>) -> PoolKey {
        PoolKey { mcp_config_id: mcp_config_id.into(), server_name: server_name.into(), user: None }
    }
}

/// Who a call is made for: the key whose budget a `per_session` server's process is counted against, and the MCP
/// session whose process serves it. Without a session (a stateless 2026-07-28 call, a discovery) a `per_session`
/// server's call runs on a process of the key's own for that server, reused for `limits.idle_process_seconds`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Caller<'a> {
    /// The digest of the caller's credential (never the credential itself); `None` counts against the server only.
    pub key: Option<&'a [u8; 32]>,
    pub session: Option<&'a str>,
    /// What the session's client declared it can do: a `per_session` server's process is told only that.
    pub declares: Declared,
}

impl<'a> Caller<'a> {
    pub fn new(key: &'a [u8; 32], session: Option<&'a str>) -> Caller<'a> {
        Caller { key: Some(key), session, declares: Declared::ALL }
    }

    /// The caller whose client declared `declares` (see [`Declared`]).
    pub fn declaring(self, declares: Declared) -> Caller<'a> {
        Caller { declares, ..self }
    }
}

/// The client capabilities the gateway declares to an upstream in `initialize` (what it can relay to the client of a
/// call). A process that serves one MCP session is told what that session's client declared (contract 15: "upstreams
/// are told only the capabilities the calling client declared"); a process shared by every caller is told all three,
/// and a request for what the calling client did not declare gets a JSON-RPC error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Declared {
    pub sampling: bool,
    pub elicitation: bool,
    pub roots: bool,
}

impl Declared {
    /// Everything the gateway can relay.
    pub const ALL: Declared = Declared { sampling: true, elicitation: true, roots: true };

    /// The `capabilities` object of `initialize`.
    pub fn capabilities(self) -> serde_json::Value {
        let mut capabilities = serde_json::Map::new();
        for (name, declared) in [("sampling", self.sampling), ("elicitation", self.elicitation), ("roots", self.roots)]
        {
            if declared {
                capabilities.insert(name.to_string(), serde_json::json!({}));
            }
        }
        serde_json::Value::Object(capabilities)
    }
}

impl Default for Declared {
    fn default() -> Declared {
        Declared::ALL
    }
}

/// How to start a server; equality decides whether running processes must be retired after a config change.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServerSpec {
    pub command: String,
    /// A remote server (`config.url`), reached over HTTP in place of a command.
    pub remote: Option<RemoteSpec>,
    pub args: Vec<String>,
    /// The server's `config.env` (later also the OAuth variables), set last so they win.
    pub env: Vec<(String, String)>,
    /// Names copied from the gateway's own environment when set there (`GW_*` names are never copied).
    pub inherit_env: Vec<String>,
    /// `config.session_affinity: "per_session"`: each MCP session gets a process of its own.
    pub per_session: bool,
    /// The values of the entry's settings besides `env` that are masked in the server's stderr lines (contract
    /// section 13): every string of its `oauth_config`, and a remote server's `headers` values.
    pub masked_settings: Vec<String>,
    /// A `per_user` server's spec for one user: who, and the spec before their values were put in (`per_user.rs`).
    pub per_user: Option<per_user::UserBinding>,
}

impl ServerSpec {
    /// The start recipe of one server entry of the configuration.
    pub fn from_entry(entry: &ServerEntry) -> ServerSpec {
        let config = &entry.config;
        ServerSpec {
            command: config.command.clone(),
            remote: config.url.as_ref().map(|url| RemoteSpec {
                url: url.clone(),
                sse: config.transport.as_deref() == Some(crate::config::model::SSE),
                revision: config.protocol_version.clone(),
                headers: config.headers.iter().flatten().map(|(name, value)| (name.clone(), value.clone())).collect(),
                tls: config.tls.as_ref().map(|tls| RemoteTls {
                    ca_bundle_path: tls.ca_bundle_path.as_ref().map(PathBuf::from),
                    client_cert_path: tls.client_cert_path.as_ref().map(PathBuf::from),
                    client_key_path: tls.client_key_path.as_ref().map(PathBuf::from),
                }),
                bearer: None,
            }),
            args: config.args.clone(),
            env: config.env.iter().flatten().map(|(name, value)| (name.clone(), value.clone())).collect(),
            inherit_env: config.inherit_env.clone().unwrap_or_default(),
            per_session: config.session_affinity.as_deref() == Some(crate::config::model::PER_SESSION),
            masked_settings: masked_settings(entry),
            per_user: None,
        }
    }

    /// How the server is reached, as [`TRANSPORTS`] names it.
    pub fn transport(&self) -> &'static str {
        TRANSPORTS[transport_index(self.remote.as_ref())]
    }

    /// The values masked wherever the server's own output is shown (its stderr lines, and so a failed start's
    /// message): every value of its `env`, whatever the variable's name (an injected OAuth token is one of them), and
    /// [`ServerSpec::masked_settings`], and a user's values (contract 16). The variables it inherits are added at
    /// start, when their values are known.
    pub fn masked_values(&self) -> impl Iterator<Item = &str> {
        let user_values = self.per_user.iter().flat_map(per_user::UserBinding::values);
        self.env
            .iter()
            .map(|(_, value)| value.as_str())
            .chain(self.masked_settings.iter().map(String::as_str))
            .chain(user_values)
    }
}

/// How the gateway reaches a remote server (contract section 9).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteSpec {
    /// The server's endpoint: the MCP endpoint for streamable HTTP, the event stream's for `sse`.
    pub url: String,
    /// `transport: "sse"`: the 2024-11-05 HTTP+SSE transport (an event stream, and POSTs to the endpoint it names).
    pub sse: bool,
    /// `config.protocol_version` (`None`: auto).
    pub revision: Option<String>,
    /// The entry's `config.headers`, sent with every request.
    pub headers: Vec<(String, String)>,
    pub tls: Option<RemoteTls>,
    /// The OAuth access token source, with `oauth_config` (set per caller, see `gateway::tools::discovery`).
    pub bearer: Option<oauth::Bearer>,
}

/// `config.tls` of a remote server: PEM files, read whenever a session is opened (so rotated files are picked up).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteTls {
    /// Trust roots for the server's certificate, beside the system's.
    pub ca_bundle_path: Option<PathBuf>,
    /// The gateway's client certificate and key, for servers that require mutual TLS.
    pub client_cert_path: Option<PathBuf>,
    pub client_key_path: Option<PathBuf>,
}

/// Every string of an entry's `oauth_config` (its known fields and any other, enabled or not), and the values of a
/// remote server's `headers`.
fn masked_settings(entry: &ServerEntry) -> Vec<String> {
    fn strings(value: &serde_json::Value, into: &mut Vec<String>) {
        match value {
            serde_json::Value::String(text) => into.push(text.clone()),
            serde_json::Value::Array(items) => items.iter().for_each(|item| strings(item, into)),
            serde_json::Value::Object(fields) => fields.values().for_each(|field| strings(field, into)),
            _ => {}
        }
    }
    let mut values = Vec::new();
    if let Some(oauth) = &entry.oauth_config {
        strings(&serde_json::to_value(oauth).unwrap_or_default(), &mut values);
    }
    values.extend(entry.config.headers.iter().flatten().map(|(_, value)| value.clone()));
    values
}

/// How big pools grow, how long a start may take and when idle processes end; changed by
/// [`UpstreamPool::set_settings`] after a reload.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub max_processes_per_server: usize,
    /// The processes of one (server, user) pool of a `per_user` server (`max_processes_per_user_server`).
    pub max_processes_per_user_server: usize,
    pub idle_timeout: Duration,
    /// How long one process start may take, spawn until the answer to `initialize` (`start_timeout_seconds`).
    pub start_timeout: Duration,
    /// How long a remote server's connect may take (`timeouts.connectivity_timeout`).
    pub connect_timeout: Duration,
    /// The processes of `per_session` servers one key may have at once (`limits.max_processes_per_key`).
    pub max_processes_per_key: usize,
    /// How long a key's process of a `per_session` server, started for stateless calls, waits idle for the next one
    /// (`limits.idle_process_seconds`).
    pub idle_process_timeout: Duration,
}

impl Default for PoolSettings {
    /// The contract's defaults (`upstream_pool`: 4 processes, 1 per user of a `per_user` server, 300 s idle, 120 s to start; 2 s to connect; 8
    /// `per_session` processes per key, 60 s idle).
    fn default() -> PoolSettings {
        PoolSettings {
            max_processes_per_server: 4,
            max_processes_per_user_server: 1,
            idle_timeout: Duration::from_secs(300),
            start_timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(2),
            max_processes_per_key: 8,
            idle_process_timeout: Duration::from_secs(60),
        }
    }
}

/// What a live discovery returns: the tools, and who the server says it is in its `initialize` result.
#[derive(Clone, Debug)]
pub struct Discovered {
    /// The tool definitions as the server sent them (each checked to have MCP's shape), every field kept.
    pub tools: Vec<serde_json::Value>,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    /// The server's own description, or else its instructions.
    pub server_description: Option<String>,
}

/// One server's state now, over all its pools (shared, per session, per key, per user): for the console.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerStatus {
    /// Processes running (idle or busy), starts under way, calls in flight.
    pub processes: usize,
    pub starting: usize,
    pub calls: usize,
    /// Why the last start failed, while the server's starts keep failing (the message the log has).
    pub failing: Option<String>,
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
    pub start_attempts: u64,
    /// Process starts that failed (including those that ran out of `start_timeout`).
    pub start_failures: u64,
    /// Process starts that ran out of `start_timeout`.
    pub start_timeouts: u64,
    /// Upstream connections alive now, by transport: processes (`stdio`) and remote sessions, in [`TRANSPORTS`]
    /// order.
    pub connections: [usize; 3],
}

/// The transports of upstream connections, as the `transport` label of `mcpgw_upstream_connections` names them.
pub const TRANSPORTS: [&str; 3] = ["stdio", "streamable_http", "sse"];

/// The place in [`TRANSPORTS`] of a process (`None`) or of a remote server.
fn transport_index(remote: Option<&RemoteSpec>) -> usize {
    match remote {
        None => 0,
        Some(remote) if !remote.sse => 1,
        Some(_) => 2,
    }
}

/// Why an upstream operation failed.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The process could not be started or did not initialize.
    #[error("the upstream server could not be started: {0}")]
    Start(String),
    /// The server is cooling down after failed starts; no process is started until `retry_after` has passed.
    #[error(
        "the upstream server failed to start {failures} times in a row and is cooling down; retry in {} seconds \
         (last failure: {last})",
        .retry_after.as_secs_f64().ceil()
    )]
    Unavailable { failures: u32, retry_after: Duration, last: String },
    /// The operation exceeded its timeout; a process that was working on it was killed and will be replaced.
    #[error("operation timed out after {} seconds", .0.as_secs_f64())]
    Timeout(Duration),
    /// The process died during the call.
    #[error("the upstream server crashed: {0}")]
    Crashed(String),
    /// Garbage or an invalid reply on the server's stdout.
    #[error("upstream protocol error: {0}")]
    Protocol(String),
    /// The server answered the request with a JSON-RPC error (the process stays in service).
    #[error("upstream protocol error: the server answered with JSON-RPC error {code}: {message}")]
    Rejected { code: i64, message: String },
    /// The server's reply was longer than the message limit; it was dropped without being buffered.
    #[error("the upstream reply exceeded the limit of {limit} bytes")]
    OutputTooLarge { limit: usize },
    /// A remote server could not be reached, or answered with an HTTP error or something that is not MCP.
    #[error("{0}")]
    Remote(String),
    /// Every place for a `per_session` server's process stayed taken for the whole of the call's timeout: `limit` is
    /// the `mcpgw_limit_hits_total` label, `setting` the full setting's name.
    #[error("no upstream process was free for this call within {} seconds ({setting} reached)", .waited.as_secs_f64())]
    NoProcessSlot { limit: &'static str, setting: &'static str, waited: Duration },
    /// The caller cancelled the call (its relay's token); the server was told.
    #[error("the call was cancelled by its client")]
    Cancelled,
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
    fn every_env_value_and_oauth_setting_is_masked_whatever_its_name() {
        let entry = ServerEntry {
            config: ServerCommand {
                command: "srv".into(),
                env: Some(IndexMap::from([
                    ("API_TOKEN".to_string(), "token-value-1".to_string()),
                    ("PLAIN_VALUE".into(), "plain-value-2".into()),
                ])),
                ..ServerCommand::default()
            },
            oauth_config: Some(crate::config::model::OAuthConfig {
                enabled: Some(true),
                OAUTH_CLIENT_ID: Some("client-id-3".into()),
                OAUTH_CLIENT_SECRET: Some("client-secret-4".into()),
                OAUTH_TOKEN_URL: Some("https://issuer.example/token".into()),
                OAUTH_SCOPE: Some("scope-5".into()),
                extra: serde_json::Map::from_iter([("OAUTH_OTHER".to_string(), serde_json::json!("other-6"))]),
                ..Default::default()
            }),
            ..ServerEntry::default()
        };
        let spec = ServerSpec::from_entry(&entry);
        let masked: Vec<&str> = spec.masked_values().collect();
        for value in [
            "token-value-1",
            "plain-value-2",
            "client-id-3",
            "client-secret-4",
            "https://issuer.example/token",
            "scope-5",
            "other-6",
        ] {
            assert!(masked.contains(&value), "{value} is not masked: {masked:?}");
        }
    }

    #[test]
    fn timeout_message_names_the_seconds() {
        assert_eq!(UpstreamError::Timeout(Duration::from_secs(5)).to_string(), "operation timed out after 5 seconds");
    }
}
