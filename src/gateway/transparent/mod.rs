//! Transparent mode (contract section 8): upstream tools served as the gateway's own, with `tool_exposure`
//! `"transparent"` or `"both"`.
//!
//! - `tools/list` shows [`catalog::tool_list`]: every tool curation lets the caller see, under its exposed name, its
//!   definition otherwise the upstream's.
//! - `tools/call` of an exposed name ([`call_tool`]) runs exactly the pipeline of one `gw_secure_call_tools` item
//!   ([`ServerCalls`]: curation, input guardrails and PII redaction, the pooled call under `tool_execution_timeout`,
//!   output guardrails, PII restoration, the call's log, metrics and span). The answer is the upstream's
//!   `CallToolResult` as it came (its own `isError` results included), unless the gateway speaks: a blocked call or a
//!   failure is an `isError` result carrying the contract's answer object, in the envelope of the `gw_*` tools.
//! - A name nobody exposes, or a tool curation hides, is a JSON-RPC -32602, as any MCP server answers an unknown
//!   tool.

pub mod catalog;
pub mod late;
pub mod relay;
pub mod resources;
pub mod rounds;
pub mod stream;
pub mod subscriptions;
pub mod task_declare;
mod task_ops;
pub mod task_route;
mod task_wire;
pub mod tasks;
pub mod tool_list;
mod upstream;

use serde_json::{Map, Value};

use super::GatewayContext;
use rmcp::ErrorData as McpError;

use super::tools::{Operation, ServerCalls, ToolCall, record};
use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::exposure::apps;
use crate::gateway::middleware::guardrails::TaskAsk;
use crate::guardrails::provider::Provider;
use crate::telemetry::spans;
use crate::upstream::relay::{FromServer, Relay};

/// A transparent call refused as the protocol refuses an unknown tool (JSON-RPC -32602).
#[derive(Debug, thiserror::Error)]
#[error("unknown tool {0:?}")]
pub struct UnknownTool(pub String);

/// The upstream tools `identity` sees, as `tools/list` lists them.
pub async fn list_tools(ctx: &GatewayContext, identity: &Identity, session: Option<&str>) -> tool_list::ToolList {
    catalog::tool_list(ctx, identity, session).await
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
    relay: Option<Relay>,
) -> Result<CallAnswer, UnknownTool> {
    call_tool_task(ctx, identity, session, name, args, relay, None).await
}

/// [`call_tool`], task-augmented with `task` when given (contract 15: the same pipeline; see `task_route.rs`).
pub async fn call_tool_task(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    name: &str,
    args: Map<String, Value>,
    relay: Option<Relay>,
    task: Option<TaskAsk>,
) -> Result<CallAnswer, UnknownTool> {
    let Some((tool, discovered)) = catalog::find(ctx, identity, session, name).await else {
        if catalog::is_quarantined(ctx, identity, session, name).await {
            let why = format!("tool {name:?} is quarantined: its definition is under review");
            return Ok(CallAnswer::Gateway(GatewayError::new(ErrorCode::ToolQuarantined, why).answer()));
        }
        if let Some((entry, upstream)) = catalog::policy_hidden(ctx, identity, session, name).await {
            // Through the pipeline, which denies it as it denies a listed tool: answered, audited and counted alike.
            let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
            let mut calls = ServerCalls::open(ctx, identity, session, entry, &provider);
            let denied = calls.call(ToolCall { name: upstream, args: Some(Value::Object(args)) }).await;
            return Ok(CallAnswer::Gateway(denied));
        }
        if let Some(required) = catalog::credentials_required(ctx, identity, name).await {
            let answer = required.answer();
            offer_connection(relay.as_ref(), &answer).await;
            return Ok(CallAnswer::Gateway(answer));
        }
        return Err(UnknownTool(name.to_string()));
    };
    let asker = relay.clone();
    let started = std::time::Instant::now();
    let (project, config) = (&identity.project_id, identity.mcp_config_id.as_deref());
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let work = async {
        let calls = ServerCalls::open(ctx, identity, session, tool.entry, &provider).with_relay(relay);
        let mut calls = calls.with_known(discovered).with_task(task);
        let call = ToolCall { name: tool.upstream_name().to_string(), args: Some(Value::Object(args)) };
        calls.call(call).await
    };
    let mut item = spans::gateway_tool("tools/call", project, config, Box::pin(work)).await;
    record(ctx, identity, "transparent", name, started.elapsed(), &item);
    match item.get("error_code").and_then(Value::as_str) {
        // Hidden or gone since the lookup (a filter or the cache changed): unknown, as before the lookup.
        Some("TOOL_NOT_FOUND" | "TOOL_NOT_ALLOWED") => Err(UnknownTool(name.to_string())),
        _ if item.get("status").and_then(Value::as_str) == Some("success") => {
            let mut result = item.get_mut("response").map(Value::take).unwrap_or(Value::Null);
            apps::rewrite_result(&tool.prefix, &mut result);
            Ok(CallAnswer::Upstream(result))
        }
        _ => {
            offer_connection(asker.as_ref(), &item).await;
            Ok(CallAnswer::Gateway(item))
        }
    }
}

/// How long the caller's client has to answer the gateway's URL elicitation (it answers once the user has agreed, or
/// declined, to open the URL; the connection itself is not waited for).
const CONNECTION_OFFER_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// For a `CREDENTIALS_REQUIRED` answer with an `authorize_url` (contract 16): when the call has a relay to its client
/// and the client declared URL elicitation, the URL is also offered as a URL-mode `elicitation/create`, so the client
/// can open it for the user. The call still answers the error: the user calls again once connected.
async fn offer_connection(relay: Option<&Relay>, answer: &Value) {
    let Some(relay) = relay else { return };
    let Some(url) = answer.get("authorize_url").and_then(Value::as_str) else { return };
    if answer.get("error_code").and_then(Value::as_str) != Some("CREDENTIALS_REQUIRED") {
        return;
    }
    let Ok(id) = crate::secrets::random_token() else { return };
    let message = answer.get("message").cloned().unwrap_or_default();
    let params = serde_json::json!({"mode": "url", "url": url, "elicitationId": id, "message": message});
    let (asked, answered) = tokio::sync::oneshot::channel();
    let request = FromServer::Request { method: "elicitation/create".to_string(), params, answer: asked };
    if relay.messages.send(request).await.is_ok() {
        let outcome = tokio::time::timeout(CONNECTION_OFFER_WAIT, answered).await;
        let action = match &outcome {
            Ok(Ok(Ok(answer))) => answer.get("action").and_then(Value::as_str).unwrap_or("none").to_string(),
            Ok(Ok(Err(refused))) => format!("not asked ({})", refused.message),
            _ => "no answer".to_string(),
        };
        tracing::info!(action = %action, "the client was offered the connect URL as a URL-mode elicitation");
    }
}

/// The upstream prompts `identity` sees, as `prompts/list` lists them (named as tools are).
pub async fn list_prompts(ctx: &GatewayContext, identity: &Identity, session: Option<&str>) -> Vec<Value> {
    catalog::prompts(ctx, identity, session, None).await.into_iter().map(catalog::Exposed::listed).collect()
}

/// `prompts/get` of the prompt exposed as `name`: the upstream's `GetPromptResult` through the server's guardrails
/// (its arguments checked and redacted as a tool call's are; the messages' text checked and restored).
pub async fn get_prompt(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    name: &str,
    args: Map<String, Value>,
    relay: Option<Relay>,
) -> Result<Value, McpError> {
    let Some(prompt) = catalog::find_prompt(ctx, identity, session, name).await else {
        if catalog::is_quarantined_prompt(identity, ctx, name) {
            let why = format!("prompt {name:?} is quarantined: its definition is under review");
            let answer = GatewayError::new(ErrorCode::ToolQuarantined, why.clone()).answer();
            return Err(McpError::internal_error(why, Some(answer)));
        }
        if let Some(required) = catalog::credentials_required(ctx, identity, name).await {
            return Err(McpError::internal_error(required.message.clone(), Some(required.answer())));
        }
        return Err(McpError::invalid_params(format!("unknown prompt {name:?}"), None));
    };
    let upstream_name = prompt.upstream_name();
    let request = (Operation::GetPrompt, upstream_name, args, Some(&prompt.definition));
    relay_request(ctx, identity, session, prompt.entry, request, relay).await
}

/// A request other than a tool call to `entry`'s server through its guardrails ([`ServerCalls::relay`]): the
/// upstream's result, or the gateway's answer object (blocked, failed) as the JSON-RPC error's `data`.
async fn relay_request(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    entry: &ServerEntry,
    (operation, name, args, definition): (Operation, &str, Map<String, Value>, Option<&Value>),
    relay: Option<Relay>,
) -> Result<Value, McpError> {
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let mut calls = ServerCalls::open(ctx, identity, session, entry, &provider).with_relay(relay);
    let call = ToolCall { name: name.to_string(), args: Some(Value::Object(args)) };
    let mut item = calls.relay(operation, call, definition).await;
    if item.get("status").and_then(Value::as_str) == Some("success") {
        return Ok(item.get_mut("response").map(Value::take).unwrap_or(Value::Null));
    }
    let message = item.get("message").and_then(Value::as_str).unwrap_or("the request failed").to_string();
    Err(McpError::internal_error(message, Some(item)))
}
