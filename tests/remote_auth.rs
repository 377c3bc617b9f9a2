//! Remote authentication (auth provider `gw`) from outside: the gateway asks a remote service (a local HTTP mock) to
//! resolve a key it does not know itself, serves the servers the service returns, caches the answer, keeps the
//! service's key out of its logs, and answers 401 `AUTH_FAILED` when the service refuses or cannot be reached.

mod common;
#[path = "common/http_mock.rs"]
mod http_mock;
#[path = "common/mcp.rs"]
mod mcp;

use http_mock::HttpMock;
use mcp::*;
use serde_json::{Value, json};

const REMOTE_KEY: &str = "gw_remote-client-key-00000000000000000000000000";
const SERVICE_KEY: &str = "auth-service-key-0123456789";
const PATH: &str = "/mcp-gateway/get-gateway";

fn gateway(base_url: &str) -> TestGateway {
    gateway_with(base_url, json!({}))
}

fn gateway_with(base_url: &str, common: Value) -> TestGateway {
    let mut config = config_with(vec![mock_server("mock")], common);
    config["plugins"]["auth"] = json!({"provider": "gw", "config": {"base_url": base_url, "api_key": SERVICE_KEY}});
    TestGateway::start(&config)
}

fn tools_list(gw: &TestGateway) -> Rpc {
    post(&http(), &gw.mcp, Some(REMOTE_KEY), &stateless_headers("tools/list", None), &{
        let mut body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
        body["params"]["_meta"] = stateless_meta();
        body
    })
}

#[test]
fn a_key_resolved_by_the_service_opens_the_servers_it_returns() {
    let service = HttpMock::start(vec![(
        PATH,
        200,
        json!({"authenticated": true, "project_id": "remote-project", "user_id": "remote-user",
               "gateway_config": {"mcp_config": [mock_server("remote_mock")]}}),
    )]);
    let gw = gateway(&service.base_url);
    let answer: Value = runtime().block_on(async {
        let client = connect(&gw.mcp, REMOTE_KEY).await;
        let servers = call(&client, "gw_list_all_servers", json!({})).await;
        assert_eq!(servers["servers"][0]["server_name"], json!("remote_mock"), "{servers}");
        let answer =
            call(&client, "gw_secure_call_tools", calls("remote_mock", &[("echo", json!({"text": "hi"}))])).await;
        client.cancel().await.unwrap();
        answer
    });
    assert_eq!(success_text(&answer["results"][0], "echo"), "hi");

    let seen = service.seen();
    assert!(!seen.is_empty());
    assert_eq!(seen[0].path, PATH);
    assert_eq!(seen[0].headers.get("apikey").map(String::as_str), Some(SERVICE_KEY));
    assert_eq!(seen[0].body["gateway_key"], json!(REMOTE_KEY));
    assert!(seen[0].raw.contains("\"project_id\""), "project and user are sent (null when absent): {}", seen[0].raw);
    assert!(seen.len() <= 2, "answers are cached, not asked per request: {} requests", seen.len());
    let logs = gw.logs();
    assert!(!logs.contains(SERVICE_KEY) && !logs.contains(REMOTE_KEY), "keys in the logs");
}

#[test]
fn a_refusal_or_an_unreachable_service_is_auth_failed() {
    let service = HttpMock::start(vec![(PATH, 200, json!({"authenticated": false, "detail": "key revoked"}))]);
    let gw = gateway(&service.base_url);
    let details = assert_auth_failed(&tools_list(&gw));
    assert!(details.contains("key revoked"), "{details}");
    drop(gw);

    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", gone.local_addr().unwrap());
    drop(gone);
    let gw = gateway(&url);
    let details = assert_auth_failed(&tools_list(&gw));
    assert!(details.contains("unavailable"), "{details}");
}

#[test]
fn a_key_revoked_at_the_service_stops_working_when_its_cached_answer_expires() {
    let accepted = json!({"authenticated": true, "project_id": "remote-project", "user_id": "remote-user",
                          "gateway_config": {"mcp_config": [mock_server("remote_mock")]}});
    let service = HttpMock::start(vec![(PATH, 200, accepted)]);
    // 0.0005 hours: the answer is cached for 1.8 s.
    let gw = gateway_with(&service.base_url, json!({"gw_gateway_cache_expiration": 0.0005}));
    assert_eq!(tools_list(&gw).status, 200);
    service.set(PATH, 200, json!({"authenticated": false, "detail": "key revoked"}));
    let revoked = common::wait_until(std::time::Duration::from_secs(10), || tools_list(&gw).status == 401);
    assert!(revoked, "the revoked key still works");
    let details = assert_auth_failed(&tools_list(&gw));
    assert!(details.contains("key revoked"), "{details}");
}
