//! The admin API's wire shapes, in one place: the success envelope `{message, data?, timestamp}` (spec 2.5) and the
//! error body `{error, detail, timestamp}` (spec 7), and the mapping of every management error to a status and code.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::ids::timestamp;
use crate::manage::ManageError;

/// A success answer with data.
pub fn ok(message: &str, data: Value) -> Response {
    envelope(StatusCode::OK, message, Some(data))
}

/// A 201 answer for create routes.
pub fn created(message: &str, data: Value) -> Response {
    envelope(StatusCode::CREATED, message, Some(data))
}

/// A success answer without data (`message` and `timestamp` only).
pub fn done(message: &str) -> Response {
    envelope(StatusCode::OK, message, None)
}

fn envelope(status: StatusCode, message: &str, data: Option<Value>) -> Response {
    let mut body = json!({"message": message});
    if let Some(data) = data {
        body["data"] = data;
    }
    body["timestamp"] = json!(timestamp());
    (status, axum::Json(body)).into_response()
}

/// An error answer: status, `error` code and `detail`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub error: &'static str,
    pub detail: String,
}

impl ApiError {
    pub fn new(status: StatusCode, error: &'static str, detail: impl Into<String>) -> ApiError {
        ApiError { status, error, detail: detail.into() }
    }

    pub fn internal(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR", detail)
    }
}

/// The `error` code of an error answer, kept in the response's extensions for the request log (`request_log.rs`),
/// which logs the code and never the `detail` (it may repeat what the client sent).
#[derive(Clone, Copy, Debug)]
pub struct AnswerError(pub &'static str);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": self.error, "detail": self.detail, "timestamp": timestamp()});
        let mut response = (self.status, axum::Json(body)).into_response();
        response.extensions_mut().insert(AnswerError(self.error));
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<ManageError> for ApiError {
    fn from(err: ManageError) -> ApiError {
        let detail = err.to_string();
        match err {
            ManageError::Validation(_) | ManageError::Invalid(_) => {
                ApiError::new(StatusCode::BAD_REQUEST, "VALIDATION_ERROR", detail)
            }
            ManageError::NotFound(_) => ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", detail),
            ManageError::Conflict(_) => ApiError::new(StatusCode::CONFLICT, "CONFLICT", detail),
            ManageError::ReadOnly(_) => ApiError::new(StatusCode::CONFLICT, "CONFIG_READ_ONLY", detail),
            ManageError::StoreUnavailable(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "CONFIG_STORE_UNAVAILABLE", detail)
            }
            ManageError::ResetNotConfirmed => ApiError::new(StatusCode::BAD_REQUEST, "System reset failed", detail),
            ManageError::Internal(_) => {
                tracing::error!(error = %detail, "admin operation failed");
                ApiError::internal(detail)
            }
        }
    }
}
