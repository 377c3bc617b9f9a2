//! `user_credentials`: each user's own values for upstream servers (contract 16, kind `secret`), stored sealed.
//!
//! The section lives in the configuration document itself, so the file store, the Redis store, reloads, replicas
//! and backups carry it like any other section:
//!
//! ```json
//! "user_credentials": {
//!   "<user id>": {"<MCP configuration id>": {"<server name>": {
//!     "kind": "secret",
//!     "values": {"GITHUB_TOKEN": "enc:v1:<base64url(nonce || ciphertext || tag)>"},
//!     "set_at": {"GITHUB_TOKEN": "2026-11-02T10:00:00Z"}}}}}
//! ```
//!
//! Only the sealed form is ever stored: AES-256-GCM under the key derived from `secrets_key` ([`super::secrets_key`]),
//! a random 96-bit nonce per value, and the slot (user, configuration, server, name) as associated data, so a value
//! copied into another slot does not open. When a snapshot is built, every value must have that form and open with
//! the key in effect (or `MCPGW_SECRETS_KEY_PREVIOUS`): a wrong key is refused at load, naming the slot, rather than
//! failing each user's calls later. Slots of a user, configuration or server that no longer exists are kept (a hand
//! edit that removes a server does not make the file invalid) and ignored: no call can reach them. The admin API
//! removes a user's slots with the user and a configuration's with the configuration.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Map, Value};
use zeroize::Zeroizing;

use super::decode::Problems;
use super::model::ConfigFile;
use super::secrets_key::SecretsKey;
use crate::secrets::{self, RandomError};

/// user id -> MCP configuration id -> server name -> the slot.
pub type UserCredentials = IndexMap<String, IndexMap<String, IndexMap<String, CredentialSlot>>>;

/// A slot of values an admin (or the user) set, for a server of kind `secret`.
pub const KIND_SECRET: &str = "secret";
/// A slot of the OAuth broker's tokens (`access_token`, `refresh_token`, and `expires_at` beside them), for a server of
/// kind `oauth`; written by the broker only.
pub const KIND_OAUTH: &str = "oauth";
/// The prefix of a sealed value.
pub const SEALED_PREFIX: &str = "enc:v1:";
/// The largest value accepted, in bytes.
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// The longest name accepted.
pub const MAX_NAME_CHARS: usize = 128;
const NONCE_AND_TAG: usize = 12 + 16;

/// One user's values for one server of one configuration.
#[derive(Clone, Default, Serialize, PartialEq)]
pub struct CredentialSlot {
    pub kind: String,
    /// Name to sealed value (`enc:v1:…`).
    pub values: IndexMap<String, String>,
    /// Name to when it was last set (RFC 3339, UTC).
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub set_at: IndexMap<String, String>,
    /// Kind `oauth`: when the access token expires (RFC 3339, UTC), when the authorization server said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Names only: even sealed values stay out of logs.
impl std::fmt::Debug for CredentialSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialSlot")
            .field("kind", &self.kind)
            .field("names", &self.values.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Where a value belongs: what its associated data binds it to.
#[derive(Debug, Clone, Copy)]
pub struct SlotName<'a> {
    pub user_id: &'a str,
    pub config_id: &'a str,
    pub server_name: &'a str,
    pub name: &'a str,
}

impl SlotName<'_> {
    /// The associated data: a JSON array, so no choice of ids can make two slots' data equal.
    fn associated_data(&self) -> String {
        Value::from(vec!["mcpgw user_credentials/1", self.user_id, self.config_id, self.server_name, self.name])
            .to_string()
    }
}

/// `plain` sealed under `key` for `slot`: `enc:v1:` + base64url(nonce ‖ ciphertext ‖ tag).
pub fn seal(key: &[u8; 32], slot: SlotName<'_>, plain: &str) -> Result<String, RandomError> {
    let sealed = secrets::seal(key, plain.as_bytes(), &slot.associated_data())?;
    Ok(format!("{SEALED_PREFIX}{}", URL_SAFE_NO_PAD.encode(&sealed)))
}

/// The value `sealed` holds, when it opens with `key` for `slot`.
pub fn open_with(key: &[u8; 32], slot: SlotName<'_>, sealed: &str) -> Option<Zeroizing<String>> {
    let bytes = URL_SAFE_NO_PAD.decode(sealed.strip_prefix(SEALED_PREFIX)?).ok()?;
    let plain = Zeroizing::new(secrets::open(key, &bytes, &slot.associated_data())?);
    std::str::from_utf8(&plain).ok().map(|text| Zeroizing::new(text.to_string()))
}

/// The value `sealed` holds, opened with the current key or else the previous one.
pub fn open(key: &SecretsKey, slot: SlotName<'_>, sealed: &str) -> Option<Zeroizing<String>> {
    key.candidates().find_map(|candidate| open_with(candidate, slot, sealed))
}

/// Whether `value` has the sealed form (the prefix, then base64url of at least a nonce and a tag).
pub fn is_sealed(value: &str) -> bool {
    value
        .strip_prefix(SEALED_PREFIX)
        .and_then(|text| URL_SAFE_NO_PAD.decode(text).ok())
        .is_some_and(|bytes| bytes.len() >= NONCE_AND_TAG)
}

/// A credential's name: an environment variable's (`[A-Za-z_][A-Za-z0-9_]*`), at most [`MAX_NAME_CHARS`].
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let well_formed = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !well_formed || name.len() > MAX_NAME_CHARS {
        let shown: String = name.chars().take(64).collect();
        return Err(format!(
            "{shown:?} is not a credential name (an environment variable's: letters, digits and _, not starting \
             with a digit, at most {MAX_NAME_CHARS} characters)"
        ));
    }
    Ok(())
}

/// Every sealed value of `file`, with its slot.
pub fn every_value(file: &ConfigFile) -> impl Iterator<Item = (SlotName<'_>, &str)> {
    file.user_credentials.iter().flat_map(|(user_id, configs)| {
        configs.iter().flat_map(move |(config_id, servers)| {
            servers.iter().flat_map(move |(server_name, slot)| {
                slot.values
                    .iter()
                    .map(move |(name, sealed)| (SlotName { user_id, config_id, server_name, name }, sealed.as_str()))
            })
        })
    })
}

/// The load-time check: values stored need a key, and each must open with it (the form and the names were checked
/// by the decoder). Problems name the slot, never a value.
pub fn check(file: &ConfigFile, key: Option<&SecretsKey>, problems: &mut Problems) {
    let mut values = every_value(file).peekable();
    if values.peek().is_none() {
        return;
    }
    let Some(key) = key else {
        problems.push(
            "user_credentials: values are stored but no secrets_key is configured (set \
             common_mcp_gateway_config.secrets_key, secrets_key_file or MCPGW_SECRETS_KEY to the key they were \
             sealed under)"
                .to_string(),
        );
        return;
    };
    let unopened: Vec<SlotName<'_>> =
        values.filter(|(slot, sealed)| open(key, *slot, sealed).is_none()).map(|v| v.0).collect();
    if let Some(first) = unopened.first() {
        problems.push(format!(
            "user_credentials.{}.{}.{}.values.{}: does not open with the secrets_key from {} ({} of the stored \
             values do not): the key is not the one they were sealed under (during a rotation, set the old key in \
             MCPGW_SECRETS_KEY_PREVIOUS), or the value was copied from another slot",
            first.user_id,
            first.config_id,
            first.server_name,
            first.name,
            key.source,
            unopened.len()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::secrets_key::KeySource;

    const KEY: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn slot<'a>(user_id: &'a str, server_name: &'a str) -> SlotName<'a> {
        SlotName { user_id, config_id: "c1", server_name, name: "TOKEN" }
    }

    #[test]
    fn a_sealed_value_opens_in_its_own_slot_only() {
        let key = SecretsKey::from_text(KEY, KeySource::Config);
        let sealed = seal(key.current(), slot("u1", "github"), "marker-value").unwrap();
        assert!(sealed.starts_with(SEALED_PREFIX) && is_sealed(&sealed) && !sealed.contains("marker"));
        assert_eq!(open(&key, slot("u1", "github"), &sealed).as_deref().map(String::as_str), Some("marker-value"));
        assert!(open(&key, slot("u2", "github"), &sealed).is_none(), "another user's slot");
        assert!(open(&key, slot("u1", "gitlab"), &sealed).is_none(), "another server's slot");
        let other = SecretsKey::from_text(&"b".repeat(43), KeySource::Config);
        assert!(open(&other, slot("u1", "github"), &sealed).is_none(), "another key");
        let again = seal(key.current(), slot("u1", "github"), "marker-value").unwrap();
        assert_ne!(sealed, again, "a fresh nonce per value");
    }

    #[test]
    fn sealed_form_and_names() {
        assert!(!is_sealed("plain text") && !is_sealed("enc:v1:") && !is_sealed("enc:v1:!!!"));
        assert!(!is_sealed(&format!("{SEALED_PREFIX}{}", URL_SAFE_NO_PAD.encode([0; 27]))));
        for ok in ["GITHUB_TOKEN", "_x", "a1"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A B", "É", &"A".repeat(129)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
