//! The stdio front of the gateway (`mcpgw serve --transport stdio`, or `MCP_TRANSPORT=stdio`), driven as a subprocess:
//! rmcp's client over the child's stdin and stdout end to end (a tool call reaching the mock upstream), bad
//! credentials answered with `AUTH_FAILED` by every tool while `tools/list` still works, and raw JSON lines to check that
//! stdout carries nothing but JSON-RPC messages (logs and upstream output stay off it), that closing stdin ends the
//! process with exit 0 and that no upstream process is left behind.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{ALICE_ID, API_KEY, PROJECT_ID, write_json};
use mcp::*;
use serde_json::{Value, json};

/// A temp dir with a config whose `default_config` has the mock upstream.
fn mock_config() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    write_json(&path, &config_with(vec![mock_server("mock")], json!({})));
    (dir, path)
}

/// Writes one JSON-RPC message as a line to the gateway's stdin.
fn send_line(stdin: &mut std::process::ChildStdin, message: Value) {
    stdin.write_all(format!("{message}\n").as_bytes()).unwrap();
    stdin.flush().unwrap();
}

/// The next line on `lines` that answers request `id`, within [`CALL_DEADLINE`].
fn answer_to(lines: &mpsc::Receiver<String>, id: u64) -> Value {
    let deadline = Instant::now() + CALL_DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines.recv_timeout(left).unwrap_or_else(|_| panic!("no answer to request {id}"));
        if let Ok(v) = serde_json::from_str::<Value>(&line)
            && v["id"] == json!(id)
        {
            return v;
        }
    }
}

/// Valid arguments for each gateway tool.
fn sample_args(tool: &str) -> Value {
    match tool {
        "gw_get_server_info" => json!({"server_name": "mock"}),
        "gw_discover_all_tools" => json!({"server_name": "mock"}),
        "gw_secure_call_tools" => calls("mock", &[("echo", json!({"text": "hi"}))]),
        _ => json!({}),
    }
}

#[test]
fn a_real_client_calls_an_upstream_tool_through_the_stdio_front() {
    let (_dir, path) = mock_config();
    let creds = [("GW_GATEWAY_KEY", API_KEY), ("GW_PROJECT_ID", PROJECT_ID), ("GW_USER_ID", ALICE_ID)];
    runtime().block_on(async {
        let (client, stderr) = connect_stdio(stdio_command(&path, &creds)).await;
        let mut names = tool_names(&client).await;
        names.sort();
        let mut expected: Vec<String> = GW_TOOLS.iter().map(|s| s.to_string()).collect();
        expected.sort();
        assert_eq!(names, expected);

        let servers = call(&client, "gw_list_all_servers", json!({})).await;
        assert_eq!(servers["servers"][0]["server_name"], json!("mock"), "{servers}");
        let found = call(&client, "gw_discover_all_tools", json!({"server_name": "mock"})).await;
        assert_eq!(found["source"], json!("discovery"), "{found}");

        let answer = call(
            &client,
            "gw_secure_call_tools",
            calls("mock", &[("echo", json!({"text": "over stdio"})), ("add", json!({"a": 20, "b": 22}))]),
        )
        .await;
        let results = answer["results"].as_array().expect("results");
        assert_eq!(success_text(&results[0], "echo"), "over stdio");
        assert_eq!(success_text(&results[1], "add"), "42");

        // The gateway's own credentials are in its environment here; the upstream must not see them.
        for name in ["GW_GATEWAY_KEY", "GW_PROJECT_ID", "GW_USER_ID"] {
            let env = secure_call_one(&client, "mock", "env", json!({"name": name})).await;
            assert_eq!(success_text(&env, "env"), "<unset>", "{name} reached the upstream");
        }
        client.cancel().await.unwrap();
        let logs = stderr.lock().unwrap().clone();
        assert!(
            logs.lines().any(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["level"].is_string())),
            "JSON logs go to stderr; got:\n{logs}"
        );
    });
}

#[test]
fn mcp_transport_stdio_in_the_environment_selects_the_stdio_front() {
    let (_dir, path) = mock_config();
    let mut cmd = common::base_command();
    cmd.arg("serve").arg("--config").arg(&path).env("MCP_TRANSPORT", "stdio").env("GW_GATEWAY_KEY", API_KEY);
    runtime().block_on(async {
        let (client, _stderr) = connect_stdio(cmd).await;
        assert_eq!(tool_names(&client).await.len(), 7);
        let status = call(&client, "gw_get_cache_status", json!({})).await;
        assert_eq!(status["status"], json!("success"), "{status}");
        client.cancel().await.unwrap();
    });
}

#[test]
fn with_bad_credentials_every_tool_answers_auth_failed_and_tools_list_still_works() {
    let (_dir, path) = mock_config();
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("unknown key", vec![("GW_GATEWAY_KEY", "gwkey-unknown-0123456789abcdefghijklmnopqrstuvwxyzABCDEF")]),
        ("no key", vec![]),
        ("disabled key", vec![("GW_GATEWAY_KEY", DISABLED_KEY)]),
        ("another project", vec![("GW_GATEWAY_KEY", API_KEY), ("GW_PROJECT_ID", BETA_PROJECT_ID)]),
        ("another user", vec![("GW_GATEWAY_KEY", API_KEY), ("GW_USER_ID", common::BOB_ID)]),
    ];
    runtime().block_on(async {
        for (what, creds) in cases {
            let (client, _stderr) = connect_stdio(stdio_command(&path, &creds)).await;
            assert_eq!(tool_names(&client).await.len(), 7, "{what}: tools/list works without valid credentials");
            for tool in GW_TOOLS {
                let result = try_call(&client, tool, sample_args(tool))
                    .await
                    .unwrap_or_else(|e| panic!("{what}: {tool} should answer AUTH_FAILED, got a protocol error: {e}"));
                let a = answer_of(&result);
                assert_eq!(a["status"], json!("error"), "{what}: {tool}: {a}");
                assert_eq!(a["error_code"], json!("AUTH_FAILED"), "{what}: {tool}: {a}");
                assert!(a["message"].is_string() && a["details"].is_string(), "{what}: {tool}: {a}");
            }
            client.cancel().await.unwrap();
        }
    });
}

#[test]
fn stdout_carries_only_jsonrpc_and_closing_stdin_ends_everything() {
    let (_dir, path) = mock_config();
    let creds = [("GW_GATEWAY_KEY", API_KEY)];
    let mut child = stdio_command(&path, &creds)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcpgw serve --transport stdio");
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr_pipe.read_to_string(&mut s);
        s
    });
    let (tx, rx) = mpsc::channel::<String>();
    let reader = thread::spawn(move || {
        let mut all = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            all.push(line.clone());
            let _ = tx.send(line);
        }
        all
    });
    let mut send = |v: Value| send_line(&mut stdin, v);
    let wait_for = |id: u64| answer_to(&rx, id);

    send(initialize_body(1, "2025-06-18"));
    assert_eq!(wait_for(1)["result"]["protocolVersion"], json!("2025-06-18"));
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    assert_eq!(wait_for(2)["result"]["tools"].as_array().map(Vec::len), Some(7));
    let batch = calls("mock", &[("echo", json!({"text": "a"})), ("garbage", json!({})), ("pid", json!({}))]);
    send(tools_call_body(3, "gw_secure_call_tools", batch));
    let answer = answer_of(&wait_for(3)["result"]);
    let results = answer["results"].as_array().expect("results");
    assert_eq!(success_text(&results[0], "echo"), "a");
    assert_eq!(results[1]["status"], json!("error"), "garbage is an upstream error: {answer}");
    let pid: u32 = success_text(&results[2], "pid").trim().parse().unwrap();
    send(tools_call_body(4, "gw_get_server_info", json!({"server_name": "mock"})));
    assert_eq!(answer_of(&wait_for(4)["result"])["status"], json!("success"));
    send(json!({"jsonrpc": "2.0", "id": 5, "method": "no/such/method"}));
    assert!(wait_for(5)["error"].is_object());

    // Closing stdin is how a stdio client says goodbye: the gateway exits at once, its drain not waiting out the
    // grace period (25 s) for the connection's own session.
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("mcpgw did not exit within 10 s after its stdin closed");
        }
        thread::sleep(Duration::from_millis(25));
    };
    let lines = reader.join().unwrap();
    let logs = stderr.join().unwrap();
    assert!(status.success(), "exit status {status} after stdin closed; stderr:\n{logs}");
    assert!(lines.len() >= 5, "answers on stdout: {lines:?}");
    for line in &lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
        assert_eq!(v["jsonrpc"], json!("2.0"), "stdout line is not a JSON-RPC message: {line}");
    }
    // The garbage line the upstream wrote may be quoted in an error message, but never as a line of its own.
    assert!(!lines.iter().any(|l| l.starts_with("this line is not JSON")), "upstream stdout leaked to ours");
    assert!(
        logs.lines().any(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["message"].is_string())),
        "logs on stderr:\n{logs}"
    );
    assert!(
        wait_gone(&[pid], Duration::from_secs(5)).is_empty(),
        "upstream process {pid} left after the gateway exited"
    );
}

#[test]
fn sigterm_over_stdio_lets_a_running_call_answer_then_exits_0() {
    let (dir, path) = mock_config();
    let mut child = stdio_command(&path, &[("GW_GATEWAY_KEY", API_KEY)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn mcpgw serve --transport stdio");
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut send = |v: Value| send_line(&mut stdin, v);
    let wait_for = |id: u64| answer_to(&rx, id);
    send(initialize_body(1, "2025-06-18"));
    wait_for(1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // Warm the upstream so the slow call below is running when the signal arrives.
    send(tools_call_body(2, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": "warm"}))])));
    wait_for(2);
    let started = dir.path().join("slow-started");
    send(tools_call_body(3, "gw_secure_call_tools", calls("mock", &[("slow", slow_marked(1500, &started))])));
    wait_started(&started);
    let signalled = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(signalled.success());

    let answer = answer_of(&wait_for(3)["result"]);
    assert_eq!(answer["results"][0]["status"], json!("success"), "the running call finished: {answer}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "mcpgw did not exit after SIGTERM");
        thread::sleep(Duration::from_millis(25));
    };
    assert!(status.success(), "exit status {status}");
}
