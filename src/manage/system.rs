//! System operations: the health report, backup, restore and reset.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::backup::{BackupKey, ENCRYPTED_PREFIX, key_file_path};
use super::backup_files::{BackupDir, read_backup_file, write_backup};
use super::{ManageError, ManageResult, decode_body};
use crate::cache::ExternalReport;
use crate::config::defaults::fresh_config;
use crate::config::model::CommonConfig;
use crate::config::{ConfigFile, ConfigStore};
use crate::ids::timestamp;

/// Format tag of backup files.
pub const BACKUP_FORMAT: &str = "mcpgw-backup/1";
const ADMIN_LABEL: &str = "mcpgw-backup/1 admin_apikey";
const APIKEY_LABEL: &str = "mcpgw-backup/1 apikey";
const SESSION_SECRET_LABEL: &str = "mcpgw-backup/1 session_secret";
const AUDIT_KEY_LABEL: &str = "mcpgw-backup/1 audit_log.hmac_key";
const SECRETS_KEY_LABEL: &str = "mcpgw-backup/1 secrets_key";
/// Top-level keys a backup adds around the configuration; a restore removes them.
const BACKUP_META: [&str; 4] = ["backup_format", "created_at", "gateway_version", "encryption"];

/// The `data` of `GET /api/v1/system/health`. `listeners_up` is false while starting or draining; `external` is the
/// shared cache's report when it is on (unreachable Redis: `degraded`, named in `degraded_reasons`); `more` are other
/// reasons to report `degraded` (the OAuth issuer's keys that cannot be fetched).
pub fn health(
    store: &ConfigStore,
    uptime: Duration,
    listeners_up: bool,
    external: Option<ExternalReport>,
    more: Vec<String>,
) -> Value {
    let snap = store.snapshot();
    let status = store.status();
    let mut reasons = Vec::new();
    if !status.valid {
        reasons.push("the last configuration reload failed; the last valid configuration is serving".to_string());
    }
    if !listeners_up {
        reasons.push("starting or draining".to_string());
    }
    reasons.extend(external.as_ref().and_then(ExternalReport::degraded_reason));
    reasons.extend(store.redis().and_then(|redis| redis.degraded_reason()));
    reasons.extend(more);
    if crate::telemetry::traces::exporter_status().failing {
        reasons.push("telemetry exporter failing".to_string());
    }
    let state = if reasons.is_empty() { "healthy" } else { "degraded" };
    let s = &snap.settings;
    let mut data = json!({
        "status": state,
        "version": crate::VERSION,
        "config_path": store.path().display().to_string(),
        "config_valid": status.valid,
        "total_configs": snap.file.mcp_configs.len(),
        "total_projects": snap.file.projects.len(),
        "total_users": snap.file.users.len(),
        "total_api_keys": snap.key_count(),
        "cache_enabled": true,
        "cache_type": if s.use_external_cache { "external" } else { "local" },
        "telemetry_enabled": s.telemetry_enabled(),
        "guardrails_configured": s.guardrails.is_some(),
        "uptime_seconds": uptime.as_secs(),
    });
    if let Some(report) = external {
        data["external_cache"] = json!(report);
    }
    data["config_store"] = match store.redis() {
        Some(redis) => json!(redis.report()),
        None => json!({"type": "file"}),
    };
    if !reasons.is_empty() {
        data["degraded_reasons"] = json!(reasons);
    }
    if !status.valid {
        data["config_problems"] = json!(status.problems);
    }
    data
}

#[derive(Deserialize)]
struct BackupBody {
    output_file: String,
    /// Replace an existing file (by default an existing file is a conflict).
    #[serde(default)]
    overwrite: bool,
}

#[derive(Deserialize)]
struct RestoreBody {
    input_file: String,
}

/// The backup folder of the serving configuration; `create` (a backup) makes it, mode 0700, when missing.
fn backup_dir(store: &ConfigStore, create: bool) -> ManageResult<BackupDir> {
    BackupDir::open(&store.snapshot().settings.backup_dir_for(store.path()), create)
}

/// Whether `target` is `other`, both resolved through symlinks (a file that does not exist is compared as given).
fn same_file(target: &Path, other: &Path) -> bool {
    let resolve = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    resolve(target) == resolve(other)
}

/// `POST /system/backup {output_file, overwrite?}`: writes the configuration with every API key encrypted, as a new
/// regular file of mode 0600 inside the backup folder (see [`super::backup_files`]).
pub fn backup(store: &ConfigStore, body: Value) -> ManageResult<String> {
    let body: BackupBody = decode_body(body)?;
    let out = backup_dir(store, true)?.confine(&body.output_file, "output_file")?;
    if same_file(&out, store.path()) || same_file(&out, &key_file_path(store.path())) {
        return Err(ManageError::Validation("output_file must not be the config file or the backup key file".into()));
    }
    // Refused before the key file may be created: a conflict touches nothing. The create itself checks again.
    if !body.overwrite && std::fs::symlink_metadata(&out).is_ok() {
        return Err(ManageError::Conflict(format!("{} exists; send \"overwrite\": true to replace it", out.display())));
    }
    let key = BackupKey::load(store.path(), true)?;
    let snap = store.snapshot();
    let file = &snap.file;
    let mut apikeys = Map::new();
    for (k, record) in &file.apikeys {
        apikeys.insert(key.encrypt(k, APIKEY_LABEL)?, serde_json::to_value(record).unwrap_or(Value::Null));
    }
    let admin = file.admin_apikey.as_deref().map(|a| key.encrypt(a, ADMIN_LABEL)).transpose()?;
    let mut doc = Map::new();
    doc.insert("backup_format".into(), json!(BACKUP_FORMAT));
    doc.insert("created_at".into(), json!(timestamp()));
    doc.insert("gateway_version".into(), json!(crate::VERSION));
    doc.insert(
        "encryption".into(),
        json!({"algorithm": "AES-256-GCM", "key_fingerprint": key.fingerprint(),
               "encrypted": ["admin_apikey", "apikeys", "common_mcp_gateway_config.session_secret",
                             "common_mcp_gateway_config.audit_log.hmac_key",
                             "common_mcp_gateway_config.secrets_key"]}),
    );
    doc.insert("admin_apikey".into(), json!(admin));
    let section = |v: Value| if v.is_null() { json!({}) } else { v };
    let mut common = section(json!(file.common_mcp_gateway_config));
    if let Some(secret) = common.get_mut("session_secret")
        && let Some(plain) = secret.as_str()
    {
        *secret = json!(key.encrypt(plain, SESSION_SECRET_LABEL)?);
    }
    if let Some(audit_key) = common.get_mut("audit_log").and_then(|audit| audit.get_mut("hmac_key"))
        && let Some(plain) = audit_key.as_str()
    {
        *audit_key = json!(key.encrypt(plain, AUDIT_KEY_LABEL)?);
    }
    if let Some(secrets_key) = common.get_mut("secrets_key")
        && let Some(plain) = secrets_key.as_str()
    {
        *secrets_key = json!(key.encrypt(plain, SECRETS_KEY_LABEL)?);
    }
    doc.insert("common_mcp_gateway_config".into(), common);
    doc.insert("plugins".into(), section(json!(file.plugins)));
    doc.insert("mcp_configs".into(), json!(file.mcp_configs));
    doc.insert("projects".into(), json!(file.projects));
    doc.insert("users".into(), json!(file.users));
    doc.insert("apikeys".into(), Value::Object(apikeys));
    // Users' credentials as stored: sealed under secrets_key already (contract 16).
    if !file.user_credentials.is_empty() {
        doc.insert("user_credentials".into(), json!(file.user_credentials));
    }
    for (k, v) in &file.extra {
        doc.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let mut bytes = serde_json::to_vec_pretty(&Value::Object(doc)).map_err(|e| ManageError::Internal(e.to_string()))?;
    bytes.push(b'\n');
    write_backup(&out, &bytes, body.overwrite)?;
    tracing::info!(output_file = %out.display(), keys = file.apikeys.len(), "backup written");
    Ok(out.display().to_string())
}

/// Reads and checks a whole backup: every key decrypts and the result is a valid configuration.
fn read_backup(store: &ConfigStore, path: &Path) -> ManageResult<ConfigFile> {
    let bytes = read_backup_file(path)?;
    let doc: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ManageError::Validation(format!("backup {} is not valid JSON: {e}", path.display())))?;
    let Value::Object(mut doc) = doc else {
        return Err(ManageError::Validation("a backup must be a JSON object".into()));
    };
    let missing: Vec<&str> = ["admin_apikey", "mcp_configs", "projects", "users", "apikeys"]
        .into_iter()
        .filter(|k| !doc.contains_key(*k))
        .collect();
    if !missing.is_empty() {
        return Err(ManageError::Validation(format!("backup lacks required keys: {}", missing.join(", "))));
    }
    let key = BackupKey::load(store.path(), false)?;
    let wrong_key = || {
        let recorded = doc_fingerprint(&bytes);
        ManageError::Validation(format!(
            "the backup cannot be decrypted with the key from {} (fingerprint {}; the backup was made with {}); \
             use the same GW_BACKUP_KEY or gw_backup.key as the machine that made it",
            key.source,
            key.fingerprint(),
            recorded.unwrap_or_else(|| "an unknown key".into())
        ))
    };
    match doc.get("admin_apikey") {
        Some(Value::String(s)) if s.starts_with(ENCRYPTED_PREFIX) => {
            let plain = key.decrypt(s, ADMIN_LABEL).ok_or_else(wrong_key)?;
            doc.insert("admin_apikey".into(), json!(plain));
        }
        Some(Value::Null) => {
            doc.remove("admin_apikey");
        }
        _ => return Err(ManageError::Validation("backup admin_apikey is not an encrypted value".into())),
    }
    if let Some(secret) = doc.get_mut("common_mcp_gateway_config").and_then(|c| c.get_mut("session_secret"))
        && let Some(sealed) = secret.as_str().filter(|s| s.starts_with(ENCRYPTED_PREFIX))
    {
        *secret = json!(key.decrypt(sealed, SESSION_SECRET_LABEL).ok_or_else(wrong_key)?);
    }
    if let Some(audit_key) = doc
        .get_mut("common_mcp_gateway_config")
        .and_then(|c| c.get_mut("audit_log"))
        .and_then(|a| a.get_mut("hmac_key"))
        && let Some(sealed) = audit_key.as_str().filter(|s| s.starts_with(ENCRYPTED_PREFIX))
    {
        *audit_key = json!(key.decrypt(sealed, AUDIT_KEY_LABEL).ok_or_else(wrong_key)?);
    }
    if let Some(secrets_key) = doc.get_mut("common_mcp_gateway_config").and_then(|c| c.get_mut("secrets_key"))
        && let Some(sealed) = secrets_key.as_str().filter(|s| s.starts_with(ENCRYPTED_PREFIX))
    {
        *secrets_key = json!(key.decrypt(sealed, SECRETS_KEY_LABEL).ok_or_else(wrong_key)?);
    }
    let Some(Value::Object(sealed_keys)) = doc.remove("apikeys") else {
        return Err(ManageError::Validation("backup apikeys must be an object".into()));
    };
    let mut apikeys = Map::new();
    for (sealed, record) in sealed_keys {
        let plain = key.decrypt(&sealed, APIKEY_LABEL).ok_or_else(wrong_key)?;
        apikeys.insert(plain, record);
    }
    doc.insert("apikeys".into(), Value::Object(apikeys));
    for meta in BACKUP_META {
        doc.remove(meta);
    }
    let mut snapshot =
        crate::config::Snapshot::from_value(Value::Object(doc), [0; 32]).map_err(ManageError::Invalid)?;
    Ok(std::mem::take(&mut snapshot.file))
}

fn doc_fingerprint(bytes: &[u8]) -> Option<String> {
    let doc: Value = serde_json::from_slice(bytes).ok()?;
    doc.pointer("/encryption/key_fingerprint")?.as_str().map(str::to_string)
}

/// `POST /system/restore {input_file}`: validates the whole backup, then replaces the configuration (in effect at once).
/// The input is a regular file inside the backup folder. The backup folder stays where the serving configuration puts
/// it: a restored file could otherwise move it anywhere for the next backup.
pub fn restore(store: &ConfigStore, body: Value) -> ManageResult<String> {
    let body: RestoreBody = decode_body(body)?;
    let input = backup_dir(store, false)?.confine(&body.input_file, "input_file")?;
    let mut file = read_backup(store, &input)?;
    let keys = file.apikeys.len();
    store.replace(|snap| {
        keep_backup_dir(&mut file, &snap.file);
        keep_store(&mut file, &snap.file);
        keep_audit_key(&mut file, &snap.file);
        Ok::<_, ManageError>(file)
    })?;
    tracing::info!(input_file = %input.display(), keys, "configuration restored from backup");
    Ok(input.display().to_string())
}

/// With the Redis store, gives `replacing` the `config_store` and the Redis connection (`gw_cache_*`) of `serving`:
/// a restore or reset replaces the configuration in the store, not where the store is.
fn keep_store(replacing: &mut ConfigFile, serving: &ConfigFile) {
    let Some(serving) = serving.common_mcp_gateway_config.as_ref() else { return };
    if serving.config_store.as_ref().and_then(|store| store.kind.as_deref()) != Some("redis") {
        return;
    }
    let common = replacing.common_mcp_gateway_config.get_or_insert_with(Default::default);
    common.config_store = serving.config_store.clone();
    common.gw_cache_host = serving.gw_cache_host.clone();
    common.gw_cache_port = serving.gw_cache_port;
    common.gw_cache_db = serving.gw_cache_db;
    common.gw_cache_password = serving.gw_cache_password.clone();
}

/// Gives a restored audit log without `hmac_key` (a backup older than the setting) the key serving now, so that the
/// log's digests stay comparable across the restore.
fn keep_audit_key(restored: &mut ConfigFile, serving: &ConfigFile) {
    let serving_key = serving.common_mcp_gateway_config.as_ref().and_then(|c| c.audit_log.as_ref()?.hmac_key.clone());
    let restored_log = restored.common_mcp_gateway_config.as_mut().and_then(|c| c.audit_log.as_mut());
    if let (Some(log), Some(key)) = (restored_log, serving_key)
        && log.hmac_key.is_none()
    {
        log.hmac_key = Some(key);
    }
}

/// Gives `restored` the `gw_backup_dir` of `serving` (or none, as there).
fn keep_backup_dir(restored: &mut ConfigFile, serving: &ConfigFile) {
    let serving_dir = serving.common_mcp_gateway_config.as_ref().and_then(|c| c.gw_backup_dir.clone());
    match (restored.common_mcp_gateway_config.as_mut(), serving_dir) {
        (Some(common), dir) => common.gw_backup_dir = dir,
        (None, Some(dir)) => {
            restored.common_mcp_gateway_config = Some(CommonConfig { gw_backup_dir: Some(dir), ..Default::default() })
        }
        (None, None) => {}
    }
}

#[derive(Deserialize)]
struct ResetBody {
    confirm: Value,
}

/// `POST /system/reset {confirm: true}`: back to what `init` writes, keeping the admin key.
pub fn reset(store: &ConfigStore, body: Value) -> ManageResult<()> {
    let confirmed = serde_json::from_value::<ResetBody>(body).is_ok_and(|b| b.confirm == Value::Bool(true));
    if !confirmed {
        return Err(ManageError::ResetNotConfirmed);
    }
    store.replace(|snap| {
        let (mut file, _) = fresh_config(snap.file.admin_apikey.clone())?;
        keep_store(&mut file, &snap.file);
        Ok::<_, ManageError>(file)
    })?;
    tracing::warn!("configuration reset to defaults");
    Ok(())
}
