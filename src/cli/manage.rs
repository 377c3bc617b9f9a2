//! The management commands: `mcpgw config|project|user|key|system ...`, one per admin REST route.
//!
//! Each command parses into an [`Op`] and runs in one of two modes: on the config file directly (the default, through
//! a [`ConfigStore`] and the same `manage` functions as the admin API, so writes are validated, serialised and atomic,
//! and a running gateway's watcher picks them up), or against a running admin API with `--admin-url` (see
//! [`super::remote`]). The answer is printed by [`super::output`].

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use super::args::{
    ConfigAction, ConfigCommand, KeyAction, KeyCommand, ProjectAction, ProjectCommand, SystemAction, SystemCommand,
    Target, UserAction, UserCommand,
};
use super::ops::{self, Op};
use super::output::{self, CliError, Outcome};
use super::remote::AdminClient;
use crate::config::{self, ConfigStore, LoadError};
use crate::manage::offer_pins::Offers;
use crate::telemetry::metrics::Metrics;

/// A path as the admin API needs it (absolute); relative paths are taken from the current directory in file mode.
fn absolute(path: &Path, target: &Target) -> String {
    if target.admin_url.is_none()
        && path.is_relative()
        && let Ok(cwd) = std::env::current_dir()
    {
        return cwd.join(path).display().to_string();
    }
    path.display().to_string()
}

impl ConfigAction {
    fn op(self) -> Result<Option<Op>, CliError> {
        Ok(Some(match self {
            ConfigAction::List => Op::ConfigList,
            ConfigAction::Create { name } => Op::ConfigCreate { name },
            ConfigAction::Get { config } => Op::ConfigGet { config },
            ConfigAction::Rename { config, new_name } => Op::ConfigRename { config, name: new_name },
            ConfigAction::Copy { config, new_name } => Op::ConfigCopy { config, name: new_name },
            ConfigAction::Delete { config } => Op::ConfigDelete { config },
            ConfigAction::Servers { config } => Op::ServerList { config },
            ConfigAction::GetServer { config, server } => Op::ServerGet { config, server },
            ConfigAction::Pins { config, server } => Op::ToolPins { config, server },
            ConfigAction::ApproveTool { config, server, tool, sha256 } => {
                Op::ApproveTool { config, server, tool, sha256 }
            }
            ConfigAction::PromptPins { config, server } => Op::OfferPins { config, server, offers: Offers::Prompts },
            ConfigAction::ResourcePins { config, server } => {
                Op::OfferPins { config, server, offers: Offers::Resources }
            }
            ConfigAction::ApprovePrompt { config, server, prompt, sha256 } => {
                Op::ApproveOffer { config, server, offers: Offers::Prompts, item: prompt, sha256 }
            }
            ConfigAction::ApproveResource { config, server, uri, sha256 } => {
                Op::ApproveOffer { config, server, offers: Offers::Resources, item: uri, sha256 }
            }
            ConfigAction::AddServer { config, edit } => Op::ServerAdd { config, entry: edit.load()?.build()? },
            ConfigAction::UpdateServer { config, server, edit } => {
                Op::ServerUpdate { config, server, edit: Box::new(edit.load()?) }
            }
            ConfigAction::RemoveServer { config, server } => Op::ServerRemove { config, server },
            ConfigAction::Validate => return Ok(None),
        }))
    }
}

impl ProjectAction {
    fn op(self) -> Result<Op, CliError> {
        use serde_json::{Value, json};
        Ok(match self {
            ProjectAction::List => Op::ProjectList,
            ProjectAction::Create { name, mcp_config } => {
                let mut body = json!({"project_name": name});
                if let Some(config) = mcp_config {
                    body["mcp_config_id"] = json!(config);
                }
                Op::ProjectCreate { body }
            }
            ProjectAction::Get { project } => Op::ProjectGet { project },
            ProjectAction::Update { project, name, mcp_config, no_mcp_config } => {
                let mut body = json!({});
                if let Some(name) = name {
                    body["project_name"] = json!(name);
                }
                if let Some(config) = mcp_config {
                    body["mcp_config_id"] = json!(config);
                } else if no_mcp_config {
                    body["mcp_config_id"] = Value::Null;
                }
                if body.as_object().is_some_and(|m| m.is_empty()) {
                    return Err(CliError::Usage("give --name, --mcp-config or --no-mcp-config".to_string()));
                }
                Op::ProjectUpdate { project, body }
            }
            ProjectAction::Rename { project, new_name } => {
                Op::ProjectUpdate { project, body: json!({"project_name": new_name}) }
            }
            ProjectAction::SetConfig { project, config } => {
                Op::ProjectUpdate { project, body: json!({"mcp_config_id": config}) }
            }
            ProjectAction::Delete { project } => Op::ProjectDelete { project },
            ProjectAction::Members { project } => Op::ProjectMembers { project },
            ProjectAction::AddUser { project, user } => Op::ProjectAddUser { project, user },
            ProjectAction::RemoveUser { project, user } => Op::ProjectRemoveUser { project, user },
        })
    }
}

impl UserAction {
    fn op(self) -> Result<Op, CliError> {
        Ok(match self {
            UserAction::List => Op::UserList,
            UserAction::Create { email } => Op::UserCreate { email },
            UserAction::Get { user } => Op::UserGet { user },
            UserAction::Update { user, new_email } => Op::UserUpdate { user, email: new_email },
            UserAction::Delete { user } => Op::UserDelete { user },
            UserAction::Keys { user } => Op::UserKeys { user },
            UserAction::Credentials { user } => Op::UserCredentials { user },
            UserAction::SetCredential { user, config, server, name } => {
                Op::CredentialSet { user, config, server, name, value: super::secrets::read_value()? }
            }
            UserAction::DeleteCredential { user, config, server, name } => {
                Op::CredentialDelete { user, config, server, name }
            }
        })
    }
}

impl KeyAction {
    fn op(self) -> Op {
        match self {
            KeyAction::Create { user, project } => Op::KeyCreate { user, project },
            KeyAction::List { user: Some(user) } => Op::UserKeys { user },
            KeyAction::List { user: None } => Op::KeyList,
            KeyAction::Get { key } => Op::KeyGet { key },
            KeyAction::Rotate { key } => Op::KeyRotate { key },
            KeyAction::Disable { key } => Op::KeySetDisabled { key, disabled: true },
            KeyAction::Enable { key } => Op::KeySetDisabled { key, disabled: false },
            KeyAction::Delete { key } => Op::KeyDelete { key },
        }
    }
}

impl SystemAction {
    /// Backup and restore paths must name a file in the backup directory of the config (`gw_backup_dir`); in file
    /// mode a relative one is taken from the current directory, as every command-line tool does.
    fn op(self, target: &Target) -> Result<Op, CliError> {
        Ok(match self {
            SystemAction::Health => Op::Health,
            SystemAction::Backup { output_file, overwrite } => {
                Op::Backup { output_file: absolute(&output_file, target), overwrite }
            }
            SystemAction::Restore { input_file } => Op::Restore { input_file: absolute(&input_file, target) },
            SystemAction::Reset { yes_really_reset: false } => {
                return Err(CliError::Usage(
                    "system reset deletes every config, project, user and key; add --yes-really-reset to confirm"
                        .to_string(),
                ));
            }
            SystemAction::Reset { yes_really_reset: true } => Op::Reset,
        })
    }
}

/// Runs `mcpgw config ...`.
pub fn config(cmd: ConfigCommand) -> ExitCode {
    let target = cmd.target;
    match cmd.action.op() {
        Ok(Some(op)) => finish(&target, run(&target, &op), &op),
        Ok(None) => super::validate::run(&target),
        Err(e) => e.report(),
    }
}

/// Runs `mcpgw project ...`.
pub fn project(cmd: ProjectCommand) -> ExitCode {
    match cmd.action.op() {
        Ok(op) => finish(&cmd.target, run(&cmd.target, &op), &op),
        Err(e) => e.report(),
    }
}

/// Runs `mcpgw user ...`.
pub fn user(cmd: UserCommand) -> ExitCode {
    match cmd.action.op() {
        Ok(op) => finish(&cmd.target, run(&cmd.target, &op), &op),
        Err(e) => e.report(),
    }
}

/// Runs `mcpgw key ...`.
pub fn key(cmd: KeyCommand) -> ExitCode {
    let op = cmd.action.op();
    finish(&cmd.target, run(&cmd.target, &op), &op)
}

/// Runs `mcpgw system ...`.
pub fn system(cmd: SystemCommand) -> ExitCode {
    match cmd.action.op(&cmd.target) {
        Ok(op) => finish(&cmd.target, run(&cmd.target, &op), &op),
        Err(e) => e.report(),
    }
}

/// Opens the config file for file mode; an unreadable or invalid file is an error that lists every problem.
pub fn open_store(target: &Target) -> Result<ConfigStore, CliError> {
    let path = target.config.clone().unwrap_or_else(config::default_path);
    ConfigStore::open(path, Arc::new(Metrics::new())).map_err(|e| match e {
        LoadError::Invalid { path, problems } => CliError::Failed(format!(
            "config file {} is invalid ({}); run `mcpgw config validate` to list the problems",
            path.display(),
            problems.join("; ")
        )),
        other => CliError::Failed(other.to_string()),
    })
}

fn run(target: &Target, op: &Op) -> Result<Outcome, CliError> {
    if let Some(url) = &target.admin_url {
        if target.show_secret && op.lists_keys() {
            eprintln!(
                "mcpgw: note: --show-secret has no effect with --admin-url: the admin API never returns a whole key"
            );
        }
        return AdminClient::new(url)?.run(op);
    }
    let store = open_store(target)?;
    if store.snapshot().settings.config_store == crate::config::settings::StoreKind::Redis {
        return Err(CliError::Manage(crate::manage::ManageError::ReadOnly(format!(
            "the configuration of {} lives in Redis (common_mcp_gateway_config.config_store is redis): the file only \
             seeded it and is not read again. Manage it through a running gateway: add --admin-url \
             http://HOST:8001 (or GW_ADMIN_URL), with the admin key in GW_ADMIN_APIKEY",
            store.path().display()
        ))));
    }
    let mut outcome = ops::run_file(op, &store)?;
    if target.show_secret
        && op.lists_keys()
        && let Some(data) = outcome.data.as_mut()
    {
        ops::reveal_keys(data, &store.snapshot());
    }
    Ok(outcome)
}

fn finish(target: &Target, result: Result<Outcome, CliError>, op: &Op) -> ExitCode {
    match result {
        Ok(outcome) => {
            output::print(&outcome, op.shape(), target.json);
            ExitCode::SUCCESS
        }
        Err(e) => e.report(),
    }
}
