//! Contract 15, "MCP Apps", from outside: two app servers behind the gateway in transparent mode, each with a view
//! `ui://dashboard/view.html` and a tool that names it. Their views keep the `ui://` scheme and are namespaced like
//! tools, so neither shadows the other; every place a client sees a view names it by its exposed URI (resource
//! listings, `resources/read`, a tool's `_meta` in `tools/list`, a call result's `_meta`); a read reaches the right
//! server under the server's own URI; and a view's call of its own server's tool by the server's name for it is
//! routed to that server (a name two apps share is refused). The upstream is `tests/fixtures/hostile_upstream.py`.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::path::{Path, PathBuf};

use common::API_KEY;
use mcp::*;
use serde_json::{Value, json};

const VIEW: &str = "ui://dashboard/view.html";

/// An app server `name` whose tools are `tools` (each naming the view), recording what it receives in `record`.
fn app(dir: &Path, name: &str, tools: &[&str]) -> (Value, PathBuf) {
    let record = dir.join(format!("{name}.jsonl"));
    let tools: Vec<Value> = tools
        .iter()
        .map(|tool| {
            json!({"name": tool, "inputSchema": {"type": "object"},
                "_meta": {"ui": {"resourceUri": VIEW, "visibility": ["app"]}, "ui/resourceUri": VIEW}})
        })
        .collect();
    let offers = json!({
        "record": record,
        "tools": tools,
        "resources": [{"uri": VIEW, "name": "dashboard", "mimeType": "text/html;profile=mcp-app"},
                      {"uri": format!("file:///{name}/notes.txt"), "name": "notes"}],
        "resource_text": format!("<html>{name}</html>"),
        "call_meta": {"ui": {"resourceUri": VIEW}},
    });
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, offers.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile_upstream.py");
    let server = json!({"server_name": name, "config": {"command": "python3",
        "args": [script.to_str().unwrap(), file.to_str().unwrap()]}});
    (server, record)
}

/// What the upstream received, one message per line.
fn received(record: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(record).unwrap_or_default();
    text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
}

#[test]
fn views_are_namespaced_named_everywhere_and_called_back_by_their_servers_names() {
    let dir = tempfile::tempdir().unwrap();
    let (weather, weather_record) = app(dir.path(), "weather", &["forecast", "refresh"]);
    let (maps, maps_record) = app(dir.path(), "maps", &["route"]);
    let gw = TestGateway::start(&config_with(vec![weather, maps], json!({"tool_exposure": "transparent"})));
    let client = http();
    let version = "2025-11-25";
    let session = open_session(&client, &gw.mcp, API_KEY, version);
    let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", version)];
    let ask = |id: u64, method: &str, params: Value| {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        post(&client, &gw.mcp, Some(API_KEY), &headers, &body).message
    };

    // Both views listed, each under its server's name; other URIs unchanged.
    let listed = ask(2, "resources/list", json!({}));
    let uris: Vec<&str> =
        listed["result"]["resources"].as_array().unwrap().iter().filter_map(|r| r["uri"].as_str()).collect();
    assert_eq!(
        uris,
        [
            "ui://weather__dashboard/view.html",
            "file:///weather/notes.txt",
            "ui://maps__dashboard/view.html",
            "file:///maps/notes.txt"
        ],
        "{listed}"
    );

    // A tool names its own server's view, in the structured key and the legacy one.
    let tools = ask(3, "tools/list", json!({}));
    let tools = tools["result"]["tools"].as_array().unwrap().clone();
    let tool =
        |name: &str| tools.iter().find(|t| t["name"] == json!(name)).cloned().unwrap_or_else(|| panic!("{name}"));
    assert_eq!(tool("weather__forecast")["_meta"]["ui"]["resourceUri"], json!("ui://weather__dashboard/view.html"));
    assert_eq!(tool("weather__forecast")["_meta"]["ui/resourceUri"], json!("ui://weather__dashboard/view.html"));
    assert_eq!(tool("maps__route")["_meta"]["ui"]["resourceUri"], json!("ui://maps__dashboard/view.html"));
    assert_eq!(tool("maps__route")["_meta"]["ui"]["visibility"], json!(["app"]));

    // The read reaches the server whose view it is, under the server's own URI, and answers the exposed one.
    let read = ask(4, "resources/read", json!({"uri": "ui://maps__dashboard/view.html"}));
    assert_eq!(read["result"]["contents"][0]["uri"], json!("ui://maps__dashboard/view.html"), "{read}");
    assert_eq!(read["result"]["contents"][0]["text"], json!("<html>maps</html>"), "{read}");
    let reads: Vec<Value> = received(&maps_record).into_iter().filter(|m| m["method"] == "resources/read").collect();
    assert_eq!(reads.last().map(|m| m["params"]["uri"].clone()), Some(json!(VIEW)), "{reads:?}");
    let unknown = ask(5, "resources/read", json!({"uri": "ui://nobody__dashboard/view.html"}));
    assert!(unknown.get("error").is_some(), "a view of no server: {unknown}");

    // A call's result names the view by its exposed URI.
    let called = ask(6, "tools/call", json!({"name": "weather__forecast", "arguments": {}}));
    assert_eq!(called["result"]["_meta"]["ui"]["resourceUri"], json!("ui://weather__dashboard/view.html"), "{called}");

    // A view calls its own server's tool by the server's name for it: routed to that server, through its guardrails
    // and audit like any call; a name both apps have (`relay`) is nobody's.
    let refreshed = ask(7, "tools/call", json!({"name": "refresh", "arguments": {}}));
    assert!(refreshed.get("result").is_some(), "{refreshed}");
    assert_eq!(refreshed["result"]["_meta"]["ui"]["resourceUri"], json!("ui://weather__dashboard/view.html"));
    let calls: Vec<Value> = received(&weather_record).into_iter().filter(|m| m["method"] == "tools/call").collect();
    assert_eq!(calls.last().map(|m| m["params"]["name"].clone()), Some(json!("refresh")), "{calls:?}");
    let shared = ask(8, "tools/call", json!({"name": "relay", "arguments": {}}));
    assert_eq!(shared["error"]["code"], json!(-32602), "a name two apps have: {shared}");
}
