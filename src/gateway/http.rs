//! The streamable HTTP front: `/mcp` and `/mcp/` on the gateway listener, rmcp's `StreamableHttpService` behind
//! [`GatewayAuthLayer`]. rmcp speaks every protocol revision (sessions through `initialize` for 2024-11-05 to
//! 2025-11-25, stateless for 2026-07-28) and answers JSON or SSE as the client's `Accept` allows. Its own `Host`
//! check is switched off because ours runs first and follows config reloads.

use std::sync::Arc;

use axum::Router;
use axum::http::StatusCode;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tower::Layer;

use super::GatewayContext;
use super::fast_path::FastToolCallLayer;
use super::handler::GatewayHandler;
use crate::middleware::auth::{GatewayAuthLayer, jsonrpc_error};
use crate::middleware::jsonrpc::JsonRpcGuardLayer;
use crate::middleware::rate_limit::RateLimitLayer;
use crate::middleware::request_metrics::RequestMetricsLayer;

/// Largest MCP request body (contract section 4).
pub const MAX_REQUEST_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The gateway router. Cancelling `sessions` ends every MCP session and stream (used at the end of a drain).
pub fn router(ctx: Arc<GatewayContext>, sessions: CancellationToken) -> Router {
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_json_response(true)
        .with_max_request_body_bytes(MAX_REQUEST_BODY_BYTES)
        .with_cancellation_token(sessions.clone());
    let handler_ctx = Arc::clone(&ctx);
    let protocol = StreamableHttpService::new(
        move || Ok(GatewayHandler::http(Arc::clone(&handler_ctx))),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    // Outermost first: request metrics, Host/Origin and authentication, the per-key rate limit, JSON-RPC
    // well-formedness, the fast route for plain tool calls, then the protocol. Built innermost first below.
    let protocol =
        tower::util::MapResponseLayer::new(|r: axum::http::Response<_>| r.map(axum::body::Body::new)).layer(protocol);
    // A plain tools/call is answered next to rmcp rather than through it (see fast_path.rs).
    let protocol = FastToolCallLayer::new(Arc::clone(&ctx), sessions).layer(protocol);
    let service = JsonRpcGuardLayer::new(MAX_REQUEST_BODY_BYTES).layer(protocol);
    let service = RateLimitLayer::new(Arc::clone(&ctx)).layer(service);
    let service = GatewayAuthLayer::new(Arc::clone(&ctx)).layer(service);
    let service = RequestMetricsLayer::new(Arc::clone(ctx.store.metrics())).layer(service);
    Router::new().route_service("/mcp", service.clone()).route_service("/mcp/", service).fallback(|| async {
        let data = json!({"status": "error", "error_code": "NOT_FOUND", "message": "the MCP endpoint is /mcp/"});
        jsonrpc_error(StatusCode::NOT_FOUND, -32601, "Not found", data)
    })
}
