//! The JSON body extractor of the admin API: at most `limits.max_admin_body_bytes` (default 1 MiB; over it 413
//! `PAYLOAD_TOO_LARGE`), sent within `limits.request_read_timeout_seconds` (408 `REQUEST_TIMEOUT`), JSON content type
//! when a body is sent (415 `UNSUPPORTED_MEDIA_TYPE`), well-formed JSON with no key twice in one object (400
//! `VALIDATION_ERROR`). An empty body is
//! `null`, so each operation decides whether it needs one. Rejections use the API's error body, unlike axum's own
//! `Json`.

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use serde_json::Value;

use super::AppState;
use super::response::ApiError;
use crate::body_limit::{BodyError, read_limited_within};

/// A request body parsed as JSON (`Value::Null` when empty).
pub struct JsonBody(pub Value);

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

impl FromRequest<Arc<AppState>> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let content_type = req.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("?").to_string());
        let limits = state.store.snapshot().settings.limits.clone();
        let limit = limits.max_admin_body_bytes;
        // An oversized body is read and discarded (up to a cap) before the 413, so the client sees the answer.
        let read = read_limited_within(req.into_body(), limit, limits.request_read_timeout).await;
        let bytes = read.map_err(|e| match e {
            BodyError::TooLarge => {
                state.metrics.limit_hit("request_body");
                let message = format!("request body exceeds {limit} bytes");
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE", message)
            }
            BodyError::TimedOut => {
                state.metrics.limit_hit("read_timeout");
                let seconds = limits.request_read_timeout.as_secs_f64();
                let message = format!("the request body was not received within {seconds} seconds");
                ApiError::new(StatusCode::REQUEST_TIMEOUT, "REQUEST_TIMEOUT", message)
            }
            BodyError::Read(e) => {
                ApiError::new(StatusCode::BAD_REQUEST, "VALIDATION_ERROR", format!("cannot read request body: {e}"))
            }
        })?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(JsonBody(Value::Null));
        }
        if let Some(ct) = content_type
            && !is_json(&ct)
        {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UNSUPPORTED_MEDIA_TYPE",
                format!("request bodies must be application/json, got {ct:?}"),
            ));
        }
        crate::json_strict::parse(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "VALIDATION_ERROR", format!("malformed JSON: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::is_json;

    #[test]
    fn json_content_types() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(is_json("application/merge-patch+json"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/x-www-form-urlencoded"));
    }
}
