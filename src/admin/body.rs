//! The JSON body extractor of the admin API: at most 1 MiB (413 `PAYLOAD_TOO_LARGE`), JSON content type when a body
//! is sent (415 `UNSUPPORTED_MEDIA_TYPE`), well-formed JSON (400 `VALIDATION_ERROR`). An empty body is `null`, so each
//! operation decides whether it needs one. Rejections use the API's error body, unlike axum's own `Json`.

use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use serde_json::Value;

use super::response::ApiError;
use crate::body_limit::{BodyError, read_limited};

/// Largest admin request body.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A request body parsed as JSON (`Value::Null` when empty).
pub struct JsonBody(pub Value);

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "PAYLOAD_TOO_LARGE",
        format!("request body exceeds {MAX_BODY_BYTES} bytes"),
    )
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req.headers().get(header::CONTENT_TYPE).map(|v| v.to_str().unwrap_or("?").to_string());
        // An oversized body is read and discarded (up to a cap) before the 413, so the client sees the answer.
        let bytes = read_limited(req.into_body(), MAX_BODY_BYTES).await.map_err(|e| match e {
            BodyError::TooLarge => too_large(),
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
        serde_json::from_slice(&bytes)
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
