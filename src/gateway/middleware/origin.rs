//! `Host` and `Origin` before anything else (403 `HOST_NOT_ALLOWED` / `ORIGIN_NOT_ALLOWED`): they protect a local
//! gateway from DNS rebinding whoever the caller claims to be. The lists come from the current snapshot, so a reload
//! changes them; the checks themselves are [`crate::auth::http::check_host_and_origin`].

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::auth::http::check_host_and_origin;
use crate::gateway::GatewayContext;

/// The layer's function, for `axum::middleware::from_fn_with_state`.
pub async fn check_origin(State(ctx): State<Arc<GatewayContext>>, req: Request, next: Next) -> Response {
    if let Err(refused) = check_host_and_origin(req.headers(), &ctx.store.snapshot().settings) {
        tracing::info!(error_code = %refused.code, reason = %refused.message, "gateway request refused");
        return refused.response(None);
    }
    next.run(req).await
}
