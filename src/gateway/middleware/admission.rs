//! The admission step, the same for both fronts: who is calling (the credentials resolved into an [`Identity`] under
//! `auth_timeout`, 401 `AUTH_FAILED` otherwise) and whether the caller's key may send another request now (its rate
//! limit, 429 `RATE_LIMITED` with `Retry-After`).
//!
//! A request that asks for upstream calls (the calls of a `gw_secure_call_tools` batch) takes one more cell per call
//! ([`take_calls`], contract 13): a bucket that cannot cover them all refuses the request and nothing runs.
//!
//! Over HTTP [`admit_http`] runs it on every request, with the credentials of its headers, and puts the identity into
//! the request's extensions for the layers and the handler behind it. Over stdio the handler runs [`admit`] on every
//! call (a tool call; in transparent mode also `prompts/get`, `resources/read`, `completion/complete`) with the
//! credentials of the environment, resolved against the current snapshot each time, so a rotated or disabled key
//! takes effect at once there too; the refusal is then the tool's result. Its other requests (`initialize`, the
//! lists) resolve the credentials with [`identify`], taking no cell.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use std::future::Future;

use axum::extract::{ConnectInfo, Request};
use axum::response::Response;

use super::step::{Next, Step, forward};
use serde_json::{Map, Value};

use super::jsonrpc::ParsedMessage;
use crate::auth::http::oauth_challenge;
use crate::auth::{AuthFailure, Credentials, Identity};
use crate::config::Snapshot;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::telemetry::metrics::GW_TOOLS;
use crate::timeouts::{TimedOut, TimeoutKind};
use axum::http::{HeaderValue, header};

/// Resolves `presented` against `snapshot` under `auth_timeout`, then takes one cell of the key's rate limit (over
/// stdio: no source address).
pub async fn admit(
    ctx: &GatewayContext,
    snapshot: &Arc<Snapshot>,
    presented: Result<&Credentials, AuthFailure>,
) -> Result<Arc<Identity>, GatewayError> {
    admit_from(ctx, snapshot, presented, None).await
}

/// [`admit`] for a request from `source` (the peer address over HTTP), which a failure's audit record names.
async fn admit_from(
    ctx: &GatewayContext,
    snapshot: &Arc<Snapshot>,
    presented: Result<&Credentials, AuthFailure>,
    source: Option<IpAddr>,
) -> Result<Arc<Identity>, GatewayError> {
    let identity = identify_from(ctx, snapshot, presented, source).await?;
    if let Err(limited) = ctx.rate_limits.check(&identity.snapshot.settings, &identity.key_digest) {
        ctx.store.metrics().rate_limited.inc();
        if let Some(left_out) = ctx.refusals.admit() {
            let retry_after_seconds = limited.retry_after_seconds();
            tracing::info!(key_id = %identity.key_id, retry_after_seconds, left_out, "request rate limited");
        }
        return Err(limited.into());
    }
    Ok(identity)
}

/// Resolves `presented` against `snapshot` under `auth_timeout`, taking no cell of the rate limit (over stdio, for
/// the requests that are not calls: `initialize`, the lists).
pub async fn identify(
    ctx: &GatewayContext,
    snapshot: &Arc<Snapshot>,
    presented: Result<&Credentials, AuthFailure>,
) -> Result<Arc<Identity>, GatewayError> {
    identify_from(ctx, snapshot, presented, None).await
}

async fn identify_from(
    ctx: &GatewayContext,
    snapshot: &Arc<Snapshot>,
    presented: Result<&Credentials, AuthFailure>,
    source: Option<IpAddr>,
) -> Result<Arc<Identity>, GatewayError> {
    let limit = snapshot.settings.timeouts.auth;
    let resolved = tokio::time::timeout(limit, async {
        match presented {
            Ok(creds) => ctx.authenticate(snapshot, creds).await,
            Err(failure) => Err(failure),
        }
    })
    .await
    .unwrap_or_else(|_| Err(AuthFailure::new(TimedOut(limit).to_string())));
    // Counted for the caller's tenant, which is known only now (contract 14: a tenant sees its own counts); a
    // refusal or a timeout belongs to no tenant.
    if let Ok(identity) = &resolved {
        ctx.timeouts.of(identity.mcp_config_id.as_deref()).count_success(TimeoutKind::Auth);
    }
    // Refusals are logged at most 10 a second, the next record counting those left out (contract section 13), and
    // audited at most 10 a second per source address (contract section 14).
    let failure = match resolved {
        Ok(identity) => return Ok(identity),
        Err(failure) => failure,
    };
    if let Some(left_out) = ctx.refusals.admit() {
        tracing::info!(reason = %failure, left_out, "gateway request refused");
    }
    let event = crate::audit::Event {
        event: "auth_failure",
        outcome: Some("refused"),
        error_code: Some("AUTH_FAILED"),
        config_revision: Some(crate::audit::revision(&snapshot.source_digest)),
        ..Default::default()
    };
    ctx.audit.record_auth_failure(source, event).await;
    Err(GatewayError::from(failure))
}

/// The upstream calls a `tools/call` asks for: the calls of a `gw_secure_call_tools` batch within
/// `max_calls_per_request` (a longer batch runs none and is refused by the tool with `TOO_MANY_CALLS`), or the one call
/// of an upstream tool called by its exposed name (transparent mode).
pub fn calls_asked(tool: &str, arguments: Option<&Map<String, Value>>, max_calls: usize) -> u32 {
    if tool != "gw_secure_call_tools" {
        // Another gateway tool calls no upstream; any other name is one upstream call (transparent mode).
        return u32::from(!GW_TOOLS.contains(&tool));
    }
    match arguments.and_then(|a| a.get("tool_calls")).and_then(Value::as_array).map(Vec::len) {
        Some(n) if n <= max_calls => u32::try_from(n).unwrap_or(u32::MAX),
        _ => 0,
    }
}

/// Takes one cell of the caller's rate limit per upstream call asked for, or refuses with `RATE_LIMITED`.
pub fn take_calls(ctx: &GatewayContext, identity: &Identity, calls: u32) -> Result<(), GatewayError> {
    let settings = &identity.snapshot.settings;
    ctx.rate_limits.check_n(settings, &identity.key_digest, calls).map_err(|limited| {
        ctx.store.metrics().rate_limited.inc();
        tracing::info!(key_id = %identity.key_id, calls, retry_after_seconds = limited.retry_after_seconds(), "request rate limited: its calls");
        GatewayError::from(limited)
    })
}

/// The step over HTTP after the JSON-RPC guard: a `tools/call` takes a cell per upstream call it asks for (429
/// `RATE_LIMITED` when the bucket cannot cover them).
#[derive(Clone)]
pub struct CallBudget(pub Arc<GatewayContext>);

impl Step for CallBudget {
    fn run<S: Next>(&self, req: Request, next: S) -> impl Future<Output = Response> + Send + 'static {
        let refused = budget(&self.0, &req);
        async move {
            match refused {
                Some(refused) => refused,
                None => forward(next, req).await,
            }
        }
    }
}

/// The refusal of a request whose calls its key's bucket cannot cover; `None` when it goes on.
fn budget(ctx: &GatewayContext, req: &Request) -> Option<Response> {
    let identity = req.extensions().get::<Arc<Identity>>()?;
    let message = &req.extensions().get::<ParsedMessage>()?.0;
    if message.get("method").and_then(Value::as_str) != Some("tools/call") {
        return None;
    }
    let params = message.get("params")?;
    let tool = params.get("name").and_then(Value::as_str)?;
    let max = identity.snapshot.settings.limits.max_calls_per_request;
    let calls = calls_asked(tool, params.get("arguments").and_then(Value::as_object), max);
    take_calls(ctx, identity, calls).err().map(|refused| refused.response(message.get("id")))
}

/// The step over HTTP: [`admit`] with the credentials of the headers; the identity goes into the extensions.
#[derive(Clone)]
pub struct Admit(pub Arc<GatewayContext>);

impl Step for Admit {
    fn run<S: Next>(&self, req: Request, next: S) -> impl Future<Output = Response> + Send + 'static {
        admit_http(Arc::clone(&self.0), req, next)
    }
}

async fn admit_http(ctx: Arc<GatewayContext>, mut req: Request, next: impl Next) -> Response {
    let snapshot = ctx.store.snapshot();
    let presented = crate::auth::http::credentials(req.headers());
    let source = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|peer| peer.0.ip());
    match admit_from(&ctx, &snapshot, presented.as_ref().map_err(Clone::clone), source).await {
        Ok(identity) => {
            // A valid credential: the connection leaves the unauthenticated count (contract 14, `listener.rs`).
            if let Some(connection) = req.extensions_mut().remove::<crate::listener::Unauthenticated>() {
                connection.authenticated();
            }
            req.extensions_mut().insert(Arc::clone(&identity));
            // The key's budget (requests in flight, answers not taken) right after the key is known, before any body
            // is read; it wraps the answer, so it sees the answer leave whatever the layers below made of it.
            super::budgets::within(&ctx, identity, req, next).await
        }
        Err(refused) => {
            let mut response = refused.response(None);
            if refused.code == ErrorCode::AuthFailed
                && let Some(config) = snapshot.settings.client_oauth.as_deref()
            {
                let sent = presented.as_ref().is_ok_and(|creds| !creds.key.trim().is_empty());
                let challenge = oauth_challenge(config, req.headers(), sent, refused.is_insufficient_scope());
                if let Ok(value) = HeaderValue::from_str(&challenge) {
                    response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
                }
            }
            response
        }
    }
}
