//! What the admin API writes to the log about its requests (contract section 13), in two layers of [`super::router`]:
//!
//! - [`observe`], the outermost: every answer is counted by status class; a refused request (an answer of 400 or more
//!   that is not an admin write, logged below) gets an `admin request refused` record with the route template
//!   (`/api/v1/api-keys/{key}`, never the path itself, which may carry a key or 60 KB of anything), the method, the
//!   status, the error code and, for a failed admin key check, why. These records are bounded by the admin front's
//!   [`RefusalLog`](crate::telemetry::refusals::RefusalLog): at most 10 a second, the next one carrying `left_out`.
//! - [`log_writes`], behind the admin key check: every admin write (a `POST`, `PUT` or `DELETE` on a route) gets one
//!   `admin write` record with the route template, the outcome (`status`, and `error` when it failed) and the `ids`
//!   of the objects: those the path names (a key as its `key_id`, an e-mail masked) and those the answer names
//!   ([`ObjectIds`], set by the handler), and the `operator`: `admin key`, or the console's signed-in operator
//!   (`SignedIn`: the `user_claim` value of an OAuth sign-in, contract 18). Never a secret: no key, no admin key, no body.

use std::sync::Arc;

use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use serde_json::Value;

use super::AppState;
use super::response::AnswerError;
use crate::secrets;

/// The route of requests that matched none.
const NO_ROUTE: &str = "(no route)";
/// The longest id value a record shows, in characters (names are at most 128; a path may carry anything).
const MAX_ID_CHARS: usize = 128;
/// The fields of an answer's `data` that name the objects a write touched.
const ANSWER_ID_FIELDS: [&str; 6] =
    ["mcp_config_id", "server_name", "project_id", "user_id", "key_id", "rotated_key_id"];

/// The ids an answer names, put into the response's extensions by the handler for [`log_writes`].
#[derive(Clone, Debug, Default)]
pub struct ObjectIds(Vec<(&'static str, String)>);

impl ObjectIds {
    /// The id fields of an answer's `data` (strings only: a write answers with the object it touched).
    pub fn of(data: &Value) -> ObjectIds {
        let found = ANSWER_ID_FIELDS.iter().filter_map(|field| Some((*field, data.get(*field)?.as_str()?.to_string())));
        ObjectIds(found.collect())
    }
}

/// Why the admin key check refused a request, for its record.
#[derive(Clone, Copy, Debug)]
pub struct RefusalReason(pub &'static str);

/// Marks a response whose request [`log_writes`] has logged, so that [`observe`] does not log it again.
#[derive(Clone, Copy, Debug)]
struct WriteLogged;

/// The outermost admin layer: counts every answer and logs the refused ones, bounded (see the module documentation).
pub async fn observe(
    State(state): State<Arc<AppState>>,
    route: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let method = req.method().clone();
    let route = route.as_ref().map_or(NO_ROUTE, MatchedPath::as_str).to_string();
    let response = next.run(req).await;
    let status = response.status().as_u16();
    let class = match status {
        200..=299 => "2xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "other",
    };
    state.metrics.admin_requests.with_label_values(&[class]).inc();
    tracing::debug!(method = %method, route = %route, status, "admin request");
    let refused = status >= 400 && response.extensions().get::<WriteLogged>().is_none();
    if refused && let Some(left_out) = state.refusals.admit() {
        let error = response.extensions().get::<AnswerError>().map_or("", |code| code.0);
        let reason = response.extensions().get::<RefusalReason>().map_or("", |reason| reason.0);
        tracing::info!(method = %method, route = %route, status, error, reason, left_out, "admin request refused");
    }
    response
}

/// Logs every admin write once, with its outcome (see the module documentation).
pub async fn log_writes(
    route: Option<MatchedPath>,
    params: Result<RawPathParams, axum::extract::rejection::RawPathParamsRejection>,
    req: Request,
    next: Next,
) -> Response {
    let method = req.method().clone();
    let Some(route) = route.filter(|_| is_write(&method)) else { return next.run(req).await };
    // Who: the console's signed-in operator (the admin key, or the OAuth issuer's user), else the admin key.
    let operator = req
        .extensions()
        .get::<crate::admin::auth::SignedIn>()
        .map_or_else(|| "admin key".to_string(), |signed_in| bounded(&signed_in.operator));
    let mut ids: Vec<String> =
        params.iter().flat_map(|params| params.iter()).map(|(name, value)| path_id(name, value)).collect();
    let mut response = next.run(req).await;
    if let Some(answered) = response.extensions().get::<ObjectIds>() {
        for (field, value) in &answered.0 {
            ids.push(format!("{field}={}", bounded(value)));
        }
    }
    let status = response.status().as_u16();
    let error = response.extensions().get::<AnswerError>().map_or("", |code| code.0);
    let ids = ids.join(", ");
    tracing::info!(method = %method, route = route.as_str(), status, error, ids = %ids, operator = %operator,
        "admin write");
    response.extensions_mut().insert(WriteLogged);
    response
}

fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// One path parameter as a record shows it, named as in the route: a key (or key id) as its key id, an e-mail
/// masked, anything else cut to [`MAX_ID_CHARS`].
fn path_id(name: &str, value: &str) -> String {
    match name {
        "key" if secrets::looks_like_key_id(value) => format!("key={value}"),
        "key" => format!("key={}", secrets::key_id(value)),
        _ if value.contains('@') => format!("{name}={}", secrets::mask_email(value)),
        _ => format!("{name}={}", bounded(value)),
    }
}

fn bounded(value: &str) -> String {
    crate::telemetry::refusals::bounded(value, MAX_ID_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_in_paths_become_key_ids_and_other_values_are_bounded() {
        let key = "gw_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG";
        assert_eq!(path_id("key", key), format!("key={}", secrets::key_id(key)));
        assert_eq!(path_id("key", "ba7816bf8f01"), "key=ba7816bf8f01");
        assert_eq!(path_id("user", "jane.doe@example.com"), "user=j***@example.com");
        assert_eq!(path_id("project", "alpha"), "project=alpha");
        let long = path_id("config", &"x".repeat(60_000));
        assert_eq!(long.chars().count(), "config=".len() + MAX_ID_CHARS + 1);
    }

    #[test]
    fn an_answer_names_its_ids_and_nothing_else() {
        let data = json!({"api_key": "gw_secret", "key_id": "ba7816bf8f01", "project_id": "p1", "email": "a@b.c",
            "masked": "gw_s****", "user_id": null});
        let ids = ObjectIds::of(&data).0;
        assert_eq!(ids, vec![("project_id", "p1".to_string()), ("key_id", "ba7816bf8f01".to_string())]);
    }
}
