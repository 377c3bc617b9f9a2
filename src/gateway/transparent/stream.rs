//! The HTTP route of a transparent `tools/call` in a session (taken by the fast route, [`crate::gateway::fast_path`]):
//! the gateway answers it itself, on the POST's own response, so that everything the upstream sends for the call
//! travels with it.
//!
//! - While nothing arrives for the call, it is answered as one `application/json` body: the upstream's
//!   `CallToolResult` written once, as it came (the cost of a transparent call is that of a `gw_*` call).
//! - When the upstream sends something first (progress, a log message, a request for the client), the answer becomes
//!   an SSE stream: each message as an event, in the order sent, then the response, then the end of the stream.
//! - The upstream's requests (`sampling/createMessage`, `elicitation/create`, `roots/list`) are asked of the client
//!   on that stream under ids of the gateway's own (`mcpgw-relay-N`), when its session declared the capability; the
//!   client's answer, POSTed in the session, is taken here ([`RelayRegistry::take`]) and goes back to the upstream.
//! - The client's `notifications/cancelled` for the call is taken here too: the upstream is told and the process
//!   goes back to the pool. A client that goes away cancels the call the same way.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use bytes::Bytes;
use rmcp::model::ClientCapabilities;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::relay::{for_caller, may_ask};
use super::{CallAnswer, UnknownTool, call_tool};
use crate::auth::Identity;
use crate::gateway::GatewayContext;
use crate::gateway::envelope::{self, tool_result};
use crate::json_strict::object;
use crate::upstream::lock;
use crate::upstream::relay::{FromServer, Relay, RelayError};

/// The prefix of the ids of the gateway's own requests to a client.
const ASK_PREFIX: &str = "mcpgw-relay-";
/// SSE events waiting to be written to a slow client before the call waits for it.
const EVENTS_BUFFERED: usize = 16;

type Key = (String, String);

/// The relayed calls in progress and the questions put to their clients, by session.
#[derive(Default)]
pub struct RelayRegistry {
    /// (session, the call's JSON-RPC id as JSON text): the call's cancellation, and the token cancelled when it ended.
    calls: std::sync::Mutex<HashMap<Key, (CancellationToken, CancellationToken)>>,
    /// (session, our request id): where the client's answer goes.
    asks: std::sync::Mutex<HashMap<Key, oneshot::Sender<Result<Value, RelayError>>>>,
    next: AtomicU64,
}

impl RelayRegistry {
    /// Takes a client message that belongs to a relayed call of `session`: the answer to a question put to the client,
    /// or the cancellation of the call (with the token cancelled once the call has ended and its process is free).
    /// `None` when it belongs to nothing here (it goes on to the protocol layer).
    pub fn take(&self, session: &str, message: &Value) -> Option<Taken> {
        if let Some(method) = message.get("method").and_then(Value::as_str) {
            if method != "notifications/cancelled" {
                return None;
            }
            let id = message.pointer("/params/requestId")?;
            let key = (session.to_string(), id.to_string());
            let (cancel, ended) = lock(&self.calls).get(&key).cloned()?;
            cancel.cancel();
            return Some(Taken::Cancelled(ended));
        }
        let id = message.get("id").and_then(Value::as_str).filter(|id| id.starts_with(ASK_PREFIX))?;
        let answer = lock(&self.asks).remove(&(session.to_string(), id.to_string()))?;
        let answered = match (message.get("result"), message.get("error")) {
            (Some(result), None) => Ok(result.clone()),
            (_, Some(error)) => Err(RelayError {
                code: error.get("code").and_then(Value::as_i64).unwrap_or(-32603),
                message: error.get("message").and_then(Value::as_str).unwrap_or("the client refused").to_string(),
            }),
            (None, None) => Err(RelayError { code: -32603, message: "the client's answer is empty".into() }),
        };
        let _ = answer.send(answered);
        Some(Taken::Answered)
    }
}

/// A client message [`RelayRegistry::take`] took.
pub enum Taken {
    /// The answer to a question: handed on.
    Answered,
    /// A call's cancellation: this token is cancelled once the call has ended.
    Cancelled(CancellationToken),
}

impl Taken {
    /// The answer to the client's message: 202, once a cancelled call has ended (within a bound: a call that does
    /// not end at once is killed with its process by the pool anyway).
    pub async fn accepted(self) -> Response<Body> {
        if let Taken::Cancelled(ended) = self {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), ended.cancelled()).await;
        }
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::ACCEPTED;
        response
    }
}

/// Forgets a relayed call and its open questions when it ends.
struct Registered {
    ctx: Arc<GatewayContext>,
    call: Key,
    asked: Vec<Key>,
    ended: CancellationToken,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.ended.cancel();
        lock(&self.ctx.relays.calls).remove(&self.call);
        let mut asks = lock(&self.ctx.relays.asks);
        for key in &self.asked {
            // An unanswered question's sender goes: the upstream hears that the call ended.
            asks.remove(key);
        }
    }
}

/// What a transparent call in a session needs besides the gateway.
pub struct SessionCall {
    pub identity: Arc<Identity>,
    pub session: String,
    /// The call's JSON-RPC id.
    pub id: Value,
    pub name: String,
    pub args: Map<String, Value>,
    /// The caller's `progressToken` (`params._meta.progressToken`).
    pub progress_token: Option<Value>,
    /// What the session's client declared at `initialize`.
    pub capabilities: Option<ClientCapabilities>,
}

/// Answers `call` (see the module documentation).
pub async fn answer(ctx: Arc<GatewayContext>, call: SessionCall) -> Response<Body> {
    let SessionCall { identity, session, id, name, args, progress_token, capabilities } = call;
    let cancel = CancellationToken::new();
    let meta = progress_token.as_ref().map(|token| json!({"progressToken": token}));
    let (relay, mut messages) = Relay::new(cancel.clone(), meta);
    let call_key = (session.clone(), id.to_string());
    let ended = CancellationToken::new();
    lock(&ctx.relays.calls).insert(call_key.clone(), (cancel.clone(), ended.clone()));
    let registered = Registered { ctx: Arc::clone(&ctx), call: call_key, asked: Vec::new(), ended };
    // Boxed here rather than in the task: the task then holds a pointer, not a second copy of the work.
    let mut work = {
        let (ctx, session) = (Arc::clone(&ctx), session.clone());
        Box::pin(async move { call_tool(&ctx, &identity, Some(&session), &name, args, Some(relay)).await })
    };
    // The call runs in a task of its own: a client that goes away (the response is dropped) cancels it cleanly,
    // rather than abandoning the upstream request mid-way.
    let (respond, response) = oneshot::channel::<Response<Body>>();
    tokio::spawn(async move {
        let mut respond = respond;
        let (first, done) = loop {
            tokio::select! {
                biased;
                Some(message) = messages.recv() => break (message, None),
                // A message may have been passed on in the same step as the answer (the boundary's pump forwards
                // what the upstream sent before its answer): it still goes first, on the stream.
                answered = &mut work => match messages.try_recv() {
                    Ok(message) => break (message, Some(answered)),
                    Err(_) => {
                        let _ = respond.send(json_response(&id, answered));
                        return;
                    }
                },
                () = respond.closed(), if !cancel.is_cancelled() => cancel.cancel(),
            }
        };
        let (events, body) = mpsc::channel::<Bytes>(EVENTS_BUFFERED);
        let mut stream = Stream { events, session, progress_token, capabilities, registered, cancel };
        if respond.send(sse_response(body)).is_err() {
            stream.cancel.cancel();
        }
        stream.pass_on(first).await;
        let answered = match done {
            Some(answered) => answered,
            None => loop {
                tokio::select! {
                    biased;
                    Some(message) = messages.recv() => stream.pass_on(message).await,
                    answered = &mut work => break answered,
                }
            },
        };
        while let Ok(message) = messages.try_recv() {
            stream.pass_on(message).await;
        }
        stream.send(&response_message(&id, answered)).await;
    });
    response.await.unwrap_or_else(|_| {
        let mut failed = Response::new(Body::from("the call ended without an answer"));
        *failed.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        failed
    })
}

/// An SSE response whose events are what `body` receives.
fn sse_response(body: mpsc::Receiver<Bytes>) -> Response<Body> {
    let body = futures_util::stream::unfold(body, |mut body| async move {
        body.recv().await.map(|event| (Ok::<_, Infallible>(event), body))
    });
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// The SSE answer of one call.
struct Stream {
    events: mpsc::Sender<Bytes>,
    session: String,
    progress_token: Option<Value>,
    capabilities: Option<ClientCapabilities>,
    registered: Registered,
    cancel: CancellationToken,
}

impl Stream {
    async fn pass_on(&mut self, message: FromServer) {
        match message {
            FromServer::Notification { method, params } => {
                if let Some(params) = for_caller(&method, params, self.progress_token.as_ref()) {
                    self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params})).await;
                }
            }
            FromServer::Request { method, params, answer } => {
                if let Err(refused) = may_ask(self.capabilities.as_ref(), &method, &params) {
                    let _ = answer.send(Err(refused));
                    return;
                }
                let relays = &self.registered.ctx.relays;
                let id = format!("{ASK_PREFIX}{}", relays.next.fetch_add(1, Ordering::Relaxed));
                let key = (self.session.clone(), id.clone());
                lock(&relays.asks).insert(key.clone(), answer);
                self.registered.asked.push(key);
                self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
            }
        }
    }

    /// Writes one event; a client that has gone away cancels the call.
    async fn send(&self, message: &Value) {
        let event = format!("data: {message}\n\n");
        if self.events.send(Bytes::from(event)).await.is_err() {
            self.cancel.cancel();
        }
    }
}

/// The JSON-RPC message that answers call `id`.
fn response_message(id: &Value, answered: Result<CallAnswer, UnknownTool>) -> Value {
    match answered {
        Ok(CallAnswer::Upstream(result)) => object([("jsonrpc", "2.0".into()), ("id", id.clone()), ("result", result)]),
        Ok(CallAnswer::Gateway(answer)) => {
            let mut result = serde_json::to_value(tool_result(answer)).unwrap_or(Value::Null);
            // As rmcp answers a session peer.
            if let Some(fields) = result.as_object_mut() {
                fields.remove("resultType");
            }
            object([("jsonrpc", "2.0".into()), ("id", id.clone()), ("result", result)])
        }
        Err(unknown) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": unknown.to_string()}}),
    }
}

/// The answer of a call nothing was sent for: one JSON body (a gateway answer in the envelope of the `gw_*` tools).
fn json_response(id: &Value, answered: Result<CallAnswer, UnknownTool>) -> Response<Body> {
    let body = match answered {
        Ok(CallAnswer::Gateway(answer)) => envelope::answer_body(id, answer, false),
        other => Body::from(response_message(id, other).to_string()),
    };
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
