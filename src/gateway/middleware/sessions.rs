//! MCP sessions at the front door: each is bound to the key that opened it, ends when idle, and their number is
//! bounded.
//!
//! For every request that passed admission (so its [`Identity`] is known) and the JSON-RPC guard (so a POST's message
//! is parsed):
//! - an `Mcp-Session-Id` must belong to the caller's key and must not have been idle for
//!   `limits.session_idle_timeout_seconds`; an unknown, foreign or expired one gets 404 `SESSION_NOT_FOUND` (while
//!   the gateway drains, the drain decides instead: see [`super::drain::refusal`]);
//! - an `initialize` outside a session that would open more than `limits.max_sessions` sessions gets 503
//!   `TOO_MANY_SESSIONS` with `Retry-After`, and one that would give its key more than
//!   `limits.max_sessions_per_key` gets 429 `SESSION_LIMIT` (one key cannot take every place); otherwise its place is held until the answer names the new session,
//!   which is then bound to the caller's key;
//! - an `initialize` whose params are larger than 64 KiB as JSON gets HTTP 400 with a JSON-RPC invalid params error
//!   (-32602) and opens no session (what a session keeps of its client is bounded, contract 14);
//! - a session that the protocol layer closed (a successful `DELETE`) or no longer knows (404) is forgotten;
//! - a 2026-07-28 `subscriptions/listen` (no session id) counts as a session under both limits, refused as an
//!   `initialize` would be, for as long as its answer's stream is open;
//! - a request of a session counts as in flight in it until its answer is sent, and wakes it when it is dormant
//!   (`limits.session_dormant_seconds`: rmcp is given the `initialize` the sealed id keeps to replay; a dormant
//!   session's `DELETE` is answered here, rmcp having nothing of it);
//! - a session's `GET` stream is answered here, not by the protocol layer ([`super::session_stream`]): from the
//!   session's own outbox, so that the stream stays open and is told what changes while the session is dormant; one
//!   stream per session (a second gets 409 `STREAM_ALREADY_OPEN` while the first is open), ended when its session ends
//!   (closed, or idle for `session_idle_timeout_seconds`: the stream itself is not a use of the session).
//!
//! The registry itself is [`crate::gateway::sessions::SessionRegistry`]; the sweeper that ends idle sessions runs in
//! `gateway/http.rs`.

use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::drain;
use super::jsonrpc::ParsedMessage;
use super::session_stream;
use super::step::{Next, Step, forward};
use crate::auth::Identity;
use crate::config::exposure::ToolExposure;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::gateway::exposure::EXPOSURE_HEADER;
use crate::gateway::notify::Scope;
use crate::gateway::session_id::{self, SessionClaims};
use crate::gateway::sessions::{Entered, Full, SessionCheck};

pub const SESSION_HEADER: axum::http::HeaderName = axum::http::HeaderName::from_static("mcp-session-id");

fn message_id(req: &Request) -> Option<&Value> {
    req.extensions().get::<ParsedMessage>().and_then(|parsed| parsed.0.get("id"))
}

/// The step: session ids bound to keys, `max_sessions`.
#[derive(Clone)]
pub struct Sessions(pub Arc<GatewayContext>);

impl Step for Sessions {
    fn run<S: Next>(&self, req: Request, next: S) -> impl Future<Output = Response> + Send + 'static {
        track_sessions(Arc::clone(&self.0), req, next)
    }
}

/// The sealed session id a request names, resolved (see [`session_id`]).
enum Named {
    /// No session id.
    None,
    /// A session this replica has: its local id.
    Here(String),
    /// A session of another replica (or one this replica forgot on a restart), taken over now.
    Taken(SessionClaims),
}

async fn track_sessions(ctx: Arc<GatewayContext>, mut req: Request, next: impl Next) -> Response {
    let Some(identity) = req.extensions().get::<Arc<Identity>>().cloned() else { return forward(next, req).await };
    let limits = &identity.snapshot.settings.limits;
    let external = req.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let not_found = || {
        // While draining, a request outside any valid session is the drain's to answer (503 once idle).
        let not_found = GatewayError::new(ErrorCode::SessionNotFound, "session not found");
        drain::refusal(&ctx, drain::outside_session(&ctx), None).unwrap_or_else(|| not_found.response(None))
    };
    let named = match &external {
        None => Named::None,
        Some(external) => match ctx.sessions.local_of(external) {
            Some(local) => Named::Here(local),
            None => match session_id::open(&session_id::sealing_key(&identity.snapshot), external) {
                Some(claims)
                    if session_id::belongs_to(&claims, &identity.key_digest)
                        && !ctx.sessions.has_ended(&claims.local) =>
                {
                    Named::Taken(claims)
                }
                _ => return not_found(),
            },
        },
    };
    let session = match &named {
        Named::None => None,
        Named::Here(local) => Some(local.clone()),
        Named::Taken(claims) => Some(claims.local.clone()),
    };
    if let Named::Here(local) = &named
        && ctx.sessions.check(local, &identity.key_digest, limits.session_idle_timeout) == SessionCheck::Unknown
    {
        return not_found();
    }
    let message = req.extensions().get::<ParsedMessage>().map(|parsed| &parsed.0);
    let method = message.and_then(|m| m.get("method")).and_then(Value::as_str);
    // A 2026-07-28 subscription is a stateless client's session: it holds a place for as long as its stream is open.
    let subscribes = session.is_none() && method == Some("subscriptions/listen");
    let opens_session = session.is_none() && (method == Some("initialize") || subscribes);
    if session.is_none()
        && method == Some("initialize")
        && let Some(refused) = oversized_initialize(&ctx, message, message_id(&req))
    {
        return refused;
    }
    // What the session's listings depend on: told to it when a reload changes them (contract 15; the handler keeps it
    // up to date).
    let requested = req.headers().get(EXPOSURE_HEADER).and_then(|v| v.to_str().ok()).and_then(ToolExposure::parse);
    let scope = Scope::of(&identity, requested);
    let takes_over = matches!(named, Named::Taken(_));
    if takes_over {
        // Taking a session over while draining is opening one: refused, so that the client goes elsewhere.
        let standing = drain::Standing { in_session: false, opens_session: true, others_in_flight: false };
        if let Some(refused) = drain::refusal(&ctx, standing, message_id(&req)) {
            return refused;
        }
    }
    // The place under `max_sessions` is held until the answer names the new session (or, for a session taken over,
    // until it is recorded below).
    let reserve = || ctx.sessions.reserve(limits.max_sessions, identity.key_digest, limits.max_sessions_per_key);
    let place = match (opens_session || takes_over).then(reserve) {
        None => None,
        Some(Ok(place)) => Some(place),
        Some(Err(Full::Gateway)) => {
            ctx.store.metrics().limit_hit("sessions");
            let max = limits.max_sessions;
            let message = format!("the gateway has {max} MCP sessions open, its limit; close one or try again later");
            let full = GatewayError::new(ErrorCode::TooManySessions, message).retry_after(5);
            return full.response(message_id(&req));
        }
        Some(Err(Full::Key)) => {
            ctx.store.metrics().limit_hit("sessions_per_key");
            let max = limits.max_sessions_per_key;
            let message = format!(
                "this API key has {max} MCP sessions open, its limit (limits.max_sessions_per_key); close one first"
            );
            return GatewayError::new(ErrorCode::SessionLimit, message).retry_after(5).response(message_id(&req));
        }
    };
    if let (Named::Taken(claims), Some(external)) = (&named, &external) {
        let capabilities = claims.params.get("capabilities").and_then(|c| serde_json::from_value(c.clone()).ok());
        ctx.sessions.restore.put(&claims.local, claims.params.clone());
        ctx.sessions.open(&claims.local, Some(external), identity.key_digest, capabilities, Some(scope.clone()));
        tracing::info!("MCP session taken over from another replica");
    }
    // The session's `GET` stream needs nothing of the protocol layer: answered here, it neither wakes a dormant
    // session nor keeps it awake.
    if let Some(local) = &session
        && let Some(last_seen) = session_stream::wanted(&req)
    {
        return session_stream::answer(&ctx, local, last_seen);
    }
    // The request counts as in flight in its session until its answer is sent (a busy session does not go dormant);
    // a dormant session is woken (see crate::gateway::sessions).
    let busy = match (&session, &external) {
        (Some(local), Some(external)) => match ctx.sessions.enter(local).await {
            None => return not_found(),
            Some(Entered::Live(busy)) => Some(busy),
            Some(Entered::Woken(busy)) => {
                if req.method() == Method::DELETE {
                    // The protocol layer has nothing of a dormant session to end.
                    ctx.sessions.close(local);
                    return Response::new(Body::empty());
                }
                // rmcp replays the `initialize` the sealed id keeps; an id that no longer opens (the configuration's
                // `session_secret` changed) ends the session, as it would have on another replica.
                match session_id::open(&session_id::sealing_key(&identity.snapshot), external) {
                    Some(claims) => ctx.sessions.restore.put(local, claims.params),
                    None => {
                        ctx.sessions.close(local);
                        return not_found();
                    }
                }
                Some(busy)
            }
        },
        _ => None,
    };
    // Inside, the session is known by its local id (rmcp, the fast route, the upstream pool).
    if let Some(local) = &session
        && let Ok(value) = HeaderValue::from_str(local)
    {
        req.headers_mut().insert(SESSION_HEADER, value);
    }
    let message = req.extensions().get::<ParsedMessage>().map(|parsed| &parsed.0);
    // What a new session's client declares: what may be asked of it during a relayed call (transparent mode).
    let params = opens_session.then(|| message.and_then(|m| m.get("params"))).flatten().cloned();
    let capabilities = params
        .as_ref()
        .and_then(|p| p.get("capabilities"))
        .and_then(|declared| serde_json::from_value(declared.clone()).ok());
    let closing = req.method() == Method::DELETE;
    let mut response = forward(next, req).await;
    if let Some(busy) = busy {
        response = response.map(|body| crate::held_body::holding(body, busy));
    }
    // The client knows the session by its sealed id only.
    if let (Some(local), Some(external)) = (&session, &external)
        && response.headers().get(SESSION_HEADER).is_some_and(|v| v.as_bytes() == local.as_bytes())
        && let Ok(value) = HeaderValue::from_str(external)
    {
        response.headers_mut().insert(SESSION_HEADER, value);
    }
    if subscribes && let Some(place) = place {
        // Open-ended: bounded by the session limits, not by the key's requests in flight.
        response.extensions_mut().insert(super::budgets::OpenEnded);
        return response.map(|body| crate::held_body::holding(body, place));
    }
    if opens_session
        && let Some(_place) = place
        && let Some(local) = response.headers().get(SESSION_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string)
    {
        let claims = SessionClaims {
            local: local.clone(),
            key: identity.key_digest,
            params: session_id::kept_params(params.as_ref().unwrap_or(&Value::Null)),
        };
        let Some(sealed) = session_id::seal(&session_id::sealing_key(&identity.snapshot), &claims) else {
            // Only when the system's random generator fails: no session can be opened now.
            let message = "cannot open an MCP session now (the system's random generator failed); try again later";
            return GatewayError::new(ErrorCode::TooManySessions, message).retry_after(5).response(None);
        };
        ctx.sessions.open(&local, Some(&sealed), identity.key_digest, capabilities, Some(scope));
        if let Ok(value) = HeaderValue::from_str(&sealed) {
            response.headers_mut().insert(SESSION_HEADER, value);
        }
    }
    if let Some(id) = &session {
        let gone = response.status() == StatusCode::NOT_FOUND;
        if gone || (closing && response.status().is_success()) {
            ctx.sessions.close(id);
        }
        // rmcp answers a session's end 202; the spec's clients (the Python SDK warns "Session termination failed:
        // 202") expect 200 (contract 15).
        if closing && response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::OK;
        }
    }
    response
}

/// The most of an `initialize`'s params a session keeps (its client's capabilities and info, in the gateway's
/// registry, in rmcp's session and in the sealed session id), contract 14.
pub const MAX_INITIALIZE_PARAMS_BYTES: usize = 64 * 1024;

/// The refusal of an `initialize` whose params are larger than [`MAX_INITIALIZE_PARAMS_BYTES`] as JSON: HTTP 400 with
/// a JSON-RPC invalid params error (-32602); no session is created. `None` when they fit.
fn oversized_initialize(ctx: &GatewayContext, message: Option<&Value>, id: Option<&Value>) -> Option<Response> {
    let params = message?.get("params")?;
    if json_fits(params, MAX_INITIALIZE_PARAMS_BYTES) {
        return None;
    }
    ctx.store.metrics().limit_hit("initialize_params");
    let message = format!("Invalid params: initialize params larger than {MAX_INITIALIZE_PARAMS_BYTES} bytes");
    let data = GatewayError::new(ErrorCode::InvalidRequest, message.clone()).answer();
    Some(crate::error::jsonrpc_error(StatusCode::BAD_REQUEST, -32602, &message, data, id))
}

/// Whether `value` written as JSON takes at most `limit` bytes; the writing stops as soon as it does not.
fn json_fits(value: &Value, limit: usize) -> bool {
    struct Count {
        left: usize,
    }
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.left = self.left.checked_sub(buf.len()).ok_or(std::io::ErrorKind::FileTooLarge)?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Count { left: limit }, value).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_fits_counts_the_written_size() {
        let value = json!({"capabilities": {"x": "y".repeat(100)}});
        let size = serde_json::to_vec(&value).map(|v| v.len()).unwrap_or(0);
        assert!(json_fits(&value, size));
        assert!(!json_fits(&value, size - 1));
    }
}
