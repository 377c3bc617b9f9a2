//! Signing in to the console with the OAuth issuer of contract 10 (contract 18), for users whose roles or groups hold
//! `console_admin_role`. The console is an OAuth 2.1 client of the issuer (`console_client_id`), authorization code
//! with PKCE:
//! 1. [`start`] (`POST /ui/oauth/start`, the sign-in page's CSRF token checked by `guard`, so no other site can start
//!    one) finds the issuer's authorization endpoint in its metadata (the broker's, `credentials/broker/metadata.rs`)
//!    and sends the browser there with `state`, the S256 challenge and `redirect_uri` = this listener's URL (the
//!    request's `Host`; `X-Forwarded-Host` and `X-Forwarded-Proto` with `trust_forwarded_headers`) +
//!    [`CALLBACK_PATH`]. The state's digest is kept here ([`Pending`]) with the verifier, for 10 minutes, bound to
//!    this browser by a random value in the cookie [`STATE_COOKIE`] (`SameSite=Lax`: the callback arrives from the
//!    issuer's site).
//! 2. [`callback`] takes the state (single use: gone after the first callback, whatever its outcome), checks the
//!    browser's cookie, RFC 9207's `iss` when sent, redeems the code (verifier, client secret when configured) at the
//!    token endpoint, and verifies the access token exactly as the gateway verifies a client's
//!    (`auth::oauth::verify_token`: signature against the JWKS, `iss`, `aud` = `audience`, `exp`, `nbf`).
//! 3. A token whose roles or groups (`auth::oauth::holds_role`, the claims of `principal.roles` and `.groups`) hold
//!    `console_admin_role` gets a console session like the admin key's, its operator named by the `user_claim`
//!    value; any other gets 403 and no session. Both are audited (`console_sign_in`; refusals bounded per source).
//!
//! The token is dropped once checked: never kept, logged or shown.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use askama::Template;
use axum::Extension;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::Value;

use super::pages::{behind_tls, message, render};
use super::session::{self, COOKIE_NAME, LIFETIME, LOGIN_COOKIE};
use super::{Console, Form};
use crate::config::client_oauth::ClientOAuth;
use crate::credentials::broker::{self, BrokerError, state::pkce_challenge};
use crate::outbound::token_endpoint;
use crate::secrets;

/// Where the issuer sends the browser back.
pub const CALLBACK_PATH: &str = "/ui/oauth/callback";
/// The cookie that binds a sign-in in flight to the browser that started it.
pub const STATE_COOKIE: &str = "mcpgw_console_oauth";
/// How long a sign-in may take at the issuer.
pub const PENDING_LIFETIME: Duration = Duration::from_secs(600);
/// The sign-ins in flight kept at most (the oldest is dropped first).
const MAX_PENDING: usize = 1000;
/// The longest operator name kept (the `user_claim` value).
const MAX_OPERATOR_CHARS: usize = 256;

/// A sign-in started and not yet called back.
struct Pending {
    verifier: String,
    /// The digest of the browser's [`STATE_COOKIE`] value.
    browser: [u8; 32],
    redirect_uri: String,
    started: Instant,
}

/// The sign-ins in flight, by the digest of their state.
#[derive(Default)]
pub struct PendingSignIns(Mutex<HashMap<[u8; 32], Pending>>);

impl PendingSignIns {
    fn insert(&self, state: &str, pending: Pending) {
        let mut live = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|_, p| p.started.elapsed() < PENDING_LIFETIME);
        if live.len() >= MAX_PENDING
            && let Some(oldest) = live.iter().min_by_key(|(_, p)| p.started).map(|(k, _)| *k)
        {
            live.remove(&oldest);
        }
        live.insert(secrets::digest(state), pending);
    }

    /// The sign-in of `state`, used up, when it is live and `browser` (the cookie's value) is the browser that
    /// started it.
    fn take(&self, state: &str, browser: Option<&str>) -> Option<Pending> {
        let pending = self.0.lock().unwrap_or_else(PoisonError::into_inner).remove(&secrets::digest(state))?;
        let same_browser = browser.is_some_and(|b| secrets::ct_eq_digest(&secrets::digest(b), &pending.browser));
        (same_browser && pending.started.elapsed() < PENDING_LIFETIME).then_some(pending)
    }
}

/// The console's sign-in settings, when the `oauth` provider has them.
fn configured(console: &Console) -> Option<Arc<ClientOAuth>> {
    let snapshot = console.admin.store.snapshot();
    snapshot.settings.client_oauth.clone().filter(|config| config.console.is_some())
}

/// The issuer the sign-in page offers, when configured.
pub fn offered_issuer(console: &Console) -> Option<String> {
    configured(console).map(|config| config.issuer.clone())
}

/// The origin of the issuer's authorization endpoint (its metadata, cached), for the sign-in page's `form-action`;
/// `None` when the metadata cannot be read (the start then says why).
pub async fn authorization_origin(console: &Console) -> Option<String> {
    let config = configured(console)?;
    let metadata = console.admin.broker.issuer_metadata(&config.issuer).await.ok()?;
    let url = reqwest::Url::parse(metadata.authorization_endpoint.as_deref()?).ok()?;
    Some(url.origin().ascii_serialization()).filter(|origin| !origin.contains([';', ',', ' ', '\'']))
}

fn unavailable(why: &str) -> Response {
    message(StatusCode::BAD_GATEWAY, "Sign-in unavailable", why)
}

/// `POST /ui/oauth/start`: off to the issuer's authorization endpoint.
pub async fn start(State(console): State<Arc<Console>>, headers: HeaderMap, _form: Extension<Form>) -> Response {
    let Some(config) = configured(&console) else {
        return message(StatusCode::NOT_FOUND, "Not found", "Signing in with the issuer is not configured.");
    };
    let Some(sign_in) = config.console.as_ref() else { return unavailable("not configured") };
    let metadata = match console.admin.broker.issuer_metadata(&config.issuer).await {
        Ok(metadata) => metadata,
        Err(error) => return unavailable(&error.to_string()),
    };
    let Some(endpoint) = metadata.authorization_endpoint.as_deref() else {
        return unavailable("the issuer's metadata names no authorization_endpoint");
    };
    let Ok(mut url) = reqwest::Url::parse(endpoint) else {
        return unavailable("the issuer's authorization_endpoint is not a URL");
    };
    let (Ok(state), Ok(verifier), Ok(browser)) =
        (secrets::random_token(), secrets::random_token(), secrets::random_token())
    else {
        return message(StatusCode::INTERNAL_SERVER_ERROR, "Unavailable", "no random numbers to sign in with");
    };
    let redirect_uri =
        format!("{}{CALLBACK_PATH}", crate::auth::http::request_base(config.trust_forwarded_headers, &headers));
    url.query_pairs_mut()
        .append_pair("response_type", "code")
        .append_pair("client_id", &sign_in.client_id)
        .append_pair("redirect_uri", &redirect_uri)
        .append_pair("scope", &sign_in.scopes.join(" "))
        .append_pair("state", &state)
        .append_pair("code_challenge", &pkce_challenge(&verifier))
        .append_pair("code_challenge_method", "S256");
    let pending = Pending { verifier, browser: secrets::digest(&browser), redirect_uri, started: Instant::now() };
    console.oauth.insert(&state, pending);
    let mut response = Redirect::to(url.as_str()).into_response();
    set(&mut response, &state_cookie(Some(&browser), behind_tls(&headers)));
    response
}

/// The [`STATE_COOKIE`]: scoped to the callback's folder, `SameSite=Lax` (sent on the issuer's redirect back, a
/// top-level `GET`), 10 minutes; `None` clears it.
fn state_cookie(value: Option<&str>, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    let (value, age) = value.map_or(("", 0), |v| (v, PENDING_LIFETIME.as_secs()));
    format!("{STATE_COOKIE}={value}; Path=/ui/oauth; HttpOnly; SameSite=Lax; Max-Age={age}{secure}")
}

fn set(response: &mut Response, cookie: &str) {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

/// Why a callback was refused: the page's status and text, and the audit record's error code.
struct Refusal {
    status: StatusCode,
    text: String,
    code: &'static str,
    user_id: Option<String>,
}

impl Refusal {
    fn new(status: StatusCode, code: &'static str, text: impl Into<String>) -> Refusal {
        Refusal { status, text: text.into(), code, user_id: None }
    }
}

impl From<BrokerError> for Refusal {
    fn from(error: BrokerError) -> Refusal {
        let status = match error {
            BrokerError::Issuer(_) | BrokerError::Denied(_) => StatusCode::FORBIDDEN,
            _ => StatusCode::BAD_GATEWAY,
        };
        Refusal::new(status, "AUTH_INVALID_CREDENTIALS", error.to_string())
    }
}

#[derive(Template)]
#[template(path = "console/signed_in.html")]
struct SignedInPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    operator: &'a str,
    /// Where the page goes on: the overview, or a user's own page.
    next: &'a str,
}

/// `GET /ui/oauth/callback`: the issuer's answer (see the module's documentation).
pub async fn callback(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let snapshot = console.admin.store.snapshot();
    let revision = crate::audit::revision(&snapshot.source_digest);
    let tls = behind_tls(&headers);
    let mut response = match signed_in_operator(&console, &headers, &params).await {
        Ok((operator, own)) => {
            let user_id = snapshot.resolve_user(&operator);
            console
                .admin
                .audit
                .record(crate::audit::Event {
                    event: "console_sign_in",
                    outcome: Some("ok"),
                    user_id,
                    config_revision: Some(revision),
                    ..Default::default()
                })
                .await;
            match own {
                None => tracing::info!(operator = %operator, "a console admin signed in with the OAuth issuer"),
                Some(_) => tracing::info!(operator = %operator, "a user signed in to their own page of the console"),
            }
            let next = if own.is_some() { "/ui/me" } else { "/ui/" };
            let Ok((id, session)) = console.sessions.start_as(&operator, own) else {
                return message(StatusCode::INTERNAL_SERVER_ERROR, "Unavailable", "no random numbers to sign in with");
            };
            // A page, not a redirect: the session cookie is `SameSite=Strict`, and a browser would not send it on a
            // redirect that follows the issuer's cross-site one; the page's own refresh is a same-site navigation.
            let page =
                SignedInPage { signed_in: session.own.is_none(), csrf: &session.csrf, operator: &operator, next };
            let mut response = render(StatusCode::OK, &page);
            set(&mut response, &session::set_cookie(COOKIE_NAME, Some(&id), LIFETIME, tls));
            set(&mut response, &session::set_cookie(LOGIN_COOKIE, None, LIFETIME, tls));
            response
        }
        Err(refusal) => {
            let source = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
            console
                .admin
                .audit
                .record_auth_failure(
                    source,
                    crate::audit::Event {
                        event: "console_sign_in",
                        outcome: Some("refused"),
                        error_code: Some(refusal.code),
                        user_id: refusal.user_id.as_deref(),
                        config_revision: Some(revision),
                        ..Default::default()
                    },
                )
                .await;
            tracing::info!(reason = %refusal.text, "a console sign-in with the OAuth issuer was refused");
            let heading = if refusal.code == NOT_ADMIN { "Not a console admin" } else { "Sign-in refused" };
            message(refusal.status, heading, &refusal.text)
        }
    };
    set(&mut response, &state_cookie(None, tls));
    response
}

/// The audit record's code of a verified user without `console_admin_role`.
const NOT_ADMIN: &str = "NOT_CONSOLE_ADMIN";

/// The operator the callback signs in, and for a user of the gateway who is not a console admin their user id (a
/// session for their own page only); or why not.
async fn signed_in_operator(
    console: &Console,
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<(String, Option<String>), Refusal> {
    let config = configured(console).ok_or_else(|| {
        Refusal::new(StatusCode::NOT_FOUND, "AUTH_INVALID_CREDENTIALS", "Signing in with the issuer is not configured.")
    })?;
    let sign_in = config.console.as_ref().ok_or_else(|| {
        Refusal::new(StatusCode::NOT_FOUND, "AUTH_INVALID_CREDENTIALS", "Signing in with the issuer is not configured.")
    })?;
    let bad_state = || {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            "AUTH_INVALID_CREDENTIALS",
            "This sign-in is unknown, was used already, has expired (10 minutes) or was started in another browser: \
             start again from the sign-in page.",
        )
    };
    let state = params.get("state").filter(|s| !s.is_empty()).ok_or_else(bad_state)?;
    let pending = console.oauth.take(state, session::cookie(headers, STATE_COOKIE)).ok_or_else(bad_state)?;
    if let Some(error) = params.get("error") {
        return Err(BrokerError::Denied(token_endpoint::error_code(error)).into());
    }
    let broker = &console.admin.broker;
    let metadata = broker.issuer_metadata(&config.issuer).await?;
    let iss = params.get("iss").map(String::as_str);
    broker::check_iss(iss, Some(&config.issuer), metadata.iss_parameter_supported)?;
    let code = params.get("code").filter(|code| !code.is_empty());
    let code = code.ok_or_else(|| BrokerError::Denied("the answer has no code".into()))?;
    let token_url = metadata
        .token_endpoint
        .as_deref()
        .ok_or_else(|| BrokerError::NotConfigured("the issuer's metadata names no token_endpoint".into()))?;
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", pending.redirect_uri.as_str()),
        ("code_verifier", pending.verifier.as_str()),
        ("client_id", sign_in.client_id.as_str()),
    ];
    if let Some(secret) = sign_in.client_secret.as_deref() {
        form.push(("client_secret", secret));
    }
    let answer = token_endpoint::request(broker.http()?, token_url, &form, broker.timeout())
        .await
        .map_err(|e| Refusal::from(BrokerError::from(e)))?;
    let timeout = console.admin.store.snapshot().settings.timeouts.auth;
    let verified =
        crate::auth::oauth::verify_token(&config, &answer.access_token, unix_now(), &console.admin.jwks, timeout).await;
    drop(answer);
    let claims = verified.map_err(|failure| {
        Refusal::new(
            StatusCode::FORBIDDEN,
            "AUTH_INVALID_CREDENTIALS",
            format!("The issuer's token did not verify: {}.", failure.details),
        )
    })?;
    let user = claims.get(&config.user_claim).and_then(Value::as_str).map(operator_name).filter(|u| !u.is_empty());
    let user = user.ok_or_else(|| {
        Refusal::new(
            StatusCode::FORBIDDEN,
            "AUTH_INVALID_CREDENTIALS",
            format!("The issuer's token has no {:?} claim naming its user.", config.user_claim),
        )
    })?;
    if !crate::auth::oauth::holds_role(&config, &claims, &sign_in.admin_role) {
        // A user of the gateway: their own page (contract 16: a user sets their own credentials on the console).
        let snapshot = console.admin.store.snapshot();
        if let Some(id) = snapshot.resolve_user(&user) {
            return Ok((user, Some(id.to_string())));
        }
        return Err(Refusal {
            status: StatusCode::FORBIDDEN,
            text: format!(
                "{user} is not a console admin (the issuer's token does not hold the console's admin role), nor a \
                 user of this gateway."
            ),
            code: NOT_ADMIN,
            user_id: None,
        });
    }
    Ok((user, None))
}

/// The `user_claim` value as an operator's name: printable, bounded.
fn operator_name(value: &str) -> String {
    value.chars().filter(|c| !c.is_control()).take(MAX_OPERATOR_CHARS).collect()
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(browser: &str) -> Pending {
        Pending {
            verifier: "v".into(),
            browser: secrets::digest(browser),
            redirect_uri: "http://x/ui/oauth/callback".into(),
            started: Instant::now(),
        }
    }

    #[test]
    fn a_state_is_taken_once_and_only_by_its_browser() {
        let signins = PendingSignIns::default();
        signins.insert("s1", pending("b1"));
        assert!(signins.take("s1", Some("b1")).is_some());
        assert!(signins.take("s1", Some("b1")).is_none(), "used already");
        signins.insert("s2", pending("b2"));
        assert!(signins.take("s2", Some("other")).is_none(), "another browser");
        assert!(signins.take("s2", Some("b2")).is_none(), "a foreign attempt uses it up");
        assert!(signins.take("unknown", Some("b1")).is_none());
    }

    #[test]
    fn sign_ins_in_flight_are_bounded() {
        let signins = PendingSignIns::default();
        for i in 0..MAX_PENDING + 3 {
            signins.insert(&format!("s{i}"), pending("b"));
        }
        assert_eq!(signins.0.lock().unwrap().len(), MAX_PENDING);
    }

    #[test]
    fn the_state_cookie_is_lax_and_scoped() {
        let cookie = state_cookie(Some("abc"), true);
        assert!(cookie.contains("Path=/ui/oauth; HttpOnly; SameSite=Lax; Max-Age=600; Secure"), "{cookie}");
        assert!(state_cookie(None, false).contains("Max-Age=0"));
    }
}
