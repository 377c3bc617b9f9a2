//! `Host` and `Origin` before anything else (403 `HOST_NOT_ALLOWED` / `ORIGIN_NOT_ALLOWED`): they protect a local
//! gateway from DNS rebinding whoever the caller claims to be. The lists come from the current snapshot, so a reload
//! changes them; the checks themselves are [`crate::auth::http::check_host_and_origin`].

use std::sync::Arc;

use std::future::Future;

use axum::extract::Request;
use axum::response::Response;

use super::step::{Next, Step, forward};
use crate::auth::http::check_host_and_origin;
use crate::gateway::GatewayContext;
use crate::telemetry::refusals::bounded;

/// The longest reason a refusal record shows, in characters.
const MAX_REASON_CHARS: usize = 256;

/// The step: 403 for a `Host` or `Origin` that is not allowed.
#[derive(Clone)]
pub struct HostAndOrigin(pub Arc<GatewayContext>);

impl Step for HostAndOrigin {
    fn run<S: Next>(&self, req: Request, next: S) -> impl Future<Output = Response> + Send + 'static {
        check_origin(Arc::clone(&self.0), req, next)
    }
}

async fn check_origin(ctx: Arc<GatewayContext>, req: Request, next: impl Next) -> Response {
    if let Err(refused) = check_host_and_origin(req.headers(), &ctx.store.snapshot().settings) {
        // The message quotes the client's header: bounded, and so are the records (contract section 13).
        if let Some(left_out) = ctx.refusals.admit() {
            let reason = bounded(&refused.message, MAX_REASON_CHARS);
            tracing::info!(error_code = %refused.code, reason = %reason, left_out, "gateway request refused");
        }
        return refused.response(None);
    }
    forward(next, req).await
}
