//! Routes `/api/v1/users/{user}/credentials*`: each user's own upstream credentials (contract 16).
//!
//! `PUT` sets names of one slot of kind `secret` (the body's values are sealed before the file is written; the
//! answer, the write log and the audit record name the slot and the names, never a value), `GET` lists names and
//! when they were set (and, for kind `oauth`, whether connected and until when), `DELETE` removes a slot or, with
//! `?name=NAME`, one name of it; a slot of OAuth tokens is revoked at the authorization server first (`revoked`).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use serde::Deserialize;

use super::AppState;
use super::body::JsonBody;
use super::{answer, write};
use crate::manage::credentials;

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/users/{user}/credentials", get(list))
        .route("/api/v1/users/{user}/credentials/{config}/{server}", get(get_one).put(set).delete(remove))
}

#[derive(Deserialize)]
struct NameQuery {
    name: Option<String>,
}

async fn list(State(st): St, Path(user): Path<String>) -> Response {
    answer(credentials::list(&st.store.snapshot(), &user).map_err(Into::into), "user credentials")
}

async fn get_one(State(st): St, Path((user, config, server)): Path<(String, String, String)>) -> Response {
    answer(credentials::get(&st.store.snapshot(), &user, &config, &server).map_err(Into::into), "user credentials")
}

async fn set(
    State(st): St,
    Path((user, config, server)): Path<(String, String, String)>,
    JsonBody(body): JsonBody,
) -> Response {
    let result = write(&st, move |file, snap| credentials::set(file, snap, &user, &config, &server, body)).await;
    answer(result, "user credentials set")
}

async fn remove(
    State(st): St,
    Path((user, config, server)): Path<(String, String, String)>,
    Query(query): Query<NameQuery>,
) -> Response {
    // A user's OAuth tokens are revoked at the authorization server first (when it has a revocation endpoint), and
    // removed whatever it answers: the gateway stops using them either way.
    let snapshot = st.store.snapshot();
    let mut revoked = None;
    if let (None, Some(slot)) = (&query.name, credentials::oauth_slot(&snapshot, &user, &config, &server)) {
        revoked = Some(match st.broker.revoke(&snapshot, &slot).await {
            Ok(done) => done,
            Err(failure) => {
                tracing::warn!(user_id = %slot.user_id, server_name = %slot.server_name, error = %failure,
                    "the user's OAuth tokens could not be revoked at the authorization server; removed here anyway");
                false
            }
        });
    }
    let result =
        write(&st, move |file, snap| credentials::delete(file, snap, &user, &config, &server, query.name.as_deref()))
            .await
            .map(|mut deleted| {
                if let Some(revoked) = revoked {
                    deleted["revoked"] = serde_json::Value::Bool(revoked);
                }
                deleted
            });
    answer(result, "user credentials deleted")
}
