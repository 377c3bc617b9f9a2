//! Contract 15, "Changes reach open clients" and "One slow server does not stall the others", from outside: a
//! session of 2025-11-25 (on its `GET` stream) and a 2026-07-28 `subscriptions/listen` stream are told when a reload
//! changes what their key sees, and only then; the listen stream also carries an upstream's list change and the
//! `resources/updated` of a resource it named; listen streams are bounded per key; a transparent listing does not
//! wait for a server that starts slowly past its `discovery_timeout`, and a list change follows when it is ready.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{API_KEY, CONFIG_ID, SPARE_CONFIG_ID};
use mcp::*;
use reqwest::Method;
use serde_json::{Value, json};

/// A 2025-11-25 client that records the list changes it is told of, in order.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<&'static str>>>, Arc<tokio::sync::Notify>);

impl Heard {
    fn push(&self, list: &'static str) {
        self.0.lock().unwrap().push(list);
        self.1.notify_waiters();
    }

    fn count(&self, list: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|heard| **heard == list).count()
    }

    async fn wait_for(&self, list: &str, count: usize) -> bool {
        eventually(Duration::from_secs(20), || async { self.count(list) >= count }).await
    }
}

impl rmcp::ClientHandler for Heard {
    async fn on_tool_list_changed(&self, _: rmcp::service::NotificationContext<rmcp::RoleClient>) {
        self.push("tools");
    }
    async fn on_prompt_list_changed(&self, _: rmcp::service::NotificationContext<rmcp::RoleClient>) {
        self.push("prompts");
    }
    async fn on_resource_list_changed(&self, _: rmcp::service::NotificationContext<rmcp::RoleClient>) {
        self.push("resources");
    }
    async fn on_resource_updated(
        &self,
        _: rmcp::model::ResourceUpdatedNotificationParam,
        _: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.push("updated");
    }
}

async fn session(gw: &TestGateway, heard: &Heard) -> rmcp::service::RunningService<rmcp::RoleClient, Heard> {
    use rmcp::ServiceExt;
    heard.clone().serve(http_transport(&gw.mcp, API_KEY, &[])).await.expect("connect")
}

/// Adds a mock server to `config` through the admin API (blocking: from a test's runtime, in place).
fn add_server(gw: &TestGateway, config: &str, name: &str) {
    tokio::task::block_in_place(|| add_server_now(gw, config, name));
}

fn add_server_now(gw: &TestGateway, config: &str, name: &str) {
    let added = admin(gw, Method::POST, &format!("/api/v1/configs/{config}/servers"), Some(&mock_server(name)));
    assert_eq!(added.status, 201, "{:?}", added.body);
}

#[test]
fn a_reload_tells_the_sessions_whose_view_it_changes_and_no_other() {
    let gw = TestGateway::start(&config_with(vec![mock_server("m1")], json!({"tool_exposure": "transparent"})));
    runtime().block_on(async {
        let heard = Heard::default();
        let client = session(&gw, &heard).await;
        let before = client.list_all_tools().await.unwrap().len();
        // A server added to another configuration changes nothing this session sees; one added to its own does.
        // Reloads are told in order on one stream, so had the first been told, it would be heard first.
        add_server(&gw, SPARE_CONFIG_ID, "elsewhere");
        add_server(&gw, CONFIG_ID, "m2");
        assert!(heard.wait_for("tools", 1).await, "tools/list_changed after a server was added");
        client.list_all_tools().await.unwrap();
        assert_eq!(heard.count("tools"), 1, "one change told, not the other configuration's: {:?}", heard.0);
        assert!(heard.wait_for("prompts", 1).await && heard.wait_for("resources", 1).await, "{:?}", heard.0);
        let after = client.list_all_tools().await.unwrap().len();
        assert!(after > before, "the new server's tools are listed: {before} -> {after}");
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_session_in_the_gateway_view_is_told_when_a_reload_turns_on_both() {
    let gw = TestGateway::start(&config_with(vec![mock_server("m1")], json!({})));
    runtime().block_on(async {
        let heard = Heard::default();
        let client = session(&gw, &heard).await;
        let capabilities = serde_json::to_value(&client.peer_info().unwrap().capabilities).unwrap();
        assert_eq!(capabilities["tools"]["listChanged"], json!(true), "{capabilities}");
        assert_eq!(client.list_all_tools().await.unwrap().len(), GW_TOOLS.len());
        // The file is rewritten (the watcher's reload path) with the configuration's view switched to "both".
        let mut file = common::read_json(gw.config_path());
        file["common_mcp_gateway_config"]["tool_exposure"] = json!("both");
        common::replace_json(gw.config_path(), &file);
        assert!(heard.wait_for("tools", 1).await, "tools/list_changed after the view changed");
        let tools = client.list_all_tools().await.unwrap();
        assert!(tools.len() > GW_TOOLS.len(), "the upstream tools are listed now: {}", tools.len());
        client.cancel().await.unwrap();
    });
}

/// A 2026-07-28 listen stream: its events (JSON-RPC messages) as they arrive, and its HTTP status.
struct Listen {
    events: mpsc::Receiver<Value>,
    status: u16,
}

impl Listen {
    /// Opens a stream that the client closes after `lifetime` (a blocking read cannot be interrupted otherwise).
    fn open(gw: &TestGateway, notifications: Value, lifetime: Duration) -> Listen {
        let body = json!({"jsonrpc": "2.0", "id": 77, "method": "subscriptions/listen",
                          "params": {"_meta": stateless_meta(), "notifications": notifications}});
        let response = common::client_with_timeout(lifetime)
            .post(&gw.mcp)
            .header("accept", ACCEPT_BOTH)
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {API_KEY}"))
            .header("mcp-protocol-version", STATELESS_REVISION)
            .header("mcp-method", "subscriptions/listen")
            .body(body.to_string())
            .send()
            .expect("listen");
        let status = response.status().as_u16();
        let (sender, events) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(response).lines() {
                let Ok(line) = line else { break };
                let data = line.strip_prefix("data:").map(str::trim).unwrap_or(&line);
                if let Ok(event) = serde_json::from_str::<Value>(data)
                    && sender.send(event).is_err()
                {
                    break;
                }
            }
        });
        Listen { events, status }
    }

    /// The next event whose `method` is `method`, within `within`.
    fn next(&self, method: &str, within: Duration) -> Option<Value> {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.events.recv_timeout(left) {
                Ok(event) if event["method"] == json!(method) => return Some(event),
                Ok(_) => continue,
                Err(_) => return None,
            }
        }
        None
    }
}

fn hostile_upstream(dir: &Path) -> Value {
    hostile_upstream_offering(
        dir,
        json!({"resources": [{"uri": "test://doc", "name": "doc", "mimeType": "text/plain"}]}),
    )
}

fn stateless_call(gw: &TestGateway, tool: &str, args: Value) -> Rpc {
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": tool, "arguments": args, "_meta": stateless_meta()}});
    post(&http(), &gw.mcp, Some(API_KEY), &stateless_headers("tools/call", Some(tool)), &body)
}

#[test]
fn a_listen_stream_hears_reloads_upstream_list_changes_and_updates_of_the_resources_it_named() {
    let dir = tempfile::tempdir().unwrap();
    let servers = vec![mock_server("m1"), hostile_upstream(dir.path())];
    let gw = TestGateway::start(&config_with(servers, json!({"tool_exposure": "transparent"})));
    let all = json!({"toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true,
                     "resourceSubscriptions": ["test://doc"]});
    let listen = Listen::open(&gw, all, Duration::from_secs(600));
    assert_eq!(listen.status, 200);
    let ack = listen.next("notifications/subscriptions/acknowledged", Duration::from_secs(30)).expect("acknowledged");
    assert_eq!(ack["params"]["notifications"]["toolsListChanged"], json!(true), "{ack}");
    assert_eq!(ack["params"]["notifications"]["resourceSubscriptions"], json!(["test://doc"]), "{ack}");

    // An update of the resource it named (the upstream subscription is made once the stream is acknowledged: the
    // update is sent until it is heard).
    let update = json!({"steps": [{"notify": "notifications/resources/updated", "params": {"uri": "test://doc"}}]});
    let mut updated = None;
    for _ in 0..40 {
        let called = stateless_call(&gw, "up__relay", update.clone());
        assert_eq!(called.status, 200, "{}", called.text);
        updated = listen.next("notifications/resources/updated", Duration::from_millis(500));
        if updated.is_some() {
            break;
        }
    }
    let updated = updated.expect("notifications/resources/updated of test://doc");
    assert_eq!(updated["params"]["uri"], json!("test://doc"), "{updated}");
    assert_eq!(updated["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], json!(77), "{updated}");

    // An upstream's own list change.
    let changed = stateless_call(&gw, "m1__changed", json!({}));
    assert_eq!(changed.status, 200, "{}", changed.text);
    assert!(listen.next("notifications/tools/list_changed", Duration::from_secs(20)).is_some(), "upstream change");

    // A reload of another configuration is not told; one of its own is (in order on the stream).
    add_server(&gw, SPARE_CONFIG_ID, "elsewhere");
    add_server(&gw, CONFIG_ID, "m2");
    assert!(listen.next("notifications/tools/list_changed", Duration::from_secs(20)).is_some(), "reload");
    let changed = stateless_call(&gw, "m1__changed", json!({}));
    assert_eq!(changed.status, 200, "{}", changed.text);
    assert!(listen.next("notifications/tools/list_changed", Duration::from_secs(20)).is_some());
    assert!(listen.events.try_recv().is_err(), "nothing else was told");

    // A reload that hides the resource from the caller's project: its list change is told, and the updates of the
    // resource, subscribed before, no longer are (curation is decided as it is now, not as it was).
    let path = gw.config_path();
    let mut file: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    file["projects"][common::PROJECT_ID]["tool_filter"] = json!({"deny": ["up__test://doc"]});
    std::fs::write(path, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
    assert!(listen.next("notifications/resources/list_changed", Duration::from_secs(20)).is_some(), "hidden");
    let called = stateless_call(&gw, "up__relay", update.clone());
    assert_eq!(called.status, 200, "{}", called.text);
    // The upstream sent the update before its answer; an upstream list change told after it comes after it too.
    let changed = stateless_call(&gw, "m1__changed", json!({}));
    assert_eq!(changed.status, 200, "{}", changed.text);
    let next = listen.events.recv_timeout(Duration::from_secs(20)).expect("the list change");
    assert_eq!(
        next["method"],
        json!("notifications/tools/list_changed"),
        "a hidden resource's update was told: {next}"
    );
}

#[test]
fn listen_streams_are_bounded_per_key() {
    let config = config_with(vec![mock_server("m1")], json!({"limits": {"max_sessions_per_key": 2}}));
    let gw = TestGateway::start(&config);
    let tools = json!({"toolsListChanged": true});
    // The first closes itself after a few seconds (its client's timeout), the second stays.
    let first = Listen::open(&gw, tools.clone(), Duration::from_secs(6));
    let second = Listen::open(&gw, tools.clone(), Duration::from_secs(600));
    for open in [&first, &second] {
        assert_eq!(open.status, 200);
        assert!(open.next("notifications/subscriptions/acknowledged", Duration::from_secs(30)).is_some());
    }
    let refused = post(
        &http(),
        &gw.mcp,
        Some(API_KEY),
        &stateless_headers("subscriptions/listen", None),
        &json!({
        "jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen",
        "params": {"_meta": stateless_meta(), "notifications": tools}}),
    );
    assert_eq!(refused.status, 429, "{}", refused.text);
    assert_eq!(refused.message["error"]["data"]["error_code"], json!("SESSION_LIMIT"), "{}", refused.text);
    // A stream closed by its client gives its place back.
    drop(first);
    let reopened = common::wait_until(Duration::from_secs(30), || {
        let again = Listen::open(&gw, json!({"toolsListChanged": true}), Duration::from_secs(600));
        again.status == 200 && again.next("notifications/subscriptions/acknowledged", Duration::from_secs(5)).is_some()
    });
    assert!(reopened, "a place freed by a closed stream is given to a new one");
    drop(second);
}

#[test]
fn a_listing_leaves_out_a_server_slower_than_its_discovery_timeout_and_tells_when_it_is_ready() {
    let mut slow = mock_server("slow");
    slow["config"]["args"] = json!(["--start-delay-ms", "4000"]);
    slow["discovery_timeout"] = json!(1);
    let gw = TestGateway::start(&config_with(vec![mock_server("fast"), slow], json!({"tool_exposure": "transparent"})));
    runtime().block_on(async {
        let heard = Heard::default();
        let client = session(&gw, &heard).await;
        let asked = Instant::now();
        let first: Vec<String> =
            client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.to_string()).collect();
        let took = asked.elapsed();
        assert!(
            took < Duration::from_millis(3500),
            "answered within about the slow server's discovery_timeout: {took:?}"
        );
        assert!(first.iter().any(|name| name.starts_with("fast__")), "{first:?}");
        assert!(!first.iter().any(|name| name.starts_with("slow__")), "{first:?}");
        assert!(heard.wait_for("tools", 1).await, "tools/list_changed once the slow server is ready");
        let next: Vec<String> =
            client.list_all_tools().await.unwrap().into_iter().map(|t| t.name.to_string()).collect();
        assert!(next.iter().any(|name| name.starts_with("slow__")), "{next:?}");
        assert!(next.iter().any(|name| name.starts_with("fast__")), "{next:?}");
        client.cancel().await.unwrap();
    });
    let logs = gw.logs();
    assert!(logs.contains("not ready within its discovery_timeout") && logs.contains("slow"), "WARN names it");
}

#[test]
fn a_listen_stream_ends_with_its_final_result_when_the_gateway_drains() {
    let config = config_with(vec![mock_server("m1")], json!({}));
    let gw = TestGateway::start_with(&config, &[("GW_SHUTDOWN_GRACE_SECONDS", "30")]);
    let listen = Listen::open(&gw, json!({"toolsListChanged": true}), Duration::from_secs(600));
    assert!(listen.next("notifications/subscriptions/acknowledged", Duration::from_secs(30)).is_some());
    let drained = Instant::now();
    let signalled = std::process::Command::new("kill").args(["-TERM", &gw.gw.pid().to_string()]).status();
    assert!(signalled.is_ok_and(|s| s.success()));
    // The final result of the listen request (its id, `resultType` "complete"), long before the grace period ends.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ended = None;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match listen.events.recv_timeout(left) {
            Ok(event) if event.get("result").is_some() => {
                ended = Some(event);
                break;
            }
            Ok(_) => continue,
            Err(_) => break,
        }
    }
    let ended = ended.expect("the stream's final result when the drain began");
    assert_eq!(ended["id"], json!(77), "{ended}");
    assert_eq!(ended["result"]["resultType"], json!("complete"), "{ended}");
    assert!(drained.elapsed() < Duration::from_secs(10), "ended by the drain, not by the grace period");
}

#[test]
fn a_stdio_session_is_told_when_a_reload_changes_its_view() {
    use rmcp::ServiceExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    common::write_json(&path, &config_with(vec![mock_server("m1")], json!({})));
    let cmd = stdio_command(&path, &[("GW_GATEWAY_KEY", API_KEY)]);
    runtime().block_on(async {
        let (transport, _) = rmcp::transport::TokioChildProcess::builder(tokio::process::Command::from(cmd))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn mcpgw serve --transport stdio");
        let heard = Heard::default();
        let client = heard.clone().serve(transport).await.expect("initialize over stdio");
        assert_eq!(client.list_all_tools().await.unwrap().len(), GW_TOOLS.len());
        let mut file = common::read_json(&path);
        file["common_mcp_gateway_config"]["tool_exposure"] = json!("both");
        common::replace_json(&path, &file);
        assert!(heard.wait_for("tools", 1).await, "tools/list_changed over stdio after the view changed");
        assert!(client.list_all_tools().await.unwrap().len() > GW_TOOLS.len());
        client.cancel().await.unwrap();
    });
}

/// How many messages of `method` the hostile upstream of `dir` received.
fn received(dir: &Path, method: &str) -> usize {
    let record = std::fs::read_to_string(dir.join("received.jsonl")).unwrap_or_default();
    record
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["method"] == json!(method))
        .count()
}

#[test]
#[allow(deprecated)] // resources/subscribe is how a 2025-11-25 session subscribes
fn a_subscription_of_a_shared_process_ends_upstream_only_with_its_last_holder() {
    let dir = tempfile::tempdir().unwrap();
    let gw =
        TestGateway::start(&config_with(vec![hostile_upstream(dir.path())], json!({"tool_exposure": "transparent"})));
    let doc = || serde_json::from_value::<rmcp::model::SubscribeRequestParams>(json!({"uri": "test://doc"})).unwrap();
    let undoc =
        || serde_json::from_value::<rmcp::model::UnsubscribeRequestParams>(json!({"uri": "test://doc"})).unwrap();
    runtime().block_on(async {
        let (heard_a, heard_b) = (Heard::default(), Heard::default());
        let a = session(&gw, &heard_a).await;
        let b = session(&gw, &heard_b).await;
        a.subscribe(doc()).await.expect("a subscribes");
        b.subscribe(doc()).await.expect("b subscribes");
        // One client's unsubscribe does not silence the other's updates.
        a.unsubscribe(undoc()).await.expect("a unsubscribes");
        assert_eq!(received(dir.path(), "resources/unsubscribe"), 0, "b still holds the subscription");
        let steps = json!({"steps": [{"notify": "notifications/resources/updated", "params": {"uri": "test://doc"}}]});
        let params =
            rmcp::model::CallToolRequestParams::new("up__relay").with_arguments(steps.as_object().unwrap().clone());
        a.call_tool(params).await.expect("an update");
        assert!(heard_b.wait_for("updated", 1).await, "b hears the update");
        assert_eq!(heard_a.count("updated"), 0, "a unsubscribed");
        // The last holder's session ends: the upstream is told.
        b.cancel().await.unwrap();
        let ended =
            eventually(Duration::from_secs(20), || async { received(dir.path(), "resources/unsubscribe") == 1 }).await;
        assert!(ended, "the subscription ended upstream with its last holder's session");
        a.cancel().await.unwrap();
    });
    // A listen stream that alone named the resource ends its subscription when it closes.
    let subscribed = received(dir.path(), "resources/subscribe");
    let listen = Listen::open(&gw, json!({"resourceSubscriptions": ["test://doc"]}), Duration::from_secs(4));
    assert!(listen.next("notifications/subscriptions/acknowledged", Duration::from_secs(30)).is_some());
    assert!(common::wait_until(Duration::from_secs(20), || received(dir.path(), "resources/subscribe") > subscribed));
    drop(listen);
    let ended = common::wait_until(Duration::from_secs(30), || received(dir.path(), "resources/unsubscribe") == 2);
    assert!(ended, "the listen stream's subscription ended upstream when it closed");
}
