//! One upstream server process: starting it and talking to it.
//!
//! [`start`] spawns the server's command with a cleared environment (see `environment.rs`), in a new process group
//! (`process_group(0)`, so the whole group can be signalled), with stdin and stdout piped to our JSON-RPC client
//! (`rpc.rs`, reading through the [`LineReader`]) and stderr piped to the log forwarder. The child itself is handed to
//! its supervisor task (`supervisor.rs`) at once, which owns it until it is reaped. The start then runs the MCP
//! `initialize` handshake, bounded by `start_timeout_seconds`, and returns an [`UpstreamProcess`]: the client, the
//! reader's health report, what the server said about itself and the supervisor's [`ProcessControl`]. A start that
//! fails, runs out of time or is cancelled ends its process, and its error names the cause and the last line the
//! process wrote on stderr (masked); dropping an `UpstreamProcess` ends it too.

use std::ffi::OsString;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::model::ServerPeerInfo;
use serde_json::{Value, json};
use tokio::process::Command;
use tokio::sync::watch;

use super::environment::child_environment;
use super::http_client::HttpRpc;
use super::http_client::Revision;
use super::relay::ServerEvents;
use super::remote::{self, Endpoint};
use super::rpc::{RpcClient, RpcError};
use super::sse_client::{self, SseSession};
use super::supervisor::{self, ProcessControl, ProcessSet, StopMode};
use super::transport::{LineReader, StreamHealth};
use super::{RemoteSpec, ServerSpec, UpstreamError, stderr};

/// The protocol revision the gateway asks upstreams for in `initialize` (the newest one that has `initialize`).
const PROTOCOL_VERSION: &str = "2025-11-25";
/// Revisions the gateway accepts in a server's `initialize` result.
const ACCEPTED_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// A running, initialized upstream: a local process (its client and its control) or the gateway's session with a
/// remote server (contract section 9). The pool leases them alike. Dropping it ends the process gracefully, or the
/// remote session.
pub(crate) struct UpstreamProcess {
    link: Link,
    info: Arc<ServerPeerInfo>,
    max_message_bytes: usize,
    _counted: Counted,
}

/// Upstream connections alive now, by transport ([`super::TRANSPORTS`]): `mcpgw_upstream_connections`.
#[derive(Debug, Default)]
pub(crate) struct Connections([AtomicUsize; 3]);

impl Connections {
    pub fn counts(&self) -> [usize; 3] {
        [0, 1, 2].map(|i| self.0[i].load(Ordering::Relaxed))
    }

    fn open(self: &Arc<Self>, transport: usize) -> Counted {
        self.0[transport].fetch_add(1, Ordering::Relaxed);
        Counted { connections: Arc::clone(self), transport }
    }
}

/// One connection counted in [`Connections`] while it lives.
struct Counted {
    connections: Arc<Connections>,
    transport: usize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.connections.0[self.transport].fetch_sub(1, Ordering::Relaxed);
    }
}

/// How the gateway reaches one upstream.
pub(crate) enum Link {
    Local {
        control: Arc<ProcessControl>,
        client: RpcClient,
        health: watch::Receiver<StreamHealth>,
    },
    /// A streamable HTTP server.
    Remote(Arc<HttpRpc>),
    /// A server of the 2024-11-05 HTTP+SSE transport: the process's client over the event stream and its POSTs.
    Sse(SseSession),
}

impl UpstreamProcess {
    /// The process id; 0 for a remote server.
    pub fn pid(&self) -> u32 {
        match &self.link {
            Link::Local { control, .. } => control.pid(),
            Link::Remote(_) | Link::Sse(_) => 0,
        }
    }

    /// Whether the server was ever told a client's roots (`roots/list` answered with some), on any transport.
    pub fn told_roots(&self) -> bool {
        match self.link() {
            Link::Local { client, .. } => client.told_roots(),
            Link::Sse(session) => session.client.told_roots(),
            Link::Remote(remote) => remote.told_roots(),
        }
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// What the server said about itself in its `initialize` result.
    pub fn server_info(&self) -> Arc<ServerPeerInfo> {
        self.info.clone()
    }

    /// Whether the process has exited or its connection has closed (either way it cannot serve another call).
    pub fn is_gone(&self) -> bool {
        match &self.link {
            Link::Local { control, client, .. } => control.has_exited() || client.is_closed(),
            Link::Remote(_) => false,
            Link::Sse(session) => session.client.is_closed(),
        }
    }

    /// The longest message the transport reads from this process.
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    /// Asks the process to stop (`mode`), or ends the remote session.
    pub fn stop(&self, mode: StopMode) {
        match &self.link {
            Link::Local { control, .. } => control.request_stop(mode),
            Link::Remote(remote) => {
                let remote = Arc::clone(remote);
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    runtime.spawn(async move { remote.close().await });
                }
            }
            // Its stream closes when the session is dropped, right after this.
            Link::Sse(_) => {}
        }
    }

    /// Tells `listener` what the server says that belongs to no call.
    /// Hands the status notifications of the server's task `task_id` to `watcher` (a local or SSE server; a remote
    /// streamable HTTP server's are not watched: `false`).
    pub fn watch_task(&self, task_id: &str, watcher: tokio::sync::mpsc::Sender<serde_json::Value>) -> bool {
        match &self.link {
            Link::Local { client, .. } => client.watch_task(task_id, watcher),
            Link::Sse(session) => session.client.watch_task(task_id, watcher),
            Link::Remote(_) => return false,
        }
        true
    }

    pub fn unwatch_task(&self, task_id: &str) {
        match &self.link {
            Link::Local { client, .. } => client.unwatch_task(task_id),
            Link::Sse(session) => session.client.unwatch_task(task_id),
            Link::Remote(_) => {}
        }
    }

    pub fn on_events(&self, listener: ServerEvents) {
        match &self.link {
            Link::Local { client, .. } => client.on_events(listener),
            Link::Remote(remote) => remote.on_events(listener),
            Link::Sse(session) => session.client.on_events(listener),
        }
    }
}

impl Drop for UpstreamProcess {
    fn drop(&mut self) {
        // A local client is dropped right after this, which closes the server's stdin as well.
        self.stop(StopMode::Graceful);
    }
}

/// What a process start needs besides the spec.
pub(crate) struct StartOptions {
    /// The server's name, for logs.
    pub label: Arc<str>,
    pub max_message_bytes: usize,
    /// Spawn until the answer to `initialize` (`upstream_pool.start_timeout_seconds`).
    pub start_timeout: Duration,
    /// A remote server's connect, TCP and TLS (`timeouts.connectivity_timeout`).
    pub connect_timeout: Duration,
    pub connections: Arc<Connections>,
    /// The client capabilities declared to the server in `initialize`.
    pub declares: super::Declared,
}

/// How long a failed start waits for the server's last stderr lines to be read, for its error message.
const STDERR_PATIENCE: Duration = Duration::from_millis(300);

/// Why a start failed, and whether it ran out of time (counted apart).
#[derive(Debug)]
pub(crate) struct StartFailure {
    pub error: UpstreamError,
    pub timed_out: bool,
}

/// Spawns the server and runs the MCP `initialize` handshake within `options.start_timeout`. Cancelling the returned
/// future ends the process.
pub(crate) async fn start(
    spec: &ServerSpec,
    options: &StartOptions,
    processes: &Arc<ProcessSet>,
) -> Result<UpstreamProcess, StartFailure> {
    let failed = |message: String| StartFailure { error: UpstreamError::Start(message), timed_out: false };
    if let Some(remote) = &spec.remote {
        // Boxed: its HTTP futures are large, and the start future of every process would carry them.
        return Box::pin(start_remote(remote, options)).await;
    }
    let environment = child_environment(spec, &|name| std::env::var_os(name));
    let masks = stderr_masks(spec, &environment);
    let mut command = Command::new(&spec.command);
    command
        .args(&spec.args)
        .env_clear()
        .envs(environment)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|error| failed(format!("cannot run `{}`: {error}", spec.command)))?;
    let (Some(pid), Some(stdin), Some(stdout), Some(stderr)) =
        (child.id(), child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(failed(format!("`{}` started without its pipes", spec.command)));
    };
    let label = options.label.clone();
    let Some(control) = supervisor::adopt(child, pid, processes, label.clone()) else {
        return Err(StartFailure { error: UpstreamError::ShuttingDown, timed_out: false });
    };
    tracing::info!(server = %label, pid, command = %spec.command, "upstream process started");
    let last_stderr = Arc::new(stderr::LastLine::default());
    let mut stderr_done = tokio::spawn({
        let (label, last) = (label.clone(), last_stderr.clone());
        async move { stderr::forward(stderr, &label, pid, &masks, &last).await }
    });

    // Until the handshake succeeds, a failure or a cancelled start must not leave the process behind.
    let stop_on_failure = StopOnDrop(Some(control.clone()));
    let (lines, health) = LineReader::new(stdout, options.max_message_bytes, label);
    let client = RpcClient::new(lines, stdin);
    let (why, timed_out) =
        match tokio::time::timeout(options.start_timeout, initialize(&client, options.declares)).await {
            Ok(Ok(info)) => {
                stop_on_failure.disarm();
                let info = Arc::new(info);
                let link = Link::Local { control, client, health };
                let _counted = options.connections.open(super::transport_index(None));
                return Ok(UpstreamProcess { link, info, max_message_bytes: options.max_message_bytes, _counted });
            }
            Ok(Err(error)) => {
                let ended = control.exit_report(Duration::from_millis(200)).await;
                (format!("`{}` did not initialize: {error} (process {pid}: {ended})", spec.command), false)
            }
            Err(_elapsed) => {
                let seconds = options.start_timeout.as_secs_f64();
                let why = format!(
                    "`{}` did not answer `initialize` within {seconds} seconds (upstream_pool.start_timeout_seconds)",
                    spec.command
                );
                (why, true)
            }
        };
    // Killed now; its stderr ends with it (or soon after, when helpers of its own still hold the pipe).
    drop(stop_on_failure);
    let _ = tokio::time::timeout(STDERR_PATIENCE, &mut stderr_done).await;
    let message = match last_stderr.get() {
        Some((line, _)) if stderr::is_certificate_problem(&line) => format!(
            "{why}; on stderr: {line} (a TLS certificate the server does not trust: behind a TLS-inspecting proxy or \
             with a private CA, give the server the CA file, e.g. `\"env\": {{\"NODE_EXTRA_CA_CERTS\": \"/path/ca.pem\"}}` \
             for Node or SSL_CERT_FILE for Python, or `\"inherit_env\": [\"NODE_EXTRA_CA_CERTS\", \"HTTPS_PROXY\"]` to pass \
             the gateway's own)"
        ),
        Some((line, true)) => format!("{why}; its last line on stderr: {line}"),
        Some((line, false)) => format!("{why}; on stderr: {line}"),
        None => format!("{why}; it wrote nothing on stderr"),
    };
    Err(StartFailure { error: UpstreamError::Start(message), timed_out })
}

/// What is masked in the server's stderr lines: [`ServerSpec::masked_values`] and the values of the variables it
/// inherits from the gateway's environment (`inherit_env`: an inherited `GITHUB_TOKEN` is as secret as a configured
/// one).
fn stderr_masks(spec: &ServerSpec, environment: &[(OsString, OsString)]) -> stderr::Masks {
    let inherited = environment
        .iter()
        .filter(|(name, _)| spec.inherit_env.iter().any(|listed| name.as_os_str() == listed.as_str()))
        .map(|(_, value)| value.to_string_lossy().into_owned());
    stderr::Masks::new(spec.masked_values().map(str::to_string).chain(inherited))
}

/// The MCP handshake: `initialize`, then `notifications/initialized`. The gateway declares what it can relay to the
/// client of a call (`sampling`, `elicitation`, `roots`: see [`super::relay`]); a request of the server's that no
/// caller can answer gets a JSON-RPC error.
async fn initialize<W>(client: &RpcClient<W>, declares: super::Declared) -> Result<ServerPeerInfo, String>
where
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let params = json!({
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": declares.capabilities(),
        "clientInfo": {"name": "mcpgw", "version": crate::VERSION},
    });
    let result = client.request("initialize", params).await.map_err(|error| match error {
        RpcError::Closed => "the connection closed".to_string(),
        RpcError::Server { code, message } => format!("it answered with JSON-RPC error {code}: {message}"),
    })?;
    let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
    if !ACCEPTED_VERSIONS.contains(&version) {
        return Err(format!("it answered with protocol version {version:?}, which the gateway does not speak"));
    }
    let info = serde_json::from_value::<ServerPeerInfo>(result)
        .map_err(|error| format!("its initialize result is not valid: {error}"))?;
    client.notify("notifications/initialized").await.map_err(|_| "the connection closed".to_string())?;
    Ok(info)
}

/// Opens the gateway's session with a remote server within `options.start_timeout`: the HTTP client (its TLS files
/// read now), then the transport's connection and the MCP handshake.
async fn start_remote(remote: &RemoteSpec, options: &StartOptions) -> Result<UpstreamProcess, StartFailure> {
    let failed = |message: String, timed_out| StartFailure { error: UpstreamError::Start(message), timed_out };
    let url = reqwest::Url::parse(&remote.url).map_err(|e| failed(format!("config.url is not a URL: {e}"), false))?;
    let shown = remote::shown(&url);
    let http = remote::client(&url, remote.tls.as_ref(), options.connect_timeout)
        .await
        .map_err(|e| failed(format!("no HTTP client for {shown}: {e}"), false))?;
    let endpoint = Endpoint::new(http, &remote.headers, remote.bearer.clone());
    let max_message_bytes = options.max_message_bytes;
    let opening = async {
        if remote.sse {
            let label = options.label.clone();
            let session = sse_client::connect(endpoint, url.clone(), max_message_bytes, label)
                .await
                .map_err(|e| e.to_string())?;
            let info = initialize(&session.client, options.declares).await?;
            Ok::<_, String>((Link::Sse(session), Arc::new(info)))
        } else {
            let rpc = HttpRpc::new(endpoint, url.clone(), max_message_bytes)
                .map_err(|e| e.to_string())?
                .declaring(options.declares)
                .speaking(Revision::of(remote.revision.as_deref()));
            let info = rpc.initialize().await.map_err(|e| e.to_string())?;
            Ok((Link::Remote(Arc::new(rpc)), info))
        }
    };
    match tokio::time::timeout(options.start_timeout, opening).await {
        Ok(Ok((link, info))) => {
            let transport = super::transport_index(Some(remote));
            tracing::info!(server = %options.label, url = %shown, transport = super::TRANSPORTS[transport],
                "remote upstream session opened");
            let _counted = options.connections.open(transport);
            Ok(UpstreamProcess { link, info, max_message_bytes, _counted })
        }
        Ok(Err(error)) => Err(failed(format!("{shown} did not initialize: {error}"), false)),
        Err(_) => Err(failed(
            format!(
                "{shown} did not answer `initialize` within {} seconds (upstream_pool.start_timeout_seconds)",
                options.start_timeout.as_secs_f64()
            ),
            true,
        )),
    }
}

/// Kills a process whose start did not complete.
struct StopOnDrop(Option<Arc<ProcessControl>>);

impl StopOnDrop {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(control) = self.0.take() {
            control.request_stop(StopMode::Kill);
        }
    }
}
