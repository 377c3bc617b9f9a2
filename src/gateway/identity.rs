//! Who is calling: resolving gateway credentials (key, optional project and user) against a snapshot.
//!
//! With the `local_apikey` provider (spec 5.2) the key is looked up in the snapshot's key table, its record gives the
//! project and user, the project gives the MCP configuration. The result travels with the request together with the
//! snapshot it came from, so one request sees one configuration from start to end. Resolutions are cached for
//! `gw_gateway_cache_expiration` (the gateway config cache) and the cache is dropped when the configuration changes.

use std::sync::Arc;

use crate::cache::TtlCache;
use crate::config::Snapshot;
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
}

/// Why authentication failed; the text is the `details` of the `AUTH_FAILED` answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AuthFailure(pub String);

/// Resolved identities by key digest, valid for one snapshot.
pub type GatewayConfigCache = TtlCache<[u8; 32], Identity>;

/// Resolves `creds` against `snapshot`, using and filling `cache`.
pub fn authenticate(
    snapshot: &Arc<Snapshot>,
    creds: &Credentials,
    cache: &GatewayConfigCache,
) -> Result<Arc<Identity>, AuthFailure> {
    let provider = snapshot.settings.auth.provider.as_str();
    if provider != "local_apikey" {
        return Err(AuthFailure(format!("authentication provider {provider:?} is not available in this version")));
    }
    let key = creds.key.trim();
    if key.is_empty() {
        return Err(AuthFailure("missing API key: send Authorization: Bearer <gateway key>".into()));
    }
    let digest = secrets::digest(key);
    let identity = match cache.get(&digest) {
        Some(hit) if Arc::ptr_eq(&hit.snapshot, snapshot) => hit,
        _ => {
            let resolved = Arc::new(resolve(snapshot, key, digest)?);
            cache.insert(digest, Arc::clone(&resolved));
            resolved
        }
    };
    if let Some(project) = creds.project_id.as_deref().filter(|p| !p.is_empty())
        && project != identity.project_id
        && project != identity.project_name
    {
        return Err(AuthFailure("the project id does not match the API key's project".into()));
    }
    if let Some(user) = creds.user_id.as_deref().filter(|u| !u.is_empty())
        && user != identity.user_id
        && !user.eq_ignore_ascii_case(&identity.email)
    {
        return Err(AuthFailure("the user id does not match the API key's user".into()));
    }
    Ok(identity)
}

fn resolve(snapshot: &Arc<Snapshot>, key: &str, digest: [u8; 32]) -> Result<Identity, AuthFailure> {
    let entry = snapshot.lookup_key(key).ok_or_else(|| AuthFailure("invalid API key".into()))?;
    if entry.disabled {
        return Err(AuthFailure("the API key is disabled".into()));
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
        let id = authenticate(&snap, &creds("good", None, None), &cache).unwrap();
        assert_eq!((id.project_name.as_str(), id.mcp_config_id.as_deref()), ("proj", Some("c1")));
        assert!(authenticate(&snap, &creds("good", Some("p1"), Some("u1")), &cache).is_ok());
        assert!(authenticate(&snap, &creds("good", Some("proj"), Some("ANN@example.com")), &cache).is_ok());
        for bad in [
            creds("", None, None),
            creds("nope", None, None),
            creds("off", None, None),
            creds("good", Some("p2"), None),
            creds("good", None, Some("u2")),
        ] {
            assert!(authenticate(&snap, &bad, &cache).is_err(), "{bad:?}");
        }
        assert_eq!(cache.stats().hits, 4);
    }

    #[test]
    fn a_new_snapshot_is_not_served_from_the_cache() {
        let cache = GatewayConfigCache::new(Duration::from_secs(60));
        let first = authenticate(&snapshot(), &creds("good", None, None), &cache).unwrap();
        let second_snap = snapshot();
        let second = authenticate(&second_snap, &creds("good", None, None), &cache).unwrap();
        assert!(!Arc::ptr_eq(&first.snapshot, &second.snapshot));
    }
}
