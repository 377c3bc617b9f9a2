//! One upstream server process: starting it and talking to it.
//!
//! [`start`] spawns the server's command with a cleared environment (see `environment.rs`), in a new process group
//! (`process_group(0)`, so the whole group can be signalled), with stdin and stdout piped to rmcp's client through our
//! [`LineTransport`] and stderr piped to the log forwarder. The child itself is handed to its supervisor task
//! (`supervisor.rs`) at once, which owns it until it is reaped. The start then runs the MCP `initialize` handshake and
//! returns an [`UpstreamProcess`]: the rmcp client, the transport's health report and the supervisor's
//! [`ProcessControl`]. A start that fails or is cancelled ends its process; so does dropping an `UpstreamProcess`.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ServerPeerInfo};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceExt};
use tokio::process::Command;
use tokio::sync::watch;

use super::environment::child_environment;
use super::supervisor::{self, ProcessControl, ProcessSet, StopMode};
use super::transport::{LineTransport, StreamHealth};
use super::{ServerSpec, UpstreamError, stderr};

/// A running, initialized upstream: its rmcp client and its control. Dropping it ends the process gracefully.
pub(crate) struct UpstreamProcess {
    control: Arc<ProcessControl>,
    client: RunningService<RoleClient, ClientConfig>,
    health: watch::Receiver<StreamHealth>,
    max_message_bytes: usize,
}

impl UpstreamProcess {
    pub fn pid(&self) -> u32 {
        self.control.pid()
    }

    pub fn control(&self) -> &Arc<ProcessControl> {
        &self.control
    }

    pub fn peer(&self) -> &Peer<RoleClient> {
        self.client.peer()
    }

    /// What the server said about itself in its `initialize` result.
    pub fn server_info(&self) -> Option<Arc<ServerPeerInfo>> {
        self.client.peer_info()
    }

    /// Whether the process has exited or its connection has closed (either way it cannot serve another call).
    pub fn is_gone(&self) -> bool {
        self.control.has_exited() || self.client.peer().is_transport_closed()
    }

    /// The longest message the transport reads from this process.
    pub fn max_message_bytes(&self) -> usize {
        self.max_message_bytes
    }

    /// A fresh watch on the transport's report of bad lines.
    pub fn health(&self) -> watch::Receiver<StreamHealth> {
        self.health.clone()
    }
}

impl Drop for UpstreamProcess {
    fn drop(&mut self) {
        // The rmcp client is dropped right after this, which closes the server's stdin as well.
        self.control.request_stop(StopMode::Graceful);
    }
}

/// What a process start needs besides the spec.
pub(crate) struct StartOptions {
    /// The server's name, for logs.
    pub label: Arc<str>,
    pub max_message_bytes: usize,
}

/// Spawns the server and runs the MCP `initialize` handshake. Cancelling the returned future ends the process.
pub(crate) async fn start(
    spec: &ServerSpec,
    options: &StartOptions,
    processes: &Arc<ProcessSet>,
) -> Result<UpstreamProcess, UpstreamError> {
    let mut command = Command::new(&spec.command);
    command
        .args(&spec.args)
        .env_clear()
        .envs(child_environment(spec, &|name| std::env::var_os(name)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child =
        command.spawn().map_err(|error| UpstreamError::Start(format!("cannot run `{}`: {error}", spec.command)))?;
    let (Some(pid), Some(stdin), Some(stdout), Some(stderr)) =
        (child.id(), child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(UpstreamError::Start(format!("`{}` started without its pipes", spec.command)));
    };
    let label = options.label.clone();
    let Some(control) = supervisor::adopt(child, pid, processes, label.clone()) else {
        return Err(UpstreamError::ShuttingDown);
    };
    tracing::info!(server = %label, pid, command = %spec.command, "upstream process started");
    tokio::spawn({
        let label = label.clone();
        async move { stderr::forward(stderr, &label, pid).await }
    });

    // Until the handshake succeeds, a failure or a cancelled start must not leave the process behind.
    let stop_on_failure = StopOnDrop(Some(control.clone()));
    let (transport, health) = LineTransport::new(stdout, stdin, options.max_message_bytes, label);
    let client = match client_config().serve(transport).await {
        Ok(client) => client,
        Err(error) => {
            let ended = control.exit_report(Duration::from_millis(200)).await;
            return Err(UpstreamError::Start(format!(
                "`{}` did not initialize: {error} (process {pid}: {ended})",
                spec.command
            )));
        }
    };
    stop_on_failure.disarm();
    Ok(UpstreamProcess { control, client, health, max_message_bytes: options.max_message_bytes })
}

/// How the gateway introduces itself to upstream servers.
fn client_config() -> ClientConfig {
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("mcpgw", crate::VERSION))
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
