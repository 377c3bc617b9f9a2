//! Contract 15, "Tasks", from outside: the tasks of the mock upstream's `task_run` relayed in transparent mode, for a
//! 2025-11-25 session (`params.task`, `tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`) and a 2026-07-28
//! stateless client (the `io.modelcontextprotocol/tasks` extension: `resultType: "task"`, `tasks/get` with the result
//! inlined, `tasks/cancel`). Task ids are sealed to the key: another key's request, a forged id and the upstream's own
//! id name no task. The final result passes the output guardrails; a task outlives `tool_execution_timeout`;
//! `max_tasks_per_key` and `max_task_seconds` hold; a hostile upstream's huge task id is refused.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::time::{Duration, Instant};

use common::API_KEY;
use mcp::*;
use serde_json::{Value, json};

const SESSION_REVISION: &str = "2025-11-25";

/// A transparent gateway over the mock `m1` (output keyword `top secret` blocked, e-mail addresses redacted for the
/// upstream), calls bound to 2 s.
fn gateway(limits: Value) -> TestGateway {
    let mut server = mock_server("m1");
    server["config"]["args"] = json!(["--task-tool"]);
    server["input_guardrails_policy"] = json!({"enabled": true, "additional_config": {"pii_redaction": true}});
    server["output_guardrails_policy"] =
        json!({"enabled": true, "additional_config": {"blocked_keywords": ["top secret"]}});
    let common = json!({"tool_exposure": "transparent", "timeout_settings": {"tool_execution_timeout": 2},
                        "limits": limits});
    TestGateway::start(&config_with(vec![server], common))
}

/// A 2025-11-25 session of `key`.
struct Session<'a> {
    gw: &'a TestGateway,
    key: &'a str,
    id: String,
}

impl<'a> Session<'a> {
    fn open(gw: &'a TestGateway, key: &'a str) -> Session<'a> {
        Session { gw, key, id: open_session(&http(), &gw.mcp, key, SESSION_REVISION) }
    }

    fn ask(&self, method: &str, params: Value) -> Value {
        let headers = [("mcp-session-id", self.id.as_str()), ("mcp-protocol-version", SESSION_REVISION)];
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        post(&http(), &self.gw.mcp, Some(self.key), &headers, &body).message
    }
}

/// The session's `GET` stream, read by a thread: every JSON-RPC message on it goes to the returned channel.
fn listen(session: &Session) -> std::sync::mpsc::Receiver<Value> {
    use std::io::BufRead;
    let (sender, messages) = std::sync::mpsc::channel();
    let (url, key, id) = (session.gw.mcp.clone(), session.key.to_string(), session.id.clone());
    std::thread::spawn(move || {
        let client = reqwest::blocking::Client::builder().timeout(None).build().unwrap();
        let stream = client
            .get(&url)
            .header("authorization", format!("Bearer {key}"))
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &id)
            .header("mcp-protocol-version", SESSION_REVISION)
            .send();
        let Ok(stream) = stream else { return };
        for line in std::io::BufReader::new(stream).lines() {
            let Ok(line) = line else { return };
            if let Some(data) = line.strip_prefix("data:")
                && let Ok(message) = serde_json::from_str::<Value>(data.trim())
                && sender.send(message).is_err()
            {
                return;
            }
        }
    });
    messages
}

/// The `_meta` of a stateless request that declares the tasks extension.
fn tasks_meta() -> Value {
    let mut meta = stateless_meta();
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    meta
}

/// A stateless request of `method` (declaring the tasks extension unless `declare` is false).
fn stateless(gw: &TestGateway, key: &str, method: &str, name: &str, mut params: Value, declare: bool) -> Value {
    params["_meta"] = if declare { tasks_meta() } else { stateless_meta() };
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params});
    post(&http(), &gw.mcp, Some(key), &stateless_headers(method, Some(name)), &body).message
}

/// Polls `get` until the task's status is `status` (or 30 s pass); returns the last answer.
fn poll_until(status: &str, mut get: impl FnMut() -> Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = get();
        if answer["result"]["status"] == json!(status) || Instant::now() > deadline {
            return answer;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn error_code(answer: &Value) -> Option<i64> {
    answer["error"]["code"].as_i64()
}

#[test]
fn a_2025_11_25_task_is_sealed_to_its_key_outlives_the_call_timeout_and_its_result_is_guarded() {
    let gw = gateway(json!({}));
    // What the official SDKs look for before they ask for a task: the capability, and the tool's taskSupport.
    let init = post(&http(), &gw.mcp, Some(API_KEY), &[], &initialize_body(1, SESSION_REVISION)).message;
    let capabilities = &init["result"]["capabilities"];
    assert_eq!(capabilities["tasks"]["requests"]["tools"]["call"], json!({}), "{init}");
    assert!(capabilities["extensions"]["io.modelcontextprotocol/tasks"].is_object(), "{init}");
    let alice = Session::open(&gw, API_KEY);
    let tools = alice.ask("tools/list", json!({}));
    let listed = tools["result"]["tools"].as_array().cloned().unwrap_or_default();
    let task_tool = listed.iter().find(|tool| tool["name"] == json!("m1__task_run")).cloned().unwrap_or_default();
    assert_eq!(task_tool["execution"]["taskSupport"], json!("required"), "{tools}");
    let echo = listed.iter().find(|tool| tool["name"] == json!("m1__echo")).cloned().unwrap_or_default();
    assert!(echo.is_object() && echo.get("execution").is_none(), "{tools}");
    let args = json!({"ms": 3000, "text": "the report is top secret"});
    let created = alice.ask("tools/call", json!({"name": "m1__task_run", "arguments": args, "task": {"ttl": 60000}}));
    let task = &created["result"]["task"];
    let id = task["taskId"].as_str().unwrap_or_else(|| panic!("no task: {created}")).to_string();
    assert!(id.starts_with("mcpgwt1.") && !id.contains("mock-task"), "a sealed id: {id}");
    assert_eq!((task["status"].clone(), task["ttl"].clone()), (json!("working"), json!(60000)), "{created}");

    // Another key, a forged id and the upstream's own id name no task; nothing is relayed for them.
    let bob = Session::open(&gw, KEY_B);
    let (alice_stream, bob_stream) = (listen(&alice), listen(&bob));
    for (who, forged) in [
        (&bob, id.clone()),
        (&alice, "mcpgwt1.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA".into()),
        (&alice, "mock-task-1".into()),
    ] {
        let refused = who.ask("tasks/get", json!({"taskId": forged}));
        assert_eq!(error_code(&refused), Some(-32602), "{refused}");
        let refused = who.ask("tasks/result", json!({"taskId": forged}));
        assert_eq!(error_code(&refused), Some(-32602), "{refused}");
    }
    let listed = bob.ask("tasks/list", json!({}));
    assert_eq!(listed["result"]["tasks"], json!([]), "bob sees none of alice's tasks: {listed}");
    let listed = alice.ask("tasks/list", json!({}));
    assert_eq!(listed["result"]["tasks"][0]["taskId"], json!(id), "{listed}");

    // The task runs longer than tool_execution_timeout (2 s) and completes.
    let done = poll_until("completed", || alice.ask("tasks/get", json!({"taskId": id})));
    assert_eq!(done["result"]["status"], json!("completed"), "{done}");
    // The upstream's status notification reaches alice's session under the sealed id, and not bob's.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let message = alice_stream.recv_timeout(left).expect("no notifications/tasks/status on alice's stream");
        if message["method"] == json!("notifications/tasks/status") {
            break message;
        }
    };
    assert_eq!(
        (status["params"]["taskId"].clone(), status["params"]["status"].clone()),
        (json!(id), json!("completed"))
    );
    assert!(!status.to_string().contains("mock-task"), "the upstream's id is not shown: {status}");
    assert!(bob_stream.try_recv().is_err(), "bob hears nothing of alice's task");
    // Its final result passes the output guardrails as a call's does.
    let blocked = alice.ask("tasks/result", json!({"taskId": id}));
    let result = &blocked["result"];
    assert_eq!(result["isError"], json!(true), "{blocked}");
    assert_eq!(result["structuredContent"]["error_code"], json!("GUARDRAIL_VIOLATION"), "{blocked}");
    assert_eq!(result["structuredContent"]["stage"], json!("output"), "{blocked}");

    // A clean result comes as the upstream sent it, tied to the sealed id.
    let args = json!({"ms": 10, "text": "all clear"});
    let created = alice.ask("tools/call", json!({"name": "m1__task_run", "arguments": args, "task": {}}));
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    let result = alice.ask("tasks/result", json!({"taskId": id}));
    assert_eq!(result["result"]["content"][0]["text"], json!("all clear"), "{result}");
    assert_eq!(result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], json!(id), "{result}");

    // Personal data went upstream redacted and comes back restored in the task's result, as in a call's.
    let args = json!({"ms": 10, "text": "write to jane.doe@example.com"});
    let created = alice.ask("tools/call", json!({"name": "m1__task_run", "arguments": args, "task": {}}));
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    let result = alice.ask("tasks/result", json!({"taskId": id}));
    assert_eq!(result["result"]["content"][0]["text"], json!("write to jane.doe@example.com"), "{result}");
}

/// The real server-everything's task tool (`simulate-research-query`, 2025-11-25 tasks of the TypeScript SDK) as the
/// upstream: created, polled and its report fetched through the gateway.
#[test]
fn server_everythings_research_task_runs_through_the_gateway() {
    let bin = everything_bin();
    let server = json!({"server_name": "everything", "config": {"command": bin.to_str().unwrap(), "args": []}});
    let gw = TestGateway::start(&config_with(vec![server], json!({"tool_exposure": "transparent"})));
    let session = Session::open(&gw, API_KEY);
    let args = json!({"topic": "gateways"});
    let created = session.ask(
        "tools/call",
        json!({"name": "everything__simulate-research-query", "arguments": args, "task": {"ttl": 60000}}),
    );
    let id = created["result"]["task"]["taskId"].as_str().unwrap_or_else(|| panic!("no task: {created}")).to_string();
    assert!(id.starts_with("mcpgwt1."), "{created}");
    let done = poll_until("completed", || session.ask("tasks/get", json!({"taskId": id})));
    assert_eq!(done["result"]["status"], json!("completed"), "{done}");
    let report = session.ask("tasks/result", json!({"taskId": id}));
    let text = report["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("Research Report") && text.contains("gateways"), "{report}");
}

#[test]
fn a_2026_07_28_task_has_its_result_inlined_and_can_be_cancelled() {
    let gw = gateway(json!({}));
    for shape in ["extension", "2025"] {
        let args = json!({"ms": 300, "text": format!("done {shape}"), "shape": shape});
        let created = stateless(
            &gw,
            API_KEY,
            "tools/call",
            "m1__task_run",
            json!({"name": "m1__task_run", "arguments": args}),
            true,
        );
        let result = &created["result"];
        assert_eq!(result["resultType"], json!("task"), "{created}");
        assert!(result["ttlMs"].is_u64() && result.get("task").is_none(), "{created}");
        let id = result["taskId"].as_str().unwrap_or_default().to_string();
        let done = poll_until("completed", || stateless(&gw, API_KEY, "tasks/get", &id, json!({"taskId": id}), true));
        assert_eq!(done["result"]["resultType"], json!("complete"), "{done}");
        assert_eq!(done["result"]["result"]["content"][0]["text"], json!(format!("done {shape}")), "{done}");
    }
    // Cancelled: acknowledged, and the task says so.
    let args = json!({"ms": 60000, "text": "never", "shape": "extension"});
    let created =
        stateless(&gw, API_KEY, "tools/call", "m1__task_run", json!({"name": "m1__task_run", "arguments": args}), true);
    let id = created["result"]["taskId"].as_str().unwrap_or_default().to_string();
    let cancelled = stateless(&gw, API_KEY, "tasks/cancel", &id, json!({"taskId": id}), true);
    assert_eq!(cancelled["result"], json!({"resultType": "complete"}), "{cancelled}");
    let seen = stateless(&gw, API_KEY, "tasks/get", &id, json!({"taskId": id}), true);
    assert_eq!(seen["result"]["status"], json!("cancelled"), "{seen}");
    // Another key's request is refused; a request without the extension declared gets -32021.
    let refused = stateless(&gw, KEY_B, "tasks/get", &id, json!({"taskId": id}), true);
    assert_eq!(error_code(&refused), Some(-32602), "{refused}");
    let undeclared = stateless(&gw, API_KEY, "tasks/get", &id, json!({"taskId": id}), false);
    assert_eq!(error_code(&undeclared), Some(-32021), "{undeclared}");
}

#[test]
fn tasks_per_key_and_task_seconds_are_bounded_and_a_huge_task_id_is_refused() {
    let gw = gateway(json!({"max_tasks_per_key": 2, "max_task_seconds": 3}));
    let alice = Session::open(&gw, API_KEY);
    let long = |session: &Session| {
        let args = json!({"ms": 60000, "text": "long"});
        session.ask("tools/call", json!({"name": "m1__task_run", "arguments": args, "task": {}}))
    };
    let first = long(&alice);
    let id = first["result"]["task"]["taskId"].as_str().unwrap_or_default().to_string();
    assert!(id.starts_with("mcpgwt1."), "{first}");
    assert!(long(&alice)["result"]["task"].is_object());
    let third = long(&alice);
    assert_eq!(third["result"]["isError"], json!(true), "{third}");
    assert_eq!(third["result"]["structuredContent"]["error_code"], json!("RATE_LIMITED"), "{third}");
    // Another key has places of its own.
    let bob = Session::open(&gw, KEY_B);
    assert!(long(&bob)["result"]["task"].is_object());
    // A hostile upstream's huge id is not kept.
    let args = json!({"ms": 10, "text": "x", "id_bytes": 100_000});
    let huge = bob.ask("tools/call", json!({"name": "m1__task_run", "arguments": args, "task": {}}));
    assert_eq!(huge["result"]["isError"], json!(true), "{huge}");
    // After max_task_seconds the task is cancelled upstream and forgotten, and its places are free again.
    let deadline = Instant::now() + Duration::from_secs(20);
    while error_code(&alice.ask("tasks/get", json!({"taskId": id}))) != Some(-32602) {
        assert!(Instant::now() < deadline, "the task outlived max_task_seconds");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(gw.gw.metric("mcpgw_limit_hits_total{limit=\"task_seconds\"}") >= 1.0);
    assert!(gw.gw.metric("mcpgw_limit_hits_total{limit=\"tasks_per_key\"}") >= 1.0);
    assert!(long(&alice)["result"]["task"].is_object(), "a place is free again");
}
