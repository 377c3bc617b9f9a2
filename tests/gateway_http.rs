//! The streamable HTTP front of the MCP gateway, from outside (contract section 4): protocol revisions through
//! `initialize` and the stateless 2026-07-28 form, authentication (401 with `AUTH_FAILED`), session binding (404),
//! `Origin` and `Host` checks (403), JSON or SSE answers, 202 for notifications, the seven `gw_*` tools on answers that
//! need no upstream process (servers with configured tools, unknown servers, caches, timeout metrics), and key changes
//! through the admin API taking effect at once. Upstream calls are in `gateway_upstream.rs`.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::time::Duration;

use common::{
    ALICE_ID, API_KEY, ENV_SECRET, OAUTH_SECRET, PROJECT_ID, RELOAD_DEADLINE, key_id, read_json, replace_json,
};
use mcp::*;
use reqwest::Method;
use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};

/// A server whose tools are configured: discovery answers from the config without starting anything. It carries an
/// env secret and an OAuth secret that must never be shown.
fn configured_server() -> Value {
    json!({
        "server_name": "configured",
        "description": "Configured tools",
        "config": {"command": "/nonexistent/never-started", "args": [], "env": {"TOKEN": ENV_SECRET}},
        "tools": {
            "lookup": {"description": "Looks something up", "inputSchema": {"type": "object", "properties": {}}},
            "store": {"description": "Stores something", "inputSchema": {"type": "object", "properties": {}}}
        },
        "oauth_config": {
            "enabled": false,
            "OAUTH_GRANT_TYPE": "client_credentials",
            "OAUTH_CLIENT_ID": "client-id",
            "OAUTH_CLIENT_SECRET": OAUTH_SECRET,
            "OAUTH_TOKEN_URL": "http://127.0.0.1:1/token"
        }
    })
}

/// A server with configured tools and guardrail policies switched on.
fn guarded_server() -> Value {
    json!({
        "server_name": "guarded",
        "description": "Guarded",
        "config": {"command": "/nonexistent/never-started", "args": []},
        "tools": [{"name": "only", "description": "The only tool", "inputSchema": {"type": "object"}}],
        "input_guardrails_policy": {"enabled": true, "policy_name": "in", "additional_config": {"pii_redaction": false}, "block": ["keyword_detector"]},
        "output_guardrails_policy": {"enabled": false, "policy_name": "out", "additional_config": {}, "block": []}
    })
}

fn start_configured() -> TestGateway {
    let common = json!({"timeout_settings": {"tool_execution_timeout": 7, "discovery_timeout": 11}});
    TestGateway::start(&config_with(vec![configured_server(), guarded_server()], common))
}

fn tool_list_body(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {}})
}

fn sorted_gw_tools() -> Vec<String> {
    let mut v: Vec<String> = GW_TOOLS.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

#[test]
fn tools_list_gives_the_seven_gw_tools_to_a_real_client() {
    let gw = start_configured();
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let info = client.peer_info().expect("server info after initialize");
        assert_eq!(info.server_info.as_ref().map(|i| i.name.as_str()), Some("mcpgw"));
        let tools = client.list_all_tools().await.expect("tools/list");
        let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
        names.sort();
        assert_eq!(names, sorted_gw_tools());
        for tool in &tools {
            assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{} input schema", tool.name);
        }
        let secure = tools.iter().find(|t| t.name == "gw_secure_call_tools").unwrap();
        let props = secure.input_schema.get("properties").cloned().unwrap_or_default();
        assert!(props.get("server_name").is_some() && props.get("tool_calls").is_some(), "secure call schema: {props}");
        client.cancel().await.unwrap();
    });
}

#[test]
fn initialize_works_with_every_revision_over_raw_http_and_rmcp() {
    let gw = start_configured();
    let http = http();
    for version in INITIALIZE_REVISIONS {
        let init = post(&http, &gw.mcp, Some(API_KEY), &[], &initialize_body(1, version));
        assert_eq!(init.status, 200, "initialize {version}: {}", init.text);
        assert_eq!(init.message["result"]["protocolVersion"], json!(version), "negotiated version: {}", init.text);
        assert_eq!(init.message["result"]["serverInfo"]["name"], json!("mcpgw"), "{}", init.text);
        assert!(init.message["result"]["capabilities"]["tools"].is_object(), "tools capability: {}", init.text);
        let session = init.header("mcp-session-id").expect("a session id");
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", version)];
        let ack = post(&http, &gw.mcp, Some(API_KEY), &headers, &note);
        assert_eq!(ack.status, 202, "notification on {version}: {}", ack.text);
        let list = post(&http, &gw.mcp, Some(API_KEY), &headers, &tool_list_body(2));
        assert_eq!(list.status, 200, "tools/list on {version}: {}", list.text);
        assert_eq!(sorted_tool_names(&list.message["result"]), sorted_gw_tools(), "{version}");
        let call = post(&http, &gw.mcp, Some(API_KEY), &headers, &tools_call_body(3, "gw_get_cache_status", json!({})));
        assert_eq!(call.status, 200, "tools/call on {version}: {}", call.text);
        assert_eq!(answer_of(&call.message["result"])["status"], json!("success"));
    }

    let versions = [
        ProtocolVersion::V_2024_11_05,
        ProtocolVersion::V_2025_03_26,
        ProtocolVersion::V_2025_06_18,
        ProtocolVersion::V_2025_11_25,
    ];
    runtime().block_on(async {
        for version in versions {
            let client = try_connect(&gw.mcp, API_KEY, &[], version.clone())
                .await
                .unwrap_or_else(|e| panic!("rmcp client on {version}: {e}"));
            assert_eq!(client.peer_info().unwrap().protocol_version, version);
            assert_eq!(tool_names(&client).await.len(), 7, "{version}");
            let status = call(&client, "gw_get_cache_status", json!({})).await;
            assert_eq!(status["status"], json!("success"), "{version}");
            client.cancel().await.unwrap();
        }
    });
}

#[test]
fn the_endpoint_answers_on_mcp_and_mcp_slash() {
    let gw = start_configured();
    let http = http();
    for url in [format!("{}/mcp", gw.gw.gateway), format!("{}/mcp/", gw.gw.gateway)] {
        let init = post(&http, &url, Some(API_KEY), &[], &initialize_body(1, "2025-06-18"));
        assert_eq!(init.status, 200, "{url}: {}", init.text);
        assert!(init.header("mcp-session-id").is_some(), "{url}");
    }
}

#[test]
fn the_stateless_2026_07_28_form_works_without_a_session() {
    let gw = start_configured();
    let http = http();

    let discover =
        json!({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": stateless_meta()}});
    let r = post(&http, &gw.mcp, Some(API_KEY), &stateless_headers("server/discover", None), &discover);
    assert_eq!(r.status, 200, "server/discover: {}", r.text);
    let supported = r.message["result"]["supportedVersions"].as_array().cloned().unwrap_or_default();
    assert!(supported.contains(&json!(STATELESS_REVISION)), "supportedVersions: {}", r.text);
    assert!(r.header("mcp-session-id").is_none(), "server/discover must not open a session");

    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": stateless_meta()}});
    let r = post(&http, &gw.mcp, Some(API_KEY), &stateless_headers("tools/list", None), &list);
    assert_eq!(r.status, 200, "stateless tools/list: {}", r.text);
    assert_eq!(sorted_tool_names(&r.message["result"]), sorted_gw_tools());
    assert!(r.header("mcp-session-id").is_none());

    let body = |id: u64, tool: &str, args: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": tool, "arguments": args, "_meta": stateless_meta()}})
    };
    let r = post(
        &http,
        &gw.mcp,
        Some(API_KEY),
        &stateless_headers("tools/call", Some("gw_discover_all_tools")),
        &body(3, "gw_discover_all_tools", json!({"server_name": "configured"})),
    );
    assert_eq!(r.status, 200, "stateless tools/call: {}", r.text);
    assert!(r.is_json(), "a stateless answer to a JSON+SSE client is JSON here: {}", r.content_type);
    let found = answer_of(&r.message["result"]);
    assert_eq!(found["source"], json!("config"), "{found}");

    let r = post(
        &http,
        &gw.mcp,
        Some(API_KEY),
        &stateless_headers("tools/call", Some("gw_get_server_info")),
        &body(4, "gw_get_server_info", json!({"server_name": "nope"})),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_error(&answer_of(&r.message["result"]), "SERVER_NOT_FOUND");

    // Credentials are needed on every stateless request too.
    let r = post(&http, &gw.mcp, None, &stateless_headers("tools/list", None), &list);
    assert_auth_failed(&r);

    // rmcp's client in discover mode.
    runtime().block_on(async {
        let client = connect_stateless(&gw.mcp, API_KEY).await;
        assert_eq!(client.peer_info().unwrap().protocol_version, ProtocolVersion::V_2026_07_28);
        let mut names = tool_names(&client).await;
        names.sort();
        assert_eq!(names, sorted_gw_tools());
        let servers = call(&client, "gw_list_all_servers", json!({})).await;
        assert_eq!(servers["servers"][0]["server_name"], json!("configured"), "{servers}");
        client.cancel().await.unwrap();
    });
}

#[test]
fn bad_credentials_get_401_with_www_authenticate_and_auth_failed() {
    let gw = start_configured();
    let http = http();
    let init = initialize_body(1, "2025-06-18");
    let bearer = format!("Bearer {API_KEY}");
    type Case<'a> = (&'a str, Option<&'a str>, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        ("no Authorization header", None, vec![]),
        ("unknown key", Some("gwkey-unknown-0123456789abcdefghijklmnopqrstuvwxyzABCDEF"), vec![]),
        ("disabled key", Some(DISABLED_KEY), vec![]),
        ("Basic scheme", None, vec![("authorization", "Basic dXNlcjpwYXNz")]),
        ("key without scheme", None, vec![("authorization", API_KEY)]),
        ("X-GW-Project-Id of another project", Some(API_KEY), vec![("x-gw-project-id", BETA_PROJECT_ID)]),
        ("X-GW-User-Id of another user", Some(API_KEY), vec![("x-gw-user-id", common::BOB_ID)]),
        ("project_id of another project", Some(API_KEY), vec![("project_id", BETA_PROJECT_ID)]),
        ("user_id of another user", Some(API_KEY), vec![("user_id", common::BOB_ID)]),
    ];
    for (what, key, headers) in cases {
        let r = post(&http, &gw.mcp, key, &headers, &init);
        let details = assert_auth_failed(&r);
        assert!(!details.is_empty(), "{what}: empty details");
        assert!(r.header("mcp-session-id").is_none(), "{what}: a refused request must not open a session");
    }
    // The bearer key works alone and with matching project and user headers, in both spellings.
    for headers in [
        vec![],
        vec![("x-gw-project-id", PROJECT_ID), ("x-gw-user-id", ALICE_ID)],
        vec![("project_id", PROJECT_ID), ("user_id", ALICE_ID)],
    ] {
        let mut all = headers.clone();
        all.push(("authorization", bearer.as_str()));
        let r = post(&http, &gw.mcp, None, &all, &init);
        assert_eq!(r.status, 200, "headers {headers:?}: {}", r.text);
    }
    // rmcp's client: matching headers connect, a mismatched project does not.
    runtime().block_on(async {
        let ok = try_connect(
            &gw.mcp,
            API_KEY,
            &[("x-gw-project-id", PROJECT_ID), ("x-gw-user-id", ALICE_ID)],
            ProtocolVersion::V_2025_11_25,
        )
        .await
        .expect("matching project and user headers");
        assert_eq!(call(&ok, "gw_get_cache_status", json!({})).await["status"], json!("success"));
        ok.cancel().await.unwrap();
        let refused =
            try_connect(&gw.mcp, API_KEY, &[("x-gw-project-id", BETA_PROJECT_ID)], ProtocolVersion::V_2025_11_25).await;
        assert!(refused.is_err(), "a mismatched project header must not connect");
        let refused = try_connect(&gw.mcp, "not-a-key", &[], ProtocolVersion::V_2025_11_25).await;
        assert!(refused.is_err(), "an unknown key must not connect");
    });
}

#[test]
fn a_session_id_is_bound_to_the_key_that_opened_it() {
    let gw = start_configured();
    let http = http();
    let session = open_session(&http, &gw.mcp, API_KEY, "2025-06-18");
    let with = |key: &str, sid: &str| {
        let headers = [("mcp-session-id", sid), ("mcp-protocol-version", "2025-06-18")];
        post(&http, &gw.mcp, Some(key), &headers, &tool_list_body(7))
    };
    let own = with(API_KEY, &session);
    assert_eq!(own.status, 200, "{}", own.text);
    assert_eq!(sorted_tool_names(&own.message["result"]).len(), 7);

    let foreign = with(KEY_B, &session);
    assert_eq!(foreign.status, 404, "a session used with another valid key: {}", foreign.text);
    let unknown = with(API_KEY, "00000000000000000000000000000000");
    assert_eq!(unknown.status, 404, "an unknown session id: {}", unknown.text);
    // The foreign attempt did not hurt the owner.
    assert_eq!(with(API_KEY, &session).status, 200);

    // A closed session is gone.
    let closed = close_session(&http, &gw.mcp, API_KEY, &session, "2025-06-18");
    assert!(closed.is_success(), "DELETE of the session: {closed}");
    assert_eq!(with(API_KEY, &session).status, 404, "a deleted session id");
}

#[test]
fn origin_and_host_are_checked_and_allowed_hosts_follow_the_config() {
    let gw = start_configured();
    let http = http();
    let init = initialize_body(1, "2025-06-18");
    let evil = post(&http, &gw.mcp, Some(API_KEY), &[("origin", "https://evil.example")], &init);
    assert_eq!(evil.status, 403, "a foreign Origin: {}", evil.text);
    let local = post(&http, &gw.mcp, Some(API_KEY), &[("origin", "http://localhost:3000")], &init);
    assert_eq!(local.status, 200, "a loopback Origin: {}", local.text);
    let bad_host = post(&http, &gw.mcp, Some(API_KEY), &[("host", "evil.example")], &init);
    assert_eq!(bad_host.status, 403, "a Host not in gw_allowed_hosts: {}", bad_host.text);
    let port = gw.authority().rsplit_once(':').unwrap().1.to_string();
    let localhost = format!("localhost:{port}");
    let ok_host = post(&http, &gw.mcp, Some(API_KEY), &[("host", localhost.as_str())], &init);
    assert_eq!(ok_host.status, 200, "Host localhost: {}", ok_host.text);

    // A pod behind a Service: only the Service name is allowed.
    let mut config = read_json(gw.config_path());
    config["common_mcp_gateway_config"]["gw_allowed_hosts"] = json!(["mcpgw.tools.svc"]);
    config["common_mcp_gateway_config"]["gw_allowed_origins"] = json!(["https://app.example"]);
    replace_json(gw.config_path(), &config);
    let service_host = format!("mcpgw.tools.svc:{port}");
    let switched = common::wait_until(RELOAD_DEADLINE, || {
        post(&http, &gw.mcp, Some(API_KEY), &[("host", service_host.as_str())], &init).status == 200
    });
    assert!(switched, "the new gw_allowed_hosts was not in effect within {RELOAD_DEADLINE:?}");
    let loopback = post(&http, &gw.mcp, Some(API_KEY), &[], &init);
    assert_eq!(loopback.status, 403, "127.0.0.1 is no longer allowed: {}", loopback.text);
    let app = post(
        &http,
        &gw.mcp,
        Some(API_KEY),
        &[("host", service_host.as_str()), ("origin", "https://app.example")],
        &init,
    );
    assert_eq!(app.status, 200, "an Origin in gw_allowed_origins: {}", app.text);
    let evil = post(
        &http,
        &gw.mcp,
        Some(API_KEY),
        &[("host", service_host.as_str()), ("origin", "https://evil.example")],
        &init,
    );
    assert_eq!(evil.status, 403, "{}", evil.text);

    // ["*"] allows any Host (pod IPs).
    config["common_mcp_gateway_config"]["gw_allowed_hosts"] = json!(["*"]);
    replace_json(gw.config_path(), &config);
    let any = common::wait_until(RELOAD_DEADLINE, || {
        post(&http, &gw.mcp, Some(API_KEY), &[("host", "10.42.0.17:8000")], &init).status == 200
    });
    assert!(any, "gw_allowed_hosts [\"*\"] should allow a pod IP");
    assert_eq!(post(&http, &gw.mcp, Some(API_KEY), &[("host", "evil.example")], &init).status, 200);
}

#[test]
fn notifications_get_202_and_answers_use_a_type_the_client_accepts() {
    let gw = start_configured();
    let http = http();
    let session = open_session(&http, &gw.mcp, API_KEY, "2025-11-25");
    let sid = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-11-25")];

    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}});
    let r = post(&http, &gw.mcp, Some(API_KEY), &sid, &note);
    assert_eq!(r.status, 202, "a notification: {}", r.text);
    assert!(r.text.trim().is_empty(), "202 carries no body: {:?}", r.text);

    // Accepting both: JSON or SSE, holding the JSON-RPC answer either way.
    let r = post(&http, &gw.mcp, Some(API_KEY), &sid, &tool_list_body(5));
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.is_json() || r.is_sse(), "content type {:?}", r.content_type);
    assert_eq!(r.message["id"], json!(5), "answer: {}", r.text);
    assert_eq!(sorted_tool_names(&r.message["result"]).len(), 7);

    // Accepting one type only: never the other one (refusing with 406 is allowed).
    for (accept, sse) in [("application/json", false), ("text/event-stream", true)] {
        let mut headers = sid.to_vec();
        headers.push(("accept", accept));
        let r = post(&http, &gw.mcp, Some(API_KEY), &headers, &tool_list_body(6));
        assert!(r.status == 200 || r.status == 406, "Accept {accept}: {} {}", r.status, r.text);
        if r.status == 200 {
            assert_eq!(r.is_sse(), sse, "Accept {accept} answered with {:?}", r.content_type);
        }
    }

    // The server-to-client stream of a session is SSE.
    let stream = http
        .get(&gw.mcp)
        .header("authorization", format!("Bearer {API_KEY}"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200, "GET of the session stream");
    let ct = stream.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    assert!(ct.starts_with("text/event-stream"), "GET stream content type {ct:?}");
    drop(stream);
}

#[test]
fn malformed_requests_get_jsonrpc_errors_never_5xx() {
    let gw = start_configured();
    let http = http();
    let r = post_bytes(&http, &gw.mcp, Some(API_KEY), &[], b"{not json".to_vec());
    assert!(r.status >= 400 && r.status < 500, "a parse error: {} {}", r.status, r.text);
    assert!(r.message["error"]["code"].is_i64(), "a parse error is a JSON-RPC error: {}", r.text);

    let session = open_session(&http, &gw.mcp, API_KEY, "2025-06-18");
    let sid = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-06-18")];
    let r = post(&http, &gw.mcp, Some(API_KEY), &sid, &json!({"jsonrpc": "2.0", "id": 9, "method": "no/such/method"}));
    assert!(r.status < 500, "{}", r.text);
    assert_eq!(r.message["error"]["code"], json!(-32601), "method not found: {}", r.text);

    let r = post(
        &http,
        &gw.mcp,
        Some(API_KEY),
        &sid,
        &tools_call_body(10, "gw_secure_call_tools", json!({"server_name": 5})),
    );
    assert!(r.status < 500, "{}", r.text);
    let invalid = r.message["error"]["code"] == json!(-32602) || r.message["result"]["isError"] == json!(true);
    assert!(invalid, "bad arguments: an invalid-params error or an error result: {}", r.text);

    let r = post(&http, &gw.mcp, Some(API_KEY), &sid, &tools_call_body(11, "gw_no_such_tool", json!({})));
    assert!(r.status < 500, "{}", r.text);
    let refused = r.message["error"].is_object() || r.message["result"]["isError"] == json!(true);
    assert!(refused, "an unknown gateway tool is refused: {}", r.text);

    let r = post(&http, &format!("{}/elsewhere", gw.gw.gateway), Some(API_KEY), &[], &tool_list_body(12));
    assert_eq!(r.status, 404, "{}", r.text);

    let r = post_bytes(&http, &gw.mcp, Some(API_KEY), &[], b"[1, 2]".to_vec());
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.message["error"]["code"], json!(-32600), "a batch is an invalid request: {}", r.text);

    // Over the 4 MiB request limit: 413 with a JSON-RPC error, and the client gets to read it.
    let mut big = br#"{"jsonrpc":"2.0","id":13,"method":"tools/list","params":{"pad":""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 5 * 1024 * 1024));
    big.extend(br#""}}"#);
    let r = post_bytes(&http, &gw.mcp, Some(API_KEY), &[], big);
    assert_eq!(r.status, 413, "{}", r.text);
    assert_eq!(r.message["error"]["data"]["error_code"], json!("PAYLOAD_TOO_LARGE"), "{}", r.text);
}

#[test]
fn tools_answer_from_the_config_without_starting_an_upstream() {
    let gw = start_configured();
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;

        let servers = call(&client, "gw_list_all_servers", json!({})).await;
        let list = servers["servers"].as_array().expect("servers array");
        let names: Vec<&str> = list.iter().map(|s| s["server_name"].as_str().unwrap_or_default()).collect();
        assert_eq!(names, ["configured", "guarded"], "{servers}");
        assert_eq!(list[0]["description"], json!("Configured tools"));
        let with_tools = call(&client, "gw_list_all_servers", json!({"discover_tools": true})).await;
        let tools = &with_tools["servers"][0]["tools"];
        let mut tool_names: Vec<&str> =
            tools.as_array().expect("tools when discover_tools").iter().map(|t| t["name"].as_str().unwrap()).collect();
        tool_names.sort();
        assert_eq!(tool_names, ["lookup", "store"], "{with_tools}");

        let info = call(&client, "gw_get_server_info", json!({"server_name": "configured"})).await;
        assert_eq!(info["server_name"], json!("configured"));
        let si = &info["server_info"];
        assert_eq!(si["server_name"], json!("configured"));
        assert_eq!(si["description"], json!("Configured tools"));
        assert_eq!(si["tools"].as_array().map(Vec::len), Some(2), "{info}");
        assert_eq!(si["input_guardrails_enabled"], json!(false));
        assert_eq!(si["output_guardrails_enabled"], json!(false));
        let text = info.to_string();
        assert!(!text.contains(ENV_SECRET), "gw_get_server_info shows an env value: {text}");
        assert!(!text.contains(OAUTH_SECRET), "gw_get_server_info shows an OAuth secret: {text}");
        let guarded = call(&client, "gw_get_server_info", json!({"server_name": "guarded"})).await;
        assert_eq!(guarded["server_info"]["input_guardrails_enabled"], json!(true), "{guarded}");
        assert_eq!(guarded["server_info"]["output_guardrails_enabled"], json!(false), "{guarded}");

        for _ in 0..2 {
            let found = call(&client, "gw_discover_all_tools", json!({"server_name": "configured"})).await;
            assert_eq!(found["source"], json!("config"), "{found}");
            assert!(found["message"].as_str().is_some_and(|m| m.contains('2')), "message gives the count: {found}");
            assert_eq!(found["tools"].as_array().map(Vec::len), Some(2));
        }
        let all = call(&client, "gw_discover_all_tools", json!({})).await;
        assert_eq!(all["servers"]["configured"]["source"], json!("config"), "{all}");
        assert_eq!(all["servers"]["guarded"]["tools"][0]["name"], json!("only"), "{all}");

        // Unknown servers.
        for (tool, args) in [
            ("gw_get_server_info", json!({"server_name": "nope"})),
            ("gw_discover_all_tools", json!({"server_name": "nope"})),
            ("gw_secure_call_tools", calls("nope", &[("echo", json!({"text": "x"}))])),
        ] {
            let a = call(&client, tool, args).await;
            assert_error(&a, "SERVER_NOT_FOUND");
        }
        client.cancel().await.unwrap();

        // Another project's configuration has none of these servers.
        let beta = connect(&gw.mcp, BETA_KEY).await;
        let none = call(&beta, "gw_list_all_servers", json!({})).await;
        assert_eq!(none["servers"], json!([]), "{none}");
        assert_error(
            &call(&beta, "gw_secure_call_tools", calls("configured", &[("lookup", json!({}))])).await,
            "SERVER_NOT_FOUND",
        );
        beta.cancel().await.unwrap();
    });
}

#[test]
fn cache_status_clear_cache_and_timeout_metrics_answer_their_shapes() {
    let gw = start_configured();
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let status = call(&client, "gw_get_cache_status", json!({})).await;
        assert_eq!(status["cache_type"], json!("local"), "{status}");
        for cache in ["tool_cache", "config_cache"] {
            for field in ["entries", "hits", "misses", "expiry_seconds"] {
                assert!(status[cache][field].is_u64(), "{cache}.{field}: {status}");
            }
        }
        assert_eq!(status["tool_cache"]["expiry_seconds"], json!(4 * 3600), "gw_tool_cache_expiration 4 h: {status}");
        assert_eq!(status["config_cache"]["expiry_seconds"], json!(24 * 3600), "{status}");
        assert!(
            status["config_cache"]["entries"].as_u64().unwrap() >= 1,
            "the caller's resolved config is cached: {status}"
        );

        for args in [
            json!({}),
            json!({"cache_type": "all"}),
            json!({"cache_type": "tools"}),
            json!({"cache_type": "gateway_config"}),
            json!({"server_name": "configured"}),
        ] {
            let cleared = call(&client, "gw_clear_cache", args.clone()).await;
            assert_eq!(cleared["status"], json!("success"), "{args}: {cleared}");
            assert!(cleared["message"].is_string(), "{cleared}");
            assert!(!cleared["cleared"].is_null(), "{cleared}");
        }
        let bad = call(&client, "gw_clear_cache", json!({"cache_type": "everything"})).await;
        assert_eq!(bad["status"], json!("error"), "an unknown cache_type: {bad}");

        let metrics = call(&client, "gw_get_timeout_metrics", json!({})).await;
        let m = &metrics["timeout_metrics"];
        for field in ["total_operations", "successful_operations", "timeout_operations", "cancelled_operations"] {
            assert!(m[field].is_u64(), "{field}: {metrics}");
        }
        assert!(m["success_rate"].is_number(), "{metrics}");
        assert!(m["by_kind"].is_object(), "{metrics}");
        let config = &metrics["timeout_config"];
        assert_eq!(config["tool_execution_timeout"].as_f64(), Some(7.0), "configured value: {metrics}");
        assert_eq!(config["discovery_timeout"].as_f64(), Some(11.0), "configured value: {metrics}");
        for (name, default) in [
            ("default_timeout", 30.0),
            ("guardrail_timeout", 15.0),
            ("auth_timeout", 10.0),
            ("cache_timeout", 5.0),
            ("connectivity_timeout", 2.0),
        ] {
            assert_eq!(config[name].as_f64(), Some(default), "{name}: {metrics}");
        }
        client.cancel().await.unwrap();
    });
}

#[test]
fn keys_disabled_or_rotated_through_the_admin_api_stop_working_at_once() {
    let gw = start_configured();
    let http = http();
    let session = open_session(&http, &gw.mcp, API_KEY, "2025-06-18");
    let in_session = |key: &str| {
        let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-06-18")];
        post(&http, &gw.mcp, Some(key), &headers, &tool_list_body(3))
    };
    let fresh = |key: &str| post(&http, &gw.mcp, Some(key), &[], &initialize_body(1, "2025-06-18"));
    assert_eq!(in_session(API_KEY).status, 200);

    let id = key_id(API_KEY);
    let r = admin(&gw, Method::POST, &format!("/api/v1/api-keys/{id}/disable"), None);
    assert_eq!(r.status, 200, "disable: {}", r.text);
    assert_auth_failed(&fresh(API_KEY));
    assert_auth_failed(&in_session(API_KEY));

    let r = admin(&gw, Method::POST, &format!("/api/v1/api-keys/{id}/enable"), None);
    assert_eq!(r.status, 200, "enable: {}", r.text);
    assert_eq!(fresh(API_KEY).status, 200, "an enabled key works again at once");
    assert_eq!(in_session(API_KEY).status, 200);

    let r = admin(&gw, Method::POST, &format!("/api/v1/api-keys/{id}/rotate"), None);
    assert_eq!(r.status, 200, "rotate: {}", r.text);
    let new_key = r.body["data"]["api_key"].as_str().expect("the new key").to_string();
    assert_auth_failed(&fresh(API_KEY));
    assert_auth_failed(&in_session(API_KEY));
    let r = fresh(&new_key);
    assert_eq!(r.status, 200, "the rotated key works at once: {}", r.text);
    runtime().block_on(async {
        let client = connect(&gw.mcp, &new_key).await;
        assert_eq!(call(&client, "gw_get_cache_status", json!({})).await["status"], json!("success"));
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_session_key_deleted_by_editing_the_file_stops_working() {
    let gw = start_configured();
    let http = http();
    let session = open_session(&http, &gw.mcp, KEY_B, "2025-03-26");
    let mut config = read_json(gw.config_path());
    config["apikeys"].as_object_mut().unwrap().remove(KEY_B);
    replace_json(gw.config_path(), &config);
    let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-03-26")];
    let gone = common::wait_until(RELOAD_DEADLINE + Duration::from_millis(500), || {
        post(&http, &gw.mcp, Some(KEY_B), &headers, &tool_list_body(2)).status == 401
    });
    assert!(gone, "a key removed from the file still works after {RELOAD_DEADLINE:?}");
    assert_auth_failed(&post(&http, &gw.mcp, Some(KEY_B), &[], &initialize_body(1, "2025-03-26")));
}

/// A plain `tools/call` is answered as one JSON body in both modes, shaped for the revision in use (`resultType`
/// only in the stateless revision), while anything unusual still gets the protocol layer's answer.
#[test]
fn plain_tool_calls_are_answered_as_json_in_both_modes() {
    let gw = start_configured();
    let http = http();
    let session = open_session(&http, &gw.mcp, API_KEY, "2025-11-25");
    let sid = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-11-25")];
    let r = post(&http, &gw.mcp, Some(API_KEY), &sid, &tools_call_body(3, "gw_get_cache_status", json!({})));
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.is_json(), "a session's plain tool call answered as {:?}", r.content_type);
    assert_eq!(r.message["id"], json!(3));
    assert_eq!(r.message["result"]["structuredContent"]["status"], json!("success"), "{}", r.text);
    assert!(r.message["result"].get("resultType").is_none(), "no resultType before 2026-07-28: {}", r.text);

    let mut body = tools_call_body(4, "gw_get_cache_status", json!({}));
    body["params"]["_meta"] = stateless_meta();
    let headers = stateless_headers("tools/call", Some("gw_get_cache_status"));
    let r = post(&http, &gw.mcp, Some(API_KEY), &headers, &body);
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.is_json(), "{:?}", r.content_type);
    assert_eq!(r.message["result"]["resultType"], json!("complete"), "{}", r.text);
    assert_eq!(r.message["result"]["structuredContent"]["cache_type"], json!("local"));

    // The same call with a header that contradicts the body: the protocol layer refuses it.
    let wrong = stateless_headers("tools/call", Some("gw_clear_cache"));
    let r = post(&http, &gw.mcp, Some(API_KEY), &wrong, &body);
    assert_eq!(r.status, 400, "Mcp-Name contradicting the body: {}", r.text);
    // Arguments that do not fit: a JSON-RPC invalid-params error, in a session too.
    let bad = tools_call_body(5, "gw_get_server_info", json!({"server_name": 1}));
    let r = post(&http, &gw.mcp, Some(API_KEY), &sid, &bad);
    assert_eq!(r.message["error"]["code"], json!(-32602), "{}", r.text);
}
