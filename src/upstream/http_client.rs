//! The gateway's MCP client toward a remote server over streamable HTTP (contract section 9): the remote counterpart
//! of [`super::rpc`], for the pool to use in place of a process (issue 18; not wired into the pool yet).
//!
//! - `initialize` opens the gateway's own MCP session with the server (its `Mcp-Session-Id` goes on every later
//!   request, with `MCP-Protocol-Version`), then `notifications/initialized`.
//! - A request is one POST of one JSON-RPC message, accepting JSON and SSE. A JSON answer is the response; an SSE
//!   answer carries the server's notifications and requests for the call first, then the response: notifications go
//!   to the call's relay (or, for list changes and resource updates, to the listener), requests are answered with the
//!   relay's answer (or "method not found" without one) by a POST of their own.
//! - A 404 on a request that named a session means the server forgot it (so does a 400 that names the session, as the
//!   TypeScript SDK's servers answer for an unknown one): the session is opened again and the request
//!   sent once more. Nothing else is retried.
//! - What is read is bounded: a message over `max_message_bytes` fails the request.
//! - The configured `headers` and the OAuth token go on every request; nothing of the gateway's client (its key) ever
//!   does.
//! - A server that speaks 2026-07-28 (its `server/discover` says so) is spoken to in that revision instead: no session,
//!   the revision's `_meta` and standard headers on every request, questions answered in rounds ([`modern`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::{Method, StatusCode, header};
use http_body_util::Full;
use rmcp::model::ServerPeerInfo;
use serde_json::{Value, json};
use tokio::sync::mpsc;

mod listen;
mod modern;

use super::lock;
use super::relay::{self, FromServer, ServerEvents, server_event};
use super::remote::{Endpoint, Target};
use super::sse::EventReader;
use crate::outbound::pooled::{self, Answer};
pub use modern::Revision;
use modern::{MODERN, ToolHeaders};

/// The protocol revision asked for in `initialize`.
const PROTOCOL_VERSION: &str = "2025-11-25";
const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

/// Why a remote request got no result.
#[derive(Debug, Clone, PartialEq)]
pub enum HttpRpcError {
    /// The server could not be reached, or the exchange broke off.
    Transport(String),
    /// The server answered with an HTTP error status.
    Status(u16, String),
    /// The server answered with a JSON-RPC error.
    Server { code: i64, message: String },
    /// The answer was not MCP, or over the message limit.
    Protocol(String),
    /// No OAuth access token could be obtained for the server.
    Credential(String),
}

impl std::fmt::Display for HttpRpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpRpcError::Transport(why) => write!(f, "the remote server could not be reached: {why}"),
            HttpRpcError::Status(status, body) => write!(f, "the remote server answered HTTP {status}: {body}"),
            HttpRpcError::Server { code, message } => write!(f, "JSON-RPC error {code}: {message}"),
            HttpRpcError::Protocol(why) => write!(f, "the remote server's answer is not MCP: {why}"),
            HttpRpcError::Credential(why) => write!(f, "no OAuth access token for the remote server: {why}"),
        }
    }
}

/// One MCP session of the gateway's with a remote server.
pub struct HttpRpc {
    endpoint: Arc<Endpoint>,
    url: reqwest::Url,
    /// Where requests go (`url` as hyper takes it, worked out once).
    target: Target,
    max_message_bytes: usize,
    /// The session id and protocol revision of the open session.
    session: Mutex<Option<(String, String)>>,
    /// What the server said about itself.
    info: Mutex<Option<Arc<ServerPeerInfo>>>,
    next_id: AtomicU64,
    events: Arc<Mutex<Option<ServerEvents>>>,
    /// Whether the server was told a client's roots in this session.
    roots: relay::RootsSeen,
    /// The client capabilities declared in `initialize` (or, in 2026-07-28, in every request's `_meta`).
    declares: super::Declared,
    /// Whether the server is spoken to in 2026-07-28 (it said so in `server/discover`).
    modern: AtomicBool,
    /// The `x-mcp-header` parameters of its tools (2026-07-28).
    tool_headers: ToolHeaders,
    /// The revision asked for (`protocol_version`).
    revision: Revision,
    /// The stream the server's list changes and resource updates come on (2026-07-28).
    listen: listen::Listen,
}

impl HttpRpc {
    /// A client of the MCP endpoint `url`, reading messages of at most `max_message_bytes`.
    pub fn new(endpoint: Endpoint, url: reqwest::Url, max_message_bytes: usize) -> Result<HttpRpc, HttpRpcError> {
        let target = Target::new(&url).map_err(HttpRpcError::Protocol)?;
        Ok(HttpRpc {
            endpoint: Arc::new(endpoint),
            url,
            target,
            max_message_bytes,
            session: Mutex::new(None),
            info: Mutex::new(None),
            next_id: AtomicU64::new(1),
            events: Arc::default(),
            roots: relay::RootsSeen::default(),
            declares: super::Declared::ALL,
            modern: AtomicBool::new(false),
            tool_headers: ToolHeaders::default(),
            revision: Revision::Auto,
            listen: listen::Listen::default(),
        })
    }

    /// This client, declaring `declares` to the server (see [`super::Declared`]).
    pub fn declaring(self, declares: super::Declared) -> HttpRpc {
        HttpRpc { declares, ..self }
    }

    /// This client, speaking `revision` to the server.
    pub fn speaking(self, revision: Revision) -> HttpRpc {
        HttpRpc { revision, ..self }
    }

    /// Whether the server was ever told a client's roots in this session (see [`relay::RootsSeen`]).
    pub fn told_roots(&self) -> bool {
        self.roots.seen()
    }

    /// Tells `listener` what the server says that belongs to no call.
    pub fn on_events(&self, listener: ServerEvents) {
        *lock(&self.events) = Some(listener);
    }

    /// What the server said about itself in `initialize`, once a session is open.
    pub fn server_info(&self) -> Option<Arc<ServerPeerInfo>> {
        lock(&self.info).clone()
    }

    /// Whether the server is spoken to in 2026-07-28.
    pub fn is_modern(&self) -> bool {
        self.modern.load(Ordering::Acquire)
    }

    /// Learns what the server is and how to speak to it (see [`Revision`]): `server/discover` for a server spoken to in
    /// 2026-07-28; else the gateway's session with it is opened, `initialize` then `notifications/initialized`.
    pub async fn initialize(&self) -> Result<Arc<ServerPeerInfo>, HttpRpcError> {
        *lock(&self.session) = None;
        self.modern.store(false, Ordering::Release);
        if let Some(info) = self.discover().await? {
            return Ok(info);
        }
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": self.declares.capabilities(),
            "clientInfo": {"name": "mcpgw", "version": crate::VERSION},
        });
        let (result, session) = self.exchange("initialize", &params, None, None).await?;
        let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or(PROTOCOL_VERSION).to_string();
        let info = serde_json::from_value::<ServerPeerInfo>(result)
            .map_err(|e| HttpRpcError::Protocol(format!("its initialize result is not valid: {e}")))?;
        let info = Arc::new(info);
        *lock(&self.session) = session.map(|id| (id, version));
        *lock(&self.info) = Some(Arc::clone(&info));
        self.notify("notifications/initialized", None).await?;
        Ok(info)
    }

    /// One request, its server messages passed to `relay`; a forgotten session is opened again and the request sent
    /// once more.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        relay: Option<&mpsc::Sender<FromServer>>,
    ) -> Result<Value, HttpRpcError> {
        if self.is_modern() {
            return self.modern_request(method, params, relay).await;
        }
        let had_session = lock(&self.session).is_some();
        match self.exchange(method, &params, relay, None).await {
            Err(HttpRpcError::Status(status, body)) if had_session && session_forgotten(status, &body) => {
                tracing::info!(url = %super::remote::shown(&self.url), "the remote server forgot the gateway's session; opening a new one");
                self.initialize().await?;
                self.exchange(method, &params, relay, None).await.map(|(result, _)| result)
            }
            other => other.map(|(result, _)| result),
        }
    }

    /// Sends a notification (none in 2026-07-28: the revision has none from client to server; a request is cancelled
    /// by closing its stream).
    pub async fn notify(&self, method: &str, params: Option<Value>) -> Result<(), HttpRpcError> {
        if self.is_modern() {
            return Ok(());
        }
        let mut message = json!({"jsonrpc": "2.0", "method": method});
        if let Some(params) = params {
            message["params"] = params;
        }
        let response = self.post(&message, None).await?;
        let status = response.status();
        if status.is_success() { Ok(()) } else { Err(HttpRpcError::Status(status.as_u16(), String::new())) }
    }

    /// Ends the session (`DELETE`), if one is open, or the listen stream (2026-07-28).
    pub async fn close(&self) {
        self.listen.stop();
        let Some((id, _)) = lock(&self.session).take() else { return };
        let _ = self
            .endpoint
            .send_as_is(|| self.target.request(Method::DELETE).header(SESSION_HEADER, &id).body(Full::default()))
            .await;
    }

    /// POSTs `message`; with `standard` headers (a 2026-07-28 request, or the `server/discover` probe) it names that
    /// revision and no session.
    async fn post(&self, message: &Value, standard: Option<&[(String, String)]>) -> Result<Answer, HttpRpcError> {
        self.post_bytes(bytes::Bytes::from(message.to_string()), standard).await
    }

    /// POSTs the JSON-RPC message `body` (see [`HttpRpc::post`]); shared, not copied, when a 401 makes it go again.
    async fn post_bytes(
        &self,
        body: bytes::Bytes,
        standard: Option<&[(String, String)]>,
    ) -> Result<Answer, HttpRpcError> {
        let session = lock(&self.session).clone();
        self.endpoint
            .send(|| {
                let mut request = self
                    .target
                    .request(Method::POST)
                    .header(header::ACCEPT, "application/json, text/event-stream")
                    .header(header::CONTENT_TYPE, "application/json");
                if let Some(standard) = standard {
                    request = request.header(VERSION_HEADER, MODERN);
                    for (name, value) in standard {
                        request = request.header(name.as_str(), value.as_str());
                    }
                } else if let Some((id, version)) = &session {
                    request = request.header(SESSION_HEADER, id).header(VERSION_HEADER, version);
                }
                request.body(Full::new(body.clone()))
            })
            .await
    }

    /// One request and its answer, with the session id the answer names; `standard` headers for 2026-07-28.
    async fn exchange(
        &self,
        method: &str,
        params: &Value,
        relay: Option<&mpsc::Sender<FromServer>>,
        standard: Option<&[(String, String)]>,
    ) -> Result<(Value, Option<String>), HttpRpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        // Written from the caller's params as they are: no copy of them for the message.
        let message = serde_json::to_vec(&RequestMessage { jsonrpc: "2.0", id, method, params })
            .map_err(|e| HttpRpcError::Protocol(format!("the request cannot be written: {e}")))?;
        let mut response = self.post_bytes(bytes::Bytes::from(message), standard).await?;
        let status = response.status();
        let session = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
        if !status.is_success() {
            let body = crate::outbound::read_body(&mut response, 1024).await.unwrap_or_default();
            let text = String::from_utf8_lossy(&body).chars().take(200).collect();
            return Err(HttpRpcError::Status(status.as_u16(), text));
        }
        if status == StatusCode::ACCEPTED {
            return Err(HttpRpcError::Protocol("a request was answered 202 without a response".into()));
        }
        let sse = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let result = if sse {
            let result = self.read_stream(&mut response, id, relay).await?;
            finish_in_background(response);
            result
        } else {
            let body = crate::outbound::read_body(&mut response, self.max_message_bytes).await.map_err(too_large)?;
            let message: Value =
                serde_json::from_slice(&body).map_err(|e| HttpRpcError::Protocol(format!("not JSON: {e}")))?;
            response_of(message, id)?.ok_or_else(|| HttpRpcError::Protocol("no response in the answer".into()))?
        };
        Ok((result, session))
    }

    /// Reads an SSE answer until the response to request `id`.
    async fn read_stream(
        &self,
        response: &mut Answer,
        id: u64,
        relay: Option<&mpsc::Sender<FromServer>>,
    ) -> Result<Value, HttpRpcError> {
        let mut events = EventReader::new(self.max_message_bytes);
        while let Some(event) = events.next(response).await? {
            let Some(message) = event.data.and_then(|data| serde_json::from_str::<Value>(&data).ok()) else { continue };
            if let Some(result) = self.handle(message, id, relay).await? {
                return Ok(result);
            }
        }
        Err(HttpRpcError::Transport("the stream ended before the response".into()))
    }

    /// One message of an SSE answer: the response to `id` (returned), a notification, or a request of the server's.
    async fn handle(
        &self,
        mut message: Value,
        id: u64,
        relay: Option<&mpsc::Sender<FromServer>>,
    ) -> Result<Option<Value>, HttpRpcError> {
        let method = message.get("method").and_then(Value::as_str).map(str::to_string);
        let params = message.get_mut("params").map(Value::take).unwrap_or(Value::Null);
        match (method, message.get("id").cloned()) {
            (None, Some(_)) => response_of(message, id),
            (Some(method), None) => {
                if let Some(event) = server_event(&method, &params) {
                    let listener = lock(&self.events).clone();
                    if let Some(listener) = listener {
                        listener(event);
                    }
                } else if let Some(relay) = relay {
                    let _ = relay.try_send(FromServer::Notification { method, params });
                }
                Ok(None)
            }
            (Some(method), Some(request_id)) => {
                let answer = relay::answer(relay.cloned(), method.clone(), params).await;
                self.roots.record(&method, &answer);
                let reply = relay::reply(request_id, answer);
                // A reply the server does not take is its loss; the call goes on.
                let _ = self.post(&reply, None).await;
                Ok(None)
            }
            (None, None) => Ok(None),
        }
    }
}

/// How long the rest of an SSE answer is read after its response, so that its connection goes back to the pool.
const FINISH_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads what is left of an SSE answer after its response (the stream's end, in practice), in a task of its own: an
/// answer dropped unfinished closes its connection, and the next request would pay a new one. A server that keeps the
/// stream open longer than [`FINISH_PATIENCE`] loses the connection.
fn finish_in_background(mut response: Answer) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(FINISH_PATIENCE, async {
            while let Ok(Some(_)) = pooled::chunk(&mut response).await {}
        })
        .await;
    });
}

fn too_large(error: crate::outbound::BodyReadError<hyper::Error>) -> HttpRpcError {
    match error {
        crate::outbound::BodyReadError::TooLarge(limit) => {
            HttpRpcError::Protocol(format!("a message over the limit of {limit} bytes"))
        }
        crate::outbound::BodyReadError::Transport(e) => HttpRpcError::Transport(pooled::describe(&e)),
    }
}

/// Whether an HTTP error answered to a request that named a session says the server no longer knows it: 404 (the
/// specification's answer), or a 400 that names the session. Either way the request was not carried out.
fn session_forgotten(status: u16, body: &str) -> bool {
    status == 404 || (status == 400 && body.to_ascii_lowercase().contains("session"))
}

/// A JSON-RPC request as the gateway writes it, borrowing its params.
#[derive(serde::Serialize)]
struct RequestMessage<'a> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    params: &'a Value,
}

/// The result of response `message` to request `id`; `None` when it answers another request.
fn response_of(mut message: Value, id: u64) -> Result<Option<Value>, HttpRpcError> {
    if message.get("id").and_then(Value::as_u64) != Some(id) {
        return Ok(None);
    }
    if let Some(error) = message.get("error") {
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        let text = error.get("message").and_then(Value::as_str).unwrap_or_default().to_string();
        return Err(HttpRpcError::Server { code, message: text });
    }
    match message.get_mut("result") {
        Some(result) => Ok(Some(result.take())),
        None => Err(HttpRpcError::Protocol("a response without a result".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_session_is_a_404_or_a_400_that_names_it() {
        assert!(session_forgotten(404, ""));
        assert!(session_forgotten(400, "Bad Request: No valid session ID provided"));
        assert!(!session_forgotten(400, "Parse error"));
        assert!(!session_forgotten(500, "session"));
    }

    #[test]
    fn responses_are_matched_by_id() {
        assert_eq!(response_of(json!({"jsonrpc": "2.0", "id": 3, "result": {"x": 1}}), 3), Ok(Some(json!({"x": 1}))));
        assert_eq!(response_of(json!({"jsonrpc": "2.0", "id": 4, "result": {}}), 3), Ok(None));
        let error = json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "bad"}});
        assert_eq!(response_of(error, 3), Err(HttpRpcError::Server { code: -32602, message: "bad".into() }));
    }
}
