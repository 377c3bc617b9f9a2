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

/// Runs `work` (the upstream call, given the relay [`interpose`] made) while passing the upstream's messages from
/// `messages` through `guard` to `outer`. `Err` is the call's blocked result: the upstream call was cancelled.
pub async fn pump<T>(
    guard: &mut CallGuard<'_>,
    work: impl Future<Output = T>,
    mut messages: mpsc::Receiver<FromServer>,
    outer: &Relay,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<T, Value> {
    let mut work = std::pin::pin!(work);
    let blocked = loop {
        tokio::select! {
            biased;
            Some(message) = messages.recv() => {
                if let Err(blocked) = pass(guard, message, outer).await {
                    break blocked;
                }
            }
            outcome = &mut work => {
                // What the upstream sent before its answer reaches the client before the answer.
                while let Ok(message) = messages.try_recv() {
                    pass(guard, message, outer).await?;
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

/// One message through the guard to the client, and its answer back. `Err`: blocked, the call ends.
async fn pass(guard: &mut CallGuard<'_>, message: FromServer, outer: &Relay) -> Result<(), Value> {
    match message {
        FromServer::Notification { method, params } => {
            let params = guard.check_relayed(params).await?;
            // As the upstream's own client does: a notification that finds no room is dropped, never waited for.
            let _ = outer.messages.try_send(FromServer::Notification { method, params });
            Ok(())
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
                return Ok(());
            }
            let answered = answered.await.unwrap_or_else(|_| {
                Err(RelayError { code: -32603, message: "the call ended before its client answered".into() })
            });
            match answered {
                Ok(result) => match guard.check_answer(result).await {
                    Ok(result) => {
                        let _ = answer.send(Ok(result));
                        Ok(())
                    }
                    Err(blocked) => {
                        let _ = answer.send(Err(blocked_error()));
                        Err(blocked)
                    }
                },
                // A refusal's words come from the client too: checked and redacted like an answer.
                Err(RelayError { code, message }) => {
                    match guard.check_answer(serde_json::json!({"message": message})).await {
                        Ok(checked) => {
                            let message = checked["message"].as_str().unwrap_or("the client refused").to_string();
                            let _ = answer.send(Err(RelayError { code, message }));
                            Ok(())
                        }
                        Err(blocked) => {
                            let _ = answer.send(Err(blocked_error()));
                            Err(blocked)
                        }
                    }
                }
            }
        }
    }
}
