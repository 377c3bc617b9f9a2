//! The metrics listener (port 9464): `GET /metrics` (Prometheus text), `GET /healthz` (the process is alive) and
//! `GET /readyz` (the config is loaded and every listener is up; false while draining, so load balancers stop
//! sending traffic before the listeners close).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::metrics::Metrics;

/// What the probes read: readiness (set by the app) and the metrics.
#[derive(Clone)]
pub struct ProbeState {
    pub ready: Arc<AtomicBool>,
    pub metrics: Arc<Metrics>,
}

/// The probe and metrics router.
pub fn router(state: ProbeState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { (StatusCode::NOT_FOUND, axum::Json(json!({"error": "NOT_FOUND"}))) })
        .with_state(state)
}

async fn healthz() -> Response {
    axum::Json(json!({"status": "alive"})).into_response()
}

async fn readyz(State(state): State<ProbeState>) -> Response {
    if state.ready.load(Ordering::SeqCst) {
        axum::Json(json!({"status": "ready"})).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"status": "not ready"}))).into_response()
    }
}

async fn metrics(State(state): State<ProbeState>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.render()).into_response()
}
