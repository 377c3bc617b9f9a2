//! The OAuth broker's two routes on the gateway listener (contract 16), for users' browsers:
//!
//! - `GET /oauth/connect/{state}`: the `authorize_url` of a `CREDENTIALS_REQUIRED` answer; redirects (302) straight
//!   to the authorization server's authorization endpoint.
//! - `GET /oauth/callback`: where the authorization server sends the browser back; completes the connection (the
//!   state used up, `iss` checked, the code redeemed, the tokens stored for the state's user and server) and answers
//!   a short page.
//!
//! Neither needs a gateway credential (a browser has none): the sealed state is the credential, issued only to an
//! authenticated caller, good for 10 minutes and once. Both sit behind the `Host`/`Origin` step like `/mcp/`. Pages
//! are plain, `no-store`, framed by nobody, with a policy that runs no script; what they say of a failure holds no
//! token, code or state. Each completed connection is audited (`credentials_connected`); refusals are logged within
//! the gateway's bound on records of refused requests.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query};
use axum::http::{HeaderValue, Response, StatusCode, header};

use super::GatewayContext;
use crate::credentials::broker::BrokerError;

/// `GET /oauth/connect/{state}`.
pub async fn connect(ctx: Arc<GatewayContext>, Path(state): Path<String>) -> Response<Body> {
    let snapshot = ctx.store.snapshot();
    match ctx.broker.authorization_redirect(&snapshot, &state) {
        Ok(location) => {
            let mut response = page(StatusCode::FOUND, "Redirecting", "Taking you to sign in…");
            match HeaderValue::from_str(&location) {
                Ok(location) => {
                    response.headers_mut().insert(header::LOCATION, location);
                    response
                }
                Err(_) => {
                    refused(&ctx, &BrokerError::NotConfigured("the authorization URL is not a valid header".into()))
                }
            }
        }
        Err(failure) => refused(&ctx, &failure),
    }
}

/// `GET /oauth/callback?code=…&state=…[&iss=…]` (or `?error=…&state=…`).
pub async fn callback(ctx: Arc<GatewayContext>, Query(params): Query<HashMap<String, String>>) -> Response<Body> {
    match ctx.broker.callback(&ctx.store, &params).await {
        Ok(connected) => {
            ctx.audit
                .record(crate::audit::Event {
                    event: "credentials_connected",
                    user_id: Some(&connected.user_id),
                    server_name: Some(&connected.server_name),
                    outcome: Some("connected"),
                    credential: Some(crate::config::server_credentials::OAUTH),
                    ..Default::default()
                })
                .await;
            page(
                StatusCode::OK,
                "Connected",
                &format!(
                    "Your account is connected for server {}. You can close this window and call the tool again.",
                    connected.server_name
                ),
            )
        }
        Err(failure) => refused(&ctx, &failure),
    }
}

/// A refusal's page: 400 for what the browser brought, 502/503 for the authorization server or the gateway.
/// Logged within the gateway's bound on records of refused requests (anyone can send these).
fn refused(ctx: &GatewayContext, failure: &BrokerError) -> Response<Body> {
    if let Some(left_out) = ctx.refusals.admit() {
        tracing::info!(error = %failure, left_out, "an OAuth broker request was refused");
    }
    let status = match failure {
        BrokerError::BadState(_) | BrokerError::Denied(_) | BrokerError::Issuer(_) => StatusCode::BAD_REQUEST,
        BrokerError::Endpoint(_) => StatusCode::BAD_GATEWAY,
        BrokerError::Busy => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    page(status, "Not connected", &format!("The account was not connected: {failure}."))
}

/// A minimal HTML page.
fn page(status: StatusCode, title: &str, text: &str) -> Response<Body> {
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title></head><body><h1>{title}\
         </h1><p>{}</p></body></html>",
        escape(text)
    );
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; frame-ancestors 'none'"),
    );
    response
}

fn escape(text: &str) -> String {
    text.chars().fold(String::with_capacity(text.len()), |mut out, c| {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
        out
    })
}
