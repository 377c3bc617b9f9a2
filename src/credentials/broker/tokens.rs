//! Where the broker keeps each user's tokens: the configuration's `user_credentials` section, a slot of kind `oauth`
//! per (user, configuration, server) holding `access_token` and `refresh_token` sealed like every other value
//! (`config/user_credentials.rs`: AES-256-GCM under the `secrets_key`, the slot as associated data), and
//! `expires_at` beside them. So the file store, the Redis store, every replica, backups and key rotation carry them
//! as they carry an admin's values, encrypted.
//!
//! Writes go through [`ConfigStore::update`] (blocking: run on the blocking pool) like every admin write: a new
//! token is a configuration write, a reload's snapshot swap, and what other replicas hear of.

use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};

use super::BrokerError;
use crate::config::user_credentials::{self, CredentialSlot, KIND_OAUTH, SlotName};
use crate::config::{ConfigFile, ConfigStore, Snapshot};
use crate::credentials::SecretValue;
use crate::outbound::token_endpoint::TokenAnswer;

pub const ACCESS: &str = "access_token";
pub const REFRESH: &str = "refresh_token";

/// Which slot: (user, configuration, server).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SlotKey {
    pub user_id: String,
    pub config_id: String,
    pub server_name: String,
}

impl SlotKey {
    fn name<'a>(&'a self, name: &'a str) -> SlotName<'a> {
        SlotName { user_id: &self.user_id, config_id: &self.config_id, server_name: &self.server_name, name }
    }
}

/// A user's tokens for one server, opened.
pub struct Stored {
    pub access: SecretValue,
    pub refresh: Option<SecretValue>,
    /// `None`: the authorization server gave no lifetime; the token is used until a call is refused.
    pub expires_at: Option<DateTime<Utc>>,
    /// When the access token was stored (its `set_at`).
    pub issued_at: Option<DateTime<Utc>>,
}

/// The tokens stored in `snapshot` for `slot`, opened; `None` when there are none (or they do not open).
pub fn read(snapshot: &Snapshot, slot: &SlotKey) -> Option<Stored> {
    let stored = snapshot.file.user_credentials.get(&slot.user_id)?.get(&slot.config_id)?.get(&slot.server_name)?;
    if stored.kind != KIND_OAUTH {
        return None;
    }
    let key = snapshot.settings.secrets_key.as_ref()?;
    let open = |name: &str| {
        let sealed = stored.values.get(name)?;
        user_credentials::open(key, slot.name(name), sealed).map(SecretValue::from)
    };
    let time = |at: Option<&String>| at.and_then(|at| DateTime::parse_from_rfc3339(at).ok()).map(|at| at.to_utc());
    let (expires_at, issued_at) = (time(stored.expires_at.as_ref()), time(stored.set_at.get(ACCESS)));
    Some(Stored { access: open(ACCESS)?, refresh: open(REFRESH), expires_at, issued_at })
}

/// Stores `answer` for `slot` (its refresh token, or else `kept_refresh`, the one it was refreshed with). Nothing is
/// written when the server is no longer of kind `oauth` in the configuration.
pub async fn write(
    store: &Arc<ConfigStore>,
    slot: &SlotKey,
    answer: &TokenAnswer,
    kept_refresh: Option<&SecretValue>,
) -> Result<(), BrokerError> {
    let now = Utc::now();
    let expires_at = answer
        .expires_in
        .and_then(|lifetime| chrono::Duration::from_std(lifetime).ok())
        .and_then(|lifetime| now.checked_add_signed(lifetime))
        .map(|at| at.to_rfc3339_opts(SecondsFormat::Secs, true));
    let access = SecretValue::from(answer.access_token.clone());
    let refresh = answer.refresh_token.clone().map(SecretValue::from).or_else(|| kept_refresh.cloned());
    let (store, slot) = (Arc::clone(store), slot.clone());
    blocking(move || {
        store.update(|file: &mut ConfigFile, snap: &Snapshot| {
            if !is_oauth_server(snap, &slot) {
                return Ok(());
            }
            let key = snap
                .settings
                .secrets_key
                .as_ref()
                .ok_or(BrokerError::NotConfigured("no secrets_key is configured to seal the token under".into()))?;
            let mut stored = CredentialSlot { kind: KIND_OAUTH.to_string(), expires_at, ..CredentialSlot::default() };
            let stamp = now.to_rfc3339_opts(SecondsFormat::Secs, true);
            for (name, value) in [(ACCESS, Some(&access)), (REFRESH, refresh.as_ref())] {
                if let Some(value) = value {
                    let sealed = user_credentials::seal(key.current(), slot.name(name), value.expose())?;
                    stored.values.insert(name.to_string(), sealed);
                    stored.set_at.insert(name.to_string(), stamp.clone());
                }
            }
            file.user_credentials
                .entry(slot.user_id.clone())
                .or_default()
                .entry(slot.config_id.clone())
                .or_default()
                .insert(slot.server_name.clone(), stored);
            Ok(())
        })
    })
    .await
}

/// Removes `slot`'s tokens; `Ok(false)` when there were none.
pub async fn remove(store: &Arc<ConfigStore>, slot: &SlotKey) -> Result<bool, BrokerError> {
    let (store, slot) = (Arc::clone(store), slot.clone());
    blocking(move || {
        let present = |snap: &Snapshot| {
            snap.file
                .user_credentials
                .get(&slot.user_id)
                .and_then(|c| c.get(&slot.config_id)?.get(&slot.server_name))
                .is_some_and(|stored| stored.kind == KIND_OAUTH)
        };
        if !present(&store.snapshot()) {
            return Ok(false);
        }
        store.update(|file: &mut ConfigFile, snap: &Snapshot| {
            if !present(snap) {
                return Ok(false);
            }
            remove_slot(file, &slot.user_id, &slot.config_id, &slot.server_name);
            Ok(true)
        })
    })
    .await
}

/// Removes a slot from `file`, and the levels above it left empty.
pub fn remove_slot(file: &mut ConfigFile, user_id: &str, config_id: &str, server_name: &str) -> bool {
    let Some(configs) = file.user_credentials.get_mut(user_id) else { return false };
    let Some(servers) = configs.get_mut(config_id) else { return false };
    let removed = servers.shift_remove(server_name).is_some();
    if servers.is_empty() {
        configs.shift_remove(config_id);
    }
    if configs.is_empty() {
        file.user_credentials.shift_remove(user_id);
    }
    removed
}

/// Whether `slot`'s server exists in `snap` and is of kind `oauth` (and its user exists).
fn is_oauth_server(snap: &Snapshot, slot: &SlotKey) -> bool {
    snap.file.users.contains_key(&slot.user_id)
        && snap.file.mcp_configs.get(&slot.config_id).is_some_and(|config| {
            config.mcp_config.iter().any(|entry| {
                entry.server_name == slot.server_name
                    && entry.credential_kind() == crate::config::server_credentials::OAUTH
            })
        })
}

/// Runs a store operation on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, BrokerError> + Send + 'static,
) -> Result<T, BrokerError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| BrokerError::Internal(e.to_string()))?
}
