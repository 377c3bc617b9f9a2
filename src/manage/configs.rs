//! MCP configurations and their upstream server entries.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{ManageError, ManageResult, decode_body, required_name, views};
use crate::config::model::{McpConfig, ServerEntry, decode_server_at};
use crate::config::pins::{PinBook, PinRow, PinStatus, is_pin};
use crate::config::snapshot::check_server_name;
use crate::config::{ConfigFile, Snapshot};
use crate::ids::{new_id, timestamp};

#[derive(Deserialize)]
struct NameBody {
    config_name: String,
}

/// The id of the configuration `ident` (id or name), or 404.
pub fn resolve(snap: &Snapshot, ident: &str) -> ManageResult<String> {
    snap.resolve_config(ident)
        .map(str::to_string)
        .ok_or_else(|| ManageError::NotFound(format!("MCP configuration {ident:?} not found")))
}

fn name_free(file: &ConfigFile, name: &str, except: Option<&str>) -> ManageResult<()> {
    let taken = file.mcp_configs.iter().any(|(id, c)| c.mcp_config_name == name && Some(id.as_str()) != except);
    if taken {
        return Err(ManageError::Conflict(format!("an MCP configuration named {name:?} already exists")));
    }
    Ok(())
}

/// Every configuration.
pub fn list(snap: &Snapshot) -> Value {
    Value::Array(snap.file.mcp_configs.keys().map(|id| views::config(&snap.file, id)).collect())
}

/// One configuration.
pub fn get(snap: &Snapshot, ident: &str) -> ManageResult {
    Ok(views::config(&snap.file, &resolve(snap, ident)?))
}

/// `POST /configs {config_name}`.
pub fn create(file: &mut ConfigFile, body: Value) -> ManageResult {
    let body: NameBody = decode_body(body)?;
    let name = required_name(&body.config_name, "config_name")?;
    name_free(file, &name, None)?;
    let id = new_id();
    let record = McpConfig { mcp_config_name: name.clone(), created_at: Some(timestamp()), ..Default::default() };
    file.mcp_configs.insert(id.clone(), record);
    Ok(json!({"mcp_config_id": id, "mcp_config_name": name}))
}

/// `PUT /configs/{config} {config_name}`: rename.
pub fn rename(file: &mut ConfigFile, snap: &Snapshot, ident: &str, body: Value) -> ManageResult {
    let id = resolve(snap, ident)?;
    let body: NameBody = decode_body(body)?;
    let name = required_name(&body.config_name, "config_name")?;
    name_free(file, &name, Some(&id))?;
    if let Some(cfg) = file.mcp_configs.get_mut(&id) {
        cfg.mcp_config_name = name;
    }
    Ok(views::config(file, &id))
}

/// `DELETE /configs/{config}`: refused while a project uses it.
pub fn delete(file: &mut ConfigFile, snap: &Snapshot, ident: &str) -> ManageResult {
    let id = resolve(snap, ident)?;
    let users: Vec<&str> = file
        .projects
        .values()
        .filter(|p| p.mcp_config_id.as_deref() == Some(id.as_str()))
        .map(|p| p.project_name.as_str())
        .collect();
    if !users.is_empty() {
        return Err(ManageError::Conflict(format!(
            "MCP configuration {ident:?} is used by project(s) {}; move them to another configuration first",
            users.join(", ")
        )));
    }
    let view = views::config(file, &id);
    file.mcp_configs.shift_remove(&id);
    // Users' credentials for its servers go with it (contract 16).
    for configs in file.user_credentials.values_mut() {
        configs.shift_remove(&id);
    }
    file.user_credentials.retain(|_, configs| !configs.is_empty());
    Ok(view)
}

/// `POST /configs/{config}/copy {config_name}`: a new configuration with the same servers.
pub fn copy(file: &mut ConfigFile, snap: &Snapshot, ident: &str, body: Value) -> ManageResult {
    let id = resolve(snap, ident)?;
    let body: NameBody = decode_body(body)?;
    let name = required_name(&body.config_name, "config_name")?;
    name_free(file, &name, None)?;
    let mut copy = file.mcp_configs.get(&id).cloned().unwrap_or_default();
    copy.mcp_config_name = name;
    copy.created_at = Some(timestamp());
    let new = new_id();
    file.mcp_configs.insert(new.clone(), copy);
    Ok(views::config(file, &new))
}

/// The servers of a configuration.
pub fn list_servers(snap: &Snapshot, ident: &str) -> ManageResult {
    let id = resolve(snap, ident)?;
    let servers = snap.file.mcp_configs.get(&id).map(|c| c.mcp_config.iter().map(views::server).collect());
    Ok(Value::Array(servers.unwrap_or_default()))
}

pub(super) fn server_index(file: &ConfigFile, config_id: &str, config: &str, server: &str) -> ManageResult<usize> {
    file.mcp_configs
        .get(config_id)
        .and_then(|c| c.mcp_config.iter().position(|s| s.server_name == server))
        .ok_or_else(|| ManageError::NotFound(format!("server {server:?} not found in MCP configuration {config:?}")))
}

/// The id of configuration `ident` and its server entry `server`, to change (404 when either is not there).
pub(super) fn server_entry_mut<'a>(
    file: &'a mut ConfigFile,
    snap: &Snapshot,
    ident: &str,
    server: &str,
) -> ManageResult<(String, &'a mut ServerEntry)> {
    let id = resolve(snap, ident)?;
    let index = server_index(file, &id, ident, server)?;
    match file.mcp_configs.get_mut(&id).and_then(|cfg| cfg.mcp_config.get_mut(index)) {
        Some(entry) => Ok((id, entry)),
        None => Err(ManageError::NotFound(ident.to_string())),
    }
}

/// One server of a configuration.
pub fn get_server(snap: &Snapshot, ident: &str, server: &str) -> ManageResult {
    let id = resolve(snap, ident)?;
    let index = server_index(&snap.file, &id, ident, server)?;
    Ok(views::server(&snap.file.mcp_configs[&id].mcp_config[index]))
}

/// Decodes a server entry from a request body, with every problem.
fn decode_entry(body: Value) -> ManageResult<ServerEntry> {
    let mut problems = Vec::new();
    let entry = decode_server_at(body, "server", &mut problems);
    if let Some(entry) = &entry
        && let Err(why) = check_server_name(&entry.server_name)
    {
        problems.push(format!("server.server_name: {why}"));
    }
    match entry {
        Some(entry) if problems.is_empty() => Ok(entry),
        _ => Err(ManageError::Invalid(problems)),
    }
}

fn server_name_free(file: &ConfigFile, config_id: &str, name: &str, except: Option<usize>) -> ManageResult<()> {
    let servers = file.mcp_configs.get(config_id).map(|c| c.mcp_config.as_slice()).unwrap_or_default();
    if servers.iter().enumerate().any(|(i, s)| s.server_name == name && Some(i) != except) {
        return Err(ManageError::Conflict(format!("a server named {name:?} already exists in this configuration")));
    }
    Ok(())
}

/// `POST /configs/{config}/servers`: adds a server entry.
pub fn add_server(file: &mut ConfigFile, snap: &Snapshot, ident: &str, body: Value) -> ManageResult {
    let id = resolve(snap, ident)?;
    let entry = decode_entry(body)?;
    server_name_free(file, &id, &entry.server_name, None)?;
    let view = views::server(&entry);
    if let Some(cfg) = file.mcp_configs.get_mut(&id) {
        cfg.mcp_config.push(entry);
    }
    Ok(view)
}

/// `PUT /configs/{config}/servers/{server}`: replaces a server entry (a different `server_name` renames it).
pub fn replace_server(file: &mut ConfigFile, snap: &Snapshot, ident: &str, server: &str, body: Value) -> ManageResult {
    let id = resolve(snap, ident)?;
    let index = server_index(file, &id, ident, server)?;
    let mut body = body;
    if let Value::Object(map) = &mut body {
        map.entry("server_name").or_insert_with(|| Value::String(server.to_string()));
    }
    let mut entry = decode_entry(body)?;
    server_name_free(file, &id, &entry.server_name, Some(index))?;
    let Some(cfg) = file.mcp_configs.get_mut(&id) else { return Err(ManageError::NotFound(ident.to_string())) };
    views::unmask_server(&mut entry, &cfg.mcp_config[index]);
    let view = views::server(&entry);
    cfg.mcp_config[index] = entry;
    Ok(view)
}

/// `DELETE /configs/{config}/servers/{server}`.
pub fn delete_server(file: &mut ConfigFile, snap: &Snapshot, ident: &str, server: &str) -> ManageResult {
    let id = resolve(snap, ident)?;
    let index = server_index(file, &id, ident, server)?;
    let Some(cfg) = file.mcp_configs.get_mut(&id) else { return Err(ManageError::NotFound(ident.to_string())) };
    let removed = cfg.mcp_config.remove(index);
    Ok(views::server(&removed))
}

/// The tool pins of a server (contract sections 11 and 14): the list of rows itself, each tool of the last discovery
/// against its pin, or, before any discovery, the pins alone.
pub fn tool_pins(snap: &Snapshot, book: &PinBook, ident: &str, server: &str) -> ManageResult {
    let id = resolve(snap, ident)?;
    let index = server_index(&snap.file, &id, ident, server)?;
    let entry = &snap.file.mcp_configs[&id].mcp_config[index];
    let pins = entry.pinned_tools.clone().or_else(|| book.in_memory(&id, &entry.server_name)).unwrap_or_default();
    let rows: Vec<PinRow> = match book.last(&id, &entry.server_name) {
        // The last discovery against the pins as they are now: an approval or a forgotten pin since shows at once.
        Some(rows) => rows
            .into_iter()
            .map(|row| {
                let pin = pins.get(&row.tool_name).cloned();
                against(row, pin)
            })
            .collect(),
        None => pins
            .into_iter()
            .map(|(tool_name, pin)| PinRow {
                tool_name,
                pinned: Some(pin),
                current: None,
                status: PinStatus::Pinned,
                pinned_definition: None,
                current_definition: None,
            })
            .collect(),
    };
    serde_json::to_value(rows).map_err(|e| ManageError::Internal(format!("cannot show the tool pins: {e}")))
}

/// `row` of a discovery against the pin the configuration holds now (`pin`).
fn against(mut row: PinRow, pin: Option<String>) -> PinRow {
    if row.pinned == pin {
        return row;
    }
    row.pinned = pin;
    row.status = match (&row.pinned, &row.current) {
        (Some(pinned), Some(current)) if pinned == current => PinStatus::Pinned,
        (Some(_), Some(_)) => PinStatus::Changed,
        (None, Some(_)) => PinStatus::New,
        (Some(_), None) => PinStatus::Missing,
        (None, None) => row.status,
    };
    // The pinned definition the discovery showed was the old pin's; a row that matches its pin shows none.
    row.pinned_definition = None;
    if row.status == PinStatus::Pinned {
        row.current_definition = None;
    }
    row
}

#[derive(Deserialize)]
struct ApproveBody {
    sha256: Option<String>,
}

/// The pin an approval names, `sha256:` and 64 lower-case hex digits, from the body's `sha256` (with or without the
/// `sha256:` prefix, hex digits in either case).
pub(super) fn reviewed_pin(body: Value) -> ManageResult<String> {
    let body: ApproveBody = decode_body(body)?;
    let Some(given) = body.sha256 else {
        return Err(ManageError::Validation(
            "sha256 is required: the pin of the definition you reviewed (the row's `current` in GET …/tool-pins)"
                .to_string(),
        ));
    };
    let hex = given.trim();
    let hex = hex.strip_prefix("sha256:").unwrap_or(hex).to_ascii_lowercase();
    let pin = format!("sha256:{hex}");
    if !is_pin(&pin) {
        return Err(ManageError::Validation(
            "sha256 must be 64 hex digits, with or without the `sha256:` prefix".to_string(),
        ));
    }
    Ok(pin)
}

/// Pins the definition of `tool` that the last discovery found (`POST …/tool-pins/{tool}/approve {sha256}`), only if
/// it is the one the operator reviewed: a server may change its definition between the review and the approval (any
/// key can cause a rediscovery), and an approval must never pin a definition nobody saw. So the body names the pin
/// reviewed; when the last discovery's pin of the tool differs, nothing changes and the answer is 409.
pub fn approve_tool(
    file: &mut ConfigFile,
    snap: &Snapshot,
    book: &PinBook,
    ident: &str,
    server: &str,
    tool: &str,
    body: Value,
) -> ManageResult {
    let (id, entry) = server_entry_mut(file, snap, ident, server)?;
    let reviewed = reviewed_pin(body)?;
    let rows = book.last(&id, &entry.server_name).ok_or_else(|| {
        ManageError::Conflict(format!(
            "server {server:?} has not been discovered since the gateway started: discover its tools first"
        ))
    })?;
    let row = rows.into_iter().find(|row| row.tool_name == tool).ok_or_else(|| {
        ManageError::NotFound(format!("the last discovery of server {server:?} has no tool {tool:?}"))
    })?;
    let Some(current) = row.current else {
        return Err(ManageError::Conflict(format!("tool {tool:?} is no longer offered by server {server:?}")));
    };
    if current != reviewed {
        return Err(ManageError::Conflict(format!(
            "the current definition of tool {tool:?} is {current}, not the {reviewed} you approved: \
             the server changed it since; review it again (GET …/tool-pins)"
        )));
    }
    let mut pins = entry.pinned_tools.clone().or_else(|| book.in_memory(&id, &entry.server_name)).unwrap_or_default();
    // The pin written is the one reviewed (equal to the current one here), never a later discovery's.
    pins.insert(tool.to_string(), reviewed.clone());
    entry.pinned_tools = Some(pins);
    Ok(json!({"server_name": entry.server_name, "tool_name": tool, "pinned": reviewed}))
}

/// Removes the pin of `tool` (`DELETE …/tool-pins/{tool}`): the next discovery treats the tool as new.
pub fn forget_pin(file: &mut ConfigFile, snap: &Snapshot, ident: &str, server: &str, tool: &str) -> ManageResult {
    let (_, entry) = server_entry_mut(file, snap, ident, server)?;
    let removed = entry.pinned_tools.as_mut().and_then(|pins| pins.shift_remove(tool));
    match removed {
        Some(pin) => Ok(json!({"server_name": entry.server_name, "tool_name": tool, "removed": pin})),
        None => Err(ManageError::NotFound(format!("server {server:?} has no pin for tool {tool:?}"))),
    }
}
