//! Well-formed JSON-RPC before the protocol layer: a POST body that is not JSON gets a JSON-RPC parse error (-32700),
//! JSON that is not one JSON-RPC message (or has a key twice in one object, see [`crate::json_strict`]) gets invalid
//! request (-32600), all as HTTP 400 with a JSON body: never a 5xx and never a plain-text answer. One message means
//! (contract 14) an `id` that is a string or an integer within i64 and `params`, when present, an object: rmcp's
//! reader refuses the rest too, but deeper, with an answer of its own. Everything else goes on unchanged (the body is buffered once, up to the limit), with
//! the parsed message in the request's extensions as a [`ParsedMessage`] so that later layers need not parse it again.
//!
//! The limits of the request body are enforced here, from the current snapshot's `limits`: a body over
//! `max_request_body_bytes` gets 413 `PAYLOAD_TOO_LARGE`, a body not received within `request_read_timeout_seconds`
//! gets 408 `REQUEST_TIMEOUT` (and `Connection: close`).

use std::sync::Arc;

use axum::body::Body;
use std::future::Future;

use axum::extract::Request;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::step::{Next, Step, forward};
use crate::body_limit::{BodyError, read_limited_within};
use crate::error::{ErrorCode, GatewayError, jsonrpc_error};
use crate::gateway::GatewayContext;
use crate::json_strict::{self, StrictError};

/// A POST body that passed the guard: one JSON-RPC message, parsed.
#[derive(Clone, Debug)]
pub struct ParsedMessage(pub Value);

/// Why a body is not one JSON-RPC message; `None` when it is.
pub fn check_message(body: &[u8]) -> Option<(i64, String, Value)> {
    parse_message(body).err()
}

/// The body as one JSON-RPC message, or why it is not one (JSON-RPC error code, message, request id).
pub fn parse_message(body: &[u8]) -> Result<Value, (i64, String, Value)> {
    let value = match json_strict::parse(body) {
        Ok(v) => v,
        Err(StrictError::Syntax(e)) => return Err((-32700, format!("Parse error: {e}"), Value::Null)),
        Err(duplicate) => return Err((-32600, format!("Invalid Request: {duplicate}"), Value::Null)),
    };
    let Value::Object(message) = &value else {
        return Err((-32600, "Invalid Request: the body must be one JSON-RPC message object".into(), Value::Null));
    };
    if !message.get("id").is_none_or(id_ok) {
        // An id the gateway could not echo faithfully is not echoed at all (JSON-RPC: `null` when unknown).
        let why = "Invalid Request: \"id\" must be a string or an integer within i64";
        return Err((-32600, why.into(), Value::Null));
    }
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let invalid = |why: &str| Err((-32600, format!("Invalid Request: {why}"), id.clone()));
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("\"jsonrpc\" must be \"2.0\"");
    }
    match message.get("method") {
        Some(Value::String(_)) => {}
        Some(_) => return invalid("\"method\" must be a string"),
        None if message.contains_key("id") && (message.contains_key("result") || message.contains_key("error")) => {}
        None => return invalid("a request needs \"method\""),
    }
    // JSON-RPC allows positional params; MCP never uses them, and a reader that took them would disagree with rmcp.
    if !matches!(message.get("params"), None | Some(Value::Object(_))) {
        return invalid("\"params\" must be an object");
    }
    Ok(value)
}

/// Whether `id` is a JSON-RPC id the gateway takes (contract 14): a string, or an integer within i64. A number in
/// float form is taken only when it is exactly such an integer (`1.0`, `1e2`), as rmcp's own reader does, so that the
/// guard and the protocol layer agree on every id; `1.5`, `1e30`, `true`, `{}` and `null` are refused.
fn id_ok(id: &Value) -> bool {
    /// 2^53: from here on an `f64` no longer says which integer was written.
    const MAX_EXACT: f64 = 9_007_199_254_740_992.0;
    match id {
        Value::String(_) => true,
        Value::Number(n) => {
            n.as_i64().is_some() || (n.is_f64() && n.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() < MAX_EXACT))
        }
        _ => false,
    }
}

/// The step: one well-formed JSON-RPC message within the body limits.
#[derive(Clone)]
pub struct JsonRpcGuard(pub Arc<GatewayContext>);

impl Step for JsonRpcGuard {
    fn run<S: Next>(&self, req: Request, next: S) -> impl Future<Output = Response> + Send + 'static {
        guard_jsonrpc(Arc::clone(&self.0), req, next)
    }
}

async fn guard_jsonrpc(ctx: Arc<GatewayContext>, req: Request, next: impl Next) -> Response {
    if req.method() != Method::POST {
        return forward(next, req).await;
    }
    let snapshot = ctx.store.snapshot();
    let limits = &snapshot.settings.limits;
    let metrics = ctx.store.metrics();
    let (parts, body) = req.into_parts();
    let limit = limits.max_request_body_bytes;
    let bytes = match read_limited_within(body, limit, limits.request_read_timeout).await {
        Ok(bytes) => bytes,
        Err(BodyError::Read(e)) => {
            let message = format!("cannot read the request body: {e}");
            return jsonrpc_error(StatusCode::BAD_REQUEST, -32700, &message, Value::Null, None);
        }
        Err(BodyError::TooLarge) => {
            metrics.limit_hit("request_body");
            let message = format!("request body exceeds {limit} bytes");
            return GatewayError::new(ErrorCode::PayloadTooLarge, message).response(None);
        }
        Err(BodyError::TimedOut) => {
            metrics.limit_hit("read_timeout");
            let seconds = limits.request_read_timeout.as_secs_f64();
            let message = format!("the request body was not received within {seconds} seconds");
            return GatewayError::new(ErrorCode::RequestTimeout, message).close_connection().response(None);
        }
    };
    let parsed = match parse_message(&bytes) {
        Ok(message) => message,
        Err((code, message, id)) => {
            let id = (!id.is_null()).then_some(&id);
            return jsonrpc_error(StatusCode::BAD_REQUEST, code, &message, Value::Null, id);
        }
    };
    let mut req = Request::from_parts(parts, Body::from(bytes));
    req.extensions_mut().insert(ParsedMessage(parsed));
    forward(next, req).await
}

#[cfg(test)]
mod tests {
    use super::check_message;
    use serde_json::Value;

    #[test]
    fn messages() {
        assert_eq!(check_message(b"not json").map(|m| m.0), Some(-32700));
        assert_eq!(check_message(b"[1,2]").map(|m| m.0), Some(-32600));
        assert_eq!(check_message(br#"{"jsonrpc":"1.0","method":"x"}"#).map(|m| m.0), Some(-32600));
        assert_eq!(check_message(br#"{"jsonrpc":"2.0"}"#).map(|m| m.0), Some(-32600));
        assert_eq!(check_message(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#).map(|m| m.0), Some(-32600));
        assert_eq!(check_message(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#).map(|m| m.0), Some(-32600));
        assert_eq!(check_message(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[]}"#).map(|m| m.0), Some(-32600));
        for id in ["1.5", "1e30", "true", "null", "{}", "[]", "9223372036854775808", "-9223372036854775809"] {
            let message = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            assert_eq!(check_message(message.as_bytes()).map(|m| (m.0, m.2)), Some((-32600, Value::Null)), "{id}");
        }
        for id in ["0", "-9223372036854775808", "9223372036854775807", "1.0", "1e2", "\"a\""] {
            let message = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            assert!(check_message(message.as_bytes()).is_none(), "{id}");
        }
        assert!(check_message(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_none());
        assert!(check_message(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).is_none());
        assert!(check_message(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#).is_none());
        let twice = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#;
        assert_eq!(check_message(twice).map(|m| m.0), Some(-32600));
    }
}
