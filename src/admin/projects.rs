//! Routes `/api/v1/projects/*`: projects and their members.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::routing::{delete, get};

use super::AppState;
use super::body::JsonBody;
use super::{answer, answer_created, write};
use crate::manage::projects;

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/projects", get(list).post(create))
        .route("/api/v1/projects/{project}", get(get_one).put(update).delete(remove))
        .route("/api/v1/projects/{project}/users", get(members).post(add_member))
        .route("/api/v1/projects/{project}/users/{user}", delete(remove_member))
}

async fn list(State(st): St) -> Response {
    answer(Ok(projects::list(&st.store.snapshot())), "projects")
}

async fn create(State(st): St, JsonBody(body): JsonBody) -> Response {
    answer_created(write(&st, move |file, snap| projects::create(file, snap, body)).await, "project created")
}

async fn get_one(State(st): St, Path(project): Path<String>) -> Response {
    answer(projects::get(&st.store.snapshot(), &project).map_err(Into::into), "project")
}

async fn update(State(st): St, Path(project): Path<String>, JsonBody(body): JsonBody) -> Response {
    answer(write(&st, move |file, snap| projects::update(file, snap, &project, body)).await, "project updated")
}

async fn remove(State(st): St, Path(project): Path<String>) -> Response {
    answer(write(&st, move |file, snap| projects::delete(file, snap, &project)).await, "project deleted")
}

async fn members(State(st): St, Path(project): Path<String>) -> Response {
    answer(projects::list_members(&st.store.snapshot(), &project).map_err(Into::into), "project members")
}

async fn add_member(State(st): St, Path(project): Path<String>, JsonBody(body): JsonBody) -> Response {
    let result = write(&st, move |file, snap| projects::add_member(file, snap, &project, body)).await;
    answer_created(result, "user added to project")
}

async fn remove_member(State(st): St, Path((project, user)): Path<(String, String)>) -> Response {
    let result = write(&st, move |file, snap| projects::remove_member(file, snap, &project, &user)).await;
    answer(result, "user removed from project")
}
