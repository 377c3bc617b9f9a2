//! Users' own upstream credentials (contract 16): set, list and delete, for the admin API and the command line.
//! Values are set for servers of kind `secret`; the listing shows every `per_user` server, those of kind `oauth` with
//! whether the user is `connected` and when the token `expires_at` (the broker writes those slots,
//! `credentials/broker/`), and a `DELETE` removes either kind (the admin route revokes OAuth tokens first).
//!
//! A write seals each value under the snapshot's `secrets_key` with its slot as associated data
//! (`config/user_credentials.rs`) and goes through [`crate::config::ConfigStore::update`] like every admin write.
//! Listings show names and when each was set, never a value, and no answer or error message ever holds one: a body
//! is read field by field here (serde's messages quote the values they refuse). When no key is configured at all,
//! the first write generates `common_mcp_gateway_config.secrets_key`. A write also seals again, under the current
//! key, any value still under `MCPGW_SECRETS_KEY_PREVIOUS`, so a rotation completes with the next write.

use indexmap::IndexMap;
use serde_json::{Value, json};
use zeroize::Zeroizing;

use super::{ManageError, ManageResult, users};
use crate::config::secrets_key::{self, SecretsKey};
use crate::config::server_credentials::{OAUTH, TOKEN_EXCHANGE};
use crate::config::user_credentials::{self, CredentialSlot, KIND_OAUTH, KIND_SECRET, MAX_VALUE_BYTES, SlotName};
use crate::config::{ConfigFile, Snapshot};
use crate::credentials::rotate;

/// The most names one slot holds.
pub const MAX_NAMES_PER_SLOT: usize = 64;

/// The (user id, configuration id, server name) of a slot, each resolved (404 when unknown).
fn resolve_slot(snap: &Snapshot, user: &str, config: &str, server: &str) -> ManageResult<(String, String, String)> {
    let user_id = users::resolve(snap, user)?;
    let config_id = snap
        .resolve_config(config)
        .map(str::to_string)
        .ok_or_else(|| ManageError::NotFound(format!("MCP configuration {config:?} not found")))?;
    let known =
        snap.file.mcp_configs.get(&config_id).is_some_and(|c| c.mcp_config.iter().any(|s| s.server_name == server));
    if !known {
        return Err(ManageError::NotFound(format!("server {server:?} not found in MCP configuration {config:?}")));
    }
    Ok((user_id, config_id, server.to_string()))
}

/// One slot as listed: names and when each was set.
fn view(file: &ConfigFile, user_id: &str, config_id: &str, server_name: &str, slot: Option<&CredentialSlot>) -> Value {
    let names: Vec<&String> = slot.map(|s| s.values.keys().collect()).unwrap_or_default();
    let set_at: IndexMap<&String, Option<&String>> =
        names.iter().map(|name| (*name, slot.and_then(|s| s.set_at.get(*name)))).collect();
    json!({
        "user_id": user_id,
        "mcp_config_id": config_id,
        "mcp_config_name": file.mcp_configs.get(config_id).map(|c| c.mcp_config_name.as_str()),
        "server_name": server_name,
        "kind": slot.map_or_else(|| kind_of(file, config_id, server_name), |s| s.kind.as_str()),
        "set": !names.is_empty(),
        "names": names,
        "set_at": set_at,
        "expires_at": slot.and_then(|s| s.expires_at.as_deref()),
    })
}

/// The per-user kind of a server entry (`secret` when it is not per-user: only such slots exist for it).
fn kind_of(file: &ConfigFile, config_id: &str, server_name: &str) -> &'static str {
    let entry =
        file.mcp_configs.get(config_id).and_then(|c| c.mcp_config.iter().find(|e| e.server_name == server_name));
    entry.filter(|entry| entry.is_per_user()).map_or(KIND_SECRET, |entry| entry.credential_kind())
}

/// `GET /users/{user}/credentials`: per server of the configurations the user reaches (its projects', and any it has
/// values in) that takes per-user values or holds some: the slot's view, with the `declared` names and those
/// `missing` (a call of that server answers `CREDENTIALS_REQUIRED` until none is).
pub fn list(snap: &Snapshot, user: &str) -> ManageResult {
    let user_id = users::resolve(snap, user)?;
    let file = &snap.file;
    // The configurations of the user's projects first, then any other the user has values in (their order kept).
    let mut configs: Vec<&str> = file
        .projects
        .values()
        .filter(|project| project.users.contains(&user_id))
        .filter_map(|project| project.mcp_config_id.as_deref())
        .collect();
    configs
        .extend(file.user_credentials.get(&user_id).into_iter().flat_map(|stored| stored.keys().map(String::as_str)));
    let mut seen = std::collections::HashSet::new();
    configs.retain(|config| seen.insert(*config));
    let mut out = Vec::new();
    for config_id in configs {
        let Some(config) = file.mcp_configs.get(config_id) else { continue };
        for entry in &config.mcp_config {
            let slot = slot_of(file, &user_id, config_id, &entry.server_name);
            let declared = entry.user_secret_names();
            if !entry.is_per_user() && slot.is_none() {
                continue;
            }
            let mut shown = view(file, &user_id, config_id, &entry.server_name, slot);
            match entry.credential_kind() {
                OAUTH => shown["connected"] = json!(slot.is_some_and(|slot| slot.kind == KIND_OAUTH)),
                // Nothing stored: the client's own token is exchanged at each call (cached in memory).
                TOKEN_EXCHANGE => shown["connected"] = json!(null),
                _ => {}
            }
            if let Some(declared) = declared {
                let missing: Vec<&String> =
                    declared.iter().filter(|name| slot.is_none_or(|slot| !slot.values.contains_key(*name))).collect();
                shown["declared"] = json!(declared);
                shown["missing"] = json!(missing);
            }
            out.push(shown);
        }
    }
    Ok(Value::Array(out))
}

/// The slot of the broker's tokens for (user, configuration, server), when one is stored: what a `DELETE` revokes.
pub fn oauth_slot(
    snap: &Snapshot,
    user: &str,
    config: &str,
    server: &str,
) -> Option<crate::credentials::broker::SlotKey> {
    let (user_id, config_id, server_name) = resolve_slot(snap, user, config, server).ok()?;
    let slot = slot_of(&snap.file, &user_id, &config_id, &server_name)?;
    (slot.kind == KIND_OAUTH).then_some(crate::credentials::broker::SlotKey { user_id, config_id, server_name })
}

/// `GET /users/{user}/credentials/{config}/{server}`: one slot (`set: false` and no names when nothing is set).
pub fn get(snap: &Snapshot, user: &str, config: &str, server: &str) -> ManageResult {
    let (user_id, config_id, server_name) = resolve_slot(snap, user, config, server)?;
    let slot = slot_of(&snap.file, &user_id, &config_id, &server_name);
    Ok(view(&snap.file, &user_id, &config_id, &server_name, slot))
}

fn slot_of<'f>(file: &'f ConfigFile, user_id: &str, config_id: &str, server: &str) -> Option<&'f CredentialSlot> {
    file.user_credentials.get(user_id)?.get(config_id)?.get(server)
}

/// The values of a `PUT` body `{"values": {NAME: "value", …}}`, checked; no message ever quotes a value.
fn read_values(body: Value) -> ManageResult<Vec<(String, Zeroizing<String>)>> {
    let invalid = |why: String| ManageError::Validation(why);
    let Value::Object(mut body) = body else {
        return Err(invalid("the request body must be a JSON object {\"values\": {NAME: value}}".into()));
    };
    let values = body.remove("values");
    if let Some(other) = body.keys().next() {
        return Err(invalid(format!("unknown field {other:?}; the body is {{\"values\": {{NAME: value}}}}")));
    }
    let Some(Value::Object(values)) = values else {
        return Err(invalid("values: must be an object of names to strings".into()));
    };
    if values.is_empty() || values.len() > MAX_NAMES_PER_SLOT {
        return Err(invalid(format!("values: must hold 1 to {MAX_NAMES_PER_SLOT} names")));
    }
    let mut out = Vec::with_capacity(values.len());
    for (name, value) in values {
        user_credentials::check_name(&name).map_err(|why| invalid(format!("values: {why}")))?;
        let Value::String(value) = value else {
            return Err(invalid(format!("values.{name}: must be a string")));
        };
        let value = Zeroizing::new(value);
        if value.is_empty() || value.len() > MAX_VALUE_BYTES {
            return Err(invalid(format!("values.{name}: must be 1 to {MAX_VALUE_BYTES} bytes")));
        }
        out.push((name, value));
    }
    Ok(out)
}

/// The key to seal under: the snapshot's, or a new `secrets_key` written into `file` when none is configured.
fn sealing_key(file: &mut ConfigFile, snap: &Snapshot) -> ManageResult<SecretsKey> {
    if let Some(key) = &snap.settings.secrets_key {
        return Ok(key.clone());
    }
    let text = crate::secrets::random_token()?;
    let key = SecretsKey::from_text(&text, secrets_key::KeySource::Config);
    file.common_mcp_gateway_config.get_or_insert_with(Default::default).secrets_key = Some(text);
    tracing::info!("common_mcp_gateway_config.secrets_key generated for the first user credential");
    Ok(key)
}

/// `PUT /users/{user}/credentials/{config}/{server} {"values": {NAME: value}}`: sets those names (the others of the
/// slot stay).
pub fn set(
    file: &mut ConfigFile,
    snap: &Snapshot,
    user: &str,
    config: &str,
    server: &str,
    body: Value,
) -> ManageResult {
    let (user_id, config_id, server_name) = resolve_slot(snap, user, config, server)?;
    let values = read_values(body)?;
    // Only the names the server entry declares (`credentials.names` of a per_user secret entry) are taken.
    let entry =
        snap.file.mcp_configs.get(&config_id).and_then(|c| c.mcp_config.iter().find(|s| s.server_name == server));
    let Some(declared) = entry.and_then(|entry| entry.user_secret_names()) else {
        return Err(ManageError::Validation(format!(
            "server {server:?} does not take per-user secrets (its credentials are not {{\"mode\": \"per_user\", \"kind\": \"secret\"}})"
        )));
    };
    if let Some((name, _)) = values.iter().find(|(name, _)| !declared.contains(name)) {
        return Err(ManageError::Validation(format!(
            "{name:?} is not one of the names server {server:?} declares (credentials.names: {declared:?})"
        )));
    }
    let key = sealing_key(file, snap)?;
    let resealed = rotate::reseal(file, &key, key.current()).map_err(|e| ManageError::Internal(e.to_string()))?;
    if resealed > 0 {
        tracing::info!(values = resealed, "user credentials sealed again under the current secrets_key");
    }
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let slot = file
        .user_credentials
        .entry(user_id.clone())
        .or_default()
        .entry(config_id.clone())
        .or_default()
        .entry(server_name.clone())
        .or_insert_with(|| CredentialSlot { kind: KIND_SECRET.to_string(), ..Default::default() });
    if slot.values.len() + values.iter().filter(|(name, _)| !slot.values.contains_key(name)).count()
        > MAX_NAMES_PER_SLOT
    {
        return Err(ManageError::Validation(format!("a slot holds at most {MAX_NAMES_PER_SLOT} names")));
    }
    for (name, value) in &values {
        let at = SlotName { user_id: &user_id, config_id: &config_id, server_name: &server_name, name };
        slot.values.insert(name.clone(), user_credentials::seal(key.current(), at, value)?);
        slot.set_at.insert(name.clone(), now.clone());
    }
    let slot = slot_of(file, &user_id, &config_id, &server_name);
    Ok(view(file, &user_id, &config_id, &server_name, slot))
}

/// `DELETE /users/{user}/credentials/{config}/{server}[?name=NAME]`: removes the slot, or one name of it.
pub fn delete(
    file: &mut ConfigFile,
    snap: &Snapshot,
    user: &str,
    config: &str,
    server: &str,
    name: Option<&str>,
) -> ManageResult {
    let (user_id, config_id, server_name) = resolve_slot(snap, user, config, server)?;
    let not_set =
        || ManageError::NotFound(format!("no credentials of user {user:?} for server {server:?} of {config:?}"));
    let configs = file.user_credentials.get_mut(&user_id).ok_or_else(not_set)?;
    let servers = configs.get_mut(&config_id).ok_or_else(not_set)?;
    let removed: Vec<String> = match name {
        None => servers.shift_remove(&server_name).ok_or_else(not_set)?.values.into_keys().collect(),
        Some(name) => {
            let slot = servers.get_mut(&server_name).ok_or_else(not_set)?;
            slot.values.shift_remove(name).ok_or_else(|| {
                ManageError::NotFound(format!("no credential {name:?} of user {user:?} for server {server:?}"))
            })?;
            slot.set_at.shift_remove(name);
            if slot.values.is_empty() {
                servers.shift_remove(&server_name);
            }
            vec![name.to_string()]
        }
    };
    if servers.is_empty() {
        configs.shift_remove(&config_id);
    }
    if configs.is_empty() {
        file.user_credentials.shift_remove(&user_id);
    }
    let mut answer = view(file, &user_id, &config_id, &server_name, slot_of(file, &user_id, &config_id, &server_name));
    answer["deleted"] = json!(removed);
    Ok(answer)
}
