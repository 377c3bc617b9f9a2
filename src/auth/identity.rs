//! Who is calling: resolving gateway credentials (key, optional project and user) against a snapshot.
//!
//! With the `local_apikey` provider (spec 5.2) the key is looked up in the snapshot's key table, its record gives the
//! project and user, the project gives the MCP configuration. The result travels with the request together with the
//! snapshot it came from, so one request sees one configuration from start to end. Resolutions are cached for
//! `gw_gateway_cache_expiration` (the gateway config cache) and the cache is dropped when the configuration changes.
//!
//! With the `gw` provider the key is resolved by a remote service (`auth/remote.rs`, protocol in its documentation
//! and `docs/gateway.md`) under `auth_timeout`; its answer may carry the servers themselves (`gateway_config.mcp_config`),
//! which then serve this caller instead of a local MCP configuration. Answers are cached the same way, by key digest,
//! never by the key itself. With the external cache on, the remote answer is also shared through Redis (sealed, see
//! [`crate::cache::shared`]) so another instance uses it instead of asking the service again. `local_apikey`
//! resolutions are never shared: the local file is the authority, and a key disabled in it stops working at once.

use std::sync::Arc;

use super::jwks::Jwks;
use super::remote::{RemoteAuth, RemoteAuthError, RemoteIdentity};
use crate::cache::{ExternalCache, TtlCache};
use crate::config::Snapshot;
use crate::config::model::{ServerEntry, decode_server_at};
use crate::config::per_snapshot::PerSnapshot;
use crate::error::{ErrorCode, GatewayError};
use crate::secrets;

/// Credentials as a client presents them.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    pub key: String,
    pub project_id: Option<String>,
    pub user_id: Option<String>,
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Identity {
    pub snapshot: Arc<Snapshot>,
    pub key_digest: [u8; 32],
    pub key_id: String,
    pub project_id: String,
    pub project_name: String,
    pub user_id: String,
    pub email: String,
    pub mcp_config_id: Option<String>,
    /// Servers supplied by a remote authentication service; `None`: the MCP configuration `mcp_config_id` of the
    /// snapshot.
    pub servers: Option<Arc<Vec<ServerEntry>>>,
    /// When the credential stops being valid (a token's `exp`, seconds since the epoch); `None` for an API key.
    pub expires_at: Option<u64>,
    /// The client's own OAuth token (provider `oauth`, contract 10): what a `per_user` server of kind
    /// `token_exchange` exchanges (contract 16), and sent nowhere else. `None` for an API key.
    pub client_token: Option<crate::credentials::SecretValue>,
    /// The claims of the client's OAuth token (provider `oauth`): what authorization rules read as `principal.claims`
    /// (contract 17). `None` for an API key.
    pub claims: Option<Arc<serde_json::Map<String, serde_json::Value>>>,
    /// `principal` of authorization rules, built at the first decision and kept with the identity.
    pub principal: std::sync::OnceLock<std::sync::Arc<crate::policy::Principal>>,
    /// What this caller's authorization decisions remember (per target, the rules whose outcome does not vary).
    pub decisions: crate::policy::Memo,
}

impl Identity {
    /// The share of the gateway's caches that this caller sees and clears: its MCP configuration (or, for servers a
    /// remote auth service supplied, its project).
    pub fn cache_scope(&self) -> String {
        match &self.mcp_config_id {
            Some(config) if self.servers.is_none() => config.clone(),
            _ => format!("project:{}", self.project_id),
        }
    }
}

/// Why authentication failed; `details` is the `details` of the `AUTH_FAILED` answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{details}")]
pub struct AuthFailure {
    pub details: String,
    /// A valid token without a required scope (403 `insufficient_scope` over HTTP, contract section 10).
    pub insufficient_scope: bool,
}

impl AuthFailure {
    pub fn new(details: impl Into<String>) -> AuthFailure {
        AuthFailure { details: details.into(), insufficient_scope: false }
    }

    pub fn insufficient_scope(details: impl Into<String>) -> AuthFailure {
        AuthFailure { details: details.into(), insufficient_scope: true }
    }
}

impl From<AuthFailure> for GatewayError {
    /// `AUTH_FAILED`, with why in `details`.
    fn from(failure: AuthFailure) -> GatewayError {
        let error = GatewayError::new(ErrorCode::AuthFailed, "authentication failed").with("details", failure.details);
        if failure.insufficient_scope { error.insufficient_scope() } else { error }
    }
}

/// Resolved identities by key digest, valid for one snapshot.
pub type GatewayConfigCache = TtlCache<[u8; 32], Identity>;

/// The remote authentication client of a snapshot (provider `gw`), or why it could not be built.
pub type RemoteAuthCache = PerSnapshot<Result<RemoteAuth, RemoteAuthError>>;

fn remote_client(snapshot: &Snapshot) -> Result<RemoteAuth, RemoteAuthError> {
    RemoteAuth::new(&snapshot.settings.auth.config, snapshot.settings.timeouts.auth)
}

/// Resolves `creds` against `snapshot` with the configured provider, using and filling `cache`.
pub async fn authenticate(
    snapshot: &Arc<Snapshot>,
    creds: &Credentials,
    cache: &GatewayConfigCache,
    remote: &RemoteAuthCache,
    external: &ExternalCache,
    jwks: &Jwks,
) -> Result<Arc<Identity>, AuthFailure> {
    match snapshot.settings.auth.provider.as_str() {
        "local_apikey" => authenticate_local(snapshot, creds, cache),
        "oauth" => super::oauth::authenticate(snapshot, creds, cache, jwks).await,
        "gw" => {
            let key = presented_key(creds)?;
            let digest = secrets::digest(key);
            let identity = match cache.peek(&digest) {
                Some(hit) if Arc::ptr_eq(&hit.snapshot, snapshot) => counted(cache, hit, true),
                _ => {
                    let answer = remote_answer(snapshot, creds, key, remote, external).await;
                    let resolved = answer.and_then(|answer| from_remote(snapshot, digest, answer));
                    let resolved = Arc::new(resolved.inspect_err(|_| cache.record(false))?);
                    cache.insert(digest, Arc::clone(&resolved));
                    counted(cache, resolved, false)
                }
            };
            check_context(identity, creds)
        }
        other => Err(AuthFailure::new(format!("authentication provider {other:?} is not available"))),
    }
}

/// The remote service's answer for `key`: from the shared cache when another instance has asked already, else from
/// the service (and then shared). Refusals are never cached.
async fn remote_answer(
    snapshot: &Arc<Snapshot>,
    creds: &Credentials,
    key: &str,
    remote: &RemoteAuthCache,
    external: &ExternalCache,
) -> Result<RemoteIdentity, AuthFailure> {
    let settings = &snapshot.settings;
    let shared = settings.use_external_cache && external.enabled();
    if shared && let Ok(Some(answer)) = external.get_gateway_config(key).await {
        return Ok(RemoteIdentity::from(answer));
    }
    let client = remote.get(snapshot, remote_client);
    let client = client.as_ref().as_ref().map_err(|e| AuthFailure::new(e.to_string()))?;
    let answer =
        client.resolve(key, non_empty(&creds.project_id), non_empty(&creds.user_id)).await.map_err(|e| match e {
            RemoteAuthError::Refused(why) => AuthFailure::new(why),
            other => AuthFailure::new(format!("the authentication service is unavailable: {other}")),
        })?;
    if shared {
        // A Redis that is down was counted and logged by the external cache; the answer still serves this instance.
        let _ = external.put_gateway_config(key, &(&answer).into(), settings.gateway_cache_expiry).await;
    }
    Ok(answer)
}

fn non_empty(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|v| !v.is_empty())
}

pub(super) fn presented_key(creds: &Credentials) -> Result<&str, AuthFailure> {
    let key = creds.key.trim();
    if key.is_empty() {
        return Err(AuthFailure::new("missing API key: send Authorization: Bearer <gateway key>"));
    }
    Ok(key)
}

/// An identity from the remote service's answer; servers it supplies are checked like a config file's.
fn from_remote(snapshot: &Arc<Snapshot>, digest: [u8; 32], answer: RemoteIdentity) -> Result<Identity, AuthFailure> {
    let key_id = secrets::key_id_from_digest(&digest);
    let servers = match answer.servers {
        None => None,
        Some(values) => {
            let mut problems = crate::config::Problems::default();
            let entries: Vec<ServerEntry> = values
                .into_iter()
                .enumerate()
                .filter_map(|(i, v)| decode_server_at(v, &format!("gateway_config.mcp_config[{i}]"), &mut problems))
                .collect();
            if !problems.is_empty() {
                tracing::warn!(problems = %problems.join("; "), "the authentication service sent servers that are not valid");
                return Err(AuthFailure::new("the authentication service returned an invalid gateway configuration"));
            }
            Some(Arc::new(entries))
        }
    };
    let mcp_config_id = match (&answer.mcp_config_id, &servers) {
        (Some(id), _) => Some(id.clone()),
        (None, Some(_)) => Some(format!("remote-{key_id}")),
        (None, None) => None,
    };
    let project = snapshot.file.projects.get(&answer.project_id);
    let user = snapshot.file.users.get(&answer.user_id);
    Ok(Identity {
        snapshot: Arc::clone(snapshot),
        key_digest: digest,
        key_id,
        project_name: project.map(|p| p.project_name.clone()).unwrap_or_else(|| answer.project_id.clone()),
        project_id: answer.project_id,
        email: user.map(|u| u.email.clone()).unwrap_or_default(),
        user_id: answer.user_id,
        mcp_config_id,
        servers,
        expires_at: None,
        client_token: None,
        claims: None,
        principal: Default::default(),
        decisions: Default::default(),
    })
}

/// Resolves `creds` against the snapshot's own keys (`local_apikey`), using and filling `cache`.
pub fn authenticate_local(
    snapshot: &Arc<Snapshot>,
    creds: &Credentials,
    cache: &GatewayConfigCache,
) -> Result<Arc<Identity>, AuthFailure> {
    let key = presented_key(creds)?;
    let digest = secrets::digest(key);
    let identity = match cache.peek(&digest) {
        Some(hit) if Arc::ptr_eq(&hit.snapshot, snapshot) => counted(cache, hit, true),
        _ => {
            let resolved = Arc::new(resolve(snapshot, key, digest).inspect_err(|_| cache.record(false))?);
            cache.insert(digest, Arc::clone(&resolved));
            counted(cache, resolved, false)
        }
    };
    check_context(identity, creds)
}

/// Counts a lookup of `identity` in its scope (`gw_get_cache_status` shows each caller its own configuration's counts).
pub(super) fn counted(cache: &GatewayConfigCache, identity: Arc<Identity>, hit: bool) -> Arc<Identity> {
    cache.record_in(&identity.cache_scope(), hit);
    identity
}

/// The optional project and user the client named must be the identity's.
pub(super) fn check_context(identity: Arc<Identity>, creds: &Credentials) -> Result<Arc<Identity>, AuthFailure> {
    if let Some(project) = creds.project_id.as_deref().filter(|p| !p.is_empty())
        && project != identity.project_id
        && project != identity.project_name
    {
        return Err(AuthFailure::new("the project id does not match the API key's project"));
    }
    if let Some(user) = creds.user_id.as_deref().filter(|u| !u.is_empty())
        && user != identity.user_id
        && !user.eq_ignore_ascii_case(&identity.email)
    {
        return Err(AuthFailure::new("the user id does not match the API key's user"));
    }
    Ok(identity)
}

fn resolve(snapshot: &Arc<Snapshot>, key: &str, digest: [u8; 32]) -> Result<Identity, AuthFailure> {
    let entry = snapshot.lookup_key(key).ok_or_else(|| AuthFailure::new("invalid API key"))?;
    if entry.disabled {
        return Err(AuthFailure::new("the API key is disabled"));
    }
    let project = snapshot.file.projects.get(&entry.project_id);
    let user = snapshot.file.users.get(&entry.user_id);
    Ok(Identity {
        snapshot: Arc::clone(snapshot),
        key_digest: digest,
        key_id: entry.key_id.clone(),
        project_id: entry.project_id.clone(),
        project_name: project.map(|p| p.project_name.clone()).unwrap_or_default(),
        user_id: entry.user_id.clone(),
        email: user.map(|u| u.email.clone()).unwrap_or_default(),
        mcp_config_id: entry.mcp_config_id.clone(),
        servers: None,
        expires_at: None,
        client_token: None,
        claims: None,
        principal: Default::default(),
        decisions: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigFile;
    use serde_json::json;
    use std::time::Duration;

    fn snapshot() -> Arc<Snapshot> {
        let file = ConfigFile::from_value(json!({
            "mcp_configs": {"c1": {"mcp_config_name": "main"}},
            "projects": {"p1": {"project_name": "proj", "mcp_config_id": "c1", "users": ["u1"]}},
            "users": {"u1": {"email": "ann@example.com"}},
            "apikeys": {"good": {"project_id": "p1", "user_id": "u1"},
                        "off": {"project_id": "p1", "user_id": "u1", "disabled": true}}
        }))
        .unwrap();
        Arc::new(Snapshot::build(file, [0; 32]).unwrap())
    }

    fn creds(key: &str, project: Option<&str>, user: Option<&str>) -> Credentials {
        Credentials { key: key.into(), project_id: project.map(Into::into), user_id: user.map(Into::into) }
    }

    #[test]
    fn keys_resolve_and_mismatches_fail() {
        let snap = snapshot();
        let cache = GatewayConfigCache::new(Duration::from_secs(60));
        let id = authenticate_local(&snap, &creds("good", None, None), &cache).unwrap();
        assert_eq!((id.project_name.as_str(), id.mcp_config_id.as_deref()), ("proj", Some("c1")));
        assert!(authenticate_local(&snap, &creds("good", Some("p1"), Some("u1")), &cache).is_ok());
        assert!(authenticate_local(&snap, &creds("good", Some("proj"), Some("ANN@example.com")), &cache).is_ok());
        for bad in [
            creds("", None, None),
            creds("nope", None, None),
            creds("off", None, None),
            creds("good", Some("p2"), None),
            creds("good", None, Some("u2")),
        ] {
            assert!(authenticate_local(&snap, &bad, &cache).is_err(), "{bad:?}");
        }
        assert_eq!(cache.stats().hits, 4);
    }

    #[test]
    fn a_new_snapshot_is_not_served_from_the_cache() {
        let cache = GatewayConfigCache::new(Duration::from_secs(60));
        let first = authenticate_local(&snapshot(), &creds("good", None, None), &cache).unwrap();
        let second_snap = snapshot();
        let second = authenticate_local(&second_snap, &creds("good", None, None), &cache).unwrap();
        assert!(!Arc::ptr_eq(&first.snapshot, &second.snapshot));
    }
}
