//! A local OAuth 2.1 authorization server for black-box tests of the gateway's per-user OAuth broker and of RFC 8693
//! token exchange: RFC 8414 metadata, an `/authorize` endpoint that stands in for the user logging in and consenting
//! (it answers at once with a redirect carrying a code, and RFC 9207's `iss`), a `/token` endpoint for the
//! authorization code grant with PKCE (S256 only), refresh with rotation and token exchange, and RFC 7009 revocation.
//! Tokens are opaque random strings, or with [`AsOptions::jwt`] JWTs of an issuer (`jwt_issuer.rs` signs them; the
//! server then also serves `/jwks` and `/.well-known/openid-configuration`, and is the tokens' `iss`), as the
//! console's sign-in needs; the server records every request, the access tokens it issued and the tokens it
//! was asked to revoke.
//!
//! It runs on 127.0.0.1, port 0, on its own thread with its own tokio runtime, so plain `#[test]` functions can use
//! it; it stops when the [`AuthServer`] is dropped. Include it with
//! `#[path = "common/oauth_as.rs"] mod oauth_as;` (it depends on no other helper).

// Each test file uses part of this module.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::digest::{SHA256, digest};
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Value, json};

pub const TOKEN_EXCHANGE_GRANT: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// The `iss` the redirect carries when [`AsOptions::wrong_iss`] is set.
pub const EVIL_ISSUER: &str = "https://evil.example";

/// How the server behaves.
#[derive(Debug, Clone)]
pub struct AsOptions {
    /// The one client the server knows (default `gw-client`).
    pub client_id: String,
    /// Default `Some("gw-secret")`. When set, `/token` and `/revoke` require it (form fields `client_id` and
    /// `client_secret`, or HTTP Basic); when `None`, the client is public and only its `client_id` is checked.
    pub client_secret: Option<String>,
    /// `expires_in` of every access token issued (default 3600).
    pub expires_in: u64,
    /// The `/authorize` redirect carries `iss={issuer}` (RFC 9207; default true).
    pub send_iss: bool,
    /// The `/authorize` redirect carries `iss=https://evil.example` instead (default false; wins over `send_iss`).
    pub wrong_iss: bool,
    /// Serve `/.well-known/oauth-authorization-server` (RFC 8414; default true; 404 otherwise).
    pub metadata: bool,
    /// Access tokens as JWTs (default `None`: opaque).
    pub jwt: Option<AsJwt>,
}

/// How the server makes JWT access tokens: `sign` signs the claims (e.g. `JwtIssuer::sign`), `jwks` is served at
/// `/jwks`, and `claims` are the next token's claims (the user who "logs in"), changeable while the server runs;
/// `iss`, `iat`, `nbf` and `exp` (5 minutes) are added unless `claims` sets them.
#[derive(Clone)]
pub struct AsJwt {
    pub sign: Arc<dyn Fn(&Value) -> String + Send + Sync>,
    pub jwks: Value,
    pub claims: Arc<Mutex<Value>>,
}

impl std::fmt::Debug for AsJwt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsJwt").finish_non_exhaustive()
    }
}

impl Default for AsOptions {
    fn default() -> Self {
        AsOptions {
            client_id: "gw-client".to_string(),
            client_secret: Some("gw-secret".to_string()),
            expires_in: 3600,
            send_iss: true,
            wrong_iss: false,
            metadata: true,
            jwt: None,
        }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct AsRequest {
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The query parameters (decoded).
    pub query: HashMap<String, String>,
    /// The form fields of the body (decoded; empty when the body is not a form).
    pub form: HashMap<String, String>,
    /// The `Authorization` header, as sent.
    pub authorization: Option<String>,
}

/// A code handed out by `/authorize`, until it is redeemed.
#[derive(Debug, Clone)]
struct CodeGrant {
    client_id: String,
    redirect_uri: String,
    code_challenge: String,
    scope: Option<String>,
    resource: Option<String>,
}

/// A live refresh token.
#[derive(Debug, Clone)]
struct RefreshGrant {
    scope: Option<String>,
    resource: Option<String>,
    /// The access tokens issued together with this refresh token.
    access_tokens: Vec<String>,
}

#[derive(Default)]
struct Inner {
    seen: Vec<AsRequest>,
    codes: HashMap<String, CodeGrant>,
    refresh: HashMap<String, RefreshGrant>,
    issued: Vec<String>,
    issued_refresh: Vec<String>,
    revoked: Vec<String>,
    /// Access tokens that were revoked (themselves or through their refresh token).
    dead: Vec<String>,
    refuse_refresh: bool,
    counter: u64,
}

struct Shared {
    options: AsOptions,
    issuer: String,
    inner: Mutex<Inner>,
}

/// The running server; it stops when dropped.
pub struct AuthServer {
    /// `http://127.0.0.1:PORT`, no trailing slash; also the issuer.
    pub url: String,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl AuthServer {
    pub fn start(options: AsOptions) -> AuthServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared { options, issuer: url.clone(), inner: Mutex::new(Inner::default()) });
        let app = Router::new().fallback(handle).with_state(Arc::clone(&shared));
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stop.await;
                    })
                    .await;
            });
        });
        AuthServer { url, shared, shutdown: Some(shutdown) }
    }

    pub fn authorize_url(&self) -> String {
        format!("{}/authorize", self.url)
    }

    pub fn token_url(&self) -> String {
        format!("{}/token", self.url)
    }

    pub fn revocation_url(&self) -> String {
        format!("{}/revoke", self.url)
    }

    /// `{url}/.well-known/oauth-authorization-server`.
    pub fn metadata_url(&self) -> String {
        format!("{}/.well-known/oauth-authorization-server", self.url)
    }

    /// The issuer identifier, equal to [`AuthServer::url`].
    pub fn issuer(&self) -> String {
        self.url.clone()
    }

    pub fn options(&self) -> &AsOptions {
        &self.shared.options
    }

    /// Every request the server saw, in order.
    pub fn seen(&self) -> Vec<AsRequest> {
        self.shared.inner.lock().unwrap().seen.clone()
    }

    /// The requests seen on `path` (e.g. `/token`), in order.
    pub fn seen_on(&self, path: &str) -> Vec<AsRequest> {
        self.seen().into_iter().filter(|r| r.path == path).collect()
    }

    /// Makes every refresh_token grant fail with 400 `{"error":"invalid_grant"}` from now on (true) or not (false).
    pub fn refuse_refresh(&self, refuse: bool) {
        self.shared.inner.lock().unwrap().refuse_refresh = refuse;
    }

    /// The access tokens issued so far, in order (authorization_code, refresh and token-exchange grants).
    pub fn issued(&self) -> Vec<String> {
        self.shared.inner.lock().unwrap().issued.clone()
    }

    /// The refresh tokens issued so far, in order (rotated ones included).
    pub fn issued_refresh(&self) -> Vec<String> {
        self.shared.inner.lock().unwrap().issued_refresh.clone()
    }

    /// Tokens that /revoke was called with.
    pub fn revoked(&self) -> Vec<String> {
        self.shared.inner.lock().unwrap().revoked.clone()
    }

    /// Whether `access_token` was issued here and not revoked (itself or through its refresh token). Expiry is not
    /// tracked.
    pub fn is_active(&self, access_token: &str) -> bool {
        let inner = self.shared.inner.lock().unwrap();
        inner.issued.iter().any(|t| t == access_token) && !inner.dead.iter().any(|t| t == access_token)
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Every request lands here: recorded, then dispatched on method and path.
async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query = parse_form(uri.query().unwrap_or("").as_bytes());
    let form = parse_form(&body);
    let authorization = headers.get(header::AUTHORIZATION).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let request = AsRequest { method: method.to_string(), path: uri.path().to_string(), query, form, authorization };
    shared.inner.lock().unwrap().seen.push(request.clone());
    match (request.method.as_str(), request.path.as_str()) {
        ("GET", "/.well-known/oauth-authorization-server") if shared.options.metadata => metadata(&shared),
        ("GET", "/.well-known/openid-configuration") if shared.options.jwt.is_some() => metadata(&shared),
        ("GET", "/jwks") if shared.options.jwt.is_some() => {
            json_response(StatusCode::OK, &shared.options.jwt.as_ref().map(|j| j.jwks.clone()).unwrap_or_default())
        }
        ("GET", "/authorize") => authorize(&shared, &request.query),
        ("POST", "/token") => token(&shared, &request),
        ("POST", "/revoke") => revoke(&shared, &request),
        _ => json_response(StatusCode::NOT_FOUND, &json!({"error": "not_found"})),
    }
}

fn metadata(shared: &Shared) -> Response {
    let mut document = metadata_document(shared);
    if shared.options.jwt.is_some() {
        document["jwks_uri"] = json!(format!("{}/jwks", shared.issuer));
    }
    json_response(StatusCode::OK, &document)
}

fn metadata_document(shared: &Shared) -> Value {
    let issuer = &shared.issuer;
    let auth_methods: Vec<&str> = if shared.options.client_secret.is_some() {
        vec!["client_secret_post", "client_secret_basic"]
    } else {
        vec!["none"]
    };
    json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "revocation_endpoint": format!("{issuer}/revoke"),
            "response_types_supported": ["code"],
            "code_challenge_methods_supported": ["S256"],
            "grant_types_supported": ["authorization_code", "refresh_token", TOKEN_EXCHANGE_GRANT],
            "token_endpoint_auth_methods_supported": auth_methods,
            "revocation_endpoint_auth_methods_supported": auth_methods,
            "authorization_response_iss_parameter_supported": true,
    })
}

/// Stands in for the user logging in and consenting: checks the request and redirects back with a code at once.
fn authorize(shared: &Shared, query: &HashMap<String, String>) -> Response {
    let get = |name: &str| query.get(name).filter(|v| !v.is_empty()).cloned();
    if get("response_type").as_deref() != Some("code") {
        return oauth_error(StatusCode::BAD_REQUEST, "unsupported_response_type", "response_type must be code");
    }
    if get("client_id").as_deref() != Some(shared.options.client_id.as_str()) {
        return oauth_error(StatusCode::BAD_REQUEST, "unauthorized_client", "unknown client_id");
    }
    let Some(redirect_uri) = get("redirect_uri") else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "redirect_uri is required");
    };
    let Some(code_challenge) = get("code_challenge") else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "code_challenge is required (PKCE)");
    };
    if get("code_challenge_method").as_deref() != Some("S256") {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "code_challenge_method must be S256");
    }
    let code = {
        let mut inner = shared.inner.lock().unwrap();
        inner.counter += 1;
        let code = format!("code-{}-{}", inner.counter, random_hex());
        let grant = CodeGrant {
            client_id: shared.options.client_id.clone(),
            redirect_uri: redirect_uri.clone(),
            code_challenge,
            scope: get("scope"),
            resource: get("resource"),
        };
        inner.codes.insert(code.clone(), grant);
        code
    };
    let mut params = vec![("code", code)];
    if let Some(state) = query.get("state") {
        params.push(("state", state.clone()));
    }
    if shared.options.wrong_iss {
        params.push(("iss", EVIL_ISSUER.to_string()));
    } else if shared.options.send_iss {
        params.push(("iss", shared.issuer.clone()));
    }
    let encoded: Vec<String> = params.iter().map(|(k, v)| format!("{k}={}", percent_encode(v))).collect();
    let separator = match redirect_uri.find('?') {
        None => "?",
        Some(_) if redirect_uri.ends_with('?') || redirect_uri.ends_with('&') => "",
        Some(_) => "&",
    };
    let location = format!("{redirect_uri}{separator}{}", encoded.join("&"));
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::FOUND;
    let value = HeaderValue::from_str(&location).unwrap_or_else(|_| HeaderValue::from_static("/"));
    response.headers_mut().insert(header::LOCATION, value);
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn token(shared: &Shared, request: &AsRequest) -> Response {
    if !client_authenticated(shared, request) {
        return invalid_client();
    }
    let form = &request.form;
    match form.get("grant_type").map(String::as_str) {
        Some("authorization_code") => authorization_code(shared, form),
        Some("refresh_token") => refresh(shared, form),
        Some(TOKEN_EXCHANGE_GRANT) => token_exchange(shared, form),
        Some(_) => oauth_error(StatusCode::BAD_REQUEST, "unsupported_grant_type", "unsupported grant_type"),
        None => oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "grant_type is required"),
    }
}

fn authorization_code(shared: &Shared, form: &HashMap<String, String>) -> Response {
    let mut inner = shared.inner.lock().unwrap();
    // Single use: the code is gone after the first attempt to redeem it, whether or not that attempt succeeds.
    let Some(grant) = form.get("code").and_then(|code| inner.codes.remove(code)) else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "unknown or used code");
    };
    if grant.client_id != shared.options.client_id {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "code issued to another client");
    }
    if form.get("redirect_uri") != Some(&grant.redirect_uri) {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "redirect_uri does not match");
    }
    let Some(verifier) = form.get("code_verifier") else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "code_verifier is required");
    };
    if !valid_verifier(verifier) || pkce_challenge(verifier) != grant.code_challenge {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "code_verifier does not match the challenge");
    }
    issue_pair(shared, &mut inner, grant.scope, grant.resource)
}

fn refresh(shared: &Shared, form: &HashMap<String, String>) -> Response {
    let mut inner = shared.inner.lock().unwrap();
    if inner.refuse_refresh {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "refresh refused");
    }
    // Rotation: the refresh token presented is invalid from now on.
    let Some(grant) = form.get("refresh_token").and_then(|token| inner.refresh.remove(token)) else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", "unknown, rotated or revoked refresh_token");
    };
    issue_pair(shared, &mut inner, grant.scope, grant.resource)
}

/// A new access token and a new refresh token.
fn issue_pair(shared: &Shared, inner: &mut Inner, scope: Option<String>, resource: Option<String>) -> Response {
    inner.counter += 1;
    let n = inner.counter;
    let access_token = match &shared.options.jwt {
        Some(jwt) => {
            let mut claims = jwt.claims.lock().unwrap().clone();
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
            for (name, value) in
                [("iss", json!(shared.issuer)), ("iat", json!(now)), ("nbf", json!(now)), ("exp", json!(now + 300))]
            {
                if claims.get(name).is_none() {
                    claims[name] = value;
                }
            }
            (jwt.sign)(&claims)
        }
        None => format!("at-{n}-{}", random_hex()),
    };
    let refresh_token = format!("rt-{n}-{}", random_hex());
    inner.issued.push(access_token.clone());
    inner.issued_refresh.push(refresh_token.clone());
    let grant = RefreshGrant { scope: scope.clone(), resource, access_tokens: vec![access_token.clone()] };
    inner.refresh.insert(refresh_token.clone(), grant);
    let mut body = json!({
        "access_token": access_token,
        "token_type": "Bearer",
        "expires_in": shared.options.expires_in,
        "refresh_token": refresh_token,
    });
    if let Some(scope) = scope {
        body["scope"] = json!(scope);
    }
    json_response(StatusCode::OK, &body)
}

/// RFC 8693: the token is derived from a hash of the subject token (never the subject token itself).
fn token_exchange(shared: &Shared, form: &HashMap<String, String>) -> Response {
    let Some(subject_token) = form.get("subject_token").filter(|t| !t.is_empty()) else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "subject_token is required");
    };
    if form.get("subject_token_type").map(String::as_str) != Some(ACCESS_TOKEN_TYPE) {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "subject_token_type must be access_token");
    }
    let audience = form.get("audience").filter(|a| !a.is_empty()).map_or("none", String::as_str);
    let hash = hex(digest(&SHA256, subject_token.as_bytes()).as_ref());
    let mut inner = shared.inner.lock().unwrap();
    inner.counter += 1;
    let access_token = format!("xchg-{}-{audience}-{}", &hash[..12], inner.counter);
    inner.issued.push(access_token.clone());
    json_response(
        StatusCode::OK,
        &json!({
            "access_token": access_token,
            "issued_token_type": ACCESS_TOKEN_TYPE,
            "token_type": "Bearer",
            "expires_in": shared.options.expires_in,
        }),
    )
}

/// RFC 7009: records the token; a refresh token and the access tokens issued with it become invalid. Unknown tokens
/// are answered 200 as well.
fn revoke(shared: &Shared, request: &AsRequest) -> Response {
    if !client_authenticated(shared, request) {
        return invalid_client();
    }
    let Some(token) = request.form.get("token").filter(|t| !t.is_empty()) else {
        return oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "token is required");
    };
    let mut inner = shared.inner.lock().unwrap();
    inner.revoked.push(token.clone());
    if let Some(grant) = inner.refresh.remove(token) {
        inner.dead.extend(grant.access_tokens);
    } else if inner.issued.contains(token) {
        inner.dead.push(token.clone());
        // An access token's refresh token stays valid (RFC 7009 leaves this to the server).
    }
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::OK;
    response
}

/// Client authentication at `/token` and `/revoke`: HTTP Basic when an `Authorization: Basic` header is sent, the
/// form fields otherwise. A public client (no secret configured) only has to name itself.
fn client_authenticated(shared: &Shared, request: &AsRequest) -> bool {
    let (client_id, client_secret) = match request.authorization.as_deref().and_then(basic_credentials) {
        Some((id, secret)) => (Some(id), Some(secret)),
        None => (request.form.get("client_id").cloned(), request.form.get("client_secret").cloned()),
    };
    let id_ok = client_id.as_deref() == Some(shared.options.client_id.as_str());
    let secret_ok = match &shared.options.client_secret {
        Some(expected) => client_secret.as_deref() == Some(expected.as_str()),
        None => true,
    };
    id_ok && secret_ok
}

/// 401 `{"error":"invalid_client"}`, with the `WWW-Authenticate` challenge RFC 6749 section 5.2 asks for.
fn invalid_client() -> Response {
    let mut response = oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "client authentication failed");
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"oauth_as\""));
    response
}

/// `Basic base64(urlencode(id):urlencode(secret))` (RFC 6749 section 2.3.1) -> (id, secret).
fn basic_credentials(header_value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = header_value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((form_decode(id), form_decode(secret)))
}

/// RFC 7636: 43 to 128 characters of `[A-Za-z0-9-._~]`.
fn valid_verifier(verifier: &str) -> bool {
    (43..=128).contains(&verifier.len()) && verifier.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

/// `BASE64URL-NOPAD(SHA256(verifier))`, the S256 code challenge of a verifier.
pub fn pkce_challenge(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(digest(&SHA256, verifier.as_bytes()).as_ref())
}

fn parse_form(bytes: &[u8]) -> HashMap<String, String> {
    serde_urlencoded::from_bytes::<Vec<(String, String)>>(bytes).unwrap_or_default().into_iter().collect()
}

fn form_decode(s: &str) -> String {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&format!("v={s}")).unwrap_or_default();
    pairs.into_iter().next().map_or_else(|| s.to_string(), |(_, v)| v)
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn random_hex() -> String {
    let mut bytes = [0u8; 8];
    SystemRandom::new().fill(&mut bytes).unwrap();
    hex(&bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    json_response(status, &json!({"error": error, "error_description": description}))
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A browser for the tests: opens `url` and follows redirects, with the gateway's `public` URL mapped to `origin` (the
/// address it listens on, as a proxy in front of it would). Returns the last status, its body and every URL visited.
pub fn browse(url: &str, public: &str, origin: &str) -> (u16, String, Vec<String>) {
    mcpgw::outbound::ensure_crypto_provider();
    let client = reqwest::blocking::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let mut visited = vec![url.to_string()];
    let mut next = url.replace(public, origin);
    for _ in 0..5 {
        let response = client.get(&next).send().unwrap();
        let status = response.status().as_u16();
        let Some(location) = response.headers().get("location").map(|l| l.to_str().unwrap().to_string()) else {
            return (status, response.text().unwrap(), visited);
        };
        assert_eq!(status, 302, "{next}");
        visited.push(location.clone());
        next = location.replace(public, origin);
    }
    panic!("too many redirects: {visited:?}");
}
