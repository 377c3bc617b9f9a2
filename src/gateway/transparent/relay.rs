//! The caller's side of a relayed call (contract section 8): what the upstream sends during a transparent call
//! reaches the MCP client that made it, on that call's stream, and the client's answers go back.
//!
//! - `notifications/progress` carry the caller's own `progressToken` (the gateway sent it upstream with the call);
//!   without one, progress is dropped. `notifications/message` is passed on as it came; rmcp sends no notification
//!   but progress on the call's own stream, so a session's log message goes where rmcp would have sent it, the
//!   session's `GET` stream (its outbox, which the session layer serves: `gateway/sessions/outbox.rs`).
//! - `sampling/createMessage`, `elicitation/create` and `roots/list` are asked of the client when its session
//!   declared the capability (`sampling`, `elicitation`, `roots`); otherwise the upstream gets a JSON-RPC error.
//!   rmcp sends a request made from within the call's handler on the call's own stream (SEP-2260).
//!
//! Messages are passed on in the order the upstream sent them, and every notification sent before the upstream's
//! answer is passed on before the answer.

use rmcp::RoleServer;
use rmcp::model::{ClientCapabilities, CustomRequest, ProgressToken, ServerNotification, ServerRequest};
use rmcp::service::{Peer, ServiceError};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::gateway::sessions::Channel;
use crate::upstream::relay::{FromServer, RelayError};

/// The client a relayed call passes messages to.
pub struct Caller<'a> {
    pub peer: &'a Peer<RoleServer>,
    /// The caller's `progressToken` for this call.
    pub progress_token: Option<ProgressToken>,
    /// What the caller's session declared it can do (none known: nothing is asked of it).
    pub capabilities: Option<ClientCapabilities>,
    /// The caller's session's own stream, over HTTP: where its notifications other than progress go.
    pub stream: Option<Channel>,
}

impl Caller<'_> {
    /// Runs `work` (the call) while passing the upstream's messages to the caller; returns its outcome once every
    /// message sent before it has been passed on.
    pub async fn serve<T>(&self, work: impl Future<Output = T>, mut messages: mpsc::Receiver<FromServer>) -> T {
        let mut work = std::pin::pin!(work);
        let outcome = loop {
            tokio::select! {
                biased;
                Some(message) = messages.recv() => self.pass_on(message).await,
                outcome = &mut work => break outcome,
            }
        };
        while let Ok(message) = messages.try_recv() {
            self.pass_on(message).await;
        }
        outcome
    }

    async fn pass_on(&self, message: FromServer) {
        match message {
            FromServer::Notification { method, params } => self.notify(&method, params).await,
            FromServer::Request { method, params, answer } => {
                let answered = self.ask(&method, params).await;
                let _ = answer.send(answered);
            }
        }
    }

    /// Passes an upstream's notification on: progress with the caller's token (dropped without one), log messages as
    /// they came, nothing else.
    pub async fn notify(&self, method: &str, params: Value) {
        let token = self.progress_token.as_ref().and_then(|token| serde_json::to_value(token).ok());
        let Some(params) = for_caller(method, params, token.as_ref()) else { return };
        match serde_json::from_value::<ServerNotification>(json!({"method": method, "params": params})) {
            Ok(notification) => {
                let sent = match &self.stream {
                    Some(stream) if method != "notifications/progress" => stream.notify(notification).await,
                    _ => self.peer.send_notification(notification).await.map_err(|e| e.to_string()),
                };
                if let Err(error) = sent {
                    tracing::debug!(method, %error, "an upstream notification did not reach the client");
                }
            }
            Err(error) => tracing::debug!(method, %error, "an upstream notification that does not fit the protocol"),
        }
    }

    async fn ask(&self, method: &str, params: Value) -> Result<Value, RelayError> {
        may_ask(self.capabilities.as_ref(), method, &params)?;
        // As rmcp's type when it fits; otherwise (a newer schema than rmcp knows) as it came, untouched.
        let request = serde_json::from_value::<ServerRequest>(json!({"method": method, "params": params.clone()}))
            .unwrap_or_else(|_| ServerRequest::CustomRequest(CustomRequest::new(method, Some(params))));
        match self.peer.send_request(request).await {
            Ok(result) => serde_json::to_value(result)
                .map_err(|e| RelayError { code: -32603, message: format!("the client's answer: {e}") }),
            Err(ServiceError::McpError(error)) => {
                Err(RelayError { code: i64::from(error.code.0), message: error.message.to_string() })
            }
            Err(other) => Err(RelayError { code: -32603, message: format!("the client did not answer: {other}") }),
        }
    }
}

/// Whether a client that declared `capabilities` may be asked `method` with `params` (an upstream's request during a
/// call, or the gateway's own URL elicitation): a URL-mode elicitation needs `elicitation.url` declared.
pub fn may_ask(capabilities: Option<&ClientCapabilities>, method: &str, params: &Value) -> Result<(), RelayError> {
    let url_mode = params.get("mode").and_then(Value::as_str) == Some("url");
    let declared = match method {
        "sampling/createMessage" => capabilities.is_some_and(|c| c.sampling.is_some()),
        "elicitation/create" if url_mode => {
            capabilities.and_then(|c| c.elicitation.as_ref()).is_some_and(|e| e.url.is_some())
        }
        "elicitation/create" => capabilities.is_some_and(|c| c.elicitation.is_some()),
        "roots/list" => capabilities.is_some_and(|c| c.roots.is_some()),
        _ => return Err(RelayError::method_not_found(method)),
    };
    if declared { Ok(()) } else { Err(RelayError::not_supported(method)) }
}

/// The params of an upstream's notification as its caller gets them: progress with the caller's own token (none
/// without one), log messages as they came, nothing of anything else (list changes and resource updates belong to
/// no call).
pub fn for_caller(method: &str, mut params: Value, progress_token: Option<&Value>) -> Option<Value> {
    match method {
        "notifications/progress" => {
            let fields = params.as_object_mut()?;
            fields.insert("progressToken".into(), progress_token?.clone());
            Some(params)
        }
        "notifications/message" => Some(params),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_carries_the_callers_token_and_other_notifications_stay_with_their_call() {
        let token = json!("caller-7");
        let progress = for_caller("notifications/progress", json!({"progress": 1, "progressToken": 99}), Some(&token));
        assert_eq!(progress, Some(json!({"progress": 1, "progressToken": "caller-7"})));
        assert_eq!(for_caller("notifications/progress", json!({"progress": 1}), None), None, "no token, no progress");
        assert_eq!(for_caller("notifications/progress", json!([1]), Some(&token)), None, "not an object");
        assert_eq!(for_caller("notifications/message", json!({"level": "info"}), None), Some(json!({"level": "info"})));
        assert_eq!(for_caller("notifications/tools/list_changed", json!({}), Some(&token)), None);
    }

    #[test]
    fn only_what_the_client_declared_is_asked_of_it() {
        let sampling: ClientCapabilities = serde_json::from_value(json!({"sampling": {}})).unwrap();
        let none = json!({});
        assert!(may_ask(Some(&sampling), "sampling/createMessage", &none).is_ok());
        assert_eq!(may_ask(Some(&sampling), "elicitation/create", &none).map_err(|e| e.code), Err(-32601));
        assert!(may_ask(None, "roots/list", &none).is_err());
        assert!(may_ask(Some(&sampling), "tools/call", &none).is_err(), "not a request a server may make of a client");
        let url = json!({"mode": "url", "url": "https://example.com"});
        let form: ClientCapabilities = serde_json::from_value(json!({"elicitation": {}})).unwrap();
        let both: ClientCapabilities = serde_json::from_value(json!({"elicitation": {"form": {}, "url": {}}})).unwrap();
        assert!(may_ask(Some(&form), "elicitation/create", &none).is_ok());
        assert!(may_ask(Some(&form), "elicitation/create", &url).is_err(), "URL mode needs elicitation.url");
        assert!(may_ask(Some(&both), "elicitation/create", &url).is_ok());
    }
}
