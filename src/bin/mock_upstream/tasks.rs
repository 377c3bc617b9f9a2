//! The mock's tasks (contract 15's tests): the tool `task_run` `{ms, text, shape?, id_bytes?}` runs as a task for
//! `ms` milliseconds and then completes with the text `text`. Its answer to the call is a task in the 2025-11-25
//! shape (`{"task": {...}}`, the default) or, with `shape: "extension"`, the `io.modelcontextprotocol/tasks` one
//! (`resultType: "task"`); with `id_bytes` its task id is that long (a hostile server's id). The task answers
//! `tasks/get` (in its shape; the extension's with the result inlined once completed), `tasks/result` (waiting for
//! the end), `tasks/cancel` and `tasks/list`, and tells its end in a status notification (`notifications/tasks/status`,
//! or the extension's `notifications/tasks`). Its definition says `execution.taskSupport: "required"`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::model::JsonObject;
use serde_json::{Value, json};

/// The tool that runs as a task.
pub const TOOL: &str = "task_run";

struct MockTask {
    ends: Instant,
    text: String,
    extension: bool,
    cancelled: bool,
}

fn tasks() -> &'static Mutex<HashMap<String, MockTask>> {
    static TASKS: OnceLock<Mutex<HashMap<String, MockTask>>> = OnceLock::new();
    TASKS.get_or_init(Mutex::default)
}

fn now() -> String {
    format!("{:?}", std::time::SystemTime::now())
}

/// The task's state in its own shape.
fn state(id: &str, task: &MockTask) -> Value {
    let status = if task.cancelled {
        "cancelled"
    } else if Instant::now() >= task.ends {
        "completed"
    } else {
        "working"
    };
    let mut state = json!({"taskId": id, "status": status, "createdAt": now(), "lastUpdatedAt": now(),
                           "statusMessage": format!("the task is {status}")});
    if task.extension {
        state["ttlMs"] = json!(600_000);
        state["pollIntervalMs"] = json!(100);
        if status == "completed" {
            state["result"] = result(id, &task.text);
        }
    } else {
        state["ttl"] = json!(600_000);
        state["pollInterval"] = json!(100);
    }
    state
}

fn result(id: &str, text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": false,
           "_meta": {"io.modelcontextprotocol/related-task": {"taskId": id}}})
}

/// The tool's definition as listed (rmcp's `Tool` has no `execution`).
pub fn definition() -> Value {
    json!({"name": TOOL, "description": "Runs as a task for ms milliseconds, then completes with text.",
           "inputSchema": {"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0},
               "text": {"type": "string"}, "shape": {"type": "string"}, "id_bytes": {"type": "integer"}},
               "required": ["ms", "text"]},
           "execution": {"taskSupport": "required"}})
}

/// The answer to a call of [`TOOL`]: the task.
pub fn create(args: &JsonObject, peer: rmcp::Peer<rmcp::RoleServer>) -> Value {
    let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
    let text = args.get("text").and_then(Value::as_str).unwrap_or_default().to_string();
    let extension = args.get("shape").and_then(Value::as_str) == Some("extension");
    let id = match args.get("id_bytes").and_then(Value::as_u64) {
        Some(bytes) => "t".repeat(bytes.min(1 << 20) as usize),
        None => format!("mock-task-{}", uuid_like()),
    };
    let task = MockTask { ends: Instant::now() + Duration::from_millis(ms), text, extension, cancelled: false };
    let mut seed = state(&id, &task);
    if let Some(fields) = seed.as_object_mut() {
        fields.remove("result");
    }
    tasks().lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), task);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let ended = tasks().lock().unwrap_or_else(|p| p.into_inner()).get(&id).map(|task| state(&id, task));
        let Some(ended) = ended else { return };
        let method = if extension { "notifications/tasks" } else { "notifications/tasks/status" };
        let note = rmcp::model::CustomNotification::new(method, Some(ended));
        let _ = peer.send_notification(rmcp::model::ServerNotification::CustomNotification(note)).await;
    });
    if extension {
        seed["resultType"] = json!("task");
        seed
    } else {
        json!({"task": seed})
    }
}

fn uuid_like() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + u64::from(std::process::id()) * 1_000_000
}

/// A `tasks/*` request: its result, or a JSON-RPC error message (invalid params).
pub async fn answer(method: &str, params: &Value) -> Result<Value, String> {
    let id = params.get("taskId").and_then(Value::as_str).unwrap_or_default().to_string();
    let lookup = |id: &str| -> Result<(Instant, String, bool, bool), String> {
        let tasks = tasks().lock().unwrap_or_else(|p| p.into_inner());
        let task = tasks.get(id).ok_or_else(|| format!("unknown task {id:?}"))?;
        Ok((task.ends, task.text.clone(), task.extension, task.cancelled))
    };
    match method {
        "tasks/get" => {
            let tasks = tasks().lock().unwrap_or_else(|p| p.into_inner());
            let task = tasks.get(&id).ok_or_else(|| format!("unknown task {id:?}"))?;
            let mut state = state(&id, task);
            if task.extension {
                state["resultType"] = json!("complete");
            }
            Ok(state)
        }
        "tasks/result" => {
            let (ends, text, _, _) = lookup(&id)?;
            tokio::time::sleep(ends.saturating_duration_since(Instant::now())).await;
            match lookup(&id)? {
                (_, _, _, true) => Err("the task was cancelled".into()),
                _ => Ok(result(&id, &text)),
            }
        }
        "tasks/cancel" => {
            let mut tasks = tasks().lock().unwrap_or_else(|p| p.into_inner());
            let task = tasks.get_mut(&id).ok_or_else(|| format!("unknown task {id:?}"))?;
            task.cancelled = true;
            if task.extension { Ok(json!({"resultType": "complete"})) } else { Ok(state(&id, task)) }
        }
        "tasks/list" => {
            let tasks = tasks().lock().unwrap_or_else(|p| p.into_inner());
            Ok(json!({"tasks": tasks.iter().map(|(id, task)| state(id, task)).collect::<Vec<_>>()}))
        }
        other => Err(format!("method not found: {other}")),
    }
}
