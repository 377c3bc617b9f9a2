//! Routes of contract 17: `GET` and `PUT /api/v1/policy` (the gateway-wide rules, `policy_default` and quotas of
//! `common_mcp_gateway_config`; a PUT is compiled as `mcpgw policy check` compiles it, then written through the
//! store's update like every admin write, in effect at once), `POST /api/v1/policy/simulate` (the proposal replayed
//! against the audited calls, `manage/policy.rs`; nothing applied) and `GET /api/v1/usage` (calls, errors, guardrail
//! blocks, policy denials, quota rejections and bytes per project, user, server or tool, `meter/usage.rs`).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::body::JsonBody;
use super::response::ApiError;
use super::{AppState, answer, blocking, write};
use crate::manage::{self, policy};
use crate::meter::usage::DIMENSIONS;

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/policy", get(rules).put(replace))
        .route("/api/v1/policy/simulate", post(simulate))
        .route("/api/v1/usage", get(usage))
}

async fn rules(State(st): St) -> Response {
    answer(policy::rules(&st.store.snapshot().file).map_err(Into::into), "policy")
}

async fn replace(State(st): St, JsonBody(body): JsonBody) -> Response {
    // Compiled inside the write, as other writes decode their body there: a refusal writes nothing and is audited.
    let result = write(&st, move |file, _| policy::replace(file, policy::replacement(body)?)).await;
    answer(result, "policy updated")
}

async fn simulate(State(st): St, JsonBody(body): JsonBody) -> Response {
    let snapshot = st.store.snapshot();
    let audit = st.audit.path();
    let result = blocking(move || {
        let proposal = policy::proposal(body)?;
        policy::simulate(&snapshot, audit.as_deref(), &proposal)
    })
    .await;
    answer(result, "policy simulated; nothing applied")
}

#[derive(Deserialize)]
struct UsageQuery {
    by: Option<String>,
    since: Option<String>,
}

async fn usage(State(st): St, Query(query): Query<UsageQuery>) -> Response {
    let by = query.by.as_deref().unwrap_or("project");
    let Some(dimension) = DIMENSIONS.iter().position(|d| *d == by) else {
        let detail = format!("by: must be one of {}, found {by:?}", DIMENSIONS.join(", "));
        return answer(Err(ApiError::new(StatusCode::BAD_REQUEST, "VALIDATION_ERROR", detail)), "");
    };
    let now = chrono::Utc::now();
    let since = match query
        .since
        .as_deref()
        .map(|s| manage::point_in_time("since", s, now))
        .unwrap_or(Ok(now - chrono::Duration::hours(24)))
    {
        Ok(since) => since,
        Err(detail) => return answer(Err(ApiError::new(StatusCode::BAD_REQUEST, "VALIDATION_ERROR", detail)), ""),
    };
    let (groups, source) = st.meter.usage(dimension, since.timestamp()).await;
    let data = json!({
        "by": by,
        "since": since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "until": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "source": source,
        "groups": groups,
    });
    answer(Ok(data), "usage")
}
