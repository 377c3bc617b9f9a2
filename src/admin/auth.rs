//! Admin authentication (spec 5.1 and 7): `Authorization: Bearer <admin_apikey>` on every route but `GET /health`,
//! compared in constant time with the admin key of the snapshot serving now (so an edited or restored key takes effect
//! with the reload, and old credentials stop working). A refusal is audited as `admin_auth_failure`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::request_log::RefusalReason;
use super::response::ApiError;
use crate::secrets;

const CODE: &str = "AUTH_INVALID_CREDENTIALS";

/// Why an admin request was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum AdminAuthError {
    Missing,
    Malformed,
    NotConfigured,
    WrongKey,
}

impl AdminAuthError {
    /// The reason, as the request log shows it.
    pub fn as_str(&self) -> &'static str {
        match self {
            AdminAuthError::Missing => "missing",
            AdminAuthError::Malformed => "malformed",
            AdminAuthError::NotConfigured => "not configured",
            AdminAuthError::WrongKey => "wrong key",
        }
    }
}

impl From<AdminAuthError> for ApiError {
    fn from(err: AdminAuthError) -> ApiError {
        let unauthorized = |detail: &str| ApiError::new(StatusCode::UNAUTHORIZED, CODE, detail);
        match err {
            AdminAuthError::Missing => unauthorized("header required"),
            AdminAuthError::Malformed => unauthorized("invalid authorization format"),
            AdminAuthError::WrongKey => {
                unauthorized("invalid admin key; administrative operations require admin_apikey")
            }
            AdminAuthError::NotConfigured => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                CODE,
                "admin key not configured; regenerate configuration",
            ),
        }
    }
}

/// Checks an `Authorization` header value against the admin key.
pub fn check(header: Option<&[u8]>, admin_key: Option<&str>) -> Result<(), AdminAuthError> {
    let header = header.ok_or(AdminAuthError::Missing)?;
    let value = std::str::from_utf8(header).map_err(|_| AdminAuthError::Malformed)?;
    let key = value.strip_prefix("Bearer ").ok_or(AdminAuthError::Malformed)?.trim();
    if key.is_empty() {
        return Err(AdminAuthError::Malformed);
    }
    let admin_key = admin_key.ok_or(AdminAuthError::NotConfigured)?;
    if secrets::ct_eq(key, admin_key) { Ok(()) } else { Err(AdminAuthError::WrongKey) }
}

/// Set on a request the console (`console/`) hands to the admin API for an operator it has signed in: the request
/// needs no `Authorization` header. Only code can set it (extensions do not come from the wire).
#[derive(Debug, Clone)]
pub struct SignedIn {
    /// Who, for the logs: `admin key` or the issuer's subject.
    pub operator: String,
}

/// Audits a refused admin key, at the API or the console's sign-in: at most 10 records a second per source address,
/// never with what was presented (contract section 14).
pub async fn audit_refused_key(
    audit: &crate::audit::AuditLog,
    source: Option<std::net::IpAddr>,
    snapshot: &crate::config::Snapshot,
) {
    let event = crate::audit::Event {
        event: "admin_auth_failure",
        outcome: Some("refused"),
        error_code: Some(CODE),
        config_revision: Some(crate::audit::revision(&snapshot.source_digest)),
        ..Default::default()
    };
    audit.record_auth_failure(source, event).await;
}

/// The middleware: lets `GET /health` and the console's own requests ([`SignedIn`]) through, checks everything else.
pub async fn require_admin(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if req.uri().path() == "/health" || req.extensions().get::<SignedIn>().is_some() {
        return next.run(req).await;
    }
    let snapshot = state.store.snapshot();
    let header = req.headers().get(header::AUTHORIZATION).map(|v| v.as_bytes());
    match check(header, snapshot.file.admin_apikey.as_deref()) {
        Ok(()) => next.run(req).await,
        Err(e) => {
            // Logged by the request log (`request_log.rs`), with the route template, never the path; audited at most
            // 10 a second per source address, never with what was presented (contract section 14).
            let source = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|peer| peer.0.ip());
            audit_refused_key(&state.audit, source, &snapshot).await;
            let reason = e.as_str();
            let mut response = ApiError::from(e).into_response();
            response.extensions_mut().insert(RefusalReason(reason));
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_of_spec_5_1() {
        let admin = Some("the-admin-key");
        assert_eq!(check(None, admin), Err(AdminAuthError::Missing));
        assert_eq!(check(Some(b"the-admin-key"), admin), Err(AdminAuthError::Malformed));
        assert_eq!(check(Some(b"Basic abc"), admin), Err(AdminAuthError::Malformed));
        assert_eq!(check(Some(b"Bearer "), admin), Err(AdminAuthError::Malformed));
        assert_eq!(check(Some(b"Bearer wrong"), admin), Err(AdminAuthError::WrongKey));
        assert_eq!(check(Some(b"Bearer the-admin-key"), None), Err(AdminAuthError::NotConfigured));
        assert_eq!(check(Some(b"Bearer the-admin-key"), admin), Ok(()));
    }
}
