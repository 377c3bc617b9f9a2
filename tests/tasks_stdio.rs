//! Contract 15, "Tasks", over the stdio front: a 2025-11-25 client that starts `mcpgw serve --transport stdio` in the
//! transparent view gets what a session over HTTP gets (`tests/tasks.rs`): `capabilities.tasks` and each tool's
//! `execution`, a task-augmented call of the mock's `task_run` answered with a sealed task, `tasks/get`, `tasks/list`,
//! `tasks/result` (its result through the output guardrails), `tasks/cancel`, the task's status notification on
//! stdout, and `-32602` for a forged id; ordinary calls, `ping` and notifications still work on the same connection.
//! In the gateway view `tasks/*` is `-32601`. A line longer than the limit is dropped and the connection goes on; a
//! `tasks/result` waiting at SIGTERM is answered within the grace period.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{API_KEY, write_json};
use mcp::*;
use serde_json::{Value, json};

const REVISION: &str = "2025-11-25";

/// A transparent gateway's config over the mock `m1` with its task tool (output keyword `top secret` blocked),
/// calls bound to 2 s; `exposure` is the configuration's `tool_exposure`.
fn task_config(exposure: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let mut server = mock_server("m1");
    server["config"]["args"] = json!(["--task-tool"]);
    server["output_guardrails_policy"] =
        json!({"enabled": true, "additional_config": {"blocked_keywords": ["top secret"]}});
    let common = json!({"tool_exposure": exposure, "timeout_settings": {"tool_execution_timeout": 2}});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    write_json(&path, &config_with(vec![server], common));
    (dir, path)
}

/// A raw JSON-RPC client of the gateway over its stdin and stdout; every line of stdout is kept.
struct StdioClient {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every message read so far, in order.
    seen: Vec<Value>,
    next_id: u64,
}

impl StdioClient {
    fn start(path: &std::path::Path, envs: &[(&str, &str)]) -> StdioClient {
        let mut child = stdio_command(path, envs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn mcpgw serve --transport stdio");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        StdioClient { child, stdin, lines, seen: Vec::new(), next_id: 100 }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        self.send_raw(format!("{message}\n").as_bytes());
    }

    /// The next message on stdout, within `within`; `None` when none came.
    fn next(&mut self, within: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(within).ok()?;
        let message: Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
        assert_eq!(message["jsonrpc"], json!("2.0"), "not a JSON-RPC message: {line}");
        self.seen.push(message.clone());
        Some(message)
    }

    /// The answer to request `id`.
    fn answer(&mut self, id: &Value) -> Value {
        let deadline = Instant::now() + CALL_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = self.next(left).unwrap_or_else(|| panic!("no answer to request {id}"));
            if message.get("method").is_none() && message["id"] == *id {
                return message;
            }
        }
    }

    /// Sends request `method` and waits for its answer.
    fn ask(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.answer(&id)
    }

    /// `initialize` (2025-11-25) and `notifications/initialized`; the answer's result.
    fn initialize(&mut self) -> Value {
        self.send(initialize_body(1, REVISION));
        let init = self.answer(&json!(1));
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        init["result"].clone()
    }

    /// Closes stdin; the gateway must then exit 0.
    fn close(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "exit status {status} after stdin closed");
                return;
            }
            thread::sleep(Duration::from_millis(25));
        }
        let _ = self.child.kill();
        panic!("mcpgw did not exit within 30 s after its stdin closed");
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `tasks/get` until the task's status is `status` (or 30 s pass); returns the last answer.
fn poll_until(client: &mut StdioClient, id: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = client.ask("tasks/get", json!({"taskId": id}));
        if answer["result"]["status"] == json!(status) || Instant::now() > deadline {
            return answer;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

fn task_id(created: &Value) -> String {
    created["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("no task: {created}")).to_string()
}

#[test]
fn a_2025_11_25_stdio_client_runs_a_task_as_a_session_over_http_does() {
    let (_dir, path) = task_config("transparent");
    let mut client = StdioClient::start(&path, &[("GW_GATEWAY_KEY", API_KEY)]);
    // What the official SDKs look for before they ask for a task.
    let init = client.initialize();
    assert_eq!(init["capabilities"]["tasks"]["requests"]["tools"]["call"], json!({}), "{init}");
    assert!(init["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"].is_object(), "{init}");
    let tools = client.ask("tools/list", json!({}));
    let listed = tools["result"]["tools"].as_array().cloned().unwrap_or_default();
    let find = |name: &str| listed.iter().find(|tool| tool["name"] == json!(name)).cloned().unwrap_or_default();
    assert_eq!(find("m1__task_run")["execution"]["taskSupport"], json!("required"), "{tools}");
    let echo = find("m1__echo");
    assert!(echo.is_object() && echo.get("execution").is_none(), "{tools}");

    // A task that outlives tool_execution_timeout (2 s), its id sealed.
    let args = json!({"ms": 3000, "text": "the report is top secret"});
    let created = client.ask("tools/call", json!({"name": "m1__task_run", "arguments": args, "task": {"ttl": 60000}}));
    let id = task_id(&created);
    assert!(id.starts_with("mcpgwt1.") && !id.contains("mock-task"), "a sealed id: {id}");
    let task = &created["result"]["task"];
    assert_eq!((task["status"].clone(), task["ttl"].clone()), (json!("working"), json!(60000)), "{created}");

    // While it runs, the connection serves everything else: ping, a notification, a plain call.
    assert_eq!(client.ask("ping", json!({}))["result"], json!({}));
    client.send(json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}));
    let plain = client.ask("tools/call", json!({"name": "m1__echo", "arguments": {"text": "plain"}}));
    assert_eq!(plain["result"]["content"][0]["text"], json!("plain"), "{plain}");
    // A task-augmented call of a tool that offers no task runs as a plain call.
    let plain = client.ask("tools/call", json!({"name": "m1__echo", "arguments": {"text": "no task"}, "task": {}}));
    assert_eq!(plain["result"]["content"][0]["text"], json!("no task"), "{plain}");

    // A forged id and the upstream's own id name no task.
    for forged in ["mcpgwt1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "mock-task-1"] {
        for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
            let refused = client.ask(method, json!({"taskId": forged}));
            assert_eq!(refused["error"]["code"], json!(-32602), "{method}: {refused}");
        }
    }
    let listed = client.ask("tasks/list", json!({}));
    assert_eq!(listed["result"]["tasks"][0]["taskId"], json!(id), "{listed}");

    let done = poll_until(&mut client, &id, "completed");
    assert_eq!(done["result"]["status"], json!("completed"), "{done}");
    // Its final result passes the output guardrails as a call's does.
    let blocked = client.ask("tasks/result", json!({"taskId": id}));
    assert_eq!(blocked["result"]["isError"], json!(true), "{blocked}");
    assert_eq!(blocked["result"]["structuredContent"]["error_code"], json!("GUARDRAIL_VIOLATION"), "{blocked}");
    assert_eq!(blocked["result"]["structuredContent"]["stage"], json!("output"), "{blocked}");
    // The upstream's status notification reached stdout under the sealed id.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let heard = client.seen.iter().find(|message| {
            message["method"] == json!("notifications/tasks/status")
                && message["params"]["status"] == json!("completed")
        });
        if let Some(status) = heard {
            break status.clone();
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(client.next(left).is_some(), "no notifications/tasks/status on stdout: {:?}", client.seen);
    };
    assert_eq!(status["params"]["taskId"], json!(id), "{status}");
    assert!(!status.to_string().contains("mock-task"), "the upstream's id is not shown: {status}");

    // A clean result comes as the upstream sent it, tied to the sealed id.
    let args = json!({"ms": 10, "text": "all clear"});
    let created = client.ask("tools/call", json!({"name": "m1__task_run", "arguments": args, "task": {}}));
    let id = task_id(&created);
    let result = client.ask("tasks/result", json!({"taskId": id}));
    assert_eq!(result["result"]["content"][0]["text"], json!("all clear"), "{result}");
    assert_eq!(result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], json!(id), "{result}");

    // Cancelled: the task says so.
    let args = json!({"ms": 60000, "text": "never"});
    let created = client.ask("tools/call", json!({"name": "m1__task_run", "arguments": args, "task": {}}));
    let id = task_id(&created);
    let cancelled = client.ask("tasks/cancel", json!({"taskId": id}));
    assert_eq!(
        (cancelled["result"]["taskId"].clone(), cancelled["result"]["status"].clone()),
        (json!(id), json!("cancelled")),
        "{cancelled}"
    );
    let seen = client.ask("tasks/get", json!({"taskId": id}));
    assert_eq!(seen["result"]["status"], json!("cancelled"), "{seen}");
    client.close();
}

#[test]
fn in_the_gateway_view_tasks_are_not_a_method_and_a_long_line_is_dropped() {
    let (_dir, path) = task_config("gateway");
    let mut client = StdioClient::start(&path, &[("GW_GATEWAY_KEY", API_KEY)]);
    let init = client.initialize();
    assert!(init["capabilities"].get("tasks").is_none(), "{init}");
    for method in ["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"] {
        let refused = client.ask(method, json!({"taskId": "mcpgwt1.AAAA"}));
        assert_eq!(refused["error"]["code"], json!(-32601), "{method}: {refused}");
    }
    let tools = client.ask("tools/list", json!({}));
    assert_eq!(tools["result"]["tools"].as_array().map(Vec::len), Some(7), "{tools}");
    // A task-augmented call of a gateway tool runs as a plain call.
    let status = client.ask("tools/call", json!({"name": "gw_get_cache_status", "arguments": {}, "task": {}}));
    assert_eq!(answer_of(&status["result"])["status"], json!("success"), "{status}");

    // A line over the 16 MiB limit is dropped whole; the connection goes on.
    let mut long = br#"{"jsonrpc":"2.0","id":"long","method":"ping","params":{"pad":""#.to_vec();
    long.resize(16 * 1024 * 1024 + 16, b'a');
    long.extend_from_slice(b"\"}}\n");
    client.send_raw(&long);
    assert_eq!(client.ask("ping", json!({}))["result"], json!({}));
    assert!(!client.seen.iter().any(|message| message["id"] == json!("long")), "the long line was answered");
    client.close();
}

#[test]
fn sigterm_lets_a_waiting_tasks_result_answer_then_exits_0() {
    let (_dir, path) = task_config("transparent");
    let mut client = StdioClient::start(&path, &[("GW_GATEWAY_KEY", API_KEY)]);
    client.initialize();
    let args = json!({"ms": 1500, "text": "finished in time"});
    let created = client.ask("tools/call", json!({"name": "m1__task_run", "arguments": args, "task": {}}));
    let id = task_id(&created);
    client.send(json!({"jsonrpc": "2.0", "id": "waiting", "method": "tasks/result", "params": {"taskId": id}}));
    thread::sleep(Duration::from_millis(200));
    let signalled = std::process::Command::new("kill").args(["-TERM", &client.child.id().to_string()]).status();
    assert!(signalled.unwrap().success());
    let result = client.answer(&json!("waiting"));
    assert_eq!(result["result"]["content"][0]["text"], json!("finished in time"), "{result}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = client.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "mcpgw did not exit after SIGTERM");
        thread::sleep(Duration::from_millis(25));
    };
    assert!(status.success(), "exit status {status}");
}
