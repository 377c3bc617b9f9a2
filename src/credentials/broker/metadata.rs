//! An authorization server's RFC 8414 metadata, as the broker reads it: at `{origin of authorization_url}/.well-known/
//! oauth-authorization-server` (contract 16), for the expected `issuer` (RFC 9207), whether the server sends `iss`
//! in its answers, and its `revocation_endpoint`. Cached per origin: 10 minutes, a failure 1 minute (an issuer
//! without metadata is asked once a minute at most). The number of entries is bounded by the origins the
//! configuration names.

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
        {
            let cached = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((at, found)) = cached.get(&origin) {
                let fresh = if found.is_some() { FRESH } else { FAILURE_FRESH };
                if now.duration_since(*at) < fresh {
                    return found.clone();
                }
            }
        }
        let found = fetch(client, &origin).await.map(Arc::new);
        if found.is_none() {
            tracing::info!(origin = %origin, "the authorization server publishes no RFC 8414 metadata we could read");
        }
        let mut cached = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if cached.len() >= MAX_ORIGINS {
            cached.clear();
        }
        cached.insert(origin, (now, found.clone()));
        found
    }
}

async fn fetch(client: &reqwest::Client, origin: &str) -> Option<Metadata> {
    let url = format!("{origin}/.well-known/oauth-authorization-server");
    let mut response = client.get(&url).header(reqwest::header::ACCEPT, "application/json").send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = crate::outbound::read_body(&mut response, MAX_METADATA_BYTES).await.ok()?;
    let document: Value = serde_json::from_slice(&body).ok()?;
    let text = |name: &str| document.get(name).and_then(Value::as_str).map(str::to_string);
    Some(Metadata {
        issuer: text("issuer"),
        revocation_endpoint: text("revocation_endpoint").filter(|url| crate::config::remote::check_url(url).is_ok()),
        iss_parameter_supported: document
            .get("authorization_response_iss_parameter_supported")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}
