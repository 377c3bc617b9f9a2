//! Tasks in transparent mode (contract 15): the tasks the upstreams run for the gateway's clients, one record each.
//!
//! A record is made when an upstream answers a task-augmented call with a task (`task_route.rs`); it keeps the hold
//! on the process that runs the task (`upstream/task_hold.rs`), the upstream's task id, the server and tool, and the
//! creating call's PII mapping. The client never sees the upstream's id: it gets a *sealed* id, `mcpgwt1.` +
//! base64url(AES-256-GCM of the record's number and the digest of the key that created it), under the key that seals
//! session ids. An id that does not open, or opens for another key, names no task: the request gets `-32602` and
//! nothing reaches an upstream. Records live in this replica's memory, kept per key:
//!
//! - at most `limits.max_tasks_per_key` at once (one more task-augmented call is refused before it runs);
//! - each for at most `limits.max_task_seconds`: then the task is cancelled upstream (if not known to be over) and
//!   forgotten, whether or not its client ever asked about it again;
//! - a task whose end the client has seen is forgotten [`TERMINAL_GRACE`] later (a client may poll once more).
//!
//! A session client also gets the upstream's `notifications/tasks/status` of its tasks ([`forward_status`]): only
//! those of the process that runs the task and of that task's id, the id rewritten, the status message checked, at
//! most one every [`STATUS_GAP`] (more wait, and a flood beyond the watcher's room is dropped).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::task_ops::checked_message;
use super::task_wire::Seen;
use crate::auth::Identity;
use crate::config::Snapshot;
use crate::gateway::GatewayContext;
use crate::gateway::boundary::tasks::{TaskBoundary, visible};
use crate::gateway::server_entry;
use crate::gateway::session_id::sealing_key;
use crate::guardrails::provider::Provider;
use crate::guardrails::stage::KeptMapping;
use crate::secrets;
use crate::upstream::{TaskHold, UpstreamError, lock};
use rmcp::model::{CustomNotification, ServerNotification};

const PREFIX: &str = "mcpgwt1.";
const LABEL: &str = "mcpgw task id v1";
/// The longest id opened: beyond it, not an id of ours.
const MAX_ID_CHARS: usize = 512;
/// How long a task whose end its client has seen is kept for one more poll.
pub const TERMINAL_GRACE: Duration = Duration::from_secs(60);
/// How long the cancellation of an expired task may take upstream.
const CANCEL_PATIENCE: Duration = Duration::from_secs(5);

/// How the upstream speaks of its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// 2025-11-25: `tasks/get` answers the task, `tasks/result` the result (waiting for it).
    Revision2025,
    /// The `io.modelcontextprotocol/tasks` extension: `tasks/get` carries the result; `tasks/update` answers questions.
    Extension,
}

/// One task an upstream runs for a key.
pub struct TaskRecord {
    pub number: u64,
    /// The sealed id its client knows it by (the same in every answer, `tasks/list` included).
    pub id: String,
    pub key: [u8; 32],
    pub config: Option<String>,
    pub server_name: String,
    /// The tool's upstream name (curation and audit) and its exposed name.
    pub upstream_tool: String,
    pub exposed_tool: String,
    pub upstream_id: String,
    pub style: Style,
    /// When the gateway made the record (the task's `createdAt` as its client sees it).
    pub created_at: String,
    /// The task's time to live as its client is told (`max_task_seconds`, or less when the client asked for less).
    pub ttl_ms: u64,
    pub deadline: Instant,
    pub hold: TaskHold,
    pub mapping: Mutex<Option<KeptMapping>>,
    /// Whether the client has seen the task end.
    pub ended: AtomicBool,
}

impl TaskRecord {
    /// The upstream request params naming the task.
    pub fn upstream_params(&self) -> Value {
        json!({"taskId": self.upstream_id})
    }

    /// Time left before `max_task_seconds`.
    pub fn time_left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The task's result from its upstream: a 2025-11-25 server's `tasks/result`; the extension's `tasks/get`, polled
    /// until the task is over. `Err` is the JSON-RPC error object of a failed task. Bounded by the task's time left.
    pub async fn upstream_result(&self) -> Result<Value, Value> {
        let time_left = self.time_left();
        let as_error = |error: UpstreamError| match error {
            UpstreamError::Rejected { code, message } => json!({"code": code, "message": message}),
            other => json!({"code": -32603, "message": other.to_string()}),
        };
        if self.style == Style::Revision2025 {
            return self.hold.request("tasks/result", self.upstream_params(), time_left).await.map_err(as_error);
        }
        loop {
            let answer = self.hold.request("tasks/get", self.upstream_params(), self.time_left()).await;
            let seen = Seen::of(&answer.map_err(as_error)?);
            match seen.status {
                "completed" => return Ok(seen.result.unwrap_or_default()),
                "failed" => return Err(error_of(seen.error)),
                "cancelled" => return Err(json!({"code": -32603, "message": "the task was cancelled"})),
                _ if self.time_left().is_zero() => {
                    return Err(json!({"code": -32603, "message": "the task ran out of time"}));
                }
                _ => tokio::time::sleep(Duration::from_millis(seen.poll_ms.unwrap_or(1000).clamp(100, 5000))).await,
            }
        }
    }
}

/// The JSON-RPC error object of a failed task (a generic one when the upstream gave none).
pub fn error_of(error: Option<Value>) -> Value {
    error.unwrap_or_else(|| json!({"code": -32603, "message": "the task failed"}))
}

/// The shortest time between two status notifications passed on for one task.
pub const STATUS_GAP: Duration = Duration::from_millis(100);

/// Passes the upstream's status notifications of `record`'s task to session `session`'s client (2025-11-25), as
/// `notifications/tasks/status` under the sealed id, until the task is forgotten.
pub fn forward_status(ctx: &Arc<GatewayContext>, identity: &Arc<Identity>, record: &TaskRecord, session: &str) {
    let (Some(mut statuses), Some(channel)) = (record.hold.watch(), ctx.sessions.channel_of(session)) else { return };
    let (ctx, identity, number) = (Arc::downgrade(ctx), Arc::clone(identity), record.number);
    tokio::spawn(async move {
        // Ends when the record is dropped (its hold stops the watch) or the gateway is gone.
        while let Some(params) = statuses.recv().await {
            let Some(ctx) = ctx.upgrade() else { return };
            let Some(record) = ctx.tasks.get(&identity.key_digest, number) else { return };
            let config = record.config.as_deref().unwrap_or("");
            let Some(entry) = server_entry(&identity.snapshot, config, &record.server_name)
                .filter(|entry| visible(&identity, entry, &record.upstream_tool))
            else {
                return;
            };
            let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
            let boundary = TaskBoundary::open(&ctx, &identity, entry, &provider, lock(&record.mapping).take());
            let mut seen = Seen::of(&params);
            seen.message = checked_message(&boundary, seen.message.take()).await;
            *lock(&record.mapping) = boundary.close();
            let task = seen.task(&record.id, &record.created_at, record.ttl_ms, false);
            let note = CustomNotification::new("notifications/tasks/status", Some(Value::Object(task)));
            if channel.notify(ServerNotification::CustomNotification(note)).await.is_err() {
                return;
            }
            drop((record, ctx));
            tokio::time::sleep(STATUS_GAP).await;
        }
    });
}

/// One key's records, by number.
type KeyTasks = HashMap<u64, Arc<TaskRecord>>;

/// The records, per key.
#[derive(Default)]
pub struct TaskRecords {
    keys: Mutex<HashMap<[u8; 32], KeyTasks>>,
    next: AtomicU64,
}

impl TaskRecords {
    /// A new record's number.
    pub fn number(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// How many tasks `key` has.
    pub fn count(&self, key: &[u8; 32]) -> usize {
        lock(&self.keys).get(key).map_or(0, HashMap::len)
    }

    /// Keeps `record`, unless its key has `max` already (it is handed back).
    pub fn insert(&self, record: TaskRecord, max: usize) -> Result<Arc<TaskRecord>, Arc<TaskRecord>> {
        let record = Arc::new(record);
        let mut keys = lock(&self.keys);
        let tasks = keys.entry(record.key).or_default();
        if tasks.len() >= max {
            return Err(record);
        }
        tasks.insert(record.number, Arc::clone(&record));
        Ok(record)
    }

    /// The record `number` of `key`.
    pub fn get(&self, key: &[u8; 32], number: u64) -> Option<Arc<TaskRecord>> {
        lock(&self.keys).get(key)?.get(&number).cloned()
    }

    /// The records of `key`, oldest first.
    pub fn of_key(&self, key: &[u8; 32]) -> Vec<Arc<TaskRecord>> {
        let mut records: Vec<_> =
            lock(&self.keys).get(key).map(|tasks| tasks.values().cloned().collect()).unwrap_or_default();
        records.sort_by_key(|record| record.number);
        records
    }

    /// Forgets record `number` of `key`.
    pub fn remove(&self, key: &[u8; 32], number: u64) -> Option<Arc<TaskRecord>> {
        let mut keys = lock(&self.keys);
        let tasks = keys.get_mut(key)?;
        let removed = tasks.remove(&number);
        if tasks.is_empty() {
            keys.remove(key);
        }
        removed
    }
}

/// Forgets `record` after `after` (its `max_task_seconds`, or [`TERMINAL_GRACE`] once its end was seen); a task not
/// known to be over is cancelled upstream first.
pub fn forget_after(ctx: &Arc<GatewayContext>, record: &TaskRecord, after: Duration) {
    let (ctx, key, number): (Weak<GatewayContext>, _, _) = (Arc::downgrade(ctx), record.key, record.number);
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        let Some(ctx) = ctx.upgrade() else { return };
        let Some(record) = ctx.tasks.remove(&key, number) else { return };
        if !record.ended.load(Ordering::Acquire) {
            ctx.store.metrics().limit_hit("task_seconds");
            tracing::info!(server = %record.server_name, tool = %record.upstream_tool,
                "a task reached limits.max_task_seconds: cancelled upstream and forgotten");
            let _ = record.hold.request("tasks/cancel", record.upstream_params(), CANCEL_PATIENCE).await;
        }
    });
}

/// The sealed id of record `number` of `key`; `None` only when the system's random generator fails.
pub fn seal_id(snapshot: &Snapshot, key: &[u8; 32], number: u64) -> Option<String> {
    seal(&sealing_key(snapshot), key, number)
}

/// The record number a sealed id names, when it opens under this configuration and was sealed for `key`.
pub fn open_id(snapshot: &Snapshot, key: &[u8; 32], id: &str) -> Option<u64> {
    open(&sealing_key(snapshot), key, id)
}

fn seal(sealing: &[u8; 32], key: &[u8; 32], number: u64) -> Option<String> {
    let plain = serde_json::to_vec(&json!({"n": number, "k": URL_SAFE_NO_PAD.encode(key)})).ok()?;
    let sealed = secrets::seal(sealing, &plain, LABEL).ok()?;
    Some(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(sealed)))
}

fn open(sealing: &[u8; 32], key: &[u8; 32], id: &str) -> Option<u64> {
    if id.len() > MAX_ID_CHARS {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(id.strip_prefix(PREFIX)?).ok()?;
    let plain: Value = serde_json::from_slice(&secrets::open(sealing, &bytes, LABEL)?).ok()?;
    let sealed_for: [u8; 32] = URL_SAFE_NO_PAD.decode(plain.get("k")?.as_str()?).ok()?.try_into().ok()?;
    secrets::ct_eq_digest(&sealed_for, key).then_some(())?;
    plain.get("n")?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_opens_for_its_key_under_its_secret_only() {
        let (sealing, alice, bob) = ([1; 32], [7; 32], [8; 32]);
        // A number long enough that random Base64 never spells it by chance (a two-digit one did, 1 run in 50).
        let n = 4_242_424_242;
        let id = seal(&sealing, &alice, n).unwrap();
        assert!(id.starts_with(PREFIX) && !id.contains(&n.to_string()));
        assert_eq!(open(&sealing, &alice, &id), Some(n));
        assert_eq!(open(&sealing, &bob, &id), None, "another key");
        assert_eq!(open(&[2; 32], &alice, &id), None, "another secret");
        let mut forged = id.clone().into_bytes();
        let last = forged.len() - 2;
        forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(open(&sealing, &alice, &String::from_utf8(forged).unwrap()), None, "tampered");
        assert_eq!(open(&sealing, &alice, &format!("{PREFIX}{}", "A".repeat(MAX_ID_CHARS))), None, "too long");
        assert_ne!(seal(&sealing, &alice, n), Some(id), "each seal is fresh");
    }
}
