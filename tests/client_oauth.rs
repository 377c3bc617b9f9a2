//! Provider `oauth` from outside (contract section 10): the gateway as an OAuth resource server. A local authorization
//! server (`common/jwt_issuer.rs`: OpenID configuration and JWKS over HTTP, tokens signed in the test) stands in for
//! Keycloak or Entra. A valid token runs as its user and project; every failure gets 401 (or 403 for a missing scope)
//! with the challenge and the `AUTH_FAILED` object saying which check failed, never echoing the token; the protected
//! resource metadata is public (for an allowed `Host`; forwarded headers count only when trusted); a rotated key is
//! fetched once, and unknown key ids do not make the gateway hammer the issuer; an issuer whose keys cannot be fetched
//! degrades health and fails closed; the token never reaches upstreams.

mod common;
#[path = "common/http_mock.rs"]
mod http_mock;
#[path = "common/jwt_issuer.rs"]
mod jwt_issuer;
#[path = "common/mcp.rs"]
mod mcp;

use common::{ALICE, ALICE_ID, API_KEY, BOB, PROJECT_ID, PROJECT_NAME};
use jwt_issuer::{AUDIENCE, JwtIssuer, now};
use mcp::*;
use serde_json::{Value, json};

fn oauth_gateway(issuer: &JwtIssuer, servers: Vec<Value>, extra: Value) -> TestGateway {
    let mut config = config_with(servers, json!({}));
    let mut auth = json!({"issuer": issuer.issuer, "audience": AUDIENCE, "required_scopes": ["mcp"]});
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            auth[k] = v;
        }
    }
    config["plugins"]["auth"] = json!({"provider": "oauth", "config": auth});
    TestGateway::start(&config)
}

fn initialize(gw: &TestGateway, bearer: Option<&str>) -> Rpc {
    post(&http(), &gw.mcp, bearer, &[], &initialize_body(1, "2025-11-25"))
}

/// The gateway's origin (`http://127.0.0.1:PORT`).
fn origin(gw: &TestGateway) -> String {
    gw.mcp.trim_end_matches('/').trim_end_matches("/mcp").to_string()
}

/// A token from the issuer is a user of a project: the client lists and calls as that user, the log names the user
/// and project (not the token), and an upstream, local or remote, never sees the token.
#[test]
fn a_token_from_the_issuer_runs_as_its_user_and_project() {
    let issuer = JwtIssuer::start();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut remote = start_conformance_http(port, &[]);
    let servers = vec![
        mock_server("mock"),
        json!({"server_name": "remote", "config": {"url": format!("http://127.0.0.1:{port}/mcp")}}),
    ];
    let gw = oauth_gateway(&issuer, servers, json!({}));
    // The user by e-mail and the project by name, or both by id.
    let by_name = issuer.sign(&issuer.claims(ALICE, PROJECT_NAME));
    let by_id = issuer.sign(&issuer.claims(ALICE_ID, PROJECT_ID));
    runtime().block_on(async {
        for token in [&by_name, &by_id] {
            let client = connect(&gw.mcp, token).await;
            let servers = call(&client, "gw_list_all_servers", json!({})).await;
            assert_eq!(servers["status"], json!("success"), "{servers}");
            let answer = call(&client, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": "hi"}))])).await;
            assert!(success_text(&answer["results"][0], "echo").contains("hi"), "{answer}");
            let answer =
                call(&client, "gw_secure_call_tools", calls("remote", &[("test_request_headers", json!({}))])).await;
            let headers = success_text(&answer["results"][0], "test_request_headers");
            assert!(
                !headers.contains(token.as_str()) && !headers.to_lowercase().contains("authorization"),
                "{headers}"
            );
            client.cancel().await.unwrap();
        }
    });
    let logs = gw.logs();
    assert!(logs.contains(ALICE_ID) && logs.contains(PROJECT_ID), "the log names the user and project:\n{logs}");
    assert!(!logs.contains(&by_name) && !logs.contains(&by_id), "a token in the logs");
    let _ = remote.kill();
    let _ = remote.wait();
}

/// Every failed check is 401 with `WWW-Authenticate: Bearer resource_metadata="…", error="invalid_token"` (403 and
/// `insufficient_scope` for a missing scope), and `details` that say which check failed without the token.
#[test]
fn every_failed_check_gets_the_contracts_answer() {
    let issuer = JwtIssuer::start();
    let gw = oauth_gateway(&issuer, vec![mock_server("mock")], json!({}));
    let metadata = format!("{}/.well-known/oauth-protected-resource/mcp", origin(&gw));

    let bare = initialize(&gw, None);
    assert_eq!(bare.status, 401);
    assert_eq!(bare.header("www-authenticate"), Some(format!("Bearer resource_metadata=\"{metadata}\"")));

    let claims = || issuer.claims(ALICE, PROJECT_NAME);
    let with = |change: &dyn Fn(&mut Value)| {
        let mut c = claims();
        change(&mut c);
        issuer.sign(&c)
    };
    let valid = issuer.sign(&claims());
    let mut forged: Vec<String> = valid.split('.').map(str::to_string).collect();
    let mut payload = claims();
    payload["email"] = json!(BOB);
    forged[1] = base64_url(&payload.to_string());
    let other_key = issuer.sign_es256(&jwt_issuer::new_ec_key(), jwt_issuer::RSA_KID, &claims());
    let cases: Vec<(&str, String, &str)> = vec![
        ("expired", with(&|c| c["exp"] = json!(now() - 120)), "expired"),
        ("not yet valid", with(&|c| c["nbf"] = json!(now() + 600)), "not valid for another"),
        ("no expiry", with(&|c| drop(c.as_object_mut().unwrap().remove("exp"))), "no expiry"),
        ("wrong issuer", with(&|c| c["iss"] = json!("https://idp.evil.example")), "issuer"),
        ("wrong audience", with(&|c| c["aud"] = json!(["other-api"])), "audience"),
        ("payload changed after signing", forged.join("."), "signature does not verify"),
        ("a key the issuer does not have", other_key, "not among the issuer's keys"),
        ("unknown user", with(&|c| c["email"] = json!("mallory@example.com")), "names no user"),
        ("unknown project", with(&|c| c["mcpgw_project"] = json!("nope")), "names no project"),
        ("not a member", with(&|c| c["mcpgw_project"] = json!("beta")), "not a member"),
        ("no user claim", with(&|c| drop(c.as_object_mut().unwrap().remove("email"))), "claim naming its user"),
    ];
    for (name, token, why) in &cases {
        let refused = initialize(&gw, Some(token));
        assert_eq!(refused.status, 401, "{name}: {}", refused.text);
        let challenge = refused.header("www-authenticate").unwrap_or_default();
        assert_eq!(challenge, format!("Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\""), "{name}");
        let data = &refused.message["error"]["data"];
        assert_eq!(data["error_code"], json!("AUTH_FAILED"), "{name}: {}", refused.text);
        let details = data["details"].as_str().unwrap_or_default();
        assert!(details.contains(why), "{name}: details {details:?} should say {why:?}");
        assert!(!refused.text.contains(token.as_str()), "{name}: the answer echoes the token");
    }

    let no_scope = issuer.sign(&{
        let mut c = claims();
        c["scope"] = json!("openid profile");
        c
    });
    let refused = initialize(&gw, Some(&no_scope));
    assert_eq!(refused.status, 403, "{}", refused.text);
    let challenge = refused.header("www-authenticate").unwrap_or_default();
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata}\", error=\"insufficient_scope\", scope=\"mcp\"")
    );
    assert_eq!(refused.message["error"]["data"]["error_code"], json!("AUTH_FAILED"));
    assert!(refused.message["error"]["data"]["details"].as_str().unwrap_or_default().contains("scope mcp"));
    // Entra puts scopes in `scp`.
    let entra = issuer.sign(&{
        let mut c = claims();
        c.as_object_mut().unwrap().remove("scope");
        c["scp"] = json!("mcp");
        c
    });
    assert_eq!(initialize(&gw, Some(&entra)).status, 200);

    // API keys are still accepted (accept_api_keys defaults to true); a wrong one gets the challenge too.
    assert_eq!(initialize(&gw, Some(API_KEY)).status, 200);
    let wrong = initialize(&gw, Some("not-a-key"));
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("www-authenticate").unwrap_or_default().ends_with("error=\"invalid_token\""));
    assert_eq!(initialize(&gw, Some(&valid)).status, 200);
}

fn base64_url(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

/// With `accept_api_keys: false` only tokens are accepted; `public_url` names the metadata in challenges.
#[test]
fn api_keys_can_be_refused_and_the_public_url_is_used() {
    let issuer = JwtIssuer::start();
    let extra = json!({"accept_api_keys": false, "public_url": "https://mcp.example.com"});
    let gw = oauth_gateway(&issuer, vec![mock_server("mock")], extra);
    let refused = initialize(&gw, Some(API_KEY));
    assert_eq!(refused.status, 401);
    let details = refused.message["error"]["data"]["details"].as_str().unwrap_or_default().to_string();
    assert!(details.contains("not a JWT"), "{details}");
    let challenge = refused.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.starts_with(
            "Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/mcp\""
        ),
        "{challenge}"
    );
    let token = issuer.sign(&issuer.claims(ALICE, PROJECT_NAME));
    assert_eq!(initialize(&gw, Some(&token)).status, 200);
    let document = http().get(format!("{}/.well-known/oauth-protected-resource", origin(&gw))).send().unwrap();
    let document: Value = document.json().unwrap();
    assert_eq!(document["resource"], json!("https://mcp.example.com/mcp"));
}

/// The RFC 9728 documents are public, on both paths, and name the issuer and the scopes; under another provider
/// there are none.
#[test]
fn the_protected_resource_metadata_is_public() {
    let issuer = JwtIssuer::start();
    let gw = oauth_gateway(&issuer, vec![], json!({}));
    for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"] {
        let answer = http().get(format!("{}{path}", origin(&gw))).send().unwrap();
        assert_eq!(answer.status(), 200, "{path}");
        assert!(answer.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
        let document: Value = answer.json().unwrap();
        assert_eq!(
            document,
            json!({"resource": format!("{}/mcp", origin(&gw)), "authorization_servers": [issuer.issuer],
                   "bearer_methods_supported": ["header"], "scopes_supported": ["mcp"]}),
            "{path}"
        );
    }
    let plain = TestGateway::start(&config_with(vec![], json!({})));
    let answer = http().get(format!("{}/.well-known/oauth-protected-resource", origin(&plain))).send().unwrap();
    assert_eq!(answer.status(), 404);
}

/// Contract 14: the metadata answers only a `Host` in `gw_allowed_hosts` (403 otherwise, as `/mcp/` does), and the URL
/// it names comes from `X-Forwarded-Host`/`X-Forwarded-Proto` only with `trust_forwarded_headers`; without it, a
/// client that sends them changes neither the document nor the challenge.
#[test]
fn the_metadata_answers_allowed_hosts_only_and_trusts_forwarded_headers_only_when_told() {
    let issuer = JwtIssuer::start();
    let gw = oauth_gateway(&issuer, vec![], json!({}));
    let paths = ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"];
    let get = |gw: &TestGateway, path: &str, headers: &[(&str, &str)]| {
        let mut req = http().get(format!("{}{path}", origin(gw)));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let answer = req.send().unwrap();
        let status = answer.status().as_u16();
        (status, answer.json::<Value>().unwrap_or(Value::Null))
    };
    for path in paths {
        let (status, body) = get(&gw, path, &[("host", "evil.example")]);
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(body["error"]["data"]["error_code"], json!("HOST_NOT_ALLOWED"), "{path}: {body}");
        let spoofed = [("x-forwarded-host", "evil.example"), ("x-forwarded-proto", "https")];
        let (status, body) = get(&gw, path, &spoofed);
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["resource"], json!(format!("{}/mcp", origin(&gw))), "{path}");
    }
    let challenge =
        post(&http(), &gw.mcp, None, &[("x-forwarded-host", "evil.example")], &initialize_body(1, "2025-11-25"));
    assert_eq!(challenge.status, 401, "{}", challenge.text);
    let metadata = format!("{}/.well-known/oauth-protected-resource/mcp", origin(&gw));
    assert_eq!(challenge.header("www-authenticate"), Some(format!("Bearer resource_metadata=\"{metadata}\"")));

    // Behind a proxy that sets them, and with every Host allowed, the forwarded headers name the gateway.
    let mut config = config_with(vec![], json!({"gw_allowed_hosts": ["*"]}));
    config["plugins"]["auth"] = json!({"provider": "oauth", "config": {"issuer": issuer.issuer, "audience": AUDIENCE,
        "trust_forwarded_headers": true}});
    let proxied = TestGateway::start(&config);
    let (status, body) = get(&proxied, paths[0], &[("host", "any.example")]);
    assert_eq!((status, &body["resource"]), (200, &json!("http://any.example/mcp")), "{body}");
    let forwarded = [("x-forwarded-host", "mcp.example.com, 10.0.0.1"), ("x-forwarded-proto", "https")];
    let (status, body) = get(&proxied, paths[1], &forwarded);
    assert_eq!((status, &body["resource"]), (200, &json!("https://mcp.example.com/mcp")), "{body}");
}

/// The issuer rotates its keys: a token of the new key is accepted after one fetch; tokens naming unknown keys are
/// refused without another fetch within 30 seconds.
#[test]
fn a_rotated_key_is_fetched_once_and_unknown_keys_do_not_hammer_the_issuer() {
    let issuer = JwtIssuer::start();
    let gw = oauth_gateway(&issuer, vec![], json!({}));
    let claims = issuer.claims(ALICE, PROJECT_NAME);
    assert_eq!(initialize(&gw, Some(&issuer.sign(&claims))).status, 200);
    let before = issuer.jwks_fetches();
    assert!(before >= 1, "the keys were fetched");
    let rotated = issuer.rotate("ec-2", &claims);
    assert_eq!(initialize(&gw, Some(&rotated)).status, 200, "a token of the rotated key");
    assert_eq!(issuer.jwks_fetches(), before + 1, "one fetch for the new key");
    for kid in ["made-up-1", "made-up-2", "made-up-3"] {
        let unknown = issuer.sign_es256(&jwt_issuer::new_ec_key(), kid, &claims);
        let refused = initialize(&gw, Some(&unknown));
        assert_eq!(refused.status, 401);
        assert!(refused.text.contains("not among the issuer's keys"), "{}", refused.text);
    }
    assert_eq!(issuer.jwks_fetches(), before + 1, "no fetch within 30 s of the last one");
    assert_eq!(initialize(&gw, Some(&rotated)).status, 200, "the new key still serves");
}

/// An issuer whose keys cannot be fetched: the health report says `degraded` and why, and tokens are refused (fail
/// closed) while API keys still work.
#[test]
fn keys_that_cannot_be_fetched_degrade_health_and_fail_closed() {
    let issuer = JwtIssuer::start();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let gw = oauth_gateway(&issuer, vec![], json!({"jwks_uri": format!("http://127.0.0.1:{closed}/jwks")}));
    let degraded = common::wait_until(std::time::Duration::from_secs(10), || {
        let health = admin(&gw, reqwest::Method::GET, "/api/v1/system/health", None);
        health.body["data"]["status"] == json!("degraded")
    });
    let health = admin(&gw, reqwest::Method::GET, "/api/v1/system/health", None);
    assert!(degraded, "{:?}", health.body);
    let reasons = health.body["data"]["degraded_reasons"].to_string();
    assert!(reasons.contains("OAuth issuer's keys could not be fetched"), "{reasons}");
    let token = issuer.sign(&issuer.claims(ALICE, PROJECT_NAME));
    let refused = initialize(&gw, Some(&token));
    assert_eq!(refused.status, 401);
    assert!(refused.text.contains("could not be fetched"), "{}", refused.text);
    assert_eq!(initialize(&gw, Some(API_KEY)).status, 200);
}

/// A wrong `oauth` config is refused at load, each problem named with its field; the running gateway keeps its last
/// valid configuration.
#[test]
fn a_wrong_oauth_config_is_refused_with_every_problem_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.json");
    let mut config = config_with(vec![], json!({}));
    config["plugins"]["auth"] = json!({"provider": "oauth",
        "config": {"jwks_uri": "ftp://keys", "required_scopes": "mcp", "accept_api_keys": "yes"}});
    std::fs::write(&path, config.to_string()).unwrap();
    let (status, _, err) = common::run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success() && !err.contains("panicked"), "{err}");
    for field in ["issuer", "audience", "jwks_uri", "required_scopes", "accept_api_keys"] {
        assert!(err.contains(&format!("plugins.auth.config.{field}:")), "{field} not named:\n{err}");
    }
}

/// A session opened with one user's token cannot be used with another user's, and a client whose token is refreshed
/// keeps its session (sessions belong to the issuer, user and project).
#[test]
fn sessions_belong_to_the_tokens_user_and_project() {
    let issuer = JwtIssuer::start();
    let gw = oauth_gateway(&issuer, vec![mock_server("mock")], json!({}));
    let alice = issuer.sign(&issuer.claims(ALICE, PROJECT_NAME));
    let client = http();
    let session = open_session(&client, &gw.mcp, &alice, "2025-11-25");
    let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-11-25")];
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}});
    let bob = issuer.sign(&issuer.claims(BOB, PROJECT_NAME));
    let taken = post(&client, &gw.mcp, Some(&bob), &headers, &list);
    assert!(taken.status == 404 || taken.status == 403, "another user's token on the session: {}", taken.text);
    let mut refreshed = issuer.claims(ALICE, PROJECT_NAME);
    refreshed["iat"] = json!(now() + 1);
    refreshed["exp"] = json!(now() + 900);
    let refreshed = issuer.sign(&refreshed);
    assert_ne!(refreshed, alice);
    let listed = post(&client, &gw.mcp, Some(&refreshed), &headers, &list);
    assert_eq!(listed.status, 200, "the same user with a refreshed token: {}", listed.text);
}

/// The provider follows config reloads like every other setting: a gateway started with API keys takes tokens
/// once the file says `oauth`.
#[test]
fn switching_to_oauth_takes_effect_on_reload() {
    let issuer = JwtIssuer::start();
    let gw = TestGateway::start(&config_with(vec![], json!({})));
    let token = issuer.sign(&issuer.claims(ALICE, PROJECT_NAME));
    assert_eq!(initialize(&gw, Some(&token)).status, 401);
    let mut config = config_with(vec![], json!({}));
    config["plugins"]["auth"] = json!({"provider": "oauth", "config": {"issuer": issuer.issuer, "audience": AUDIENCE}});
    std::fs::write(gw.config_path(), serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    let switched = common::wait_until(common::RELOAD_DEADLINE * 4, || initialize(&gw, Some(&token)).status == 200);
    assert!(switched, "the token is accepted after the reload");
    assert_eq!(initialize(&gw, Some(API_KEY)).status, 200, "API keys still work");
}

/// Over stdio the credential is `GW_GATEWAY_KEY` as before: a token of the issuer is verified the same way, a gateway
/// key still works, and a token of another audience is refused.
#[test]
fn over_stdio_the_key_variable_takes_a_token_or_a_key() {
    let issuer = JwtIssuer::start();
    let gw = oauth_gateway(&issuer, vec![mock_server("mock")], json!({}));
    let token = issuer.sign(&issuer.claims(ALICE, PROJECT_NAME));
    runtime().block_on(async {
        for credential in [token.as_str(), API_KEY] {
            let (client, _) = connect_stdio(stdio_command(gw.config_path(), &[("GW_GATEWAY_KEY", credential)])).await;
            let answer = call(&client, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": "hi"}))])).await;
            assert!(success_text(&answer["results"][0], "echo").contains("hi"), "{answer}");
            client.cancel().await.unwrap();
        }
        let mut other = issuer.claims(ALICE, PROJECT_NAME);
        other["aud"] = json!("someone-else");
        let other = issuer.sign(&other);
        let (client, _) = connect_stdio(stdio_command(gw.config_path(), &[("GW_GATEWAY_KEY", other.as_str())])).await;
        let refused = try_call(&client, "gw_list_all_servers", json!({})).await;
        let text = format!("{refused:?}");
        assert!(text.contains("AUTH_FAILED") && text.contains("audience"), "{text}");
        client.cancel().await.unwrap();
    });
}
