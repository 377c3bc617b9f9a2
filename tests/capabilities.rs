//! The capabilities the gateway declares agree with what it answers (contract section 7), on every front: over HTTP in
//! a session of each `initialize` revision, over HTTP stateless (2026-07-28, `server/discover`), and over stdio. Every
//! method of a capability that is not declared answers JSON-RPC -32601 (method not found); a declared one answers.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::io::{BufRead, BufReader, Write};
use std::sync::mpsc;
use std::thread;
use std::time::Instant;

use common::API_KEY;
use mcp::*;
use serde_json::{Value, json};

/// Each method whose answer depends on a capability: (method, params, the capability that declares it).
fn methods() -> Vec<(&'static str, Value, &'static str)> {
    let uri = json!({"uri": "file:///nothing"});
    vec![
        ("tools/list", json!({}), "tools"),
        ("prompts/list", json!({}), "prompts"),
        ("prompts/get", json!({"name": "nothing"}), "prompts"),
        ("resources/list", json!({}), "resources"),
        ("resources/templates/list", json!({}), "resources"),
        ("resources/read", uri.clone(), "resources"),
        ("resources/subscribe", uri.clone(), "resources"),
        ("resources/unsubscribe", uri, "resources"),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "nothing"}, "argument": {"name": "a", "value": ""}}),
            "completions",
        ),
        ("logging/setLevel", json!({"level": "info"}), "logging"),
    ]
}

/// Checks each method's answer against the declared `capabilities`; returns every disagreement.
fn disagreements(front: &str, capabilities: &Value, mut ask: impl FnMut(&str, Value) -> Value) -> Vec<String> {
    assert!(capabilities.is_object(), "{front}: no capabilities object: {capabilities}");
    let mut wrong = Vec::new();
    for (method, params, capability) in methods() {
        let declared = capabilities.get(capability).is_some();
        let answer = ask(method, params);
        let not_found = answer["error"]["code"] == json!(-32601);
        if declared == not_found {
            let declared = if declared { "declared" } else { "not declared" };
            wrong.push(format!("{front}: {method} ({capability} {declared}) answered {answer}"));
        }
    }
    wrong
}

#[test]
fn http_sessions_and_stateless_requests_answer_exactly_the_declared_capabilities() {
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], json!({})));
    let client = http();
    let mut wrong = Vec::new();
    for version in INITIALIZE_REVISIONS {
        let init = post(&client, &gw.mcp, Some(API_KEY), &[], &initialize_body(1, version));
        assert_eq!(init.status, 200, "initialize {version}: {}", init.text);
        let capabilities = init.message["result"]["capabilities"].clone();
        let session = open_session(&client, &gw.mcp, API_KEY, version);
        let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", version)];
        let mut id = 10;
        wrong.extend(disagreements(&format!("HTTP session {version}"), &capabilities, |method, params| {
            id += 1;
            let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            post(&client, &gw.mcp, Some(API_KEY), &headers, &body).message
        }));
    }

    let discover =
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": stateless_meta()}});
    let found = post(&client, &gw.mcp, Some(API_KEY), &stateless_headers("server/discover", None), &discover);
    assert_eq!(found.status, 200, "server/discover: {}", found.text);
    let capabilities = found.message["result"]["capabilities"].clone();
    let mut id = 100;
    wrong.extend(disagreements("HTTP stateless 2026-07-28", &capabilities, |method, mut params| {
        id += 1;
        params["_meta"] = stateless_meta();
        // SEP-2243: the name header carries the prompt's name or the resource's URI.
        let name = params.get("name").or_else(|| params.get("uri")).and_then(Value::as_str).map(str::to_string);
        let headers = stateless_headers(method, name.as_deref());
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        post(&client, &gw.mcp, Some(API_KEY), &headers, &body).message
    }));
    assert!(wrong.is_empty(), "declared capabilities and answers disagree:\n{}", wrong.join("\n"));
}

/// The gateway over stdio, spoken to line by line.
struct Stdio {
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<Value>,
}

impl Stdio {
    fn send(&mut self, message: &Value) {
        self.stdin.write_all(format!("{message}\n").as_bytes()).expect("write to stdin");
        self.stdin.flush().expect("flush stdin");
    }

    /// Sends a request and returns the message that answers its id.
    fn ask(&mut self, message: Value) -> Value {
        self.send(&message);
        let deadline = Instant::now() + CALL_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let answer = self.lines.recv_timeout(left).unwrap_or_else(|_| panic!("no answer to {message}"));
            if answer["id"] == message["id"] {
                return answer;
            }
        }
    }
}

#[test]
fn stdio_answers_exactly_the_declared_capabilities() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gw_mcp_config.json");
    common::write_json(&path, &config_with(vec![mock_server("mock")], json!({})));
    let mut child = stdio_command(&path, &[("GW_GATEWAY_KEY", API_KEY)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn mcpgw serve --transport stdio");
    // Ended by closing stdin below; killed if the test fails before that.
    let _kill = KillOnDrop(vec![child.id()]);
    let stdout = child.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel::<Value>();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(message) = serde_json::from_str::<Value>(&line) {
                let _ = tx.send(message);
            }
        }
    });
    let mut stdio = Stdio { stdin: child.stdin.take().expect("stdin"), lines };
    let init = stdio.ask(initialize_body(1, "2025-11-25"));
    let capabilities = init["result"]["capabilities"].clone();
    stdio.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let mut id = 10;
    let wrong = disagreements("stdio", &capabilities, |method, params| {
        id += 1;
        stdio.ask(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
    });
    assert!(wrong.is_empty(), "declared capabilities and answers disagree:\n{}", wrong.join("\n"));
    // Closing stdin ends the stdio front.
    drop(stdio);
    let status = child.wait().expect("wait for mcpgw");
    assert!(status.success(), "mcpgw over stdio exited with {status}");
}
