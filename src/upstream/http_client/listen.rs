//! The gateway's `subscriptions/listen` stream to a server spoken to in 2026-07-28 ([`super::modern`]).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Method, header};
use http_body_util::Full;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::modern::{MODERN, with_meta};
use super::{HttpRpc, HttpRpcError, lock};
use crate::upstream::relay::{ServerEvents, server_event};
use crate::upstream::remote::{Endpoint, Target};
use crate::upstream::sse::EventReader;

/// The most resources one server is asked to tell updates of on its listen stream.
const MAX_LISTENED: usize = 1024;
/// The longest wait before a listen stream that broke is opened again.
const MAX_PAUSE: Duration = Duration::from_secs(60);

/// The gateway's `subscriptions/listen` stream to a server spoken to in 2026-07-28: the revision's way for a server to
/// tell its list changes and the updates of the resources the gateway named (the URIs its clients subscribed to, which
/// the revision has no `resources/subscribe` for). One per client, open while the client lives; opened again (with a
/// pause doubling up to a minute) when it breaks, and at once when the URIs change.
#[derive(Default)]
pub struct Listen {
    uris: Mutex<BTreeSet<String>>,
    running: Mutex<Option<CancellationToken>>,
}

impl Listen {
    pub(super) fn stop(&self) {
        if let Some(running) = lock(&self.running).take() {
            running.cancel();
        }
    }
}

/// The stream ends with its client.
impl Drop for Listen {
    fn drop(&mut self) {
        self.stop();
    }
}

impl HttpRpc {
    /// `resources/subscribe` (or unsubscribe) of `uri` in 2026-07-28: the URI is added to (or removed from) those
    /// the listen stream names, and the stream opened again with them.
    pub(super) fn listen_to(&self, uri: &str, subscribed: bool) -> Result<Value, HttpRpcError> {
        {
            let mut uris = lock(&self.listen.uris);
            if subscribed && uris.len() >= MAX_LISTENED && !uris.contains(uri) {
                return Err(HttpRpcError::Server {
                    code: -32602,
                    message: format!("the gateway listens to at most {MAX_LISTENED} resources of one server"),
                });
            }
            let changed = if subscribed { uris.insert(uri.to_string()) } else { uris.remove(uri) };
            if !changed {
                return Ok(json!({}));
            }
        }
        self.relisten();
        Ok(json!({}))
    }

    /// Opens the listen stream (again), ending the one open.
    pub(super) fn relisten(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let stop = CancellationToken::new();
        if let Some(old) = lock(&self.listen.running).replace(stop.clone()) {
            old.cancel();
        }
        let uris: Vec<String> = lock(&self.listen.uris).iter().cloned().collect();
        let notifications = json!({"toolsListChanged": true, "promptsListChanged": true,
                                   "resourcesListChanged": true, "resourceSubscriptions": uris});
        let params = with_meta(json!({"notifications": notifications}), self.declares);
        let body = bytes::Bytes::from(
            json!({"jsonrpc": "2.0", "id": "mcpgw-listen", "method": "subscriptions/listen", "params": params})
                .to_string(),
        );
        let (endpoint, target, events) = (Arc::clone(&self.endpoint), self.target.clone(), Arc::clone(&self.events));
        let limit = self.max_message_bytes;
        runtime.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = listen(&endpoint, &target, body, limit, &events) => {}
            }
        });
    }
}

/// Keeps a listen stream open, handing what it tells to `events`; returns when the server answers that it keeps none
/// (a JSON answer: it does not offer `subscriptions/listen`).
async fn listen(
    endpoint: &Endpoint,
    target: &Target,
    body: bytes::Bytes,
    limit: usize,
    events: &Mutex<Option<ServerEvents>>,
) {
    let mut pause = Duration::from_secs(1);
    loop {
        let sent = endpoint
            .send(|| {
                target
                    .request(Method::POST)
                    .header(header::ACCEPT, "application/json, text/event-stream")
                    .header(header::CONTENT_TYPE, "application/json")
                    .header("mcp-protocol-version", MODERN)
                    .header("mcp-method", "subscriptions/listen")
                    .body(Full::new(body.clone()))
            })
            .await;
        if let Ok(mut response) = sent
            && response.status().is_success()
        {
            let stream = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
            if !stream.is_some_and(|kind| kind.starts_with("text/event-stream")) {
                tracing::debug!(url = %crate::upstream::remote::shown_uri(&target.uri), "the server keeps no listen stream");
                return;
            }
            let mut reader = EventReader::new(limit);
            while let Ok(Some(event)) = reader.next(&mut response).await {
                let Some(message) = event.data.and_then(|data| serde_json::from_str::<Value>(&data).ok()) else {
                    continue;
                };
                let method = message.get("method").and_then(Value::as_str).unwrap_or_default();
                if method == "notifications/subscriptions/acknowledged" {
                    pause = Duration::from_secs(1);
                }
                let params = message.get("params").unwrap_or(&Value::Null);
                if let Some(event) = server_event(method, params) {
                    let listener = lock(events).clone();
                    if let Some(listener) = listener {
                        listener(event);
                    }
                }
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}
