//! Each user's own upstream credentials of kind `secret` (contract 16): the one door the runtime reads them through.
//!
//! Values are set by an admin (`manage/credentials.rs`, behind `PUT /api/v1/users/{user}/credentials/{config}/
//! {server}` and `mcpgw user set-credential`) and stored sealed in the configuration's `user_credentials` section
//! (`config/user_credentials.rs`: the shape, the `enc:v1:` form, the check at load; `config/secrets_key.rs`: the key).
//! The runtime (the `${user.NAME}` substitution of a `per_user` server) calls [`user_values`] with the snapshot its
//! request holds: the values are opened then, on demand, and handed back in [`SecretValues`], whose `Debug` shows
//! names only and whose memory is wiped when dropped. Nothing here logs. [`rotate`] seals every value again under
//! another key (`mcpgw secrets rotate-key`, and the move off `MCPGW_SECRETS_KEY_PREVIOUS`).
//!
//! This folder depends on `config` and the leaves only, so that `upstream` and `gateway` can use it.

pub mod broker;
pub mod rotate;
mod values;

pub use values::{SecretValue, SecretValues};

use crate::config::Snapshot;
use crate::config::user_credentials::{self, KIND_SECRET, SlotName};

/// Why a user's values could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Values are stored but no `secrets_key` is configured (a snapshot refuses this at load; kept for callers
    /// holding a snapshot built otherwise).
    #[error("no secrets_key is configured to open users' credentials")]
    NoKey,
    /// A stored value does not open with the key in effect (names the slot, never the value).
    #[error(
        "the credential {name:?} of user {user_id:?} for server {server_name:?} of configuration {config_id:?} does \
         not open with the secrets_key"
    )]
    Unopened { user_id: String, config_id: String, server_name: String, name: String },
    /// The operating system's random generator failed while sealing.
    #[error(transparent)]
    Random(#[from] crate::secrets::RandomError),
}

/// The values of `user_id`'s slot for server `server_name` of MCP configuration `config_id`, opened; `None` when
/// nothing is set there. The server entry's `credentials` (which names it expects) is the runtime's business: every
/// value set is returned.
pub fn user_values(
    snapshot: &Snapshot,
    user_id: &str,
    config_id: &str,
    server_name: &str,
) -> Result<Option<SecretValues>, CredentialError> {
    let slot = snapshot.file.user_credentials.get(user_id).and_then(|c| c.get(config_id)?.get(server_name));
    let Some(slot) = slot.filter(|slot| slot.kind == KIND_SECRET && !slot.values.is_empty()) else {
        return Ok(None);
    };
    let key = snapshot.settings.secrets_key.as_ref().ok_or(CredentialError::NoKey)?;
    let mut values = SecretValues::with_capacity(slot.values.len());
    for (name, sealed) in &slot.values {
        let at = SlotName { user_id, config_id, server_name, name };
        let plain = user_credentials::open(key, at, sealed).ok_or_else(|| CredentialError::Unopened {
            user_id: user_id.to_string(),
            config_id: config_id.to_string(),
            server_name: server_name.to_string(),
            name: name.clone(),
        })?;
        values.insert(name.clone(), SecretValue::from(plain));
    }
    Ok(Some(values))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::secrets_key::{KeySource, SecretsKey};
    use serde_json::json;

    pub(crate) const KEY: &str = "test-secrets-key-0123456789abcdefghijklmnop";

    /// A snapshot whose user u1 has `values` (sealed under [`KEY`]) for server `echo` of configuration `c1`.
    pub(crate) fn snapshot_with(values: &[(&str, &str)]) -> Snapshot {
        let key = SecretsKey::from_text(KEY, KeySource::Config);
        let sealed: serde_json::Map<String, serde_json::Value> = values
            .iter()
            .map(|(name, value)| {
                let at = SlotName { user_id: "u1", config_id: "c1", server_name: "echo", name };
                (name.to_string(), json!(user_credentials::seal(key.current(), at, value).unwrap()))
            })
            .collect();
        Snapshot::from_value(
            json!({
                "common_mcp_gateway_config": {"secrets_key": KEY},
                "mcp_configs": {"c1": {"mcp_config_name": "main", "mcp_config": [
                    {"server_name": "echo", "config": {"command": "echo"}}]}},
                "users": {"u1": {"email": "a@example.com"}},
                "user_credentials": {"u1": {"c1": {"echo": {"kind": "secret", "values": sealed}}}}
            }),
            [0; 32],
        )
        .unwrap()
    }

    #[test]
    fn values_open_on_demand_and_absent_slots_are_none() {
        let snap = snapshot_with(&[("GITHUB_TOKEN", "marker-1"), ("OTHER", "marker-2")]);
        let values = user_values(&snap, "u1", "c1", "echo").unwrap().unwrap();
        assert_eq!(values.get("GITHUB_TOKEN"), Some("marker-1"));
        assert_eq!(values.get("OTHER"), Some("marker-2"));
        assert_eq!(values.names().collect::<Vec<_>>(), vec!["GITHUB_TOKEN", "OTHER"]);
        let shown = format!("{values:?}");
        assert!(!shown.contains("marker"), "{shown}");
        assert!(user_values(&snap, "u2", "c1", "echo").unwrap().is_none());
        assert!(user_values(&snap, "u1", "c1", "other").unwrap().is_none());
        assert!(user_values(&snap, "u1", "c2", "echo").unwrap().is_none());
    }

    #[test]
    fn a_value_moved_to_another_slot_does_not_open() {
        let snap = snapshot_with(&[("TOKEN", "marker")]);
        let mut doc = serde_json::to_value(&snap.file).unwrap();
        let moved = doc["user_credentials"]["u1"]["c1"]["echo"].clone();
        doc["users"]["u2"] = json!({"email": "b@example.com"});
        doc["user_credentials"]["u2"] = json!({"c1": {"echo": moved}});
        let problems = Snapshot::from_value(doc, [0; 32]).unwrap_err().join("\n");
        assert!(problems.contains("user_credentials.u2.c1.echo.values.TOKEN: does not open"), "{problems}");
        assert!(!problems.contains("marker"), "{problems}");
    }
}
