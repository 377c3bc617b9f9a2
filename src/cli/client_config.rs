//! `mcpgw client-config`: the entry that points an MCP client at the gateway, printed or merged into its file.
//!
//! Formats: Claude Desktop `{"mcpServers": {name: {command, args, env}}}` (stdio only, so HTTP goes through the
//! `mcp-remote` bridge); Cursor `{"mcpServers": {name: {url, headers}}}`; Claude Code `.mcp.json`
//! `{"mcpServers": {name: {type: "http", url, headers}}}`; VS Code `.vscode/mcp.json` `{"servers": {name: {type,
//! url, headers}}, "inputs": [...]}`. Keys: `--key-from-env NAME` writes the client's own variable syntax
//! (`${env:NAME}` for Cursor and VS Code, `${NAME}` for Claude Code); Claude Desktop cannot expand variables, so the
//! key is read from NAME now and written into the file. Without `--key-from-env`, VS Code gets an `inputs` prompt
//! (the key stays in VS Code's secret storage) and the other clients the key from `GW_GATEWAY_KEY`.
//!
//! `--exposure` asks for a view of the servers (contract 8): the `X-Mcpgw-Tool-Exposure` header over HTTP,
//! `GW_TOOL_EXPOSURE` over stdio; the MCP configuration's `tool_exposure` must be `"both"` for it to choose.
//!
//! `--write` merges the entry into the client's file: other servers and other top-level keys are kept, the old file is
//! copied to `<file>.bak` first, a missing file is created. Notes go to stderr, so stdout is always valid JSON.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde_json::{Map, Value, json};

use super::output::{CliError, emit};
use crate::config::{self, fsutil};
use crate::manage::client_entry;
pub use crate::manage::client_entry::{Client, Exposure};

/// How the client reaches the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClientTransport {
    /// Streamable HTTP with `Authorization: Bearer <key>`.
    Http,
    /// The client starts `mcpgw serve --transport stdio` itself.
    Stdio,
}

/// Flags of `mcpgw client-config`.
#[derive(Debug, Args)]
pub struct ClientConfigArgs {
    /// The MCP client to configure.
    #[arg(long, value_enum)]
    pub client: Client,
    /// Streamable HTTP to a running gateway, or a gateway process started by the client over stdio.
    #[arg(long, value_enum, default_value = "http")]
    pub transport: ClientTransport,
    /// Refer to the gateway key through this environment variable instead of writing the key into the file.
    #[arg(long, value_name = "NAME")]
    pub key_from_env: Option<String>,
    /// The gateway's MCP endpoint (HTTP transport).
    #[arg(long, value_name = "URL", default_value = "http://localhost:8000/mcp/")]
    pub url: String,
    /// The server's name in the client's config.
    #[arg(long, value_name = "NAME", default_value = "mcpgw")]
    pub name: String,
    /// The gateway config file the stdio entry passes to `mcpgw serve` [default: $HOME/.gw/gw_mcp_config.json]
    #[arg(long, env = "GW_CONFIG_PATH", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// GW_PROJECT_ID for the stdio entry (optional; must match the key's project).
    #[arg(long, value_name = "ID")]
    pub project_id: Option<String>,
    /// GW_USER_ID for the stdio entry (optional; must match the key's user).
    #[arg(long, value_name = "ID")]
    pub user_id: Option<String>,
    /// Merge the entry into the client's config file (keeping a .bak copy) instead of printing it.
    #[arg(long)]
    pub write: bool,
    /// The client's config file for --write [default: the client's usual location]
    #[arg(long, value_name = "PATH")]
    pub config_file: Option<PathBuf>,
    /// The view of the servers this client asks for: the gateway's tools, the upstream tools themselves, or both
    /// (the MCP configuration's tool_exposure must be "both" for a client to choose).
    #[arg(long, value_enum)]
    pub exposure: Option<Exposure>,
}

impl Client {
    /// Where the client keeps its MCP servers by default.
    fn default_file(self) -> Result<PathBuf, CliError> {
        let home = || {
            std::env::var_os("HOME")
                .or_else(|| std::env::var_os("USERPROFILE"))
                .map(PathBuf::from)
                .ok_or_else(|| CliError::Usage("HOME is not set; give --config-file".to_string()))
        };
        Ok(match self {
            Client::ClaudeDesktop if cfg!(target_os = "macos") => {
                home()?.join("Library/Application Support/Claude/claude_desktop_config.json")
            }
            Client::ClaudeDesktop if cfg!(windows) => std::env::var_os("APPDATA")
                .map(PathBuf::from)
                .ok_or_else(|| CliError::Usage("APPDATA is not set; give --config-file".to_string()))?
                .join("Claude")
                .join("claude_desktop_config.json"),
            Client::ClaudeDesktop => std::env::var_os("XDG_CONFIG_HOME")
                .map(PathBuf::from)
                .map_or_else(|| home().map(|h| h.join(".config")), Ok)?
                .join("Claude/claude_desktop_config.json"),
            Client::Cursor => home()?.join(".cursor").join("mcp.json"),
            Client::ClaudeCode => PathBuf::from(".mcp.json"),
            Client::Vscode => PathBuf::from(".vscode").join("mcp.json"),
        })
    }
}

/// The value that stands for the key in the client's file, plus any VS Code input to declare.
fn key_value(args: &ClientConfigArgs) -> Result<(String, Option<Value>), CliError> {
    if let Some(name) = &args.key_from_env {
        if let Some(reference) = args.client.env_reference(name) {
            return Ok((reference, None));
        }
        eprintln!(
            "mcpgw: note: Claude Desktop cannot expand environment variables in its config file; the key is read \
             from {name} now and written into the file"
        );
        let key = std::env::var(name).ok().filter(|k| !k.is_empty());
        return key
            .map(|k| (k, None))
            .ok_or_else(|| CliError::Usage(format!("the environment variable {name} is not set")));
    }
    if args.client == Client::Vscode {
        let (reference, input) = client_entry::vscode_input();
        return Ok((reference, Some(input)));
    }
    let key = std::env::var("GW_GATEWAY_KEY").ok().filter(|k| !k.is_empty()).ok_or_else(|| {
        CliError::Usage(
            "no gateway key: set GW_GATEWAY_KEY, or pass --key-from-env NAME to refer to a variable".to_string(),
        )
    })?;
    Ok((key, None))
}

/// The server entry for the client, and the VS Code input it needs (if any).
pub fn entry(args: &ClientConfigArgs) -> Result<(Value, Option<Value>), CliError> {
    let (key, input) = key_value(args)?;
    let client = args.client;
    let entry = match args.transport {
        ClientTransport::Http => {
            if reqwest::Url::parse(&args.url).is_err() {
                return Err(CliError::Usage(format!("--url {:?} is not a URL", args.url)));
            }
            if client == Client::ClaudeDesktop {
                eprintln!(
                    "mcpgw: note: Claude Desktop speaks only stdio to local servers; the entry bridges to the \
                     gateway with `npx mcp-remote` (Node.js needed)"
                );
            }
            client_entry::http(client, &args.url, &key, args.exposure)
        }
        ClientTransport::Stdio => {
            let exe = std::env::current_exe()
                .map_err(|e| CliError::Failed(format!("cannot find the mcpgw binary's path: {e}")))?;
            let gw_config = args.config.clone().unwrap_or_else(config::default_path);
            let gw_config = std::path::absolute(&gw_config).unwrap_or(gw_config);
            let mut env = Map::new();
            env.insert("GW_GATEWAY_KEY".into(), json!(key));
            if let Some(project) = &args.project_id {
                env.insert("GW_PROJECT_ID".into(), json!(project));
            }
            if let Some(user) = &args.user_id {
                env.insert("GW_USER_ID".into(), json!(user));
            }
            if let Some(exposure) = args.exposure {
                env.insert("GW_TOOL_EXPOSURE".into(), json!(exposure.as_str()));
            }
            let mut entry = Map::new();
            if matches!(client, Client::ClaudeCode | Client::Vscode) {
                entry.insert("type".into(), json!("stdio"));
            }
            entry.insert("command".into(), json!(exe.display().to_string()));
            let cfg = gw_config.display().to_string();
            entry.insert("args".into(), json!(["serve", "--transport", "stdio", "--config", cfg]));
            entry.insert("env".into(), Value::Object(env));
            Value::Object(entry)
        }
    };
    Ok((entry, input))
}

/// Puts `entry` (and `input`) into a client config document; other servers and top-level keys stay as they are.
pub fn merge(doc: &mut Value, client: Client, name: &str, entry: Value, input: Option<Value>) -> Result<(), CliError> {
    let Value::Object(root) = doc else {
        return Err(CliError::Failed("the client config file is not a JSON object".to_string()));
    };
    let servers = root.entry(client.servers_key()).or_insert_with(|| json!({}));
    let Value::Object(servers) = servers else {
        return Err(CliError::Failed(format!(
            "\"{}\" in the client config file is not an object",
            client.servers_key()
        )));
    };
    servers.insert(name.to_string(), entry);
    if let Some(input) = input {
        let inputs = root.entry("inputs").or_insert_with(|| json!([]));
        let Value::Array(inputs) = inputs else {
            return Err(CliError::Failed("\"inputs\" in the client config file is not an array".to_string()));
        };
        if !inputs.iter().any(|i| i["id"] == input["id"]) {
            inputs.push(input);
        }
    }
    Ok(())
}

fn write_merged(path: &Path, client: Client, name: &str, entry: Value, input: Option<Value>) -> Result<(), CliError> {
    let existing = match std::fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(CliError::Failed(format!("cannot read {}: {e}", path.display()))),
    };
    let mut doc = match &existing {
        Some(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => json!({}),
        Some(bytes) => serde_json::from_slice(bytes).map_err(|e| {
            CliError::Failed(format!("{} is not valid JSON ({e}); nothing was written", path.display()))
        })?,
        None => json!({}),
    };
    merge(&mut doc, client, name, entry, input)?;
    let mut bytes = serde_json::to_vec_pretty(&doc).map_err(|e| CliError::Failed(e.to_string()))?;
    bytes.push(b'\n');
    let dir = fsutil::parent_dir(path);
    std::fs::create_dir_all(dir).map_err(|e| CliError::Failed(format!("cannot create {}: {e}", dir.display())))?;
    if let Some(old) = &existing {
        let mut backup = path.as_os_str().to_owned();
        backup.push(".bak");
        let backup = PathBuf::from(backup);
        fsutil::write_atomic(&backup, old)
            .map_err(|e| CliError::Failed(format!("cannot write the backup {}: {e}", backup.display())))?;
        eprintln!("mcpgw: previous file kept as {}", backup.display());
    }
    fsutil::write_atomic(path, &bytes).map_err(|e| CliError::Failed(format!("cannot write {}: {e}", path.display())))
}

/// Runs `mcpgw client-config`.
pub fn run(args: &ClientConfigArgs) -> ExitCode {
    let result = (|| {
        let (entry, input) = entry(args)?;
        if !args.write {
            let mut doc = json!({});
            merge(&mut doc, args.client, &args.name, entry, input)?;
            emit(&format!("{}\n", serde_json::to_string_pretty(&doc).unwrap_or_default()));
            return Ok(());
        }
        let path = match &args.config_file {
            Some(path) => path.clone(),
            None => args.client.default_file()?,
        };
        write_merged(&path, args.client, &args.name, entry, input)?;
        emit(&format!("Server {:?} written to {}\n", args.name, path.display()));
        Ok(())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => CliError::report(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manage::client_entry::VSCODE_INPUT_ID;

    #[test]
    fn merge_keeps_other_servers_and_top_level_keys() {
        let mut doc = json!({"theme": "dark", "mcpServers": {"other": {"command": "x"}}});
        merge(&mut doc, Client::Cursor, "mcpgw", json!({"url": "u"}), None).unwrap();
        assert_eq!(doc, json!({"theme": "dark", "mcpServers": {"other": {"command": "x"}, "mcpgw": {"url": "u"}}}));
        let input = json!({"id": VSCODE_INPUT_ID});
        let mut vs = json!({"inputs": [{"id": "other"}]});
        merge(&mut vs, Client::Vscode, "gw", json!({}), Some(input.clone())).unwrap();
        merge(&mut vs, Client::Vscode, "gw", json!({}), Some(input)).unwrap();
        assert_eq!(vs["inputs"].as_array().unwrap().len(), 2);
        assert!(merge(&mut json!([]), Client::Cursor, "gw", json!({}), None).is_err());
    }
}
