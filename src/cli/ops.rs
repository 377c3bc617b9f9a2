//! One management operation, as the command line sees it, and the admin REST route it mirrors.
//!
//! Every `mcpgw config|project|user|key|system ...` command becomes an [`Op`]. An operation has exactly one REST
//! route ([`Op::route`], used with `--admin-url`) and runs through the same `manage` function that route's handler
//! calls ([`run_file`], used on the config file), so both modes validate and write through one code path. The request
//! body is built once ([`Op::body`]) and handed to either.

use std::time::Duration;

use serde_json::{Value, json};

use super::output::{CliError, Column, Outcome, Shape, field};
use super::server_edit::ServerEdit;
use crate::config::ConfigStore;
use crate::credentials::SecretValue;
use crate::manage::offer_pins::{self, Offers};
use crate::manage::{ManageResult, api_keys, configs, credentials, projects, system, users};

/// A management operation and its arguments (identifiers are ids or names, as in REST paths).
#[derive(Debug, Clone)]
pub enum Op {
    ConfigList,
    ConfigCreate { name: String },
    ConfigGet { config: String },
    ConfigRename { config: String, name: String },
    ConfigCopy { config: String, name: String },
    ConfigDelete { config: String },
    ServerList { config: String },
    ServerGet { config: String, server: String },
    ToolPins { config: String, server: String },
    ApproveTool { config: String, server: String, tool: String, sha256: String },
    OfferPins { config: String, server: String, offers: Offers },
    ApproveOffer { config: String, server: String, offers: Offers, item: String, sha256: String },
    ServerAdd { config: String, entry: Value },
    ServerUpdate { config: String, server: String, edit: Box<ServerEdit> },
    ServerRemove { config: String, server: String },
    ProjectList,
    ProjectCreate { body: Value },
    ProjectGet { project: String },
    ProjectUpdate { project: String, body: Value },
    ProjectDelete { project: String },
    ProjectMembers { project: String },
    ProjectAddUser { project: String, user: String },
    ProjectRemoveUser { project: String, user: String },
    UserList,
    UserCreate { email: String },
    UserGet { user: String },
    UserUpdate { user: String, email: String },
    UserDelete { user: String },
    UserKeys { user: String },
    UserCredentials { user: String },
    CredentialSet { user: String, config: String, server: String, name: String, value: SecretValue },
    CredentialDelete { user: String, config: String, server: String, name: Option<String> },
    KeyCreate { user: String, project: String },
    KeyList,
    KeyGet { key: String },
    KeyRotate { key: String },
    KeySetDisabled { key: String, disabled: bool },
    KeyDelete { key: String },
    Health,
    Backup { output_file: String, overwrite: bool },
    Restore { input_file: String },
    Reset,
}

/// An admin REST request: method, path segments after the base URL, and the JSON body.
#[derive(Debug, Clone)]
pub struct Route {
    pub method: reqwest::Method,
    pub segments: Vec<String>,
    pub body: Option<Value>,
    /// Query parameters (name, value).
    pub query: Vec<(&'static str, String)>,
}

fn route(method: reqwest::Method, path: &[&str], body: Option<Value>) -> Route {
    let mut segments = vec!["api".to_string(), "v1".to_string()];
    segments.extend(path.iter().map(|s| s.to_string()));
    Route { method, segments, body, query: Vec::new() }
}

/// Whether a project identifier looks like an id (so it is sent as `project_id`, else as `project_name`).
fn looks_like_id(s: &str) -> bool {
    s.len() == 36 && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

const CONFIG_COLUMNS: &[Column] = &[
    Column { header: "ID", cell: |r| field(r, "mcp_config_id") },
    Column { header: "NAME", cell: |r| field(r, "mcp_config_name") },
    Column { header: "SERVERS", cell: |r| field(r, "servers") },
    Column { header: "PROJECTS", cell: |r| field(r, "projects") },
];
const SERVER_COLUMNS: &[Column] = &[
    Column { header: "NAME", cell: |r| field(r, "server_name") },
    Column { header: "COMMAND", cell: server_command },
    Column { header: "DESCRIPTION", cell: |r| field(r, "description") },
];
const PROJECT_COLUMNS: &[Column] = &[
    Column { header: "ID", cell: |r| field(r, "project_id") },
    Column { header: "NAME", cell: |r| field(r, "project_name") },
    Column { header: "MCP CONFIG", cell: |r| field(r, "mcp_config_id") },
    Column { header: "USERS", cell: |r| field(r, "users") },
];
const MEMBER_COLUMNS: &[Column] = &[
    Column { header: "USER ID", cell: |r| field(r, "user_id") },
    Column { header: "EMAIL", cell: |r| field(r, "email") },
];
const USER_COLUMNS: &[Column] = &[
    Column { header: "ID", cell: |r| field(r, "user_id") },
    Column { header: "EMAIL", cell: |r| field(r, "email") },
    Column { header: "PROJECTS", cell: |r| field(r, "projects") },
];
const KEY_COLUMNS: &[Column] = &[
    Column { header: "KEY ID", cell: |r| field(r, "key_id") },
    Column { header: "KEY", cell: |r| r.get("api_key").map_or_else(|| field(r, "masked"), |_| field(r, "api_key")) },
    Column { header: "PROJECT ID", cell: |r| field(r, "project_id") },
    Column { header: "USER ID", cell: |r| field(r, "user_id") },
    Column { header: "CREATED", cell: |r| field(r, "created_at") },
    Column { header: "DISABLED", cell: |r| field(r, "disabled") },
];
/// A server's tool pins: the full pins, since `--sha256` of `approve-tool` takes CURRENT as shown.
const PIN_COLUMNS: &[Column] = &[
    Column { header: "TOOL", cell: |r| field(r, "tool_name") },
    Column { header: "STATUS", cell: |r| field(r, "status") },
    Column { header: "PINNED", cell: |r| field(r, "pinned") },
    Column { header: "CURRENT", cell: |r| field(r, "current") },
];

/// A server's prompt pins, as [`PIN_COLUMNS`] for tools.
const PROMPT_PIN_COLUMNS: &[Column] = &[
    Column { header: "PROMPT", cell: |r| field(r, "name") },
    Column { header: "STATUS", cell: |r| field(r, "status") },
    Column { header: "PINNED", cell: |r| field(r, "pinned") },
    Column { header: "CURRENT", cell: |r| field(r, "current") },
];
/// A server's resource and template pins.
const RESOURCE_PIN_COLUMNS: &[Column] = &[
    Column { header: "URI", cell: |r| field(r, "uri") },
    Column { header: "KIND", cell: |r| field(r, "kind") },
    Column { header: "STATUS", cell: |r| field(r, "status") },
    Column { header: "PINNED", cell: |r| field(r, "pinned") },
    Column { header: "CURRENT", cell: |r| field(r, "current") },
];

/// The admin API's path segment of `offers`' pins.
fn pins_path(offers: Offers) -> &'static str {
    match offers {
        Offers::Prompts => "prompt-pins",
        Offers::Resources => "resource-pins",
    }
}

fn server_command(row: &Value) -> String {
    let config = &row["config"];
    let mut parts = vec![field(config, "command")];
    if let Some(args) = config["args"].as_array() {
        parts.extend(args.iter().map(|a| a.as_str().map_or_else(|| a.to_string(), str::to_string)));
    }
    parts.join(" ")
}

impl Op {
    /// The REST request body of this operation (`None` for routes that take none).
    pub fn body(&self) -> Option<Value> {
        Some(match self {
            Op::ConfigCreate { name } | Op::ConfigRename { name, .. } | Op::ConfigCopy { name, .. } => {
                json!({"config_name": name})
            }
            Op::ServerAdd { entry, .. } => entry.clone(),
            Op::ProjectCreate { body } | Op::ProjectUpdate { body, .. } => body.clone(),
            Op::ProjectAddUser { user, .. } if user.contains('@') => json!({"email": user}),
            Op::ProjectAddUser { user, .. } => json!({"user_id": user}),
            Op::UserCreate { email } | Op::UserUpdate { email, .. } => json!({"email": email}),
            Op::CredentialSet { name, value, .. } => json!({"values": {name: value.expose()}}),
            Op::KeyCreate { project, .. } if looks_like_id(project) => json!({"project_id": project}),
            Op::KeyCreate { project, .. } => json!({"project_name": project}),
            Op::Backup { output_file, overwrite } => json!({"output_file": output_file, "overwrite": overwrite}),
            Op::Restore { input_file } => json!({"input_file": input_file}),
            Op::Reset => json!({"confirm": true}),
            Op::ApproveTool { sha256, .. } | Op::ApproveOffer { sha256, .. } => json!({"sha256": sha256}),
            _ => return None,
        })
    }

    /// The admin REST route this operation mirrors. `ServerUpdate` is a GET then this PUT (see [`super::remote`]).
    pub fn route(&self) -> Route {
        use reqwest::Method as M;
        let body = self.body();
        match self {
            Op::ConfigList => route(M::GET, &["configs"], None),
            Op::ConfigCreate { .. } => route(M::POST, &["configs"], body),
            Op::ConfigGet { config } => route(M::GET, &["configs", config], None),
            Op::ConfigRename { config, .. } => route(M::PUT, &["configs", config], body),
            Op::ConfigCopy { config, .. } => route(M::POST, &["configs", config, "copy"], body),
            Op::ConfigDelete { config } => route(M::DELETE, &["configs", config], None),
            Op::ServerList { config } => route(M::GET, &["configs", config, "servers"], None),
            Op::ServerAdd { config, .. } => route(M::POST, &["configs", config, "servers"], body),
            Op::ServerGet { config, server } => route(M::GET, &["configs", config, "servers", server], None),
            Op::ToolPins { config, server } => {
                route(M::GET, &["configs", config, "servers", server, "tool-pins"], None)
            }
            Op::ApproveTool { config, server, tool, .. } => {
                route(M::POST, &["configs", config, "servers", server, "tool-pins", tool, "approve"], body)
            }
            Op::OfferPins { config, server, offers } => {
                route(M::GET, &["configs", config, "servers", server, pins_path(*offers)], None)
            }
            Op::ApproveOffer { config, server, offers, item, .. } => {
                route(M::POST, &["configs", config, "servers", server, pins_path(*offers), item, "approve"], body)
            }
            Op::ServerUpdate { config, server, .. } => route(M::PUT, &["configs", config, "servers", server], None),
            Op::ServerRemove { config, server } => route(M::DELETE, &["configs", config, "servers", server], None),
            Op::ProjectList => route(M::GET, &["projects"], None),
            Op::ProjectCreate { .. } => route(M::POST, &["projects"], body),
            Op::ProjectGet { project } => route(M::GET, &["projects", project], None),
            Op::ProjectUpdate { project, .. } => route(M::PUT, &["projects", project], body),
            Op::ProjectDelete { project } => route(M::DELETE, &["projects", project], None),
            Op::ProjectMembers { project } => route(M::GET, &["projects", project, "users"], None),
            Op::ProjectAddUser { project, .. } => route(M::POST, &["projects", project, "users"], body),
            Op::ProjectRemoveUser { project, user } => route(M::DELETE, &["projects", project, "users", user], None),
            Op::UserList => route(M::GET, &["users"], None),
            Op::UserCreate { .. } => route(M::POST, &["users"], body),
            Op::UserGet { user } => route(M::GET, &["users", user], None),
            Op::UserUpdate { user, .. } => route(M::PUT, &["users", user], body),
            Op::UserDelete { user } => route(M::DELETE, &["users", user], None),
            Op::UserKeys { user } => route(M::GET, &["users", user, "api-keys"], None),
            Op::UserCredentials { user } => route(M::GET, &["users", user, "credentials"], None),
            Op::CredentialSet { user, config, server, .. } => {
                route(M::PUT, &["users", user, "credentials", config, server], body)
            }
            Op::CredentialDelete { user, config, server, name } => {
                let mut delete = route(M::DELETE, &["users", user, "credentials", config, server], None);
                delete.query.extend(name.iter().map(|name| ("name", name.clone())));
                delete
            }
            Op::KeyCreate { user, .. } => route(M::POST, &["users", user, "api-keys"], body),
            Op::KeyList => route(M::GET, &["api-keys"], None),
            Op::KeyGet { key } => route(M::GET, &["api-keys", key], None),
            Op::KeyRotate { key } => route(M::POST, &["api-keys", key, "rotate"], None),
            Op::KeySetDisabled { key, disabled } => {
                route(M::POST, &["api-keys", key, if *disabled { "disable" } else { "enable" }], None)
            }
            Op::KeyDelete { key } => route(M::DELETE, &["api-keys", key], None),
            Op::Health => route(M::GET, &["system", "health"], None),
            Op::Backup { .. } => route(M::POST, &["system", "backup"], body),
            Op::Restore { .. } => route(M::POST, &["system", "restore"], body),
            Op::Reset => route(M::POST, &["system", "reset"], body),
        }
    }

    /// How the answer is shown as text.
    pub fn shape(&self) -> Shape {
        match self {
            Op::ConfigList => Shape::Table(CONFIG_COLUMNS),
            Op::ServerList { .. } => Shape::Table(SERVER_COLUMNS),
            Op::ProjectList => Shape::Table(PROJECT_COLUMNS),
            Op::ProjectMembers { .. } | Op::ProjectAddUser { .. } => Shape::Table(MEMBER_COLUMNS),
            Op::UserList => Shape::Table(USER_COLUMNS),
            Op::KeyList | Op::UserKeys { .. } => Shape::Table(KEY_COLUMNS),
            Op::UserCredentials { .. } => Shape::Table(super::secrets::CREDENTIAL_COLUMNS),
            Op::ToolPins { .. } => Shape::Table(PIN_COLUMNS),
            Op::OfferPins { offers: Offers::Prompts, .. } => Shape::Table(PROMPT_PIN_COLUMNS),
            Op::OfferPins { offers: Offers::Resources, .. } => Shape::Table(RESOURCE_PIN_COLUMNS),
            _ => Shape::Record,
        }
    }

    /// Whether the answer lists API keys (so `--show-secret` can add the whole keys in file mode).
    pub fn lists_keys(&self) -> bool {
        matches!(self, Op::KeyList | Op::UserKeys { .. } | Op::KeyGet { .. })
    }
}

fn read(message: &str, result: ManageResult) -> Result<Outcome, CliError> {
    Ok(Outcome::new(message, result?))
}

fn write(
    store: &ConfigStore,
    message: &str,
    change: impl FnOnce(&mut crate::config::ConfigFile, &crate::config::Snapshot) -> ManageResult,
) -> Result<Outcome, CliError> {
    Ok(Outcome::new(message, store.update(change)?))
}

/// Runs an operation on the config file through `store`, with the same `manage` function as its REST route.
pub fn run_file(op: &Op, store: &ConfigStore) -> Result<Outcome, CliError> {
    let snap = store.snapshot();
    let body = op.body().unwrap_or(Value::Null);
    match op {
        Op::ConfigList => read("configurations", Ok(configs::list(&snap))),
        Op::ConfigCreate { .. } => write(store, "configuration created", |f, _| configs::create(f, body)),
        Op::ConfigGet { config } => read("configuration", configs::get(&snap, config)),
        Op::ConfigRename { config, .. } => {
            write(store, "configuration renamed", |f, s| configs::rename(f, s, config, body))
        }
        Op::ConfigCopy { config, .. } => write(store, "configuration copied", |f, s| configs::copy(f, s, config, body)),
        Op::ConfigDelete { config } => write(store, "configuration deleted", |f, s| configs::delete(f, s, config)),
        Op::ServerList { config } => read("servers", configs::list_servers(&snap, config)),
        Op::ServerGet { config, server } => read("server", configs::get_server(&snap, config, server)),
        // A file holds no discovery: the pins alone, and approving needs the running gateway.
        Op::ToolPins { config, server } => {
            read("tool pins", configs::tool_pins(&snap, &Default::default(), config, server))
        }
        Op::ApproveTool { server, tool, .. } => Err(CliError::Usage(format!(
            "approving {tool:?} of {server:?} pins what the running gateway discovered: add --admin-url (and GW_ADMIN_APIKEY)"
        ))),
        Op::OfferPins { config, server, offers } => {
            read("pins", offer_pins::list(&snap, &Default::default(), config, server, *offers))
        }
        Op::ApproveOffer { server, item, .. } => Err(CliError::Usage(format!(
            "approving {item:?} of {server:?} pins what the running gateway listed: \
             add --admin-url (and GW_ADMIN_APIKEY)"
        ))),
        Op::ServerAdd { config, .. } => write(store, "server added", |f, s| configs::add_server(f, s, config, body)),
        Op::ServerUpdate { config, server, edit } => write(store, "server updated", |f, s| {
            let entry = edit.apply(configs::get_server(s, config, server)?)?;
            configs::replace_server(f, s, config, server, entry)
        }),
        Op::ServerRemove { config, server } => {
            write(store, "server removed", |f, s| configs::delete_server(f, s, config, server))
        }
        Op::ProjectList => read("projects", Ok(projects::list(&snap))),
        Op::ProjectCreate { .. } => write(store, "project created", |f, s| projects::create(f, s, body)),
        Op::ProjectGet { project } => read("project", projects::get(&snap, project)),
        Op::ProjectUpdate { project, .. } => {
            write(store, "project updated", |f, s| projects::update(f, s, project, body))
        }
        Op::ProjectDelete { project } => write(store, "project deleted", |f, s| projects::delete(f, s, project)),
        Op::ProjectMembers { project } => read("project members", projects::list_members(&snap, project)),
        Op::ProjectAddUser { project, .. } => {
            write(store, "user added to project", |f, s| projects::add_member(f, s, project, body))
        }
        Op::ProjectRemoveUser { project, user } => {
            write(store, "user removed from project", |f, s| projects::remove_member(f, s, project, user))
        }
        Op::UserList => read("users", Ok(users::list(&snap))),
        Op::UserCreate { .. } => write(store, "user created", |f, _| users::create(f, body)),
        Op::UserGet { user } => read("user", users::get(&snap, user)),
        Op::UserUpdate { user, .. } => write(store, "user updated", |f, s| users::update(f, s, user, body)),
        Op::UserDelete { user } => write(store, "user deleted", |f, s| users::delete(f, s, user)),
        Op::UserKeys { user } => read("API keys", users::list_keys(&snap, user)),
        Op::UserCredentials { user } => read("user credentials", credentials::list(&snap, user)),
        Op::CredentialSet { user, config, server, .. } => {
            write(store, "user credentials set", |f, s| credentials::set(f, s, user, config, server, body))
        }
        Op::CredentialDelete { user, config, server, name } => {
            let revoked = name.is_none().then(|| super::secrets::revoke_before_delete(store, user, config, server));
            let mut outcome = write(store, "user credentials deleted", |f, s| {
                credentials::delete(f, s, user, config, server, name.as_deref())
            })?;
            if let (Some(Some(revoked)), Some(data)) = (revoked, outcome.data.as_mut()) {
                data["revoked"] = Value::Bool(revoked);
            }
            Ok(outcome)
        }
        Op::KeyCreate { user, .. } => write(store, "API key created; store it now, it is not shown again", |f, s| {
            users::create_key(f, s, user, body)
        }),
        Op::KeyList => read("API keys", Ok(api_keys::list(&snap))),
        Op::KeyGet { key } => read("API key", api_keys::get(&snap, key)),
        Op::KeyRotate { key } => write(
            store,
            "API key rotated; the old key no longer works; store the new one now, it is not shown again",
            |f, s| api_keys::rotate(f, s, key),
        ),
        Op::KeySetDisabled { key, disabled } => {
            let message = if *disabled { "API key disabled" } else { "API key enabled" };
            write(store, message, |f, s| api_keys::set_disabled(f, s, key, *disabled))
        }
        Op::KeyDelete { key } => write(store, "API key deleted", |f, s| api_keys::delete(f, s, key)),
        Op::Health => {
            let mut data = system::health(store, Duration::ZERO, true, None, Vec::new());
            // Uptime and listeners describe a running process; file mode reports only the file's state.
            if let Value::Object(map) = &mut data {
                map.remove("uptime_seconds");
            }
            Ok(Outcome::new("system health (config file)", data))
        }
        Op::Backup { .. } => {
            let path = system::backup(store, body)?;
            Ok(Outcome::message(format!("backup written to {path}")))
        }
        Op::Restore { .. } => {
            let path = system::restore(store, body)?;
            Ok(Outcome::message(format!("configuration restored from {path}; it is in effect now")))
        }
        Op::Reset => {
            system::reset(store, body)?;
            Ok(Outcome::message(
                "configuration reset to defaults; the admin key is unchanged; create or rotate an API key to get a \
                 gateway key",
            ))
        }
    }
}

/// Adds the whole key (`api_key`) to each key record of `data`, from the snapshot (file mode, `--show-secret`).
pub fn reveal_keys(data: &mut Value, snap: &crate::config::Snapshot) {
    let reveal = |record: &mut Value| {
        let Some(id) = record.get("key_id").and_then(Value::as_str) else { return };
        if let Some(entry) = snap.resolve_key(id) {
            record["api_key"] = json!(entry.key);
        }
    };
    match data {
        Value::Array(records) => records.iter_mut().for_each(reveal),
        record => reveal(record),
    }
}
