//! The pages of who uses what: MCP configurations, projects (and their members), users (with the status of their own
//! upstream credentials, contract 16). Lists are read from the configuration as it is now; every change is a request
//! to the admin API ([`api`]), so it is validated and audited as over HTTP.

use std::sync::Arc;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Value, json};

use super::pages::{message, render, segment};
use super::{Console, Form, Operator, api};

/// The rows listed at most on one page.
const SHOWN: usize = 500;

/// A change through the admin API, then back to `back`, or `page` again with the API's problem.
async fn change<F, Fut>(
    console: &Console,
    op: &Operator,
    call: (Method, String, Option<Value>),
    back: &str,
    page: F,
) -> Response
where
    F: FnOnce(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    let (method, path, body) = call;
    match api::call(console, &op.session.operator, method, &path, body).await.data() {
        Ok(_) => Redirect::to(back).into_response(),
        Err(problem) => page(Some(problem)).await,
    }
}

fn status_of(problem: &Option<String>) -> StatusCode {
    if problem.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK }
}

// ---- MCP configurations

struct ConfigRow {
    id: String,
    path: String,
    name: String,
    servers: usize,
    projects: String,
}

#[derive(Template)]
#[template(path = "console/configs.html")]
struct ConfigsPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    problem: Option<String>,
    configs: Vec<ConfigRow>,
    total: usize,
}

async fn configs_page(console: &Console, op: &Operator, problem: Option<String>) -> Response {
    let snapshot = console.admin.store.snapshot();
    let file = &snapshot.file;
    let configs = file
        .mcp_configs
        .iter()
        .take(SHOWN)
        .map(|(id, c)| ConfigRow {
            id: id.clone(),
            path: segment(id),
            name: c.mcp_config_name.clone(),
            servers: c.mcp_config.len(),
            projects: file
                .projects
                .values()
                .filter(|p| p.mcp_config_id.as_deref() == Some(id))
                .map(|p| p.project_name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
        .collect();
    let status = status_of(&problem);
    render(
        status,
        &ConfigsPage { signed_in: true, csrf: &op.session.csrf, problem, configs, total: file.mcp_configs.len() },
    )
}

pub async fn configs(State(console): State<Arc<Console>>, Extension(op): Extension<Operator>) -> Response {
    configs_page(&console, &op, None).await
}

/// `POST /ui/configs`: a new, empty MCP configuration.
pub async fn create_config(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
) -> Response {
    let call = (Method::POST, "/api/v1/configs".to_string(), Some(json!({"config_name": form.get("config_name")})));
    change(&console, &op, call, "/ui/configs", |p| configs_page(&console, &op, p)).await
}

/// `POST /ui/configs/{config}/{copy|delete}`.
pub async fn config_action(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
    Path((config, action)): Path<(String, String)>,
) -> Response {
    let path = format!("/api/v1/configs/{}", segment(&config));
    let call = match action.as_str() {
        "copy" => (Method::POST, format!("{path}/copy"), Some(json!({"config_name": form.get("config_name")}))),
        "delete" => (Method::DELETE, path, None),
        _ => return message(StatusCode::NOT_FOUND, "Not found", "There is no such action on a configuration."),
    };
    change(&console, &op, call, "/ui/configs", |p| configs_page(&console, &op, p)).await
}

// ---- Projects

struct ProjectRow {
    id: String,
    path: String,
    name: String,
    config_id: String,
    members: Vec<(String, String, String)>,
}

#[derive(Template)]
#[template(path = "console/projects.html")]
struct ProjectsPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    problem: Option<String>,
    projects: Vec<ProjectRow>,
    total: usize,
    configs: Vec<(String, String)>,
}

async fn projects_page(console: &Console, op: &Operator, problem: Option<String>) -> Response {
    let snapshot = console.admin.store.snapshot();
    let file = &snapshot.file;
    let projects = file
        .projects
        .iter()
        .take(SHOWN)
        .map(|(id, p)| ProjectRow {
            id: id.clone(),
            path: segment(id),
            name: p.project_name.clone(),
            config_id: p.mcp_config_id.clone().unwrap_or_default(),
            members: p
                .users
                .iter()
                .map(|u| {
                    let email = file.users.get(u).map(|user| user.email.clone()).unwrap_or_default();
                    (u.clone(), segment(u), email)
                })
                .collect(),
        })
        .collect();
    let configs = file.mcp_configs.iter().map(|(id, c)| (id.clone(), c.mcp_config_name.clone())).collect();
    let status = status_of(&problem);
    let total = file.projects.len();
    render(status, &ProjectsPage { signed_in: true, csrf: &op.session.csrf, problem, projects, total, configs })
}

pub async fn projects(State(console): State<Arc<Console>>, Extension(op): Extension<Operator>) -> Response {
    projects_page(&console, &op, None).await
}

/// `POST /ui/projects`: a new project, with its MCP configuration.
pub async fn create_project(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
) -> Response {
    let mut body = json!({"project_name": form.get("project_name")});
    if !form.get("mcp_config_id").is_empty() {
        body["mcp_config_id"] = json!(form.get("mcp_config_id"));
    }
    let call = (Method::POST, "/api/v1/projects".to_string(), Some(body));
    change(&console, &op, call, "/ui/projects", |p| projects_page(&console, &op, p)).await
}

/// `POST /ui/projects/{project}/{config|add-member|delete}`.
pub async fn project_action(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
    Path((project, action)): Path<(String, String)>,
) -> Response {
    let path = format!("/api/v1/projects/{}", segment(&project));
    let call = match action.as_str() {
        "config" => {
            let config = form.get("mcp_config_id");
            let config = if config.is_empty() { Value::Null } else { json!(config) };
            (Method::PUT, path, Some(json!({"mcp_config_id": config})))
        }
        "add-member" => (Method::POST, format!("{path}/users"), Some(json!({"email": form.get("email").trim()}))),
        "delete" => (Method::DELETE, path, None),
        _ => return message(StatusCode::NOT_FOUND, "Not found", "There is no such action on a project."),
    };
    change(&console, &op, call, "/ui/projects", |p| projects_page(&console, &op, p)).await
}

/// `POST /ui/projects/{project}/members/{user}/remove`.
pub async fn remove_member(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Path((project, user)): Path<(String, String)>,
) -> Response {
    let path = format!("/api/v1/projects/{}/users/{}", segment(&project), segment(&user));
    change(&console, &op, (Method::DELETE, path, None), "/ui/projects", |p| projects_page(&console, &op, p)).await
}

// ---- Users

struct UserRow {
    id: String,
    path: String,
    email: String,
    projects: String,
}

#[derive(Template)]
#[template(path = "console/users.html")]
struct UsersPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    problem: Option<String>,
    users: Vec<UserRow>,
    total: usize,
}

async fn users_page(console: &Console, op: &Operator, problem: Option<String>) -> Response {
    let snapshot = console.admin.store.snapshot();
    let file = &snapshot.file;
    let users = file
        .users
        .iter()
        .take(SHOWN)
        .map(|(id, u)| UserRow {
            id: id.clone(),
            path: segment(id),
            email: u.email.clone(),
            projects: file
                .projects
                .values()
                .filter(|p| p.users.iter().any(|m| m == id))
                .map(|p| p.project_name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
        .collect();
    let status = status_of(&problem);
    render(status, &UsersPage { signed_in: true, csrf: &op.session.csrf, problem, users, total: file.users.len() })
}

pub async fn users(State(console): State<Arc<Console>>, Extension(op): Extension<Operator>) -> Response {
    users_page(&console, &op, None).await
}

/// `POST /ui/users`: a new user.
pub async fn create_user(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
) -> Response {
    let call = (Method::POST, "/api/v1/users".to_string(), Some(json!({"email": form.get("email").trim()})));
    change(&console, &op, call, "/ui/users", |p| users_page(&console, &op, p)).await
}

/// One of a user's upstream credentials (`GET /api/v1/users/{user}/credentials`).
pub(super) struct CredentialRow {
    pub(super) config: String,
    pub(super) server: String,
    pub(super) kind: String,
    pub(super) state: String,
    pub(super) set_at: String,
    pub(super) expires_at: String,
    pub(super) clear_path: Option<String>,
    /// For kind `secret`: where the form that sets values posts, and the names the server declares.
    pub(super) set_path: Option<String>,
    pub(super) declared: Vec<String>,
}

/// The status of `user`'s own credentials, each row's forms posting under `base` (`{base}/credentials/{config}/
/// {server}/set|clear`).
pub(super) async fn credentials(console: &Console, operator: &str, user: &str, base: &str) -> Vec<CredentialRow> {
    let text = |v: &Value, f: &str| v.get(f).map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string));
    let path = format!("/api/v1/users/{}/credentials", segment(user));
    let listed = api::get(console, operator, &path).await.unwrap_or(Value::Null);
    listed
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let set = c.get("set").and_then(Value::as_bool).unwrap_or(false);
            let missing = c.get("missing").and_then(Value::as_array).map_or(0, Vec::len);
            let connected = c.get("connected").and_then(Value::as_bool);
            let state = match (set, missing) {
                _ if connected == Some(true) => "connected".to_string(),
                _ if connected == Some(false) => "not connected".to_string(),
                (false, _) => "not set".to_string(),
                (true, 0) => "set".to_string(),
                (true, n) => format!("set, {n} name(s) missing"),
            };
            let (config, server) =
                (text(c, "mcp_config_id").unwrap_or_default(), text(c, "server_name").unwrap_or_default());
            let slot = format!("{base}/credentials/{}/{}", segment(&config), segment(&server));
            let kind = text(c, "kind").unwrap_or_default();
            let declared = c
                .get("declared")
                .and_then(Value::as_array)
                .map_or_else(Vec::new, |names| names.iter().filter_map(Value::as_str).map(str::to_string).collect());
            CredentialRow {
                clear_path: set.then(|| format!("{slot}/clear")),
                set_path: (kind == "secret").then(|| format!("{slot}/set")),
                declared,
                config: text(c, "mcp_config_name").unwrap_or(config),
                server,
                kind,
                state,
                set_at: text(c, "set_at").filter(|t| t != "null").unwrap_or_default(),
                expires_at: text(c, "expires_at").filter(|t| t != "null").unwrap_or_default(),
            }
        })
        .collect()
}

/// A user's own credential set (`values`: one name and value) or removed (`values` `None`) through the admin API.
pub(super) async fn change_credential(
    console: &Console,
    operator: &str,
    user: &str,
    (config, server): (&str, &str),
    values: Option<Value>,
) -> Result<Value, String> {
    let path = format!("/api/v1/users/{}/credentials/{}/{}", segment(user), segment(config), segment(server));
    let (method, body) = match values {
        Some(values) => (Method::PUT, Some(json!({"values": values}))),
        None => (Method::DELETE, None),
    };
    api::call(console, operator, method, &path, body).await.data()
}

#[derive(Template)]
#[template(path = "console/user.html")]
struct UserPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    problem: Option<String>,
    id: String,
    path: String,
    email: String,
    projects: Vec<String>,
    keys: Vec<(String, String, bool)>,
    credentials: Vec<CredentialRow>,
}

async fn user_page(console: &Console, op: &Operator, user: &str, problem: Option<String>) -> Response {
    let operator = &op.session.operator;
    let path = format!("/api/v1/users/{}", segment(user));
    let found = match api::get(console, operator, &path).await {
        Ok(found) => found,
        Err(problem) => return message(StatusCode::NOT_FOUND, "Not found", &problem),
    };
    let text = |v: &Value, f: &str| v.get(f).map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string));
    let items = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let projects = items(found.get("projects").unwrap_or(&Value::Null))
        .iter()
        .map(|p| text(p, "project_name").unwrap_or_default())
        .collect();
    let listed = api::get(console, operator, &format!("{path}/api-keys")).await.unwrap_or(Value::Null);
    let keys = items(&listed)
        .iter()
        .map(|k| {
            let disabled = k.get("disabled").and_then(Value::as_bool).unwrap_or(false);
            (text(k, "key_id").unwrap_or_default(), text(k, "project_id").unwrap_or_default(), disabled)
        })
        .collect();
    let credentials = credentials(console, operator, user, &format!("/ui/users/{}", segment(user))).await;
    let status = status_of(&problem);
    render(
        status,
        &UserPage {
            signed_in: true,
            csrf: &op.session.csrf,
            problem,
            id: user.to_string(),
            path: segment(user),
            email: text(&found, "email").unwrap_or_default(),
            projects,
            keys,
            credentials,
        },
    )
}

pub async fn user(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Path(user): Path<String>,
) -> Response {
    user_page(&console, &op, &user, None).await
}

/// `POST /ui/users/{user}/delete`.
pub async fn delete_user(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Path(user): Path<String>,
) -> Response {
    let call = (Method::DELETE, format!("/api/v1/users/{}", segment(&user)), None);
    change(&console, &op, call, "/ui/users", |p| users_page(&console, &op, p)).await
}

/// `POST /ui/users/{user}/credentials/{config}/{server}/clear`: the user's credential for that server removed (a
/// token the broker holds is revoked by the API).
pub async fn clear_credential(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Path((user, config, server)): Path<(String, String, String)>,
) -> Response {
    match change_credential(&console, &op.session.operator, &user, (&config, &server), None).await {
        Ok(_) => Redirect::to(&format!("/ui/users/{}", segment(&user))).into_response(),
        Err(problem) => user_page(&console, &op, &user, Some(problem)).await,
    }
}

/// `POST /ui/users/{user}/credentials/{config}/{server}/set`: one value of a user's own credentials of kind `secret`
/// (`PUT /api/v1/users/{user}/credentials/{config}/{server}`, merged by name, sealed before it is written). The value is
/// sent once and never shown.
pub async fn set_credential(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
    Path((user, config, server)): Path<(String, String, String)>,
) -> Response {
    let values = json!({form.get("name").trim(): form.get("value")});
    match change_credential(&console, &op.session.operator, &user, (&config, &server), Some(values)).await {
        Ok(_) => Redirect::to(&format!("/ui/users/{}", segment(&user))).into_response(),
        Err(problem) => user_page(&console, &op, &user, Some(problem)).await,
    }
}
