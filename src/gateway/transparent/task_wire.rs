//! The tasks' wire shapes (contract 15), both revisions, both ways:
//!
//! - 2025-11-25 (clients with a session): a `tools/call` with `params.task` (`{ttl}`) is answered `{"task": Task}`;
//!   `Task` is `{taskId, status, statusMessage?, createdAt, lastUpdatedAt, ttl, pollInterval?}`; `tasks/get` and
//!   `tasks/cancel` answer a `Task`, `tasks/result` the original result (with `_meta["io.modelcontextprotocol/
//!   related-task"]`), `tasks/list` `{tasks: [Task]}` (the TypeScript SDK 1.32's `types.js`, the 2025-11-25 spec).
//! - The `io.modelcontextprotocol/tasks` extension (2026-07-28, stateless clients; SEP-2663, ext-tasks): a client
//!   declares it in the request's `_meta["io.modelcontextprotocol/clientCapabilities"].extensions`; a `tools/call`
//!   is answered `{resultType: "task", taskId, status, statusMessage?, createdAt, lastUpdatedAt, ttlMs,
//!   pollIntervalMs?}`; `tasks/get` answers that (with `resultType: "complete"`) plus the final `result`, the `error`
//!   or the outstanding `inputRequests`; `tasks/update` and `tasks/cancel` answer an empty `{resultType: "complete"}`.
//!
//! An upstream's answers are read in either shape ([`Seen::of`]) and only what the gateway needs is taken from them:
//! the status (one of the five, else `working`), the status message (cut to 1 KiB), the poll interval, and the
//! result, error or questions. The times and ids the client sees are the gateway's own.

use serde_json::{Map, Value};

/// The extension's identifier.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// The `_meta` key that ties a message to a task.
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const STATUSES: [&str; 5] = ["working", "input_required", "completed", "failed", "cancelled"];
/// The longest status message passed on.
const MAX_MESSAGE_BYTES: usize = 1024;

/// What the gateway takes from an upstream's answer about a task.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Seen {
    pub status: &'static str,
    pub message: Option<String>,
    pub poll_ms: Option<u64>,
    pub result: Option<Value>,
    pub error: Option<Value>,
    pub input_requests: Option<Value>,
}

impl Seen {
    /// From a `CreateTaskResult`, a `tasks/get` or `tasks/cancel` answer, in either shape.
    pub fn of(answer: &Value) -> Seen {
        let task = answer.get("task").filter(|task| task.is_object()).unwrap_or(answer);
        let status = task.get("status").and_then(Value::as_str);
        let mut message = task.get("statusMessage").and_then(Value::as_str).map(str::to_string);
        if let Some(message) = message.as_mut() {
            cut(message, MAX_MESSAGE_BYTES);
        }
        let object = |field: &str| task.get(field).filter(|value| value.is_object()).cloned();
        Seen {
            status: STATUSES.into_iter().find(|known| Some(*known) == status).unwrap_or("working"),
            message,
            poll_ms: task.get("pollIntervalMs").or_else(|| task.get("pollInterval")).and_then(Value::as_u64),
            result: object("result"),
            error: object("error"),
            input_requests: object("inputRequests"),
        }
    }

    /// Whether the task is over.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status, "completed" | "failed" | "cancelled")
    }

    /// The task as a client of the revision (`stateless`: the extension's) sees it, under the sealed `id`; no
    /// result, error or questions (they are added once checked).
    pub fn task(&self, id: &str, created_at: &str, ttl_ms: u64, stateless: bool) -> Map<String, Value> {
        let mut task = Map::new();
        task.insert("taskId".into(), id.into());
        task.insert("status".into(), self.status.into());
        if let Some(message) = &self.message {
            task.insert("statusMessage".into(), message.clone().into());
        }
        task.insert("createdAt".into(), created_at.into());
        task.insert("lastUpdatedAt".into(), crate::ids::timestamp().into());
        let (ttl, poll) = if stateless { ("ttlMs", "pollIntervalMs") } else { ("ttl", "pollInterval") };
        task.insert(ttl.into(), ttl_ms.into());
        if let Some(poll_ms) = self.poll_ms {
            task.insert(poll.into(), poll_ms.clamp(100, 60_000).into());
        }
        task
    }
}

/// The answer to a task-augmented call that created `task`.
pub fn created(mut task: Map<String, Value>, stateless: bool) -> Value {
    if stateless {
        task.insert("resultType".into(), "task".into());
        return Value::Object(task);
    }
    let mut answer = Map::new();
    answer.insert("task".into(), Value::Object(task));
    Value::Object(answer)
}

/// Whether a 2026-07-28 request's `_meta` declares the tasks extension.
pub fn declares_tasks(meta: Option<&Value>) -> bool {
    meta.and_then(|meta| meta.get(CLIENT_CAPABILITIES))
        .and_then(|capabilities| capabilities.get("extensions"))
        .and_then(|extensions| extensions.get(TASKS_EXTENSION))
        .is_some_and(Value::is_object)
}

/// Whether an upstream tool's definition says it may run as a task (`execution.taskSupport` `optional` or
/// `required`).
pub fn runs_as_task(definition: &Value) -> bool {
    matches!(definition.pointer("/execution/taskSupport").and_then(Value::as_str), Some("optional" | "required"))
}

/// The gateway's answer object as a tool result in the envelope, for the revision.
pub fn gateway_result(answer: Value, stateless: bool) -> Value {
    call_result(serde_json::to_value(crate::gateway::envelope::tool_result(answer)).unwrap_or_default(), stateless)
}

/// A tool result for the revision: `resultType` for the extension's clients, none for session clients.
pub fn call_result(mut result: Value, stateless: bool) -> Value {
    if let Some(fields) = result.as_object_mut() {
        if stateless {
            fields.insert("resultType".into(), "complete".into());
        } else {
            fields.remove("resultType");
        }
    }
    result
}

/// `text` cut to at most `max` bytes, on a character boundary.
pub fn cut(text: &mut String, max: usize) {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_shapes_are_read_and_anything_else_is_working() {
        let old = Seen::of(&json!({"task": {"taskId": "u", "status": "working", "pollInterval": 50, "ttl": 9}}));
        assert_eq!((old.status, old.poll_ms), ("working", Some(50)));
        let new = Seen::of(&json!({"resultType": "complete", "taskId": "u", "status": "completed",
                                   "pollIntervalMs": 500, "result": {"content": []}}));
        assert!(new.is_terminal() && new.result.is_some());
        assert_eq!(Seen::of(&json!({"status": "hacked", "statusMessage": "é".repeat(2000)})).status, "working");
        assert!(Seen::of(&json!({"statusMessage": "é".repeat(2000)})).message.unwrap().len() <= 1024);
    }

    #[test]
    fn each_revision_gets_its_own_shape() {
        let seen = Seen { status: "working", poll_ms: Some(5), ..Seen::default() };
        let old = created(seen.task("mcpgwt1.x", "t0", 1000, false), false);
        assert_eq!((old["task"]["taskId"].clone(), old["task"]["ttl"].clone()), (json!("mcpgwt1.x"), json!(1000)));
        assert_eq!(old["task"]["pollInterval"], 100, "a poll interval is at least 100 ms");
        let new = created(seen.task("mcpgwt1.x", "t0", 1000, true), true);
        assert_eq!((new["resultType"].clone(), new["ttlMs"].clone()), (json!("task"), json!(1000)));
        assert!(new.get("ttl").is_none());
    }

    #[test]
    fn declarations_and_task_tools() {
        let meta = json!({CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}}});
        assert!(declares_tasks(Some(&meta)) && !declares_tasks(Some(&json!({}))) && !declares_tasks(None));
        assert!(runs_as_task(&json!({"execution": {"taskSupport": "required"}})));
        assert!(!runs_as_task(&json!({"execution": {"taskSupport": "forbidden"}})) && !runs_as_task(&json!({})));
    }
}
