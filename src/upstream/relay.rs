//! What an upstream sends for a call besides its answer (contract section 8), and the call's way to stop early.
//!
//! While a call runs on a process, the process's client ([`super::rpc`]) hands the server's notifications
//! (`notifications/progress`, `notifications/message`) and requests (`elicitation/create`, `sampling/createMessage`,
//! `roots/list`) to the call's [`Relay`], whose owner passes them to the MCP client that made the call and sends the
//! client's answers back. A relay is installed only where a message cannot belong to another caller: the process
//! serves one call at a time (`max_calls_per_process` 1) or is bound to the caller's session (`per_session`).
//! Without one, notifications are dropped and requests refused, as before.
//!
//! `notifications/{tools,prompts,resources}/list_changed` and `notifications/resources/updated` belong to no call:
//! they reach the pool's listener ([`ServerEvents`]), which drops the cached lists and tells the open sessions (the
//! subscribed ones, for an updated resource).
//!
//! Cancelling the relay's token ends the call at once: the server is sent `notifications/cancelled` for its request
//! and the process goes back to the pool.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Messages a relay holds before the newest notifications are dropped (requests wait for room).
pub const RELAY_CAPACITY: usize = 64;

/// A JSON-RPC error answered to a server's request.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayError {
    pub code: i64,
    pub message: String,
}

impl RelayError {
    /// JSON-RPC "method not found": the caller cannot serve the request (it did not declare the capability).
    pub fn not_supported(method: &str) -> RelayError {
        RelayError { code: -32601, message: format!("the client of this call does not support {method}") }
    }

    /// JSON-RPC "method not found": nothing serves `method`.
    pub fn method_not_found(method: &str) -> RelayError {
        RelayError { code: -32601, message: format!("method not found: {method}") }
    }
}

/// The answer to a request of the server's, whatever its transport: `ping` at once, anything else from the call's
/// `relay` (the caller's answer), "method not found" without one.
pub async fn answer(
    relay: Option<mpsc::Sender<FromServer>>,
    method: String,
    params: Value,
) -> Result<Value, RelayError> {
    if method == "ping" {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    let Some(relay) = relay else {
        tracing::debug!(%method, "upstream request the gateway does not serve");
        return Err(RelayError::method_not_found(&method));
    };
    let (answer, answered) = oneshot::channel();
    if relay.send(FromServer::Request { method: method.clone(), params, answer }).await.is_err() {
        return Err(RelayError::not_supported(&method));
    }
    answered.await.unwrap_or_else(|_| {
        Err(RelayError { code: -32603, message: "the call ended before its client answered".into() })
    })
}

/// Whether `answer` to the server's request `method` told it some client's roots (`roots/list` with at least one root).
/// A process shared by several clients that learned one client's roots may keep them (server-everything does, per
/// connection) and show them to the next client: such a process serves no other call (contract 15, "clients are not
/// each other's"; see [`RootsSeen`]).
pub fn gives_roots(method: &str, answer: &Result<Value, RelayError>) -> bool {
    method == "roots/list"
        && answer
            .as_ref()
            .is_ok_and(|result| result.get("roots").and_then(Value::as_array).is_some_and(|roots| !roots.is_empty()))
}

/// Set once a connection's server was told a client's roots ([`gives_roots`]); read when its call ends.
#[derive(Debug, Default)]
pub struct RootsSeen(std::sync::atomic::AtomicBool);

impl RootsSeen {
    /// Records the answer to the server's request `method`.
    pub fn record(&self, method: &str, answer: &Result<Value, RelayError>) {
        if gives_roots(method, answer) {
            self.0.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Whether the server was ever told a client's roots.
    pub fn seen(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire)
    }
}

/// The JSON-RPC message that answers request `id` of the server's with `answer`.
pub fn reply(id: Value, answer: Result<Value, RelayError>) -> Value {
    match answer {
        Ok(result) => serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(RelayError { code, message }) => {
            serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    }
}

/// One message of the server's during a call.
#[derive(Debug)]
pub enum FromServer {
    /// A notification: its method and params as sent.
    Notification { method: String, params: Value },
    /// A request: its method and params as sent, and where the caller's answer goes.
    Request { method: String, params: Value, answer: oneshot::Sender<Result<Value, RelayError>> },
}

/// The relay of one call: where the server's messages go, and the token that ends the call early.
#[derive(Clone, Debug)]
pub struct Relay {
    pub messages: mpsc::Sender<FromServer>,
    pub cancel: CancellationToken,
    /// `_meta` for the upstream request (the caller's `progressToken`), sent only when the relay is installed.
    pub meta: Option<Value>,
}

impl Relay {
    /// A relay and the receiving end of its messages.
    pub fn new(cancel: CancellationToken, meta: Option<Value>) -> (Relay, mpsc::Receiver<FromServer>) {
        let (messages, receiver) = mpsc::channel(RELAY_CAPACITY);
        (Relay { messages, cancel, meta }, receiver)
    }
}

/// What a server says that belongs to no call.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// One of its lists changed: `"tools"`, `"prompts"` or `"resources"`.
    ListChanged(&'static str),
    /// A resource changed (`notifications/resources/updated`): its params, as sent.
    ResourceUpdated(Value),
}

/// What is told of a server's [`ServerEvent`]s.
pub type ServerEvents = Arc<dyn Fn(ServerEvent) + Send + Sync>;

/// The event a notification of `method` is, if it belongs to no call.
pub fn server_event(method: &str, params: &Value) -> Option<ServerEvent> {
    match method {
        "notifications/tools/list_changed" => Some(ServerEvent::ListChanged("tools")),
        "notifications/prompts/list_changed" => Some(ServerEvent::ListChanged("prompts")),
        "notifications/resources/list_changed" => Some(ServerEvent::ListChanged("resources")),
        "notifications/resources/updated" => Some(ServerEvent::ResourceUpdated(params.clone())),
        _ => None,
    }
}
