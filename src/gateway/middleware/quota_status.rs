//! A stateless single call over a quota answers HTTP 429 with `Retry-After` (contract 17).
//!
//! Where the call is the request (no MCP session: the 2026-07-28 revision), the HTTP status can say what the result
//! says, so that clients and proxies that back off on 429 do. The layer puts a [`RetryAfter`] slot into a stateless
//! request's extensions; the route that runs the call (rmcp's handler, which sees the request's parts, or the fast
//! route) marks it with [`note`] when the answer is `QUOTA_EXCEEDED`; the layer then turns the 200 into 429 with the
//! answer's `retry_after_seconds`. The body is unchanged. In a session, and in a batch of several calls, the answer
//! stays 200: the request as a whole was served.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{Extensions, HeaderValue, Request, Response, StatusCode, header};
use futures_util::future::BoxFuture;
use serde_json::Value;
use tower::{Layer, Service};

use super::sessions::SESSION_HEADER;

/// Set by the call's route: the seconds of `Retry-After` (0: not over a quota).
#[derive(Clone, Debug, Default)]
pub struct RetryAfter(Arc<AtomicU64>);

/// Marks the request whose `extensions` hold a slot when `answer` (a gateway answer object, or a
/// `gw_secure_call_tools` answer of one call) is `QUOTA_EXCEEDED`.
pub fn note(extensions: &Extensions, answer: &Value) {
    if let Some(slot) = extensions.get::<RetryAfter>() {
        slot.note(answer);
    }
}

impl RetryAfter {
    /// See [`note`].
    pub fn note(&self, answer: &Value) {
        let single = match answer.get("results").and_then(Value::as_array) {
            Some(results) if results.len() == 1 => &results[0],
            Some(_) => return,
            None => answer,
        };
        if single.get("error_code").and_then(Value::as_str) == Some("QUOTA_EXCEEDED") {
            let seconds = single.get("retry_after_seconds").and_then(Value::as_u64).unwrap_or(1).max(1);
            self.0.store(seconds, Ordering::Relaxed);
        }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct QuotaStatusLayer;

impl<S> Layer<S> for QuotaStatusLayer {
    type Service = QuotaStatus<S>;
    fn layer(&self, inner: S) -> QuotaStatus<S> {
        QuotaStatus { inner }
    }
}

#[derive(Clone)]
pub struct QuotaStatus<S> {
    inner: S,
}

impl<S> Service<Request<Body>> for QuotaStatus<S>
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

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let stateless = req.method() == axum::http::Method::POST && !req.headers().contains_key(SESSION_HEADER);
        let slot = stateless.then(RetryAfter::default);
        if let Some(slot) = &slot {
            req.extensions_mut().insert(slot.clone());
        }
        let future = self.inner.call(req);
        Box::pin(async move {
            let mut response = future.await?;
            let seconds = slot.map_or(0, |slot| slot.0.load(Ordering::Relaxed));
            if seconds > 0 && response.status() == StatusCode::OK {
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            Ok(response)
        })
    }
}
