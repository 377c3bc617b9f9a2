//! Request counts and latencies of the gateway's HTTP front, outermost in the chain so that refusals (403, 401, 429,
//! 400) are counted too: `mcpgw_requests_total{transport="http", method, status}` and
//! `mcpgw_request_duration_seconds{transport="http"}`, measured until the answer's head is ready (an SSE stream may
//! go on after that). The stdio front counts each tool call with [`record`] too. Labels are bounded: the HTTP method (GET, POST, DELETE, or OTHER) and the status code.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, Request, Response};
use futures_util::future::BoxFuture;
use tower::{Layer, Service};

use crate::telemetry::metrics::Metrics;

/// Adds [`RequestMetrics`] in front of a service.
#[derive(Clone)]
pub struct RequestMetricsLayer {
    metrics: Arc<Metrics>,
}

impl RequestMetricsLayer {
    pub fn new(metrics: Arc<Metrics>) -> RequestMetricsLayer {
        RequestMetricsLayer { metrics }
    }
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = RequestMetrics<S>;
    fn layer(&self, inner: S) -> RequestMetrics<S> {
        RequestMetrics { inner, metrics: Arc::clone(&self.metrics) }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct RequestMetrics<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

/// Counts and times one request of `transport` (`http`, or `stdio` where each tool call is one request).
pub fn record(metrics: &Metrics, transport: &str, method: &str, status: &str, took: Duration) {
    metrics.requests.with_label_values(&[transport, method, status]).inc();
    metrics.request_duration.with_label_values(&[transport]).observe(took.as_secs_f64());
}

fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        _ => "OTHER",
    }
}

impl<S> Service<Request<Body>> for RequestMetrics<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let started = Instant::now();
        let method = method_label(req.method());
        let metrics = Arc::clone(&self.metrics);
        let answer = self.inner.call(req);
        Box::pin(async move {
            let response = answer.await?;
            record(&metrics, "http", method, response.status().as_str(), started.elapsed());
            Ok(response)
        })
    }
}
