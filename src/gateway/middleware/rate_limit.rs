//! Rate limits per API key (`rate_limits` in the config: `per_key_requests_per_second`, `burst`; 0 means no limit),
//! with governor's keyed GCRA limiter, keyed by the key's SHA-256 digest so the limiter never holds a raw key.
//!
//! Over HTTP, [`RateLimit`] sits right behind authentication: every authenticated request of a key takes one cell;
//! a request over the limit gets 429 with `Retry-After` (whole seconds, at least 1) and a JSON-RPC error whose `data`
//! is the `RATE_LIMITED` object of contract section 4. Over stdio each tool call takes one cell. One key's traffic
//! never limits another key. A reload that changes the limits starts a fresh limiter with the new quota; other
//! reloads keep the buckets as they are.

use std::convert::Infallible;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use futures_util::future::BoxFuture;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use serde_json::{Value, json};
use tower::{Layer, Service};

use super::auth::jsonrpc_error;
use crate::config::settings::Settings;
use crate::gateway::{GatewayContext, Identity};

type Limiter = DefaultKeyedRateLimiter<[u8; 32]>;

/// A limiter with the limits it was built for.
struct Current {
    per_second: f64,
    burst: u32,
    limiter: Option<Arc<Limiter>>,
}

/// The per-key limiter of the current limits.
#[derive(Default)]
pub struct RateLimits {
    current: Mutex<Option<Current>>,
}

/// A request over its key's limit; retry after `wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited {
    pub wait: Duration,
}

impl Limited {
    /// The `Retry-After` value: whole seconds, at least 1.
    pub fn retry_after_seconds(&self) -> u64 {
        (self.wait.as_secs_f64().ceil() as u64).max(1)
    }

    /// The `RATE_LIMITED` answer object of contract section 4.
    pub fn answer(&self) -> Value {
        let message = format!("rate limit exceeded for this API key; retry after {} s", self.retry_after_seconds());
        json!({"status": "error", "error_code": "RATE_LIMITED", "message": message})
    }
}

/// governor's quota for the configured limits; `None` when there is no limit.
fn quota(per_second: f64, burst: u32) -> Option<Quota> {
    if per_second <= 0.0 || !per_second.is_finite() {
        return None;
    }
    let period = Duration::from_secs_f64(1.0 / per_second);
    // Without a burst, a key may send one second's worth at once (at least one request).
    let burst = if burst == 0 { per_second.ceil().min(f64::from(u32::MAX)) as u32 } else { burst };
    Some(Quota::with_period(period)?.allow_burst(NonZeroU32::new(burst.max(1))?))
}

impl RateLimits {
    /// Takes one cell of `key_digest`'s bucket under the limits of `settings`.
    pub fn check(&self, settings: &Settings, key_digest: &[u8; 32]) -> Result<(), Limited> {
        let Some(limiter) = self.limiter(settings.rate_limit_per_second, settings.rate_limit_burst) else {
            return Ok(());
        };
        limiter
            .check_key(key_digest)
            .map_err(|not_until| Limited { wait: not_until.wait_time_from(DefaultClock::default().now()) })
    }

    fn limiter(&self, per_second: f64, burst: u32) -> Option<Arc<Limiter>> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match &*current {
            Some(c) if c.per_second == per_second && c.burst == burst => c.limiter.clone(),
            _ => {
                let limiter = quota(per_second, burst).map(|q| Arc::new(Limiter::keyed(q)));
                *current = Some(Current { per_second, burst, limiter: limiter.clone() });
                limiter
            }
        }
    }

    /// Forgets buckets that are full again (keys idle long enough); called now and then so that many short-lived
    /// keys do not grow the table.
    pub fn shrink(&self) {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(limiter) = current.as_ref().and_then(|c| c.limiter.as_ref()) {
            limiter.retain_recent();
            limiter.shrink_to_fit();
        }
    }
}

/// The 429 answer.
pub fn too_many_requests(limited: Limited) -> Response<Body> {
    let mut response = jsonrpc_error(StatusCode::TOO_MANY_REQUESTS, -32000, "Rate limited", limited.answer());
    if let Ok(value) = HeaderValue::from_str(&limited.retry_after_seconds().to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// Adds [`RateLimit`] in front of a service.
#[derive(Clone)]
pub struct RateLimitLayer {
    ctx: Arc<GatewayContext>,
}

impl RateLimitLayer {
    pub fn new(ctx: Arc<GatewayContext>) -> RateLimitLayer {
        RateLimitLayer { ctx }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit { inner, ctx: Arc::clone(&self.ctx) }
    }
}

/// See the module documentation. Expects the [`Identity`] that the auth layer put into the request's extensions.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    ctx: Arc<GatewayContext>,
}

impl<S> Service<Request<Body>> for RateLimit<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = futures_util::future::Either<S::Future, BoxFuture<'static, Result<Response<Body>, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        if let Some(identity) = req.extensions().get::<Arc<Identity>>()
            && let Err(limited) = self.ctx.rate_limits.check(&identity.snapshot.settings, &identity.key_digest)
        {
            self.ctx.store.metrics().rate_limited.inc();
            tracing::info!(key_id = %identity.key_id, retry_after_seconds = limited.retry_after_seconds(), "request rate limited");
            return futures_util::future::Either::Right(Box::pin(async move { Ok(too_many_requests(limited)) }));
        }
        futures_util::future::Either::Left(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(per_second: f64, burst: u32) -> Settings {
        let file = crate::config::ConfigFile::from_value(json!({})).unwrap();
        let mut settings = Settings::resolve(&file, &mut Vec::new());
        settings.rate_limit_per_second = per_second;
        settings.rate_limit_burst = burst;
        settings
    }

    #[test]
    fn each_key_has_its_own_bucket_and_zero_means_no_limit() {
        let limits = RateLimits::default();
        let tight = settings(1.0, 2);
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert!(limits.check(&tight, &a).is_ok());
        assert!(limits.check(&tight, &a).is_ok());
        let limited = limits.check(&tight, &a).unwrap_err();
        assert!(limited.wait > Duration::ZERO && limited.wait <= Duration::from_secs(1), "{limited:?}");
        assert_eq!(limited.retry_after_seconds(), 1);
        assert!(limits.check(&tight, &b).is_ok(), "another key is not limited");
        let unlimited = settings(0.0, 0);
        for _ in 0..100 {
            assert!(limits.check(&unlimited, &a).is_ok());
        }
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(Limited { wait: Duration::from_millis(1) }.retry_after_seconds(), 1);
        assert_eq!(Limited { wait: Duration::from_millis(2500) }.retry_after_seconds(), 3);
        assert_eq!(Limited { wait: Duration::from_secs(2) }.retry_after_seconds(), 2);
        assert_eq!(Limited { wait: Duration::ZERO }.retry_after_seconds(), 1);
    }

    #[test]
    fn quotas() {
        assert!(quota(0.0, 10).is_none());
        assert!(quota(f64::NAN, 10).is_none());
        assert_eq!(quota(5.0, 0).map(|q| q.burst_size().get()), Some(5));
        assert_eq!(quota(0.5, 0).map(|q| q.burst_size().get()), Some(1));
        assert_eq!(quota(10.0, 3).map(|q| q.burst_size().get()), Some(3));
    }
}
