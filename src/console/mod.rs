//! The operator's console (contract 18): pages at `/ui/` on the admin listener, rendered here from templates compiled
//! into the binary (`templates/console/`, askama), every action a plain HTML form (script is not needed, and none is
//! sent).
//!
//! The request path, outermost first:
//! 1. [`headers`]: every answer carries `Content-Security-Policy: default-src 'self'` (and no framing, forms posting
//!    only here), `nosniff`, no referrer, `no-store`;
//! 2. [`guard`]: every page but the sign-in pages (the admin key's, and the OAuth issuer's [`oauth`]) needs a live session ([`session`]); a `POST` also needs the session's
//!    CSRF token in its form (`csrf`), else it is refused with 403 and changes nothing; the form is read here, once,
//!    at most [`MAX_FORM_BYTES`];
//! 3. the page ([`pages`]): reads through the admin API's own handlers and writes through them too ([`api`]): the same
//!    validation, the same request log and audit record as a `curl` of the API.

mod api;
mod clients;
mod directory;
mod me;
pub mod oauth;
mod pages;
mod playground;
mod records;
mod servers;
pub mod session;

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use crate::admin::AppState;
use session::Sessions;

/// The largest form the console reads.
pub const MAX_FORM_BYTES: usize = 256 * 1024;

/// What the console's pages share.
pub struct Console {
    pub admin: Arc<AppState>,
    /// The admin API, called in-process for every read and write ([`api`]).
    pub api: Router,
    /// The gateway's router (`/mcp/`), for the playground's requests; `None` when this process serves no gateway.
    pub gateway: Option<Router>,
    pub sessions: Sessions,
    /// Sign-ins with the OAuth issuer in flight ([`oauth`]).
    pub oauth: oauth::PendingSignIns,
    /// Tool calls counted at the last look at the overview, and when (its calls a second are since then).
    pub calls_seen: std::sync::Mutex<Option<(std::time::Instant, u64)>>,
    /// Changes made from users' own pages, per user: since when the minute runs, and how many (`me.rs`).
    pub own_changes: std::sync::Mutex<std::collections::HashMap<String, (std::time::Instant, u32)>>,
}

/// The console's routes (`/ui/...`), to merge with the admin API's router (`api`, the same one the listener serves);
/// `gateway` is the gateway's router, which the playground sends its requests to.
pub fn router(admin: Arc<AppState>, api: Router, gateway: Option<Router>) -> Router {
    let console = Arc::new(Console {
        admin,
        api,
        gateway,
        sessions: Sessions::default(),
        oauth: oauth::PendingSignIns::default(),
        calls_seen: std::sync::Mutex::default(),
        own_changes: std::sync::Mutex::default(),
    });
    let router = Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(pages::overview))
        .route("/ui/login", get(pages::login_form).post(pages::login))
        .route("/ui/logout", post(pages::logout))
        .route("/ui/oauth/start", post(oauth::start))
        .route(oauth::CALLBACK_PATH, get(oauth::callback))
        .route("/ui/servers", get(servers::servers).post(servers::add_server))
        .route("/ui/servers/{config}/{server}", get(servers::server))
        .route("/ui/servers/{config}/{server}/{kind}/{item}/{action}", post(servers::pin_action))
        .route("/ui/keys", get(pages::keys).post(pages::create_key))
        .route("/ui/keys/{key_id}/{action}", post(pages::key_action))
        .route("/ui/configs", get(directory::configs).post(directory::create_config))
        .route("/ui/configs/{config}/{action}", post(directory::config_action))
        .route("/ui/projects", get(directory::projects).post(directory::create_project))
        .route("/ui/projects/{project}/{action}", post(directory::project_action))
        .route("/ui/projects/{project}/members/{user}/remove", post(directory::remove_member))
        .route("/ui/users", get(directory::users).post(directory::create_user))
        .route("/ui/users/{user}", get(directory::user))
        .route("/ui/users/{user}/delete", post(directory::delete_user))
        .route("/ui/users/{user}/credentials/{config}/{server}/clear", post(directory::clear_credential))
        .route("/ui/users/{user}/credentials/{config}/{server}/set", post(directory::set_credential))
        .route("/ui/clients", get(clients::clients))
        .route("/ui/audit", get(records::audit))
        .route("/ui/policies", get(records::policies).post(records::policies_action))
        .route("/ui/me", get(me::me))
        .route("/ui/me/credentials/{config}/{server}/{action}", post(me::credential_action))
        .route("/ui/playground", get(playground::playground).post(playground::play))
        .route("/ui/console.css", get(pages::stylesheet))
        .route("/ui/{*rest}", get(pages::not_found))
        .layer(middleware::from_fn_with_state(Arc::clone(&console), guard))
        .layer(middleware::from_fn(headers));
    // The admin listener's own checks first (header size, repeated headers), and every answer counted.
    crate::admin::front(router, &console.admin).with_state(console)
}

/// Every console page's `Content-Security-Policy`.
const POLICY: &str =
    "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'";

/// [`POLICY`] with `more` (` https://idp.example.com`) added to `form-action`.
pub(crate) fn content_security_policy(more: &str) -> String {
    POLICY.replace("form-action 'self'", &format!("form-action 'self'{more}"))
}

/// The security headers of every console answer.
async fn headers(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    // A page may widen `form-action` (the sign-in page, towards the OAuth issuer); nothing else.
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    }
    let fixed = [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// The operator a page is served to, and the form a `POST` sent (its fields, CSRF token checked).
#[derive(Debug, Clone)]
pub struct Operator {
    pub session: session::Session,
}

/// The form of a `POST`, read and checked by [`guard`].
#[derive(Debug, Clone, Default)]
pub struct Form(pub Vec<(String, String)>);

impl Form {
    /// The first value of field `name` (empty when absent).
    pub fn get(&self, name: &str) -> &str {
        self.0.iter().find(|(key, _)| key == name).map_or("", |(_, value)| value.as_str())
    }
}

/// Sessions and CSRF (see the module's documentation).
async fn guard(State(console): State<Arc<Console>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let open = matches!(path, "/ui/login" | "/ui/console.css" | "/ui/oauth/start" | oauth::CALLBACK_PATH);
    let session = console.sessions.find(req.headers());
    if session.is_none() && !open {
        return Redirect::to("/ui/login").into_response();
    }
    // A user's own session reaches their own page and signing out, nothing else.
    if let Some(own) = session.as_ref().filter(|s| s.own.is_some()) {
        let allowed = path == "/ui/me" || path.starts_with("/ui/me/") || path == "/ui/logout" || open;
        if !allowed {
            if path == "/ui/" && req.method() == Method::GET {
                return Redirect::to("/ui/me").into_response();
            }
            let who = &own.operator;
            return refused(StatusCode::FORBIDDEN, &format!("{who} is not a console admin: your page is /ui/me."));
        }
    }
    let (mut parts, body) = req.into_parts();
    if parts.method == Method::POST {
        let Ok(bytes) = to_bytes(body, MAX_FORM_BYTES).await else {
            return refused(StatusCode::PAYLOAD_TOO_LARGE, "the form is too large");
        };
        let form = Form(serde_urlencoded::from_bytes(&bytes).unwrap_or_default());
        // Before sign-in the form's token must match the sign-in page's cookie; after, the session's.
        let expected = match &session {
            Some(session) => Some(session.csrf.as_str()),
            None => session::cookie(&parts.headers, session::LOGIN_COOKIE),
        };
        let sent = form.get("csrf");
        if !expected.is_some_and(|expected| !sent.is_empty() && crate::secrets::ct_eq(sent, expected)) {
            return refused(StatusCode::FORBIDDEN, "the form's CSRF token is missing or wrong: reload the page");
        }
        parts.extensions.insert(form);
        if let Some(session) = session {
            parts.extensions.insert(Operator { session });
        }
        return next.run(Request::from_parts(parts, Body::empty())).await;
    }
    if let Some(session) = session {
        parts.extensions.insert(Operator { session });
    }
    next.run(Request::from_parts(parts, body)).await
}

/// A refusal as a small page.
fn refused(status: StatusCode, why: &str) -> Response {
    pages::message(status, "Refused", why)
}
