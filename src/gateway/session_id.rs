//! Session ids that every replica can serve (contract section 12).
//!
//! rmcp names a new session with an id of its own (the *local* id: what rmcp, the session registry and the upstream
//! pool know the session by). The client never sees it: the session layer answers with a *sealed* id instead,
//! `mcpgw1.` + base64url(AES-256-GCM of the local id, the digest of the key that opened the session and the client's
//! `initialize` parameters). The sealing key is derived from the configuration's `session_secret`, so every replica
//! of one configuration can open it: a replica that does not know the session takes it over (its registry records
//! it, and rmcp replays the `initialize` from the id, see [`RestoreStates`]), and the session goes on there. A
//! configuration without `session_secret` seals with a key of this process only: its sessions stay with the replica
//! that opened them. Changing `session_secret` ends every session (their ids no longer open).
//!
//! An id is bound to its key as before: the digest inside must be the caller's, or the id is unknown (404).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rmcp::transport::streamable_http_server::session::{SessionState, SessionStore, SessionStoreError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use subtle::ConstantTimeEq;

use crate::config::Snapshot;
use crate::secrets;

const PREFIX: &str = "mcpgw1.";
const LABEL: &str = "mcpgw session id v1";
/// The longest id opened: a client's header beyond this is not an id of ours.
const MAX_ID_CHARS: usize = 8 * 1024;
/// The most of a client's `initialize` parameters kept in an id (beyond it, only the protocol version and the
/// capabilities without `experimental`).
const MAX_PARAMS_BYTES: usize = 3 * 1024;

/// What a sealed id carries.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionClaims {
    /// rmcp's id of the session on the replica that opened it (and on every replica that took it over).
    pub local: String,
    /// The digest of the key that opened the session.
    pub key: [u8; 32],
    /// The client's `initialize` parameters (protocol version, capabilities, client info).
    pub params: Value,
}

#[derive(Serialize, Deserialize)]
struct Wire {
    s: String,
    k: String,
    i: Value,
}

/// The key that seals session ids under `snapshot`: derived from `session_secret`, or this process's own.
pub fn sealing_key(snapshot: &Snapshot) -> [u8; 32] {
    match &snapshot.settings.session_secret {
        Some(secret) => secrets::derive_key(secret.0.as_bytes(), LABEL),
        None => process_key(),
    }
}

fn process_key() -> [u8; 32] {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    // The generator failing is not recoverable; a key derived from the time and the process id still differs
    // between processes, which is all a process key needs.
    *KEY.get_or_init(|| {
        secrets::random_bytes::<32>().unwrap_or_else(|_| {
            let seed = format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
            secrets::derive_key(seed.as_bytes(), LABEL)
        })
    })
}

/// What of a client's `initialize` parameters an id keeps: the protocol version, the capabilities and the client's
/// name, title and version; when that is still too long, the capabilities without `experimental`.
pub fn kept_params(params: &Value) -> Value {
    let mut kept = Map::new();
    for field in ["protocolVersion", "capabilities"] {
        if let Some(value) = params.get(field) {
            kept.insert(field.to_string(), value.clone());
        }
    }
    let info: Map<String, Value> = ["name", "title", "version"]
        .into_iter()
        .filter_map(|field| Some((field.to_string(), params.pointer(&format!("/clientInfo/{field}"))?.clone())))
        .collect();
    kept.insert("clientInfo".to_string(), Value::Object(info));
    let mut kept = Value::Object(kept);
    if serde_json::to_vec(&kept).map_or(0, |bytes| bytes.len()) > MAX_PARAMS_BYTES {
        if let Some(capabilities) = kept.get_mut("capabilities").and_then(Value::as_object_mut) {
            capabilities.remove("experimental");
        }
        if serde_json::to_vec(&kept).map_or(0, |bytes| bytes.len()) > MAX_PARAMS_BYTES {
            kept["capabilities"] = Value::Object(Map::new());
            kept["clientInfo"] = serde_json::json!({"name": "client", "version": "0"});
        }
    }
    kept
}

/// The sealed id of a session; `None` only when the system's random generator fails.
pub fn seal(key: &[u8; 32], claims: &SessionClaims) -> Option<String> {
    let wire = Wire { s: claims.local.clone(), k: URL_SAFE_NO_PAD.encode(claims.key), i: claims.params.clone() };
    let plain = serde_json::to_vec(&wire).ok()?;
    let sealed = secrets::seal(key, &plain, LABEL).ok()?;
    Some(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(sealed)))
}

/// What a sealed id carries, when it is one of ours under `key`.
pub fn open(key: &[u8; 32], id: &str) -> Option<SessionClaims> {
    if id.len() > MAX_ID_CHARS {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(id.strip_prefix(PREFIX)?).ok()?;
    let plain = secrets::open(key, &bytes, LABEL)?;
    let wire: Wire = serde_json::from_slice(&plain).ok()?;
    let key = URL_SAFE_NO_PAD.decode(&wire.k).ok()?.try_into().ok()?;
    Some(SessionClaims { local: wire.s, key, params: wire.i })
}

/// Whether `claims` were sealed for the key whose digest is `key_digest` (constant-time).
pub fn belongs_to(claims: &SessionClaims, key_digest: &[u8; 32]) -> bool {
    bool::from(claims.key.ct_eq(key_digest))
}

/// The `initialize` parameters of sessions being taken over, for rmcp to replay: the session layer puts them here just
/// before the request that takes the session over goes to rmcp, which loads them (through [`SessionStore`]) when it
/// does not know the session. Nothing is persisted: the sealed id is the store.
#[derive(Default, Clone)]
pub struct RestoreStates(Arc<Mutex<HashMap<String, Value>>>);

impl RestoreStates {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Value>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes `params` what rmcp replays for session `local`.
    pub fn put(&self, local: &str, params: Value) {
        self.map().insert(local.to_string(), params);
    }

    /// Forgets session `local` (it ended).
    pub fn forget(&self, local: &str) {
        self.map().remove(local);
    }
}

#[async_trait::async_trait]
impl SessionStore for RestoreStates {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(params) = self.map().get(session_id).cloned() else { return Ok(None) };
        // Parameters rmcp cannot read (another SDK's extension, say) are replayed as the bare minimum.
        let params = serde_json::from_value(params.clone())
            .or_else(|_| {
                serde_json::from_value(serde_json::json!({
                    "protocolVersion": params.get("protocolVersion").cloned().unwrap_or(Value::Null),
                    "capabilities": {},
                    "clientInfo": {"name": "client", "version": "0"},
                }))
            })
            .map_err(|e| -> SessionStoreError { Box::new(e) })?;
        Ok(Some(SessionState::new(params)))
    }

    async fn store(&self, _session_id: &str, _state: &SessionState) -> Result<(), SessionStoreError> {
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.forget(session_id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims() -> SessionClaims {
        SessionClaims {
            local: "0b3f-local".into(),
            key: [7; 32],
            params: kept_params(&json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {"sampling": {}},
                "clientInfo": {"name": "c", "version": "1", "icons": [{"src": "x"}]}
            })),
        }
    }

    #[test]
    fn an_id_opens_under_its_key_only() {
        let key = [1; 32];
        let id = seal(&key, &claims()).unwrap();
        assert!(id.starts_with(PREFIX) && id.bytes().all(|b| (0x21..=0x7e).contains(&b)));
        assert!(!id.contains("0b3f"), "the local id is not readable");
        let opened = open(&key, &id).unwrap();
        assert_eq!(opened, claims());
        assert_eq!(opened.params["clientInfo"], json!({"name": "c", "version": "1"}));
        assert!(belongs_to(&opened, &[7; 32]) && !belongs_to(&opened, &[8; 32]));
        assert_eq!(open(&[2; 32], &id), None, "another secret");
        let mut tampered = id.clone().into_bytes();
        let last = tampered.len() - 3;
        tampered[last] = if tampered[last] == b'A' { b'B' } else { b'A' };
        assert_eq!(open(&key, &String::from_utf8(tampered).unwrap()), None);
        assert_eq!(open(&key, "0b3f-local"), None);
        assert_eq!(open(&key, &format!("{PREFIX}{}", "A".repeat(MAX_ID_CHARS))), None);
    }

    #[test]
    fn large_parameters_are_trimmed() {
        let big = json!({"protocolVersion": "2025-06-18",
            "capabilities": {"experimental": {"x": "y".repeat(10_000)}, "roots": {}},
            "clientInfo": {"name": "c", "version": "1"}});
        let kept = kept_params(&big);
        assert_eq!(kept["capabilities"], json!({"roots": {}}));
    }
}
