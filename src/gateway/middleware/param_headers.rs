//! SEP-2243's `Mcp-Param-*` headers of a 2026-07-28 `tools/call` to an upstream tool, checked against the body
//! (contract 15, "Parameter headers"): a middlebox routes on the header without reading the body, so a request whose
//! header says one thing and whose body another must never run.
//!
//! rmcp checks `Mcp-Method` and `Mcp-Name` before its handler, and `Mcp-Param-*` only against a schema its handler
//! hands it without knowing the caller; which tools a caller sees depends on its key, so this step does it, after
//! admission, with the exposed tool's `inputSchema`. For every property reached from the schema's root through
//! `properties` that carries `"x-mcp-header": NAME`: the argument's value (a string, number or boolean; `null` or
//! absent counts as absent) and the header `Mcp-Param-NAME` must both be absent, or both present and equal, the header
//! taken literally or, written `=?base64?…?=`, decoded from strict Base64 into UTF-8. A header given twice is refused.
//! A mismatch is HTTP 400 with JSON-RPC error -32020 (HeaderMismatch), as rmcp answers the others.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Request, Response, StatusCode};
use base64::Engine;
use serde_json::Value;

use super::jsonrpc::ParsedMessage;
use super::step::{Next, Step, forward};
use crate::auth::Identity;
use crate::gateway::GatewayContext;
use crate::gateway::transparent::catalog;
use crate::telemetry::metrics::GW_TOOLS;

/// JSON-RPC "header mismatch" (SEP-2243).
pub const HEADER_MISMATCH: i64 = -32020;

/// The first revision with the standard headers.
const STANDARD_HEADERS: &str = "2026-07-28";

/// The step; see the module documentation.
#[derive(Clone)]
pub struct ParamHeaders(pub Arc<GatewayContext>);

impl Step for ParamHeaders {
    fn run<S: Next>(&self, req: Request<Body>, next: S) -> impl Future<Output = Response<Body>> + Send + 'static {
        let ctx = Arc::clone(&self.0);
        async move {
            if let Some((identity, name)) = asked(&req)
                && let Some((tool, _)) = catalog::find(&ctx, &identity, None, &name).await
                && let Some(refused) = mismatch(&req, &tool.definition)
            {
                return refused;
            }
            forward(next, req).await
        }
    }
}

/// The caller and the tool of a request this step checks: a stateless (2026-07-28 or later) `tools/call` of a tool
/// that is not one of the gateway's own, from a caller whose configuration exposes upstream tools.
fn asked(req: &Request<Body>) -> Option<(Arc<Identity>, String)> {
    let version = req.headers().get("mcp-protocol-version")?.to_str().ok()?;
    if version.trim() < STANDARD_HEADERS {
        return None;
    }
    let message = &req.extensions().get::<ParsedMessage>()?.0;
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let name = message.get("params")?.get("name")?.as_str()?;
    let identity = req.extensions().get::<Arc<Identity>>()?;
    let exposes_upstream = identity.snapshot.tool_exposure(identity.mcp_config_id.as_deref()).upstream();
    (exposes_upstream && !GW_TOOLS.contains(&name)).then(|| (Arc::clone(identity), name.to_string()))
}

/// The refusal of `req` when its `Mcp-Param-*` headers do not match its arguments for the tool `definition`.
fn mismatch(req: &Request<Body>, definition: &Value) -> Option<Response<Body>> {
    let message = &req.extensions().get::<ParsedMessage>()?.0;
    let arguments = message.get("params").and_then(|params| params.get("arguments"));
    let why = check(req.headers(), arguments, definition.get("inputSchema")?).err()?;
    Some(crate::error::jsonrpc_error(StatusCode::BAD_REQUEST, HEADER_MISMATCH, &why, Value::Null, message.get("id")))
}

/// Every `x-mcp-header` annotation of `schema`: the property's path from the root and the header's name.
fn annotations(schema: &Value) -> Vec<(Vec<&str>, &str)> {
    fn walk<'a>(properties: Option<&'a Value>, path: &mut Vec<&'a str>, out: &mut Vec<(Vec<&'a str>, &'a str)>) {
        let Some(Value::Object(properties)) = properties else { return };
        for (name, property) in properties {
            path.push(name);
            if let Some(Value::String(header)) = property.get("x-mcp-header")
                && !header.is_empty()
            {
                out.push((path.clone(), header));
            }
            walk(property.get("properties"), path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema.get("properties"), &mut Vec::new(), &mut out);
    out
}

/// A primitive argument as its header carries it; `None` for absent, `null` or not a primitive.
fn as_header_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        _ => None,
    }
}

/// A header's value as the client meant it: literal, or strict Base64 of UTF-8 between `=?base64?` and `?=`.
fn decoded(raw: &str) -> Option<String> {
    match raw.strip_prefix("=?base64?").and_then(|inner| inner.strip_suffix("?=")) {
        Some(inner) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(inner).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(raw.to_string()),
    }
}

/// Checks `headers` against `arguments` for the annotations of `schema`; the reason of the first mismatch.
pub fn check(headers: &HeaderMap, arguments: Option<&Value>, schema: &Value) -> Result<(), String> {
    for (path, header) in annotations(schema) {
        let full = format!("Mcp-Param-{header}");
        let mut values = headers.get_all(full.as_str()).iter();
        let sent = values.next();
        if values.next().is_some() {
            return Err(format!("duplicate {full} header"));
        }
        let sent = match sent {
            None => None,
            Some(value) => {
                let text = value.to_str().map_err(|_| format!("{full} header contains invalid characters"))?;
                Some(
                    decoded(text.trim_matches([' ', '\t']))
                        .ok_or_else(|| format!("{full} header is not valid Base64"))?,
                )
            }
        };
        let argument =
            arguments.and_then(|args| path.iter().try_fold(args, |value, key| value.get(key))).and_then(as_header_text);
        let property = path.join(".");
        match (sent, argument) {
            (None, None) => {}
            (Some(_), None) => return Err(format!("unexpected {full} header for absent or null `{property}`")),
            (None, Some(_)) => return Err(format!("missing {full} header for `{property}`")),
            (Some(sent), Some(argument)) if sent != argument => {
                return Err(format!("{full} header does not match the body's `{property}`"));
            }
            (Some(_), Some(_)) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn headers_must_say_what_the_body_says() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "limits": {"type": "object", "properties": {"max": {"type": "integer", "x-mcp-header": "Max"}}},
            "query": {"type": "string"}}});
        let args = json!({"region": "Hello", "limits": {"max": 5}, "query": "q"});
        let ok = |pairs: &[(&str, &str)], args: &Value| check(&headers(pairs), Some(args), &schema);
        assert_eq!(ok(&[("mcp-param-region", "Hello"), ("Mcp-Param-Max", "5")], &args), Ok(()));
        assert_eq!(ok(&[("mcp-param-region", "=?base64?SGVsbG8=?="), ("mcp-param-max", "5")], &args), Ok(()));
        assert_eq!(ok(&[("mcp-param-region", " Hello "), ("mcp-param-max", "5")], &args), Ok(()), "OWS trimmed");
        assert_eq!(
            ok(
                &[("mcp-param-region", "=?base64?SGVsbG8"), ("mcp-param-max", "5")],
                &json!({"region": "=?base64?SGVsbG8", "limits": {"max": 5}})
            ),
            Ok(()),
            "literal without the suffix"
        );
        for (pairs, why) in [
            (vec![("mcp-param-region", "=?base64?SGVsbG8?="), ("mcp-param-max", "5")], "padding"),
            (vec![("mcp-param-region", "=?base64?SGVs!!!bG8=?="), ("mcp-param-max", "5")], "alphabet"),
            (vec![("mcp-param-max", "5")], "missing"),
            (vec![("mcp-param-region", "Bye"), ("mcp-param-max", "5")], "different"),
            (vec![("mcp-param-region", "Hello"), ("mcp-param-region", "Hello"), ("mcp-param-max", "5")], "twice"),
        ] {
            assert!(ok(&pairs, &args).is_err(), "{why}");
        }
        let absent = json!({"query": "q"});
        assert_eq!(ok(&[], &absent), Ok(()));
        assert!(ok(&[("mcp-param-region", "x")], &absent).is_err(), "a header for an absent argument");
        assert_eq!(ok(&[], &json!({"region": null})), Ok(()), "null is absent");
    }
}
