//! `gw_secure_call_tools` (spec 4.1): each call in order, each with its own result; a failed or blocked call does not
//! stop the batch. Per call: the tool must exist on the server (discovery), then the upstream call runs under
//! `tool_execution_timeout` in a pooled process, wrapped in the server's guardrails (`guardrails/stage.rs`): input
//! check and redaction before, output check, quality checks and restoring after.

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::discovery::{discover, find_server, upstream_failure, upstream_spec};
use super::{Failure, SecureCallInput, ToolCall};
use crate::gateway::timeouts::TimeoutKind;
use crate::gateway::{GatewayContext, Identity};
use crate::guardrails::provider::Provider;
use crate::guardrails::stage::{CallGuard, GuardSettings};
use crate::telemetry::spans;
use crate::upstream::{PoolKey, ServerSpec, UpstreamError};

/// The pool enforces a timeout itself (and kills the process); the outer timer is a backstop just behind it.
pub const TIMEOUT_MARGIN: Duration = Duration::from_millis(500);

/// `gw_secure_call_tools`.
pub async fn secure_call(ctx: &GatewayContext, identity: &Identity, input: SecureCallInput) -> Value {
    let started = Instant::now();
    let entry = match find_server(identity, &input.server_name) {
        Ok(entry) => entry,
        Err(f) => return f.to_value(),
    };
    let known = discover(ctx, identity, entry).await;
    let key = PoolKey {
        mcp_config_id: identity.mcp_config_id.clone().unwrap_or_default(),
        server_name: entry.server_name.clone(),
    };
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let settings = &identity.snapshot.settings;
    let guard_settings = GuardSettings {
        timeout: settings.timeouts.guardrail,
        relevancy_threshold: settings.relevancy_threshold,
        adherence_threshold: settings.adherence_threshold,
    };
    let mut guardrails_applied = false;
    // Made on the first call that reaches the upstream (it may need an OAuth token).
    let mut spec: Option<ServerSpec> = None;
    let mut results = Vec::with_capacity(input.tool_calls.len());
    for call in input.tool_calls {
        let outcome = match &known {
            Err(f) => Err(f.clone()),
            Ok(found) => {
                let exists = found.tools.iter().any(|t| t.get("name").and_then(Value::as_str) == Some(&call.name));
                if exists {
                    let spec = match &spec {
                        Some(spec) => spec,
                        None => match upstream_spec(ctx, identity, entry).await {
                            Ok(made) => spec.insert(made),
                            Err(f) => {
                                results.push(f.to_value());
                                continue;
                            }
                        },
                    };
                    let guard = CallGuard::new(
                        &provider,
                        entry.input_guardrails_policy.as_ref(),
                        entry.output_guardrails_policy.as_ref(),
                        guard_settings,
                        &ctx.timeouts,
                        &ctx.store.metrics().guardrail_blocks,
                        &entry.server_name,
                    );
                    guardrails_applied |= guard.applies();
                    let (server, tool, project) = (&entry.server_name, call.name.clone(), &identity.project_id);
                    spans::tool_execution(server, &tool, project, guarded_call(ctx, identity, &key, spec, call, guard))
                        .await
                } else {
                    Err(Failure::new(
                        "TOOL_NOT_FOUND",
                        format!("server {:?} has no tool {:?}", entry.server_name, call.name),
                    ))
                }
            }
        };
        results.push(outcome.unwrap_or_else(|f| f.to_value()));
    }
    json!({
        "status": "success",
        "results": results,
        "metadata": {
            "server_name": entry.server_name,
            "execution_time_ms": started.elapsed().as_millis() as u64,
            "guardrails_applied": guardrails_applied,
        },
    })
}

/// One call through its guardrails: a blocked result, a failure, or the upstream's (restored) response.
async fn guarded_call(
    ctx: &GatewayContext,
    identity: &Identity,
    key: &PoolKey,
    spec: &ServerSpec,
    call: ToolCall,
    mut guard: CallGuard<'_>,
) -> Result<Value, Failure> {
    let args = match call.args {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(Failure::new("INVALID_ARGUMENTS", "args must be an object")),
    };
    let args = match guard.check_input(args).await {
        Ok(args) => args,
        Err(blocked) => return Ok(blocked),
    };
    let response = run_call(ctx, identity, key, spec, &call.name, args.clone()).await?;
    Ok(match guard.check_output(&call.name, &args, response).await {
        Ok(response) => json!({"status": "success", "tool_name": call.name, "response": response}),
        Err(blocked) => blocked,
    })
}

/// The upstream call itself: its `CallToolResult` as JSON.
async fn run_call(
    ctx: &GatewayContext,
    identity: &Identity,
    key: &PoolKey,
    spec: &ServerSpec,
    tool: &str,
    args: Map<String, Value>,
) -> Result<Value, Failure> {
    let limit = identity.snapshot.settings.timeouts.tool_execution;
    let result = ctx
        .timeouts
        .run_classified(
            TimeoutKind::ToolExecution,
            limit + TIMEOUT_MARGIN,
            ctx.pool.call_tool(key, spec, tool, args, limit),
            |r| matches!(r, Err(UpstreamError::Timeout(_))),
        )
        .await
        .map_err(|t| Failure::new("TIMEOUT", crate::gateway::timeouts::TimedOut(t.0 - TIMEOUT_MARGIN).to_string()))?
        .map_err(|e| upstream_failure(&e))?;
    serde_json::to_value(&result).map_err(|e| Failure::new("UPSTREAM_ERROR", e.to_string()))
}
