//! Routes `/health` and `/api/v1/system/*`: health, backup, restore, reset.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

use super::AppState;
use super::blocking;
use super::body::JsonBody;
use super::response::{done, ok};
use crate::manage::system;

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(health))
        .route("/api/v1/system/health", get(system_health))
        .route("/api/v1/system/backup", post(backup))
        .route("/api/v1/system/restore", post(restore))
        .route("/api/v1/system/reset", post(reset))
}

async fn health(State(st): St) -> Response {
    let data = json!({"version": crate::VERSION, "config_path": st.store.path().display().to_string()});
    ok("mcpgw is running", data)
}

async fn system_health(State(st): St) -> Response {
    let external = st.external_cache.report();
    // The issuer's keys matter only while the `oauth` provider is the one in use.
    let oauth = st.store.snapshot().settings.client_oauth.is_some();
    let mut more: Vec<String> = st.jwks.degraded_reason().filter(|_| oauth).into_iter().collect();
    more.extend(st.meter.degraded_reason());
    let data = system::health(&st.store, st.started.elapsed(), st.ready.load(Ordering::SeqCst), external, more);
    ok("system health", data)
}

async fn backup(State(st): St, JsonBody(body): JsonBody) -> Response {
    let store = Arc::clone(&st.store);
    match blocking(move || system::backup(&store, body)).await {
        Ok(path) => done(&format!("backup written to {path}")),
        Err(e) => e.into_response(),
    }
}

async fn restore(State(st): St, JsonBody(body): JsonBody) -> Response {
    let store = Arc::clone(&st.store);
    match blocking(move || system::restore(&store, body)).await {
        Ok(path) => done(&format!("configuration restored from {path}; it is in effect now")),
        Err(e) => e.into_response(),
    }
}

async fn reset(State(st): St, JsonBody(body): JsonBody) -> Response {
    let store = Arc::clone(&st.store);
    match blocking(move || system::reset(&store, body)).await {
        Ok(()) => done(
            "configuration reset to defaults; the admin key is unchanged; create or rotate an API key to get a gateway key",
        ),
        Err(e) => e.into_response(),
    }
}
