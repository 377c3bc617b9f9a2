//! Well-formed JSON-RPC before the protocol layer: a POST body that is not JSON gets a JSON-RPC parse error (-32700),
//! JSON that is not one JSON-RPC message gets invalid request (-32600), a body over the limit gets 413 with a JSON-RPC
//! error, all as HTTP 400/413 with a JSON body: never a 5xx and never a plain-text answer. Everything else goes on
//! unchanged (the body is buffered once, up to the limit), with the parsed message in the request's extensions as a
//! [`ParsedMessage`] so that later layers need not parse it again.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{Method, Request, Response, StatusCode};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tower::{Layer, Service};

use super::auth::jsonrpc_error;
use crate::body_limit::{BodyError, read_limited};

/// Adds [`JsonRpcGuard`] in front of a service.
#[derive(Clone)]
pub struct JsonRpcGuardLayer {
    max_body_bytes: usize,
}

impl JsonRpcGuardLayer {
    pub fn new(max_body_bytes: usize) -> JsonRpcGuardLayer {
        JsonRpcGuardLayer { max_body_bytes }
    }
}

impl<S> Layer<S> for JsonRpcGuardLayer {
    type Service = JsonRpcGuard<S>;
    fn layer(&self, inner: S) -> JsonRpcGuard<S> {
        JsonRpcGuard { inner, max_body_bytes: self.max_body_bytes }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct JsonRpcGuard<S> {
    inner: S,
    max_body_bytes: usize,
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
        let limit = self.max_body_bytes;
        Box::pin(async move {
            if req.method() != Method::POST {
                return inner.call(req).await;
            }
            let (parts, body) = req.into_parts();
            let bytes = match read_limited(body, limit).await {
                Ok(bytes) => bytes,
                Err(BodyError::Read(e)) => {
                    let message = format!("cannot read the request body: {e}");
                    return Ok(jsonrpc_error(StatusCode::BAD_REQUEST, -32700, &message, Value::Null));
                }
                Err(BodyError::TooLarge) => {
                    let data = json!({"status": "error", "error_code": "PAYLOAD_TOO_LARGE",
                                      "message": format!("request body exceeds {limit} bytes")});
                    return Ok(jsonrpc_error(StatusCode::PAYLOAD_TOO_LARGE, -32600, "Request body too large", data));
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
            let mut req = Request::from_parts(parts, Body::from(bytes));
            req.extensions_mut().insert(ParsedMessage(parsed));
            inner.call(req).await
        })
    }
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
