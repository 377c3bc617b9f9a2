//! Backup encryption: API keys never appear in clear in a backup file.
//!
//! A backup holds the whole configuration, with the admin key and every gateway API key (the keys of the `apikeys`
//! object) replaced by `enc:v1:` + base64url(nonce ‖ AES-256-GCM ciphertext). The 32-byte encryption key comes from
//! the environment variable `GW_BACKUP_KEY` (base64 of 32 bytes, e.g. `openssl rand -base64 32`) or, when that is not
//! set, from the file `gw_backup.key` next to the config file, created (mode 0600) by the first backup. A restore on
//! another machine needs the same key: copy `gw_backup.key` next to its config file or set `GW_BACKUP_KEY` there.
//! The backup records the key's fingerprint so a restore with the wrong key says so instead of failing obscurely.

use std::fs;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use sha2::{Digest, Sha256};

use super::{ManageError, ManageResult};
use crate::config::fsutil;
use crate::secrets;

/// Name of the key file created next to the config file.
pub const KEY_FILE_NAME: &str = "gw_backup.key";
/// Environment variable that supplies the key instead of the file.
pub const KEY_ENV: &str = "GW_BACKUP_KEY";
/// Prefix of every encrypted value.
pub const ENCRYPTED_PREFIX: &str = "enc:v1:";

/// An AES-256-GCM key and where it came from.
pub struct BackupKey {
    key: [u8; 32],
    /// `GW_BACKUP_KEY` or the key file's path, for messages.
    pub source: String,
}

fn decode_key(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    [URL_SAFE_NO_PAD, URL_SAFE, STANDARD, STANDARD_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .and_then(|bytes| <[u8; 32]>::try_from(bytes.as_slice()).ok())
}

/// The key file's path for a config file.
pub fn key_file_path(config_path: &Path) -> PathBuf {
    fsutil::parent_dir(&fsutil::write_target(config_path)).join(KEY_FILE_NAME)
}

impl BackupKey {
    /// Loads the key from `GW_BACKUP_KEY` or the key file; with `create`, makes a new key file when neither exists.
    pub fn load(config_path: &Path, create: bool) -> ManageResult<BackupKey> {
        if let Ok(text) = std::env::var(KEY_ENV) {
            let key = decode_key(&text).ok_or_else(|| {
                ManageError::Validation(format!("{KEY_ENV} must be 32 bytes in base64 (openssl rand -base64 32)"))
            })?;
            return Ok(BackupKey { key, source: KEY_ENV.to_string() });
        }
        let path = key_file_path(config_path);
        let source = path.display().to_string();
        match fs::read_to_string(&path) {
            Ok(text) => {
                let key = decode_key(&text).ok_or_else(|| {
                    ManageError::Internal(format!("backup key file {source} does not hold 32 bytes in base64"))
                })?;
                Ok(BackupKey { key, source })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                let key = secrets::random_bytes::<32>()?;
                let text = format!("{}\n", URL_SAFE_NO_PAD.encode(key));
                fsutil::write_atomic(&path, text.as_bytes()).map_err(|e| {
                    ManageError::Internal(format!("cannot create backup key file {source}: {e}; set {KEY_ENV} instead"))
                })?;
                tracing::info!(key_file = %source, "created backup encryption key file");
                Ok(BackupKey { key, source })
            }
            Err(e) => Err(ManageError::Validation(format!(
                "no backup encryption key: set {KEY_ENV} or provide {source} ({e})"
            ))),
        }
    }

    /// Fingerprint of the key (first 12 hex characters of its SHA-256), safe to store and show.
    pub fn fingerprint(&self) -> String {
        secrets::key_id_from_digest(&Sha256::digest(self.key).into())
    }

    /// Encrypts `plain`, bound to `label` (what the value is) as associated data.
    pub fn encrypt(&self, plain: &str, label: &str) -> ManageResult<String> {
        let sealed = secrets::seal(&self.key, plain.as_bytes(), label)?;
        Ok(format!("{ENCRYPTED_PREFIX}{}", URL_SAFE_NO_PAD.encode(sealed)))
    }

    /// Decrypts a value made by [`BackupKey::encrypt`] with the same label; `None` when it is not one or the key is wrong.
    pub fn decrypt(&self, sealed: &str, label: &str) -> Option<String> {
        let bytes = URL_SAFE_NO_PAD.decode(sealed.strip_prefix(ENCRYPTED_PREFIX)?).ok()?;
        String::from_utf8(secrets::open(&self.key, &bytes, label)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> BackupKey {
        BackupKey { key: [byte; 32], source: "test".into() }
    }

    #[test]
    fn values_round_trip_and_never_show_in_clear() {
        let k = key(7);
        let sealed = k.encrypt("gw_secret-key", "apikey").unwrap();
        assert!(sealed.starts_with(ENCRYPTED_PREFIX) && !sealed.contains("secret"));
        assert_ne!(sealed, k.encrypt("gw_secret-key", "apikey").unwrap(), "nonces must differ");
        assert_eq!(k.decrypt(&sealed, "apikey").as_deref(), Some("gw_secret-key"));
        assert_eq!(k.decrypt(&sealed, "admin_apikey"), None, "label is bound");
        assert_eq!(key(8).decrypt(&sealed, "apikey"), None, "wrong key");
        assert_eq!(k.decrypt("enc:v1:AAAA", "apikey"), None);
        assert_ne!(key(7).fingerprint(), key(8).fingerprint());
    }

    #[test]
    fn keys_decode_from_common_base64_forms() {
        let raw = [3u8; 32];
        for text in [URL_SAFE_NO_PAD.encode(raw), STANDARD.encode(raw), format!("{}\n", STANDARD.encode(raw))] {
            assert_eq!(decode_key(&text), Some(raw));
        }
        assert_eq!(decode_key("too-short"), None);
    }
}
