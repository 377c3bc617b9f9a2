//! Each user's own values for a `per_user` server (contract 16), as a call needs them: where they come from
//! ([`UserSecrets`]), what a call gets when some are missing (`CREDENTIALS_REQUIRED`, naming the server and the
//! missing names, never a value), and the pool key that keeps one user's processes apart from another's.
//!
//! Every upstream use of a `per_user` server asks [`user_values`] first: discovery and the listings (which then leave
//! the server out for that user), the `gw_*` tools and transparent calls (through `upstream_spec`), prompts,
//! resources, completion and tasks. Nothing starts a process for a user without all their values.
//!
//! Kind `secret`: the values live in the configuration's encrypted `user_credentials` section, which the vault
//! (`src/credentials/`) opens; [`stored_values`] is the one place that asks it. Kinds `oauth` and `token_exchange`:
//! the broker (`src/credentials/broker/`) hands out the user's token, put in place of `${user.ACCESS_TOKEN}` (or sent
//! as `Authorization: Bearer` to a remote server); a user without one gets `CREDENTIALS_REQUIRED` with the
//! `authorize_url` that connects their account.

use std::collections::HashMap;

use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::config::server_credentials;
use crate::config::snapshot::Snapshot;
use crate::credentials::broker::{BrokerError, SlotKey};
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::outbound::token_endpoint::TokenEndpointError;
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

/// The caller's values for `entry`: `None` for a server of shared credentials; for kind `secret` every name it
/// declares; for kinds `oauth` and `token_exchange` the user's token as `ACCESS_TOKEN`. A user without them gets
/// `CREDENTIALS_REQUIRED` (and no process is started for them).
pub async fn user_values(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
) -> Result<Option<Values>, GatewayError> {
    let kind = entry.credential_kind();
    let values = match kind {
        server_credentials::SECRET => secret_values(ctx, identity, entry),
        server_credentials::OAUTH => brokered_token(ctx, identity, entry).await,
        server_credentials::TOKEN_EXCHANGE => exchanged_token(ctx, identity, entry).await,
        _ => return Ok(None),
    };
    if values.as_ref().is_err_and(|failure| failure.code == ErrorCode::CredentialsRequired) {
        ctx.store.metrics().user_credential_event(kind, "required");
    }
    values.map(Some)
}

/// Kind `secret`: the stored values of every declared name.
fn secret_values(ctx: &GatewayContext, identity: &Identity, entry: &ServerEntry) -> Result<Values, GatewayError> {
    let names = entry.user_secret_names().unwrap_or_default();
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
        tracing::info!(server_name = %server, user_id = %identity.user_id, missing = %missing.join(","),
            "the user has not set the credentials the server needs");
        let message = format!(
            "server {server:?} uses each user's own credentials, and yours are not set: {}; an admin sets them \
             (PUT /api/v1/users/{{user}}/credentials/{{config}}/{{server}}), or you do in the console",
            missing.join(", ")
        );
        return Err(credentials_required(server, message)
            .with("missing", missing.iter().map(|name| serde_json::Value::from(*name)).collect::<Vec<_>>()));
    }
    values.retain(|name, _| names.contains(name));
    Ok(values)
}

/// The (user, configuration, server) slot of the caller's tokens for `entry`.
fn slot(identity: &Identity, entry: &ServerEntry) -> SlotKey {
    SlotKey {
        user_id: identity.user_id.clone(),
        config_id: identity.mcp_config_id.clone().unwrap_or_default(),
        server_name: entry.server_name.clone(),
    }
}

fn token_values(token: &crate::credentials::SecretValue) -> Values {
    Values::from([(server_credentials::ACCESS_TOKEN.to_string(), token.expose().to_string())])
}

/// Kind `oauth`: the user's token from the broker, or `CREDENTIALS_REQUIRED` with the `authorize_url` that
/// connects their account.
async fn brokered_token(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
) -> Result<Values, GatewayError> {
    let slot = slot(identity, entry);
    let server = &entry.server_name;
    let token = ctx.broker.access_token(&ctx.store, &identity.snapshot, &slot, entry).await.map_err(|failure| {
        tracing::warn!(server_name = %server, user_id = %identity.user_id, error = %failure,
            "the user's upstream token could not be read or refreshed");
        broker_failure(server, &failure)
    })?;
    if let Some(token) = token {
        return Ok(token_values(&token));
    }
    let url = ctx.broker.connect_url(&identity.snapshot, &slot).map_err(|failure| broker_failure(server, &failure))?;
    tracing::info!(server_name = %server, user_id = %identity.user_id,
        "the user has not connected their account for the server: a connect URL was handed out");
    let message = format!(
        "server {server:?} acts with your own account, which is not connected (or its access ended): open \
         authorize_url in a browser within 10 minutes, then call again"
    );
    Err(credentials_required(server, message).with("authorize_url", url))
}

/// Kind `token_exchange`: the client's own OAuth token exchanged for one meant for the server (RFC 8693).
async fn exchanged_token(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
) -> Result<Values, GatewayError> {
    let server = &entry.server_name;
    let Some(subject) = &identity.client_token else {
        let message = format!(
            "server {server:?} takes a token exchanged for your own OAuth token (RFC 8693); this call was \
             authenticated with an API key: call with an OAuth access token of the gateway's issuer"
        );
        return Err(credentials_required(server, message));
    };
    let token = ctx.broker.exchange(&slot(identity, entry), entry, subject).await.map_err(|failure| {
        tracing::warn!(server_name = %server, user_id = %identity.user_id, error = %failure,
            "the client's token could not be exchanged for the server's");
        match &failure {
            BrokerError::Endpoint(TokenEndpointError::Rejected { status, error })
                if *status < 500 && *status != 429 =>
            {
                credentials_required(
                    server,
                    format!(
                        "the token exchange for server {server:?} refused your token ({}): sign in again",
                        error.as_deref().unwrap_or("no reason given")
                    ),
                )
            }
            _ => broker_failure(server, &failure),
        }
    })?;
    Ok(token_values(&token))
}

/// A broker failure other than a missing token: the authorization server unreachable or refusing, a configuration
/// the broker cannot use.
fn broker_failure(server: &str, failure: &BrokerError) -> GatewayError {
    let code = match failure {
        BrokerError::Endpoint(TokenEndpointError::Unreachable(_) | TokenEndpointError::Timeout(_)) => {
            ErrorCode::UpstreamUnavailable
        }
        _ => ErrorCode::UpstreamError,
    };
    GatewayError::new(code, format!("your credentials for server {server:?} could not be obtained: {failure}"))
        .with("server_name", server.to_string())
}

/// The `CREDENTIALS_REQUIRED` answer for `server`.
fn credentials_required(server: &str, message: String) -> GatewayError {
    GatewayError::new(ErrorCode::CredentialsRequired, message).with("server_name", server.to_string())
}

/// The pool of `entry`'s processes the caller's calls use: the server's, or for a `per_user` server the user's own.
pub fn pool_key(identity: &Identity, entry: &ServerEntry) -> PoolKey {
    let config_id = identity.mcp_config_id.clone().unwrap_or_default();
    match entry.is_per_user() {
        true => PoolKey::for_user(config_id, entry.server_name.clone(), &identity.user_id),
        false => PoolKey::new(config_id, entry.server_name.clone()),
    }
}
