//! The seven `gw_*` tools (contract section 4): their definitions for `tools/list` and their dispatch.
//!
//! Every tool answers a JSON object with a `status`; the handler turns it into a `CallToolResult` whose
//! `structuredContent` is the object and whose text content is the same object as JSON. Arguments that do not fit a
//! tool's input schema are a JSON-RPC invalid-params error; everything else (an unknown server, a failed upstream call)
//! is an answer with `status: "error"` and an `error_code`.

mod discovery;
mod execute;
pub(crate) mod review;
mod status;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use rmcp::model::{JsonObject, Tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::GatewayContext;
use crate::auth::Identity;
use crate::error::{ErrorCode, GatewayError};
use crate::telemetry::spans;
use crate::timeouts::TimeoutKind;

pub use discovery::{
    DiscoveryResult, discover, discover_visible, servers, shown_to, upstream_failure, upstream_spec, visible_servers,
};
pub use execute::{Operation, ServerCalls, TIMEOUT_MARGIN, audit_call, json_size};

/// Why a tool call is refused at the protocol level.
#[derive(Debug, thiserror::Error)]
pub enum ToolCallError {
    #[error(
        "unknown tool {0:?}; the gateway offers gw_list_all_servers, gw_get_server_info, gw_discover_all_tools, gw_secure_call_tools, gw_get_cache_status, gw_clear_cache and gw_get_timeout_metrics"
    )]
    UnknownTool(String),
    #[error("invalid arguments for {tool}: {reason}")]
    InvalidArguments { tool: String, reason: String },
}

#[derive(Deserialize, JsonSchema)]
pub struct ListServersInput {
    /// Also discover each server's tools.
    #[serde(default)]
    pub discover_tools: bool,
}

#[derive(Deserialize, JsonSchema)]
pub struct ServerInput {
    /// The upstream server's name.
    pub server_name: String,
}

#[derive(Deserialize, JsonSchema)]
pub struct DiscoverInput {
    /// One server; without it, every server of the configuration.
    #[serde(default)]
    pub server_name: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub struct ToolCall {
    /// The upstream tool's name.
    pub name: String,
    /// Its arguments (an object).
    #[serde(default)]
    pub args: Option<Value>,
}

#[derive(Deserialize, JsonSchema)]
pub struct SecureCallInput {
    /// The upstream server's name.
    pub server_name: String,
    /// The calls, run in order; each gets its own result.
    pub tool_calls: Vec<ToolCall>,
}

#[derive(Deserialize, JsonSchema)]
pub struct NoInput {}

#[derive(Deserialize, JsonSchema)]
pub struct ClearCacheInput {
    /// Only this server's cached tools.
    #[serde(default)]
    pub server_name: Option<String>,
    /// `all` (default), `tools` or `gateway_config`.
    #[serde(default)]
    pub cache_type: Option<String>,
}

fn schema<T: JsonSchema>() -> Arc<JsonObject> {
    let value = serde_json::to_value(schemars::schema_for!(T)).unwrap_or_else(|_| json!({"type": "object"}));
    let mut object = match value {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    object.remove("$schema");
    object.remove("title");
    object.entry("type").or_insert_with(|| json!("object"));
    Arc::new(object)
}

/// The tool definitions `tools/list` answers.
pub fn definitions() -> Vec<Tool> {
    vec![
        Tool::new(
            "gw_list_all_servers",
            "List the upstream MCP servers of your configuration.",
            schema::<ListServersInput>(),
        ),
        Tool::new(
            "gw_get_server_info",
            "Details of one upstream server: description, tools, whether guardrails apply.",
            schema::<ServerInput>(),
        ),
        Tool::new(
            "gw_discover_all_tools",
            "Discover the tools of one upstream server (or of all): from the cache, the configuration, or the live server.",
            schema::<DiscoverInput>(),
        ),
        Tool::new(
            "gw_secure_call_tools",
            "Call tools of an upstream server through the gateway's guardrails; one result per call, in order.",
            schema::<SecureCallInput>(),
        ),
        Tool::new(
            "gw_get_cache_status",
            "Entries, hits and misses of the tool cache and the gateway config cache.",
            schema::<NoInput>(),
        ),
        Tool::new(
            "gw_clear_cache",
            "Clear cached tools (of one server or all) and/or cached gateway configuration.",
            schema::<ClearCacheInput>(),
        ),
        Tool::new(
            "gw_get_timeout_metrics",
            "Operations, timeouts and cancellations per timeout kind, and the timeouts in force.",
            schema::<NoInput>(),
        ),
    ]
}

fn parse<T: DeserializeOwned>(tool: &str, args: Map<String, Value>) -> Result<T, ToolCallError> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| ToolCallError::InvalidArguments { tool: tool.to_string(), reason: e.to_string() })
}

/// Runs `answer` under `default_timeout`.
async fn bounded(ctx: &GatewayContext, identity: &Identity, answer: impl Future<Output = Value>) -> Value {
    let limit = identity.snapshot.settings.timeouts.default;
    ctx.timeouts
        .of(identity.mcp_config_id.as_deref())
        .run(TimeoutKind::Default, limit, answer)
        .await
        .unwrap_or_else(|t| GatewayError::new(ErrorCode::Timeout, t.to_string()).answer())
}

/// A tool call whose name and arguments have been checked: running it is the only step left.
pub enum ToolInvocation {
    ListServers(ListServersInput),
    ServerInfo(ServerInput),
    Discover(DiscoverInput),
    SecureCall(SecureCallInput),
    CacheStatus,
    ClearCache(ClearCacheInput),
    TimeoutMetrics,
}

impl ToolInvocation {
    /// Checks the tool name and its arguments; nothing has run yet when this fails.
    pub fn parse(name: &str, args: Map<String, Value>) -> Result<ToolInvocation, ToolCallError> {
        Ok(match name {
            "gw_list_all_servers" => ToolInvocation::ListServers(parse(name, args)?),
            "gw_get_server_info" => ToolInvocation::ServerInfo(parse(name, args)?),
            "gw_discover_all_tools" => ToolInvocation::Discover(parse(name, args)?),
            "gw_secure_call_tools" => ToolInvocation::SecureCall(parse(name, args)?),
            "gw_get_cache_status" => parse::<NoInput>(name, args).map(|_| ToolInvocation::CacheStatus)?,
            "gw_clear_cache" => ToolInvocation::ClearCache(parse(name, args)?),
            "gw_get_timeout_metrics" => parse::<NoInput>(name, args).map(|_| ToolInvocation::TimeoutMetrics)?,
            other => return Err(ToolCallError::UnknownTool(other.to_string())),
        })
    }

    /// The tool's name (one of [`crate::telemetry::metrics::GW_TOOLS`]).
    pub fn name(&self) -> &'static str {
        match self {
            ToolInvocation::ListServers(_) => "gw_list_all_servers",
            ToolInvocation::ServerInfo(_) => "gw_get_server_info",
            ToolInvocation::Discover(_) => "gw_discover_all_tools",
            ToolInvocation::SecureCall(_) => "gw_secure_call_tools",
            ToolInvocation::CacheStatus => "gw_get_cache_status",
            ToolInvocation::ClearCache(_) => "gw_clear_cache",
            ToolInvocation::TimeoutMetrics => "gw_get_timeout_metrics",
        }
    }

    /// Runs the tool, traced as a `gw_tool_call` span; counts it, times it and logs it (spec 2.7 fields) whatever
    /// the outcome.
    /// `session` is the caller's MCP session, if the request belongs to one.
    pub async fn run(self, ctx: &GatewayContext, identity: &Identity, session: Option<&str>) -> Value {
        let (name, project, config) = (self.name(), &identity.project_id, identity.mcp_config_id.as_deref());
        let started = std::time::Instant::now();
        let answer = spans::gateway_tool(name, project, config, self.dispatch(ctx, identity, session)).await;
        record(ctx, identity, name, name, started.elapsed(), &answer);
        answer
    }

    /// Each tool's future boxed on its own: they nest deeply (tool, guardrails, pool), the fronts' futures hold this
    /// one, and one future for all of them would be the size of the largest, copied on every call.
    fn dispatch<'a>(
        self,
        ctx: &'a GatewayContext,
        identity: &'a Identity,
        session: Option<&'a str>,
    ) -> BoxFuture<'a, Value> {
        match self {
            ToolInvocation::ListServers(input) => Box::pin(discovery::list_servers(ctx, identity, session, input)),
            ToolInvocation::ServerInfo(input) => Box::pin(discovery::server_info(ctx, identity, session, input)),
            ToolInvocation::Discover(input) => Box::pin(discovery::discover_tool(ctx, identity, session, input)),
            ToolInvocation::SecureCall(input) => Box::pin(execute::secure_call(ctx, identity, session, input)),
            // The tools that touch no upstream run under `default_timeout`.
            ToolInvocation::CacheStatus => {
                Box::pin(bounded(ctx, identity, async { status::cache_status(ctx, identity) }))
            }
            ToolInvocation::ClearCache(input) => {
                Box::pin(bounded(ctx, identity, status::clear_cache(ctx, identity, input)))
            }
            ToolInvocation::TimeoutMetrics => {
                Box::pin(bounded(ctx, identity, async { status::timeout_metrics(ctx, identity) }))
            }
        }
    }
}

/// The outcome label of an answer: `success`, or its error code (codes are constants of this crate; anything else
/// would be a bug, and is counted as `other` so the label stays bounded).
pub(crate) fn outcome(answer: &Value) -> &str {
    if answer.get("status").and_then(Value::as_str) == Some("success") {
        return "success";
    }
    match answer.get("error_code").and_then(Value::as_str) {
        Some(code) if code.len() <= 40 && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') => code,
        _ => "other",
    }
}

/// Metrics and the log record of one tool call of the gateway: `label` is the `tool` label of the metrics (a `gw_*`
/// tool, or `transparent` for a call of an exposed upstream tool), `tool` the name the caller called.
pub(crate) fn record(
    ctx: &GatewayContext,
    identity: &Identity,
    label: &'static str,
    tool: &str,
    took: std::time::Duration,
    answer: &Value,
) {
    let metrics = ctx.store.metrics();
    let outcome = outcome(answer);
    metrics.tool_calls.with_label_values(&[label, outcome]).inc();
    metrics.tool_call_duration.with_label_values(&[label]).observe(took.as_secs_f64());
    // What only the log record reads is looked up only when it is written.
    if !tracing::enabled!(tracing::Level::INFO) {
        return;
    }
    let success = outcome == "success";
    let error = answer.get("message").and_then(Value::as_str).filter(|_| !success);
    let server_name = answer.get("metadata").and_then(|m| m.get("server_name")).and_then(Value::as_str);
    let error_type = (!success).then_some(outcome);
    tracing::info!(
        custom_id = %crate::ids::correlation_id(),
        tool_name = tool,
        server_name,
        project_id = %identity.project_id,
        project_name = %identity.project_name,
        user_id = %identity.user_id,
        email = %crate::secrets::mask_email(&identity.email),
        mcp_config_id = identity.mcp_config_id.as_deref(),
        duration_ms = took.as_millis() as u64,
        success,
        error,
        error_type,
        "tool call"
    );
}

pub async fn call(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    name: &str,
    args: Map<String, Value>,
) -> Result<Value, ToolCallError> {
    Ok(ToolInvocation::parse(name, args)?.run(ctx, identity, session).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seven_tools_with_object_schemas() {
        let tools = definitions();
        assert_eq!(tools.len(), 7);
        for tool in &tools {
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{}", tool.name);
        }
        let secure = &tools[3];
        let required = secure.input_schema.get("required").cloned().unwrap_or_default();
        assert_eq!(required, json!(["server_name", "tool_calls"]));
    }
}
