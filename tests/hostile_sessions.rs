//! Contract 13, "Streams and sessions": `limits.max_sessions_per_key` bounds the MCP sessions one key holds, so one key
//! cannot take every place of `max_sessions` from the other projects: its next `initialize` gets HTTP 429
//! `SESSION_LIMIT`, other keys are not affected, and a session closed frees its place. A 2026-07-28
//! `subscriptions/listen` stream holds a place the same way while it is open (contract 15).

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::API_KEY;
use mcp::*;
use serde_json::json;

#[test]
fn one_key_holds_at_most_max_sessions_per_key_and_other_keys_are_not_affected() {
    let config = config_with(vec![mock_server("mock")], json!({"limits": {"max_sessions_per_key": 2}}));
    let gw = TestGateway::start(&config);
    let client = http();
    let first = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let _second = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let refused = post(&client, &gw.mcp, Some(API_KEY), &[], &initialize_body(9, "2025-11-25"));
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.message["id"], json!(9), "{}", refused.text);
    assert_eq!(refused.message["error"]["data"]["error_code"], json!("SESSION_LIMIT"), "{}", refused.text);
    assert!(refused.header("mcp-session-id").is_none());
    assert!(refused.header("retry-after").is_some());
    assert_eq!(limit_hits(&gw, "sessions_per_key"), 1.0);

    // Another key (of another project) opens sessions as usual.
    open_session(&client, &gw.mcp, BETA_KEY, "2025-11-25");
    open_session(&client, &gw.mcp, BETA_KEY, "2025-11-25");

    // A session closed frees its key's place.
    let closed = close_session(&client, &gw.mcp, API_KEY, &first, "2025-11-25");
    assert!(closed.is_success(), "{closed}");
    open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
}

#[test]
fn a_stateless_subscription_counts_as_a_session_of_its_key() {
    let config = config_with(vec![mock_server("mock")], json!({"limits": {"max_sessions_per_key": 1}}));
    let gw = TestGateway::start(&config);
    let client = http();
    let listen = json!({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen",
                        "params": {"_meta": stateless_meta(), "notifications": {}}});
    let headers = stateless_headers("subscriptions/listen", None);

    // The key's one place is taken by a session: its subscription is refused as an initialize would be.
    let _session = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let refused = post(&client, &gw.mcp, Some(API_KEY), &headers, &listen);
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.message["error"]["data"]["error_code"], json!("SESSION_LIMIT"), "{}", refused.text);
    assert_eq!(refused.message["id"], json!(5), "{}", refused.text);

    // Another key is not affected: its subscription is served (acknowledged, its answer an open event stream) and
    // holds its key's one place until the client closes it; then the key can open its one session.
    let mut request =
        client.post(&gw.mcp).body(listen.to_string()).header("authorization", format!("Bearer {BETA_KEY}"));
    for (name, value) in [("accept", ACCEPT_BOTH), ("content-type", "application/json")].into_iter().chain(headers) {
        request = request.header(name, value);
    }
    let stream = request.send().expect("listen");
    assert_eq!(stream.status().as_u16(), 200);
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stream));
    let acknowledged =
        lines.find(|line| line.as_ref().is_ok_and(|l| l.contains("notifications/subscriptions/acknowledged")));
    assert!(acknowledged.is_some(), "the stream is acknowledged");
    let held = post(&client, &gw.mcp, Some(BETA_KEY), &[], &initialize_body(6, "2025-11-25"));
    assert_eq!(held.status, 429, "the open stream holds the key's place: {}", held.text);
    drop(lines);
    let freed = common::wait_until(std::time::Duration::from_secs(20), || {
        post(&client, &gw.mcp, Some(BETA_KEY), &[], &initialize_body(7, "2025-11-25")).status == 200
    });
    assert!(freed, "the closed stream gave its place back");
}
