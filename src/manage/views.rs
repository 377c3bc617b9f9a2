//! How records look in answers. Secrets never leave through here: upstream `env` values, a remote server's `headers`
//! values and the OAuth client secrets (`oauth_config`, a per-user `credentials`) are masked, and API keys appear as `key_id` plus a masked form.

use serde_json::{Value, json};

use crate::config::ConfigFile;
use crate::config::model::{ApiKeyRecord, ServerEntry};
use crate::secrets;

/// A server entry with its secrets masked.
pub fn server(entry: &ServerEntry) -> Value {
    let mut masked = entry.clone();
    for values in [masked.config.env.as_mut(), masked.config.headers.as_mut()].into_iter().flatten() {
        for value in values.values_mut() {
            *value = secrets::mask(value);
        }
    }
    if let Some(oauth) = masked.oauth_config.as_mut()
        && let Some(secret) = oauth.OAUTH_CLIENT_SECRET.as_mut()
    {
        *secret = secrets::mask(secret);
    }
    if let Some(secret) = masked.credentials.as_mut().and_then(|c| c.client_secret.as_mut()) {
        *secret = secrets::mask(secret);
    }
    serde_json::to_value(&masked).unwrap_or(Value::Null)
}

/// Puts back secrets a client echoed in masked form: an `env` value or client secret equal to the masked form of the
/// old value keeps the old value, so a GET, edit, PUT round trip never overwrites secrets with their masks.
pub fn unmask_server(new: &mut ServerEntry, old: &ServerEntry) {
    let pairs = [
        (new.config.env.as_mut(), old.config.env.as_ref()),
        (new.config.headers.as_mut(), old.config.headers.as_ref()),
    ];
    for (values, old_values) in pairs {
        let (Some(values), Some(old_values)) = (values, old_values) else { continue };
        for (name, value) in values.iter_mut() {
            if let Some(previous) = old_values.get(name)
                && *value == secrets::mask(previous)
            {
                value.clone_from(previous);
            }
        }
    }
    let old_secret = old.oauth_config.as_ref().and_then(|o| o.OAUTH_CLIENT_SECRET.as_ref());
    if let (Some(oauth), Some(previous)) = (new.oauth_config.as_mut(), old_secret)
        && oauth.OAUTH_CLIENT_SECRET.as_deref() == Some(secrets::mask(previous).as_str())
    {
        oauth.OAUTH_CLIENT_SECRET = Some(previous.clone());
    }
    let old_secret = old.credentials.as_ref().and_then(|c| c.client_secret.as_ref());
    if let (Some(credentials), Some(previous)) = (new.credentials.as_mut(), old_secret)
        && credentials.client_secret.as_deref() == Some(secrets::mask(previous).as_str())
    {
        credentials.client_secret = Some(previous.clone());
    }
}

/// A configuration with its servers and the projects using it.
pub fn config(file: &ConfigFile, id: &str) -> Value {
    let Some(cfg) = file.mcp_configs.get(id) else { return Value::Null };
    let projects: Vec<Value> = file
        .projects
        .iter()
        .filter(|(_, p)| p.mcp_config_id.as_deref() == Some(id))
        .map(|(pid, p)| json!({"project_id": pid, "project_name": p.project_name}))
        .collect();
    json!({
        "mcp_config_id": id,
        "mcp_config_name": cfg.mcp_config_name,
        "created_at": cfg.created_at,
        "servers": cfg.mcp_config.iter().map(server).collect::<Vec<_>>(),
        "projects": projects,
    })
}

/// A project with its members.
pub fn project(file: &ConfigFile, id: &str) -> Value {
    let Some(p) = file.projects.get(id) else { return Value::Null };
    json!({
        "project_id": id,
        "project_name": p.project_name,
        "mcp_config_id": p.mcp_config_id,
        "created_at": p.created_at,
        "users": members(file, id),
    })
}

/// The members of a project as `{user_id, email}`.
pub fn members(file: &ConfigFile, project_id: &str) -> Vec<Value> {
    let Some(p) = file.projects.get(project_id) else { return Vec::new() };
    p.users.iter().map(|uid| json!({"user_id": uid, "email": file.users.get(uid).map(|u| u.email.as_str())})).collect()
}

/// A user with the projects they belong to.
pub fn user(file: &ConfigFile, id: &str) -> Value {
    let Some(u) = file.users.get(id) else { return Value::Null };
    let projects: Vec<Value> = file
        .projects
        .iter()
        .filter(|(_, p)| p.users.iter().any(|m| m == id))
        .map(|(pid, p)| json!({"project_id": pid, "project_name": p.project_name}))
        .collect();
    json!({"user_id": id, "email": u.email, "created_at": u.created_at, "projects": projects})
}

/// An API key record: `key_id` and a masked key, never the key.
pub fn api_key(key: &str, record: &ApiKeyRecord) -> Value {
    json!({
        "key_id": secrets::key_id(key),
        "masked": secrets::mask(key),
        "project_id": record.project_id,
        "user_id": record.user_id,
        "created_at": record.created_at,
        "disabled": record.is_disabled(),
    })
}

/// A just-created key: the only answer that carries the whole key.
pub fn new_api_key(key: &str, record: &ApiKeyRecord) -> Value {
    json!({
        "api_key": key,
        "key_id": secrets::key_id(key),
        "project_id": record.project_id,
        "user_id": record.user_id,
        "created_at": record.created_at,
        "disabled": record.is_disabled(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::decode_server_at;

    fn entry(value: Value) -> ServerEntry {
        let mut problems = Vec::new();
        decode_server_at(value, "s", &mut problems).unwrap()
    }

    #[test]
    fn remote_headers_are_masked_and_masks_round_trip() {
        let old = entry(json!({"server_name": "r", "config": {"url": "https://mcp.example.com/mcp",
            "headers": {"X-Api-Key": "remote-api-key-value-1"}}}));
        let shown = server(&old);
        assert!(!shown.to_string().contains("remote-api-key-value-1"), "{shown}");
        assert_eq!(shown["config"]["url"], json!("https://mcp.example.com/mcp"));
        assert!(shown["config"].get("command").is_none(), "no empty command is written: {shown}");
        let mut echoed = entry(shown);
        unmask_server(&mut echoed, &old);
        assert_eq!(echoed.config.headers, old.config.headers);
    }

    #[test]
    fn secrets_are_masked_and_masks_round_trip() {
        let old = entry(json!({"server_name": "s", "config": {"command": "x",
            "env": {"TOKEN": "super-secret-token-value", "SHORT": "abc"}},
            "oauth_config": {"OAUTH_CLIENT_SECRET": "client-secret-value-123"}}));
        let shown = server(&old);
        let text = shown.to_string();
        assert!(!text.contains("super-secret-token-value") && !text.contains("client-secret-value-123"));
        assert!(!text.contains("\"abc\""));
        let mut echoed = entry(shown);
        echoed.config.env.as_mut().unwrap().insert("NEW".into(), "plain".into());
        unmask_server(&mut echoed, &old);
        let env = echoed.config.env.as_ref().unwrap();
        assert_eq!(env["TOKEN"], "super-secret-token-value");
        assert_eq!(env["SHORT"], "abc");
        assert_eq!(env["NEW"], "plain");
        assert_eq!(echoed.oauth_config.unwrap().OAUTH_CLIENT_SECRET.as_deref(), Some("client-secret-value-123"));
    }
}
