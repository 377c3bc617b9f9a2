//! The stdio front: MCP on stdin and stdout, for local clients that start the gateway as a subprocess.
//!
//! `GW_TOOL_EXPOSURE` asks for a view of the servers (`gateway`, `transparent`, `both`: contract 8), as the
//! `X-Mcpgw-Tool-Exposure` header does over HTTP.
//!
//! Credentials come from `GW_GATEWAY_KEY`, `GW_PROJECT_ID` and `GW_USER_ID` and are checked on every tool call, so
//! with bad credentials every tool answers `AUTH_FAILED` (the client can still list the tools). Nothing but MCP
//! messages goes to stdout: logs go to stderr, and upstream processes never inherit our stdout.
//!
//! rmcp's handler serves the connection as one session, behind a pump (`stdio/pipe.rs`) that reads stdin itself:
//! the messages about tasks, which rmcp's types cannot carry, are answered by the route of tasks (`stdio/tasks.rs`,
//! the counterpart of the HTTP front's), every other line reaches rmcp unchanged.

mod pipe;
mod tasks;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;

use super::GatewayContext;
use super::handler::GatewayHandler;
use crate::auth::Credentials;
use pipe::{CLOSING_PATIENCE, Pump};
use tasks::StdioTasks;

/// Ends the stdio connection's session when dropped.
struct SessionEnds(Arc<GatewayContext>, Arc<str>);

impl Drop for SessionEnds {
    fn drop(&mut self) {
        self.0.sessions.close(&self.1);
    }
}

/// The stdio credentials from the environment.
pub fn credentials_from_env() -> Credentials {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    Credentials {
        key: var("GW_GATEWAY_KEY").unwrap_or_default(),
        project_id: var("GW_PROJECT_ID"),
        user_id: var("GW_USER_ID"),
    }
}

/// Serves MCP on stdin/stdout until the client closes stdin or `shutdown` completes; then tool calls still running get
/// up to `grace` to finish and answer before the session ends.
pub async fn serve(
    ctx: Arc<GatewayContext>,
    shutdown: impl Future<Output = ()>,
    grace: std::time::Duration,
) -> Result<(), String> {
    let credentials = credentials_from_env();
    if credentials.key.is_empty() {
        tracing::warn!("GW_GATEWAY_KEY is not set; every tool will answer AUTH_FAILED");
    }
    let exposure = std::env::var("GW_TOOL_EXPOSURE").ok().filter(|v| !v.is_empty());
    let handler = GatewayHandler::stdio(Arc::clone(&ctx), credentials.clone(), exposure.clone());
    let session = handler.stdio_session().unwrap_or_else(|| Arc::from("stdio"));
    // However the connection ends, its session ends with it (the drain then does not wait for it).
    let _ends = SessionEnds(Arc::clone(&ctx), Arc::clone(&session));
    let tasks = Arc::new(StdioTasks::new(Arc::clone(&ctx), credentials, exposure, session));
    let (stdin, stdout) = rmcp::transport::io::stdio();
    let (pump, rmcp_end) = Pump::start(Arc::clone(&ctx), tasks, stdin, stdout);
    tokio::pin!(shutdown);
    let running = tokio::select! {
        started = handler.serve(rmcp_end) => match started {
            Ok(running) => running,
            // A client that closes stdin before initializing has nothing more to say.
            Err(e) => {
                tracing::info!(error = %e, "stdio client ended before initialization");
                pump.finish(Duration::ZERO).await;
                return Ok(());
            }
        },
        () = &mut shutdown => {
            pump.finish(Duration::ZERO).await;
            return Ok(());
        }
    };
    let token = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        ended = &mut waiting => {
            // rmcp's input ended with stdin: the route's answers still running finish as rmcp's did.
            pump.finish(CLOSING_PATIENCE).await;
            ended.map(|_| ()).map_err(|e| format!("stdio session failed: {e}"))
        }
        () = &mut shutdown => {
            if tokio::time::timeout(grace, ctx.in_flight.wait_idle()).await.is_err() {
                tracing::warn!("grace period over; cancelling the stdio calls still running");
            }
            // The last answers leave through the transport's task right after their handlers return; let it run.
            for _ in 0..16 {
                tokio::task::yield_now().await;
            }
            token.cancel();
            let _ = waiting.await;
            pump.finish(Duration::ZERO).await;
            Ok(())
        }
    }
}
