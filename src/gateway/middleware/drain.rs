//! The drain's one decision on the gateway (contract section 7): who is still served after SIGTERM, and what counts
//! as work in flight.
//!
//! While the gateway drains (`GatewayContext::draining`), in the grace period:
//! - a request in an MCP session that exists (its `Mcp-Session-Id` has passed the session layer's check against the key,
//!   so a session id that reaches this layer is a valid one) is served as usual: `POST`, the `GET` stream, `DELETE`;
//! - an `initialize` that would open a session gets 503 `SHUTTING_DOWN`;
//! - any other request (stateless 2026-07-28, no session, or a session id that is unknown or has expired) is served
//!   while other requests are still in flight, and gets 503 `SHUTTING_DOWN` once none is.
//!
//! The refusal carries `Connection: close`, so the client retries elsewhere rather than on this connection.
//!
//! The decision is [`refusal`]. The layer that applies it sits after the JSON-RPC guard, which has parsed the body (an
//! `initialize` is known only then) and after admission: a draining gateway still answers 401 to a request
//! without a valid key. The session layer ([`super::sessions`]) asks [`refusal`] too, for a session id it does not
//! know (404 `SESSION_NOT_FOUND` while work is in flight, 503 after), since such a request never reaches this layer.
//!
//! The layer also counts the work in flight that the drain waits for: a `POST`'s answer counts until its body has been
//! sent (for SSE, until the stream ends), so the drain never ends a session under an answer on its way. `GET` streams
//! are open-ended and are not counted (the drain ends them).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{Method, Request, Response};
use futures_util::future::BoxFuture;
use serde_json::Value;
use tower::{Layer, Service};

use super::jsonrpc::ParsedMessage;
use super::sessions::SESSION_HEADER;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::{GatewayContext, OwnedInFlightGuard};

/// What the drain needs to know about a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// It carries a session id that the session layer found valid for its key.
    pub in_session: bool,
    /// It is an `initialize` outside a session.
    pub opens_session: bool,
    /// Other requests are in flight now (not counting this one).
    pub others_in_flight: bool,
}

/// Whether a draining gateway still serves the request (see the module documentation).
pub fn served_while_draining(request: Standing) -> bool {
    !request.opens_session && (request.in_session || request.others_in_flight)
}

/// The answer for `request` when the gateway is draining and does not serve it; `None` when it goes on. `id`: the
/// JSON-RPC id of the request, when known.
pub fn refusal(ctx: &GatewayContext, request: Standing, id: Option<&Value>) -> Option<Response<Body>> {
    if !ctx.draining.load(Ordering::SeqCst) || served_while_draining(request) {
        return None;
    }
    if let Some(left_out) = ctx.refusals.admit() {
        tracing::info!(?request, left_out, "request refused: the gateway is draining");
    }
    Some(shutting_down(id))
}

/// A request outside any valid session, as the drain sees it.
pub fn outside_session(ctx: &GatewayContext) -> Standing {
    Standing { in_session: false, opens_session: false, others_in_flight: ctx.in_flight.count() > 0 }
}

/// 503 `SHUTTING_DOWN` with `Connection: close`, with the JSON-RPC id of the request when it has one.
fn shutting_down(id: Option<&Value>) -> Response<Body> {
    let message = "the gateway is shutting down; retry on another instance";
    GatewayError::new(ErrorCode::ShuttingDown, message).close_connection().response(id)
}

/// Adds [`Drain`] in front of a service.
#[derive(Clone)]
pub struct DrainLayer {
    ctx: Arc<GatewayContext>,
}

impl DrainLayer {
    pub fn new(ctx: Arc<GatewayContext>) -> DrainLayer {
        DrainLayer { ctx }
    }
}

impl<S> Layer<S> for DrainLayer {
    type Service = Drain<S>;
    fn layer(&self, inner: S) -> Drain<S> {
        Drain { inner, ctx: Arc::clone(&self.ctx) }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct Drain<S> {
    inner: S,
    ctx: Arc<GatewayContext>,
}

impl<S> Service<Request<Body>> for Drain<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let ctx = Arc::clone(&self.ctx);
        Box::pin(async move {
            if ctx.draining.load(Ordering::SeqCst) {
                let message = req.extensions().get::<ParsedMessage>().map(|parsed| &parsed.0);
                let in_session = req.headers().contains_key(SESSION_HEADER);
                let request = Standing {
                    in_session,
                    opens_session: !in_session
                        && message.and_then(|m| m.get("method")).and_then(Value::as_str) == Some("initialize"),
                    others_in_flight: ctx.in_flight.count() > 0,
                };
                if let Some(refused) = refusal(&ctx, request, message.and_then(|m| m.get("id"))) {
                    return Ok(refused);
                }
            }
            let in_flight = (req.method() == Method::POST).then(|| OwnedInFlightGuard::enter(&ctx));
            let response = inner.call(req).await?;
            Ok(match in_flight {
                Some(guard) => response.map(|body| Body::new(TrackedBody { inner: body, _guard: guard })),
                None => response,
            })
        })
    }
}

/// A response body that holds an in-flight guard until it has been sent or dropped.
struct TrackedBody {
    inner: Body,
    _guard: OwnedInFlightGuard,
}

impl http_body::Body for TrackedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(in_session: bool, opens_session: bool, others_in_flight: bool) -> Standing {
        Standing { in_session, opens_session, others_in_flight }
    }

    #[test]
    fn sessions_are_served_new_sessions_refused_and_the_rest_while_work_remains() {
        assert!(served_while_draining(admission(true, false, false)), "a session's request, nothing in flight");
        assert!(served_while_draining(admission(true, false, true)));
        assert!(!served_while_draining(admission(false, true, true)), "initialize, even with work in flight");
        assert!(!served_while_draining(admission(false, true, false)));
        assert!(served_while_draining(admission(false, false, true)), "stateless while work remains");
        assert!(!served_while_draining(admission(false, false, false)), "stateless once the work is done");
    }
}
