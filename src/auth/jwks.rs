//! The issuer's signing keys for the `oauth` provider (contract section 10).
//!
//! The keys come from `jwks_uri`, or from the `jwks_uri` of `{issuer}/.well-known/openid-configuration` (whose
//! `issuer` must be the configured one). They are kept until a token names a key id that is not among them (the
//! issuer rotated its keys): then the JWKS is fetched again, at most once every [`REFETCH_FLOOR`], so tokens with
//! made-up key ids cannot make the gateway hammer the issuer (the fetch at start and after a reload does not count).
//! Fetches are single-flight. A fetch that fails is
//! remembered for the health report (`degraded`) and fails the token closed; keys fetched before stay in use.
//! Keys belong to the configured source (issuer and `jwks_uri`): after a reload that changes it they are not used.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use serde_json::Value;
use tokio::time::Instant;

use super::jwt::{Jwk, Jwt, keys_of};
use crate::config::client_oauth::ClientOAuth;

/// The least time between two fetches of one source's keys.
pub const REFETCH_FLOOR: Duration = Duration::from_secs(30);
/// A discovery document or a JWKS larger than this is refused unread.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;

/// Where keys come from.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Source {
    issuer: String,
    jwks_uri: Option<reqwest::Url>,
}

impl Source {
    fn of(config: &ClientOAuth) -> Source {
        Source { issuer: config.issuer.clone(), jwks_uri: config.jwks_uri.clone() }
    }
}

#[derive(Default)]
struct KeySet {
    source: Option<Source>,
    keys: Vec<Jwk>,
}

/// The key cache, one per gateway.
#[derive(Default)]
pub struct Jwks {
    current: ArcSwap<KeySet>,
    flight: tokio::sync::Mutex<()>,
    /// The last fetch for an unknown key: its source and when (the floor's clock; a prefetch does not wind it).
    last: Mutex<Option<(Source, Instant)>>,
    /// Why the last fetch failed, until one succeeds (the health report).
    failure: Mutex<Option<String>>,
}

impl Jwks {
    pub fn new() -> Arc<Jwks> {
        Arc::new(Jwks::default())
    }

    /// The keys that may verify `jwt`: the one its `kid` names, or without a `kid` every key of its algorithm's type.
    /// An unknown key id fetches the keys again (at most once every [`REFETCH_FLOOR`]).
    pub async fn keys_for(&self, config: &ClientOAuth, jwt: &Jwt, timeout: Duration) -> Result<Vec<Jwk>, String> {
        let source = Source::of(config);
        if let Some(found) = self.lookup(&source, jwt) {
            return Ok(found);
        }
        let _flight = self.flight.lock().await;
        if let Some(found) = self.lookup(&source, jwt) {
            return Ok(found);
        }
        let recent = self.last().as_ref().is_some_and(|(tried, at)| *tried == source && at.elapsed() < REFETCH_FLOOR);
        if recent {
            return Err(match self.failure().clone() {
                Some(why) => format!("the issuer's keys could not be fetched: {why}"),
                None => unknown(jwt),
            });
        }
        *self.last() = Some((source.clone(), Instant::now()));
        self.fetch(config, timeout).await?;
        self.lookup(&source, jwt).ok_or_else(|| unknown(jwt))
    }

    /// Fetches the keys now (at start and after a reload, so that the health report knows at once).
    pub async fn prefetch(&self, config: &ClientOAuth, timeout: Duration) {
        let _flight = self.flight.lock().await;
        let _ = self.fetch(config, timeout).await;
    }

    /// Why the keys are not usable now, for the health report: the last fetch failed.
    pub fn degraded_reason(&self) -> Option<String> {
        self.failure().clone().map(|why| format!("the OAuth issuer's keys could not be fetched: {why}"))
    }

    fn last(&self) -> std::sync::MutexGuard<'_, Option<(Source, Instant)>> {
        self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn failure(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lookup(&self, source: &Source, jwt: &Jwt) -> Option<Vec<Jwk>> {
        let set = self.current.load();
        if set.source.as_ref() != Some(source) {
            return None;
        }
        let found: Vec<Jwk> = set
            .keys
            .iter()
            .filter(|key| key.fits(jwt.alg) && (jwt.kid.is_none() || key.kid == jwt.kid))
            .cloned()
            .collect();
        (!found.is_empty()).then_some(found)
    }

    /// One fetch (the caller holds the flight); the outcome is remembered.
    async fn fetch(&self, config: &ClientOAuth, timeout: Duration) -> Result<(), String> {
        let source = Source::of(config);
        let fetched = fetch_keys(config, timeout).await;
        *self.failure() = fetched.as_ref().err().cloned();
        match fetched {
            Ok(keys) => {
                tracing::info!(issuer = %config.issuer, keys = keys.len(), "OAuth issuer keys fetched");
                self.current.store(Arc::new(KeySet { source: Some(source), keys }));
                Ok(())
            }
            Err(why) => {
                tracing::warn!(issuer = %config.issuer, error = %why, "the OAuth issuer's keys could not be fetched");
                Err(format!("the issuer's keys could not be fetched: {why}"))
            }
        }
    }
}

fn unknown(jwt: &Jwt) -> String {
    match &jwt.kid {
        Some(kid) => format!("the token's key {:?} is not among the issuer's keys", super::jwt::clip(kid)),
        None => "no key of the issuer's fits the token's algorithm".to_string(),
    }
}

/// The usable keys of the configured or discovered JWKS.
async fn fetch_keys(config: &ClientOAuth, timeout: Duration) -> Result<Vec<Jwk>, String> {
    let client = crate::outbound::client(timeout).map_err(crate::outbound::describe)?;
    let jwks_uri = match &config.jwks_uri {
        Some(uri) => uri.clone(),
        None => {
            let url = format!("{}/.well-known/openid-configuration", config.issuer.trim_end_matches('/'));
            let discovery = get_json(&client, &url).await.map_err(|e| format!("OpenID configuration: {e}"))?;
            if discovery.get("issuer").and_then(Value::as_str) != Some(config.issuer.as_str()) {
                return Err("the OpenID configuration names another issuer".into());
            }
            let uri =
                discovery.get("jwks_uri").and_then(Value::as_str).ok_or("the OpenID configuration has no jwks_uri")?;
            reqwest::Url::parse(uri).map_err(|e| format!("the OpenID configuration's jwks_uri is not a URL: {e}"))?
        }
    };
    let document = get_json(&client, jwks_uri.as_str()).await.map_err(|e| format!("JWKS: {e}"))?;
    let keys = keys_of(&document);
    if keys.is_empty() {
        return Err("the JWKS holds no RS256 or ES256 signing key".into());
    }
    Ok(keys)
}

async fn get_json(client: &reqwest::Client, url: &str) -> Result<Value, String> {
    let mut response = client
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(crate::outbound::describe)?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("HTTP {}", status.as_u16()));
    }
    let body = crate::outbound::read_body(&mut response, MAX_DOCUMENT_BYTES).await.map_err(|e| match e {
        crate::outbound::BodyReadError::TooLarge(limit) => format!("longer than {limit} bytes"),
        crate::outbound::BodyReadError::Transport(e) => crate::outbound::describe(e),
    })?;
    serde_json::from_slice(&body).map_err(|_| "not JSON".to_string())
}
