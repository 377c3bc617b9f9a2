//! What the gateway keeps in the shared cache, and how: key names, records, fingerprints and sealing.
//!
//! Key layout (every key starts with `mcpgw:v1:`, so one Redis can serve other tenants and a future layout can live
//! beside this one):
//! - `mcpgw:v1:tools:<mcp_config_id>:<server_name>`: tools found by live discovery, JSON
//!   `{fingerprint, tools, server_metadata}`, for `gw_tool_cache_expiration`. The fingerprint is the SHA-256 of the
//!   server entry's canonical JSON (keys sorted), peppered with the digest of the config's admin key, so a record is
//!   used only by an instance whose entry is identical, and the record reveals nothing about the entry's `env` values or
//!   OAuth secrets (which are never stored).
//! - `mcpgw:v1:gateway_config:<hex SHA-256 of the API key>`: what the remote authentication service (provider `gw`)
//!   answered for a key, for `gw_gateway_cache_expiration`. The answer may carry server entries with their secrets, so
//!   it is sealed with AES-256-GCM under a key derived from the API key itself (another derivation than the key name):
//!   only a caller presenting that API key can open it, and nothing in Redis is usable without it.
//!
//! With the `local_apikey` provider nothing about keys is shared: the local file is the authority and a key disabled in
//! it must stop working at once on every instance, which a shared resolution would delay.

use std::time::Duration;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::external::{ExternalCache, ExternalError};
use crate::config::model::ServerEntry;

/// The prefix of every key the gateway writes.
pub const PREFIX: &str = "mcpgw:v1:";
const GATEWAY_CONFIG_PREFIX: &str = "mcpgw:v1:gateway_config:";
const SCAN_BATCH: usize = 200;

/// The key of the tools of `server` in configuration `config_id`.
pub fn tools_key(config_id: &str, server: &str) -> String {
    format!("{PREFIX}tools:{config_id}:{server}")
}

/// The key of the remote service's answer for the key whose SHA-256 is `digest`.
pub fn gateway_config_key(digest: &[u8; 32]) -> String {
    format!("{GATEWAY_CONFIG_PREFIX}{}", crate::secrets::hex(digest))
}

/// `text` with the glob characters of SCAN's MATCH escaped.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The fingerprint of a server entry (see the module documentation); `pepper` is the admin key, if any.
pub fn fingerprint(entry: &ServerEntry, pepper: Option<&str>) -> String {
    // Pins say which definitions were approved, not which server runs: an entry pinned on first use (by this
    // replica or another) shares the tools of the same entry unpinned.
    let unpinned;
    let pinned = entry.pinned_tools.is_some() || entry.prompt_pins.is_some() || entry.resource_pins.is_some();
    let entry = if pinned {
        unpinned = ServerEntry { pinned_tools: None, prompt_pins: None, resource_pins: None, ..entry.clone() };
        &unpinned
    } else {
        entry
    };
    let json = serde_json::to_value(entry).map(|v| crate::json_strict::canonical(&v)).unwrap_or_default();
    let mut hash = Sha256::new();
    hash.update(b"mcpgw:v1:server_entry\0");
    hash.update(Sha256::digest(pepper.unwrap_or_default().as_bytes()));
    hash.update(json.as_bytes());
    crate::secrets::hex(&hash.finalize())
}

/// Tools found in the shared cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedTools {
    pub fingerprint: String,
    pub tools: Vec<Value>,
    pub server_metadata: Value,
}

#[derive(Serialize)]
struct SharedToolsRef<'a> {
    fingerprint: &'a str,
    tools: &'a [Value],
    server_metadata: &'a Value,
}

/// The remote authentication service's answer for a key, as it is sealed into the shared cache (the gateway's
/// `RemoteIdentity` converts to and from it). No `Debug`: server entries carry secrets.
#[derive(Serialize, Deserialize)]
pub struct SharedIdentity {
    pub project_id: String,
    pub user_id: String,
    pub mcp_config_id: Option<String>,
    pub servers: Option<Vec<Value>>,
}

fn sealing_cipher(api_key: &str) -> Aes256Gcm {
    let mut hash = Sha256::new();
    hash.update(b"mcpgw:v1:gateway_config:seal\0");
    hash.update(api_key.as_bytes());
    let key: [u8; 32] = hash.finalize().into();
    Aes256Gcm::new(&Key::<Aes256Gcm>::from(key))
}

/// `plain` sealed for the holder of `api_key`, bound to the Redis key `name`.
fn seal(api_key: &str, name: &str, plain: &[u8]) -> Option<String> {
    let nonce_bytes = crate::secrets::random_bytes::<12>().ok()?;
    let sealed = sealing_cipher(api_key)
        .encrypt(&Nonce::from(nonce_bytes), Payload { msg: plain, aad: name.as_bytes() })
        .ok()?;
    let mut out = nonce_bytes.to_vec();
    out.extend_from_slice(&sealed);
    Some(URL_SAFE_NO_PAD.encode(out))
}

fn open(api_key: &str, name: &str, sealed: &[u8]) -> Option<Vec<u8>> {
    let bytes = URL_SAFE_NO_PAD.decode(sealed).ok()?;
    if bytes.len() < 12 + 16 {
        return None;
    }
    let (nonce, body) = bytes.split_at(12);
    let nonce = Nonce::from(<[u8; 12]>::try_from(nonce).ok()?);
    sealing_cipher(api_key).decrypt(&nonce, Payload { msg: body, aad: name.as_bytes() }).ok()
}

impl ExternalCache {
    async fn get_bytes(&self, name: &str) -> Result<Option<Vec<u8>>, ExternalError> {
        self.run(|mut c| async move { redis::cmd("GET").arg(name).query_async::<Option<Vec<u8>>>(&mut c).await }).await
    }

    /// Stores `value` under `name` for `ttl`; a zero lifetime stores nothing (caching is off).
    async fn set_bytes(&self, name: &str, value: &[u8], ttl: Duration) -> Result<(), ExternalError> {
        let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        if millis == 0 {
            return Ok(());
        }
        self.run(|mut c| async move {
            redis::cmd("SET").arg(name).arg(value).arg("PX").arg(millis).query_async::<()>(&mut c).await
        })
        .await
    }

    /// Deletes the keys matching `pattern` (SCAN, never KEYS) for which `keep_name` is true; how many were deleted.
    async fn delete_matching(&self, pattern: &str, keep_name: impl Fn(&str) -> bool) -> Result<u64, ExternalError> {
        let mut cursor: u64 = 0;
        let mut deleted = 0;
        loop {
            let (next, names) = self
                .run(|mut c| async move {
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(SCAN_BATCH)
                        .query_async::<(u64, Vec<String>)>(&mut c)
                        .await
                })
                .await?;
            let names: Vec<String> = names.into_iter().filter(|n| keep_name(n)).collect();
            if !names.is_empty() {
                let names = &names;
                deleted += self
                    .run(|mut c| async move { redis::cmd("DEL").arg(names).query_async::<u64>(&mut c).await })
                    .await?;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// The shared tools of `server` in `config_id`, when they were discovered with an entry of this `fingerprint`.
    pub async fn get_tools(
        &self,
        config_id: &str,
        server: &str,
        fingerprint: &str,
    ) -> Result<Option<SharedTools>, ExternalError> {
        let Some(bytes) = self.get_bytes(&tools_key(config_id, server)).await? else { return Ok(None) };
        Ok(serde_json::from_slice::<SharedTools>(&bytes).ok().filter(|t| t.fingerprint == fingerprint))
    }

    /// Shares tools found by live discovery.
    pub async fn put_tools(
        &self,
        config_id: &str,
        server: &str,
        fingerprint: &str,
        tools: &[Value],
        server_metadata: &Value,
        ttl: Duration,
    ) -> Result<(), ExternalError> {
        let record = SharedToolsRef { fingerprint, tools, server_metadata };
        let bytes = serde_json::to_vec(&record).map_err(|e| ExternalError::Failed(e.to_string()))?;
        self.set_bytes(&tools_key(config_id, server), &bytes, ttl).await
    }

    /// Deletes the shared tools of `config_id` (one server, or all of them); how many.
    pub async fn clear_tools(&self, config_id: &str, server: Option<&str>) -> Result<u64, ExternalError> {
        let prefix = tools_key(config_id, "");
        let pattern = match server {
            Some(server) => glob_escape(&tools_key(config_id, server)),
            None => format!("{}*", glob_escape(&prefix)),
        };
        // Server names hold no ':', so this keeps config `a` from clearing config `a:b`.
        self.delete_matching(&pattern, |name| name.strip_prefix(&prefix).is_some_and(|rest| !rest.contains(':'))).await
    }

    /// The remote service's answer for `api_key`, shared by another instance (`None` when absent or unreadable).
    pub async fn get_gateway_config(&self, api_key: &str) -> Result<Option<SharedIdentity>, ExternalError> {
        let name = gateway_config_key(&crate::secrets::digest(api_key));
        let Some(sealed) = self.get_bytes(&name).await? else { return Ok(None) };
        Ok(open(api_key, &name, &sealed).and_then(|plain| serde_json::from_slice::<SharedIdentity>(&plain).ok()))
    }

    /// Shares the remote service's answer for `api_key`, sealed.
    pub async fn put_gateway_config(
        &self,
        api_key: &str,
        answer: &SharedIdentity,
        ttl: Duration,
    ) -> Result<(), ExternalError> {
        let name = gateway_config_key(&crate::secrets::digest(api_key));
        let plain = serde_json::to_vec(answer).map_err(|e| ExternalError::Failed(e.to_string()))?;
        let sealed = seal(api_key, &name, &plain).ok_or_else(|| ExternalError::Failed("sealing failed".into()))?;
        self.set_bytes(&name, sealed.as_bytes(), ttl).await
    }

    /// Deletes the shared gateway config answer of the key whose SHA-256 is `digest`; how many (0 or 1).
    pub async fn clear_gateway_config(&self, digest: &[u8; 32]) -> Result<u64, ExternalError> {
        let name = gateway_config_key(digest);
        let name = &name;
        self.run(|mut c| async move { redis::cmd("DEL").arg(name).query_async::<u64>(&mut c).await }).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(value: Value) -> ServerEntry {
        let mut problems = crate::config::Problems::default();
        let entry = crate::config::model::decode_server_at(value, "e", &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        entry.unwrap()
    }

    #[test]
    fn key_names_are_namespaced_and_hold_no_secret() {
        assert_eq!(tools_key("c1", "echo"), "mcpgw:v1:tools:c1:echo");
        let digest = crate::secrets::digest("gw_secret-key");
        let name = gateway_config_key(&digest);
        assert!(name.starts_with("mcpgw:v1:gateway_config:") && name.len() == 24 + 64, "{name}");
        assert!(!name.contains("secret"));
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn fingerprints_follow_the_entry_not_its_key_order_and_hide_env_values() {
        let a = entry(json!({"server_name": "s", "config": {"command": "x", "env": {"A": "1", "B": "hunter2"}}}));
        let b = entry(json!({"config": {"env": {"B": "hunter2", "A": "1"}, "command": "x"}, "server_name": "s"}));
        let c = entry(json!({"server_name": "s", "config": {"command": "x", "env": {"A": "1", "B": "hunter3"}}}));
        let fa = fingerprint(&a, Some("admin"));
        assert_eq!(fa, fingerprint(&b, Some("admin")));
        assert_ne!(fa, fingerprint(&c, Some("admin")), "a changed env value changes the fingerprint");
        assert_ne!(fa, fingerprint(&a, Some("other admin")));
        assert_eq!(fa.len(), 64);
        assert!(!fa.contains("hunter2"));
    }

    #[test]
    fn sealed_answers_open_only_with_the_same_key_and_name() {
        let sealed = seal("key-1", "name", b"{\"servers\":[]}").unwrap();
        assert!(!sealed.contains("servers"));
        assert_eq!(open("key-1", "name", sealed.as_bytes()).as_deref(), Some(&b"{\"servers\":[]}"[..]));
        assert!(open("key-2", "name", sealed.as_bytes()).is_none());
        assert!(open("key-1", "other", sealed.as_bytes()).is_none());
        assert!(open("key-1", "name", b"garbage").is_none());
    }
}
