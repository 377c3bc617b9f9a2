//! The gateway's one error type and its one mapping to the wire.
//!
//! Every refusal or failure the MCP front answers (from the front door's layers, the admission step, the `gw_*`
//! tools, the guardrails) is a [`GatewayError`]: one of the contract's error codes ([`ErrorCode`]), a message, and
//! the extra fields some answers carry (`details`, `stage`, `violations`). It reaches the client in one of three
//! forms, all written here:
//! - the **answer object** of contract section 4 ([`GatewayError::answer`]):
//!   `{"status": "error" | "blocked", "error_code", "message", …}`, which is what a tool result carries (the
//!   `structuredContent` and the text of `gateway::envelope`);
//! - an **HTTP response** ([`GatewayError::response`]) for a request refused before it reaches the protocol: the
//!   status, the headers (`WWW-Authenticate`, `Retry-After`, `Connection: close`) and a JSON-RPC error whose `data`
//!   is the answer object;
//! - a plain **JSON-RPC error** ([`jsonrpc_error`]) for a message that is not JSON-RPC at all (no error code of ours).
//!
//! The admin API has its own error shape (`{"error": {"code", "message"}}`), mapped at its own edge
//! (`admin/response.rs`).

use std::fmt;

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Map, Value, json};

/// The error codes of the gateway's answers (contract sections 4, 7 and 13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    // The front door (HTTP).
    InvalidRequest,
    UnsupportedMediaType,
    NotAcceptable,
    HostNotAllowed,
    OriginNotAllowed,
    HeadersTooLarge,
    PayloadTooLarge,
    RequestTimeout,
    NotFound,
    // Admission and sessions.
    AuthFailed,
    RateLimited,
    SessionNotFound,
    TooManySessions,
    SessionLimit,
    StreamAlreadyOpen,
    ShuttingDown,
    // The tools.
    InvalidArguments,
    TooManyCalls,
    ResponseTooLarge,
    NoMcpConfig,
    ServerNotFound,
    ToolNotFound,
    ToolNotAllowed,
    /// The tool's definition is quarantined: a poisoning finding under `tool_scan: "block"`, or a changed or new
    /// definition under `tool_pinning: "enforce"` (contract section 11).
    ToolQuarantined,
    Timeout,
    UpstreamError,
    UpstreamUnavailable,
    UpstreamOutputTooLarge,
    /// The server takes each user's own credentials (contract 16) and the caller's user has not got them all.
    CredentialsRequired,
    /// An authorization rule (or `policy_default`) denies the call (contract 17).
    PolicyDenied,
    /// A quota has no room for the call (contract 17).
    QuotaExceeded,
    // The guardrails.
    GuardrailViolation,
    GuardrailUnavailable,
}

impl ErrorCode {
    /// The code as the contract spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE",
            ErrorCode::NotAcceptable => "NOT_ACCEPTABLE",
            ErrorCode::HostNotAllowed => "HOST_NOT_ALLOWED",
            ErrorCode::OriginNotAllowed => "ORIGIN_NOT_ALLOWED",
            ErrorCode::HeadersTooLarge => "HEADERS_TOO_LARGE",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::RequestTimeout => "REQUEST_TIMEOUT",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::AuthFailed => "AUTH_FAILED",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::SessionNotFound => "SESSION_NOT_FOUND",
            ErrorCode::TooManySessions => "TOO_MANY_SESSIONS",
            ErrorCode::SessionLimit => "SESSION_LIMIT",
            ErrorCode::StreamAlreadyOpen => "STREAM_ALREADY_OPEN",
            ErrorCode::ShuttingDown => "SHUTTING_DOWN",
            ErrorCode::InvalidArguments => "INVALID_ARGUMENTS",
            ErrorCode::TooManyCalls => "TOO_MANY_CALLS",
            ErrorCode::ResponseTooLarge => "RESPONSE_TOO_LARGE",
            ErrorCode::NoMcpConfig => "NO_MCP_CONFIG",
            ErrorCode::ServerNotFound => "SERVER_NOT_FOUND",
            ErrorCode::ToolNotFound => "TOOL_NOT_FOUND",
            ErrorCode::ToolNotAllowed => "TOOL_NOT_ALLOWED",
            ErrorCode::ToolQuarantined => "TOOL_QUARANTINED",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::UpstreamError => "UPSTREAM_ERROR",
            ErrorCode::UpstreamUnavailable => "UPSTREAM_UNAVAILABLE",
            ErrorCode::UpstreamOutputTooLarge => "UPSTREAM_OUTPUT_TOO_LARGE",
            ErrorCode::CredentialsRequired => "CREDENTIALS_REQUIRED",
            ErrorCode::PolicyDenied => "POLICY_DENIED",
            ErrorCode::QuotaExceeded => "QUOTA_EXCEEDED",
            ErrorCode::GuardrailViolation => "GUARDRAIL_VIOLATION",
            ErrorCode::GuardrailUnavailable => "GUARDRAIL_UNAVAILABLE",
        }
    }

    /// How a request refused with this code is answered over HTTP: status, JSON-RPC error code and message.
    fn http(self) -> (StatusCode, i64, &'static str) {
        match self {
            ErrorCode::InvalidRequest => (StatusCode::BAD_REQUEST, -32600, "Invalid Request"),
            ErrorCode::UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, -32600, "Unsupported Media Type"),
            ErrorCode::NotAcceptable => (StatusCode::NOT_ACCEPTABLE, -32600, "Not Acceptable"),
            ErrorCode::HostNotAllowed | ErrorCode::OriginNotAllowed => (StatusCode::FORBIDDEN, -32600, "Forbidden"),
            ErrorCode::HeadersTooLarge => {
                (StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, -32600, "Request headers too large")
            }
            ErrorCode::PayloadTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, -32600, "Request body too large"),
            ErrorCode::RequestTimeout => (StatusCode::REQUEST_TIMEOUT, -32600, "Request timeout"),
            ErrorCode::NotFound => (StatusCode::NOT_FOUND, -32601, "Not found"),
            ErrorCode::AuthFailed => (StatusCode::UNAUTHORIZED, -32001, "Unauthorized"),
            ErrorCode::RateLimited => (StatusCode::TOO_MANY_REQUESTS, -32000, "Rate limited"),
            ErrorCode::SessionNotFound => (StatusCode::NOT_FOUND, -32001, "Session not found"),
            ErrorCode::TooManySessions => (StatusCode::SERVICE_UNAVAILABLE, -32000, "Too many sessions"),
            ErrorCode::SessionLimit => (StatusCode::TOO_MANY_REQUESTS, -32000, "Too many sessions for this key"),
            ErrorCode::StreamAlreadyOpen => (StatusCode::CONFLICT, -32000, "Stream already open"),
            ErrorCode::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, -32000, "Shutting down"),
            ErrorCode::InvalidArguments => (StatusCode::BAD_REQUEST, -32602, "Invalid params"),
            ErrorCode::Timeout => (StatusCode::GATEWAY_TIMEOUT, -32000, "Timeout"),
            ErrorCode::UpstreamUnavailable => (StatusCode::SERVICE_UNAVAILABLE, -32000, "Upstream unavailable"),
            ErrorCode::CredentialsRequired => (StatusCode::FORBIDDEN, -32000, "Credentials required"),
            ErrorCode::PolicyDenied => (StatusCode::FORBIDDEN, -32000, "Denied by policy"),
            ErrorCode::QuotaExceeded => (StatusCode::TOO_MANY_REQUESTS, -32000, "Quota exceeded"),
            _ => (StatusCode::BAD_GATEWAY, -32000, "Gateway error"),
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal or failure of the gateway; see the module documentation.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayError {
    pub code: ErrorCode,
    pub message: String,
    /// `blocked` (a guardrail stopped the call) rather than `error` in the answer's `status`.
    blocked: bool,
    /// More fields of the answer object, in order.
    extra: Vec<(&'static str, Value)>,
    /// Seconds for `Retry-After`.
    retry_after: Option<u64>,
    /// Ask the client to close the connection (`Connection: close`).
    close: bool,
    /// `AUTH_FAILED` for a valid token without a required scope: 403 `insufficient_scope` (contract section 10).
    insufficient_scope: bool,
}

impl GatewayError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> GatewayError {
        GatewayError {
            code,
            message: message.into(),
            blocked: false,
            extra: Vec::new(),
            retry_after: None,
            close: false,
            insufficient_scope: false,
        }
    }

    /// An `AUTH_FAILED` for a token without a required scope: 403 rather than 401.
    pub fn insufficient_scope(mut self) -> GatewayError {
        self.insufficient_scope = true;
        self
    }

    /// Whether this refusal is of a token without a required scope.
    pub fn is_insufficient_scope(&self) -> bool {
        self.insufficient_scope
    }

    /// The answer's `status` is `blocked`: a guardrail stopped the call.
    pub fn blocked(mut self) -> GatewayError {
        self.blocked = true;
        self
    }

    /// Adds a field to the answer object (`details`, `stage`, `violations`).
    pub fn with(mut self, field: &'static str, value: impl Into<Value>) -> GatewayError {
        self.extra.push((field, value.into()));
        self
    }

    /// Sets `Retry-After` (whole seconds) on the HTTP answer.
    pub fn retry_after(mut self, seconds: u64) -> GatewayError {
        self.retry_after = Some(seconds);
        self
    }

    /// Sets `Connection: close` on the HTTP answer, so the client retries on a new connection.
    pub fn close_connection(mut self) -> GatewayError {
        self.close = true;
        self
    }

    /// The answer object of contract section 4.
    pub fn answer(&self) -> Value {
        let mut object = Map::with_capacity(3 + self.extra.len());
        object.insert("status".into(), Value::from(if self.blocked { "blocked" } else { "error" }));
        object.insert("error_code".into(), Value::from(self.code.as_str()));
        object.insert("message".into(), Value::from(self.message.as_str()));
        for (field, value) in &self.extra {
            object.insert((*field).into(), value.clone());
        }
        Value::Object(object)
    }

    /// The HTTP answer for a request refused before the protocol: the code's status and headers, and a JSON-RPC
    /// error whose `data` is the answer object. `id`: the JSON-RPC id of the request, when it was read.
    pub fn response(&self, id: Option<&Value>) -> Response<Body> {
        let (mut status, code, message) = self.code.http();
        if self.insufficient_scope {
            status = StatusCode::FORBIDDEN;
        }
        let mut response = jsonrpc_error(status, code, message, self.answer(), id);
        let headers = response.headers_mut();
        if self.code == ErrorCode::AuthFailed {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.close {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for GatewayError {}

/// A JSON-RPC error answer with an HTTP status; `data` left out when null, `id` null when the request's is unknown.
pub fn jsonrpc_error(status: StatusCode, code: i64, message: &str, data: Value, id: Option<&Value>) -> Response<Body> {
    let mut error = json!({"code": code, "message": message});
    if !data.is_null() {
        error["data"] = data;
    }
    let body = json!({"jsonrpc": "2.0", "id": id.cloned().unwrap_or(Value::Null), "error": error});
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(response: Response<Body>) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap_or_default();
        serde_json::from_slice(&bytes).unwrap_or_default()
    }

    #[test]
    fn answers_carry_status_code_message_and_extra_fields_in_order() {
        let error = GatewayError::new(ErrorCode::AuthFailed, "authentication failed").with("details", "unknown key");
        assert_eq!(
            error.answer(),
            json!({"status": "error", "error_code": "AUTH_FAILED", "message": "authentication failed",
                   "details": "unknown key"})
        );
        let blocked = GatewayError::new(ErrorCode::GuardrailViolation, "blocked").blocked().with("stage", "input");
        assert_eq!(blocked.answer()["status"], "blocked");
        assert_eq!(blocked.to_string(), "GUARDRAIL_VIOLATION: blocked");
    }

    #[tokio::test]
    async fn http_answers_have_the_codes_status_and_headers() {
        let limited = GatewayError::new(ErrorCode::RateLimited, "slow down").retry_after(3).response(None);
        assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(limited.headers()[header::RETRY_AFTER], "3");
        let limited = body(limited).await;
        assert_eq!(limited["id"], Value::Null);
        assert_eq!(limited["error"]["code"], -32000);
        assert_eq!(limited["error"]["data"]["error_code"], "RATE_LIMITED");

        let auth = GatewayError::new(ErrorCode::AuthFailed, "authentication failed").response(Some(&json!(7)));
        assert_eq!(auth.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(auth.headers()[header::WWW_AUTHENTICATE], "Bearer");
        assert_eq!(body(auth).await["id"], 7);

        let draining = GatewayError::new(ErrorCode::ShuttingDown, "bye").close_connection().response(None);
        assert_eq!(draining.headers()[header::CONNECTION], "close");
    }

    #[tokio::test]
    async fn plain_jsonrpc_errors_leave_out_null_data() {
        let response = jsonrpc_error(StatusCode::BAD_REQUEST, -32700, "Parse error", Value::Null, None);
        assert_eq!(
            body(response).await,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}})
        );
    }
}
