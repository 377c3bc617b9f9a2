//! Transparent mode (contract section 8): upstream tools served as the gateway's own, with `tool_exposure`
//! `"transparent"` or `"both"`.
//!
//! - `tools/list` shows [`catalog::tools`]: every tool curation lets the caller see, under its exposed name, its
//!   definition otherwise the upstream's.
//! - `tools/call` of an exposed name ([`call_tool`]) runs exactly the pipeline of one `gw_secure_call_tools` item
//!   ([`ServerCalls`]: curation, input guardrails and PII redaction, the pooled call under `tool_execution_timeout`,
//!   output guardrails, PII restoration, the call's log, metrics and span). The answer is the upstream's
//!   `CallToolResult` as it came (its own `isError` results included), unless the gateway speaks: a blocked call or a
//!   failure is an `isError` result carrying the contract's answer object, in the envelope of the `gw_*` tools.
//! - A name nobody exposes, or a tool curation hides, is a JSON-RPC -32602, as any MCP server answers an unknown
//!   tool.

pub mod catalog;

use serde_json::{Map, Value};

use super::GatewayContext;
use super::tools::{ServerCalls, ToolCall, record};
use crate::auth::Identity;
use crate::guardrails::provider::Provider;
use crate::telemetry::spans;

/// A transparent call refused as the protocol refuses an unknown tool (JSON-RPC -32602).
#[derive(Debug, thiserror::Error)]
#[error("unknown tool {0:?}")]
pub struct UnknownTool(pub String);

/// The upstream tools `identity` sees, as `tools/list` lists them.
pub async fn list_tools(ctx: &GatewayContext, identity: &Identity, session: Option<&str>) -> Vec<Value> {
    catalog::tools(ctx, identity, session, None).await.into_iter().map(catalog::ExposedTool::listed).collect()
}

/// What a transparent call answers.
#[derive(Debug)]
pub enum CallAnswer {
    /// The upstream's `CallToolResult` (restored), as JSON.
    Upstream(Value),
    /// The gateway's answer object (blocked, timeout, failure), for the envelope of [`super::envelope`].
    Gateway(Value),
}

/// `tools/call` of the upstream tool exposed as `name`.
pub async fn call_tool(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    name: &str,
    args: Map<String, Value>,
) -> Result<CallAnswer, UnknownTool> {
    let Some(tool) = catalog::find(ctx, identity, session, name).await else {
        return Err(UnknownTool(name.to_string()));
    };
    let started = std::time::Instant::now();
    let (project, config) = (&identity.project_id, identity.mcp_config_id.as_deref());
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let work = async {
        let mut calls = ServerCalls::open(ctx, identity, session, tool.entry, &provider).await;
        let call = ToolCall { name: tool.upstream_name().to_string(), args: Some(Value::Object(args)) };
        calls.call(call).await
    };
    let mut item = spans::gateway_tool("tools/call", project, config, Box::pin(work)).await;
    record(ctx, identity, "transparent", name, started.elapsed(), &item);
    match item.get("error_code").and_then(Value::as_str) {
        // Hidden or gone since the lookup (a filter or the cache changed): unknown, as before the lookup.
        Some("TOOL_NOT_FOUND" | "TOOL_NOT_ALLOWED") => Err(UnknownTool(name.to_string())),
        _ if item.get("status").and_then(Value::as_str) == Some("success") => {
            Ok(CallAnswer::Upstream(item.get_mut("response").map(Value::take).unwrap_or(Value::Null)))
        }
        _ => Ok(CallAnswer::Gateway(item)),
    }
}
