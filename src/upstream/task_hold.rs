//! Tasks (contract 15): a task-augmented `tools/call` whose server answers with a task instead of a result, and the
//! process that runs it.
//!
//! The task lives in the memory of the process that created it, so every later request about it (`tasks/get`,
//! `tasks/result`, `tasks/cancel`, ...) must reach that same process, whoever else the pool lends it to meanwhile. A
//! [`TaskHold`] keeps it: the process is counted as running a task (`server_pool.rs`), so it does not idle out and a
//! retired pool keeps it until the task is over; each request about the task lends it for that one exchange, under
//! its own timeout (garbage and oversized answers end the exchange as they end a call's). Dropping the hold gives the
//! process back to the pool's ordinary life. A process that ended (crashed, killed by another call's timeout) takes
//! its tasks with it: their requests fail with [`UpstreamError::Crashed`].
//!
//! A server answers a task in either revision's shape: `{"task": {"taskId", ...}}` (2025-11-25) or
//! `{"resultType": "task", "taskId", ...}` (the `io.modelcontextprotocol/tasks` extension). Its id must be a string
//! of at most [`MAX_TASK_ID_BYTES`]; any other answer with a task in it is a protocol error.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::lease::Lease;
use super::pool::check_tool_result;
use super::process::UpstreamProcess;
use super::relay::Relay;
use super::server_pool::ServerPool;
use super::{Caller, PoolKey, ServerSpec, UpstreamError, UpstreamPool};

/// The longest task id an upstream may give (a hostile server's huge id is refused, not kept).
pub const MAX_TASK_ID_BYTES: usize = 256;

/// The process that runs one upstream task; see the module documentation.
pub struct TaskHold {
    server: Arc<ServerPool>,
    process: Arc<UpstreamProcess>,
    task_id: String,
}

impl std::fmt::Debug for TaskHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHold").field("pid", &self.process.pid()).finish()
    }
}

impl TaskHold {
    /// The upstream's id of the task.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// One request about the task on its process, bounded by `timeout`.
    pub async fn request(&self, method: &str, params: Value, timeout: Duration) -> Result<Value, UpstreamError> {
        if !self.server.lend(&self.process) {
            return Err(UpstreamError::Crashed("the upstream process that ran this task has ended".into()));
        }
        // The lease gives the exchange back (and ends a process it left unusable) when dropped. A request about a task
        // that is given up (a client that went away during `tasks/result`, a poll that timed out) leaves the process
        // in service: it may run other tasks, of other keys, and one client must not be able to end them. The server
        // is told of the abandoned request (`notifications/cancelled`); garbage or a crash still end the process.
        let mut lease = Lease::new(Arc::clone(&self.server), Arc::clone(&self.process));
        lease.unused();
        let answered = lease.request(Instant::now() + timeout, timeout, method, params, None).await;
        if matches!(answered, Err(UpstreamError::Timeout(_))) {
            lease.unused();
        }
        answered
    }
}

impl TaskHold {
    /// The server's status notifications of the task (at most [`STATUS_ROOM`] waiting; more are dropped), until the
    /// hold is dropped; `None` when the transport cannot tell them apart (a remote streamable HTTP server).
    pub fn watch(&self) -> Option<tokio::sync::mpsc::Receiver<Value>> {
        let (watcher, statuses) = tokio::sync::mpsc::channel(STATUS_ROOM);
        self.process.watch_task(&self.task_id, watcher).then_some(statuses)
    }
}

/// Status notifications of one task that may wait to be passed on.
pub const STATUS_ROOM: usize = 8;

impl Drop for TaskHold {
    fn drop(&mut self) {
        self.process.unwatch_task(&self.task_id);
        self.server.release_task(&self.process);
    }
}

/// The task id of a `tools/call` result that is a task (either revision's shape); `None` when it is not one.
pub fn upstream_task_id(result: &Value) -> Option<&Value> {
    match result.get("task") {
        Some(task) => task.get("taskId").or(Some(&Value::Null)),
        None if result.get("resultType").and_then(Value::as_str) == Some("task") => {
            result.get("taskId").or(Some(&Value::Null))
        }
        None => None,
    }
}

impl UpstreamPool {
    /// A task-augmented `tools/call` (`task`: the task metadata sent with it, `{"ttl": ms}`): the server's result,
    /// and when it answered with a task, the hold on the process that runs it.
    #[allow(clippy::too_many_arguments)]
    pub async fn call_tool_task(
        &self,
        key: &PoolKey,
        spec: &ServerSpec,
        caller: Caller<'_>,
        name: &str,
        args: Map<String, Value>,
        task: &Value,
        timeout: Duration,
        relay: Option<&Relay>,
    ) -> Result<(Value, Option<TaskHold>), UpstreamError> {
        #[derive(Serialize)]
        struct Params<'a> {
            name: &'a str,
            arguments: &'a Map<String, Value>,
            task: &'a Value,
            #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
            meta: Option<&'a Value>,
        }
        let relay = self.relay_for(spec, relay);
        let meta = relay.and_then(|relay| relay.meta.as_ref());
        let (mut lease, deadline) = self.checkout(key, spec, caller, timeout).await?;
        let params = Params { name, arguments: &args, task, meta };
        let result = lease.request(deadline, timeout, "tools/call", params, relay).await?;
        let Some(id) = upstream_task_id(&result) else {
            return check_tool_result(result).map(|result| (result, None));
        };
        let Some(task_id) = id.as_str().filter(|id| !id.is_empty() && id.len() <= MAX_TASK_ID_BYTES) else {
            let why = format!("the server's task id is not a string of 1 to {MAX_TASK_ID_BYTES} bytes");
            return Err(UpstreamError::Protocol(why));
        };
        let task_id = task_id.to_string();
        let (server, process) = lease.parts();
        if !server.hold_task(&process) {
            return Err(UpstreamError::Crashed("the upstream process ended as it created the task".into()));
        }
        Ok((result, Some(TaskHold { server, process, task_id })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_is_recognised_in_both_shapes() {
        assert_eq!(upstream_task_id(&json!({"task": {"taskId": "t1"}})), Some(&json!("t1")));
        assert_eq!(upstream_task_id(&json!({"resultType": "task", "taskId": "t2"})), Some(&json!("t2")));
        assert_eq!(upstream_task_id(&json!({"task": {}})), Some(&Value::Null), "a task without an id");
        assert_eq!(upstream_task_id(&json!({"content": []})), None);
        assert_eq!(upstream_task_id(&json!({"resultType": "complete", "taskId": "x"})), None);
    }
}
