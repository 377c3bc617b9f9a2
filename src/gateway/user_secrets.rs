//! Each user's own values for a `per_user` server (contract 16), as a call needs them: where they come from
//! ([`UserSecrets`]), what a call gets when some are missing (`CREDENTIALS_REQUIRED`, naming the server and the
//! missing names, never a value), and the pool key that keeps one user's processes apart from another's.
//!
//! Every upstream use of a `per_user` server asks [`user_values`] first: discovery and the listings (which then leave
//! the server out for that user), the `gw_*` tools and transparent calls (through `upstream_spec`), prompts,
//! resources, completion and tasks. Nothing starts a process for a user without all their values.
//!
//! The values live in the configuration's encrypted `user_credentials` section, which the vault (`src/credentials/`)
//! opens; [`stored_values`] is the one place that asks it.

use std::collections::HashMap;

use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::config::snapshot::Snapshot;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::upstream::PoolKey;

/// A user's values by name (`NAME` of `${user.NAME}`).
pub type Values = HashMap<String, String>;

/// Where users' values come from: the vault in the product ([`StoredSecrets`]), a fixed map in tests.
pub trait UserSecrets: Send + Sync {
    /// `user_id`'s values for `server_name` of configuration `config_id` under `snapshot`; `Ok(None)` when none are
    /// stored. An `Err` says why they could not be read (never a value).
    fn values(
        &self,
        snapshot: &Snapshot,
        user_id: &str,
        config_id: &str,
        server_name: &str,
    ) -> Result<Option<Values>, String>;
}

/// The product's source: the values stored (encrypted) in the configuration.
pub struct StoredSecrets;

impl UserSecrets for StoredSecrets {
    fn values(
        &self,
        snapshot: &Snapshot,
        user_id: &str,
        config_id: &str,
        server_name: &str,
    ) -> Result<Option<Values>, String> {
        stored_values(snapshot, user_id, config_id, server_name)
    }
}

/// The values stored for (user, configuration, server), opened by the vault (`crate::credentials`).
pub fn stored_values(
    snapshot: &Snapshot,
    user_id: &str,
    config_id: &str,
    server_name: &str,
) -> Result<Option<Values>, String> {
    let opened =
        crate::credentials::user_values(snapshot, user_id, config_id, server_name).map_err(|e| e.to_string())?;
    Ok(opened.map(|values| values.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect()))
}

/// The caller's values for `entry`: `None` for a server of shared credentials, else every name it declares. A user
/// without all of them gets `CREDENTIALS_REQUIRED` (and no process is started for them).
pub fn user_values(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
) -> Result<Option<Values>, GatewayError> {
    let Some(names) = entry.user_secret_names() else { return Ok(None) };
    let config_id = identity.mcp_config_id.as_deref().unwrap_or_default();
    let server = &entry.server_name;
    let stored = ctx.user_secrets.values(&identity.snapshot, &identity.user_id, config_id, server).map_err(|why| {
        tracing::warn!(server_name = %server, user_id = %identity.user_id, error = %why,
            "the user's stored credentials for the server could not be read");
        GatewayError::new(
            ErrorCode::UpstreamError,
            format!("your stored credentials for server {server:?} could not be read"),
        )
    })?;
    let mut values = stored.unwrap_or_default();
    let missing: Vec<&str> = names
        .iter()
        .filter(|name| values.get(name.as_str()).is_none_or(String::is_empty))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(credentials_required(identity, server, &missing));
    }
    values.retain(|name, _| names.contains(name));
    Ok(Some(values))
}

/// The `CREDENTIALS_REQUIRED` answer for `server`, naming the `missing` names.
fn credentials_required(identity: &Identity, server: &str, missing: &[&str]) -> GatewayError {
    tracing::info!(server_name = %server, user_id = %identity.user_id, missing = %missing.join(","),
        "the user has not set the credentials the server needs");
    let message = format!(
        "server {server:?} uses each user's own credentials, and yours are not set: {}; an admin sets them \
         (PUT /api/v1/users/{{user}}/credentials/{{config}}/{{server}}), or you do in the console",
        missing.join(", ")
    );
    // Kind `oauth` (not served yet) adds `authorize_url` here: the URL that connects the user's account.
    GatewayError::new(ErrorCode::CredentialsRequired, message)
        .with("server_name", server.to_string())
        .with("missing", missing.iter().map(|name| serde_json::Value::from(*name)).collect::<Vec<_>>())
}

/// The pool of `entry`'s processes the caller's calls use: the server's, or for a `per_user` server the user's own.
pub fn pool_key(identity: &Identity, entry: &ServerEntry) -> PoolKey {
    let config_id = identity.mcp_config_id.clone().unwrap_or_default();
    match entry.user_secret_names() {
        Some(_) => PoolKey::for_user(config_id, entry.server_name.clone(), &identity.user_id),
        None => PoolKey::new(config_id, entry.server_name.clone()),
    }
}
