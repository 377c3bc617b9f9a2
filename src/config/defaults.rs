//! The configuration `init` writes (and `reset` returns to): a new admin key, an MCP config `default_config` with no
//! servers, a project `default_project` using it, a user `default@example.com` in that project, one API key for that
//! user and project, and every gateway setting written out with its default so operators see what they can change;
//! the secrets (`session_secret`, `secrets_key`, `audit_log.hmac_key`) are 32 random bytes from the operating system each.

use std::io;
use std::path::Path;

use indexmap::IndexMap;
use serde_json::json;

use super::fsutil;
use super::model::{ApiKeyRecord, ConfigFile, McpConfig, Project, User};
use crate::ids::{new_id, timestamp};
use crate::secrets::{self, RandomError};

/// The keys a fresh configuration holds, to show the operator once.
#[derive(Debug, Clone)]
pub struct FreshKeys {
    pub admin_key: String,
    pub gateway_key: String,
}

/// Why `init` did not write a file.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("{0} already exists; pass --force to overwrite it")]
    Exists(String),
    #[error("cannot write {path}: {source}")]
    Io { path: String, source: io::Error },
    #[error(transparent)]
    Random(#[from] RandomError),
}

/// A fresh configuration; keeps `admin_key` when given (reset), else generates one.
pub fn fresh_config(admin_key: Option<String>) -> Result<(ConfigFile, FreshKeys), RandomError> {
    let admin_key = match admin_key {
        Some(key) => key,
        None => secrets::new_admin_key()?,
    };
    let gateway_key = secrets::new_gateway_key()?;
    let session_secret = secrets::random_token()?;
    let audit_key = secrets::random_token()?;
    let secrets_key = secrets::random_token()?;
    let now = timestamp();
    let (config_id, project_id, user_id) = (new_id(), new_id(), new_id());
    let value = json!({
        "admin_apikey": admin_key,
        "common_mcp_gateway_config": {
            "gw_log_level": "INFO",
            "gw_mcp_use_external_cache": false,
            "gw_cache_host": "localhost", "gw_cache_port": 6379, "gw_cache_db": 0, "gw_cache_password": null,
            "gw_tool_cache_expiration": 4,
            "gw_gateway_cache_expiration": 24,
            "timeout_settings": {"default_timeout": 30, "guardrail_timeout": 15, "auth_timeout": 10,
                                 "tool_execution_timeout": 60, "discovery_timeout": 20, "cache_timeout": 5,
                                 "connectivity_timeout": 2},
            "relevancy_threshold": 0.75, "adherence_threshold": 0.75,
            "rate_limits": {"per_key_requests_per_second": 0, "burst": 0},
            "upstream_pool": {"max_processes_per_server": 4, "idle_timeout_seconds": 300,
                              "start_timeout_seconds": 120, "prestart": false},
            "limits": {"max_request_body_bytes": 4_194_304, "max_admin_body_bytes": 1_048_576,
                       "max_header_bytes": 65_536, "max_sessions": 10_000, "session_idle_timeout_seconds": 3600,
                       "session_dormant_seconds": 30,
                       "request_read_timeout_seconds": 30, "max_tool_result_bytes": 16_777_216,
                       "max_calls_per_request": 64, "max_response_bytes": 33_554_432,
                       "max_sessions_per_key": 64, "max_connections": 4096,
                       "max_admin_connections": 64, "idle_connection_seconds": 60,
                       "max_inflight_per_key": 32, "max_pending_answer_bytes_per_key": 67_108_864,
                       "write_timeout_seconds": 30, "max_unauthenticated_connections": 256,
                       "max_connections_per_ip": 128,
                       "max_processes_per_key": 8, "idle_process_seconds": 60,
                       "input_required_seconds": 60, "max_waiting_rounds_per_key": 4,
                       "max_tasks_per_key": 16, "max_task_seconds": 3600},
            "gw_allowed_hosts": ["localhost", "127.0.0.1", "::1"],
            "gw_allowed_origins": [],
            "gw_backup_dir": "backups",
            "config_store": {"type": "file"},
            "session_secret": session_secret,
            "secrets_key": secrets_key,
            "audit_log": {"enabled": false, "path": "audit.jsonl", "hmac_key": audit_key}
        },
        "plugins": {
            "auth": {"provider": "local_apikey", "config": {}},
            "guardrails": {"provider": "custom_keyword", "config": {"blocked_keywords": []}},
            "telemetry": {"provider": "stdout", "config": {"enabled": false}}
        }
    });
    // The settings above are plain literals that always decode; the records are added as typed values.
    let mut file = ConfigFile::from_value(value).unwrap_or_default();
    file.admin_apikey = Some(admin_key.clone());
    file.mcp_configs = IndexMap::from([(
        config_id.clone(),
        McpConfig { mcp_config_name: "default_config".into(), created_at: Some(now.clone()), ..Default::default() },
    )]);
    file.projects = IndexMap::from([(
        project_id.clone(),
        Project {
            project_name: "default_project".into(),
            mcp_config_id: Some(config_id),
            users: vec![user_id.clone()],
            created_at: Some(now.clone()),
            ..Default::default()
        },
    )]);
    file.users = IndexMap::from([(
        user_id.clone(),
        User { email: "default@example.com".into(), created_at: Some(now.clone()), ..Default::default() },
    )]);
    file.apikeys = IndexMap::from([(
        gateway_key.clone(),
        ApiKeyRecord { project_id, user_id, created_at: Some(now), disabled: Some(false), ..Default::default() },
    )]);
    Ok((file, FreshKeys { admin_key, gateway_key }))
}

/// Writes a fresh configuration to `path` (directory 0700, file 0600). Refuses to overwrite unless `force`.
pub fn init_file(path: &Path, force: bool) -> Result<FreshKeys, InitError> {
    if path.exists() && !force {
        return Err(InitError::Exists(path.display().to_string()));
    }
    let io_err = |source| InitError::Io { path: path.display().to_string(), source };
    fsutil::create_private_dir(fsutil::parent_dir(path)).map_err(io_err)?;
    let (file, keys) = fresh_config(None)?;
    fsutil::write_atomic(&fsutil::write_target(path), &file.to_bytes()).map_err(io_err)?;
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Snapshot;

    #[test]
    fn a_fresh_config_is_valid_and_its_key_opens_the_default_project() {
        let (file, keys) = fresh_config(None).unwrap();
        let snap = Snapshot::build(file, [0; 32]).unwrap();
        let entry = snap.lookup_key(&keys.gateway_key).unwrap();
        assert_eq!(snap.file.projects[&entry.project_id].project_name, "default_project");
        assert_eq!(snap.file.users[&entry.user_id].email, "default@example.com");
        assert!(entry.mcp_config_id.is_some());
        assert!(keys.admin_key.len() >= 43);
        // The audit log is off, but has its key from the start: turning it on needs no write by the gateway.
        assert_eq!(snap.settings.audit_log, None);
        assert_eq!(snap.settings.audit_key.as_ref().map(|k| k.0.len()), Some(43));
    }

    #[test]
    fn init_refuses_to_overwrite_without_force() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("gw.json");
        init_file(&path, false).unwrap();
        assert!(matches!(init_file(&path, false), Err(InitError::Exists(_))));
        init_file(&path, true).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
    }
}
