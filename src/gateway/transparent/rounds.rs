//! Multi round trips for stateless clients (protocol 2026-07-28, contract 8): a server may send such a client no
//! request, so an upstream's request during a transparent call (`sampling/createMessage`, `elicitation/create`,
//! `roots/list`) ends the client's request with an `input_required` result instead: the question under a key, and an
//! opaque `requestState`. The upstream call goes on waiting; the client asks again with the same call, its answers in
//! `inputResponses` and the `requestState`, and the gateway hands the answers to the upstream and waits for what comes
//! next: the result, or another question.
//!
//! A `requestState` is a random token bound to the key that made the call: another key cannot resume it. A call
//! nobody resumes is cancelled (the upstream is told and the process goes back to the pool) once its
//! `tool_execution_timeout` and `start_timeout` have passed. Notifications (progress, log messages) have no stream to
//! travel on and are dropped; a request the client's declared capabilities do not cover is refused to the upstream.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::ErrorData as McpError;
use rmcp::model::{ClientCapabilities, InputRequest};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::relay::may_ask;
use super::{CallAnswer, UnknownTool, call_tool};
use crate::auth::Identity;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::upstream::lock;
use crate::upstream::relay::{FromServer, Relay, RelayError};

/// How a round of a stateless transparent call ends.
pub enum Round {
    /// The call is over.
    Done(Result<CallAnswer, UnknownTool>),
    /// The upstream asked something: the client answers it and asks again with `request_state`.
    Input { requests: BTreeMap<String, InputRequest>, request_state: String },
}

/// The calls waiting for their clients' answers, by `requestState`.
#[derive(Default)]
pub struct PendingCalls {
    calls: std::sync::Mutex<HashMap<String, Pending>>,
    next: AtomicU64,
}

/// One call waiting for its client.
struct Pending {
    key_digest: [u8; 32],
    outcome: oneshot::Receiver<Result<CallAnswer, UnknownTool>>,
    messages: mpsc::Receiver<FromServer>,
    /// The questions put to the client, by their key in `inputRequests`.
    asked: HashMap<String, oneshot::Sender<Result<Value, RelayError>>>,
    capabilities: Option<ClientCapabilities>,
    cancel: CancellationToken,
}

impl Drop for Pending {
    fn drop(&mut self) {
        // A call given up (expired, or its client gone) is cancelled upstream; one that ended is untouched.
        self.cancel.cancel();
    }
}

/// Starts transparent call `name` for a stateless client that declared `capabilities`.
pub async fn start(
    ctx: &Arc<GatewayContext>,
    identity: &Arc<Identity>,
    name: String,
    args: Map<String, Value>,
    capabilities: Option<ClientCapabilities>,
) -> Round {
    let cancel = CancellationToken::new();
    let (relay, messages) = Relay::new(cancel.clone(), None);
    let (done, outcome) = oneshot::channel();
    let (call_ctx, call_identity) = (Arc::clone(ctx), Arc::clone(identity));
    tokio::spawn(async move {
        let answered = call_tool(&call_ctx, &call_identity, None, &name, args, Some(relay)).await;
        let _ = done.send(answered);
    });
    let pending =
        Pending { key_digest: identity.key_digest, outcome, messages, asked: HashMap::new(), capabilities, cancel };
    next_round(ctx, identity, pending).await
}

/// Resumes the call of `request_state` with the client's `answers`; an unknown, expired or foreign state is refused.
pub async fn resume(
    ctx: &Arc<GatewayContext>,
    identity: &Arc<Identity>,
    request_state: &str,
    answers: BTreeMap<String, Value>,
) -> Result<Round, McpError> {
    let pending = lock(&ctx.rounds.calls).remove(request_state);
    let Some(mut pending) = pending.filter(|p| crate::secrets::ct_eq_digest(&p.key_digest, &identity.key_digest))
    else {
        return Err(McpError::invalid_params("unknown or expired requestState: call the tool again", None));
    };
    for (key, answer) in answers {
        if let Some(asked) = pending.asked.remove(&key) {
            let _ = asked.send(Ok(answer));
        }
    }
    // A question left unanswered is refused to the upstream, so it does not wait for ever.
    for (_, asked) in pending.asked.drain() {
        let _ = asked.send(Err(RelayError { code: -32602, message: "the client gave no answer".into() }));
    }
    Ok(next_round(ctx, identity, pending).await)
}

/// Waits for the call's next event: its outcome, or a question for the client (the call then waits in `ctx`).
async fn next_round(ctx: &Arc<GatewayContext>, identity: &Identity, mut pending: Pending) -> Round {
    loop {
        tokio::select! {
            biased;
            Some(message) = pending.messages.recv() => {
                let FromServer::Request { method, params, answer } = message else { continue };
                if let Err(refused) = may_ask(pending.capabilities.as_ref(), &method) {
                    let _ = answer.send(Err(refused));
                    continue;
                }
                let Ok(request) = serde_json::from_value::<InputRequest>(json!({"method": method, "params": params}))
                else {
                    let message = format!("the {method} request does not fit the protocol");
                    let _ = answer.send(Err(RelayError { code: -32602, message }));
                    continue;
                };
                let key = format!("mcpgw-{}", ctx.rounds.next.fetch_add(1, Ordering::Relaxed));
                pending.asked.insert(key.clone(), answer);
                let request_state = uuid::Uuid::new_v4().simple().to_string();
                lock(&ctx.rounds.calls).insert(request_state.clone(), pending);
                expire(ctx, identity, request_state.clone());
                return Round::Input { requests: BTreeMap::from([(key, request)]), request_state };
            }
            answered = &mut pending.outcome => {
                let ended = || {
                    let failure = GatewayError::new(ErrorCode::UpstreamError, "the call ended without an answer");
                    Ok(CallAnswer::Gateway(failure.answer()))
                };
                return Round::Done(answered.unwrap_or_else(|_| ended()));
            }
        }
    }
}

/// Forgets (and so cancels) the call waiting under `request_state` if nobody resumes it in time.
fn expire(ctx: &Arc<GatewayContext>, identity: &Identity, request_state: String) {
    let settings = &identity.snapshot.settings;
    let patience = settings.timeouts.tool_execution + settings.start_timeout;
    let ctx = Arc::downgrade(ctx);
    tokio::spawn(async move {
        tokio::time::sleep(patience).await;
        if let Some(ctx) = ctx.upgrade() {
            let expired = lock(&ctx.rounds.calls).remove(&request_state);
            drop(expired);
        }
    });
}
