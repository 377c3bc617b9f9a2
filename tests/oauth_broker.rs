//! Each user's own upstream tokens (contract 16, kinds `oauth` and `token_exchange`), from outside.
//!
//! Through the binary, with a local OAuth authorization server (`common/oauth_as.rs`: authorization code + PKCE,
//! refresh with rotation, revocation, `iss` in the answer, RFC 8414 metadata, RFC 8693 token exchange). The test's
//! HTTP client stands in for the browser: it follows `authorize_url` through the gateway's connect route, the
//! authorization server and the gateway's callback. The gateway's `public_url` is `http://mcpgw.test`, which the
//! "browser" maps to the gateway's address, as a proxy in front of it would.
//!
//! What is checked: a user without a token gets `CREDENTIALS_REQUIRED` and `authorize_url`; after following it the
//! next call reaches the upstream with that user's token and no other user's; a replayed or forged state is refused;
//! a token near its expiry is refreshed, and a refused refresh asks again; an admin's `DELETE` revokes at the
//! authorization server; an `iss` that is not the issuer's is refused; nothing secret is in the configuration file,
//! the listing, the audit log or the logs in clear; a client's OAuth token is exchanged and never reaches the
//! upstream.

mod common;
#[path = "common/http_mock.rs"]
mod http_mock;
#[path = "common/jwt_issuer.rs"]
mod jwt_issuer;
#[path = "common/mcp.rs"]
mod mcp;
#[path = "common/oauth_as.rs"]
mod oauth_as;

use common::{ALICE, ALICE_ID, API_KEY, CONFIG_ID, PROJECT_NAME};
use mcp::{KEY_B, TestGateway, call, calls, config_with, connect, mock_bin, runtime};
use oauth_as::{AsOptions, AuthServer};
use reqwest::Method;
use serde_json::{Value, json};

const PUBLIC: &str = "http://mcpgw.test";
const SECRETS_KEY: &str = "broker-test-secrets-key-0123456789abcdefghij";

/// A `per_user` server of kind `oauth` running the mock upstream, its `MOCK_TOKEN` the user's access token.
fn oauth_server(name: &str, server: &AuthServer) -> Value {
    json!({
        "server_name": name,
        "config": {"command": mock_bin(), "env": {"MOCK_TOKEN": "${user.ACCESS_TOKEN}"}},
        "credentials": {"mode": "per_user", "kind": "oauth", "authorization_url": server.authorize_url(),
                        "token_url": server.token_url(), "client_id": "gw-client", "client_secret": "gw-secret",
                        "scopes": ["repo", "read:user"]}
    })
}

fn start(servers: Vec<Value>, audit: &std::path::Path) -> TestGateway {
    let common = json!({"tool_exposure": "gateway", "public_url": PUBLIC, "secrets_key": SECRETS_KEY,
                        "audit_log": {"enabled": true, "path": audit.to_str().unwrap()}});
    TestGateway::start(&config_with(servers, common))
}

/// The first result of calling the mock's `env` tool (`MOCK_TOKEN`) on `server` with `key`.
fn token_call(gw: &TestGateway, key: &str, server: &str) -> Value {
    runtime().block_on(async {
        let client = connect(&gw.mcp, key).await;
        let answer =
            call(&client, "gw_secure_call_tools", calls(server, &[("env", json!({"name": "MOCK_TOKEN"}))])).await;
        client.cancel().await.unwrap();
        answer["results"][0].clone()
    })
}

/// The token the upstream saw, asserting the call succeeded.
fn seen_token(result: &Value) -> String {
    assert_eq!(result["status"], json!("success"), "{result}");
    mcp::upstream_text(&result["response"])
}

/// The `authorize_url` of a `CREDENTIALS_REQUIRED` result.
fn authorize_url(result: &Value) -> String {
    mcp::assert_error(result, "CREDENTIALS_REQUIRED");
    let url = result["authorize_url"].as_str().unwrap_or_else(|| panic!("no authorize_url: {result}"));
    assert!(url.starts_with(&format!("{PUBLIC}/oauth/connect/")), "{url}");
    url.to_string()
}

/// The test's browser (`oauth_as::browse`) in front of `gw`.
fn browse(gw: &TestGateway, url: &str) -> (u16, String, Vec<String>) {
    oauth_as::browse(url, PUBLIC, &format!("http://{}", gw.authority()))
}

/// Connects `key`'s user to `server` through the browser; returns the callback URL used.
fn connect_user(gw: &TestGateway, key: &str, server: &str) -> String {
    let url = authorize_url(&token_call(gw, key, server));
    let (status, body, visited) = browse(gw, &url);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("connected"), "{body}");
    visited.last().unwrap().clone()
}

fn admin(gw: &TestGateway, method: Method, path: &str) -> Value {
    gw.gw.call(method, path, None).ok(200).clone()
}

/// Asserts that none of `secrets` appears in `text` (named `what`).
fn assert_free_of(text: &str, secrets: &[String], what: &str) {
    for secret in secrets {
        assert!(!text.contains(secret.as_str()), "{what} holds a token in clear");
    }
}

#[test]
fn a_user_connects_through_authorize_url_and_calls_with_their_own_token() {
    let server = AuthServer::start(AsOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let gw = start(vec![oauth_server("gh", &server)], &audit);

    let callback = connect_user(&gw, API_KEY, "gh");
    // The authorization request: code flow with PKCE (S256), the scopes, the callback as the redirect URI.
    let authorize = &server.seen_on("/authorize")[0].query;
    assert_eq!(authorize["response_type"], "code");
    assert_eq!(authorize["code_challenge_method"], "S256");
    assert_eq!(authorize["scope"], "repo read:user");
    assert_eq!(authorize["redirect_uri"], format!("{PUBLIC}/oauth/callback"));
    let redeemed = &server.seen_on("/token")[0].form;
    assert_eq!(redeemed["grant_type"], "authorization_code");
    assert!(redeemed.contains_key("code_verifier"), "{redeemed:?}");

    // Alice's call carries Alice's token; Bob has none and is asked to connect his own.
    let alice_token = server.issued()[0].clone();
    assert_eq!(seen_token(&token_call(&gw, API_KEY, "gh")), alice_token);
    let bob = token_call(&gw, KEY_B, "gh");
    authorize_url(&bob);

    // The callback again (a replayed state), and a state the gateway never sealed, are refused.
    let (status, body, _) = browse(&gw, &callback);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("used already"), "{body}");
    let (status, _, _) = browse(&gw, &format!("{PUBLIC}/oauth/connect/not-a-state"));
    assert_eq!(status, 400);
    assert_eq!(server.seen_on("/token").len(), 1, "a refused callback redeemed a code");

    // Nothing secret in clear: the configuration file, the listing, the audit log, the logs.
    let mut secrets = server.issued();
    secrets.extend(server.issued_refresh());
    secrets.push(redeemed["code_verifier"].clone());
    let file = std::fs::read_to_string(gw.config_path()).unwrap();
    assert_free_of(&file, &secrets, "the configuration file");
    assert!(file.contains("enc:v1:"), "the tokens are not stored sealed");
    let listed = admin(&gw, Method::GET, &format!("/api/v1/users/{ALICE_ID}/credentials"));
    let gh = listed.as_array().unwrap().iter().find(|s| s["server_name"] == json!("gh")).unwrap();
    assert_eq!((&gh["kind"], &gh["connected"]), (&json!("oauth"), &json!(true)), "{listed}");
    assert!(gh["expires_at"].is_string(), "{listed}");
    assert_free_of(&listed.to_string(), &secrets, "the listing");
    let config = admin(&gw, Method::GET, &format!("/api/v1/configs/{CONFIG_ID}"));
    assert!(!config.to_string().contains("gw-secret"), "the client secret is listed in clear");

    // An admin's DELETE revokes the refresh token at the authorization server; the next call asks again.
    let deleted = admin(&gw, Method::DELETE, &format!("/api/v1/users/{ALICE_ID}/credentials/{CONFIG_ID}/gh"));
    assert_eq!(deleted["revoked"], json!(true), "{deleted}");
    assert_eq!(server.revoked(), [server.issued_refresh()[0].clone()]);
    authorize_url(&token_call(&gw, API_KEY, "gh"));

    let metrics = gw.gw.metrics_get("/metrics").text;
    for counted in [
        "mcpgw_user_credential_events_total{event=\"connected\",kind=\"oauth\"} 1",
        "mcpgw_user_credential_events_total{event=\"connect_refused\",kind=\"oauth\"} 1",
    ] {
        assert!(metrics.contains(counted), "{counted} not in\n{metrics}");
    }

    let records = std::fs::read_to_string(&audit).unwrap();
    assert!(records.contains("\"credentials_connected\""), "{records}");
    assert!(records.contains("\"credential\":\"oauth\""), "{records}");
    assert_free_of(&records, &secrets, "the audit log");
    assert_free_of(&gw.logs(), &secrets, "the gateway's logs");
}

#[test]
fn a_token_near_its_expiry_is_refreshed_and_a_refused_refresh_asks_again() {
    // Tokens that live 4 seconds: refreshed 5 minutes before their expiry, or at half their life when that is
    // shorter (else each use of a short-lived token would refresh it), so 2 seconds after they were issued.
    let server = AuthServer::start(AsOptions { expires_in: 4, ..AsOptions::default() });
    let dir = tempfile::tempdir().unwrap();
    let gw = start(vec![oauth_server("gh", &server)], &dir.path().join("audit.jsonl"));
    connect_user(&gw, API_KEY, "gh");
    assert_eq!(seen_token(&token_call(&gw, API_KEY, "gh")), server.issued()[0], "refreshed before half its life");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let seen = seen_token(&token_call(&gw, API_KEY, "gh"));
    let issued = server.issued();
    assert!(issued.len() >= 2, "no refresh: {issued:?}");
    assert_eq!(&seen, issued.last().unwrap(), "the upstream got the old token");
    let refresh = server.seen_on("/token").last().unwrap().form.clone();
    assert_eq!(refresh["grant_type"], "refresh_token");

    server.refuse_refresh(true);
    std::thread::sleep(std::time::Duration::from_millis(2100));
    authorize_url(&token_call(&gw, API_KEY, "gh"));
    let file = common::read_json(gw.config_path());
    assert!(file["user_credentials"].as_object().is_none_or(|users| users.is_empty()), "the refused tokens stayed");
}

#[test]
fn an_answer_from_another_issuer_is_refused_and_nothing_is_stored() {
    let server = AuthServer::start(AsOptions { wrong_iss: true, ..AsOptions::default() });
    let dir = tempfile::tempdir().unwrap();
    let gw = start(vec![oauth_server("gh", &server)], &dir.path().join("audit.jsonl"));
    let url = authorize_url(&token_call(&gw, API_KEY, "gh"));
    let (status, body, _) = browse(&gw, &url);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("RFC 9207"), "{body}");
    assert!(server.seen_on("/token").is_empty(), "the code was redeemed");
    authorize_url(&token_call(&gw, API_KEY, "gh"));
}

#[test]
fn a_clients_oauth_token_is_exchanged_and_never_reaches_the_upstream() {
    let issuer = jwt_issuer::JwtIssuer::start();
    let server = AuthServer::start(AsOptions::default());
    let exchange = json!({
        "server_name": "api",
        "config": {"command": mock_bin(), "env": {"MOCK_TOKEN": "${user.ACCESS_TOKEN}"}},
        "credentials": {"mode": "per_user", "kind": "token_exchange", "token_url": server.token_url(),
                        "client_id": "gw-client", "client_secret": "gw-secret", "audience": "github-api"}
    });
    let mut config = config_with(vec![exchange], json!({"tool_exposure": "gateway"}));
    config["plugins"]["auth"] = json!({"provider": "oauth", "config": {
        "issuer": issuer.issuer, "audience": jwt_issuer::AUDIENCE, "required_scopes": ["mcp"], "accept_api_keys": true}});
    let gw = TestGateway::start(&config);
    let client_token = issuer.sign(&issuer.claims(ALICE, PROJECT_NAME));

    let first = seen_token(&token_call(&gw, &client_token, "api"));
    let second = seen_token(&token_call(&gw, &client_token, "api"));
    assert!(first.starts_with("xchg-") && first.contains("github-api"), "{first}");
    assert_eq!(first, second, "the exchanged token is cached until near its expiry");
    assert_ne!(first, client_token);
    let exchanges = server.seen_on("/token");
    assert_eq!(exchanges.len(), 1, "{exchanges:?}");
    let form = &exchanges[0].form;
    assert_eq!(form["grant_type"], oauth_as::TOKEN_EXCHANGE_GRANT);
    assert_eq!(form["subject_token"], client_token);
    assert_eq!(form["subject_token_type"], oauth_as::ACCESS_TOKEN_TYPE);
    assert_eq!(form["audience"], "github-api");

    // A caller authenticated by an API key has no token to exchange.
    let by_key = token_call(&gw, API_KEY, "api");
    let message = mcp::assert_error(&by_key, "CREDENTIALS_REQUIRED");
    assert!(message.contains("API key"), "{message}");
    assert_free_of(&gw.logs(), &[client_token, first], "the gateway's logs");
}

#[test]
fn kind_oauth_needs_public_url_and_a_secrets_key() {
    let server = AuthServer::start(AsOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    common::write_json(&path, &config_with(vec![oauth_server("gh", &server)], json!({})));
    let (status, _, err) = common::run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success(), "check-config accepted it");
    assert!(err.contains("needs common_mcp_gateway_config.public_url"), "{err}");
}

/// A client that declared URL elicitation, recording what it is asked and accepting.
#[derive(Clone, Default)]
struct UrlClient(std::sync::Arc<std::sync::Mutex<Vec<Value>>>);

impl rmcp::ClientHandler for UrlClient {
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.0.lock().unwrap().push(serde_json::to_value(request).unwrap());
        Ok(serde_json::from_value(json!({"action": "accept"})).unwrap())
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = serde_json::from_value(json!({"elicitation": {"form": {}, "url": {}}})).unwrap();
        rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::new("url-test", "1.0.0"))
    }
}

#[test]
fn in_transparent_mode_a_client_that_declared_url_elicitation_is_offered_the_connect_url() {
    use rmcp::ServiceExt;
    let server = AuthServer::start(AsOptions::default());
    let common = json!({"tool_exposure": "transparent", "public_url": PUBLIC, "secrets_key": SECRETS_KEY});
    let gw = TestGateway::start(&config_with(vec![oauth_server("gh", &server)], common));
    let recorder = UrlClient::default();
    let result = runtime().block_on(async {
        let client = recorder.clone().serve(mcp::http_transport(&gw.mcp, API_KEY, &[])).await.expect("connect");
        let args = json!({"name": "MOCK_TOKEN"}).as_object().unwrap().clone();
        let params = rmcp::model::CallToolRequestParams::new("gh__env").with_arguments(args);
        let result = client.call_tool(params).await.expect("tools/call");
        client.cancel().await.unwrap();
        serde_json::to_value(result).unwrap()
    });
    let answer = mcp::answer_of(&result);
    let url = authorize_url(&answer);
    let asked = recorder.0.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!((&asked[0]["mode"], &asked[0]["url"]), (&json!("url"), &json!(url)), "{asked:?}");
    assert!(asked[0]["elicitationId"].is_string(), "{asked:?}");
}

#[test]
fn the_command_line_lists_a_connection_and_revokes_it() {
    let server = AuthServer::start(AsOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let gw = start(vec![oauth_server("gh", &server)], &dir.path().join("audit.jsonl"));
    connect_user(&gw, API_KEY, "gh");
    let path = gw.config_path().to_str().unwrap().to_string();
    let (status, out, err) = common::run_cli(&["user", "credentials", ALICE, "--config", &path], &[]);
    assert!(status.success(), "{err}");
    let row = out.lines().find(|line| line.contains("gh")).unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains("oauth") && row.contains("connected") && !row.contains("not connected"), "{out}");
    assert_free_of(&out, &server.issued(), "the command's table");
    let (status, out, err) =
        common::run_cli(&["user", "delete-credential", ALICE, "default_config", "gh", "--config", &path], &[]);
    assert!(status.success(), "{err}");
    assert!(out.contains("revoked") && out.contains("true"), "{out}");
    assert_eq!(server.revoked(), server.issued_refresh());
    let (_, out, _) = common::run_cli(&["user", "credentials", ALICE, "--config", &path], &[]);
    assert!(out.contains("not connected"), "{out}");
}
