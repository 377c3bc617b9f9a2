//! Upstream OAuth 2.0 client credentials from outside (spec 5.3): the gateway obtains a token from the issuer (a local
//! HTTP mock), hands it to the upstream process in its environment, caches it across calls, keeps the client secret
//! and the token out of its logs, and turns an issuer that refuses into an `UPSTREAM_ERROR` for that call; with mutual
//! TLS (RFC 8705) it presents its client certificate to a TLS token endpoint that requires one.

mod common;
#[path = "common/http_mock.rs"]
mod http_mock;
#[path = "common/mcp.rs"]
mod mcp;
#[path = "common/tls_issuer.rs"]
mod tls_issuer;

use common::API_KEY;
use http_mock::HttpMock;
use mcp::*;
use serde_json::{Value, json};
use tls_issuer::TlsIssuer;

const SECRET: &str = "client-secret-0123456789";
const TOKEN: &str = "access-token-abcdefghijklmnop";

fn gateway_with_oauth(token_url: &str) -> TestGateway {
    let mut server = mock_server("mock");
    server["oauth_config"] = json!({
        "enabled": true, "OAUTH_GRANT_TYPE": "client_credentials", "OAUTH_CLIENT_ID": "gateway-client",
        "OAUTH_CLIENT_SECRET": SECRET, "OAUTH_TOKEN_URL": token_url, "OAUTH_SCOPE": "tools.read"
    });
    TestGateway::start(&config_with(vec![server], json!({})))
}

fn env_calls(gw: &TestGateway, names: &[&str]) -> Vec<Value> {
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let list: Vec<(&str, Value)> = names.iter().map(|n| ("env", json!({"name": n}))).collect();
        let answer = call(&client, "gw_secure_call_tools", calls("mock", &list)).await;
        client.cancel().await.unwrap();
        answer["results"].as_array().cloned().unwrap_or_default()
    })
}

#[test]
fn the_token_reaches_the_upstream_environment_and_is_cached() {
    let issuer = HttpMock::start(vec![(
        "/token",
        200,
        json!({"access_token": TOKEN, "token_type": "Bearer", "expires_in": 3600}),
    )]);
    let gw = gateway_with_oauth(&format!("{}/token", issuer.base_url));
    let results = env_calls(&gw, &["OAUTH_ACCESS_TOKEN", "OAUTH_TOKEN_TYPE"]);
    assert_eq!(success_text(&results[0], "env"), TOKEN, "the upstream sees the token");
    assert_eq!(success_text(&results[1], "env"), "Bearer");
    let again = env_calls(&gw, &["OAUTH_ACCESS_TOKEN"]);
    assert_eq!(success_text(&again[0], "env"), TOKEN);

    let seen = issuer.seen();
    assert_eq!(seen.len(), 1, "one token request for all calls: {seen:?}");
    assert_eq!(seen[0].path, "/token");
    let content_type = seen[0].headers.get("content-type").cloned().unwrap_or_default();
    assert!(content_type.starts_with("application/x-www-form-urlencoded"), "{content_type}");
    assert!(seen[0].body.is_null(), "a form, not JSON");
    let form = &seen[0].raw;
    for field in ["grant_type=client_credentials", "client_id=gateway-client", "scope=tools.read"] {
        assert!(form.contains(field), "{field} in {form}");
    }
    let logs = gw.logs();
    assert!(!logs.contains(SECRET) && !logs.contains(TOKEN), "secret or token in the logs");
}

#[test]
fn an_issuer_that_refuses_is_an_upstream_error_for_the_call() {
    let issuer = HttpMock::start(vec![("/token", 401, json!({"error": "invalid_client"}))]);
    let gw = gateway_with_oauth(&format!("{}/token", issuer.base_url));
    let results = env_calls(&gw, &["OAUTH_ACCESS_TOKEN"]);
    let message = assert_error(&results[0], "UPSTREAM_ERROR");
    assert!(message.contains("invalid_client"), "{message}");
    assert!(!message.contains(SECRET), "{message}");
}

#[test]
fn an_invalid_oauth_config_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = mock_server("mock");
    server["oauth_config"] = json!({"enabled": true, "OAUTH_CLIENT_SECRET": SECRET});
    let path = dir.path().join("gw.json");
    std::fs::write(&path, config_with(vec![server], json!({})).to_string()).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mcpgw"))
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("oauth_config") && text.contains("OAUTH_CLIENT_ID"), "{text}");
    assert!(text.contains("OAUTH_TOKEN_URL"), "{text}");
    assert!(!text.contains(SECRET), "{text}");
}

#[test]
fn mutual_tls_presents_the_client_certificate_to_the_token_endpoint() {
    let issuer = TlsIssuer::start(TOKEN);
    let path = |name: &str| issuer.path(name).display().to_string();
    let mut server = mock_server("mock");
    // A public client (RFC 8705 2.2): the certificate is its only credential, no client secret.
    server["oauth_config"] = json!({
        "enabled": true, "OAUTH_GRANT_TYPE": "client_credentials", "OAUTH_CLIENT_ID": "gw-client",
        "OAUTH_TOKEN_URL": issuer.token_url, "OAUTH_USE_MTLS": true,
        "OAUTH_CLIENT_CERT_PATH": path("client.pem"), "OAUTH_CLIENT_KEY_PATH": path("client-key.pem"),
        "OAUTH_CA_BUNDLE_PATH": path("ca.pem")
    });
    let mut without_certificate = mock_server("plain");
    without_certificate["oauth_config"] = json!({
        "enabled": true, "OAUTH_CLIENT_ID": "gw-client", "OAUTH_CLIENT_SECRET": SECRET,
        "OAUTH_TOKEN_URL": issuer.token_url, "OAUTH_CA_BUNDLE_PATH": path("ca.pem")
    });
    let gw = TestGateway::start(&config_with(vec![server, without_certificate], json!({})));
    let results = env_calls(&gw, &["OAUTH_ACCESS_TOKEN"]);
    assert_eq!(success_text(&results[0], "env"), TOKEN, "the upstream sees the token issued over mutual TLS");
    let seen = issuer.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(seen[0].client_certificate);
    assert!(seen[0].form.contains("client_id=gw-client") && !seen[0].form.contains("client_secret"), "{:?}", seen[0]);

    // The same issuer refuses a client without certificate: the call is an UPSTREAM_ERROR, no token was issued.
    let answer = runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let answer = call(&client, "gw_secure_call_tools", calls("plain", &[("env", json!({"name": "X"}))])).await;
        client.cancel().await.unwrap();
        answer
    });
    let message = assert_error(&answer["results"][0], "UPSTREAM_ERROR");
    assert!(!message.contains(SECRET), "{message}");
    assert_eq!(issuer.seen().len(), 1, "no token for a client without certificate");
    assert!(*issuer.failed_handshakes.lock().unwrap() >= 1);
}

#[test]
fn clearing_all_caches_forces_a_new_token_from_the_issuer() {
    let issuer = HttpMock::start(vec![(
        "/token",
        200,
        json!({"access_token": TOKEN, "token_type": "Bearer", "expires_in": 3600}),
    )]);
    let gw = gateway_with_oauth(&format!("{}/token", issuer.base_url));
    assert_eq!(success_text(&env_calls(&gw, &["OAUTH_ACCESS_TOKEN"])[0], "env"), TOKEN);
    assert_eq!(issuer.seen().len(), 1);
    // The upstream rejected the token, say: the issuer hands out a new one, and clearing forces the gateway to ask.
    issuer.set("/token", 200, json!({"access_token": "second-token-0123456789", "token_type": "Bearer"}));
    let cleared = runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let cleared = call(&client, "gw_clear_cache", json!({"cache_type": "all"})).await;
        client.cancel().await.unwrap();
        cleared
    });
    assert_eq!(cleared["cleared"]["oauth_tokens"], json!(1), "{cleared}");
    assert_eq!(success_text(&env_calls(&gw, &["OAUTH_ACCESS_TOKEN"])[0], "env"), "second-token-0123456789");
    assert_eq!(issuer.seen().len(), 2, "a forced refresh asks the issuer again");
}
