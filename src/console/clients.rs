//! The client setup page: the entry that points each MCP client at the gateway (`mcpgw client-config`'s, from
//! `manage/client_entry.rs`), for the gateway's URL and view the operator gives, the key referred to through an
//! environment variable (never a key itself), with the command that writes it into the client's file.

use askama::Template;
use axum::Extension;
use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::json;

use super::Operator;
use super::pages::render;
use crate::manage::client_entry::{self, Client, Exposure};

/// The gateway's MCP endpoint when the operator gives none.
const DEFAULT_URL: &str = "http://localhost:8000/mcp/";

/// The environment variable the entries read the key from when the operator names none.
const DEFAULT_KEY_ENV: &str = "MCPGW_GATEWAY_KEY";

#[derive(Deserialize)]
pub struct Choice {
    url: Option<String>,
    exposure: Option<String>,
    key_env: Option<String>,
}

/// One client's entry.
struct Entry {
    label: &'static str,
    file: &'static str,
    json: String,
    command: String,
    note: &'static str,
}

#[derive(Template)]
#[template(path = "console/clients.html")]
struct ClientsPage<'a> {
    signed_in: bool,
    csrf: &'a str,
    url: String,
    exposure: String,
    key_env: String,
    problem: Option<String>,
    entries: Vec<Entry>,
}

fn file_of(client: Client) -> &'static str {
    match client {
        Client::ClaudeDesktop => "claude_desktop_config.json",
        Client::Cursor => "~/.cursor/mcp.json",
        Client::ClaudeCode => ".mcp.json",
        Client::Vscode => ".vscode/mcp.json",
    }
}

pub async fn clients(Extension(op): Extension<Operator>, Query(choice): Query<Choice>) -> Response {
    let url = choice.url.map(|u| u.trim().to_string()).filter(|u| !u.is_empty()).unwrap_or(DEFAULT_URL.into());
    let key_env =
        choice.key_env.map(|k| k.trim().to_string()).filter(|k| !k.is_empty()).unwrap_or(DEFAULT_KEY_ENV.into());
    let exposure_text = choice.exposure.unwrap_or_default();
    let exposure = Exposure::parse(&exposure_text);
    let mut problems = Vec::new();
    if reqwest::Url::parse(&url).map(|u| !matches!(u.scheme(), "http" | "https")).unwrap_or(true) {
        problems.push(format!("{url:?} is not an http(s) URL."));
    }
    if !key_env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        || key_env.starts_with(|c: char| c.is_ascii_digit())
    {
        problems.push(format!("{key_env:?} is not the name of an environment variable."));
    }
    if !exposure_text.is_empty() && exposure.is_none() {
        problems.push(format!("{exposure_text:?} is not a view (gateway, transparent or both)."));
    }
    let entries = if problems.is_empty() {
        Client::ALL
            .into_iter()
            .map(|client| {
                let (key, input, note) = match client {
                    Client::Vscode => {
                        let (reference, input) = client_entry::vscode_input();
                        (reference, Some(input), "VS Code asks for the key once and keeps it in its secret storage.")
                    }
                    Client::ClaudeDesktop => (
                        "<the key>".to_string(),
                        None,
                        "Claude Desktop cannot read environment variables in its file: the key is written into it \
                         (through the mcp-remote bridge, Node.js needed).",
                    ),
                    _ => {
                        (client.env_reference(&key_env).unwrap_or_default(), None, "The key is read from the variable.")
                    }
                };
                let mut document =
                    json!({client.servers_key(): {"mcpgw": client_entry::http(client, &url, &key, exposure)}});
                if let Some(input) = input {
                    document["inputs"] = json!([input]);
                }
                let mut command = format!("mcpgw client-config --client {} --url {url}", client.flag());
                if client != Client::Vscode {
                    command.push_str(&format!(" --key-from-env {key_env}"));
                }
                if let Some(exposure) = exposure {
                    command.push_str(&format!(" --exposure {}", exposure.as_str()));
                }
                command.push_str(" --write");
                Entry {
                    label: client.label(),
                    file: file_of(client),
                    json: serde_json::to_string_pretty(&document).unwrap_or_default(),
                    command,
                    note,
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let problem = (!problems.is_empty()).then(|| problems.join(" "));
    let status = if problem.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    render(
        status,
        &ClientsPage {
            signed_in: true,
            csrf: &op.session.csrf,
            url,
            exposure: exposure.map(Exposure::as_str).unwrap_or_default().to_string(),
            key_env,
            problem,
            entries,
        },
    )
}
