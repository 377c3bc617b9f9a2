//! The direct route for the one message that carries the traffic: a plain `tools/call` of a `gw_*` tool or, in the
//! transparent view (contract 8), of an exposed upstream tool within a session.
//!
//! rmcp's streamable HTTP service is general: it deserialises every message into its protocol types, routes session
//! requests through a per-session worker task and answers them as an SSE stream, and starts a whole service for each
//! stateless request. For a `tools/call` that is most of the gateway's own cost per call. This layer sits between
//! the JSON-RPC guard (which has parsed the body once, see [`ParsedMessage`]) and rmcp, and answers such a call itself,
//! as one `application/json` body, through the same [`ToolInvocation`] the MCP handler runs, so both routes give the
//! same result.
//!
//! It takes only the plain, unambiguous case and leaves everything else to rmcp, which stays the authority on the
//! protocol's corner cases:
//! - a `tools/call` request (with an id) whose params carry no `task`, `inputResponses` or `requestState`, naming one of our
//!   tools with arguments that fit its schema (a refusal is rmcp's to phrase);
//! - `Accept` naming both `application/json` and `text/event-stream`, and `Content-Type: application/json`;
//! - in a session (`Mcp-Session-Id`, already checked against the caller's key by the auth layer): a protocol version
//!   header that is absent or a session revision, and no SEP-2243 `Mcp-Method`/`Mcp-Name`/`Mcp-Param-*` headers;
//! - stateless (no session id): `MCP-Protocol-Version: 2026-07-28`, `Mcp-Method: tools/call`, `Mcp-Name` equal to
//!   the tool's name, no `Mcp-Param-*` headers, and `_meta` carrying that protocol version and the client's
//!   capabilities; the result then carries `resultType: "complete"` as that revision requires.
//!
//! A transparent call is answered by [`stream`]: one JSON body while the upstream sends nothing else for the call, an
//! SSE stream (its progress, log messages and questions for the client, then the response) when it does; the client's
//! answers to those questions and its cancellation of the call are taken here too. It needs a session (whose
//! client's capabilities were recorded at `initialize`); outside one rmcp's route serves it.
//! A `gw_*` tool outside the caller's view, or a view asked for in a header that is not one, is left to rmcp's route,
//! which refuses it.
//!
//! Once the gateway has started to end its sessions (the end of a drain) every request goes to rmcp, which refuses it.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use futures_util::future::BoxFuture;
use rmcp::model::ProtocolVersion;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tower::{Layer, Service};

use super::GatewayContext;
use super::envelope;
use super::exposure::EXPOSURE_HEADER;
use super::middleware::jsonrpc::ParsedMessage;
use super::middleware::quota_status::RetryAfter;
use super::middleware::sessions::SESSION_HEADER;
use super::tools::ToolInvocation;
use super::transparent::stream::{self, SessionCall};
use crate::auth::Identity;
use crate::config::exposure::ToolExposure;
use crate::telemetry::metrics::GW_TOOLS;

/// The stateless protocol revision (rmcp's first without `initialize`).
const STATELESS_REVISION: &str = "2026-07-28";

/// Whether a session may name `version` in `MCP-Protocol-Version`: a revision rmcp knows that has `initialize`.
fn session_revision(version: &str) -> bool {
    ProtocolVersion::KNOWN_VERSIONS.iter().any(|known| known.as_str() == version && known.has_initialize())
}
const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// Adds [`FastToolCall`] in front of the protocol service.
#[derive(Clone)]
pub struct FastToolCallLayer {
    ctx: Arc<GatewayContext>,
    sessions: Arc<CancellationToken>,
}

impl FastToolCallLayer {
    /// `sessions` is the token whose cancellation ends the MCP sessions; after it the fast path stands aside.
    pub fn new(ctx: Arc<GatewayContext>, sessions: CancellationToken) -> FastToolCallLayer {
        FastToolCallLayer { ctx, sessions: Arc::new(sessions) }
    }
}

impl<S> Layer<S> for FastToolCallLayer {
    type Service = FastToolCall<S>;
    fn layer(&self, inner: S) -> FastToolCall<S> {
        FastToolCall { inner, ctx: Arc::clone(&self.ctx), sessions: Arc::clone(&self.sessions) }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct FastToolCall<S> {
    inner: S,
    ctx: Arc<GatewayContext>,
    /// Shared: the stack above clones this service for every request, and a token's clone takes a lock.
    sessions: Arc<CancellationToken>,
}

/// A call the fast path will answer.
struct Accepted {
    id: Value,
    call: Call,
    stateless: bool,
}

/// What a call asks for.
enum Call {
    /// A `gw_*` tool, its arguments checked.
    Gateway(ToolInvocation),
    /// Any other name: an exposed upstream tool in the transparent view (contract 8).
    Upstream { name: String, args: Map<String, Value>, progress_token: Option<Value> },
}

/// A header's single value, as text: `None` while absent, `Some(None)` when repeated or not text.
type Single<'a> = Option<Option<&'a str>>;

/// Takes `value` as a header's value, once.
fn take<'a>(single: &mut Single<'a>, value: &'a HeaderValue) {
    *single = match single {
        None => Some(value.to_str().ok()),
        Some(_) => Some(None),
    };
}

/// What the fast path reads from a request's headers, found in one pass over them (a lookup by name parses and
/// hashes the name each time: about 400 instructions, and these checks made some 15 of them a call).
#[derive(Default)]
struct Headers<'a> {
    /// `Accept` names `application/json`, and `text/event-stream`.
    accepts_json: bool,
    accepts_sse: bool,
    content_type: Single<'a>,
    session: bool,
    protocol: Single<'a>,
    method: Single<'a>,
    name: Single<'a>,
    /// A SEP-2243 `Mcp-Param-*` header.
    param: bool,
}

impl<'a> Headers<'a> {
    fn read(headers: &'a HeaderMap) -> Headers<'a> {
        let mut seen = Headers::default();
        for (name, value) in headers {
            if name == header::ACCEPT {
                for item in value.to_str().unwrap_or("").split(',') {
                    let essence = item.split(';').next().unwrap_or("").trim();
                    seen.accepts_json |= essence.eq_ignore_ascii_case("application/json");
                    seen.accepts_sse |= essence.eq_ignore_ascii_case("text/event-stream");
                }
                continue;
            }
            if name == header::CONTENT_TYPE {
                take(&mut seen.content_type, value);
                continue;
            }
            // The names below are custom: compared as their (lower-case) text.
            let Some(rest) = name.as_str().strip_prefix("mcp-") else { continue };
            match rest {
                "session-id" => seen.session = true,
                "protocol-version" => take(&mut seen.protocol, value),
                "method" => take(&mut seen.method, value),
                "name" => take(&mut seen.name, value),
                _ => seen.param |= rest.starts_with("param-"),
            }
        }
        seen
    }

    /// `Accept` naming both `application/json` and `text/event-stream`, and one `Content-Type: application/json`.
    fn media_types_ok(&self) -> bool {
        let content_json = self
            .content_type
            .flatten()
            .map(|v| v.split(';').next().unwrap_or("").trim())
            .is_some_and(|essence| essence.eq_ignore_ascii_case("application/json"));
        self.accepts_json && self.accepts_sse && content_json
    }

    /// See [`plain_in_session`].
    fn plain_in_session(&self) -> bool {
        let version_ok = self.protocol.is_none_or(|version| version.is_some_and(session_revision));
        self.media_types_ok()
            && self.session
            && version_ok
            && self.method.is_none()
            && self.name.is_none()
            && !self.param
    }
}

/// Whether the headers of a request in a session (`Mcp-Session-Id`) are those of a plain one: `Accept` naming both
/// `application/json` and `text/event-stream`, one `Content-Type: application/json`, a protocol version header absent
/// or a session revision, no SEP-2243 headers. Also the condition of a transparent `tools/list` answered beside rmcp
/// (`transparent/task_route.rs`).
pub(crate) fn plain_in_session(headers: &HeaderMap) -> bool {
    Headers::read(headers).plain_in_session()
}

/// Whether the headers fit a plain call in a session, or a plain stateless call of tool `name`.
fn headers_ok(headers: &HeaderMap, name: &str, meta: Option<&Value>) -> Option<bool> {
    let seen = Headers::read(headers);
    if !seen.media_types_ok() || seen.param {
        return None;
    }
    if seen.session {
        return seen.plain_in_session().then_some(false);
    }
    let stateless = seen.protocol == Some(Some(STATELESS_REVISION))
        && seen.method == Some(Some("tools/call"))
        && seen.name == Some(Some(name))
        && meta.and_then(|m| m.get(META_PROTOCOL_VERSION)).and_then(Value::as_str) == Some(STATELESS_REVISION)
        && meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES)).is_some_and(Value::is_object);
    stateless.then_some(true)
}

/// Takes the call out of a parsed message when the fast path may answer it.
fn accept(headers: &HeaderMap, message: Value) -> Option<Accepted> {
    let Value::Object(mut message) = message else { return None };
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let id = message.remove("id").filter(|id| id.is_string() || id.is_number())?;
    let Some(Value::Object(mut params)) = message.remove("params") else { return None };
    // Fields with a protocol meaning beyond a plain call are rmcp's; others are ignored, as rmcp ignores them (so a
    // client cannot steer a call to the heavier route by adding one: contract 13's memory bound).
    if params.keys().any(|k| matches!(k.as_str(), "task" | "inputResponses" | "requestState")) {
        return None;
    }
    let Some(Value::String(name)) = params.remove("name") else { return None };
    let stateless = headers_ok(headers, &name, params.get("_meta"))?;
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map,
        Some(_) => return None,
    };
    let call = if GW_TOOLS.contains(&name.as_str()) {
        Call::Gateway(ToolInvocation::parse(&name, arguments).ok()?)
    } else {
        let progress_token = params.get("_meta").and_then(|meta| meta.get("progressToken")).cloned();
        Call::Upstream { name, args: arguments, progress_token }
    };
    Some(Accepted { id, call, stateless })
}

/// The JSON-RPC answer to an accepted call, in the one envelope of [`super::envelope`].
fn answer(id: Value, answer: Value, stateless: bool) -> Response<Body> {
    let mut response = Response::new(envelope::answer_body(&id, answer, stateless));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// How an accepted call is answered.
enum Route {
    Gateway { id: Value, invocation: ToolInvocation, identity: Arc<Identity>, session: Option<String>, stateless: bool },
    Upstream(Box<SessionCall>),
}

impl<S> FastToolCall<S> {
    /// The route of an accepted call in the caller's view (contract 8), or `None` for rmcp's route: a `gw_*` tool the
    /// view does not offer, a view asked for in a header that is not one (the handler refuses both), and an upstream
    /// tool outside a session (the handler serves it).
    fn route(
        &self,
        call: Accepted,
        identity: Arc<Identity>,
        headers: &HeaderMap,
        session: Option<&str>,
    ) -> Option<Route> {
        let requested = match headers.get(EXPOSURE_HEADER) {
            None => None,
            Some(value) => Some(ToolExposure::parse(value.to_str().ok()?)?),
        };
        let view = identity.snapshot.tool_exposure(identity.mcp_config_id.as_deref()).chosen(requested);
        match call.call {
            Call::Gateway(invocation) if view.gateway_tools() => {
                let session = session.map(str::to_string);
                Some(Route::Gateway { id: call.id, invocation, identity, session, stateless: call.stateless })
            }
            Call::Upstream { name, args, progress_token } if view.upstream() && !call.stateless => {
                let session = session?.to_string();
                let capabilities = self.ctx.sessions.client_capabilities(&session)?;
                let id = call.id;
                let call = SessionCall { identity, session, id, name, args, progress_token, capabilities };
                Some(Route::Upstream(Box::new(call)))
            }
            _ => None,
        }
    }
}

impl<S> Service<Request<Body>> for FastToolCall<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let taken = (req.method() == Method::POST && !self.sessions.is_cancelled())
            .then(|| req.extensions_mut().remove::<ParsedMessage>())
            .flatten();
        let identity = req.extensions().get::<Arc<Identity>>().cloned();
        let session = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok());
        // A client's answer to a question of a relayed call, or its cancellation, is taken by the call.
        if let (Some(ParsedMessage(message)), Some(session)) = (&taken, session)
            && let Some(taken) = self.ctx.relays.take(session, message)
        {
            return Box::pin(async move { Ok(taken.accepted().await) });
        }
        let accepted = match (taken, identity) {
            (Some(ParsedMessage(message)), Some(identity)) => accept(req.headers(), message).map(|a| (a, identity)),
            _ => None,
        };
        let route = accepted.and_then(|(call, identity)| self.route(call, identity, req.headers(), session));
        let Some(route) = route else {
            let clone = self.inner.clone();
            let mut inner = std::mem::replace(&mut self.inner, clone);
            return Box::pin(async move { inner.call(req).await });
        };
        let ctx = Arc::clone(&self.ctx);
        // One boxed future per route: boxing a future copies the whole of it, and a future holding either route's work
        // would be as large as the larger (the transparent relay's) for every call.
        match route {
            Route::Gateway { id, invocation, identity, session, stateless } => {
                let slot = req.extensions().get::<RetryAfter>().cloned();
                Box::pin(async move {
                    let result = invocation.run(&ctx, &identity, session.as_deref()).await;
                    if let Some(slot) = slot {
                        slot.note(&result);
                    }
                    Ok(answer(id, result, stateless))
                })
            }
            Route::Upstream(call) => Box::pin(async move { Ok(stream::answer(ctx, *call).await) }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn answers_carry_the_same_result_as_the_rmcp_route() {
        for (answer_value, stateless) in [
            (json!({"status": "success", "results": [{"a": "é\n\"q\""}]}), false),
            (json!({"status": "error", "error": {"code": "X"}}), true),
        ] {
            let response = answer(json!(7), answer_value.clone(), stateless);
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
            let body: Value = serde_json::from_slice(&bytes).unwrap();
            let mut expected = serde_json::to_value(envelope::tool_result(answer_value)).unwrap();
            // rmcp strips `resultType` for session peers and the stateless revision requires it.
            if let Some(fields) = expected.as_object_mut() {
                fields.remove("resultType");
                if stateless {
                    fields.insert("resultType".into(), json!("complete"));
                }
            }
            assert_eq!(body, json!({"jsonrpc": "2.0", "id": 7, "result": expected}));
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        map.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn call(name: &str, meta: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": name, "arguments": {}, "_meta": meta}})
    }

    fn stateless_meta() -> Value {
        json!({META_PROTOCOL_VERSION: STATELESS_REVISION, META_CLIENT_CAPABILITIES: {}})
    }

    #[test]
    fn the_stateless_revision_is_rmcps_first_without_initialize() {
        assert_eq!(ProtocolVersion::NO_INITIALIZE.as_str(), STATELESS_REVISION);
        assert!(session_revision("2024-11-05") && session_revision("2025-11-25"));
        assert!(!session_revision(STATELESS_REVISION) && !session_revision("1999-01-01"));
    }

    #[test]
    fn takes_plain_session_calls() {
        let h = headers(&[("mcp-session-id", "s1"), ("mcp-protocol-version", "2025-11-25")]);
        let accepted = accept(&h, call("gw_get_cache_status", json!({}))).map(|a| a.stateless);
        assert_eq!(accepted, Some(false));
    }

    #[test]
    fn takes_complete_stateless_calls_only() {
        let full = [
            ("mcp-protocol-version", STATELESS_REVISION),
            ("mcp-method", "tools/call"),
            ("mcp-name", "gw_get_cache_status"),
        ];
        let ok = accept(&headers(&full), call("gw_get_cache_status", stateless_meta())).map(|a| a.stateless);
        assert_eq!(ok, Some(true));
        // Without the name header, with another name, without _meta: rmcp answers (and refuses).
        assert!(accept(&headers(&full[..2]), call("gw_get_cache_status", stateless_meta())).is_none());
        assert!(accept(&headers(&full), call("gw_clear_cache", stateless_meta())).is_none());
        assert!(accept(&headers(&full), call("gw_get_cache_status", json!({}))).is_none());
    }

    #[test]
    fn leaves_everything_unusual_to_rmcp() {
        let session = [("mcp-session-id", "s1")];
        let h = headers(&session);
        // Another name is an upstream tool to look up (the route decides by the caller's view).
        assert!(matches!(accept(&h, call("nope", json!({}))).map(|a| a.call), Some(Call::Upstream { .. })));
        let bad_args = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "gw_get_server_info", "arguments": {"server_name": 1}}});
        assert!(accept(&h, bad_args).is_none(), "arguments that do not fit");
        let task = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "gw_get_cache_status", "task": {}}});
        assert!(accept(&h, task).is_none(), "a task-augmented call");
        let extra = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "gw_get_cache_status", "padding": "x"}});
        assert!(accept(&h, extra).is_some(), "a field without meaning is ignored, as rmcp ignores it");
        let note = json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "gw_get_cache_status"}});
        assert!(accept(&h, note).is_none(), "no id");
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        assert!(accept(&h, list).is_none(), "another method");
        let old = headers(&[("mcp-session-id", "s1"), ("mcp-protocol-version", "1999-01-01")]);
        assert!(accept(&old, call("gw_get_cache_status", json!({}))).is_none(), "unknown revision");
        let mut json_only = headers(&session);
        json_only.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(accept(&json_only, call("gw_get_cache_status", json!({}))).is_none(), "406 is rmcp's");
        let param = headers(&[("mcp-session-id", "s1"), ("mcp-param-x", "1")]);
        assert!(accept(&param, call("gw_get_cache_status", json!({}))).is_none(), "SEP-2243 params");
        let named = headers(&[("mcp-session-id", "s1"), ("mcp-name", "gw_get_cache_status")]);
        assert!(accept(&named, call("gw_get_cache_status", json!({}))).is_none(), "SEP-2243 in a session");
    }

    #[test]
    fn a_header_the_checks_read_once_may_not_come_twice() {
        let plain = || call("gw_get_cache_status", json!({}));
        let twice = headers(&[
            ("mcp-session-id", "s1"),
            ("mcp-protocol-version", "2025-11-25"),
            ("mcp-protocol-version", "2025-11-25"),
        ]);
        assert!(accept(&twice, plain()).is_none(), "two protocol versions");
        let mut two_types = headers(&[("mcp-session-id", "s1")]);
        two_types.append(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert!(accept(&two_types, plain()).is_none(), "two content types");
        let mut binary = headers(&[("mcp-session-id", "s1")]);
        binary.insert("mcp-protocol-version", HeaderValue::from_bytes(b"2025-11-25\xff").unwrap());
        assert!(accept(&binary, plain()).is_none(), "a version that is not text");
        // Accept may come in several headers; case and parameters do not matter.
        let mut split = headers(&[("mcp-session-id", "s1")]);
        split.insert(header::ACCEPT, HeaderValue::from_static("Application/JSON;q=0.9"));
        split.append(header::ACCEPT, HeaderValue::from_static("text/event-stream"));
        assert_eq!(accept(&split, plain()).map(|a| a.stateless), Some(false));
        assert!(plain_in_session(&split) && !plain_in_session(&twice));
    }
}
