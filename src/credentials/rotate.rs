//! Sealing every stored value again under another key: `mcpgw secrets rotate-key` (a new `secrets_key` in the
//! configuration, written with the values in one write of the file), and the move off `MCPGW_SECRETS_KEY_PREVIOUS`
//! (values still under the old key sealed under the current one by any write of credentials).

use super::CredentialError;
use crate::config::ConfigFile;
use crate::config::secrets_key::SecretsKey;
use crate::config::user_credentials::{self, SlotName};

/// Seals under `to` every value of `file` that does not already open with it, opening it with `from` (its current
/// or previous key). Returns how many were sealed again; on an error `file` may be half done, so callers work on a
/// copy (as [`crate::config::ConfigStore::update`] does).
pub fn reseal(file: &mut ConfigFile, from: &SecretsKey, to: &[u8; 32]) -> Result<usize, CredentialError> {
    let mut count = 0;
    for (user_id, configs) in file.user_credentials.iter_mut() {
        for (config_id, servers) in configs.iter_mut() {
            for (server_name, slot) in servers.iter_mut() {
                for (name, sealed) in slot.values.iter_mut() {
                    let at = SlotName { user_id, config_id, server_name, name };
                    if user_credentials::open_with(to, at, sealed).is_some() {
                        continue;
                    }
                    let plain = user_credentials::open(from, at, sealed).ok_or_else(|| CredentialError::Unopened {
                        user_id: user_id.clone(),
                        config_id: config_id.clone(),
                        server_name: server_name.clone(),
                        name: name.clone(),
                    })?;
                    *sealed = user_credentials::seal(to, at, &plain)?;
                    count += 1;
                }
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Snapshot;
    use crate::config::secrets_key::{KeySource, derive};
    use crate::credentials::user_values;

    #[test]
    fn a_rotated_file_opens_with_the_new_key_only() {
        let snap = crate::credentials::tests::snapshot_with(&[("TOKEN", "marker-1"), ("OTHER", "marker-2")]);
        let old = snap.settings.secrets_key.clone().unwrap();
        let new_text = crate::secrets::random_token().unwrap();
        let mut file = snap.file.clone();
        assert_eq!(reseal(&mut file, &old, &derive(&new_text)).unwrap(), 2);
        assert_eq!(reseal(&mut file, &old, &derive(&new_text)).unwrap(), 0, "already under the new key");
        // Under the old key the file no longer loads; with the new one it does and the values are the same.
        assert!(Snapshot::build(file.clone(), [0; 32]).is_err());
        file.common_mcp_gateway_config.as_mut().unwrap().secrets_key = Some(new_text.clone());
        let rotated = Snapshot::build(file, [0; 32]).unwrap();
        let values = user_values(&rotated, "u1", "c1", "echo").unwrap().unwrap();
        assert_eq!((values.get("TOKEN"), values.get("OTHER")), (Some("marker-1"), Some("marker-2")));
        let wrong = SecretsKey::from_text(&"z".repeat(43), KeySource::Config);
        let mut again = rotated.file.clone();
        assert!(matches!(reseal(&mut again, &wrong, wrong.current()), Err(CredentialError::Unopened { .. })));
    }
}
