//! The entry that points an MCP client at the gateway over streamable HTTP, in each client's own format: what
//! `mcpgw client-config` prints or writes (`cli/client_config.rs`) and what the console's client setup page shows.
//!
//! Formats: Claude Desktop `{command, args, env}` (stdio only, so HTTP goes through the `mcp-remote` bridge, the key
//! in a variable of the entry's `env`); Cursor `{url, headers}`; Claude Code and VS Code `{type: "http", url,
//! headers}`. The client's view of the servers (contract 8) is asked for with the `X-Mcpgw-Tool-Exposure` header.

use clap::ValueEnum;
use serde_json::{Value, json};

/// The MCP clients `client-config` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    ClaudeDesktop,
    Cursor,
    ClaudeCode,
    Vscode,
}

impl Client {
    /// Every client, in the order pages list them.
    pub const ALL: [Client; 4] = [Client::ClaudeDesktop, Client::Cursor, Client::ClaudeCode, Client::Vscode];

    /// The client's name as people write it.
    pub fn label(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "Claude Desktop",
            Client::Cursor => "Cursor",
            Client::ClaudeCode => "Claude Code",
            Client::Vscode => "VS Code",
        }
    }

    /// The value of `--client`.
    pub fn flag(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "claude-desktop",
            Client::Cursor => "cursor",
            Client::ClaudeCode => "claude-code",
            Client::Vscode => "vscode",
        }
    }

    /// The top-level key of the client's file that holds its servers.
    pub fn servers_key(self) -> &'static str {
        if self == Client::Vscode { "servers" } else { "mcpServers" }
    }

    /// The client's own syntax for an environment variable, or `None` when it cannot expand one.
    pub fn env_reference(self, name: &str) -> Option<String> {
        match self {
            Client::Cursor | Client::Vscode => Some(format!("${{env:{name}}}")),
            Client::ClaudeCode => Some(format!("${{{name}}}")),
            Client::ClaudeDesktop => None,
        }
    }
}

/// `--exposure`: the values of `tool_exposure`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Exposure {
    Gateway,
    Transparent,
    Both,
}

impl Exposure {
    pub fn as_str(self) -> &'static str {
        match self {
            Exposure::Gateway => "gateway",
            Exposure::Transparent => "transparent",
            Exposure::Both => "both",
        }
    }

    /// The view named `text`, if it is one.
    pub fn parse(text: &str) -> Option<Exposure> {
        [Exposure::Gateway, Exposure::Transparent, Exposure::Both].into_iter().find(|e| e.as_str() == text)
    }
}

/// The header that asks for a view over HTTP (`GW_TOOL_EXPOSURE` over stdio).
pub const EXPOSURE_HEADER: &str = "X-Mcpgw-Tool-Exposure";

/// The id of the VS Code input that prompts for the key (kept in VS Code's secret storage).
pub const VSCODE_INPUT_ID: &str = "mcpgw-gateway-key";

/// The VS Code input that prompts for the key, and the reference to it.
pub fn vscode_input() -> (String, Value) {
    let input = json!({"type": "promptString", "id": VSCODE_INPUT_ID, "description": "mcpgw gateway API key",
        "password": true});
    (format!("${{input:{VSCODE_INPUT_ID}}}"), input)
}

fn is_loopback(url: &str) -> bool {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .is_some_and(|h| matches!(h.as_str(), "localhost" | "127.0.0.1" | "[::1]" | "::1"))
}

/// The entry for `client` reaching the gateway at `url` (a URL) with `key` (the key, or the client's reference to
/// it).
pub fn http(client: Client, url: &str, key: &str, exposure: Option<Exposure>) -> Value {
    let mut headers = json!({"Authorization": format!("Bearer {key}")});
    if let Some(exposure) = exposure {
        headers[EXPOSURE_HEADER] = json!(exposure.as_str());
    }
    match client {
        Client::ClaudeDesktop => {
            let mut bridge = vec![json!("-y"), json!("mcp-remote"), json!(url)];
            if url.starts_with("http://") && !is_loopback(url) {
                bridge.push(json!("--allow-http"));
            }
            // The header goes through a variable: Claude Desktop splits arguments with spaces on Windows.
            bridge.extend([json!("--header"), json!("Authorization:${MCPGW_AUTH_HEADER}")]);
            if let Some(exposure) = exposure {
                bridge.extend([json!("--header"), json!(format!("{EXPOSURE_HEADER}:{}", exposure.as_str()))]);
            }
            json!({"command": "npx", "args": bridge, "env": {"MCPGW_AUTH_HEADER": format!("Bearer {key}")}})
        }
        Client::Cursor => json!({"url": url, "headers": headers}),
        Client::ClaudeCode | Client::Vscode => json!({"type": "http", "url": url, "headers": headers}),
    }
}
