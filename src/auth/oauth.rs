//! Provider `oauth` (contract section 10): the gateway as an OAuth resource server. A client presents a JWT from the
//! configured authorization server; the gateway verifies it (`jwt.rs`, keys from `jwks.rs`) and runs the request as
//! the user and project its claims name, exactly as for an API key of that user and project.
//!
//! The checks, in order, each failing with `details` that say which one (never the token): the token's shape and
//! algorithm, its key and signature, `iss` equal to `issuer`, `aud` holding `audience`, `exp` (required) and `nbf`
//! with [`LEEWAY`], the `required_scopes` (`scope` string or `scp`; a missing one is 403 `insufficient_scope` over
//! HTTP), the user and project claims naming a user and a project of the config, and the user's membership.
//!
//! A verified token is cached for the snapshot (as API keys are) until it expires, so a warm call costs a hash, a
//! lookup and a comparison with the token the cached identity holds ([`cache_key`]). The identity's key digest (rate
//! limits, session binding) is that of the issuer, user and project, so a client that refreshes its token keeps its
//! sessions and its rate-limit bucket. With `accept_api_keys` a bearer value that is not a JWT is checked as an API
//! key.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::identity::{
    AuthFailure, Credentials, GatewayConfigCache, Identity, authenticate_local, check_context, counted, presented_key,
};
use super::jwks::Jwks;
use super::jwt::{self, clip};
use crate::config::Snapshot;
use crate::config::client_oauth::ClientOAuth;
use crate::secrets;

/// Clock skew allowed on `exp` and `nbf`.
pub const LEEWAY: u64 = 60;

/// Resolves a bearer JWT (or, with `accept_api_keys`, an API key) against `snapshot`.
pub async fn authenticate(
    snapshot: &Arc<Snapshot>,
    creds: &Credentials,
    cache: &GatewayConfigCache,
    jwks: &Jwks,
) -> Result<Arc<Identity>, AuthFailure> {
    let Some(config) = snapshot.settings.client_oauth.as_deref() else {
        return Err(AuthFailure::new("the oauth authentication provider is not configured correctly"));
    };
    let token = presented_key(creds)?;
    if !jwt::looks_like_jwt(token) {
        if config.accept_api_keys {
            return authenticate_local(snapshot, creds, cache);
        }
        return Err(AuthFailure::new("the bearer token is not a JWT, and API keys are not accepted here"));
    }
    let digest = cache_key(token);
    let now = now();
    if let Some(hit) = cache.peek(&digest)
        && Arc::ptr_eq(&hit.snapshot, snapshot)
        && hit.expires_at.is_some_and(|exp| now <= exp + LEEWAY)
        && hit.client_token.as_ref().is_some_and(|held| secrets::ct_eq(held.expose(), token))
    {
        return check_context(counted(cache, hit, true), creds);
    }
    let verified = verify(snapshot, config, token, now, jwks).await.inspect_err(|_| cache.record(false))?;
    let identity = Arc::new(verified);
    cache.insert(digest, Arc::clone(&identity));
    check_context(counted(cache, identity, false), creds)
}

/// Where a verified token's identity is kept in the identity cache: a 128-bit hash of the token under this process's
/// two random seeds (foldhash), not its SHA-256: a token is about 1 KB, hashed at every request, and SHA-256 over it
/// was the one cost a JWT's call had over an API key's (issue 36). A hit counts only when the token the identity holds
/// is the one presented (compared in constant time), so two tokens never share an identity, whatever their hashes;
/// the seeds are nobody else's to know, so no one can make two tokens meet on purpose either (at worst they would take
/// each other's place in the cache). The slot's last 16 bytes are `0xff`: no SHA-256 of an API key is likely to take
/// it.
fn cache_key(token: &str) -> [u8; 32] {
    use std::hash::BuildHasher;
    type Seeds = [foldhash::quality::RandomState; 2];
    static SEEDS: std::sync::LazyLock<Seeds> = std::sync::LazyLock::new(Default::default);
    let mut key = [0xff; 32];
    key[..8].copy_from_slice(&SEEDS[0].hash_one(token).to_le_bytes());
    key[8..16].copy_from_slice(&SEEDS[1].hash_one(token).to_le_bytes());
    key
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs()
}

/// The checks every token of the issuer passes, for a client of the gateway and for the console's sign-in alike
/// (`console/oauth.rs`): its shape and algorithm, its key and signature, `iss`, `aud` holding `audience`, `exp` and
/// `nbf` with [`LEEWAY`]. The verified claims, or which check failed (never the token).
pub async fn verify_token(
    config: &ClientOAuth,
    token: &str,
    now: u64,
    jwks: &Jwks,
    timeout: Duration,
) -> Result<serde_json::Map<String, Value>, AuthFailure> {
    let jwt = jwt::parse(token).map_err(AuthFailure::new)?;
    let keys = jwks.keys_for(config, &jwt, timeout).await.map_err(AuthFailure::new)?;
    if !keys.iter().any(|key| key.verifies(&jwt)) {
        return Err(AuthFailure::new("the token's signature does not verify with the issuer's key"));
    }
    let claims = jwt.claims;
    let text = |name: &str| claims.get(name).and_then(Value::as_str);
    match text("iss") {
        Some(iss) if iss == config.issuer => {}
        Some(iss) => {
            return Err(AuthFailure::new(format!("the token's issuer {:?} is not the configured issuer", clip(iss))));
        }
        None => return Err(AuthFailure::new("the token names no issuer (iss)")),
    }
    let audience_ok = match claims.get("aud") {
        Some(Value::String(aud)) => *aud == config.audience,
        Some(Value::Array(auds)) => auds.iter().any(|a| a.as_str() == Some(config.audience.as_str())),
        _ => false,
    };
    if !audience_ok {
        return Err(AuthFailure::new(format!("the token's audience (aud) does not include {:?}", config.audience)));
    }
    let time = |name: &str| claims.get(name).and_then(Value::as_u64);
    let Some(exp) = time("exp") else {
        return Err(AuthFailure::new("the token has no expiry (exp)"));
    };
    if now > exp + LEEWAY {
        return Err(AuthFailure::new(format!("the token expired {} seconds ago", now - exp)));
    }
    if let Some(nbf) = time("nbf")
        && nbf > now + LEEWAY
    {
        return Err(AuthFailure::new(format!("the token is not valid for another {} seconds (nbf)", nbf - now)));
    }
    Ok(claims)
}

async fn verify(
    snapshot: &Arc<Snapshot>,
    config: &ClientOAuth,
    token: &str,
    now: u64,
    jwks: &Jwks,
) -> Result<Identity, AuthFailure> {
    let claims = &verify_token(config, token, now, jwks, snapshot.settings.timeouts.auth).await?;
    let text = |name: &str| claims.get(name).and_then(Value::as_str);
    let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(now);
    let missing: Vec<&str> = config
        .required_scopes
        .iter()
        .map(String::as_str)
        .filter(|needed| !scopes(claims).any(|s| s == *needed))
        .collect();
    if !missing.is_empty() {
        return Err(AuthFailure::insufficient_scope(format!(
            "the token lacks the required scope {}",
            missing.join(" ")
        )));
    }
    let named = |claim: &str| text(claim).filter(|v| !v.is_empty());
    let Some(user_value) = named(&config.user_claim) else {
        return Err(AuthFailure::new(format!("the token has no {:?} claim naming its user", config.user_claim)));
    };
    let Some(user_id) = snapshot.resolve_user(user_value) else {
        return Err(AuthFailure::new(format!(
            "the token's {:?} claim names no user of the gateway",
            config.user_claim
        )));
    };
    let Some(project_value) = named(&config.project_claim) else {
        return Err(AuthFailure::new(format!("the token has no {:?} claim naming its project", config.project_claim)));
    };
    let Some(project_id) = snapshot.resolve_project(project_value) else {
        let claim = &config.project_claim;
        return Err(AuthFailure::new(format!("the token's {claim:?} claim names no project of the gateway")));
    };
    let (user_id, project_id) = (user_id.to_string(), project_id.to_string());
    let project = snapshot.file.projects.get(&project_id);
    if !project.is_some_and(|p| p.users.contains(&user_id)) {
        return Err(AuthFailure::new("the token's user is not a member of the token's project"));
    }
    let subject = format!("oauth\0{}\0{user_id}\0{project_id}", config.issuer);
    Ok(Identity {
        snapshot: Arc::clone(snapshot),
        key_digest: secrets::digest(&subject),
        key_id: format!("oauth:{user_id}"),
        project_name: project.map(|p| p.project_name.clone()).unwrap_or_default(),
        mcp_config_id: project.and_then(|p| p.mcp_config_id.clone()),
        email: snapshot.file.users.get(&user_id).map(|u| u.email.clone()).unwrap_or_default(),
        user_id,
        project_id,
        servers: None,
        expires_at: Some(exp),
        client_token: Some(crate::credentials::SecretValue::from(token.to_string())),
        claims: Some(Arc::new(claims.clone())),
        principal: Default::default(),
        decisions: Default::default(),
    })
}

/// The token's scopes: the space-separated `scope` string (RFC 8693, Keycloak, Auth0, Okta) and the `scp` claim
/// (a string or an array, as Entra ID sends it).
pub fn scopes(claims: &serde_json::Map<String, Value>) -> impl Iterator<Item = &str> {
    let scope = claims.get("scope").and_then(Value::as_str).into_iter().flat_map(str::split_whitespace);
    let scp = claims.get("scp").into_iter().flat_map(|value| -> Box<dyn Iterator<Item = &str>> {
        match value {
            Value::String(s) => Box::new(s.split_whitespace()),
            Value::Array(items) => Box::new(items.iter().filter_map(Value::as_str)),
            _ => Box::new(std::iter::empty()),
        }
    });
    scope.chain(scp)
}

/// The values of claim `claim` (an array of strings, or a space-separated string), as `principal.groups` and
/// `principal.roles` read them (contract 17) and the console's `console_admin_role` looks for it (contract 18).
pub fn claim_values<'c>(claims: &'c serde_json::Map<String, Value>, claim: Option<&str>) -> Vec<&'c str> {
    match claim.and_then(|claim| claims.get(claim)) {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(text)) => text.split_whitespace().collect(),
        _ => Vec::new(),
    }
}

/// Whether the claims' roles or groups (the claims `claim_mappings` names) hold `value`.
pub fn holds_role(config: &ClientOAuth, claims: &serde_json::Map<String, Value>, value: &str) -> bool {
    [config.roles_claim.as_deref(), config.groups_claim.as_deref()]
        .into_iter()
        .any(|claim| claim_values(claims, claim).contains(&value))
}

/// The RFC 9728 metadata of the gateway as a protected resource; `base` is its public URL (`https://host`).
pub fn resource_metadata(config: &ClientOAuth, base: &str) -> Value {
    serde_json::json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": [config.issuer],
        "bearer_methods_supported": ["header"],
        "scopes_supported": config.required_scopes,
    })
}

/// Where the metadata is published for `base`.
pub fn metadata_url(base: &str) -> String {
    format!("{base}/.well-known/oauth-protected-resource/mcp")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn roles_and_groups_come_from_the_mapped_claims() {
        let claims = json!({"roles": ["viewer", "mcpgw-admin"], "groups": "ops dev", "other": ["root"]});
        let claims = claims.as_object().unwrap();
        assert_eq!(claim_values(claims, Some("groups")), ["ops", "dev"]);
        assert!(claim_values(claims, None).is_empty());
        let mut problems = Vec::new();
        let config = json!({"issuer": "https://idp.example.com", "audience": "a",
                            "claim_mappings": {"roles": "roles", "groups": "groups"}});
        let config = crate::config::client_oauth::read(config.as_object().unwrap(), &mut problems).unwrap();
        assert!(holds_role(&config, claims, "mcpgw-admin") && holds_role(&config, claims, "ops"));
        assert!(!holds_role(&config, claims, "root"), "only the mapped claims count");
    }

    #[test]
    fn scopes_come_from_scope_and_scp() {
        let claims = json!({"scope": "mcp.read  mcp.write", "scp": ["tools"]});
        let found: Vec<&str> = scopes(claims.as_object().unwrap()).collect();
        assert_eq!(found, ["mcp.read", "mcp.write", "tools"]);
        let entra = json!({"scp": "mcp.read other"});
        assert_eq!(scopes(entra.as_object().unwrap()).count(), 2);
    }
}
