//! An authorization server's RFC 8414 metadata, as the broker reads it: at `{origin of authorization_url}/.well-known/
//! oauth-authorization-server` (contract 16), for the expected `issuer` (RFC 9207), whether the server sends `iss`
//! in its answers, and its `revocation_endpoint`. Cached per origin: 10 minutes, a failure 1 minute (an issuer
//! without metadata is asked once a minute at most). The number of entries is bounded by the origins the
//! configuration names. The console's sign-in (contract 18) reads an issuer's metadata the same way
//! ([`MetadataCache::of_issuer`]): RFC 8414's well-known URL for the issuer, else OpenID Connect discovery, for the
//! authorization and token endpoints.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

const FRESH: Duration = Duration::from_secs(600);
const FAILURE_FRESH: Duration = Duration::from_secs(60);
const MAX_METADATA_BYTES: usize = 256 * 1024;
const MAX_ORIGINS: usize = 1024;

/// What the broker reads of the metadata.
#[derive(Debug, Clone, Default)]
pub struct Metadata {
    pub issuer: Option<String>,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub revocation_endpoint: Option<String>,
    /// `authorization_response_iss_parameter_supported` (RFC 9207).
    pub iss_parameter_supported: bool,
}

/// When an origin's metadata was read, and what was found.
type Entry = (Instant, Option<Arc<Metadata>>);

#[derive(Default)]
pub struct MetadataCache(Mutex<HashMap<String, Entry>>);

impl MetadataCache {
    /// The metadata of `authorization_url`'s origin; `None` when it has none (or it could not be read).
    pub async fn get(&self, client: &reqwest::Client, authorization_url: &str) -> Option<Arc<Metadata>> {
        let origin = reqwest::Url::parse(authorization_url).ok()?.origin().ascii_serialization();
        let now = Instant::now();
        if let Some(found) = self.cached(&origin, now) {
            return found;
        }
        let found = fetch(client, &format!("{origin}/.well-known/oauth-authorization-server")).await.map(Arc::new);
        if found.is_none() {
            tracing::info!(origin = %origin, "the authorization server publishes no RFC 8414 metadata we could read");
        }
        self.keep(origin, now, found.clone());
        found
    }

    /// The metadata of issuer `issuer` whose `issuer` is that issuer: RFC 8414's `{origin}/.well-known/oauth-
    /// authorization-server{path}`, else OpenID Connect's `{issuer}/.well-known/openid-configuration`.
    pub async fn of_issuer(&self, client: &reqwest::Client, issuer: &str) -> Option<Arc<Metadata>> {
        let key = format!("issuer {issuer}");
        let now = Instant::now();
        if let Some(found) = self.cached(&key, now) {
            return found;
        }
        let url = reqwest::Url::parse(issuer).ok()?;
        let (origin, path) = (url.origin().ascii_serialization(), url.path().trim_end_matches('/'));
        let candidates = [
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/')),
        ];
        let mut found = None;
        for candidate in candidates {
            if let Some(metadata) = fetch(client, &candidate).await
                && metadata.issuer.as_deref() == Some(issuer)
            {
                found = Some(Arc::new(metadata));
                break;
            }
        }
        if found.is_none() {
            tracing::info!(issuer = %issuer, "the issuer publishes no metadata (RFC 8414 or OpenID) naming itself");
        }
        self.keep(key, now, found.clone());
        found
    }

    fn cached(&self, key: &str, now: Instant) -> Option<Option<Arc<Metadata>>> {
        let cached = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, found) = cached.get(key)?;
        let fresh = if found.is_some() { FRESH } else { FAILURE_FRESH };
        (now.duration_since(*at) < fresh).then(|| found.clone())
    }

    fn keep(&self, key: String, now: Instant, found: Option<Arc<Metadata>>) {
        let mut cached = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if cached.len() >= MAX_ORIGINS {
            cached.clear();
        }
        cached.insert(key, (now, found));
    }
}

async fn fetch(client: &reqwest::Client, url: &str) -> Option<Metadata> {
    let mut response = client.get(url).header(reqwest::header::ACCEPT, "application/json").send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = crate::outbound::read_body(&mut response, MAX_METADATA_BYTES).await.ok()?;
    let document: Value = serde_json::from_slice(&body).ok()?;
    let text = |name: &str| document.get(name).and_then(Value::as_str).map(str::to_string);
    let endpoint = |name: &str| text(name).filter(|url| crate::config::remote::check_url(url).is_ok());
    Some(Metadata {
        issuer: text("issuer"),
        authorization_endpoint: endpoint("authorization_endpoint"),
        token_endpoint: endpoint("token_endpoint"),
        revocation_endpoint: text("revocation_endpoint").filter(|url| crate::config::remote::check_url(url).is_ok()),
        iss_parameter_supported: document
            .get("authorization_response_iss_parameter_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}
