//! The admin REST API (port 8001): configurations, projects, users, API keys, system operations, the authorization
//! rules and the audit log.
//!
//! The request path, outermost first (the layers run after routing, so each knows the route template):
//! 1. `request_log::observe`: counts every answer by status class and logs refused requests with their route
//!    template, at most 10 records a second (`request_log.rs`);
//! 2. `admin_front`: the header size limit (431);
//! 3. `auth::require_admin`: every route except `GET /health` needs the admin key of the current snapshot;
//! 4. `request_log::log_writes`: one record per admin write, with its outcome and the ids of its objects;
//! 5. the handler of one of the resource files, or the 404/405 fallbacks in the API's error shape: it decodes the body
//!    ([`body::JsonBody`]), then calls a `manage` operation: reads use the current snapshot, writes run on a blocking
//!    thread inside [`ConfigStore::update`](crate::config::ConfigStore::update), which serialises, validates and
//!    writes atomically before the handler answers.

pub mod auth;
pub mod body;
mod request_log;
pub mod response;
mod state;

mod api_keys;
mod audit;
mod configs;
mod credentials;
mod policy;
mod projects;
mod system;
mod users;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::config::{ConfigFile, Snapshot};
use crate::gateway::middleware::limits::{header_bytes, headers_too_large_message};
use crate::manage::{ManageError, ManageResult};
use response::ApiError;
pub use state::AppState;

/// The admin API router.
pub fn router(state: Arc<AppState>) -> Router {
    let router = Router::new()
        .merge(system::routes())
        .merge(configs::routes())
        .merge(projects::routes())
        .merge(users::routes())
        .merge(credentials::routes())
        .merge(policy::routes())
        .merge(audit::routes())
        .merge(api_keys::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(request_log::log_writes))
        .layer(middleware::from_fn_with_state(state.clone(), auth::require_admin));
    front(router, &state).with_state(state)
}

/// The outer layers of every request on the admin listener, the console's pages included (`console::router`): the
/// header checks ([`admin_front`]), then every answer counted and the refused ones logged, bounded
/// ([`request_log::observe`]).
pub fn front<S: Clone + Send + Sync + 'static>(router: Router<S>, state: &Arc<AppState>) -> Router<S> {
    router
        .layer(middleware::from_fn_with_state(Arc::clone(state), admin_front))
        .layer(middleware::from_fn_with_state(Arc::clone(state), request_log::observe))
}

/// The header size check (`limits.max_header_bytes`) and repeated security headers (400), answered in the admin
/// API's error shape.
async fn admin_front(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let max = state.store.snapshot().settings.limits.max_header_bytes;
    if header_bytes(&req) > max {
        state.metrics.limit_hit("request_headers");
        let status = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
        return ApiError::new(status, "HEADERS_TOO_LARGE", headers_too_large_message(max)).into_response();
    }
    if let Some(name) = crate::auth::http::repeated_header(req.headers()) {
        let message = format!("the {name} header is sent more than once");
        return ApiError::new(StatusCode::BAD_REQUEST, "VALIDATION_ERROR", message).into_response();
    }
    next.run(req).await
}

async fn not_found(req: Request) -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", format!("no route for {} {}", req.method(), req.uri().path()))
}

async fn method_not_allowed(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
    )
}

/// Runs a write operation on a blocking thread inside the store's serialised update.
async fn write<F>(state: &AppState, change: F) -> Result<Value, ApiError>
where
    F: FnOnce(&mut ConfigFile, &Snapshot) -> ManageResult + Send + 'static,
{
    write_about(state, None, change).await
}

/// The tool an admin write is about (an approval, a pin removed): its audit record names the server and the tool.
struct ToolWrite<'a> {
    server: &'a str,
    tool: &'a str,
}

/// [`write`], its audit record naming the tool the write is about.
async fn write_about<F>(state: &AppState, about: Option<ToolWrite<'_>>, change: F) -> Result<Value, ApiError>
where
    F: FnOnce(&mut ConfigFile, &Snapshot) -> ManageResult + Send + 'static,
{
    let store = Arc::clone(&state.store);
    let written = blocking(move || store.update(change)).await;
    // Recorded before the answer goes; the revision is that of the file as written.
    state
        .audit
        .record(crate::audit::Event {
            event: "admin_write",
            server_name: about.as_ref().map(|a| a.server),
            tool_name: about.as_ref().map(|a| a.tool),
            outcome: Some(if written.is_ok() { "ok" } else { "refused" }),
            config_revision: Some(crate::audit::revision(&state.store.snapshot().source_digest)),
            ..Default::default()
        })
        .await;
    written
}

/// Runs a blocking management call (file I/O, fsync, a configuration's write) off the async workers, on a thread at
/// the lowest priority: an admin write of a large configuration takes seconds of CPU that requests must not wait behind
/// (`config/background.rs`).
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> ManageResult<T> + Send + 'static) -> Result<T, ApiError> {
    match crate::config::background::run("mcpgw-admin", f).await {
        Ok(result) => result.map_err(ApiError::from),
        Err(e) => Err(ApiError::from(ManageError::Internal(format!("operation aborted: {e}")))),
    }
}

/// Answers a read or write result with the given success message (and the ids it names, for the write log).
fn answer(result: Result<Value, ApiError>, message: &str) -> Response {
    match result {
        Ok(data) => with_ids(request_log::ObjectIds::of(&data), response::ok(message, data)),
        Err(e) => e.into_response(),
    }
}

/// Answers a create result with 201.
fn answer_created(result: Result<Value, ApiError>, message: &str) -> Response {
    match result {
        Ok(data) => with_ids(request_log::ObjectIds::of(&data), response::created(message, data)),
        Err(e) => e.into_response(),
    }
}

fn with_ids(ids: request_log::ObjectIds, mut response: Response) -> Response {
    response.extensions_mut().insert(ids);
    response
}
