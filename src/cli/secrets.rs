//! `mcpgw secrets rotate-key`, and the value of `mcpgw user set-credential`, read from stdin (never from argv, where
//! shell history and process listings would keep it); the table of `mcpgw user credentials`, and the revocation of a
//! user's OAuth tokens before `mcpgw user delete-credential` removes them from a config file.
//!
//! Rotation works on the config file (file mode). With the key in `common_mcp_gateway_config.secrets_key`, a new key
//! is generated and every stored credential sealed again under it, both in one write of the file. A key from
//! `MCPGW_SECRETS_KEY` or `secrets_key_file` is the operator's to replace: put the new key there and the old one in
//! `MCPGW_SECRETS_KEY_PREVIOUS`; values then open with either, and this command (or the next credential write) seals
//! them all under the new one, after which the previous key can go.

use std::io::{IsTerminal, Read};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use serde_json::Value;

use super::args::Target;
use super::output::{CliError, Column, Outcome, Shape, field};
use crate::config::secrets_key::{self, KeySource, SECRETS_KEY_ENV, SECRETS_KEY_PREVIOUS_ENV};
use crate::credentials::{SecretValue, rotate};
use crate::manage::ManageError;

/// `mcpgw secrets ...`
#[derive(Debug, Args)]
pub struct SecretsCommand {
    #[command(subcommand)]
    pub action: SecretsAction,
}

#[derive(Debug, Subcommand)]
pub enum SecretsAction {
    /// Generate a new secrets_key and seal every user credential again under it, in one write of the config file.
    /// With the key in MCPGW_SECRETS_KEY or secrets_key_file: seal every value under that key (the old one in
    /// MCPGW_SECRETS_KEY_PREVIOUS).
    ///
    /// Example: mcpgw secrets rotate-key --config ./gw_mcp_config.json
    RotateKey {
        #[command(flatten)]
        config: super::ConfigArg,
    },
}

/// Runs `mcpgw secrets ...`.
pub fn run(cmd: SecretsCommand) -> ExitCode {
    let SecretsAction::RotateKey { config } = cmd.action;
    let target = Target { config: Some(config.path()), admin_url: None, json: false, show_secret: false };
    match rotate_key(&target) {
        Ok(outcome) => {
            super::output::print(&outcome, Shape::Record, false);
            ExitCode::SUCCESS
        }
        Err(e) => e.report(),
    }
}

fn rotate_key(target: &Target) -> Result<Outcome, CliError> {
    let store = super::manage::open_store(target)?;
    if store.snapshot().settings.config_store == crate::config::settings::StoreKind::Redis {
        return Err(CliError::Usage(
            "the configuration lives in Redis: rotate-key works on a config file only; supply the new key through \
             MCPGW_SECRETS_KEY with the old one in MCPGW_SECRETS_KEY_PREVIOUS instead"
                .to_string(),
        ));
    }
    let message = store.update(|file, snap| {
        let internal = |e: crate::credentials::CredentialError| ManageError::Internal(e.to_string());
        let key = snap.settings.secrets_key.as_ref();
        match key.map(|k| &k.source) {
            None | Some(KeySource::Config) => {
                let text = crate::secrets::random_token()?;
                let count = match key {
                    Some(key) => rotate::reseal(file, key, &secrets_key::derive(&text)).map_err(internal)?,
                    None => 0,
                };
                file.common_mcp_gateway_config.get_or_insert_with(Default::default).secrets_key = Some(text);
                Ok(format!("secrets_key rotated: {count} credential values sealed under the new key"))
            }
            Some(source) => match key.filter(|k| k.has_previous()) {
                Some(key) => {
                    let count = rotate::reseal(file, key, key.current()).map_err(internal)?;
                    Ok(format!(
                        "{count} credential values sealed again under the key from {source}; \
                         {SECRETS_KEY_PREVIOUS_ENV} can now be removed"
                    ))
                }
                None => Err(ManageError::Validation(format!(
                    "the secrets_key comes from {source}, which this command cannot change: put the new key there \
                     (or in {SECRETS_KEY_ENV}) and the old one in {SECRETS_KEY_PREVIOUS_ENV}, then run `mcpgw \
                     secrets rotate-key` again to seal every value under the new key"
                ))),
            },
        }
    })?;
    Ok(Outcome::message(message))
}

/// The value of `set-credential`: one line from a terminal, else all of stdin, without one trailing newline.
pub fn read_value() -> Result<SecretValue, CliError> {
    let mut stdin = std::io::stdin();
    let mut text = String::new();
    let read = if stdin.is_terminal() {
        eprintln!("mcpgw: enter the value (one line):");
        stdin.read_line(&mut text)
    } else {
        stdin.read_to_string(&mut text)
    };
    let value = SecretValue::from(text);
    read.map_err(|e| CliError::Failed(format!("cannot read the value from stdin: {e}")))?;
    let trimmed = value.expose().strip_suffix('\n').map(|v| v.strip_suffix('\r').unwrap_or(v));
    let value = match trimmed {
        Some(v) => SecretValue::from(v.to_string()),
        None => value,
    };
    if value.expose().is_empty() {
        return Err(CliError::Usage("the value is read from stdin, which was empty".to_string()));
    }
    Ok(value)
}

/// `mcpgw user delete-credential` on a config file: a user's OAuth tokens are revoked at the authorization server
/// before they are removed, as the admin route does (`Some(revoked)`; `None` when the slot holds no OAuth tokens).
/// A revocation that fails is reported on stderr; the tokens are removed all the same.
pub fn revoke_before_delete(
    store: &crate::config::ConfigStore,
    user: &str,
    config: &str,
    server: &str,
) -> Option<bool> {
    let snapshot = store.snapshot();
    let slot = crate::manage::credentials::oauth_slot(&snapshot, user, config, server)?;
    let broker = crate::credentials::broker::Broker::new(snapshot.settings.timeouts.auth, Arc::clone(store.metrics()));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let revoked = runtime
        .map_err(|e| e.to_string())
        .and_then(|runtime| runtime.block_on(broker.revoke(&snapshot, &slot)).map_err(|failure| failure.to_string()));
    Some(revoked.unwrap_or_else(|why| {
        eprintln!(
            "mcpgw: the OAuth tokens could not be revoked at the authorization server ({why}); removed here anyway"
        );
        false
    }))
}

/// The table of `mcpgw user credentials`.
pub const CREDENTIAL_COLUMNS: &[Column] = &[
    Column { header: "CONFIG", cell: |r| field(r, "mcp_config_name") },
    Column { header: "SERVER", cell: |r| field(r, "server_name") },
    Column { header: "KIND", cell: |r| field(r, "kind") },
    Column { header: "STATE", cell: credential_state },
    Column { header: "NAMES", cell: |r| field(r, "names") },
    Column {
        header: "LAST SET",
        cell: |r| field(r, "set_at").split('"').filter(|p| p.ends_with('Z')).max().unwrap_or("-").into(),
    },
    Column { header: "EXPIRES", cell: |r| field(r, "expires_at") },
];

/// A listed credential's state: missing names of a `secret` slot, or whether an OAuth account is connected.
fn credential_state(r: &Value) -> String {
    match (r.get("kind").and_then(Value::as_str), r.get("connected")) {
        (Some("token_exchange"), _) => "exchanged at each call".into(),
        (_, Some(Value::Bool(true))) => "connected".into(),
        (_, Some(Value::Bool(false))) => "not connected".into(),
        _ => match r.get("missing").and_then(Value::as_array) {
            Some(missing) if !missing.is_empty() => format!("missing {}", field(r, "missing")),
            _ if r.get("set") == Some(&Value::Bool(true)) => "set".into(),
            _ => "not set".into(),
        },
    }
}
