//! The first check on every gateway request, before authentication: the size of its headers (`limits.max_header_bytes`, 431
//! `HEADERS_TOO_LARGE`), as a [`super::step::Step`].
//!
//! The other limits live where their resource is taken: the body in [`super::jsonrpc`], `max_sessions` in
//! [`super::sessions`], who is
//! still served while the gateway drains in [`super::drain`], session idle expiry in [`crate::gateway::sessions`],
//! header read deadlines in the listener (`app.rs`), the admin API's own header check in `admin/mod.rs`, tool results in the upstream pool.

use std::sync::Arc;

use std::future::Future;

use axum::extract::Request;
use axum::response::Response;

use super::step::{Next, Step, forward};
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;

/// The bytes of a request's line and headers as the client sent them (give or take the line's spacing).
pub fn header_bytes<B>(req: &axum::http::Request<B>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + "HTTP/1.1".len() + 4;
    req.headers().iter().fold(line, |sum, (name, value)| sum + name.as_str().len() + value.len() + 4)
}

pub fn headers_too_large_message(max: usize) -> String {
    format!("the request's headers exceed {max} bytes")
}

/// The step: 431 `HEADERS_TOO_LARGE` over `limits.max_header_bytes`.
#[derive(Clone)]
pub struct HeaderSize(pub Arc<GatewayContext>);

impl Step for HeaderSize {
    fn run<S: Next>(&self, req: Request, next: S) -> impl Future<Output = Response> + Send + 'static {
        check_header_size(Arc::clone(&self.0), req, next)
    }
}

async fn check_header_size(ctx: Arc<GatewayContext>, req: Request, next: impl Next) -> Response {
    let max = ctx.store.snapshot().settings.limits.max_header_bytes;
    if header_bytes(&req) > max {
        ctx.store.metrics().limit_hit("request_headers");
        return GatewayError::new(ErrorCode::HeadersTooLarge, headers_too_large_message(max)).response(None);
    }
    forward(next, req).await
}

#[cfg(test)]
mod tests {
    use super::header_bytes;

    #[test]
    fn header_bytes_grow_with_every_header() {
        let small = axum::http::Request::post("/mcp/").header("a", "b").body(()).unwrap_or_default();
        let big = axum::http::Request::post("/mcp/").header("a", "b".repeat(1000)).body(()).unwrap_or_default();
        assert!(header_bytes(&small) < 40, "{}", header_bytes(&small));
        assert_eq!(header_bytes(&big) - header_bytes(&small), 999);
    }
}
