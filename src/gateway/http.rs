//! The streamable HTTP front: `/mcp` and `/mcp/` on the gateway listener, rmcp's `StreamableHttpService` behind
//! [`GatewayAuthLayer`]. rmcp speaks every protocol revision (sessions through `initialize` for 2024-11-05 to
//! 2025-11-25, stateless for 2026-07-28) and answers JSON or SSE as the client's `Accept` allows. Its own `Host`
//! check is switched off because ours runs first and follows config reloads.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower::Layer;

use super::GatewayContext;
use super::fast_path::FastToolCallLayer;
use super::handler::GatewayHandler;
use crate::gateway::middleware::auth::{GatewayAuthLayer, jsonrpc_error};
use crate::gateway::middleware::drain::DrainLayer;
use crate::gateway::middleware::jsonrpc::JsonRpcGuardLayer;
use crate::gateway::middleware::limits::gateway_front;
use crate::gateway::middleware::rate_limit::RateLimitLayer;
use crate::gateway::middleware::request_metrics::RequestMetricsLayer;

/// What rmcp may buffer of a body: the JSON-RPC guard has already held it to `limits.max_request_body_bytes`, which
/// is at most this.
const PROTOCOL_BODY_CAP: usize = 256 * 1024 * 1024;

/// The gateway router. Cancelling `sessions` ends every MCP session and stream (used at the end of a drain).
pub fn router(ctx: Arc<GatewayContext>, sessions: CancellationToken) -> Router {
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_json_response(true)
        .with_max_request_body_bytes(PROTOCOL_BODY_CAP)
        .with_cancellation_token(sessions.clone());
    // Idle sessions are ended by our registry's sweeper (`limits.session_idle_timeout_seconds`, which follows
    // reloads), not by rmcp's own keep-alive: calls answered on the fast route never reach rmcp's session worker,
    // so rmcp would take a busy session for an idle one.
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = None;
    let manager = Arc::new(manager);
    sweep_idle_sessions(Arc::clone(&ctx), Arc::clone(&manager), sessions.clone());
    let handler_ctx = Arc::clone(&ctx);
    let protocol =
        StreamableHttpService::new(move || Ok(GatewayHandler::http(Arc::clone(&handler_ctx))), manager, config);
    // Outermost first: request metrics, header size, Host/Origin and authentication (with the session check), the
    // per-key rate limit, JSON-RPC well-formedness, the drain (it needs the session check and the parsed body: an
    // `initialize` is refused, a session's request is served), the fast route for plain tool calls, then the
    // protocol. Built innermost first below.
    let protocol =
        tower::util::MapResponseLayer::new(|r: axum::http::Response<_>| r.map(axum::body::Body::new)).layer(protocol);
    // A plain tools/call is answered next to rmcp rather than through it (see fast_path.rs).
    let protocol = FastToolCallLayer::new(Arc::clone(&ctx), sessions).layer(protocol);
    let service = DrainLayer::new(Arc::clone(&ctx)).layer(protocol);
    let service = JsonRpcGuardLayer::new(Arc::clone(&ctx)).layer(service);
    let service = RateLimitLayer::new(Arc::clone(&ctx)).layer(service);
    let service = GatewayAuthLayer::new(Arc::clone(&ctx)).layer(service);
    let service = axum::middleware::from_fn_with_state(Arc::clone(&ctx), gateway_front).layer(service);
    let service = RequestMetricsLayer::new(Arc::clone(ctx.store.metrics())).layer(service);
    Router::new().route_service("/mcp", service.clone()).route_service("/mcp/", service).fallback(|| async {
        let data = json!({"status": "error", "error_code": "NOT_FOUND", "message": "the MCP endpoint is /mcp/"});
        jsonrpc_error(StatusCode::NOT_FOUND, -32601, "Not found", data)
    })
}

/// Ends the sessions idle for `limits.session_idle_timeout_seconds`: forgotten by the registry (so their id gets 404)
/// and closed in rmcp (so their worker and streams end). Runs until `sessions` is cancelled.
fn sweep_idle_sessions(ctx: Arc<GatewayContext>, manager: Arc<LocalSessionManager>, sessions: CancellationToken) {
    tokio::spawn(async move {
        loop {
            let idle = ctx.store.snapshot().settings.limits.session_idle_timeout;
            // Often enough that a session ends at most about a quarter of its idle limit late (between 0.25 s and 30 s).
            let every = (idle / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
            tokio::select! {
                _ = sessions.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
            for id in ctx.sessions.expire(idle) {
                ctx.store.metrics().limit_hit("session_idle");
                tracing::info!(idle_seconds = idle.as_secs_f64(), "closing an idle MCP session");
                let id: Arc<str> = Arc::from(id.as_str());
                if let Err(e) = manager.close_session(&id).await {
                    tracing::debug!(error = %e, "closing an idle session");
                }
            }
        }
    });
}
