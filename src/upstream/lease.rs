//! A process lent to one caller, and the one exchange (request, answer) made on it.
//!
//! [`UpstreamPool`](super::UpstreamPool) hands out a [`Lease`]; the caller makes one request through [`Lease::call`];
//! dropping the lease tells the pool the call is done, and whether the exchange left the process unusable (see
//! [`Verdict`]), in which case it ends once no other call uses it. A lease dropped before its exchange finished (the
//! caller gave up) counts as unusable too: the server may still be busy with the abandoned request.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::ServerPeerInfo;
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use super::UpstreamError;
use super::http_client::HttpRpcError;
use super::process::Link;
use super::process::UpstreamProcess;
use super::relay::Relay;
use super::rpc::RpcError;
use super::server_pool::ServerPool;
use super::supervisor::ProcessControl;
use super::supervisor::StopMode;
use super::transport::StreamHealth;
use tokio::sync::watch;

/// How long a failed call waits for the supervisor to report how the process ended, for the error message.
const EXIT_REPORT_PATIENCE: Duration = Duration::from_millis(500);

/// What happens to a process when its lease ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Healthy: back to the idle list.
    Keep,
    /// Unusable (crashed, hung, broke the protocol, or its request was abandoned): end it and its group.
    End(StopMode),
    /// Healthy, but it may not serve another caller: a process shared by every caller that was told one client's
    /// roots (contract 15). It ends gracefully once its calls are done; no restart is counted and none is started in
    /// its place (the next caller starts one).
    Retire,
}

/// One process lent to one caller.
pub(super) struct Lease {
    server: Arc<ServerPool>,
    process: Arc<UpstreamProcess>,
    verdict: Verdict,
}

impl Lease {
    pub(super) fn new(server: Arc<ServerPool>, process: Arc<UpstreamProcess>) -> Lease {
        // Until an exchange finishes, the lease counts as abandoned.
        Lease { server, process, verdict: Verdict::End(StopMode::Kill) }
    }

    /// The leased process's `initialize` result.
    pub(super) fn server_info(&self) -> Arc<ServerPeerInfo> {
        self.process.server_info()
    }

    /// The pool and the process of this lease (a task keeps them, see `task_hold.rs`).
    pub(super) fn parts(&self) -> (Arc<ServerPool>, Arc<UpstreamProcess>) {
        (Arc::clone(&self.server), Arc::clone(&self.process))
    }

    /// Gives the process back without an exchange: it is as healthy as it was lent.
    pub(super) fn unused(&mut self) {
        self.verdict = Verdict::Keep;
    }

    /// Makes one request on the leased process and returns its result, bounded by `deadline` (`timeout` is only
    /// reported). Garbage on the server's stdout during the request fails it at once, as does the process dying.
    ///
    /// With a `relay` the server's messages during the request go to it, and cancelling its token ends the request
    /// at once (the server is told; the process goes back to the pool).
    pub(super) async fn request(
        &mut self,
        deadline: Instant,
        timeout: Duration,
        method: &str,
        params: impl Serialize,
        relay: Option<&Relay>,
    ) -> Result<Value, UpstreamError> {
        let process = &self.process;
        let cancelled = async {
            match relay {
                Some(relay) => relay.cancel.cancelled().await,
                None => std::future::pending().await,
            }
        };
        let (result, verdict) = match process.link() {
            Link::Local { control, client, health } => {
                let _relaying = relay.map(|relay| client.relay_to(relay.messages.clone()));
                let request = client.request(method, params);
                tokio::select! {
                    exchanged = exchange(process, Some(control), health.clone(), deadline, timeout, request) => exchanged,
                    () = cancelled => (Err(UpstreamError::Cancelled), Verdict::Keep),
                }
            }
            Link::Sse(session) => {
                let _relaying = relay.map(|relay| session.client.relay_to(relay.messages.clone()));
                let request = session.client.request(method, params);
                tokio::select! {
                    exchanged = exchange(process, None, session.health.clone(), deadline, timeout, request) => exchanged,
                    () = cancelled => (Err(UpstreamError::Cancelled), Verdict::Keep),
                }
            }
            Link::Remote(remote) => {
                let params = serde_json::to_value(params).unwrap_or(Value::Null);
                let request = remote.request(method, params, relay.map(|relay| &relay.messages));
                tokio::select! {
                    answered = tokio::time::timeout_at(deadline, request) => remote_outcome(answered, timeout),
                    () = cancelled => (Err(UpstreamError::Cancelled), Verdict::Keep),
                }
            }
        };
        self.verdict = match verdict {
            Verdict::Keep if self.server.serves_everyone() && process.told_roots() => Verdict::Retire,
            other => other,
        };
        match result {
            Err(UpstreamError::Crashed(_)) if self.server.shutting_down() => Err(UpstreamError::ShuttingDown),
            other => other,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.server.check_in(&self.process, self.verdict);
    }
}

/// Waits for `request`'s answer while watching the transport for garbage and oversized lines. `control` is the
/// process's; a remote SSE session has none.
async fn exchange(
    process: &UpstreamProcess,
    control: Option<&ProcessControl>,
    mut health: watch::Receiver<StreamHealth>,
    deadline: Instant,
    timeout: Duration,
    request: impl Future<Output = Result<Value, RpcError>>,
) -> (Result<Value, UpstreamError>, Verdict) {
    let before = health.borrow_and_update().clone();
    let mut watching = true;
    let mut answer = std::pin::pin!(tokio::time::timeout_at(deadline, request));
    loop {
        tokio::select! {
            // Health first: a bad line is always read (and counted) before the answer that follows it.
            biased;
            changed = health.changed(), if watching => {
                if changed.is_err() {
                    // The transport is gone; the request is about to fail with `TransportClosed`.
                    watching = false;
                    continue;
                }
                let now = health.borrow_and_update().clone();
                if now.invalid_lines > before.invalid_lines {
                    let message = format!("the server wrote a line that is not MCP on stdout: {:?}", now.last_invalid);
                    return (Err(UpstreamError::Protocol(message)), Verdict::End(StopMode::Kill));
                }
                if now.oversized_lines > before.oversized_lines {
                    // The transport skipped the line and stays in step, so the process is still usable.
                    return (Err(UpstreamError::OutputTooLarge { limit: process.max_message_bytes() }), Verdict::Keep);
                }
            }
            answer = &mut answer => return match answer {
                Err(_elapsed) => (Err(UpstreamError::Timeout(timeout)), Verdict::End(StopMode::Kill)),
                Ok(Ok(value)) => (Ok(value), Verdict::Keep),
                Ok(Err(error)) => service_error(process, control, error).await,
            },
        }
    }
}

/// Maps a failed request to our error, and decides whether the process survives it.
async fn service_error(
    process: &UpstreamProcess,
    control: Option<&ProcessControl>,
    error: RpcError,
) -> (Result<Value, UpstreamError>, Verdict) {
    match (error, control) {
        (RpcError::Server { code, message }, _) => (Err(UpstreamError::Rejected { code, message }), Verdict::Keep),
        (RpcError::Closed, None) => {
            let message = "the remote server's event stream ended during the call (see the gateway's log)".to_string();
            (Err(UpstreamError::Remote(message)), Verdict::End(StopMode::Graceful))
        }
        (RpcError::Closed, Some(control)) => {
            let ended = control.exit_report(EXIT_REPORT_PATIENCE).await;
            let message = format!("process {} ended during the call ({ended})", process.pid());
            (Err(UpstreamError::Crashed(message)), Verdict::End(StopMode::Kill))
        }
    }
}

/// A remote request's outcome, and whether the gateway's session with the server stays in use: a JSON-RPC error
/// keeps it; a transport failure, an HTTP error or an answer that is not MCP ends it (the next call opens a new one).
fn remote_outcome(
    answered: Result<Result<Value, HttpRpcError>, tokio::time::error::Elapsed>,
    timeout: Duration,
) -> (Result<Value, UpstreamError>, Verdict) {
    match answered {
        Err(_elapsed) => (Err(UpstreamError::Timeout(timeout)), Verdict::End(StopMode::Graceful)),
        Ok(Ok(value)) => (Ok(value), Verdict::Keep),
        Ok(Err(HttpRpcError::Server { code, message })) => {
            (Err(UpstreamError::Rejected { code, message }), Verdict::Keep)
        }
        Ok(Err(other)) => (Err(UpstreamError::Remote(other.to_string())), Verdict::End(StopMode::Graceful)),
    }
}
