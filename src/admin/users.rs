//! Routes `/api/v1/users/*`: users and their API keys.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::get;

use super::AppState;
use super::body::JsonBody;
use super::{answer, answer_created, write};
use crate::manage::users;

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/users", get(list).post(create))
        .route("/api/v1/users/{user}", get(get_one).put(update).delete(remove))
        .route("/api/v1/users/{user}/api-keys", get(list_keys).post(create_key))
}

async fn list(State(st): St) -> Response {
    answer(Ok(users::list(&st.store.snapshot())), "users")
}

async fn create(State(st): St, JsonBody(body): JsonBody) -> Response {
    answer_created(write(&st, move |file, _| users::create(file, body)).await, "user created")
}

async fn get_one(State(st): St, Path(user): Path<String>) -> Response {
    answer(users::get(&st.store.snapshot(), &user).map_err(Into::into), "user")
}

async fn update(State(st): St, Path(user): Path<String>, JsonBody(body): JsonBody) -> Response {
    answer(write(&st, move |file, snap| users::update(file, snap, &user, body)).await, "user updated")
}

async fn remove(State(st): St, Path(user): Path<String>) -> Response {
    answer(write(&st, move |file, snap| users::delete(file, snap, &user)).await, "user deleted")
}

async fn list_keys(State(st): St, Path(user): Path<String>) -> Response {
    answer(users::list_keys(&st.store.snapshot(), &user).map_err(Into::into), "API keys")
}

async fn create_key(State(st): St, Path(user): Path<String>, JsonBody(body): JsonBody) -> Response {
    let result = write(&st, move |file, snap| users::create_key(file, snap, &user, body)).await;
    answer_created(result, "API key created; store it now, it is not shown again")
}
