//! Transparent mode (contract section 8) from outside, with the mock upstream: `tool_exposure`, exposed names and
//! prefixes, names claimed twice, calls through the whole per-call pipeline (guardrails, PII), the upstream's result
//! unchanged, unknown and hidden tools refused as -32602, and curation (`tool_filter`) in every mode and call path.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::{API_KEY, CONFIG_ID, PROJECT_ID};
use mcp::*;
use serde_json::{Value, json};

/// The mock upstream's tools, in its order.
const MOCK_TOOLS: [&str; 12] =
    ["echo", "add", "slow", "crash", "large", "garbage", "env", "pid", "fail", "rpc_error", "raw", "changed"];

fn mock_tools() -> Vec<&'static str> {
    MOCK_TOOLS.to_vec()
}

/// A config of `servers` whose gateway-wide settings are `common`.
fn config(servers: Vec<Value>, common: Value) -> Value {
    config_with(servers, common)
}

fn prefixed(prefix: &str) -> Vec<String> {
    mock_tools().iter().map(|t| format!("{prefix}{t}")).collect()
}

#[test]
fn transparent_lists_and_calls_upstream_tools_under_their_exposed_names() {
    let gw = TestGateway::start(&config(vec![mock_server("m1")], json!({"tool_exposure": "transparent"})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let names = tool_names(&client).await;
        assert_eq!(names, prefixed("m1__"), "only the upstream's tools, in its order");
        // The definition is the upstream's, renamed.
        let tools = client.list_all_tools().await.unwrap();
        let add = tools.iter().find(|t| t.name == "m1__add").unwrap();
        assert_eq!(add.description.as_deref(), Some("Adds two numbers."));
        assert_eq!(add.input_schema.get("required"), Some(&json!(["a", "b"])));

        // The upstream's result as it came: no envelope.
        let result = try_call(&client, "m1__echo", json!({"text": "hello"})).await.unwrap();
        assert_eq!(upstream_text(&result), "hello", "{result}");
        assert_ne!(result.get("isError"), Some(&json!(true)), "{result}");
        assert!(result["structuredContent"].get("status").is_none(), "not the gateway's envelope: {result}");
        // A tool error stays the upstream's isError result.
        let failed = try_call(&client, "m1__fail", json!({"message": "no such file"})).await.unwrap();
        assert_eq!(failed["isError"], json!(true), "{failed}");
        assert_eq!(upstream_text(&failed), "no such file", "{failed}");

        // Unknown tools, and the gateway's own tools in "transparent", are unknown tools (-32602).
        for (name, args) in
            [("m1__nope", json!({})), ("echo", json!({"text": "x"})), ("gw_list_all_servers", json!({}))]
        {
            let refused = try_call(&client, name, args).await.expect_err(name);
            assert!(refused.contains("-32602") || refused.contains("nknown tool"), "{name}: {refused}");
        }
        client.cancel().await.unwrap();
    });
    let counted = gw.gw.metric("mcpgw_tool_calls_total{outcome=\"success\",tool=\"transparent\"}");
    assert_eq!(counted, 2.0, "transparent calls are counted");
}

#[test]
fn both_lists_the_gateway_tools_first_and_serves_both() {
    let gw = TestGateway::start(&config(vec![mock_server("m1")], json!({"tool_exposure": "both"})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let names = tool_names(&client).await;
        let mut expected: Vec<String> = GW_TOOLS.iter().map(|t| t.to_string()).collect();
        expected.extend(prefixed("m1__"));
        assert_eq!(names, expected);
        let sum = try_call(&client, "m1__add", json!({"a": 2, "b": 3})).await.unwrap();
        assert_eq!(upstream_text(&sum), "5");
        let servers = call(&client, "gw_list_all_servers", json!({})).await;
        assert_eq!(servers["status"], json!("success"), "{servers}");
        client.cancel().await.unwrap();
    });
}

#[test]
fn the_default_and_per_config_overrides_decide_the_mode_and_the_separator() {
    // The default is "gateway": nothing new.
    let gw = TestGateway::start(&config(vec![mock_server("m1")], json!({})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        assert_eq!(tool_names(&client).await, GW_TOOLS);
        let refused = try_call(&client, "m1__echo", json!({"text": "x"})).await.expect_err("gateway mode");
        assert!(refused.contains("-32602") || refused.contains("nknown tool"), "{refused}");
        client.cancel().await.unwrap();
    });
    drop(gw);
    // The MCP configuration overrides both settings of common_mcp_gateway_config.
    let mut c = config(vec![mock_server("m1")], json!({"tool_exposure": "gateway", "tool_name_separator": "-"}));
    c["mcp_configs"][CONFIG_ID]["tool_exposure"] = json!("transparent");
    c["mcp_configs"][CONFIG_ID]["tool_name_separator"] = json!(".");
    let gw = TestGateway::start(&c);
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        assert_eq!(tool_names(&client).await, prefixed("m1."));
        let echoed = try_call(&client, "m1.echo", json!({"text": "dot"})).await.unwrap();
        assert_eq!(upstream_text(&echoed), "dot");
        client.cancel().await.unwrap();
    });
}

#[test]
fn prefixes_rename_and_names_claimed_twice_are_left_out_and_logged() {
    let mut m1 = mock_server("m1");
    m1["tool_prefix"] = json!("");
    let mut m2 = mock_server("m2");
    m2["tool_prefix"] = json!("");
    // m2 shows only echo: so only echo is claimed twice.
    m2["tool_filter"] = json!({"allow": ["echo"]});
    let mut m3 = mock_server("m3");
    m3["tool_prefix"] = json!("third_");
    m3["tool_filter"] = json!({"allow": ["add"]});
    let gw = TestGateway::start(&config(vec![m1, m2, m3], json!({"tool_exposure": "transparent"})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let names = tool_names(&client).await;
        let mut expected: Vec<String> = mock_tools().iter().filter(|t| **t != "echo").map(|t| t.to_string()).collect();
        expected.push("third_add".into());
        assert_eq!(names, expected);
        let refused = try_call(&client, "echo", json!({"text": "x"})).await.expect_err("claimed twice");
        assert!(refused.contains("-32602") || refused.contains("nknown tool"), "{refused}");
        // The upstream's own name routes to the server that exposes it.
        let sum = try_call(&client, "third_add", json!({"a": 1, "b": 1})).await.unwrap();
        assert_eq!(upstream_text(&sum), "2");
        let sum = try_call(&client, "add", json!({"a": 2, "b": 2})).await.unwrap();
        assert_eq!(upstream_text(&sum), "4");
        client.cancel().await.unwrap();
    });
    let logged = common::wait_until(common::SHORT_DEADLINE, || gw.logs().contains("claimed more than once"));
    assert!(logged, "the collision is logged: {}", gw.logs());
    assert!(gw.logs().contains("m1/echo, m2/echo"), "{}", gw.logs());
}

#[test]
fn curation_hides_tools_from_every_listing_and_refuses_every_call_path() {
    let mut m1 = mock_server("m1");
    m1["tool_filter"] = json!({"allow": ["echo", "add", "env"], "deny": ["env"]});
    let mut c = config(vec![m1, mock_server("m2")], json!({"tool_exposure": "both"}));
    c["projects"][PROJECT_ID]["tool_filter"] = json!({"deny": ["m1__add", "m2__*"]});
    let gw = TestGateway::start(&c);
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let names = tool_names(&client).await;
        let upstream: Vec<&String> = names.iter().filter(|n| !n.starts_with("gw_")).collect();
        assert_eq!(upstream, ["m1__echo"], "only what both filters let through");
        for hidden in ["m1__add", "m1__env", "m1__pid", "m2__echo"] {
            let refused = try_call(&client, hidden, json!({})).await.expect_err(hidden);
            assert!(refused.contains("-32602") || refused.contains("nknown tool"), "{hidden}: {refused}");
        }
        // The gateway's tools see the same.
        let found = call(&client, "gw_discover_all_tools", json!({"server_name": "m1"})).await;
        let listed: Vec<&str> = found["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(listed, ["echo"], "{found}");
        assert_eq!(found["message"], json!("discovered 1 tool"), "{found}");
        let all = call(&client, "gw_list_all_servers", json!({"discover_tools": true})).await;
        // Contract 14: a server the project can see nothing of is absent.
        assert_eq!(all["servers"].as_array().map(Vec::len), Some(1), "m2 is all denied by the project: {all}");
        let absent = call(&client, "gw_get_server_info", json!({"server_name": "m2"})).await;
        assert_eq!(absent["error_code"], json!("SERVER_NOT_FOUND"), "{absent}");
        let info = call(&client, "gw_get_server_info", json!({"server_name": "m1"})).await;
        assert_eq!(info["server_info"]["tools"].as_array().map(Vec::len), Some(1), "{info}");
        let answer = call(
            &client,
            "gw_secure_call_tools",
            calls("m1", &[("echo", json!({"text": "ok"})), ("add", json!({"a": 1, "b": 2})), ("pid", json!({}))]),
        )
        .await;
        let results = answer["results"].as_array().unwrap();
        assert_eq!(success_text(&results[0], "echo"), "ok");
        let message = assert_error(&results[1], "TOOL_NOT_ALLOWED");
        assert!(message.contains("add"), "{message}");
        assert_error(&results[2], "TOOL_NOT_ALLOWED");
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_transparent_call_runs_the_guardrails_and_pii_of_a_secure_call() {
    let mut server = mock_server("m1");
    server["input_guardrails_policy"] = json!({"enabled": true, "additional_config": {"pii_redaction": true}});
    server["output_guardrails_policy"] =
        json!({"enabled": true, "additional_config": {"blocked_keywords": ["top secret"]}});
    // The same server whose output check blocks the placeholder: it runs before restoring, so it sees what the
    // upstream saw.
    let mut placeholder = mock_server("m2");
    placeholder["input_guardrails_policy"] = server["input_guardrails_policy"].clone();
    placeholder["output_guardrails_policy"] =
        json!({"enabled": true, "additional_config": {"blocked_keywords": ["[EMAIL_1]"]}});
    let mut c = config(vec![server, placeholder], json!({"tool_exposure": "transparent"}));
    c["plugins"]["guardrails"] = json!({"provider": "custom_keyword", "config": {"blocked_keywords": ["drop table"]}});
    let gw = TestGateway::start(&c);
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let seen = try_call(&client, "m2__echo", json!({"text": "mail jane.doe@example.com please"})).await.unwrap();
        assert_eq!(answer_of(&seen)["stage"], json!("output"), "the upstream saw a placeholder: {seen}");
        // Blocked before the upstream: the contract's blocked object, as an isError result.
        let blocked = try_call(&client, "m1__echo", json!({"text": "please DROP TABLE users"})).await.unwrap();
        let object = answer_of(&blocked);
        assert_eq!(object["status"], json!("blocked"), "{object}");
        assert_eq!(object["error_code"], json!("GUARDRAIL_VIOLATION"), "{object}");
        assert_eq!(object["stage"], json!("input"), "{object}");
        assert_eq!(object["violations"][0]["type"], json!("keyword_detector"), "{object}");
        // Blocked on the way back.
        let blocked = try_call(&client, "m1__echo", json!({"text": "this is top secret"})).await.unwrap();
        assert_eq!(answer_of(&blocked)["stage"], json!("output"), "{blocked}");
        // Personal data redacted for the upstream and restored for the client.
        let text = "mail jane.doe@example.com please";
        let echoed = try_call(&client, "m1__echo", json!({"text": text})).await.unwrap();
        assert_eq!(upstream_text(&echoed), text, "restored: {echoed}");
        // A failure is the contract's error object, as an isError result.
        let timeout = try_call(&client, "m1__crash", json!({})).await.unwrap();
        assert_eq!(answer_of(&timeout)["status"], json!("error"), "{timeout}");
        client.cancel().await.unwrap();
    });
    assert!(!gw.logs().contains("jane.doe@example.com"), "personal data never reaches a log");
    let blocks = gw.gw.metric("mcpgw_guardrail_blocks_total{detector=\"custom_keyword\",stage=\"input\"}");
    assert_eq!(blocks, 1.0);
}

#[test]
fn stdio_clients_see_the_transparent_view_too() {
    let gw = TestGateway::start(&config(vec![mock_server("m1")], json!({"tool_exposure": "transparent"})));
    let cmd = stdio_command(gw.config_path(), &[("GW_GATEWAY_KEY", API_KEY)]);
    runtime().block_on(async {
        let (client, _stderr) = connect_stdio(cmd).await;
        assert_eq!(tool_names(&client).await, prefixed("m1__"));
        let result = try_call(&client, "m1__echo", json!({"text": "over stdio"})).await.unwrap();
        assert_eq!(upstream_text(&result), "over stdio");
        client.cancel().await.unwrap();
    });
}

#[test]
fn bad_transparent_settings_are_reported_and_keep_the_file_from_loading() {
    let mut m1 = mock_server("m1");
    m1["tool_prefix"] = json!("bad prefix/");
    m1["tool_filter"] = json!({"allow": "echo", "deny": [""]});
    let mut c = config(vec![m1], json!({"tool_exposure": "everything", "tool_name_separator": "::"}));
    c["mcp_configs"][CONFIG_ID]["tool_exposure"] = json!("all");
    c["projects"][PROJECT_ID]["tool_filter"] = json!({"deny": [7]});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    common::write_json(&path, &c);
    let (status, stdout, stderr) = common::run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success());
    let stderr = stderr + &stdout;
    for expected in [
        "common_mcp_gateway_config.tool_exposure: must be one of \"gateway\", \"transparent\", \"both\", found \"everything\"",
        "common_mcp_gateway_config.tool_name_separator: only letters",
        &format!("mcp_configs.{CONFIG_ID}.tool_exposure: must be one of"),
        &format!("mcp_configs.{CONFIG_ID}.mcp_config[0].tool_prefix: only letters"),
        &format!("mcp_configs.{CONFIG_ID}.mcp_config[0].tool_filter.allow: must be an array of strings"),
        &format!("mcp_configs.{CONFIG_ID}.mcp_config[0].tool_filter.deny[0]: a pattern is 1 to 256 characters"),
        &format!("projects.{PROJECT_ID}.tool_filter.deny[0]: must be a string"),
    ] {
        assert!(stderr.contains(expected), "{expected:?} in\n{stderr}");
    }
}

/// A client that counts the `notifications/tools/list_changed` it is sent.
#[derive(Clone, Default)]
struct Listening {
    changed: std::sync::Arc<tokio::sync::Notify>,
}

impl rmcp::ClientHandler for Listening {
    async fn on_tool_list_changed(&self, _context: rmcp::service::NotificationContext<rmcp::RoleClient>) {
        self.changed.notify_one();
    }
}

#[test]
fn an_upstreams_list_change_drops_its_cached_tools_and_reaches_the_open_sessions() {
    use rmcp::ServiceExt;
    let gw = TestGateway::start(&config(vec![mock_server("m1")], json!({"tool_exposure": "both"})));
    runtime().block_on(async {
        let listening = Listening::default();
        let client = listening.clone().serve(http_transport(&gw.mcp, API_KEY, &[])).await.expect("connect");
        let capabilities = serde_json::to_value(&client.peer_info().unwrap().capabilities).unwrap();
        assert_eq!(capabilities["tools"]["listChanged"], json!(true), "{capabilities}");
        let discover = || {
            let mut params = rmcp::model::CallToolRequestParams::new("gw_discover_all_tools");
            params = params.with_arguments(json!({"server_name": "m1"}).as_object().unwrap().clone());
            client.call_tool(params)
        };
        let first = answer_of(&serde_json::to_value(discover().await.unwrap()).unwrap());
        assert_eq!(first["source"], json!("discovery"));
        let again = answer_of(&serde_json::to_value(discover().await.unwrap()).unwrap());
        assert_eq!(again["source"], json!("cache"));

        let mut params = rmcp::model::CallToolRequestParams::new("m1__changed");
        params = params.with_arguments(serde_json::Map::new());
        let told = serde_json::to_value(client.call_tool(params).await.unwrap()).unwrap();
        assert_eq!(upstream_text(&told), "told");
        let heard = tokio::time::timeout(std::time::Duration::from_secs(10), listening.changed.notified()).await;
        assert!(heard.is_ok(), "the session was told that the tool list changed");
        let after = answer_of(&serde_json::to_value(discover().await.unwrap()).unwrap());
        assert_eq!(after["source"], json!("discovery"), "the cached tools were dropped");
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_cancelled_transparent_call_is_cancelled_upstream_and_frees_its_process() {
    let gw = TestGateway::start(&config(vec![mock_server("m1")], json!({"tool_exposure": "transparent"})));
    let started = gw.dir.path().join("slow-started");
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let pid = upstream_text(&try_call(&client, "m1__pid", json!({})).await.unwrap());
        let args = json!({"ms": 30_000, "started_file": started.to_str().unwrap()});
        let mut params = rmcp::model::CallToolRequestParams::new("m1__slow");
        params = params.with_arguments(args.as_object().unwrap().clone());
        let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
        let handle = client.send_cancellable_request(request, Default::default()).await.expect("sent");
        let begun = tokio::task::spawn_blocking({
            let started = started.clone();
            move || common::wait_until(common::SHORT_DEADLINE, || started.exists())
        });
        assert!(begun.await.unwrap(), "the upstream began the slow call");
        handle.cancel(Some("the user gave up".into())).await.expect("cancelled");
        // The process is free again: the next call is served by the same one, at once.
        let again = tokio::time::timeout(std::time::Duration::from_secs(10), try_call(&client, "m1__pid", json!({})));
        let again = again.await.expect("answered while the slow call would still run").unwrap();
        assert_eq!(upstream_text(&again), pid, "the same process serves the next call");
        client.cancel().await.unwrap();
    });
}

#[test]
fn under_both_a_client_picks_its_view_and_cannot_widen_a_narrower_one() {
    let mut c = config(vec![mock_server("m1")], json!({"tool_exposure": "both"}));
    c["mcp_configs"][common::SPARE_CONFIG_ID]["mcp_config"] = json!([mock_server("m2")]);
    c["mcp_configs"][common::SPARE_CONFIG_ID]["tool_exposure"] = json!("gateway");
    let gw = TestGateway::start(&c);
    runtime().block_on(async {
        // The header `client-config --exposure transparent` writes.
        let view = |value: &'static str| vec![("X-Mcpgw-Tool-Exposure", value)];
        let connect_with = |key: &'static str, headers: Vec<(&'static str, &'static str)>| {
            let url = gw.mcp.clone();
            async move { try_connect(&url, key, &headers, rmcp::model::ProtocolVersion::V_2025_11_25).await }
        };
        let transparent = connect_with(API_KEY, view("transparent")).await.unwrap();
        assert_eq!(tool_names(&transparent).await, prefixed("m1__"));
        let refused = try_call(&transparent, "gw_list_all_servers", json!({})).await.expect_err("not in this view");
        assert!(refused.contains("-32602") || refused.contains("nknown tool"), "{refused}");
        assert!(try_call(&transparent, "m1__echo", json!({"text": "x"})).await.is_ok());
        transparent.cancel().await.unwrap();

        let gateway = connect_with(API_KEY, view("gateway")).await.unwrap();
        assert_eq!(tool_names(&gateway).await, GW_TOOLS);
        assert!(try_call(&gateway, "m1__echo", json!({"text": "x"})).await.is_err(), "not in the gateway view");
        gateway.cancel().await.unwrap();

        // Project beta's configuration says "gateway": a client cannot widen it.
        let beta = connect_with(BETA_KEY, view("transparent")).await.unwrap();
        assert_eq!(tool_names(&beta).await, GW_TOOLS);
        beta.cancel().await.unwrap();

        let wrong = connect_with(API_KEY, view("everything")).await;
        let error = wrong.expect_err("an unknown view is refused");
        assert!(error.contains("X-Mcpgw-Tool-Exposure") || error.contains("x-mcpgw-tool-exposure"), "{error}");
    });
}

#[test]
fn a_sessions_tools_list_is_one_json_body_equal_to_the_protocol_routes_answer() {
    let mut server = mock_server("m1");
    server["config"]["args"] = json!(["--task-tool"]);
    let gw = TestGateway::start(&config(vec![server, mock_server("m2")], json!({"tool_exposure": "both"})));
    let client = reqwest::blocking::Client::new();
    let version = "2025-11-25";
    let session = open_session(&client, &gw.mcp, API_KEY, version);
    let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", version)];
    let list = |id: u64, params: Value| {
        post(
            &client,
            &gw.mcp,
            Some(API_KEY),
            &headers,
            &json!({"jsonrpc": "2.0", "id": id, "method": "tools/list",
            "params": params}),
        )
    };
    // A plain listing is written as one JSON body (transparent/tool_list.rs): twice, the second from what the first
    // kept.
    for id in [2, 3] {
        let plain = list(id, json!({}));
        assert_eq!((plain.status, plain.content_type.as_str()), (200, "application/json"), "{}", plain.text);
        assert_eq!(plain.message["id"], json!(id), "{}", plain.text);
        // A listing with a cursor goes through rmcp's route: the same tools, the same definitions.
        let paged = list(id + 10, json!({"cursor": "c"}));
        assert_eq!(paged.status, 200, "{}", paged.text);
        assert_eq!(paged.message["result"], plain.message["result"], "both routes list the same");
        let tools = plain.message["result"]["tools"].as_array().cloned().unwrap_or_default();
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        let mut expected: Vec<String> = GW_TOOLS.iter().map(|t| t.to_string()).collect();
        expected.extend(prefixed("m1__"));
        expected.push("m1__task_run".into());
        expected.extend(prefixed("m2__"));
        assert_eq!(names, expected, "the gateway's tools first, then each server's in config order");
        let task = tools.iter().find(|t| t["name"] == json!("m1__task_run")).cloned().unwrap_or_default();
        assert_eq!(task["execution"]["taskSupport"], json!("required"), "{task}");
        let add = tools.iter().find(|t| t["name"] == json!("m2__add")).cloned().unwrap_or_default();
        assert_eq!(add["inputSchema"]["required"], json!(["a", "b"]), "{add}");
    }
}
