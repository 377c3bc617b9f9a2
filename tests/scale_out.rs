//! Scale-out (contract section 12) from outside: several `mcpgw serve` processes of one configuration.
//!
//! Sessions: a session opened on one replica is served by another (its id is sealed with a key derived from
//! `session_secret`), stays bound to its key, and a configuration without `session_secret` keeps sessions with the
//! replica that opened them. The Redis store (`config_store: {"type": "redis"}`, a real `redis-server` started by the
//! test): the file seeds an empty store, writes on each replica reach the others within 2 s, concurrent writes on
//! several replicas lose nothing, a key disabled on one is refused on all, Redis going away keeps the replicas serving
//! (health degraded, writes 503 `CONFIG_STORE_UNAVAILABLE`) and coming back takes writes again, and backup, restore
//! and reset work on the store.
//!
//! `redis-server` must be installed (`.ci/run` installs it): without it the Redis tests fail and say so.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::time::Duration;

use common::{API_KEY, Gateway, write_json};
use mcp::*;
use serde_json::{Value, json};

const SECRET: &str = "scale-out-session-secret-0123456789abcdefgh";
const VERSION: &str = "2025-06-18";

fn session_headers(session: &str) -> [(&str, &str); 2] {
    [("mcp-session-id", session), ("mcp-protocol-version", VERSION)]
}

/// `gw_secure_call_tools` of the mock's `echo` in `session` on `url`: the echoed text, or the HTTP status and body.
fn echo_in(url: &str, key: &str, session: &str, text: &str) -> Result<String, String> {
    let body = tools_call_body(7, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": text}))]));
    let r = post(&http(), url, Some(key), &session_headers(session), &body);
    if r.status != 200 {
        return Err(format!("{} {}", r.status, r.text));
    }
    let answer = answer_of(&r.message["result"]);
    Ok(success_text(&answer["results"][0], "echo"))
}

/// Two replicas on one config file (as two pods mounting one Secret).
fn two_replicas(common: Value) -> (tempfile::TempDir, Gateway, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    write_json(&path, &config_with(vec![mock_server("mock")], common));
    let a = Gateway::start(&path);
    let b = Gateway::start(&path);
    (dir, a, b)
}

#[test]
fn a_session_opened_on_one_replica_is_served_by_another() {
    let (_dir, a, b) = two_replicas(json!({"session_secret": SECRET, "tool_exposure": "both"}));
    let (url_a, url_b) = (format!("{}/mcp/", a.gateway), format!("{}/mcp/", b.gateway));
    let session = open_session(&http(), &url_a, API_KEY, VERSION);
    assert!(session.starts_with("mcpgw1.") && session.len() > 40, "a sealed id: {session}");
    assert_eq!(echo_in(&url_a, API_KEY, &session, "on a").unwrap(), "on a");

    // The fast route on B, then rmcp's route on B (which replays the session's initialize), then the transparent
    // view's upstream tool on B.
    assert_eq!(echo_in(&url_b, API_KEY, &session, "on b").unwrap(), "on b");
    let list = post(
        &http(),
        &url_b,
        Some(API_KEY),
        &session_headers(&session),
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    );
    assert_eq!(list.status, 200, "{}", list.text);
    let names: Vec<&str> =
        list.message["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"gw_secure_call_tools") && names.contains(&"mock__echo"), "{names:?}");
    let direct = post(
        &http(),
        &url_b,
        Some(API_KEY),
        &session_headers(&session),
        &tools_call_body(4, "mock__echo", json!({"text": "direct"})),
    );
    assert_eq!(direct.status, 200, "{}", direct.text);
    assert_eq!(upstream_text(&direct.message["result"]), "direct");
    assert!(b.logs().contains("taken over"), "B says it took the session over:\n{}", b.logs());
    // And back on A, which still has it.
    assert_eq!(echo_in(&url_a, API_KEY, &session, "again a").unwrap(), "again a");

    // Bound to its key on every replica; a changed id is no id.
    for url in [&url_a, &url_b] {
        let foreign = echo_in(url, KEY_B, &session, "x").unwrap_err();
        assert!(foreign.starts_with("404") && foreign.contains("SESSION_NOT_FOUND"), "{foreign}");
    }
    let mut tampered = session.clone().into_bytes();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b'x' { b'y' } else { b'x' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert!(echo_in(&url_b, API_KEY, &tampered, "x").unwrap_err().starts_with("404"));

    // Closed on B: B no longer serves it.
    let closed = a.client.delete(&url_b).bearer_auth(API_KEY).header("mcp-session-id", &session).send().unwrap();
    assert!(closed.status().is_success(), "DELETE: {}", closed.status());
    assert!(echo_in(&url_b, API_KEY, &session, "x").unwrap_err().starts_with("404"));
}

#[test]
fn without_a_session_secret_sessions_stay_with_their_replica() {
    let (_dir, a, b) = two_replicas(json!({}));
    let (url_a, url_b) = (format!("{}/mcp/", a.gateway), format!("{}/mcp/", b.gateway));
    let session = open_session(&http(), &url_a, API_KEY, VERSION);
    assert_eq!(echo_in(&url_a, API_KEY, &session, "here").unwrap(), "here");
    let elsewhere = echo_in(&url_b, API_KEY, &session, "there").unwrap_err();
    assert!(elsewhere.starts_with("404"), "{elsewhere}");
}

#[test]
fn init_writes_a_session_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.json");
    let (status, _, err) = common::run_cli(&["init", "--config", path.to_str().unwrap()], &[]);
    assert!(status.success(), "{err}");
    let written = common::read_json(&path);
    let secret = written["common_mcp_gateway_config"]["session_secret"].as_str().unwrap_or_default();
    assert!(secret.len() >= 32, "{written}");
    assert_eq!(written["common_mcp_gateway_config"]["config_store"], json!({"type": "file"}));
    let _ = Duration::ZERO;
}
