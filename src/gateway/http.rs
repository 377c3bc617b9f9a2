//! The streamable HTTP front: `/mcp` and `/mcp/` on the gateway listener, rmcp's `StreamableHttpService` behind the
//! layers of [`super::middleware`], built once in [`router`], outermost first, with why each sits where it does.
//!
//! rmcp speaks every protocol revision (sessions through `initialize` for 2024-11-05 to 2025-11-25, stateless for
//! 2026-07-28) and answers JSON or SSE as the client's `Accept` allows. Its own `Host` check is switched off because
//! ours runs first and follows config reloads.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use futures_util::future::BoxFuture;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;

use super::GatewayContext;
use super::fast_path::FastToolCallLayer;
use super::handler::GatewayHandler;
use super::middleware::step::StepLayer;
use super::middleware::{
    admission, drain, jsonrpc, limits, origin, param_headers, quota_status, request_metrics, sessions,
};
use super::transparent::task_route::TaskRouteLayer;
use crate::error::{ErrorCode, GatewayError, jsonrpc_error};

/// `GET /.well-known/oauth-protected-resource[/mcp]`: the gateway's protected resource metadata (RFC 9728) under the
/// `oauth` provider; 404 under the others. Served behind the `Host`/`Origin` step like `/mcp/` (contract 14): the
/// document names the gateway's URL, which a `Host` the gateway does not answer to must not choose.
fn protected_resource(ctx: &GatewayContext, headers: &axum::http::HeaderMap) -> Response<Body> {
    let snapshot = ctx.store.snapshot();
    let Some(config) = snapshot.settings.client_oauth.as_deref() else {
        return GatewayError::new(ErrorCode::NotFound, "the gateway does not use OAuth for its clients").response(None);
    };
    let base = crate::auth::http::public_base(config, headers);
    let body = crate::auth::oauth::resource_metadata(config, &base).to_string();
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
    response.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("max-age=300"));
    response
}

/// What rmcp may buffer of a body: the JSON-RPC guard has already held it to `limits.max_request_body_bytes`, which
/// is at most this.
const PROTOCOL_BODY_CAP: usize = 256 * 1024 * 1024;

/// The gateway router. Cancelling `sessions` ends every MCP session and stream (used at the end of a drain).
pub fn router(ctx: Arc<GatewayContext>, sessions: CancellationToken) -> Router {
    let mut config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_json_response(true)
        .with_max_request_body_bytes(PROTOCOL_BODY_CAP)
        .with_cancellation_token(sessions.clone());
    // A session taken over from another replica is replayed from its sealed id (see gateway/session_id.rs).
    config.session_store = Some(Arc::new(ctx.sessions.restore.clone()));
    // Idle sessions are ended by our registry's sweeper (`limits.session_idle_timeout_seconds`, which follows
    // reloads), not by rmcp's own keep-alive: calls answered on the fast route never reach rmcp's session worker,
    // so rmcp would take a busy session for an idle one.
    let mut manager = LocalSessionManager::default();
    manager.session_config.keep_alive = None;
    let manager = Arc::new(manager);
    sweep_idle_sessions(Arc::clone(&ctx), Arc::clone(&manager), sessions.clone());
    // rmcp's streams end with `sessions` (its cancellation token); the `GET` streams the session layer serves, too.
    let (streams, stopping) = (Arc::downgrade(&ctx), sessions.clone());
    tokio::spawn(async move {
        stopping.cancelled().await;
        if let Some(ctx) = streams.upgrade() {
            ctx.sessions.end_streams();
        }
    });
    let handler_ctx = Arc::clone(&ctx);
    let protocol = Protocol(Arc::new(StreamableHttpService::new(
        move || Ok(GatewayHandler::http(Arc::clone(&handler_ctx))),
        manager,
        config,
    )));
    // The request path, outermost first; each layer says why it sits where it does.
    let stack = ServiceBuilder::new()
        // Outermost, so that every answer is counted and timed, refusals included.
        .layer(request_metrics::RequestMetricsLayer::new(Arc::clone(ctx.store.metrics())))
        // Oversized headers are refused before anything reads them.
        .layer(StepLayer(limits::HeaderSize(Arc::clone(&ctx))))
        // DNS-rebinding protection comes before credentials: it holds whoever the caller claims to be.
        .layer(StepLayer(origin::HostAndOrigin(Arc::clone(&ctx))))
        // Who is calling, their rate limit (the step the stdio front shares) and their key's budget (requests in
        // flight, answers not taken; middleware/budgets.rs): nothing unauthenticated, or over budget, reads a body.
        .layer(StepLayer(admission::Admit(Arc::clone(&ctx))))
        // One well-formed JSON-RPC message within the body limits, parsed once for the layers below.
        .layer(StepLayer(jsonrpc::JsonRpcGuard(Arc::clone(&ctx))))
        // A batch takes a rate-limit cell per upstream call too; only the parsed message says how many.
        .layer(StepLayer(admission::CallBudget(Arc::clone(&ctx))))
        // Session ids checked against the caller's key, `max_sessions` (it needs the parsed `initialize`).
        .layer(StepLayer(sessions::Sessions(Arc::clone(&ctx))))
        // A stateless call's Mcp-Param-* headers against its body: it needs the caller (its exposed tools) and the
        // parsed message, and must come before anything runs the call (SEP-2243).
        .layer(StepLayer(param_headers::ParamHeaders(Arc::clone(&ctx))))
        // The drain needs a valid session and the parsed message; it counts the work in flight from here.
        .layer(drain::DrainLayer::new(Arc::clone(&ctx)))
        // Tasks (contract 15) next to rmcp, whose types cannot carry the 2025-11-25 shapes; before the fast route,
        // which leaves task-augmented calls alone (see transparent/task_route.rs).
        .layer(TaskRouteLayer(Arc::clone(&ctx)))
        // A stateless single call over a quota answers 429: the routes below mark it (quota_status.rs).
        .layer(quota_status::QuotaStatusLayer)
        // A plain tools/call is answered next to rmcp rather than through it (see fast_path.rs).
        .layer(FastToolCallLayer::new(Arc::clone(&ctx), sessions))
        // rmcp: every other message of the protocol, then the handler (gateway/handler/).
        .service(protocol);
    let metadata = Arc::clone(&ctx);
    let metadata = axum::routing::get(move |headers: axum::http::HeaderMap| {
        let ctx = Arc::clone(&metadata);
        async move { protected_resource(&ctx, &headers) }
    })
    .layer(StepLayer(origin::HostAndOrigin(Arc::clone(&ctx))));
    let (connect_ctx, callback_ctx) = (Arc::clone(&ctx), Arc::clone(&ctx));
    let connect = axum::routing::get(move |state| super::oauth_routes::connect(Arc::clone(&connect_ctx), state))
        .layer(StepLayer(origin::HostAndOrigin(Arc::clone(&ctx))));
    let callback = axum::routing::get(move |query| super::oauth_routes::callback(Arc::clone(&callback_ctx), query))
        .layer(StepLayer(origin::HostAndOrigin(Arc::clone(&ctx))));
    Router::new()
        .route_service("/mcp", stack.clone())
        .route_service("/mcp/", stack)
        // RFC 9728 metadata for clients of the `oauth` provider; public, like the issuer's own documents.
        .route("/.well-known/oauth-protected-resource", metadata.clone())
        .route("/.well-known/oauth-protected-resource/mcp", metadata)
        // The OAuth broker of users' own upstream tokens (contract 16): for browsers, the sealed state their
        // credential.
        .route("/oauth/connect/{state}", connect)
        .route(crate::credentials::broker::CALLBACK_PATH, callback)
        .fallback(|| async { GatewayError::new(ErrorCode::NotFound, "the MCP endpoint is /mcp/").response(None) })
}

/// rmcp's protocol service behind an `Arc`: the layers above clone the rest of the stack for every request, and
/// rmcp's own clone copies its whole configuration (a cancellation token's clone takes a lock).
#[derive(Clone)]
struct Protocol(Arc<StreamableHttpService<GatewayHandler, LocalSessionManager>>);

impl tower::Service<Request<Body>> for Protocol {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let protocol = Arc::clone(&self.0);
        Box::pin(async move { Ok(json_refusal(protocol.handle(req).await.map(Body::new)).await) })
    }
}

/// rmcp answers a few malformed requests (a wrong `Content-Type` or `Accept`, say) with a plain-text 4xx; the gateway
/// answers every refusal as a JSON-RPC error in a JSON body, so such an answer is rewritten, keeping its status.
async fn json_refusal(response: Response<Body>) -> Response<Body> {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") || v.starts_with("text/event-stream"));
    if !status.is_client_error() || is_json {
        return response;
    }
    // rmcp's texts are short; a longer one is cut.
    let text = axum::body::to_bytes(response.into_body(), 4096).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_string();
    let code = match status {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        StatusCode::NOT_ACCEPTABLE => ErrorCode::NotAcceptable,
        _ => ErrorCode::InvalidRequest,
    };
    let answer = GatewayError::new(code, text).answer();
    jsonrpc_error(status, -32600, status.canonical_reason().unwrap_or("Invalid Request"), answer, None)
}

/// Ends the sessions idle for `limits.session_idle_timeout_seconds`: forgotten by the registry (so their id gets 404)
/// and closed in rmcp (so their worker and streams end). Sends the sessions quiet for `limits.session_dormant_seconds`
/// to sleep: their rmcp worker ends, the registry keeps them, and their next request wakes them (see
/// `gateway/sessions`). Runs until `sessions` is cancelled.
fn sweep_idle_sessions(ctx: Arc<GatewayContext>, manager: Arc<LocalSessionManager>, sessions: CancellationToken) {
    tokio::spawn(async move {
        loop {
            let limits = &ctx.store.snapshot().settings.limits;
            let (idle, dormant) = (limits.session_idle_timeout, limits.session_dormant);
            // Often enough that a session ends (or sleeps) at most about a quarter of its limit late (between 0.25 s
            // and 30 s).
            let every = (idle.min(dormant) / 4).clamp(Duration::from_millis(250), Duration::from_secs(30));
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
            let sleepy = ctx.sessions.to_sleep(dormant);
            // In batches: a request for a session going dormant waits for its batch only.
            for batch in sleepy.chunks(256) {
                for id in batch {
                    let id: Arc<str> = Arc::from(id.as_str());
                    if let Err(e) = manager.close_session(&id).await {
                        tracing::debug!(error = %e, "ending the worker of a dormant session");
                    }
                }
                ctx.sessions.slept(batch);
            }
            if !sleepy.is_empty() {
                tracing::debug!(sessions = sleepy.len(), "MCP sessions gone dormant");
            }
        }
    });
}
