//! The console's way into the admin API: a request built here and served by the admin API's own router, in-process,
//! marked as coming from a signed-in operator ([`SignedIn`]) instead of carrying the admin key. What the console
//! changes is thus validated, logged and audited exactly as the same request over HTTP.

use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, StatusCode, header};
use serde_json::Value;
use tower::ServiceExt;

use super::Console;
use crate::admin::auth::SignedIn;

/// The largest admin API answer the console reads (a backup of a large configuration fits).
const MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// An admin API answer: its status and JSON body.
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Answer {
    /// `data` of a success, or `Err` with the API's `detail` (or the status) of a failure.
    pub fn data(self) -> Result<Value, String> {
        if self.status.is_success() {
            return Ok(self.body.get("data").cloned().unwrap_or(Value::Null));
        }
        Err(self.body.get("detail").and_then(Value::as_str).map_or_else(|| self.status.to_string(), str::to_string))
    }
}

/// `method path` with `body` (JSON), as `operator`.
pub async fn call(console: &Console, operator: &str, method: Method, path: &str, body: Option<Value>) -> Answer {
    let mut builder = Request::builder().method(method).uri(path);
    if body.is_some() {
        builder = builder.header(header::CONTENT_TYPE, "application/json");
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let Ok(mut request) = builder.body(body) else {
        return Answer { status: StatusCode::BAD_REQUEST, body: serde_json::json!({"detail": "not a valid path"}) };
    };
    request.extensions_mut().insert(SignedIn { operator: operator.to_string() });
    let Ok(response) = console.api.clone().oneshot(request).await;
    let status = response.status();
    let bytes = to_bytes(response.into_body(), MAX_ANSWER_BYTES).await.unwrap_or_default();
    Answer { status, body: serde_json::from_slice(&bytes).unwrap_or(Value::Null) }
}

/// `GET path`'s `data`.
pub async fn get(console: &Console, operator: &str, path: &str) -> Result<Value, String> {
    call(console, operator, Method::GET, path, None).await.data()
}
