//! The route of tasks over stdio (contract 15), the stdio counterpart of the HTTP layer of
//! `transparent/task_route.rs`. The pump (`pipe.rs`) shows it each line the client sends ([`StdioTasks::read`]) and
//! each line rmcp answers ([`StdioTasks::amend`]):
//!
//! - once `initialize` is answered, a message about tasks (`task_route::about_tasks`, as in a session) is answered
//!   here ([`StdioTasks::answer`]) by the one dispatcher, for the caller the stdio handler would see: the credentials
//!   of the environment resolved against the current snapshot, one cell of the key's rate limit per request as over
//!   HTTP (a call one more, for its upstream call), the view of `GW_TOOL_EXPOSURE`, the connection's session. A
//!   task-augmented call of a tool that offers no task goes on to rmcp, which runs it as a plain call, as does any
//!   call when the credentials fail (the handler answers it `AUTH_FAILED`);
//! - rmcp's answer to `initialize` gets `capabilities.tasks` (a 2025-11-25 client whose view declares the tasks
//!   extension, that is a transparent view of a caller admitted), and its answers to `tools/list` each tool's
//!   `execution`, read from the same listing the handler builds (`task_declare.rs`).
//!
//! The status notifications of a task need nothing here: they go to the session's peer, which over stdio is rmcp's,
//! whose output is the pump's.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::task::JoinHandle;

use crate::auth::{Credentials, Identity};
use crate::config::exposure::ToolExposure;
use crate::gateway::GatewayContext;
use crate::gateway::middleware::{admission, request_metrics};
use crate::gateway::transparent::task_declare::{Amend, amend_message, executions};
use crate::gateway::transparent::task_route::{self, Asked, Reply, TASKS_EXTENSION};
use crate::upstream::lock;

/// The most answers to `initialize` and `tools/list` awaited for amending at once; an answer rmcp never gives (a
/// request it could not read) must not hold a place for ever, so the oldest is given up.
const MAX_AWAITED: usize = 64;
/// How long an answer to `tools/list` waits for the listing of executions (started with rmcp's own, so normally
/// already done); beyond it, it goes out as rmcp wrote it.
const LISTING_PATIENCE: Duration = Duration::from_secs(10);

/// What a line from the client is to the pump.
pub enum Incoming {
    /// Passed on to rmcp unchanged.
    Rmcp,
    /// A message about tasks: see [`StdioTasks::answer`].
    Tasks(Value),
}

/// An answer of rmcp to amend.
enum Awaited {
    Initialize,
    ToolsList(JoinHandle<Option<HashMap<String, Value>>>),
}

/// See the module documentation.
pub struct StdioTasks {
    ctx: Arc<GatewayContext>,
    credentials: Credentials,
    /// `GW_TOOL_EXPOSURE`, as the handler reads it.
    exposure: Option<String>,
    session: Arc<str>,
    /// Set once rmcp has answered `initialize` with a result.
    initialized: AtomicBool,
    /// Answers to amend, by the JSON text of their request's id.
    awaited: std::sync::Mutex<VecDeque<(String, Awaited)>>,
}

impl StdioTasks {
    pub fn new(
        ctx: Arc<GatewayContext>,
        credentials: Credentials,
        exposure: Option<String>,
        session: Arc<str>,
    ) -> Self {
        let awaited = std::sync::Mutex::new(VecDeque::new());
        StdioTasks { ctx, credentials, exposure, session, initialized: AtomicBool::new(false), awaited }
    }

    /// What the client's `line` is to the pump; an answer of rmcp to amend later is noted here.
    pub fn read(self: &Arc<Self>, line: &[u8]) -> Incoming {
        // Read as the HTTP front's JSON-RPC guard reads a body; a line it cannot read is rmcp's to refuse.
        let Ok(message) = crate::json_strict::parse(line) else { return Incoming::Rmcp };
        let id = match message.get("id") {
            Some(id) if id.is_string() || id.is_number() => id.to_string(),
            _ => return Incoming::Rmcp,
        };
        let initialized = self.initialized.load(Ordering::Acquire);
        match message.get("method").and_then(Value::as_str) {
            Some("initialize") => self.await_answer(id, Awaited::Initialize),
            // A caller the handler never admitted is shown the gateway's tools only: nothing to add.
            Some("tools/list") if initialized && self.ctx.sessions.contains(&self.session) => {
                let me = Arc::clone(self);
                self.await_answer(id, Awaited::ToolsList(tokio::spawn(async move { me.executions().await })));
            }
            _ if initialized && task_route::about_tasks(&message, false) => return Incoming::Tasks(message),
            _ => {}
        }
        Incoming::Rmcp
    }

    fn await_answer(&self, id: String, what: Awaited) {
        let mut awaited = lock(&self.awaited);
        if awaited.len() >= MAX_AWAITED
            && let Some((_, Awaited::ToolsList(listing))) = awaited.pop_front()
        {
            listing.abort();
        }
        awaited.push_back((id, what));
    }

    /// rmcp's `line`, amended when it answers `initialize` or `tools/list`.
    pub async fn amend(&self, line: Vec<u8>) -> Vec<u8> {
        if lock(&self.awaited).is_empty() {
            return line;
        }
        let Ok(mut message) = serde_json::from_slice::<Value>(&line) else { return line };
        let Some(id) = message.get("id").filter(|_| message.get("method").is_none()).map(Value::to_string) else {
            return line;
        };
        let what = {
            let mut awaited = lock(&self.awaited);
            let Some(at) = awaited.iter().position(|(awaited, _)| *awaited == id) else { return line };
            awaited.remove(at).map(|(_, what)| what)
        };
        let amend = match what {
            Some(Awaited::Initialize) => {
                if message.get("result").is_some() {
                    self.initialized.store(true, Ordering::Release);
                }
                let extensions = message.pointer("/result/capabilities/extensions");
                extensions.and_then(|e| e.get(TASKS_EXTENSION)).is_some().then_some(Amend::Initialize)
            }
            Some(Awaited::ToolsList(listing)) => match tokio::time::timeout(LISTING_PATIENCE, listing).await {
                Ok(Ok(Some(executions))) => Some(Amend::ToolsList(executions)),
                _ => None,
            },
            None => None,
        };
        match amend {
            Some(what) if amend_message(&mut message, &what) => {
                let mut amended = message.to_string().into_bytes();
                amended.push(b'\n');
                amended
            }
            _ => line,
        }
    }

    /// The `execution` of the tools the caller's `tools/list` shows; `None` in the gateway view.
    async fn executions(&self) -> Option<HashMap<String, Value>> {
        let snapshot = self.ctx.store.snapshot();
        let identity = admission::identify(&self.ctx, &snapshot, Ok(&self.credentials)).await.ok()?;
        let view = self.view(&identity)?;
        if !view.upstream() {
            return None;
        }
        Some(executions(&self.ctx, &identity, Some(&self.session)).await)
    }

    /// The caller's view; `None` when `GW_TOOL_EXPOSURE` names none (rmcp's handler refuses the request).
    fn view(&self, identity: &Identity) -> Option<ToolExposure> {
        let requested = match self.exposure.as_deref() {
            None => None,
            Some(asked) => Some(ToolExposure::parse(asked)?),
        };
        Some(identity.snapshot.tool_exposure(identity.mcp_config_id.as_deref()).chosen(requested))
    }

    /// The answer to a message about tasks, as a JSON-RPC message; `None` when it goes on to rmcp. Each answer is
    /// counted as a request, as the handler counts its tool calls.
    pub async fn answer(&self, message: Value) -> Option<Value> {
        let started = Instant::now();
        let id = message.get("id").cloned().unwrap_or(Value::Null);
        let label = metric_label(message.get("method").and_then(Value::as_str).unwrap_or_default());
        let reply = self.reply(message).await?;
        let status = if reply.is_result() { "ok" } else { "error" };
        request_metrics::record(self.ctx.store.metrics(), "stdio", label, status, started.elapsed());
        Some(reply.message(&id))
    }

    async fn reply(&self, message: Value) -> Option<Reply> {
        let call = message.get("method").and_then(Value::as_str) == Some("tools/call");
        let snapshot = self.ctx.store.snapshot();
        let identity = match admission::identify(&self.ctx, &snapshot, Ok(&self.credentials)).await {
            Ok(identity) => identity,
            // The handler answers the call `AUTH_FAILED`, as any call with these credentials.
            Err(_) if call => return None,
            Err(refused) => return Some(refusal(refused)),
        };
        let view = self.view(&identity)?;
        let asked = Asked { ctx: &self.ctx, identity: &identity, session: Some(&self.session), stateless: false };
        if !task_route::answers(&asked, view, &message).await {
            return None;
        }
        // Every request takes a cell over HTTP, and a call one more for its upstream call: so here.
        if let Err(refused) = admission::take_calls(&self.ctx, &identity, if call { 2 } else { 1 }) {
            return Some(if call {
                let result = crate::gateway::envelope::tool_result(refused.answer());
                Reply::Result(serde_json::to_value(result).unwrap_or_default())
            } else {
                refusal(refused)
            });
        }
        Box::pin(task_route::dispatch(asked, view, message)).await
    }
}

/// A request the admission step refused, as the handler answers one that is not a tool call.
fn refusal(refused: crate::error::GatewayError) -> Reply {
    Reply::Error { code: -32000, message: refused.message.clone(), data: refused.answer() }
}

/// The method as the request metrics name it (a bounded set).
fn metric_label(method: &str) -> &'static str {
    match method {
        "tools/call" => "tools/call",
        "tasks/get" => "tasks/get",
        "tasks/result" => "tasks/result",
        "tasks/list" => "tasks/list",
        "tasks/cancel" => "tasks/cancel",
        _ => "tasks/other",
    }
}
