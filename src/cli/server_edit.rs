//! The flags that describe an upstream server entry for `config add-server` and `config update-server`.
//!
//! An entry comes whole from `--from-file` (JSON, `-` for stdin) or is built from flags; flags given with a file
//! override its fields. `update-server` starts from the current entry as the REST API shows it (secrets masked; the
//! `manage` layer puts a masked value back to the stored secret), applies the flags and replaces the entry, which is
//! exactly the GET, edit, PUT round trip of the REST API.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;
use serde_json::{Map, Value, json};

use super::output::CliError;
use crate::manage::{ManageError, ManageResult};

/// Flags that build or edit a server entry.
#[derive(Debug, Clone, Default, Args)]
pub struct ServerEdit {
    /// A whole server entry as JSON (contract section 2); `-` reads it from stdin. Other flags override its fields.
    #[arg(long, value_name = "FILE")]
    pub from_file: Option<PathBuf>,
    /// The server's name (`server_name`, made of A-Z a-z 0-9 _ . -); with update-server it renames the server.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// The server's description.
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// The command that starts the upstream MCP server over stdio.
    #[arg(long, value_name = "COMMAND")]
    pub command: Option<String>,
    /// An argument of the command (repeat for several; replaces all arguments).
    #[arg(long = "arg", value_name = "ARG", allow_hyphen_values = true)]
    pub args: Vec<String>,
    /// An environment variable for the upstream process, KEY=VALUE (repeat for several).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// A variable of the gateway's own environment the upstream process inherits, by name (repeat for several; adds
    /// to `inherit_env`). Behind a proxy or with a private CA: --inherit-env HTTPS_PROXY --inherit-env
    /// NODE_EXTRA_CA_CERTS (`npx`) or SSL_CERT_FILE (`uvx`).
    #[arg(long = "inherit-env", value_name = "NAME", value_parser = parse_variable_name)]
    pub inherit_env: Vec<String>,
    /// A remote server's endpoint (http or https), instead of --command.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// A remote server's transport: streamable_http (default) or sse.
    #[arg(long, value_name = "TRANSPORT")]
    pub transport: Option<String>,
    /// The revision a remote streamable HTTP server is spoken to in: auto (default), 2025-11-25 or 2026-07-28.
    #[arg(long = "protocol-version", value_name = "REVISION")]
    pub protocol_version: Option<String>,
    /// A header sent with every request to a remote server, KEY=VALUE (repeat for several; masked in listings).
    #[arg(long = "header", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub headers: Vec<(String, String)>,
    /// The whole entry read from `--from-file` (filled in by [`ServerEdit::load`]).
    #[arg(skip)]
    pub loaded: Option<Value>,
}

fn parse_env(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {raw:?}")),
    }
}

/// An environment variable's name for `--inherit-env`: letters, digits and `_`, not starting with a digit, and not
/// one of the gateway's own `GW_*` variables (never passed to an upstream).
fn parse_variable_name(raw: &str) -> Result<String, String> {
    crate::config::snapshot::check_variable_name(raw)?;
    Ok(raw.to_string())
}

impl ServerEdit {
    /// Reads `--from-file` (once, before anything is written).
    pub fn load(mut self) -> Result<ServerEdit, CliError> {
        let Some(path) = &self.from_file else { return Ok(self) };
        let text = if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(|e| CliError::Failed(format!("cannot read stdin: {e}")))?;
            text
        } else {
            std::fs::read_to_string(path)
                .map_err(|e| CliError::Failed(format!("cannot read server entry {}: {e}", path.display())))?
        };
        let value: Value = serde_json::from_str(&text)
            .map_err(|e| CliError::Usage(format!("server entry {} is not valid JSON: {e}", path.display())))?;
        if !value.is_object() {
            return Err(CliError::Usage(format!("server entry {} must be a JSON object", path.display())));
        }
        self.loaded = Some(value);
        Ok(self)
    }

    /// A new entry (for `add-server`).
    pub fn build(&self) -> ManageResult<Value> {
        self.apply(json!({}))
    }

    /// The entry `current` with this edit applied: the loaded file replaces it, then each flag sets its field.
    pub fn apply(&self, current: Value) -> ManageResult<Value> {
        let mut entry = self.loaded.clone().unwrap_or(current);
        let Value::Object(map) = &mut entry else {
            return Err(ManageError::Validation("a server entry must be a JSON object".to_string()));
        };
        if let Some(name) = &self.name {
            map.insert("server_name".into(), json!(name));
        }
        if let Some(description) = &self.description {
            map.insert("description".into(), json!(description));
        }
        let config = map.entry("config").or_insert_with(|| json!({}));
        if !config.is_object() {
            return Err(ManageError::Validation("server.config must be a JSON object".to_string()));
        }
        if let Some(command) = &self.command {
            config["command"] = json!(command);
        }
        if !self.args.is_empty() {
            config["args"] = json!(self.args);
        }
        if let Some(url) = &self.url {
            config["url"] = json!(url);
        }
        if let Some(transport) = &self.transport {
            config["transport"] = json!(transport);
        }
        if let Some(version) = &self.protocol_version {
            config["protocol_version"] = json!(version);
        }
        if !self.inherit_env.is_empty() {
            let mut names: Vec<Value> =
                config.get("inherit_env").and_then(Value::as_array).cloned().unwrap_or_default();
            for name in &self.inherit_env {
                if !names.iter().any(|n| n.as_str() == Some(name)) {
                    names.push(json!(name));
                }
            }
            config["inherit_env"] = Value::Array(names);
        }
        for (field, pairs) in [("env", &self.env), ("headers", &self.headers)] {
            if pairs.is_empty() {
                continue;
            }
            if !config.get(field).is_some_and(Value::is_object) {
                config[field] = Value::Object(Map::new());
            }
            for (key, value) in pairs {
                config[field][key] = json!(value);
            }
        }
        Ok(entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inherit_env_takes_variable_names_only() {
        assert_eq!(parse_variable_name("NODE_EXTRA_CA_CERTS"), Ok("NODE_EXTRA_CA_CERTS".into()));
        for bad in ["A=B", "", "1X", "GW_ADMIN_APIKEY", "gw_x", "A B"] {
            assert!(parse_variable_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn inherit_env_adds_names_once() {
        let edit = ServerEdit {
            command: Some("npx".into()),
            inherit_env: vec!["HTTPS_PROXY".into(), "NODE_EXTRA_CA_CERTS".into()],
            ..Default::default()
        };
        let current = json!({"server_name": "s", "config": {"command": "npx", "inherit_env": ["HTTPS_PROXY"]}});
        let entry = edit.apply(current).unwrap();
        assert_eq!(entry["config"]["inherit_env"], json!(["HTTPS_PROXY", "NODE_EXTRA_CA_CERTS"]));
    }

    #[test]
    fn flags_override_the_current_entry_and_keep_the_rest() {
        let edit =
            ServerEdit { command: Some("node".into()), env: vec![("B".into(), "2".into())], ..Default::default() };
        let current = json!({"server_name": "s", "description": "d", "config": {"command": "py", "args": ["x"],
            "env": {"A": "****"}}});
        let entry = edit.apply(current).unwrap();
        assert_eq!(entry["config"], json!({"command": "node", "args": ["x"], "env": {"A": "****", "B": "2"}}));
        assert_eq!(entry["description"], json!("d"));
        assert_eq!(parse_env("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert!(parse_env("=x").is_err());
    }
}
