//! The shape of a layer of the gateway's front: one [`Step`], an async function of the request and the rest of the
//! stack (`next`) that answers the request itself (a refusal) or hands it on, and may look at the answer on its way
//! back. [`StepLayer`] makes a step a tower layer.
//!
//! Unlike `axum::middleware::from_fn`, the rest of the stack is handed over as its own type, not boxed per request:
//! the front runs five steps on every call, and the gateway's cost per call is what a sidecar is judged by.

use std::convert::Infallible;
use std::future::Future;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{Request, Response};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use tower::{Layer, Service, ServiceExt};

/// The rest of the stack, as a step sees it.
pub trait Next:
    Service<Request<Body>, Response = Response<Body>, Error = Infallible, Future = Self::Answer> + Send + 'static
{
    type Answer: Future<Output = Result<Response<Body>, Infallible>> + Send + 'static;
}

impl<S> Next for S
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Answer = S::Future;
}

/// Hands `req` on to the rest of the stack; its answer. (A plain function: an `async fn` would keep a second copy of
/// the request and the stack in its future.)
pub fn forward(next: impl Next, req: Request<Body>) -> impl Future<Output = Response<Body>> + Send + 'static {
    next.oneshot(req).map(|answer| match answer {
        Ok(response) => response,
        Err(never) => match never {},
    })
}

/// One layer of the front; see the module documentation.
pub trait Step: Clone + Send + Sync + 'static {
    /// Answers `req`, or [`forward`]s it to `next`.
    fn run<S: Next>(&self, req: Request<Body>, next: S) -> impl Future<Output = Response<Body>> + Send + 'static;
}

/// A [`Step`] as a tower layer.
#[derive(Clone)]
pub struct StepLayer<T>(pub T);

impl<T: Clone, S> Layer<S> for StepLayer<T> {
    type Service = StepService<T, S>;
    fn layer(&self, inner: S) -> StepService<T, S> {
        StepService { step: self.0.clone(), inner }
    }
}

/// The service of a [`StepLayer`].
#[derive(Clone)]
pub struct StepService<T, S> {
    step: T,
    inner: S,
}

impl<T, S> Service<Request<Body>> for StepService<T, S>
where
    T: Step,
    S: Next + Clone,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The rest of the stack is made ready by `forward`, on the clone that serves the request.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        Box::pin(self.step.run(req, self.inner.clone()).map(Ok))
    }
}
