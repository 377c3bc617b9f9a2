//! What each request about a task does (contract 15), for [`super::task_route`]: the task-augmented call that makes
//! a task, and `tasks/get`, `tasks/result`, `tasks/cancel`, `tasks/list`, `tasks/update` on the process that runs it
//! (`upstream/task_hold.rs`). Every upstream answer passes the boundary (`gateway/boundary/tasks.rs`) before the
//! client sees it, and every request is audited there.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::task_route::Reply;
use super::task_wire::{RELATED_TASK, Seen, call_result, created, cut, gateway_result, runs_as_task};
use super::tasks::{Style, TERMINAL_GRACE, TaskRecord, error_of, forget_after, forward_status, open_id, seal_id};
use super::{CallAnswer, call_tool_task, catalog};
use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::boundary::tasks::{TaskBoundary, audit, visible};
use crate::gateway::middleware::guardrails::TaskAsk;
use crate::gateway::tools::upstream_failure;
use crate::gateway::{GatewayContext, envelope, server_entry};
use crate::guardrails::provider::Provider;
use crate::upstream::{UpstreamError, lock};

/// Who asks, and in which revision.
pub struct Asked<'a> {
    pub ctx: &'a Arc<GatewayContext>,
    pub identity: &'a Arc<Identity>,
    pub session: Option<&'a str>,
    /// A 2026-07-28 client (no session): the extension's shapes.
    pub stateless: bool,
}

/// Whether the tool exposed as `name` to the caller offers tasks (a task-augmented call of it makes one).
pub async fn offers_task(asked: &Asked<'_>, name: &str) -> bool {
    let found = catalog::find(asked.ctx, asked.identity, asked.session, name).await;
    found.is_some_and(|(tool, _)| runs_as_task(&tool.definition))
}

/// A task-augmented `tools/call`; `None` when it runs as a plain call on the usual routes.
pub async fn create(asked: &Asked<'_>, mut params: Map<String, Value>) -> Option<Reply> {
    let Asked { ctx, identity, session, stateless } = *asked;
    let name = params.get("name").and_then(Value::as_str)?.to_string();
    let (tool, _) = catalog::find(ctx, identity, session, &name).await?;
    if !runs_as_task(&tool.definition) {
        return None;
    }
    let limits = &identity.snapshot.settings.limits;
    if ctx.tasks.count(&identity.key_digest) >= limits.max_tasks_per_key {
        return Some(too_many_tasks(ctx, limits.max_tasks_per_key, stateless));
    }
    let max_ms = u64::try_from(limits.max_task.as_millis()).unwrap_or(u64::MAX);
    let asked_ms = params.get("task").and_then(|task| task.get("ttl")).and_then(Value::as_u64);
    let ttl_ms = asked_ms.map_or(max_ms, |asked| asked.clamp(1, max_ms));
    let args = match params.remove("arguments") {
        Some(Value::Object(args)) => args,
        _ => Map::new(),
    };
    let ask = TaskAsk { meta: json!({"ttl": ttl_ms}), ..TaskAsk::default() };
    let answer = call_tool_task(ctx, identity, session, &name, args, None, Some(ask.clone())).await;
    let held = lock(&ask.held).take();
    Some(match (answer, held) {
        (Ok(CallAnswer::Upstream(result)), Some(hold)) => {
            let upstream_id = hold.task_id().to_string();
            let style = if result.get("task").is_some() { Style::Revision2025 } else { Style::Extension };
            let number = ctx.tasks.number();
            let Some(id) = seal_id(&identity.snapshot, &identity.key_digest, number) else {
                let _ = hold.request("tasks/cancel", json!({"taskId": hold.task_id()}), Duration::from_secs(5)).await;
                return Some(Reply::error(-32603, "the task id could not be sealed"));
            };
            let record = TaskRecord {
                number,
                id,
                key: identity.key_digest,
                config: identity.mcp_config_id.clone(),
                server_name: tool.entry.server_name.clone(),
                upstream_tool: tool.upstream_name().to_string(),
                exposed_tool: name,
                upstream_id,
                style,
                created_at: crate::ids::timestamp(),
                ttl_ms,
                deadline: Instant::now() + Duration::from_millis(ttl_ms),
                hold,
                mapping: std::sync::Mutex::new(lock(&ask.mapping).take()),
                ended: Default::default(),
            };
            let record = match ctx.tasks.insert(record, limits.max_tasks_per_key) {
                Ok(record) => record,
                Err(refused) => {
                    let _ =
                        refused.hold.request("tasks/cancel", refused.upstream_params(), Duration::from_secs(5)).await;
                    return Some(too_many_tasks(ctx, limits.max_tasks_per_key, stateless));
                }
            };
            forget_after(ctx, &record, record.time_left());
            if let Some(session) = session {
                forward_status(ctx, identity, &record, session);
            }
            Reply::Result(created(Seen::of(&result).task(&record.id, &record.created_at, ttl_ms, stateless), stateless))
        }
        (Ok(CallAnswer::Upstream(result)), None) => Reply::Result(call_result(result, stateless)),
        (Ok(CallAnswer::Gateway(answer)), held) => {
            // Blocked on its way back (or failed after all): a task it made is not left running.
            if let Some(hold) = held {
                let params = json!({"taskId": hold.task_id()});
                let _ = hold.request("tasks/cancel", params, Duration::from_secs(5)).await;
            }
            Reply::Result(gateway_result(answer, stateless))
        }
        (Err(unknown), _) => Reply::error(-32602, unknown.to_string()),
    })
}

/// `tasks/get`: the task's state; for a stateless client with its end inlined (result or error).
pub async fn get(asked: &Asked<'_>, id: &str) -> Reply {
    let (record, entry) = match find(asked, id) {
        Ok(found) => found,
        Err(unknown) => return unknown,
    };
    let Asked { ctx, identity, stateless, .. } = *asked;
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let mut boundary = TaskBoundary::open(ctx, identity, entry, &provider, lock(&record.mapping).take());
    if let Err(refused) = boundary.may_build() {
        return over_budget(asked, &record, entry, boundary, refused).await;
    }
    let reply = match record.hold.request("tasks/get", record.upstream_params(), poll_timeout(identity)).await {
        Err(error) => failure(ctx, &boundary, error).await,
        Ok(answer) => {
            let mut seen = Seen::of(&answer);
            seen.message = checked_message(&boundary, seen.message.take()).await;
            if stateless && seen.status == "input_required" && record.style == Style::Revision2025 {
                // A 2025-11-25 server's questions come through `tasks/result`, which the extension has not: the
                // client sees the task working; the server's questions are refused to it.
                seen.status = "working";
            }
            let mut task = seen.task(id, &record.created_at, record.ttl_ms, stateless);
            if stateless {
                task.insert("resultType".into(), "complete".into());
                inline_end(&record, &mut boundary, &mut seen, &mut task).await;
            }
            if stateless && seen.is_terminal() {
                ended(ctx, &record);
            }
            Reply::Result(Value::Object(task))
        }
    };
    finish(asked, &record, entry, boundary, "task_get", &reply).await;
    reply
}

/// A stateless client's `tasks/get` of a task that ended or waits: its result, error or questions, checked.
async fn inline_end(
    record: &TaskRecord,
    boundary: &mut TaskBoundary<'_>,
    seen: &mut Seen,
    task: &mut Map<String, Value>,
) {
    let end = match (seen.status, record.style) {
        ("completed" | "failed", Style::Revision2025) => Some(record.upstream_result().await),
        ("completed", Style::Extension) => Some(Ok(seen.result.take().unwrap_or_default())),
        ("failed", Style::Extension) => Some(Err(error_of(seen.error.take()))),
        _ => None,
    };
    match end {
        Some(Ok(result)) => {
            task.insert("status".into(), "completed".into());
            task.insert("result".into(), final_result(record, boundary, result).await);
        }
        Some(Err(error)) => {
            task.insert("status".into(), "failed".into());
            task.insert("error".into(), checked_error(boundary, error).await);
        }
        None if seen.status == "input_required" => {
            let asked = seen.input_requests.take().unwrap_or_default();
            let asked = boundary.status(asked).await.unwrap_or_default();
            task.insert("inputRequests".into(), asked);
        }
        None => {}
    }
}

/// `tasks/result` (2025-11-25): the task's result once it is over (waiting for it, at most until the task's end).
pub async fn result(asked: &Asked<'_>, id: &str) -> Reply {
    let (record, entry) = match find(asked, id) {
        Ok(found) => found,
        Err(unknown) => return unknown,
    };
    let Asked { ctx, identity, .. } = *asked;
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let mut boundary = TaskBoundary::open(ctx, identity, entry, &provider, lock(&record.mapping).take());
    if let Err(refused) = boundary.may_build() {
        return over_budget(asked, &record, entry, boundary, refused).await;
    }
    let reply = match record.upstream_result().await {
        Ok(result) => {
            let mut result = final_result(&record, &mut boundary, result).await;
            if let Some(fields) = result.as_object_mut() {
                let meta = fields.entry("_meta").or_insert_with(|| json!({}));
                if let Some(meta) = meta.as_object_mut() {
                    meta.insert(RELATED_TASK.into(), json!({"taskId": id}));
                }
            }
            Reply::Result(result)
        }
        Err(error) => {
            let checked = checked_error(&boundary, error).await;
            let code = checked.get("code").and_then(Value::as_i64).unwrap_or(-32603);
            let message = checked.get("message").and_then(Value::as_str).unwrap_or("the task failed").to_string();
            Reply::Error { code, message, data: Value::Null }
        }
    };
    ended(ctx, &record);
    finish(asked, &record, entry, boundary, "task_result", &reply).await;
    reply
}

/// `tasks/cancel`: asked of the upstream; the task is forgotten soon after.
pub async fn cancel(asked: &Asked<'_>, id: &str) -> Reply {
    let (record, entry) = match find(asked, id) {
        Ok(found) => found,
        Err(unknown) => return unknown,
    };
    let Asked { ctx, identity, stateless, .. } = *asked;
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let boundary = TaskBoundary::open(ctx, identity, entry, &provider, lock(&record.mapping).take());
    let reply = match record.hold.request("tasks/cancel", record.upstream_params(), poll_timeout(identity)).await {
        Err(error) => failure(ctx, &boundary, error).await,
        Ok(_) if stateless => Reply::Result(json!({"resultType": "complete"})),
        Ok(answer) => {
            let mut seen = Seen::of(&answer);
            if answer.get("status").is_none() {
                seen.status = "cancelled";
            }
            seen.message = checked_message(&boundary, seen.message.take()).await;
            Reply::Result(Value::Object(seen.task(id, &record.created_at, record.ttl_ms, false)))
        }
    };
    ended(ctx, &record);
    finish(asked, &record, entry, boundary, "task_cancel", &reply).await;
    reply
}

/// `tasks/list` (2025-11-25): this key's tasks (of its configuration), each as `tasks/get` sees it now.
pub async fn list(asked: &Asked<'_>) -> Reply {
    let Asked { ctx, identity, .. } = *asked;
    let records = ctx.tasks.of_key(&identity.key_digest);
    let mine = records.iter().filter(|record| record.config == identity.mcp_config_id);
    let states = mine.map(|record| async move {
        match get(asked, &record.id).await {
            Reply::Result(task) => Some(task),
            Reply::Error { .. } => None,
        }
    });
    let tasks: Vec<Value> = futures_util::future::join_all(states).await.into_iter().flatten().collect();
    Reply::Result(json!({"tasks": tasks}))
}

/// `tasks/update` (the extension): the client's answers to the task's questions, checked, to the upstream.
pub async fn update(asked: &Asked<'_>, id: &str, answers: Value) -> Reply {
    let (record, entry) = match find(asked, id) {
        Ok(found) => found,
        Err(unknown) => return unknown,
    };
    let Asked { ctx, identity, .. } = *asked;
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let mut boundary = TaskBoundary::open(ctx, identity, entry, &provider, lock(&record.mapping).take());
    let reply = if record.style == Style::Revision2025 {
        Reply::error(-32602, "this task's server speaks the 2025-11-25 revision, whose tasks take no tasks/update")
    } else {
        match boundary.answers(answers).await {
            Err(blocked) => Reply::Error { code: -32600, message: "blocked by guardrails".into(), data: blocked },
            Ok(answers) => {
                let params = json!({"taskId": record.upstream_id, "inputResponses": answers});
                match record.hold.request("tasks/update", params, poll_timeout(identity)).await {
                    Ok(_) => Reply::Result(json!({"resultType": "complete"})),
                    Err(error) => failure(ctx, &boundary, error).await,
                }
            }
        }
    };
    finish(asked, &record, entry, boundary, "task_update", &reply).await;
    reply
}

/// The record a sealed id names for this caller, and its server's entry: `-32602` for an id that does not open, of
/// another key or configuration, forgotten, or of a tool the caller may no longer see. Nothing reaches an upstream.
fn find<'a>(asked: &Asked<'a>, id: &str) -> Result<(Arc<TaskRecord>, &'a ServerEntry), Reply> {
    let identity = asked.identity;
    let unknown = || Reply::error(-32602, "unknown task: not one of this key's, or expired");
    let number = open_id(&identity.snapshot, &identity.key_digest, id).ok_or_else(unknown)?;
    let record = asked.ctx.tasks.get(&identity.key_digest, number).ok_or_else(unknown)?;
    if record.config != identity.mcp_config_id {
        return Err(unknown());
    }
    let entry = server_entry(&identity.snapshot, record.config.as_deref().unwrap_or(""), &record.server_name)
        .filter(|entry| visible(identity, entry, &record.upstream_tool))
        .ok_or_else(unknown)?;
    Ok((record, entry))
}

/// The task's final result through the output guardrails, as a call's: the upstream's `CallToolResult` (its own
/// tie to the upstream's task left out), or the blocked answer in the envelope.
async fn final_result(record: &TaskRecord, boundary: &mut TaskBoundary<'_>, mut result: Value) -> Value {
    if let Some(meta) = result.get_mut("_meta").and_then(Value::as_object_mut) {
        meta.remove(RELATED_TASK);
    }
    match boundary.result(&record.upstream_tool, result).await {
        Ok(result) => result,
        Err(blocked) => serde_json::to_value(envelope::tool_result(blocked)).unwrap_or_default(),
    }
}

/// A JSON-RPC error object of a failed task as the client may see it: its message cut and checked.
async fn checked_error(boundary: &TaskBoundary<'_>, error: Value) -> Value {
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(-32603);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("the task failed").to_string();
    let message = checked_message(boundary, Some(message)).await;
    json!({"code": code, "message": message.as_deref().unwrap_or(crate::guardrails::stage::WITHHELD_UPSTREAM_ERROR)})
}

/// An upstream text about the task (cut to 1 KiB) through the output guardrails; `None` when blocked.
pub(super) async fn checked_message(boundary: &TaskBoundary<'_>, message: Option<String>) -> Option<String> {
    let mut message = message?;
    cut(&mut message, 1024);
    boundary.status(Value::String(message)).await.ok().and_then(|checked| checked.as_str().map(str::to_string))
}

/// The reply to a request about a task that the upstream failed (its words checked).
async fn failure(ctx: &GatewayContext, boundary: &TaskBoundary<'_>, error: UpstreamError) -> Reply {
    let code = match &error {
        UpstreamError::Rejected { code, .. } => *code,
        _ => -32603,
    };
    let message = upstream_failure(ctx, &error).message;
    let message = checked_message(boundary, Some(message)).await;
    Reply::error(code, message.as_deref().unwrap_or(crate::guardrails::stage::WITHHELD_UPSTREAM_ERROR))
}

/// The client has seen the task end: it is forgotten after [`TERMINAL_GRACE`].
fn ended(ctx: &Arc<GatewayContext>, record: &TaskRecord) {
    if !record.ended.swap(true, Ordering::AcqRel) {
        forget_after(ctx, record, TERMINAL_GRACE.min(record.time_left()));
    }
}

/// The reply to a request that would fetch a result while the key is over its budget (contract 14).
async fn over_budget(
    asked: &Asked<'_>,
    record: &TaskRecord,
    entry: &ServerEntry,
    boundary: TaskBoundary<'_>,
    refused: GatewayError,
) -> Reply {
    let reply = Reply::Error { code: -32000, message: refused.message.clone(), data: refused.answer() };
    finish(asked, record, entry, boundary, "task_get", &reply).await;
    reply
}

/// Keeps the PII mapping for the next request and writes the audit record.
async fn finish(
    asked: &Asked<'_>,
    record: &TaskRecord,
    entry: &ServerEntry,
    boundary: TaskBoundary<'_>,
    event: &str,
    reply: &Reply,
) {
    *lock(&record.mapping) = boundary.close();
    let outcome = match reply {
        Reply::Result(result) if result.get("isError") == Some(&Value::Bool(true)) => json!({"status": "blocked"}),
        Reply::Result(_) => json!({"status": "success"}),
        Reply::Error { .. } => json!({"status": "error", "error_code": "UPSTREAM_ERROR"}),
    };
    audit(asked.ctx, asked.identity, event, entry, &record.upstream_tool, &outcome).await;
}

/// How long one poll of a task may take upstream.
fn poll_timeout(identity: &Identity) -> Duration {
    identity.snapshot.settings.timeouts.tool_execution
}

/// A task-augmented call refused over `max_tasks_per_key`.
fn too_many_tasks(ctx: &GatewayContext, max: usize, stateless: bool) -> Reply {
    ctx.store.metrics().limit_hit("tasks_per_key");
    let message = format!(
        "this key has {max} tasks running, its limit (limits.max_tasks_per_key); wait for one to end or cancel one"
    );
    let answer = GatewayError::new(ErrorCode::RateLimited, message).with("retry_after_seconds", 5).answer();
    Reply::Result(gateway_result(answer, stateless))
}
