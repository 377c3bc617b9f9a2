//! The gateway's front door, as a tower layer in front of the MCP protocol service.
//!
//! For every HTTP request, in this order:
//! 1. `Host` must be in `gw_allowed_hosts` (`*` allows any) and `Origin`, when present, must be a loopback origin or in
//!    `gw_allowed_origins`; otherwise 403. These come first: they protect local gateways from DNS rebinding, whoever
//!    the caller claims to be. The lists come from the current snapshot, so a reload changes them.
//! 2. `Authorization: Bearer <gateway key>` (plus optional `X-GW-Project-Id` / `X-GW-User-Id`, also accepted as
//!    `project_id` / `user_id`) must resolve to an [`Identity`]; otherwise 401 with `WWW-Authenticate: Bearer` and a
//!    JSON-RPC error whose `data` is the `AUTH_FAILED` object.
//! 3. An `Mcp-Session-Id` must belong to that key and must not have been idle for
//!    `limits.session_idle_timeout_seconds`; an unknown, foreign or expired one gets 404.
//! 4. The identity goes into the request's extensions and the request goes on; a closed session is forgotten (a new
//!    one is bound to the key by the JSON-RPC guard, see [`super::jsonrpc`]).
//!
//! These checks hold during the drain too: the drain's decision ([`super::drain`]) comes after them, so that it knows
//! whether a request belongs to a session that exists; an unknown session id is the one case where this layer asks
//! the drain (503 `SHUTTING_DOWN` instead of 404 once nothing is in flight).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tower::{Layer, Service};

use super::drain;
use crate::config::Snapshot;
use crate::gateway::handler::auth_failed;
use crate::gateway::identity::{AuthFailure, Credentials};
use crate::gateway::sessions::SessionCheck;
use crate::gateway::{GatewayContext, Identity};
use crate::timeouts::TimeoutKind;

const SESSION_HEADER: &str = "mcp-session-id";

/// Adds [`GatewayAuth`] in front of a service.
#[derive(Clone)]
pub struct GatewayAuthLayer {
    ctx: Arc<GatewayContext>,
}

impl GatewayAuthLayer {
    pub fn new(ctx: Arc<GatewayContext>) -> GatewayAuthLayer {
        GatewayAuthLayer { ctx }
    }
}

impl<S> Layer<S> for GatewayAuthLayer {
    type Service = GatewayAuth<S>;
    fn layer(&self, inner: S) -> GatewayAuth<S> {
        GatewayAuth { inner, ctx: Arc::clone(&self.ctx) }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub struct GatewayAuth<S> {
    inner: S,
    ctx: Arc<GatewayContext>,
}

/// A JSON-RPC error answer (`id: null`: the request was not read) with an HTTP status.
pub fn jsonrpc_error(status: StatusCode, code: i64, message: &str, data: Value) -> Response<Body> {
    let mut error = json!({"code": code, "message": message});
    if !data.is_null() {
        error["data"] = data;
    }
    let body = json!({"jsonrpc": "2.0", "id": null, "error": error});
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn forbidden(error_code: &str, message: String) -> Response<Body> {
    let data = json!({"status": "error", "error_code": error_code, "message": message});
    jsonrpc_error(StatusCode::FORBIDDEN, -32600, "Forbidden", data)
}

fn unauthorized(failure: &AuthFailure) -> Response<Body> {
    let mut response = jsonrpc_error(StatusCode::UNAUTHORIZED, -32001, "Unauthorized", auth_failed(failure));
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn session_not_found() -> Response<Body> {
    let data = json!({"status": "error", "error_code": "SESSION_NOT_FOUND", "message": "session not found"});
    jsonrpc_error(StatusCode::NOT_FOUND, -32001, "Session not found", data)
}

/// Splits a `Host` value into host and optional port (`[::1]:8000` gives `::1`).
fn split_host(authority: &str) -> (&str, Option<&str>) {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').unwrap_or((rest, ""));
        return (host, after.strip_prefix(':'));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, Some(port)),
        _ => (authority, None),
    }
}

/// Whether a `Host` header value is allowed by `allowed` (names, `name:port`, or `*`).
pub fn host_allowed(host_header: Option<&str>, allowed: &[String]) -> bool {
    if allowed.iter().any(|a| a == "*") {
        return true;
    }
    let Some(authority) = host_header else { return false };
    let (host, port) = split_host(authority.trim());
    allowed.iter().any(|entry| {
        let (a_host, a_port) = split_host(entry);
        a_host.eq_ignore_ascii_case(host) && (a_port.is_none() || a_port == port)
    })
}

/// Whether an `Origin` header value is allowed: loopback origins always, others when listed (or `*`).
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    let origin = origin.trim().trim_end_matches('/');
    if allowed.iter().any(|a| a == "*" || a.trim_end_matches('/').eq_ignore_ascii_case(origin)) {
        return true;
    }
    let Some((scheme, rest)) = origin.split_once("://") else { return false };
    let (host, _) = split_host(rest);
    matches!(scheme, "http" | "https") && matches!(host, "localhost" | "127.0.0.1" | "::1")
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The credentials of an HTTP request.
pub fn credentials(headers: &HeaderMap) -> Result<Credentials, AuthFailure> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(AuthFailure("missing Authorization header: send Authorization: Bearer <gateway key>".into()));
    };
    let value = value.to_str().map_err(|_| AuthFailure("invalid Authorization header".into()))?;
    let key = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
        .ok_or_else(|| AuthFailure("the Authorization header must be Bearer <gateway key>".into()))?;
    let project_id = header_str(headers, "x-gw-project-id").or_else(|| header_str(headers, "project_id"));
    let user_id = header_str(headers, "x-gw-user-id").or_else(|| header_str(headers, "user_id"));
    Ok(Credentials {
        key: key.trim().to_string(),
        project_id: project_id.map(str::to_string),
        user_id: user_id.map(str::to_string),
    })
}

/// `Host` and `Origin` checks; the refusal's error code and message.
fn check_request(headers: &HeaderMap, snapshot: &Snapshot) -> Result<(), (&'static str, String)> {
    let settings = &snapshot.settings;
    let host = header_str(headers, header::HOST.as_str());
    if !host_allowed(host, &settings.allowed_hosts) {
        let shown = host.unwrap_or("(none)");
        return Err(("HOST_NOT_ALLOWED", format!("Host {shown:?} is not in gw_allowed_hosts")));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        if !origin_allowed(origin, &settings.allowed_origins) {
            return Err(("ORIGIN_NOT_ALLOWED", format!("Origin {origin:?} is not allowed")));
        }
    }
    Ok(())
}

impl<S, B> Service<Request<Body>> for GatewayAuth<S>
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        // The clone that was polled ready is the one to call; keep a fresh clone for the next request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let ctx = Arc::clone(&self.ctx);
        Box::pin(async move {
            let snapshot = ctx.store.snapshot();
            if let Err((code, message)) = check_request(req.headers(), &snapshot) {
                tracing::info!(error_code = code, reason = %message, "gateway request refused");
                return Ok(forbidden(code, message));
            }
            let limit = snapshot.settings.timeouts.auth;
            let presented = credentials(req.headers());
            let resolved = ctx
                .timeouts
                .run(TimeoutKind::Auth, limit, async {
                    match presented {
                        Ok(creds) => ctx.authenticate(&snapshot, &creds).await,
                        Err(failure) => Err(failure),
                    }
                })
                .await
                .unwrap_or_else(|t| Err(AuthFailure(t.to_string())));
            let identity: Arc<Identity> = match resolved {
                Ok(identity) => identity,
                Err(failure) => {
                    tracing::info!(reason = %failure, "gateway request refused");
                    return Ok(unauthorized(&failure));
                }
            };
            let session = header_str(req.headers(), SESSION_HEADER).map(str::to_string);
            if let Some(id) = &session
                && ctx.sessions.check(id, &identity.key_digest, snapshot.settings.limits.session_idle_timeout)
                    == SessionCheck::Unknown
            {
                // While draining, a request outside any valid session is the drain's to answer (503 once idle).
                return Ok(drain::refusal(&ctx, drain::outside_session(&ctx), None).unwrap_or_else(session_not_found));
            }
            let closing = req.method() == Method::DELETE;
            req.extensions_mut().insert(identity);
            let response = inner.call(req).await?;
            // New sessions are recorded by the JSON-RPC guard, which holds their place under `max_sessions`.
            if let Some(id) = &session {
                let gone = response.status() == StatusCode::NOT_FOUND;
                if gone || (closing && response.status().is_success()) {
                    ctx.sessions.close(id);
                }
            }
            Ok(response.map(Body::new))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn hosts() {
        let allowed = list(&["localhost", "127.0.0.1", "::1", "gw.example:8000"]);
        assert!(host_allowed(Some("localhost:8000"), &allowed));
        assert!(host_allowed(Some("LOCALHOST"), &allowed));
        assert!(host_allowed(Some("[::1]:8000"), &allowed));
        assert!(host_allowed(Some("gw.example:8000"), &allowed));
        assert!(!host_allowed(Some("gw.example:9000"), &allowed));
        assert!(!host_allowed(Some("evil.example"), &allowed));
        assert!(!host_allowed(None, &allowed));
        assert!(host_allowed(Some("10.0.0.7:8000"), &list(&["*"])));
    }

    #[test]
    fn origins() {
        let allowed = list(&["https://app.example"]);
        assert!(origin_allowed("http://localhost:3000", &allowed));
        assert!(origin_allowed("http://127.0.0.1", &allowed));
        assert!(origin_allowed("https://app.example/", &allowed));
        assert!(!origin_allowed("https://evil.example", &allowed));
        assert!(!origin_allowed("null", &allowed));
        assert!(!origin_allowed("http://localhost.evil.example", &allowed));
    }

    #[test]
    fn credentials_from_headers() {
        let mut headers = HeaderMap::new();
        assert!(credentials(&headers).is_err());
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k1"));
        headers.insert("project_id", HeaderValue::from_static("p1"));
        let creds = credentials(&headers).unwrap();
        assert_eq!((creds.key.as_str(), creds.project_id.as_deref()), ("k1", Some("p1")));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic k1"));
        assert!(credentials(&headers).is_err());
    }
}
