//! Contract 15, "Results are what each revision expects", from outside: every result answered to a 2026-07-28
//! request carries `resultType`, the relayed ones of an upstream of an older revision included (the official Python
//! SDK in its default mode rejects a result without it), and a session of an older revision gets the results as its
//! revision has them (no `resultType`). The upstream is the script of the boundary tests
//! (`tests/fixtures/hostile_upstream.py`), which speaks 2025-06-18 and offers a tool, a prompt, a resource and
//! completion values.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::path::Path;

use common::API_KEY;
use mcp::*;
use serde_json::{Value, json};

fn gateway() -> (TestGateway, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let offers = json!({
        "prompts": [{"name": "greet", "description": "Greets."}],
        "resources": [{"uri": "test://doc", "name": "doc", "mimeType": "text/plain"}],
        "completion": ["one", "two"],
    });
    let file = dir.path().join("offers.json");
    std::fs::write(&file, offers.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile_upstream.py");
    let server = json!({"server_name": "up", "config": {"command": "python3",
        "args": [script.to_str().unwrap(), file.to_str().unwrap()]}});
    let gw = TestGateway::start(&config_with(vec![server], json!({"tool_exposure": "transparent"})));
    (gw, dir)
}

/// A stateless (2026-07-28) request of `method` with `params` (its `_meta` added) and the `Mcp-Name` `name`.
fn stateless(gw: &TestGateway, method: &str, name: Option<&str>, mut params: Value) -> Rpc {
    params["_meta"] = stateless_meta();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    post(&http(), &gw.mcp, Some(API_KEY), &stateless_headers(method, name), &body)
}

#[test]
fn every_result_to_a_2026_07_28_request_carries_its_result_type() {
    let (gw, _dir) = gateway();
    let requests = [
        ("tools/call", Some("up__relay"), json!({"name": "up__relay", "arguments": {"steps": []}})),
        ("prompts/get", Some("up__greet"), json!({"name": "up__greet"})),
        ("resources/read", Some("test://doc"), json!({"uri": "test://doc"})),
        (
            "completion/complete",
            None,
            json!({"ref": {"type": "ref/prompt", "name": "up__greet"},
            "argument": {"name": "who", "value": ""}}),
        ),
        ("tools/list", None, json!({})),
        ("prompts/list", None, json!({})),
        ("resources/list", None, json!({})),
        ("resources/templates/list", None, json!({})),
    ];
    for (method, name, params) in requests {
        let answer = stateless(&gw, method, name, params);
        let result = &answer.message["result"];
        assert!(result.is_object(), "{method}: {}", answer.text);
        assert_eq!(result["resultType"], json!("complete"), "{method}: {}", answer.text);
        // Lists and reads carry their caching hints (SEP-2549): the upstream (2025-06-18) gave none, so the smallest
        // upstream TTL is 0, and what a key sees depends on its project: private.
        if method.ends_with("/list") || method == "resources/read" {
            assert_eq!(result["ttlMs"], json!(0), "{method}: {}", answer.text);
            assert_eq!(result["cacheScope"], json!("private"), "{method}: {}", answer.text);
        } else {
            assert!(result.get("ttlMs").is_none() && result.get("cacheScope").is_none(), "{method}: {}", answer.text);
        }
    }
}

#[test]
fn a_session_of_an_older_revision_gets_no_result_type() {
    let (gw, _dir) = gateway();
    let client = http();
    for version in ["2025-06-18", "2025-11-25"] {
        let session = open_session(&client, &gw.mcp, API_KEY, version);
        let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", version)];
        for (method, params) in [
            ("tools/call", json!({"name": "up__relay", "arguments": {"steps": []}})),
            ("prompts/get", json!({"name": "up__greet"})),
            ("resources/read", json!({"uri": "test://doc"})),
        ] {
            let body = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params});
            let answer = post(&client, &gw.mcp, Some(API_KEY), &headers, &body);
            let result = &answer.message["result"];
            assert!(result.is_object(), "{version} {method}: {}", answer.text);
            assert!(result.get("resultType").is_none(), "{version} {method}: {}", answer.text);
        }
    }
}

#[test]
fn a_listing_starts_the_servers_it_needs_at_once() {
    // Each server starts only once all three have begun starting (each waits, 10 s at most, for the others' marks in
    // a shared file, else exits 1): started one after another, none would start and their tools would be missing.
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    std::fs::write(&marks, "").unwrap();
    let mock = env!("CARGO_BIN_EXE_mcpgw-mock-upstream");
    let script = format!(
        "echo started >> '{marks}'; i=0; while [ $(wc -l < '{marks}') -lt 3 ] && [ $i -lt 100 ]; do sleep 0.1; \
         i=$((i+1)); done; [ $(wc -l < '{marks}') -ge 3 ] || exit 1; exec '{mock}'",
        marks = marks.display()
    );
    let servers: Vec<Value> = ["one", "two", "three"]
        .iter()
        .map(|name| json!({"server_name": name, "config": {"command": "sh", "args": ["-c", script]}}))
        .collect();
    let common = json!({"tool_exposure": "transparent", "upstream_pool": {"start_timeout_seconds": 30}});
    let gw = TestGateway::start(&config_with(servers, common));
    let listed = stateless(&gw, "tools/list", None, json!({}));
    let names: Vec<&str> =
        listed.message["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for server in ["one", "two", "three"] {
        assert!(names.contains(&format!("{server}__echo").as_str()), "{server}: {}", listed.text);
    }
    // In configuration order.
    let first = |server: &str| names.iter().position(|n| n.starts_with(server)).unwrap();
    assert!(first("one") < first("two") && first("two") < first("three"), "{names:?}");
}

#[test]
fn logging_set_level_starts_no_server() {
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    let mut server = mock_server("mock");
    server["config"]["args"] = json!(["--starts-file", starts.display().to_string()]);
    let gw = TestGateway::start(&config_with(vec![server], json!({"tool_exposure": "transparent"})));
    let client = http();
    let session = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-11-25")];
    let level = json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "debug"}});
    let set = post(&client, &gw.mcp, Some(API_KEY), &headers, &level);
    assert!(set.message["result"].is_object(), "{}", set.text);
    let started = || std::fs::read_to_string(&starts).unwrap_or_default().lines().count();
    assert_eq!(started(), 0, "the Inspector's first request started a server");
    // A call starts it; a level set then reaches the running process and starts no other.
    let call = tools_call_body(3, "mock__echo", json!({"text": "hi"}));
    assert_eq!(upstream_text(&post(&client, &gw.mcp, Some(API_KEY), &headers, &call).message["result"]), "hi");
    assert_eq!(started(), 1);
    let set = post(&client, &gw.mcp, Some(API_KEY), &headers, &level);
    assert!(set.message["result"].is_object(), "{}", set.text);
    assert_eq!(started(), 1);
}

/// Contract 15, "upstreams are told only the capabilities the calling client declared": a `per_session` server's
/// process serves one session, and is told in `initialize` what that session's client declared (here: nothing); a
/// process shared by every caller is told everything the gateway can relay (and refuses, per call, what the calling
/// client did not declare).
#[test]
fn a_session_process_is_told_only_what_its_client_declared() {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile_upstream.py");
    let server = |name: &str, affinity: &str| {
        let record = dir.path().join(format!("{name}.jsonl"));
        let offers = dir.path().join(format!("{name}.json"));
        std::fs::write(&offers, json!({"record": record}).to_string()).unwrap();
        let config = json!({"command": "python3", "args": [script.to_str().unwrap(), offers.to_str().unwrap()],
            "session_affinity": affinity});
        (json!({"server_name": name, "config": config}), record)
    };
    let (mine, mine_record) = server("mine", "per_session");
    let (shared, shared_record) = server("shared", "shared");
    let gw = TestGateway::start(&config_with(vec![mine, shared], json!({"tool_exposure": "transparent"})));
    let client = http();
    let session = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-11-25")];
    for tool in ["mine__relay", "shared__relay"] {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": tool, "arguments": {"steps": []}}});
        let answer = post(&client, &gw.mcp, Some(API_KEY), &headers, &body);
        assert!(answer.message.get("result").is_some(), "{tool}: {}", answer.text);
    }
    let told = |record: &Path| {
        let text = std::fs::read_to_string(record).unwrap();
        let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["method"], json!("initialize"), "{first}");
        first["params"]["capabilities"].clone()
    };
    assert_eq!(told(&mine_record), json!({}), "the session's client declared nothing");
    assert_eq!(told(&shared_record), json!({"sampling": {}, "elicitation": {}, "roots": {}}));
}
