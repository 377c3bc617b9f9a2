//! HTTP mode: management operations sent to a running gateway's admin REST API (`--admin-url`).
//!
//! The admin key comes from the environment variable `GW_ADMIN_APIKEY` only, never from a flag, so it stays out of
//! shell history and process listings. Each operation is its one REST route ([`Op::route`]); the answer's envelope
//! becomes an [`Outcome`] and an error body `{error, detail}` a [`CliError::Api`] with the same status and code, so
//! the exit code is the same as in file mode for the same refusal.

use std::time::Duration;

use reqwest::Url;
use serde_json::Value;

use super::ops::{Op, Route};
use super::output::{CliError, Outcome};

/// The environment variable that holds the admin key in HTTP mode.
pub const ADMIN_KEY_ENV: &str = "GW_ADMIN_APIKEY";

/// A client for one admin API.
pub struct AdminClient {
    base: Url,
    key: String,
    client: reqwest::Client,
    runtime: tokio::runtime::Runtime,
}

/// The error and its causes on one line (reqwest's own message leaves out "connection refused").
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

impl AdminClient {
    /// A client for the admin API at `url`, with the admin key from `GW_ADMIN_APIKEY`.
    pub fn new(url: &str) -> Result<AdminClient, CliError> {
        let key = std::env::var(ADMIN_KEY_ENV).ok().map(|k| k.trim().to_string()).filter(|k| !k.is_empty());
        let key = key.ok_or_else(|| {
            CliError::Auth(format!(
                "--admin-url needs the admin key in the environment variable {ADMIN_KEY_ENV} (it is never a flag)"
            ))
        })?;
        let base = Url::parse(url).map_err(|e| CliError::Usage(format!("--admin-url {url:?} is not a URL: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(CliError::Usage(format!("--admin-url {url:?} must be an http:// or https:// URL")));
        }
        let client = crate::outbound::client_builder(Duration::from_secs(30))
            .build()
            .map_err(|e| CliError::Failed(format!("cannot build an HTTP client: {}", chain(&e))))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
        Ok(AdminClient { base, key, client, runtime })
    }

    /// Runs an operation. `update-server` is the REST round trip: GET the entry, apply the flags, PUT it back.
    pub fn run(&self, op: &Op) -> Result<Outcome, CliError> {
        if let Op::ServerUpdate { config, server, edit } = op {
            let current = self.send(&Op::ServerGet { config: config.clone(), server: server.clone() }.route())?;
            let entry = edit.apply(current.data.unwrap_or(Value::Null))?;
            let mut put = op.route();
            put.body = Some(entry);
            return self.send(&put);
        }
        self.send(&op.route())
    }

    fn url(&self, segments: &[String]) -> Result<Url, CliError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| CliError::Usage(format!("--admin-url {} cannot take a path", self.base)))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    fn url_with_query(&self, route: &Route) -> Result<Url, CliError> {
        let mut url = self.url(&route.segments)?;
        if !route.query.is_empty() {
            url.query_pairs_mut().extend_pairs(route.query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        Ok(url)
    }

    /// Sends one request and reads the envelope.
    pub fn send(&self, route: &Route) -> Result<Outcome, CliError> {
        let url = self.url_with_query(route)?;
        let mut request = self.client.request(route.method.clone(), url.clone()).bearer_auth(&self.key);
        if let Some(body) = &route.body {
            request = request.json(body);
        }
        let (status, text) = self
            .runtime
            .block_on(async {
                let response = request.send().await?;
                let status = response.status().as_u16();
                Ok::<_, reqwest::Error>((status, response.text().await?))
            })
            .map_err(|e| {
                CliError::Unreachable(format!("cannot reach the admin API at {}: {}", self.base, chain(&e)))
            })?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let not_admin_api = || {
            CliError::Unreachable(format!(
                "{} answered HTTP {status} without an mcpgw admin API body; is --admin-url the admin listener?",
                self.base
            ))
        };
        if (200..300).contains(&status) {
            let message = body.get("message").and_then(Value::as_str).ok_or_else(not_admin_api)?;
            return Ok(Outcome { message: message.to_string(), data: body.get("data").cloned() });
        }
        let (Some(code), Some(detail)) =
            (body.get("error").and_then(Value::as_str), body.get("detail").and_then(Value::as_str))
        else {
            return Err(not_admin_api());
        };
        if status == 401 {
            return Err(CliError::Auth(format!(
                "the admin API at {} refused the admin key from {ADMIN_KEY_ENV}: {detail}",
                self.base
            )));
        }
        Err(CliError::Api { status, code: code.to_string(), detail: detail.to_string() })
    }
}
