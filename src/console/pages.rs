//! The console's pages: each a handler that reads through the admin API ([`api`]) and renders one template of
//! `templates/console/` (askama: compiled in, every value HTML-escaped).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use askama::Template;
use axum::Extension;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde_json::{Value, json};

use super::session::{self, COOKIE_NAME, LIFETIME, LOGIN_COOKIE};
use super::{Console, Form, Operator, api};

/// Renders `page`, or a plain 500 if a template fails (it cannot with the values the pages pass).
pub(super) fn render(status: StatusCode, page: &impl Template) -> Response {
    match page.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(error) => {
            tracing::error!(%error, "a console page did not render");
            (StatusCode::INTERNAL_SERVER_ERROR, "the page did not render").into_response()
        }
    }
}

/// Whether the operator's browser reached us over TLS (a proxy in front says so): the cookies are then `Secure`.
pub(super) fn behind_tls(headers: &HeaderMap) -> bool {
    headers.get("x-forwarded-proto").is_some_and(|proto| proto.as_bytes().eq_ignore_ascii_case(b"https"))
}

/// A path segment, percent-encoded.
pub(super) fn segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[derive(Template)]
#[template(path = "console/message.html")]
struct MessagePage<'a> {
    signed_in: bool,
    csrf: &'a str,
    heading: &'a str,
    text: &'a str,
}

/// A page saying `text`.
pub fn message(status: StatusCode, heading: &str, text: &str) -> Response {
    render(status, &MessagePage { signed_in: false, csrf: "", heading, text })
}

pub async fn not_found() -> Response {
    message(StatusCode::NOT_FOUND, "Not found", "There is no such page in the console.")
}

pub async fn stylesheet() -> Response {
    let css = include_str!("../../templates/console/console.css");
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], css).into_response()
}

#[derive(Template)]
#[template(path = "console/login.html")]
struct LoginPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    problem: Option<&'a str>,
    /// The OAuth issuer to sign in with too, when configured (`oauth.rs`).
    issuer: Option<String>,
}

/// The sign-in page: a fresh token in its forms and in its own cookie.
pub async fn login_form(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    login_page(&console, &headers, StatusCode::OK, None).await
}

async fn login_page(console: &Console, headers: &HeaderMap, status: StatusCode, problem: Option<&str>) -> Response {
    let Ok(token) = crate::secrets::random_token() else {
        return message(StatusCode::INTERNAL_SERVER_ERROR, "Unavailable", "no random numbers to sign in with");
    };
    let issuer = super::oauth::offered_issuer(console);
    let form_target = match &issuer {
        Some(_) => super::oauth::authorization_origin(console).await,
        None => None,
    };
    let mut response = render(status, &LoginPage { signed_in: false, csrf: &token, problem, issuer });
    if let Some(origin) = form_target {
        // The issuer's sign-in form posts here and is redirected there: a browser checks the redirect against this
        // page's `form-action`.
        let policy = super::content_security_policy(&format!(" {origin}"));
        if let Ok(value) = HeaderValue::from_str(&policy) {
            response.headers_mut().insert(header::CONTENT_SECURITY_POLICY, value);
        }
    }
    let cookie = session::set_cookie(LOGIN_COOKIE, Some(&token), Duration::from_secs(3600), behind_tls(headers));
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// Signs in with the admin key (its CSRF token checked by `guard`).
pub async fn login(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Extension(form): Extension<Form>,
) -> Response {
    let snapshot = console.admin.store.snapshot();
    let admin_key = snapshot.file.admin_apikey.as_deref();
    let presented = form.get("admin_key");
    let valid = admin_key.is_some_and(|key| !presented.is_empty() && crate::secrets::ct_eq(presented, key));
    if !valid {
        // Audited as at the API: at most 10 records a second per source address.
        let source = peer.map(|Extension(ConnectInfo(addr))| addr.ip());
        crate::admin::auth::audit_refused_key(&console.admin.audit, source, &snapshot).await;
        return login_page(&console, &headers, StatusCode::UNAUTHORIZED, Some("That is not the admin key.")).await;
    }
    let Ok((id, _)) = console.sessions.start("admin key") else {
        return message(StatusCode::INTERNAL_SERVER_ERROR, "Unavailable", "no random numbers to sign in with");
    };
    let tls = behind_tls(&headers);
    let mut response = Redirect::to("/ui/").into_response();
    for cookie in [
        session::set_cookie(COOKIE_NAME, Some(&id), LIFETIME, tls),
        session::set_cookie(LOGIN_COOKIE, None, LIFETIME, tls),
    ] {
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

/// Ends the session.
pub async fn logout(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    console.sessions.end(&headers);
    let mut response = Redirect::to("/ui/login").into_response();
    let cookie = session::set_cookie(COOKIE_NAME, None, LIFETIME, behind_tls(&headers));
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct OverviewPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    status: String,
    version: String,
    uptime: String,
    configs: usize,
    projects: usize,
    users: usize,
    keys: usize,
    figures: Figures,
}

/// What the metrics say (the registry of this process), for the overview.
#[derive(Default)]
pub(super) struct Figures {
    calls: u64,
    calls_per_second: String,
    p50: String,
    p99: String,
    errors: u64,
    guardrail_blocks: u64,
    quota_rejections: u64,
    sessions: i64,
    processes: i64,
}

/// The sum of a counter family's values, and the part whose label `label` is not `except`.
fn counted(families: &[prometheus::proto::MetricFamily], label: &str, except: &str) -> (u64, u64) {
    let (mut all, mut other) = (0u64, 0u64);
    for metric in families.iter().flat_map(|f| f.get_metric()) {
        let value = metric.get_counter().get_value() as u64;
        all += value;
        if metric.get_label().iter().any(|l| l.name() == label && l.value() != except) {
            other += value;
        }
    }
    (all, other)
}

/// The `q` quantile of histograms (buckets of every label summed), as the upper bound of the bucket holding it, or
/// `-` with no observation.
fn quantile(families: &[prometheus::proto::MetricFamily], q: f64) -> String {
    let mut buckets: Vec<(f64, u64)> = Vec::new();
    let mut total = 0u64;
    for histogram in families.iter().flat_map(|f| f.get_metric()).map(|m| m.get_histogram()) {
        total += histogram.get_sample_count();
        for (i, bucket) in histogram.get_bucket().iter().enumerate() {
            match buckets.get_mut(i) {
                Some(slot) => slot.1 += bucket.cumulative_count(),
                None => buckets.push((bucket.upper_bound(), bucket.cumulative_count())),
            }
        }
    }
    if total == 0 {
        return "-".into();
    }
    let rank = (q * total as f64).ceil() as u64;
    let bound = buckets.iter().find(|(_, count)| *count >= rank).map_or(f64::INFINITY, |(bound, _)| *bound);
    if bound.is_infinite() {
        return "over the last bucket".into();
    }
    if bound < 1.0 { format!("≤ {} ms", bound * 1000.0) } else { format!("≤ {bound} s") }
}

impl Figures {
    pub(super) fn read(console: &Console) -> Figures {
        use prometheus::core::Collector;
        let metrics = &console.admin.metrics;
        let (calls, errors) = counted(&metrics.tool_calls.collect(), "outcome", "success");
        let (guardrail_blocks, _) = counted(&metrics.guardrail_blocks.collect(), "", "");
        let (quota_rejections, _) = counted(&metrics.quota_rejections.collect(), "", "");
        let durations = metrics.tool_call_duration.collect();
        // Calls a second since the last look at the overview (since the start at the first).
        let now = std::time::Instant::now();
        let mut last = console.calls_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (since, before) = last.unwrap_or((console.admin.started, 0));
        let seconds = now.duration_since(since).as_secs_f64();
        let rate = if seconds > 0.0 { calls.saturating_sub(before) as f64 / seconds } else { 0.0 };
        *last = Some((now, calls));
        Figures {
            calls,
            calls_per_second: format!("{rate:.1}"),
            p50: quantile(&durations, 0.5),
            p99: quantile(&durations, 0.99),
            errors,
            guardrail_blocks,
            quota_rejections,
            sessions: metrics.sessions.get(),
            processes: metrics.upstream_processes.get(),
        }
    }
}

pub async fn overview(State(console): State<Arc<Console>>, Extension(op): Extension<Operator>) -> Response {
    let health = api::get(&console, &op.session.operator, "/api/v1/system/health").await.unwrap_or(Value::Null);
    let text = |field: &str| health.get(field).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
    let snapshot = console.admin.store.snapshot();
    let file = &snapshot.file;
    let seconds = console.admin.started.elapsed().as_secs();
    render(
        StatusCode::OK,
        &OverviewPage {
            signed_in: true,
            csrf: &op.session.csrf,
            status: text("status").unwrap_or_else(|| "unknown".into()),
            version: env!("CARGO_PKG_VERSION").to_string(),
            uptime: format!("{}h {:02}m", seconds / 3600, seconds % 3600 / 60),
            configs: file.mcp_configs.len(),
            projects: file.projects.len(),
            users: file.users.len(),
            keys: file.apikeys.len(),
            figures: Figures::read(&console),
        },
    )
}

/// One key as the keys page lists it.
struct KeyRow {
    key_id: String,
    project_id: String,
    user_id: String,
    created_at: String,
    disabled: bool,
}

/// A key shown once.
struct Created {
    key_id: String,
    api_key: String,
}

#[derive(Template)]
#[template(path = "console/keys.html")]
struct KeysPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    problem: Option<String>,
    created: Option<Created>,
    projects: Vec<(String, String)>,
    users: Vec<(String, String)>,
    keys: Vec<KeyRow>,
    shown: usize,
    total: usize,
}

/// The keys listed at most on one page.
const KEYS_SHOWN: usize = 500;

async fn keys_page(console: &Console, op: &Operator, problem: Option<String>, created: Option<Created>) -> Response {
    // Read from the configuration as it is now (what `GET /api/v1/api-keys` lists), only the keys shown: with 10,000
    // keys the page stays as fast as with ten. Every change still goes through the API.
    let snapshot = console.admin.store.snapshot();
    let keys: Vec<KeyRow> = snapshot
        .file
        .apikeys
        .iter()
        .take(KEYS_SHOWN)
        .map(|(key, record)| KeyRow {
            key_id: crate::secrets::key_id(key),
            project_id: record.project_id.clone(),
            user_id: record.user_id.clone(),
            created_at: record.created_at.clone().unwrap_or_default(),
            disabled: record.is_disabled(),
        })
        .collect();
    let total = snapshot.file.apikeys.len();
    let projects = snapshot.file.projects.iter().map(|(id, p)| (id.clone(), format!("{} ({id})", p.project_name)));
    let users = snapshot.file.users.iter().map(|(id, u)| (id.clone(), format!("{} ({id})", u.email)));
    let status = if problem.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    render(
        status,
        &KeysPage {
            signed_in: true,
            csrf: &op.session.csrf,
            problem,
            created,
            projects: projects.collect(),
            users: users.collect(),
            shown: keys.len(),
            total,
            keys,
        },
    )
}

pub async fn keys(State(console): State<Arc<Console>>, Extension(op): Extension<Operator>) -> Response {
    keys_page(&console, &op, None, None).await
}

/// The key of a create or rotate answer, to show once.
fn created(data: &Value) -> Option<Created> {
    let text = |field: &str| data.get(field).and_then(Value::as_str).map(str::to_string);
    Some(Created { key_id: text("key_id")?, api_key: text("api_key")? })
}

/// `POST /ui/keys`: a new key for the project and user chosen (`POST /api/v1/users/{user}/api-keys`).
pub async fn create_key(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
) -> Response {
    let path = format!("/api/v1/users/{}/api-keys", segment(form.get("user_id")));
    let body = json!({"project_id": form.get("project_id")});
    match api::call(&console, &op.session.operator, Method::POST, &path, Some(body)).await.data() {
        Ok(data) => keys_page(&console, &op, None, created(&data)).await,
        Err(problem) => keys_page(&console, &op, Some(problem), None).await,
    }
}

/// `POST /ui/keys/{key_id}/{rotate|disable|enable}`.
pub async fn key_action(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Path((key_id, action)): Path<(String, String)>,
) -> Response {
    if !["rotate", "disable", "enable"].contains(&action.as_str()) {
        return message(StatusCode::NOT_FOUND, "Not found", "There is no such action on a key.");
    }
    let path = format!("/api/v1/api-keys/{}/{action}", segment(&key_id));
    match api::call(&console, &op.session.operator, Method::POST, &path, None).await.data() {
        Ok(data) if action == "rotate" => keys_page(&console, &op, None, created(&data)).await,
        Ok(_) => Redirect::to("/ui/keys").into_response(),
        Err(problem) => keys_page(&console, &op, Some(problem), None).await,
    }
}
