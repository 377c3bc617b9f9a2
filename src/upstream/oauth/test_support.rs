//! Test helpers shared by the OAuth tests: a scripted token endpoint on 127.0.0.1 and a standard configuration.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::{OAuthSettings, TokenKey, TokenManager};

pub(super) const SECRET: &str = "s3cret-client-value-0123456789";

/// A token endpoint on 127.0.0.1 that records each request and answers from a script; when the script is empty
/// it issues `token-N` (N counting requests from 1) living one hour.
#[derive(Clone, Default)]
pub(super) struct Issuer {
    pub(super) requests: Arc<Mutex<Vec<Recorded>>>,
    pub(super) script: Arc<Mutex<VecDeque<(u16, Value)>>>,
    pub(super) delay: Duration,
}

pub(super) struct Recorded {
    pub(super) form: HashMap<String, String>,
    pub(super) accept: Option<String>,
    pub(super) content_type: Option<String>,
}

impl Issuer {
    pub(super) fn router(&self) -> Router {
        Router::new().route("/token", axum::routing::post(issue)).with_state(self.clone())
    }

    /// Serves plain HTTP; returns the token URL.
    pub(super) async fn start(self) -> (Issuer, String) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        let router = self.router();
        tokio::spawn(async move { axum::serve(listener, router).await });
        (self, url)
    }

    pub(super) fn then(&self, status: u16, body: Value) -> &Issuer {
        self.script.lock().unwrap().push_back((status, body));
        self
    }

    pub(super) fn form(&self, request: usize) -> HashMap<String, String> {
        self.requests.lock().unwrap()[request].form.clone()
    }

    pub(super) fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

async fn issue(State(issuer): State<Issuer>, headers: HeaderMap, body: String) -> (StatusCode, Json<Value>) {
    let text = |name| headers.get(name).and_then(|v: &header::HeaderValue| v.to_str().ok()).map(String::from);
    let recorded = Recorded {
        form: serde_urlencoded::from_str(&body).unwrap(),
        accept: text(header::ACCEPT),
        content_type: text(header::CONTENT_TYPE),
    };
    let n = {
        let mut requests = issuer.requests.lock().unwrap();
        requests.push(recorded);
        requests.len()
    };
    tokio::time::sleep(issuer.delay).await;
    let scripted = issuer.script.lock().unwrap().pop_front();
    let (status, body) = scripted.unwrap_or_else(|| {
        (200, json!({"access_token": format!("token-{n}"), "token_type": "Bearer", "expires_in": 3600}))
    });
    (StatusCode::from_u16(status).unwrap(), Json(body))
}

pub(super) fn config(url: &str) -> Value {
    json!({"enabled": true, "OAUTH_GRANT_TYPE": "client_credentials", "OAUTH_CLIENT_ID": "gw-client",
           "OAUTH_CLIENT_SECRET": SECRET, "OAUTH_TOKEN_URL": url, "OAUTH_SCOPE": "read write",
           "OAUTH_AUDIENCE": null, "OAUTH_USE_MTLS": false, "OAUTH_CLIENT_CERT_PATH": null,
           "OAUTH_CLIENT_KEY_PATH": null, "OAUTH_CA_BUNDLE_PATH": null})
}

pub(super) fn settings(url: &str) -> OAuthSettings {
    OAuthSettings::from_json(&config(url)).unwrap().unwrap()
}

pub(super) fn key(project: &str) -> TokenKey {
    TokenKey::new("weather", "config-1", project)
}

pub(super) fn manager() -> TokenManager {
    TokenManager::new(Duration::from_secs(5))
}
