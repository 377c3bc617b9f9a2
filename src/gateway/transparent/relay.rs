//! The caller's side of a relayed call (contract section 8): what the upstream sends during a transparent call
//! reaches the MCP client that made it, on that call's stream, and the client's answers go back.
//!
//! - `notifications/progress` carry the caller's own `progressToken` (the gateway sent it upstream with the call);
//!   without one, progress is dropped. `notifications/message` is passed on as it came.
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

use crate::upstream::relay::{FromServer, RelayError};

/// The client a relayed call passes messages to.
pub struct Caller<'a> {
    pub peer: &'a Peer<RoleServer>,
    /// The caller's `progressToken` for this call.
    pub progress_token: Option<ProgressToken>,
    /// What the caller's session declared it can do (none known: nothing is asked of it).
    pub capabilities: Option<ClientCapabilities>,
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

    async fn notify(&self, method: &str, mut params: Value) {
        match method {
            "notifications/progress" => {
                let Some(token) = &self.progress_token else { return };
                params["progressToken"] = serde_json::to_value(token).unwrap_or(Value::Null);
            }
            "notifications/message" => {}
            // Anything else belongs to no call (list changes, resource updates go their own way).
            _ => return,
        }
        match serde_json::from_value::<ServerNotification>(json!({"method": method, "params": params})) {
            Ok(notification) => {
                if let Err(error) = self.peer.send_notification(notification).await {
                    tracing::debug!(method, %error, "an upstream notification did not reach the client");
                }
            }
            Err(error) => tracing::debug!(method, %error, "an upstream notification that does not fit the protocol"),
        }
    }

    async fn ask(&self, method: &str, params: Value) -> Result<Value, RelayError> {
        let capabilities = self.capabilities.as_ref();
        let declared = match method {
            "sampling/createMessage" => capabilities.is_some_and(|c| c.sampling.is_some()),
            "elicitation/create" => capabilities.is_some_and(|c| c.elicitation.is_some()),
            "roots/list" => capabilities.is_some_and(|c| c.roots.is_some()),
            _ => return Err(RelayError { code: -32601, message: format!("method not found: {method}") }),
        };
        if !declared {
            return Err(RelayError::not_supported(method));
        }
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
