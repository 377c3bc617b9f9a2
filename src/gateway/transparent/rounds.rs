//! Multi round trips for stateless clients (protocol 2026-07-28, contract 8): a server may send such a client no
//! request, so an upstream's request during a transparent call (`sampling/createMessage`, `elicitation/create`,
//! `roots/list`) ends the client's request with an `input_required` result instead: the question under a key, and an
//! opaque `requestState`. The upstream call goes on waiting; the client asks again with the same call, its answers in
//! `inputResponses` and the `requestState`, and the gateway hands the answers to the upstream and waits for what comes
//! next: the result, or another question.
//!
//! A `requestState` is a random token bound to the key that made the call, the method (`tools/call`) and the tool's
//! exposed name: a resume that does not match all three (another key, another tool) is refused with `-32602` and
//! leaves the waiting call as it was, so nobody but its owner can answer or end it. A call waits for its client at
//! most `limits.input_required_seconds` per round (then it is cancelled: the upstream is told and the process goes
//! back to the pool), and one key has at most `limits.max_waiting_rounds_per_key` calls waiting at once: a call that
//! would wait past that ends at once, cancelled upstream, with the `RATE_LIMITED` answer (`isError`,
//! `retry_after_seconds`). The upstream's progress for the call reaches the client on the stream of the request that
//! is waiting for the round (rmcp answers it as SSE then), with that request's own `progressToken`; without one it
//! is dropped, and so are log messages (a 2026-07-28 server sends those only to a request that opted in with a log
//! level). A request the client's declared capabilities do not cover is refused to the upstream. Once the call has
//! ended its relay is gone, so a request its server sends later is refused to the server and reaches no client.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::ErrorData as McpError;
use rmcp::model::{ClientCapabilities, InputRequest};
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::relay::{Caller, may_ask};
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
    waiting: std::sync::Mutex<Waiting>,
    next: AtomicU64,
}

/// The waiting calls, and how many each key has.
#[derive(Default)]
struct Waiting {
    calls: HashMap<String, Pending>,
    per_key: HashMap<[u8; 32], usize>,
}

impl Waiting {
    /// Parks `pending` under `request_state`, unless its key has `max` calls waiting already (it is handed back).
    fn park(&mut self, request_state: String, pending: Pending, max: usize) -> Result<(), Box<Pending>> {
        let count = self.per_key.entry(pending.key_digest).or_default();
        if *count >= max {
            return Err(Box::new(pending));
        }
        *count += 1;
        self.calls.insert(request_state, pending);
        Ok(())
    }

    /// Takes the call of `request_state` out when it is the one of (key, method, name); else leaves it untouched.
    fn take(&mut self, request_state: &str, key_digest: &[u8; 32], method: &str, name: &str) -> Option<Pending> {
        let pending = self.calls.get(request_state)?;
        let owner = crate::secrets::ct_eq_digest(&pending.key_digest, key_digest);
        if !(owner && pending.method == method && pending.name == name) {
            return None;
        }
        self.remove(request_state)
    }

    fn remove(&mut self, request_state: &str) -> Option<Pending> {
        let pending = self.calls.remove(request_state)?;
        if let Some(count) = self.per_key.get_mut(&pending.key_digest) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_key.remove(&pending.key_digest);
            }
        }
        Some(pending)
    }
}

/// One call waiting for its client.
struct Pending {
    key_digest: [u8; 32],
    /// What a resume must name: the method (`tools/call`) and the tool's exposed name.
    method: &'static str,
    name: String,
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

/// Starts transparent call `name` for a stateless client, `caller` (the request, its progress token and declared
/// capabilities).
pub async fn start(
    ctx: &Arc<GatewayContext>,
    identity: &Arc<Identity>,
    name: String,
    args: Map<String, Value>,
    caller: &Caller<'_>,
) -> Round {
    let cancel = CancellationToken::new();
    // The upstream is given a progress token when the caller gave one; each round's progress goes out with the token
    // of the request then waiting.
    let meta = caller.progress_token.as_ref().map(|token| json!({"progressToken": token}));
    let (relay, messages) = Relay::new(cancel.clone(), meta);
    let (done, outcome) = oneshot::channel();
    let (call_ctx, call_identity, call_name) = (Arc::clone(ctx), Arc::clone(identity), name.clone());
    tokio::spawn(async move {
        let answered = call_tool(&call_ctx, &call_identity, None, &call_name, args, Some(relay)).await;
        let _ = done.send(answered);
    });
    let pending = Pending {
        key_digest: identity.key_digest,
        method: TOOLS_CALL,
        name,
        outcome,
        messages,
        asked: HashMap::new(),
        capabilities: caller.capabilities.clone(),
        cancel,
    };
    next_round(ctx, identity, pending, caller).await
}

/// The method of the calls that wait in rounds.
const TOOLS_CALL: &str = "tools/call";

/// Resumes the call of `request_state` with the client's `answers`, when it is this key's call of tool `name`; an
/// unknown or expired state, or one of another key or tool, is refused and the call it names is left as it was.
pub async fn resume(
    ctx: &Arc<GatewayContext>,
    identity: &Arc<Identity>,
    request_state: &str,
    name: &str,
    answers: BTreeMap<String, Value>,
    caller: &Caller<'_>,
) -> Result<Round, McpError> {
    let pending = lock(&ctx.rounds.waiting).take(request_state, &identity.key_digest, TOOLS_CALL, name);
    let Some(mut pending) = pending else {
        return Err(McpError::invalid_params(
            "unknown or expired requestState, or not one of this tool's calls: call the tool again",
            None,
        ));
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
    Ok(next_round(ctx, identity, pending, caller).await)
}

/// Waits for the call's next event: its outcome, or a question for the client (the call then waits in `ctx`). The
/// upstream's progress meanwhile goes to `caller`, the request waiting for this round.
async fn next_round(
    ctx: &Arc<GatewayContext>,
    identity: &Identity,
    mut pending: Pending,
    caller: &Caller<'_>,
) -> Round {
    loop {
        tokio::select! {
            biased;
            Some(message) = pending.messages.recv() => {
                let (method, params, answer) = match message {
                    FromServer::Notification { method, params } => {
                        progress(caller, &method, params).await;
                        continue;
                    }
                    FromServer::Request { method, params, answer } => (method, params, answer),
                };
                if let Err(refused) = may_ask(pending.capabilities.as_ref(), &method, &params) {
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
                let max = identity.snapshot.settings.limits.max_waiting_rounds_per_key;
                let parked = lock(&ctx.rounds.waiting).park(request_state.clone(), pending, max);
                if let Err(refused) = parked {
                    // Dropped after the lock: the call is cancelled upstream and its process goes back to the pool.
                    drop(refused);
                    return Round::Done(Ok(CallAnswer::Gateway(too_many_rounds(ctx, max))));
                }
                expire(ctx, identity, request_state.clone());
                return Round::Input { requests: BTreeMap::from([(key, request)]), request_state };
            }
            answered = &mut pending.outcome => {
                // Progress sent before the answer goes out before it.
                while let Ok(message) = pending.messages.try_recv() {
                    if let FromServer::Notification { method, params } = message {
                        progress(caller, &method, params).await;
                    }
                }
                let ended = || {
                    let failure = GatewayError::new(ErrorCode::UpstreamError, "the call ended without an answer");
                    Ok(CallAnswer::Gateway(failure.answer()))
                };
                return Round::Done(answered.unwrap_or_else(|_| ended()));
            }
        }
    }
}

/// Passes an upstream's `notifications/progress` on to `caller` (with its own token); other notifications of a
/// stateless call are dropped (see the module's comment).
async fn progress(caller: &Caller<'_>, method: &str, params: Value) {
    if method == "notifications/progress" {
        caller.notify(method, params).await;
    }
}

/// The answer of a call that would wait while its key has `max` calls waiting already.
fn too_many_rounds(ctx: &GatewayContext, max: usize) -> Value {
    ctx.store.metrics().limit_hit("waiting_rounds_per_key");
    let message = format!(
        "this key has {max} calls waiting for their clients' answers, its limit (limits.max_waiting_rounds_per_key); \
         answer one, or try again later"
    );
    GatewayError::new(ErrorCode::RateLimited, message).with("retry_after_seconds", RETRY_AFTER_SECONDS).answer()
}

/// When a call refused over `max_waiting_rounds_per_key` is worth trying again.
const RETRY_AFTER_SECONDS: u64 = 5;

/// Forgets (and so cancels) the call waiting under `request_state` if nobody resumes it within
/// `limits.input_required_seconds`.
fn expire(ctx: &Arc<GatewayContext>, identity: &Identity, request_state: String) {
    let patience = identity.snapshot.settings.limits.input_required;
    let ctx = Arc::downgrade(ctx);
    tokio::spawn(async move {
        tokio::time::sleep(patience).await;
        if let Some(ctx) = ctx.upgrade() {
            let expired = lock(&ctx.rounds.waiting).remove(&request_state);
            if expired.is_some() {
                ctx.store.metrics().limit_hit("input_required");
            }
            drop(expired);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(key: u8, name: &str) -> Pending {
        let (_, outcome) = oneshot::channel();
        let (_, messages) = mpsc::channel(1);
        Pending {
            key_digest: [key; 32],
            method: TOOLS_CALL,
            name: name.into(),
            outcome,
            messages,
            asked: HashMap::new(),
            capabilities: None,
            cancel: CancellationToken::new(),
        }
    }

    #[test]
    fn a_key_parks_at_most_max_calls_and_a_place_frees_when_one_is_taken() {
        let mut waiting = Waiting::default();
        assert!(waiting.park("a".into(), pending(1, "t"), 2).is_ok());
        assert!(waiting.park("b".into(), pending(1, "t"), 2).is_ok());
        let refused = waiting.park("c".into(), pending(1, "t"), 2).expect_err("a third call of the key");
        let cancel = refused.cancel.clone();
        drop(refused);
        assert!(cancel.is_cancelled(), "a refused call is cancelled upstream");
        assert!(waiting.park("d".into(), pending(2, "t"), 2).is_ok(), "another key has places of its own");
        assert!(waiting.take("a", &[1; 32], TOOLS_CALL, "t").is_some());
        assert!(waiting.park("e".into(), pending(1, "t"), 2).is_ok(), "a taken call gives its place back");
        assert!(waiting.remove("b").is_some() && waiting.remove("e").is_some() && waiting.remove("d").is_some());
        assert!(waiting.per_key.is_empty() && waiting.calls.is_empty());
    }

    #[test]
    fn only_the_owners_resume_of_the_same_method_and_tool_takes_the_call_and_others_leave_it_waiting() {
        let mut waiting = Waiting::default();
        let cancel = {
            let call = pending(1, "srv__ask");
            let cancel = call.cancel.clone();
            assert!(waiting.park("s".into(), call, 4).is_ok());
            cancel
        };
        assert!(waiting.take("s", &[2; 32], TOOLS_CALL, "srv__ask").is_none(), "another key");
        assert!(waiting.take("s", &[1; 32], TOOLS_CALL, "srv__other").is_none(), "another tool");
        assert!(waiting.take("s", &[1; 32], "prompts/get", "srv__ask").is_none(), "another method");
        assert!(!cancel.is_cancelled(), "a refused resume left the call alone");
        assert!(waiting.take("s", &[1; 32], TOOLS_CALL, "srv__ask").is_some());
        assert!(cancel.is_cancelled(), "taken and dropped here, the call is cancelled");
    }
}
