//! What crosses the gateway during a call besides the call and its answer (contract 14): the upstream's
//! notifications (`progress`, `message`) and requests (`elicitation/create`, `sampling/createMessage`, `roots/list`)
//! on their way to the client, and the client's answers on their way back.
//!
//! The per-call stack ([`crate::gateway::middleware::guardrails`]) puts this pump between the upstream and the call's
//! relay whenever the server has a guardrail policy, so every consumer of a relay (rmcp's handler, the fast route's
//! own stream, the stateless rounds) receives only what passed, and no route can forget it:
//!
//! - a notification or a request passes the output guardrails (every string) with the call's PII restored;
//! - the client's answer passes the input guardrails with redaction, under the call's own PII mapping (the same
//!   placeholders as its arguments), before the upstream sees it;
//! - a message that is blocked is not delivered: the upstream gets JSON-RPC `-32600` "blocked by guardrails" (for a
//!   request), the call is cancelled upstream, and the client's call ends with the blocked answer.
//!
//! Messages are passed on in the order the upstream sent them; a request waits for its answer before the next
//! message is looked at, as the upstream itself waits for it.

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::guardrails::stage::CallGuard;
use crate::upstream::relay::{FromServer, Relay, RelayError};

/// The JSON-RPC error an upstream gets for a request, or an answer to its request, that the guardrails blocked.
pub fn blocked_error() -> RelayError {
    RelayError { code: -32600, message: "blocked by guardrails".into() }
}

/// The relay the upstream call is given in place of `outer`, and the receiving end the pump reads. Cancelling the
/// client's call (`outer`'s token) still ends the upstream call; a block ends it through the child token alone.
pub fn interpose(outer: &Relay) -> (Relay, mpsc::Receiver<FromServer>) {
    Relay::new(outer.cancel.child_token(), outer.meta.clone())
}

/// A request of the upstream's that the client was asked: the client's answer to come, and where it goes.
struct Asked {
    answered: oneshot::Receiver<Result<Value, RelayError>>,
    answer: oneshot::Sender<Result<Value, RelayError>>,
}

/// Runs `work` (the upstream call, given the relay [`interpose`] made) while passing the upstream's messages from
/// `messages` through `guard` to `outer`. `Err` is the call's blocked result: the upstream call was cancelled.
///
/// `work` is polled all along, a question to the client pending or not, so the call's own timeout and its
/// cancellation hold while a client takes its time to answer (or never does).
pub async fn pump<T>(
    guard: &mut CallGuard<'_>,
    work: impl Future<Output = T>,
    mut messages: mpsc::Receiver<FromServer>,
    outer: &Relay,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<T, Value> {
    let mut work = std::pin::pin!(work);
    let mut asked: Option<Asked> = None;
    let blocked = loop {
        tokio::select! {
            biased;
            answered = async {
                match asked.as_mut() {
                    Some(pending) => (&mut pending.answered).await,
                    None => std::future::pending().await,
                }
            }, if asked.is_some() => {
                let Some(Asked { answer, .. }) = asked.take() else { continue };
                let answered = answered.unwrap_or_else(|_| Err(ended()));
                if let Err(blocked) = answer_upstream(guard, answered, answer).await {
                    break blocked;
                }
            }
            // One question at a time, as the upstream itself waits for its answer; the rest waits in the channel.
            Some(message) = messages.recv(), if asked.is_none() => {
                match pass(guard, message, outer).await {
                    Ok(pending) => asked = pending,
                    Err(blocked) => break blocked,
                }
            }
            outcome = &mut work => {
                // The call is over: an unanswered question's upstream hears so. What the upstream sent before its
                // answer reaches the client before the answer; a request now has nobody to go to.
                drop(asked);
                while let Ok(message) = messages.try_recv() {
                    match message {
                        FromServer::Notification { .. } => {
                            pass(guard, message, outer).await?;
                        }
                        FromServer::Request { answer, .. } => {
                            let _ = answer.send(Err(ended()));
                        }
                    }
                }
                return Ok(outcome);
            }
        }
    };
    // The call ends here: later requests of the upstream are refused (the receiver is gone), the call is cancelled
    // upstream and its process freed before the blocked answer goes out.
    drop(messages);
    cancel.cancel();
    let _ = work.await;
    Err(blocked)
}

fn ended() -> RelayError {
    RelayError { code: -32603, message: "the call ended before its client answered".into() }
}

/// One message through the guard to the client. A request asked of the client is returned, its answer to come.
/// `Err`: blocked, the call ends.
async fn pass(guard: &mut CallGuard<'_>, message: FromServer, outer: &Relay) -> Result<Option<Asked>, Value> {
    match message {
        FromServer::Notification { method, params } => {
            let params = guard.check_relayed(params).await?;
            // As the upstream's own client does: a notification that finds no room is dropped, never waited for.
            let _ = outer.messages.try_send(FromServer::Notification { method, params });
            Ok(None)
        }
        FromServer::Request { method, params, answer } => {
            let params = match guard.check_relayed(params).await {
                Ok(params) => params,
                Err(blocked) => {
                    let _ = answer.send(Err(blocked_error()));
                    return Err(blocked);
                }
            };
            let (asked, answered) = oneshot::channel();
            if outer.messages.send(FromServer::Request { method: method.clone(), params, answer: asked }).await.is_err()
            {
                let _ = answer.send(Err(RelayError::not_supported(&method)));
                return Ok(None);
            }
            Ok(Some(Asked { answered, answer }))
        }
    }
}

/// The client's answer to a request (or its refusal) through the input guardrails, to the upstream. `Err`: blocked,
/// the upstream heard `-32600` and the call ends.
async fn answer_upstream(
    guard: &mut CallGuard<'_>,
    answered: Result<Value, RelayError>,
    answer: oneshot::Sender<Result<Value, RelayError>>,
) -> Result<(), Value> {
    let checked = match answered {
        Ok(result) => guard.check_answer(result).await.map(Ok),
        // A refusal's words come from the client too: checked and redacted like an answer.
        Err(RelayError { code, message }) => {
            guard.check_answer(serde_json::json!({"message": message})).await.map(|checked| {
                let message = checked["message"].as_str().unwrap_or("the client refused").to_string();
                Err(RelayError { code, message })
            })
        }
    };
    match checked {
        Ok(checked) => {
            let _ = answer.send(checked);
            Ok(())
        }
        Err(blocked) => {
            let _ = answer.send(Err(blocked_error()));
            Err(blocked)
        }
    }
}
