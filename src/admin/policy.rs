//! Routes of contract 17 that read rather than configure: `POST /api/v1/policy/simulate` (the proposal replayed
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
use super::{AppState, answer, blocking};
use crate::manage::policy;
use crate::meter::usage::DIMENSIONS;

type St = State<Arc<AppState>>;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/api/v1/policy/simulate", post(simulate)).route("/api/v1/usage", get(usage))
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
    let since = match query.since.as_deref().map(|s| since(s, now)).unwrap_or(Ok(now - chrono::Duration::hours(24))) {
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

/// `since`: an RFC 3339 time, or a span back from now (`90m`, `24h`, `7d`).
fn since(text: &str, now: chrono::DateTime<chrono::Utc>) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&chrono::Utc));
    }
    let unit = text.chars().last().unwrap_or(' ');
    let count: Option<i64> = text[..text.len() - unit.len_utf8().min(text.len())].parse().ok().filter(|n| *n >= 0);
    let span = match (count, unit) {
        (Some(n), 'm') => chrono::Duration::try_minutes(n),
        (Some(n), 'h') => chrono::Duration::try_hours(n),
        (Some(n), 'd') => chrono::Duration::try_days(n),
        _ => None,
    };
    span.and_then(|span| now.checked_sub_signed(span))
        .ok_or_else(|| format!("since: must be an RFC 3339 time or a span such as 90m, 24h or 7d, found {text:?}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn since_takes_a_time_or_a_span() {
        let now = chrono::Utc::now();
        assert_eq!(super::since("2h", now).unwrap(), now - chrono::Duration::hours(2));
        assert_eq!(super::since("2026-12-01T10:00:00Z", now).unwrap().timestamp(), 1_796_119_200);
        assert!(super::since("2w", now).is_err());
        assert!(super::since("", now).is_err());
        assert!(super::since("é", now).is_err());
    }
}
