//! Routes `/api/v1/audit*`: this replica's audit log read back. `GET /api/v1/audit` answers the records that match
//! its query parameters, newest first (`manage/audit.rs` maps each filter to the record's fields and bounds memory by
//! `limit`); `GET /api/v1/audit/verify` checks the file's hash chain while the gateway goes on appending to it. Both
//! read the file on a blocking thread; with the audit log off they answer 400, as the policy simulator does.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;

use super::{AppState, answer, blocking};
use crate::manage::audit;

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/api/v1/audit", get(search)).route("/api/v1/audit/verify", get(verify))
}

async fn search(State(st): St, Query(query): Query<Vec<(String, String)>>) -> Response {
    let snapshot = st.store.snapshot();
    let path = st.audit.path();
    let result = blocking(move || {
        let search = audit::Search::from_query(query, &snapshot, chrono::Utc::now())?;
        audit::search(&path.ok_or_else(audit::off)?, &search)
    })
    .await;
    answer(result, "audit records")
}

async fn verify(State(st): St) -> Response {
    let path = st.audit.path();
    answer(blocking(move || audit::verify(&path.ok_or_else(audit::off)?)).await, "audit log verified")
}
