//! The servers pages: every server of every MCP configuration, adding one, and a server's entry and tools with the
//! pin review (the pinned and the current definition side by side, the lines that differ marked; approve by hash,
//! forget).

use std::sync::Arc;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use serde_json::{Value, json};
use similar::{DiffOp, TextDiff};

use super::pages::{message, render, segment};
use super::{Console, Form, Operator, api};

/// One server in the list.
struct Row {
    config_name: String,
    config_path: String,
    server_name: String,
    server_path: String,
    runs: String,
    state: String,
}

/// What a server is doing now, in words: its processes, starts and calls, or why its starts fail.
fn state_of(console: &Console, config_id: &str, server: &str, remote: bool) -> String {
    let status = console.admin.pool.server_status(config_id, server);
    if let Some(failing) = status.failing {
        let shown: String = failing.chars().take(200).collect();
        return format!("failing to start: {shown}");
    }
    let mut parts = Vec::new();
    match status.processes {
        0 if status.starting == 0 => parts.push(if remote { "remote" } else { "no process running" }.to_string()),
        0 => {}
        1 => parts.push("1 process".to_string()),
        n => parts.push(format!("{n} processes")),
    }
    if status.starting > 0 {
        parts.push(format!("{} starting", status.starting));
    }
    if status.calls > 0 {
        parts.push(format!("{} call(s) in flight", status.calls));
    }
    parts.join(", ")
}

#[derive(Template)]
#[template(path = "console/servers.html")]
struct ServersPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    problem: Option<String>,
    servers: Vec<Row>,
    configs: Vec<(String, String)>,
}

async fn servers_page(console: &Console, op: &Operator, problem: Option<String>) -> Response {
    let snapshot = console.admin.store.snapshot();
    let mut servers = Vec::new();
    for (id, config) in &snapshot.file.mcp_configs {
        for server in &config.mcp_config {
            let name = server.server_name.as_str();
            let runs = match &server.config.url {
                Some(url) => url.clone(),
                None => format!("{} {}", server.config.command, server.config.args.join(" ")).trim_end().to_string(),
            };
            servers.push(Row {
                state: state_of(console, id, name, server.config.url.is_some()),
                config_name: config.mcp_config_name.clone(),
                config_path: segment(id),
                server_name: name.to_string(),
                server_path: segment(name),
                runs,
            });
        }
    }
    let configs = snapshot.file.mcp_configs.iter().map(|(id, c)| (id.clone(), c.mcp_config_name.clone())).collect();
    let status = if problem.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    render(status, &ServersPage { signed_in: true, csrf: &op.session.csrf, problem, servers, configs })
}

pub async fn servers(State(console): State<Arc<Console>>, Extension(op): Extension<Operator>) -> Response {
    servers_page(&console, &op, None).await
}

/// `POST /ui/servers`: a new server entry (`POST /api/v1/configs/{config}/servers`): a command and its arguments
/// (one per line), or a remote server's URL.
pub async fn add_server(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
) -> Response {
    let (command, url) = (form.get("command").trim(), form.get("url").trim());
    let config = match (command.is_empty(), url.is_empty()) {
        (false, true) => {
            let args: Vec<&str> = form.get("args").lines().map(str::trim).filter(|a| !a.is_empty()).collect();
            json!({"command": command, "args": args})
        }
        (true, false) => json!({"url": url}),
        _ => return servers_page(&console, &op, Some("Give a command or a URL, not both.".into())).await,
    };
    let server_name = form.get("server_name").trim();
    let entry = json!({"server_name": server_name, "config": config});
    let path = format!("/api/v1/configs/{}/servers", segment(form.get("config")));
    match api::call(&console, &op.session.operator, Method::POST, &path, Some(entry)).await.data() {
        Ok(_) => Redirect::to(&format!("/ui/servers/{}/{}", segment(form.get("config")), segment(server_name)))
            .into_response(),
        Err(problem) => servers_page(&console, &op, Some(problem)).await,
    }
}

/// One line of the review: the pinned side and the current side, each marked `same`, `removed` or `added`.
struct DiffRow {
    left: String,
    left_mark: &'static str,
    right: String,
    right_mark: &'static str,
}

/// One tool and its pin.
struct Tool {
    name: String,
    path: String,
    status: String,
    pinned: String,
    pinned_short: String,
    current: String,
    current_short: String,
    diff: Vec<DiffRow>,
}

/// A prompt, resource or resource template and its pin.
struct Offer {
    /// The console's path segment of its pins: `prompts` or `resources`.
    group: &'static str,
    kind: String,
    name: String,
    path: String,
    status: String,
    pinned: String,
    pinned_short: String,
    current: String,
    current_short: String,
}

/// A poisoning finding on one of the server's definitions (contract 7's tool scan, and the same for prompts and
/// resources).
struct Finding {
    item: String,
    kind: String,
    excerpt: String,
}

#[derive(Template)]
#[template(path = "console/server.html")]
struct ServerPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    problem: Option<String>,
    config_name: String,
    config_path: String,
    server_name: String,
    server_path: String,
    entry: String,
    state: String,
    tools: Vec<Tool>,
    offers: Vec<Offer>,
    findings: Vec<Finding>,
}

/// The rows of `GET {base}/{pins}` (prompt-pins or resource-pins), each named by its `key` field.
async fn offers(console: &Console, operator: &str, base: &str, group: &'static str, key: &str) -> Vec<Offer> {
    let pins = if group == "prompts" { "prompt-pins" } else { "resource-pins" };
    let rows = api::get(console, operator, &format!("{base}/{pins}")).await.unwrap_or(Value::Null);
    let text = |item: &Value, field: &str| item.get(field).and_then(Value::as_str).unwrap_or_default().to_string();
    rows.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|item| {
            let (pinned, current) = (text(item, "pinned"), text(item, "current"));
            Offer {
                group,
                kind: item.get("kind").and_then(Value::as_str).unwrap_or(pins.trim_end_matches("-pins")).to_string(),
                name: text(item, key),
                path: segment(&text(item, key)),
                status: text(item, "status"),
                pinned_short: short(&pinned),
                current_short: short(&current),
                pinned,
                current,
            }
        })
        .collect()
}

/// `sha256:` and the first 12 hex digits.
fn short(pin: &str) -> String {
    pin.chars().take(19).collect()
}

/// The pinned and the current definition side by side, by lines of their pretty JSON.
fn side_by_side(pinned: &Value, current: &Value) -> Vec<DiffRow> {
    let (old, new) = (pretty(pinned), pretty(current));
    let diff = TextDiff::from_lines(&old, &new);
    let (old_lines, new_lines): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let line = |lines: &[&str], i: usize| lines.get(i).map_or(String::new(), |l| (*l).to_string());
    let mut rows = Vec::new();
    for op in diff.ops() {
        match *op {
            DiffOp::Equal { old_index, new_index, len } => rows.extend((0..len).map(|i| DiffRow {
                left: line(&old_lines, old_index + i),
                left_mark: "same",
                right: line(&new_lines, new_index + i),
                right_mark: "same",
            })),
            DiffOp::Delete { old_index, old_len, .. } => rows.extend((0..old_len).map(|i| DiffRow {
                left: line(&old_lines, old_index + i),
                left_mark: "removed",
                right: String::new(),
                right_mark: "same",
            })),
            DiffOp::Insert { new_index, new_len, .. } => rows.extend((0..new_len).map(|i| DiffRow {
                left: String::new(),
                left_mark: "same",
                right: line(&new_lines, new_index + i),
                right_mark: "added",
            })),
            DiffOp::Replace { old_index, old_len, new_index, new_len } => {
                rows.extend((0..old_len.max(new_len)).map(|i| DiffRow {
                    left: if i < old_len { line(&old_lines, old_index + i) } else { String::new() },
                    left_mark: if i < old_len { "removed" } else { "same" },
                    right: if i < new_len { line(&new_lines, new_index + i) } else { String::new() },
                    right_mark: if i < new_len { "added" } else { "same" },
                }))
            }
        }
    }
    rows
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

async fn server_page(
    console: &Console,
    op: &Operator,
    config: &str,
    server: &str,
    problem: Option<String>,
) -> Response {
    let operator = &op.session.operator;
    let base = format!("/api/v1/configs/{}/servers/{}", segment(config), segment(server));
    let entry = match api::get(console, operator, &base).await {
        Ok(entry) => entry,
        Err(why) => return message(StatusCode::NOT_FOUND, "Not found", &why),
    };
    let pins = api::get(console, operator, &format!("{base}/tool-pins")).await.unwrap_or(Value::Null);
    let text = |item: &Value, field: &str| item.get(field).and_then(Value::as_str).unwrap_or_default().to_string();
    let tools = pins
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|item| {
            let (pinned, current) = (text(item, "pinned"), text(item, "current"));
            let diff = match (item.get("pinned_definition"), item.get("current_definition")) {
                (Some(p), Some(c)) if pinned != current => side_by_side(p, c),
                _ => Vec::new(),
            };
            Tool {
                name: text(item, "tool_name"),
                path: segment(&text(item, "tool_name")),
                status: text(item, "status"),
                pinned_short: short(&pinned),
                current_short: short(&current),
                pinned,
                current,
                diff,
            }
        })
        .collect();
    let snapshot = console.admin.store.snapshot();
    let config_name =
        snapshot.file.mcp_configs.get(config).map_or_else(|| config.to_string(), |c| c.mcp_config_name.clone());
    let mut listed = offers(console, operator, &base, "prompts", "name").await;
    listed.extend(offers(console, operator, &base, "resources", "uri").await);
    // The tool scan over the definitions as last discovered; the prompts' and resources' findings of their last review.
    let definitions: Vec<Value> = pins
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|item| item.get("current_definition").cloned())
        .collect();
    let mut findings: Vec<Finding> = crate::guardrails::tool_scan::scan(&definitions, &[])
        .into_iter()
        .map(|f| Finding { item: format!("tool {}", f.tool_name), kind: f.kind.to_string(), excerpt: f.excerpt })
        .collect();
    for kind in ["prompt", "resource", "template"] {
        let review = console.admin.pins.last_offers(config, server, kind).unwrap_or_default();
        findings.extend(review.findings.into_iter().map(|(item, finding, excerpt)| Finding {
            item: format!("{kind} {item}"),
            kind: finding.to_string(),
            excerpt,
        }));
    }
    let status = if problem.is_some() { StatusCode::CONFLICT } else { StatusCode::OK };
    render(
        status,
        &ServerPage {
            signed_in: true,
            csrf: &op.session.csrf,
            problem,
            config_name,
            config_path: segment(config),
            server_name: server.to_string(),
            server_path: segment(server),
            state: state_of(console, config, server, entry.pointer("/config/url").is_some_and(|u| !u.is_null())),
            entry: pretty(&entry),
            tools,
            offers: listed,
            findings,
        },
    )
}

pub async fn server(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Path((config, server)): Path<(String, String)>,
) -> Response {
    server_page(&console, &op, &config, &server, None).await
}

/// `POST /ui/servers/{config}/{server}/{tools|prompts|resources}/{item}/{approve|forget}`: the pin routes of the
/// admin API (`tool-pins`, `prompt-pins`, `resource-pins`).
pub async fn pin_action(
    State(console): State<Arc<Console>>,
    Extension(op): Extension<Operator>,
    Extension(form): Extension<Form>,
    Path((config, server, kind, item, action)): Path<(String, String, String, String, String)>,
) -> Response {
    let pins = match kind.as_str() {
        "tools" => "tool-pins",
        "prompts" => "prompt-pins",
        "resources" => "resource-pins",
        _ => return message(StatusCode::NOT_FOUND, "Not found", "There is no such kind of pin."),
    };
    let pin = format!("/api/v1/configs/{}/servers/{}/{pins}/{}", segment(&config), segment(&server), segment(&item));
    let answer = match action.as_str() {
        "approve" => {
            let body = json!({"sha256": form.get("sha256")});
            api::call(&console, &op.session.operator, Method::POST, &format!("{pin}/approve"), Some(body)).await
        }
        "forget" => api::call(&console, &op.session.operator, Method::DELETE, &pin, None).await,
        _ => return message(StatusCode::NOT_FOUND, "Not found", "There is no such action on a pin."),
    };
    match answer.data() {
        Ok(_) => Redirect::to(&format!("/ui/servers/{}/{}", segment(&config), segment(&server))).into_response(),
        Err(problem) => server_page(&console, &op, &config, &server, Some(problem)).await,
    }
}
