//! A real upstream from npm: `@modelcontextprotocol/server-everything` in its stdio mode behind the gateway, reached
//! with rmcp's client over streamable HTTP. The package is installed once into `target/npm-peers` (see
//! `mcp::everything_bin`); without npm this test fails with a message saying so.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::API_KEY;
use mcp::*;
use serde_json::json;

#[test]
fn server_everything_is_discovered_and_its_tools_are_called_through_the_gateway() {
    let bin = everything_bin();
    let server = json!({
        "server_name": "everything",
        "description": "MCP reference server",
        "config": {"command": bin.to_str().unwrap(), "args": []}
    });
    let gw = TestGateway::start(&config_with(vec![server], json!({})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let found = call(&client, "gw_discover_all_tools", json!({"server_name": "everything"})).await;
        assert_eq!(found["status"], json!("success"), "{found}");
        assert_eq!(found["source"], json!("discovery"), "{found}");
        let tools = found["tools"].as_array().expect("tools");
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        assert!(names.contains(&"echo") && names.contains(&"get-sum"), "server-everything tools: {names:?}");
        let echo = tools.iter().find(|t| t["name"] == json!("echo")).unwrap();
        assert_eq!(echo["inputSchema"]["properties"]["message"]["type"], json!("string"), "{echo}");
        let meta = &found["server_metadata"];
        assert!(meta["name"].as_str().is_some_and(|n| n.contains("everything")), "server_metadata: {found}");
        assert!(meta["version"].as_str().is_some_and(|v| !v.is_empty()), "server_metadata: {found}");

        let again = call(&client, "gw_discover_all_tools", json!({"server_name": "everything"})).await;
        assert_eq!(again["source"], json!("cache"), "{again}");

        let answer = call(
            &client,
            "gw_secure_call_tools",
            calls(
                "everything",
                &[
                    ("echo", json!({"message": "hello from the gateway"})),
                    ("no-such-tool", json!({})),
                    ("get-sum", json!({"a": 19, "b": 23})),
                ],
            ),
        )
        .await;
        assert_eq!(answer["status"], json!("success"), "{answer}");
        let results = answer["results"].as_array().expect("results");
        assert_eq!(results.len(), 3, "{answer}");
        let echoed = success_text(&results[0], "echo");
        assert!(echoed.contains("hello from the gateway"), "echo answered {echoed:?}");
        assert_error(&results[1], "TOOL_NOT_FOUND");
        let sum = success_text(&results[2], "get-sum");
        assert!(sum.contains("42"), "get-sum answered {sum:?}");
        client.cancel().await.unwrap();
    });
}
