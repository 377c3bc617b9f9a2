//! Auth provider `gw`: gateway keys resolved by a remote service instead of the config file's `apikeys`, configured
//! with `{base_url, api_key}`. [`RemoteAuth::resolve`] sends the client's credentials, bounded by `auth_timeout`, and
//! turns the answer into a [`RemoteIdentity`] (project, user, optionally the MCP configuration to serve) or a
//! [`RemoteAuthError`] that keeps a refusal apart from a service that could not answer.
//!
//! # Protocol
//!
//! Request:
//!
//! ```text
//! POST {base_url}/mcp-gateway/get-gateway
//! apikey: <provider api_key>
//! Content-Type: application/json
//!
//! {"gateway_key": "<the client's key>", "project_id": "<string>" | null, "user_id": "<string>" | null}
//! ```
//!
//! `project_id` and `user_id` are what the client sent (null when it sent none or an empty string).
//!
//! Accepted (HTTP 2xx):
//!
//! ```text
//! {"authenticated": true, "project_id": "…", "user_id": "…",
//!  "mcp_config_id": "…",                                  // optional
//!  "gateway_config": {"mcp_config": [ <server entry>, … ]}} // optional; entries as in the configuration file
//! ```
//!
//! Refused: HTTP 401 or 403, or HTTP 2xx with `{"authenticated": false}`; a `detail` or `message` string explains
//! why. Anything else (a timeout, no connection, another status, an answer that cannot be read, an accepted answer
//! without `project_id` and `user_id` strings, a server entry that is not an object) is an error of the service, not
//! a refusal. Error texts never carry the client's key or the provider's api key.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::HeaderName;

use crate::cache::shared::SharedIdentity;
use serde_json::{Map, Value, json};

use crate::outbound::json_api::{CallError, JsonApi, MAX_MESSAGE_CHARS, explanation, required_string, truncate};

const PATH: &str = "/mcp-gateway/get-gateway";

/// Why a key did not resolve to an identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteAuthError {
    #[error("remote auth provider misconfigured: {0}")]
    Config(String),
    /// The service answered and said no; the text is its explanation (or a default one).
    #[error("gateway key refused: {0}")]
    Refused(String),
    #[error("remote auth provider timed out")]
    Timeout,
    #[error("remote auth provider unreachable: {0}")]
    Unreachable(String),
    #[error("remote auth provider answered HTTP {0}")]
    Status(u16),
    #[error("remote auth provider gave an answer that could not be read: {0}")]
    BadAnswer(String),
}

/// Who a key belongs to, as the remote service says.
#[derive(Clone, PartialEq)]
pub struct RemoteIdentity {
    pub project_id: String,
    pub user_id: String,
    pub mcp_config_id: Option<String>,
    /// `gateway_config.mcp_config` when the service sent it: server entries as in the configuration file (contract
    /// 2), each a JSON object; not yet checked against the server entry schema.
    pub servers: Option<Vec<Value>>,
}

impl From<SharedIdentity> for RemoteIdentity {
    fn from(shared: SharedIdentity) -> RemoteIdentity {
        let SharedIdentity { project_id, user_id, mcp_config_id, servers } = shared;
        RemoteIdentity { project_id, user_id, mcp_config_id, servers }
    }
}

impl From<&RemoteIdentity> for SharedIdentity {
    fn from(answer: &RemoteIdentity) -> SharedIdentity {
        SharedIdentity {
            project_id: answer.project_id.clone(),
            user_id: answer.user_id.clone(),
            mcp_config_id: answer.mcp_config_id.clone(),
            servers: answer.servers.clone(),
        }
    }
}

impl fmt::Debug for RemoteIdentity {
    // Server entries carry environment values and OAuth client secrets; only their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Option<Vec<&str>> = self.servers.as_ref().map(|servers| {
            servers.iter().map(|s| s.get("server_name").and_then(Value::as_str).unwrap_or("?")).collect()
        });
        f.debug_struct("RemoteIdentity")
            .field("project_id", &self.project_id)
            .field("user_id", &self.user_id)
            .field("mcp_config_id", &self.mcp_config_id)
            .field("servers", &names)
            .finish()
    }
}

/// A client of the remote auth service. Cloning shares the connection pool.
#[derive(Clone)]
pub struct RemoteAuth {
    api: Arc<JsonApi>,
    /// Kept only to cut it out of a refusal's text, should the service echo it.
    api_key: Arc<str>,
}

impl fmt::Debug for RemoteAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteAuth").field("base_url", &self.api.base_url()).finish_non_exhaustive()
    }
}

impl RemoteAuth {
    /// A client for the provider config `{base_url, api_key}`; every resolution gives up after `timeout`.
    pub fn new(config: &Map<String, Value>, timeout: Duration) -> Result<RemoteAuth, RemoteAuthError> {
        let base_url = required_string(config, "base_url").map_err(RemoteAuthError::Config)?;
        let api_key = required_string(config, "api_key").map_err(RemoteAuthError::Config)?;
        let api = JsonApi::new(base_url, HeaderName::from_static("apikey"), api_key, timeout)
            .map_err(RemoteAuthError::Config)?;
        Ok(RemoteAuth { api: Arc::new(api), api_key: Arc::from(api_key) })
    }

    /// Asks the service who `gateway_key` belongs to.
    pub async fn resolve(
        &self,
        gateway_key: &str,
        project_id: Option<&str>,
        user_id: Option<&str>,
    ) -> Result<RemoteIdentity, RemoteAuthError> {
        let present = |value: Option<&str>| value.filter(|v| !v.is_empty()).map(str::to_string);
        let body =
            json!({ "gateway_key": gateway_key, "project_id": present(project_id), "user_id": present(user_id) });
        let answer = match self.api.post(PATH, &[], &body).await {
            Ok(answer) => answer,
            Err(CallError::Status { status: status @ (401 | 403), detail }) => {
                return Err(refused(detail, &[gateway_key, &self.api_key], status));
            }
            Err(CallError::Status { status, .. }) => return Err(RemoteAuthError::Status(status)),
            Err(CallError::Timeout) => return Err(RemoteAuthError::Timeout),
            Err(CallError::Unreachable(reason)) => return Err(RemoteAuthError::Unreachable(reason)),
            Err(CallError::BadAnswer(reason)) => return Err(RemoteAuthError::BadAnswer(reason)),
        };
        match answer.get("authenticated") {
            Some(Value::Bool(true)) => read_identity(&answer),
            Some(Value::Bool(false)) => {
                Err(refused(explanation(&Value::Object(answer)), &[gateway_key, &self.api_key], 200))
            }
            _ => Err(bad("`authenticated` is missing or not a boolean")),
        }
    }
}

fn bad(reason: &str) -> RemoteAuthError {
    RemoteAuthError::BadAnswer(reason.to_string())
}

/// A refusal with the service's explanation. A service may echo a key it was sent ("key gw_… not found"); the text
/// goes into logs and answers, so the `secrets` are cut out of it.
fn refused(detail: Option<String>, secrets: &[&str], status: u16) -> RemoteAuthError {
    let text = match detail {
        Some(text) => {
            let text = secrets
                .iter()
                .filter(|secret| !secret.is_empty())
                .fold(text, |text, secret| text.replace(secret, "[redacted]"));
            // Cut after the secrets are out, so no fragment of one survives.
            truncate(&text, MAX_MESSAGE_CHARS)
        }
        None if status == 200 => "the gateway key was not accepted".to_string(),
        None => format!("the gateway key was not accepted (HTTP {status})"),
    };
    RemoteAuthError::Refused(text)
}

/// Reads an accepted answer.
fn read_identity(answer: &Map<String, Value>) -> Result<RemoteIdentity, RemoteAuthError> {
    let id = |field: &str| match answer.get(field) {
        Some(Value::String(id)) if !id.is_empty() => Ok(id.clone()),
        _ => Err(RemoteAuthError::BadAnswer(format!("accepted without a `{field}` string"))),
    };
    let mcp_config_id = match answer.get("mcp_config_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => Some(id.clone()),
        Some(_) => return Err(bad("`mcp_config_id` is not a string")),
    };
    let servers = match answer.get("gateway_config") {
        None | Some(Value::Null) => None,
        Some(Value::Object(gateway_config)) => match gateway_config.get("mcp_config") {
            None | Some(Value::Null) => None,
            Some(Value::Array(entries)) if entries.iter().all(Value::is_object) => Some(entries.clone()),
            Some(_) => return Err(bad("`gateway_config.mcp_config` is not a list of objects")),
        },
        Some(_) => return Err(bad("`gateway_config` is not an object")),
    };
    Ok(RemoteIdentity { project_id: id("project_id")?, user_id: id("user_id")?, mcp_config_id, servers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guardrails::remote::test_server::{MockServer, provider_config, refused_url};

    const PROVIDER_KEY: &str = "provider-secret-api-key";
    const GATEWAY_KEY: &str = "gw_client-secret-gateway-key";

    fn config(base_url: &str) -> Map<String, Value> {
        provider_config(base_url, PROVIDER_KEY)
    }

    fn client(base_url: &str) -> RemoteAuth {
        RemoteAuth::new(&config(base_url), Duration::from_secs(5)).unwrap()
    }

    /// The error's text and Debug form, which must name neither key.
    fn assert_no_keys(error: &RemoteAuthError) {
        for shown in [error.to_string(), format!("{error:?}")] {
            assert!(!shown.contains(PROVIDER_KEY) && !shown.contains(GATEWAY_KEY), "{shown}");
        }
    }

    #[tokio::test]
    async fn resolves_a_key_with_its_configuration() {
        let server = MockServer::json(json!({
            "authenticated": true, "project_id": "p-1", "user_id": "u-1", "mcp_config_id": "c-1",
            "gateway_config": { "mcp_config": [{ "server_name": "echo", "config": { "command": "echo" } }] }
        }))
        .await;
        let identity = client(&server.url).resolve(GATEWAY_KEY, Some("p-1"), None).await.unwrap();
        assert_eq!(identity.project_id, "p-1");
        assert_eq!(identity.user_id, "u-1");
        assert_eq!(identity.mcp_config_id.as_deref(), Some("c-1"));
        assert_eq!(identity.servers, Some(vec![json!({ "server_name": "echo", "config": { "command": "echo" } })]));

        let request = server.only_request();
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/mcp-gateway/get-gateway");
        assert_eq!(request.header("apikey"), PROVIDER_KEY);
        assert_eq!(request.header("content-type"), "application/json");
        assert_eq!(request.body, json!({ "gateway_key": GATEWAY_KEY, "project_id": "p-1", "user_id": null }));
    }

    #[tokio::test]
    async fn resolves_a_key_without_optional_fields_through_a_trailing_slash() {
        let server = MockServer::json(json!({ "authenticated": true, "project_id": "p", "user_id": "u" })).await;
        let identity = client(&server.url_with_slash()).resolve(GATEWAY_KEY, Some(""), Some("u")).await.unwrap();
        assert_eq!(
            identity,
            RemoteIdentity { project_id: "p".into(), user_id: "u".into(), mcp_config_id: None, servers: None }
        );
        let request = server.only_request();
        assert_eq!(request.path, "/mcp-gateway/get-gateway");
        assert_eq!(request.body, json!({ "gateway_key": GATEWAY_KEY, "project_id": null, "user_id": "u" }));
    }

    #[tokio::test]
    async fn authenticated_false_is_a_refusal_with_the_services_reason() {
        let server = MockServer::json(json!({ "authenticated": false, "detail": "key disabled" })).await;
        let error = client(&server.url).resolve(GATEWAY_KEY, None, None).await.unwrap_err();
        assert_eq!(error, RemoteAuthError::Refused("key disabled".to_string()));
        let server = MockServer::json(json!({ "authenticated": false })).await;
        let error = client(&server.url).resolve(GATEWAY_KEY, None, None).await.unwrap_err();
        assert!(matches!(error, RemoteAuthError::Refused(_)), "{error:?}");
    }

    #[tokio::test]
    async fn http_401_and_403_are_refusals_and_never_echo_a_key() {
        let echo = format!(r#"{{"message": "unknown key {GATEWAY_KEY} for {PROVIDER_KEY}"}}"#);
        let server = MockServer::answer(401, &echo).await;
        let error = client(&server.url).resolve(GATEWAY_KEY, None, None).await.unwrap_err();
        assert_eq!(error, RemoteAuthError::Refused("unknown key [redacted] for [redacted]".to_string()));
        let server = MockServer::answer(403, "forbidden").await;
        let error = client(&server.url).resolve(GATEWAY_KEY, None, None).await.unwrap_err();
        assert!(matches!(error, RemoteAuthError::Refused(ref text) if text.contains("403")), "{error:?}");
    }

    #[tokio::test]
    async fn a_long_reason_is_cut_after_the_key_is_removed() {
        let reason = format!("{}{GATEWAY_KEY}", "x".repeat(MAX_MESSAGE_CHARS - 5));
        let server = MockServer::json(json!({ "authenticated": false, "detail": reason })).await;
        let error = client(&server.url).resolve(GATEWAY_KEY, None, None).await.unwrap_err();
        assert!(!error.to_string().contains("gw_cl"), "{error}");
    }

    #[tokio::test]
    async fn other_statuses_and_transport_failures_are_errors_not_refusals() {
        let server = MockServer::answer(500, r#"{"detail": "boom"}"#).await;
        let error = client(&server.url).resolve(GATEWAY_KEY, None, None).await.unwrap_err();
        assert_eq!(error, RemoteAuthError::Status(500));

        let silent = MockServer::silent().await;
        let auth = RemoteAuth::new(&config(&silent.url), Duration::from_millis(200)).unwrap();
        assert_eq!(auth.resolve(GATEWAY_KEY, None, None).await, Err(RemoteAuthError::Timeout));

        let error = client(&refused_url().await).resolve(GATEWAY_KEY, None, None).await.unwrap_err();
        assert!(matches!(error, RemoteAuthError::Unreachable(_)), "{error:?}");
        assert_no_keys(&error);
    }

    #[tokio::test]
    async fn unreadable_or_incomplete_answers_are_bad_answers() {
        let cases = [
            Value::String("not json".into()),
            json!({ "project_id": "p", "user_id": "u" }),
            json!({ "authenticated": "yes", "project_id": "p", "user_id": "u" }),
            json!({ "authenticated": true, "user_id": "u" }),
            json!({ "authenticated": true, "project_id": "p", "user_id": 7 }),
            json!({ "authenticated": true, "project_id": "p", "user_id": "u", "mcp_config_id": 3 }),
            json!({ "authenticated": true, "project_id": "p", "user_id": "u", "gateway_config": [] }),
            json!({ "authenticated": true, "project_id": "p", "user_id": "u", "gateway_config": { "mcp_config": {} } }),
            json!({ "authenticated": true, "project_id": "p", "user_id": "u", "gateway_config": { "mcp_config": [1] } }),
        ];
        for case in cases {
            let body = case.as_str().map(str::to_string).unwrap_or_else(|| case.to_string());
            let server = MockServer::answer(200, &body).await;
            let error = client(&server.url).resolve(GATEWAY_KEY, None, None).await.unwrap_err();
            assert!(matches!(error, RemoteAuthError::BadAnswer(_)), "{body}: {error:?}");
            assert_no_keys(&error);
        }
    }

    #[test]
    fn config_problems_are_config_errors() {
        for case in [
            json!({}),
            json!({ "base_url": "http://auth" }),
            json!({ "base_url": "auth.example", "api_key": PROVIDER_KEY }),
            json!({ "base_url": "http://auth", "api_key": 12 }),
        ] {
            let error = RemoteAuth::new(case.as_object().unwrap(), Duration::from_secs(1)).unwrap_err();
            assert!(matches!(error, RemoteAuthError::Config(_)), "{case}: {error:?}");
            assert_no_keys(&error);
        }
    }

    #[test]
    fn debug_hides_keys_and_server_secrets() {
        let shown = format!("{:?}", client("https://auth.example"));
        assert!(shown.contains("auth.example") && !shown.contains(PROVIDER_KEY), "{shown}");
        let identity = RemoteIdentity {
            project_id: "p".into(),
            user_id: "u".into(),
            mcp_config_id: None,
            servers: Some(vec![json!({ "server_name": "echo", "config": { "env": { "TOKEN": "tok-secret" } } })]),
        };
        let shown = format!("{identity:?}");
        assert!(shown.contains("echo") && !shown.contains("tok-secret"), "{shown}");
    }
}
