//! Contract 13, "Parsers agree", from outside: a JSON body with a key twice in one object is refused on both fronts
//! (the gateway with a JSON-RPC invalid request, the admin API with 400 `VALIDATION_ERROR`) and changes nothing; a
//! request that repeats `Authorization`, `Host`, `Origin` or `Mcp-Session-Id` gets 400 before anything reads them;
//! every malformed request to the MCP endpoint gets a JSON-RPC error in a JSON body, never a plain-text answer.
//! Contract 14: an `id` that is not a string or an integer within i64, and array `params`, are invalid requests on
//! HTTP (in a session and stateless) and on stdio.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use common::{ADMIN_KEY, ALICE_ID, API_KEY, PROJECT_ID};
use mcp::*;
use serde_json::{Value, json};

fn gateway() -> TestGateway {
    TestGateway::start(&config_with(vec![mock_server("mock")], json!({})))
}

/// A JSON-RPC error answer in a JSON body with `status` and JSON-RPC `code`; its `data`.
#[track_caller]
fn jsonrpc_refusal(r: &Rpc, status: u16, code: i64) -> Value {
    assert_eq!(r.status, status, "{}", r.text);
    assert!(r.is_json(), "a JSON body, not {:?}: {}", r.content_type, r.text);
    assert_eq!(r.message["error"]["code"], json!(code), "{}", r.text);
    r.message["error"]["data"].clone()
}

#[test]
fn a_gateway_message_with_a_key_twice_is_an_invalid_request_and_runs_nothing() {
    let gw = gateway();
    let client = http();
    // Which `name` would run depends on the reader; the gateway reads neither.
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"gw_get_cache_status","name":"gw_clear_cache","arguments":{}}}"#;
    let r = post_bytes(&client, &gw.mcp, Some(API_KEY), &stateless_headers("tools/call", None), body.to_vec());
    jsonrpc_refusal(&r, 400, -32600);
    assert!(r.message["error"]["message"].as_str().unwrap_or("").contains("duplicate key \"name\""), "{}", r.text);
    // Keys repeated deeper, in the arguments, too.
    let body = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call",
        "params":{"name":"gw_secure_call_tools","arguments":{"server_name":"mock","server_name":"other","tool_calls":[]}}}"#;
    let r = post_bytes(&client, &gw.mcp, Some(API_KEY), &stateless_headers("tools/call", None), body.to_vec());
    jsonrpc_refusal(&r, 400, -32600);
    assert_eq!(r.message["id"], json!(null), "{}", r.text);
}

#[test]
fn an_admin_body_with_a_key_twice_is_refused_and_changes_nothing() {
    let gw = gateway();
    let before = fs::read(gw.config_path()).unwrap();
    let url = format!("{}/api/v1/system/reset", gw.gw.admin);
    let r = common::send_raw(
        &gw.gw.client,
        reqwest::Method::POST,
        &url,
        Some(&format!("Bearer {ADMIN_KEY}")),
        Some("application/json"),
        br#"{"confirm": false, "confirm": true}"#.to_vec(),
    )
    .unwrap();
    let detail = r.err(400, "VALIDATION_ERROR");
    assert!(detail.contains("duplicate key \"confirm\""), "{detail}");
    assert_eq!(fs::read(gw.config_path()).unwrap(), before, "the reset did not happen");
}

#[test]
fn repeated_security_headers_get_400_on_both_fronts() {
    let gw = gateway();
    let client = http();
    let session = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let list = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"})).unwrap();
    let authority = gw.authority().to_string();
    let bearer = format!("Bearer {API_KEY}");
    let cases: [(&str, [&str; 2]); 4] = [
        ("authorization", [&bearer, "Bearer someone-else"]),
        ("host", [&authority, "evil.example"]),
        ("origin", ["http://localhost", "http://evil.example"]),
        ("mcp-session-id", [&session, "another-session"]),
    ];
    for (name, [first, second]) in cases {
        let mut req = client
            .post(&gw.mcp)
            .header("accept", ACCEPT_BOTH)
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25")
            .body(list.clone());
        if name != "authorization" {
            req = req.header("authorization", format!("Bearer {API_KEY}"));
        }
        if name != "mcp-session-id" {
            req = req.header("mcp-session-id", &session);
        }
        let r = read_rpc(req.header(name, first).header(name, second).send().unwrap());
        let data = jsonrpc_refusal(&r, 400, -32600);
        assert_eq!(data["error_code"], json!("INVALID_REQUEST"), "{name}: {}", r.text);
        assert!(data["message"].as_str().unwrap_or("").contains(name), "{name}: {}", r.text);
    }
    // The same request with each header once is served.
    let ok = post_bytes(&client, &gw.mcp, Some(API_KEY), &[("mcp-session-id", &session)], list);
    assert_eq!(ok.status, 200, "{}", ok.text);

    let admin = format!("{}/api/v1/projects", gw.gw.admin);
    let twice = gw.gw.client.get(&admin).header("authorization", format!("Bearer {ADMIN_KEY}"));
    let r = twice.header("authorization", "Bearer wrong").send().unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body: Value = r.json().unwrap_or_default();
    assert_eq!(body["error"], json!("VALIDATION_ERROR"), "{body}");
}

#[test]
fn malformed_requests_to_the_mcp_endpoint_get_json_rpc_errors_in_json() {
    let gw = gateway();
    let client = http();
    let list = serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})).unwrap();
    // A wrong content type and an Accept without JSON: rmcp refuses both; the answer stays JSON.
    let r = post_bytes(&client, &gw.mcp, Some(API_KEY), &[("content-type", "text/plain")], list.clone());
    let data = jsonrpc_refusal(&r, 415, -32600);
    assert_eq!(data["error_code"], json!("UNSUPPORTED_MEDIA_TYPE"), "{}", r.text);
    let r = post_bytes(&client, &gw.mcp, Some(API_KEY), &[("accept", "text/html")], list);
    assert!(r.status >= 400 && r.status < 500, "{}", r.text);
    assert!(r.is_json(), "{:?}: {}", r.content_type, r.text);
    assert!(r.message["error"]["code"].is_i64(), "{}", r.text);
}

/// The `id`s of contract 14 that are neither a string nor an integer within i64.
const BAD_IDS: [&str; 6] = ["1.5", "1e30", "true", "{}", "[1]", "9223372036854775808"];

#[test]
fn a_bad_id_or_array_params_is_an_invalid_request_in_json_over_http() {
    let gw = gateway();
    let client = http();
    let session = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let in_session = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-11-25")];
    let call = r#""method":"tools/call","params":{"name":"gw_list_all_servers","arguments":{}}"#;
    for id in BAD_IDS {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},{call}}}"#);
        let r = post_bytes(&client, &gw.mcp, Some(API_KEY), &in_session, body.clone().into_bytes());
        jsonrpc_refusal(&r, 400, -32600);
        assert_eq!(r.message["id"], json!(null), "id {id}: {}", r.text);
        let r = post_bytes(&client, &gw.mcp, Some(API_KEY), &stateless_headers("tools/call", None), body.into_bytes());
        jsonrpc_refusal(&r, 400, -32600);
    }
    let arrays = [
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": ["gw_list_all_servers", {}]}),
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": []}),
        json!({"jsonrpc": "2.0", "id": 9, "method": "ping", "params": []}),
    ];
    for body in &arrays {
        let r = post(&client, &gw.mcp, Some(API_KEY), &in_session, body);
        jsonrpc_refusal(&r, 400, -32600);
        assert_eq!(r.message["id"], body["id"], "{}", r.text);
    }
    // The same call with a good id is served, a string id and an integer at i64's edge alike.
    for id in [json!("call-1"), json!(i64::MAX), json!(i64::MIN)] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "gw_list_all_servers", "arguments": {}}});
        let r = post(&client, &gw.mcp, Some(API_KEY), &in_session, &body);
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.message["id"], id, "{}", r.text);
        assert!(r.message.get("result").is_some(), "{}", r.text);
    }
}

#[test]
fn a_bad_id_or_array_params_is_an_invalid_request_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    common::write_json(&path, &config_with(vec![mock_server("mock")], json!({})));
    let creds = [("GW_GATEWAY_KEY", API_KEY), ("GW_PROJECT_ID", PROJECT_ID), ("GW_USER_ID", ALICE_ID)];
    let mut child = stdio_command(&path, &creds)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = || -> Value {
        let line = rx.recv_timeout(CALL_DEADLINE).expect("an answer on stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    };
    let mut send = |line: String| {
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    send(initialize_body(0, "2025-11-25").to_string());
    assert_eq!(next()["id"], json!(0));
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    let mut bad: Vec<String> =
        BAD_IDS.iter().map(|id| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)).collect();
    bad.push(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": ["gw_list_all_servers"]}).to_string());
    bad.push(json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": []}).to_string());
    for line in bad {
        send(line.clone());
        let answer = next();
        assert_eq!(answer["error"]["code"], json!(-32600), "{line}: {answer}");
    }
    // The stream goes on: a good request after them is answered.
    send(json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}).to_string());
    let answer = next();
    assert_eq!(answer["id"], json!(9), "{answer}");
    assert!(answer.get("result").is_some(), "{answer}");
    let _ = child.kill();
    let _ = child.wait();
}
