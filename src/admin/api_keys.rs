//! Routes `/api/v1/api-keys/*`: listing, rotation, disabling and deletion of gateway API keys.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::{get, post};

use super::AppState;
use super::{answer, write};
use crate::manage::api_keys;

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/api-keys", get(list))
        .route("/api/v1/api-keys/{key}", get(get_one).delete(remove))
        .route("/api/v1/api-keys/{key}/rotate", post(rotate))
        .route("/api/v1/api-keys/{key}/disable", post(disable))
        .route("/api/v1/api-keys/{key}/enable", post(enable))
}

async fn list(State(st): St) -> Response {
    answer(Ok(api_keys::list(&st.store.snapshot())), "API keys")
}

async fn get_one(State(st): St, Path(key): Path<String>) -> Response {
    answer(api_keys::get(&st.store.snapshot(), &key).map_err(Into::into), "API key")
}

async fn remove(State(st): St, Path(key): Path<String>) -> Response {
    answer(write(&st, move |file, snap| api_keys::delete(file, snap, &key)).await, "API key deleted")
}

async fn rotate(State(st): St, Path(key): Path<String>) -> Response {
    let result = write(&st, move |file, snap| api_keys::rotate(file, snap, &key)).await;
    answer(result, "API key rotated; the old key no longer works; store the new one now, it is not shown again")
}

async fn disable(State(st): St, Path(key): Path<String>) -> Response {
    answer(write(&st, move |file, snap| api_keys::set_disabled(file, snap, &key, true)).await, "API key disabled")
}

async fn enable(State(st): St, Path(key): Path<String>) -> Response {
    answer(write(&st, move |file, snap| api_keys::set_disabled(file, snap, &key, false)).await, "API key enabled")
}
