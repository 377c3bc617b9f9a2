//! Well-formed JSON-RPC before the protocol layer: a POST body that is not JSON gets a JSON-RPC parse error (-32700),
//! JSON that is not one JSON-RPC message gets invalid request (-32600), all as HTTP 400 with a JSON body: never a 5xx
//! and never a plain-text answer. Everything else goes on unchanged (the body is buffered once, up to the limit), with
//! the parsed message in the request's extensions as a [`ParsedMessage`] so that later layers need not parse it again.
//!
//! The limits of the request itself are enforced here, from the current snapshot's `limits`: a body over
//! `max_request_body_bytes` gets 413 `PAYLOAD_TOO_LARGE`, a body not received within `request_read_timeout_seconds`
//! gets 408 `REQUEST_TIMEOUT`, and an `initialize` that would open more than `max_sessions` sessions gets 503
//! `TOO_MANY_SESSIONS` with `Retry-After`. A session that `initialize` opens is bound here to the caller's key, while
//! its place under `max_sessions` is still held.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, Response, StatusCode, header};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tower::{Layer, Service};

use super::auth::jsonrpc_error;
use crate::body_limit::{BodyError, read_limited_within};
use crate::gateway::{GatewayContext, Identity};

/// Adds [`JsonRpcGuard`] in front of a service.
#[derive(Clone)]
pub struct JsonRpcGuardLayer {
    ctx: Arc<GatewayContext>,
}

impl JsonRpcGuardLayer {
    pub fn new(ctx: Arc<GatewayContext>) -> JsonRpcGuardLayer {
        JsonRpcGuardLayer { ctx }
    }
}

impl<S> Layer<S> for JsonRpcGuardLayer {
    type Service = JsonRpcGuard<S>;
    fn layer(&self, inner: S) -> JsonRpcGuard<S> {
        JsonRpcGuard { inner, ctx: Arc::clone(&self.ctx) }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct JsonRpcGuard<S> {
    inner: S,
    ctx: Arc<GatewayContext>,
}

/// A POST body that passed the guard: one JSON-RPC message, parsed.
#[derive(Clone, Debug)]
pub struct ParsedMessage(pub Value);

/// Why a body is not one JSON-RPC message; `None` when it is.
pub fn check_message(body: &[u8]) -> Option<(i64, String, Value)> {
    parse_message(body).err()
}

/// The body as one JSON-RPC message, or why it is not one (JSON-RPC error code, message, request id).
pub fn parse_message(body: &[u8]) -> Result<Value, (i64, String, Value)> {
    let value: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Err((-32700, format!("Parse error: {e}"), Value::Null)),
    };
    let Value::Object(message) = &value else {
        return Err((-32600, "Invalid Request: the body must be one JSON-RPC message object".into(), Value::Null));
    };
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let invalid = |why: &str| Err((-32600, format!("Invalid Request: {why}"), id.clone()));
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("\"jsonrpc\" must be \"2.0\"");
    }
    if !matches!(message.get("id"), None | Some(Value::String(_) | Value::Number(_))) {
        return invalid("\"id\" must be a string or a number");
    }
    match message.get("method") {
        Some(Value::String(_)) => {}
        Some(_) => return invalid("\"method\" must be a string"),
        None if message.contains_key("id") && (message.contains_key("result") || message.contains_key("error")) => {}
        None => return invalid("a request needs \"method\""),
    }
    if !matches!(message.get("params"), None | Some(Value::Object(_) | Value::Array(_))) {
        return invalid("\"params\" must be an object or an array");
    }
    Ok(value)
}

impl<S> Service<Request<Body>> for JsonRpcGuard<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let ctx = Arc::clone(&self.ctx);
        Box::pin(async move {
            if req.method() != Method::POST {
                return inner.call(req).await;
            }
            let limits = ctx.store.snapshot().settings.limits.clone();
            let metrics = ctx.store.metrics();
            let (parts, body) = req.into_parts();
            let limit = limits.max_request_body_bytes;
            let bytes = match read_limited_within(body, limit, limits.request_read_timeout).await {
                Ok(bytes) => bytes,
                Err(BodyError::Read(e)) => {
                    let message = format!("cannot read the request body: {e}");
                    return Ok(jsonrpc_error(StatusCode::BAD_REQUEST, -32700, &message, Value::Null));
                }
                Err(BodyError::TooLarge) => {
                    metrics.limit_hit("request_body");
                    let data = json!({"status": "error", "error_code": "PAYLOAD_TOO_LARGE",
                                      "message": format!("request body exceeds {limit} bytes")});
                    return Ok(jsonrpc_error(StatusCode::PAYLOAD_TOO_LARGE, -32600, "Request body too large", data));
                }
                Err(BodyError::TimedOut) => {
                    metrics.limit_hit("read_timeout");
                    let seconds = limits.request_read_timeout.as_secs_f64();
                    let data = json!({"status": "error", "error_code": "REQUEST_TIMEOUT",
                                      "message": format!("the request body was not received within {seconds} seconds")});
                    let mut response = jsonrpc_error(StatusCode::REQUEST_TIMEOUT, -32600, "Request timeout", data);
                    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
                    return Ok(response);
                }
            };
            let parsed = match parse_message(&bytes) {
                Ok(message) => message,
                Err((code, message, id)) => {
                    let mut response = jsonrpc_error(StatusCode::BAD_REQUEST, code, &message, Value::Null);
                    if !id.is_null() {
                        let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
                        *response.body_mut() = Body::from(body.to_string());
                    }
                    return Ok(response);
                }
            };
            // Only an `initialize` outside a session opens one.
            let opens_session = parsed.get("method").and_then(Value::as_str) == Some("initialize")
                && !parts.headers.contains_key(SESSION_HEADER);
            let digest = parts.extensions.get::<Arc<Identity>>().map(|identity| identity.key_digest);
            let place = match (opens_session, digest) {
                (true, Some(_)) => match ctx.sessions.reserve(limits.max_sessions) {
                    Some(place) => Some(place),
                    None => {
                        metrics.limit_hit("sessions");
                        return Ok(too_many_sessions(limits.max_sessions, parsed.get("id")));
                    }
                },
                _ => None,
            };
            let mut req = Request::from_parts(parts, Body::from(bytes));
            req.extensions_mut().insert(ParsedMessage(parsed));
            let response = inner.call(req).await?;
            if let (Some(_place), Some(digest)) = (place, digest)
                && let Some(id) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok())
            {
                ctx.sessions.open(id, digest);
            }
            Ok(response)
        })
    }
}

const SESSION_HEADER: &str = "mcp-session-id";

/// 503 for an `initialize` over `max_sessions`, with the JSON-RPC id of the request when it has one.
fn too_many_sessions(max: usize, id: Option<&Value>) -> Response<Body> {
    let message = format!("the gateway has {max} MCP sessions open, its limit; close one or try again later");
    let data = json!({"status": "error", "error_code": "TOO_MANY_SESSIONS", "message": message});
    let mut response = jsonrpc_error(StatusCode::SERVICE_UNAVAILABLE, -32000, "Too many sessions", data.clone());
    if let Some(id) = id {
        let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "Too many sessions", "data": data}});
        *response.body_mut() = Body::from(body.to_string());
    }
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

#[cfg(test)]
mod tests {
    use super::check_message;

    #[test]
    fn messages() {
        assert_eq!(check_message(b"not json").map(|m| m.0), Some(-32700));
        assert_eq!(check_message(b"[1,2]").map(|m| m.0), Some(-32600));
        assert_eq!(check_message(br#"{"jsonrpc":"1.0","method":"x"}"#).map(|m| m.0), Some(-32600));
        assert_eq!(check_message(br#"{"jsonrpc":"2.0"}"#).map(|m| m.0), Some(-32600));
        assert_eq!(check_message(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#).map(|m| m.0), Some(-32600));
        assert_eq!(check_message(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#).map(|m| m.0), Some(-32600));
        assert!(check_message(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_none());
        assert!(check_message(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).is_none());
        assert!(check_message(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).is_none());
    }
}
