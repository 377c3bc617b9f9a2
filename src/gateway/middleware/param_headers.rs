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
use axum::http::{Request, Response, StatusCode};
use serde_json::Value;

use super::jsonrpc::ParsedMessage;
use super::step::{Next, Step, forward};
use crate::auth::Identity;
use crate::gateway::GatewayContext;
use crate::gateway::transparent::catalog;
use crate::mcp_headers::{STANDARD_HEADERS, check};
use crate::telemetry::metrics::GW_TOOLS;

/// JSON-RPC "header mismatch" (SEP-2243).
pub const HEADER_MISMATCH: i64 = -32020;

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

/// `MCP-Protocol-Version`, looked up by `HeaderName` (a lookup by text parses the name each time).
const PROTOCOL_VERSION_HEADER: axum::http::HeaderName = axum::http::HeaderName::from_static("mcp-protocol-version");

/// The caller and the tool of a request this step checks: a stateless (2026-07-28 or later) `tools/call` of a tool
/// that is not one of the gateway's own, from a caller whose configuration exposes upstream tools.
fn asked(req: &Request<Body>) -> Option<(Arc<Identity>, String)> {
    let version = req.headers().get(PROTOCOL_VERSION_HEADER)?.to_str().ok()?;
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
