//! A real upstream from npm: `@modelcontextprotocol/server-everything` in its stdio mode behind the gateway, reached
//! with rmcp's client over streamable HTTP. The package is installed once into `target/npm-peers` (see
//! `mcp::everything_bin`); without npm this test fails with a message saying so.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::API_KEY;
use mcp::*;
use serde_json::{Value, json};

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
        // The poisoning checks (on by default, `warn`) find nothing in a real server's ordinary tools.
        assert!(found.get("findings").is_none(), "findings on server-everything: {}", found["findings"]);
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

/// The same server in transparent mode: its tools, prompts, resources and templates as the gateway's own, named with
/// the server's prefix, and every call, prompt and read through the gateway.
#[test]
fn server_everything_is_served_transparently() {
    let bin = everything_bin();
    let server = json!({
        "server_name": "everything",
        "description": "MCP reference server",
        "config": {"command": bin.to_str().unwrap(), "args": []},
        "input_guardrails_policy": {"enabled": true, "additional_config": {"pii_redaction": true}},
    });
    let mut config = config_with(vec![server], json!({"tool_exposure": "transparent"}));
    config["plugins"]["guardrails"] =
        json!({"provider": "custom_keyword", "config": {"blocked_keywords": ["drop table"]}});
    let gw = TestGateway::start(&config);
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let capabilities = client.peer_info().map(|info| serde_json::to_value(&info.capabilities).unwrap());
        let capabilities = capabilities.expect("server info");
        for declared in ["tools", "prompts", "resources", "completions"] {
            assert!(capabilities.get(declared).is_some(), "{declared} declared: {capabilities}");
        }

        // Tools: listed with the prefix, the upstream's definitions otherwise unchanged, called through the gateway.
        let tools = client.list_all_tools().await.expect("tools/list");
        let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
        assert!(names.contains(&"everything__echo") && names.contains(&"everything__get-sum"), "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("everything__")), "{names:?}");
        let structured = tools.iter().find(|t| t.name == "everything__get-structured-content").expect("tool");
        assert!(structured.output_schema.is_some(), "the outputSchema is kept: {structured:?}");
        let echoed = try_call(&client, "everything__echo", json!({"message": "mail jane.doe@example.com"})).await;
        let echoed = echoed.expect("echo");
        assert!(upstream_text(&echoed).contains("jane.doe@example.com"), "restored for the client: {echoed}");
        let sum = try_call(&client, "everything__get-sum", json!({"a": 19, "b": 23})).await.expect("get-sum");
        assert!(upstream_text(&sum).contains("42"), "{sum}");
        let blocked = try_call(&client, "everything__echo", json!({"message": "DROP TABLE users"})).await.unwrap();
        assert_eq!(answer_of(&blocked)["status"], json!("blocked"), "{blocked}");
        let unknown = try_call(&client, "echo", json!({"message": "x"})).await.expect_err("unprefixed");
        assert!(unknown.contains("-32602") || unknown.contains("nknown tool"), "{unknown}");

        // Prompts, named as tools are.
        let prompts = client.list_all_prompts().await.expect("prompts/list");
        let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
        assert!(
            names.contains(&"everything__simple-prompt") && names.contains(&"everything__args-prompt"),
            "{names:?}"
        );
        let params = serde_json::from_value(json!({"name": "everything__args-prompt", "arguments": {"city": "Paris"}}));
        let got = client.get_prompt(params.unwrap()).await.expect("prompts/get");
        let got = serde_json::to_value(&got).unwrap();
        assert!(got.to_string().contains("Paris"), "{got}");
        let params = serde_json::from_value(json!({"name": "simple-prompt"})).unwrap();
        assert!(client.get_prompt(params).await.is_err(), "an unprefixed prompt name is unknown");

        // Resources and templates, URIs unchanged; a read goes to the server whose template matches.
        let resources = client.list_all_resources().await.expect("resources/list");
        assert!(!resources.is_empty(), "server-everything lists its static documents");
        let first = resources[0].uri.clone();
        let read = client.read_resource(serde_json::from_value(json!({"uri": first})).unwrap()).await;
        assert!(
            !serde_json::to_value(read.expect("resources/read")).unwrap()["contents"].as_array().unwrap().is_empty()
        );
        let templates = client.list_all_resource_templates().await.expect("resources/templates/list");
        let uris: Vec<&str> = templates.iter().map(|t| t.uri_template.as_str()).collect();
        assert!(uris.iter().any(|u| u.starts_with("demo://resource/dynamic/text/")), "{uris:?}");
        let read = client
            .read_resource(serde_json::from_value(json!({"uri": "demo://resource/dynamic/text/3"})).unwrap())
            .await
            .expect("a templated resource");
        let read = serde_json::to_value(read).unwrap();
        assert_eq!(read["contents"][0]["uri"], json!("demo://resource/dynamic/text/3"), "{read}");
        let missing = client.read_resource(serde_json::from_value(json!({"uri": "nowhere://x"})).unwrap()).await;
        // Resource not found with the URI as `data.uri` (SEP-2164), as an upstream answers it.
        match missing {
            Err(rmcp::service::ServiceError::McpError(error)) => {
                assert_eq!(error.data, Some(json!({"uri": "nowhere://x"})), "{error:?}")
            }
            other => panic!("a URI no server serves: {other:?}"),
        }
        // Prompts, resources and templates are pinned and scanned as tools are (contract 14): the reference server's
        // are pinned on first use and give no finding.
        let file: Value = serde_json::from_slice(&std::fs::read(gw.config_path()).unwrap()).unwrap();
        let entry = &file["mcp_configs"][common::CONFIG_ID]["mcp_config"][0];
        assert!(entry["prompt_pins"]["simple-prompt"].is_string(), "prompts pinned: {entry}");
        assert!(entry["resource_pins"].as_object().is_some_and(|pins| pins.len() > 1), "resources pinned: {entry}");
        assert!(!gw.logs().contains("definition finding"), "no finding on server-everything's offers");

        // Completion routes by the exposed prompt name.
        let params = json!({"ref": {"type": "ref/prompt", "name": "everything__completable-prompt"},
                            "argument": {"name": "department", "value": "Eng"}});
        let completed = client.complete(serde_json::from_value(params).unwrap()).await.expect("completion/complete");
        let completed = serde_json::to_value(completed).unwrap();
        assert_eq!(completed["completion"]["values"], json!(["Engineering"]), "{completed}");
        client.cancel().await.unwrap();
    });
}

/// A client that answers the server's sampling and elicitation requests and records the progress it is sent.
// Sampling and roots are deprecated by SEP-2577 for the newest revision; clients of the others still use them.
#[derive(Clone, Default)]
struct AnsweringClient {
    progress: std::sync::Arc<std::sync::Mutex<Vec<(Value, f64)>>>,
    sampled: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    updated: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    updates: std::sync::Arc<tokio::sync::Notify>,
    /// Speaks the stateless revision 2026-07-28.
    stateless: bool,
}

#[allow(deprecated)]
impl rmcp::ClientHandler for AnsweringClient {
    async fn create_message(
        &self,
        params: rmcp::model::CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::CreateMessageResult, rmcp::ErrorData> {
        self.sampled.lock().unwrap().push(serde_json::to_value(&params).unwrap());
        let answer = json!({"model": "test-model", "role": "assistant", "content": {"type": "text", "text": "sampled by the test"}});
        Ok(serde_json::from_value(answer).unwrap())
    }

    async fn create_elicitation(
        &self,
        _request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        Ok(serde_json::from_value(json!({"action": "accept", "content": {"name": "Ada Lovelace"}})).unwrap())
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.progress.lock().unwrap().push((serde_json::to_value(&params.progress_token).unwrap(), params.progress));
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.updated.lock().unwrap().push(params.uri);
        self.updates.notify_one();
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = serde_json::from_value(json!({"sampling": {}, "elicitation": {}})).unwrap();
        let config =
            rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::new("relay-test", "1.0.0"));
        if self.stateless { config.with_protocol_version(rmcp::model::ProtocolVersion::V_2026_07_28) } else { config }
    }
}

/// During a transparent call, what server-everything sends for it reaches the caller: progress with the caller's own
/// token, and its sampling and elicitation requests, answered by the client. Over HTTP the gateway answers the call on
/// its own stream; over stdio rmcp's protocol layer carries the messages.
#[test]
fn server_everything_progress_sampling_and_elicitation_reach_the_caller() {
    use rmcp::ServiceExt;
    let bin = everything_bin();
    let server = json!({
        "server_name": "everything",
        "config": {"command": bin.to_str().unwrap(), "args": []},
    });
    let gw = TestGateway::start(&config_with(vec![server], json!({"tool_exposure": "transparent"})));
    runtime().block_on(async {
        let handler = AnsweringClient::default();
        let client = handler.clone().serve(http_transport(&gw.mcp, API_KEY, &[])).await.expect("connect");
        relays_reach(&client, &handler, "HTTP").await;
        client.cancel().await.unwrap();

        let handler = AnsweringClient::default();
        let command = stdio_command(gw.config_path(), &[("GW_GATEWAY_KEY", API_KEY)]);
        let transport = rmcp::transport::TokioChildProcess::new(tokio::process::Command::from(command)).unwrap();
        let client = handler.clone().serve(transport).await.expect("connect over stdio");
        relays_reach(&client, &handler, "stdio").await;
        client.cancel().await.unwrap();
    });
}

async fn relays_reach(client: &rmcp::service::Peer<rmcp::RoleClient>, handler: &AnsweringClient, front: &str) {
    relays_of(client, handler, front, "everything").await
}

async fn relays_of(
    client: &rmcp::service::Peer<rmcp::RoleClient>,
    handler: &AnsweringClient,
    front: &str,
    server: &str,
) {
    let call = |name: &str, args: Value| {
        let mut params = rmcp::model::CallToolRequestParams::new(name.to_string());
        if let Value::Object(map) = args {
            params = params.with_arguments(map);
        }
        client.call_tool(params)
    };
    let done = call(&format!("{server}__trigger-long-running-operation"), json!({"duration": 0.3, "steps": 3}));
    let done = serde_json::to_value(done.await.expect("long-running operation")).unwrap();
    assert!(upstream_text(&done).contains("Steps: 3"), "{front}: {done}");
    // The client handles notifications in tasks of their own: the last may be handled just after the answer.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
    while handler.progress.lock().unwrap().len() < 3 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let progress = handler.progress.lock().unwrap().clone();
    assert_eq!(progress.iter().map(|(_, p)| *p).collect::<Vec<_>>(), [1.0, 2.0, 3.0], "{front}: {progress:?}");
    // rmcp's client gives every request its own token; the relayed progress carries it.
    assert!(progress.iter().all(|(token, _)| *token == progress[0].0), "{front}: {progress:?}");

    let sampled = call(&format!("{server}__trigger-sampling-request"), json!({"prompt": "say hi", "maxTokens": 10}));
    let sampled = serde_json::to_value(sampled.await.expect("sampling")).unwrap();
    assert!(sampled.to_string().contains("sampled by the test"), "{front}: {sampled}");
    assert!(handler.sampled.lock().unwrap()[0].to_string().contains("say hi"), "{front}");

    let elicited = call(&format!("{server}__trigger-elicitation-request"), json!({})).await.expect("elicitation");
    let elicited = serde_json::to_value(elicited).unwrap();
    assert!(elicited.to_string().contains("Ada Lovelace"), "{front}: {elicited}");
}

/// A session subscribed to one of server-everything's resources hears of its updates.
#[test]
// `resources/subscribe` is legacy-only in rmcp's newest revision; sessions of 2025-11-25 and before use it.
#[allow(deprecated)]
fn subscriptions_reach_the_subscribed_session() {
    use rmcp::ServiceExt;
    let bin = everything_bin();
    let server = json!({"server_name": "everything", "config": {"command": bin.to_str().unwrap(), "args": []}});
    let gw = TestGateway::start(&config_with(vec![server], json!({"tool_exposure": "transparent"})));
    runtime().block_on(async {
        let handler = AnsweringClient::default();
        let client = handler.clone().serve(http_transport(&gw.mcp, API_KEY, &[])).await.expect("connect");
        let capabilities = serde_json::to_value(&client.peer_info().unwrap().capabilities).unwrap();
        assert_eq!(capabilities["resources"]["subscribe"], json!(true), "{capabilities}");
        let resources = client.list_all_resources().await.expect("resources/list");
        let uri = resources[0].uri.clone();
        client.subscribe(serde_json::from_value(json!({"uri": uri})).unwrap()).await.expect("subscribe");
        let mut params = rmcp::model::CallToolRequestParams::new("everything__toggle-subscriber-updates");
        params = params.with_arguments(serde_json::Map::new());
        client.call_tool(params.clone()).await.expect("updates on");
        let heard = tokio::time::timeout(std::time::Duration::from_secs(10), handler.updates.notified()).await;
        assert!(heard.is_ok(), "the subscribed session heard of the update");
        assert_eq!(handler.updated.lock().unwrap()[0], uri);
        client.unsubscribe(serde_json::from_value(json!({"uri": uri})).unwrap()).await.expect("unsubscribe");
        client.call_tool(params).await.expect("updates off");
        let missing = client.subscribe(serde_json::from_value(json!({"uri": "nowhere://x"})).unwrap()).await;
        assert!(missing.is_err(), "a URI no server serves");
        client.cancel().await.unwrap();
    });
}

/// A stateless (2026-07-28) client gets the upstream's questions as `input_required` rounds: rmcp's client answers
/// them with its handler and asks again, and the call completes with the answers.
#[test]
fn stateless_clients_answer_the_upstreams_questions_in_input_required_rounds() {
    use rmcp::ClientServiceExt;
    let bin = everything_bin();
    let server = json!({"server_name": "everything", "config": {"command": bin.to_str().unwrap(), "args": []}});
    let gw = TestGateway::start(&config_with(vec![server], json!({"tool_exposure": "transparent"})));
    runtime().block_on(async {
        let handler = AnsweringClient { stateless: true, ..AnsweringClient::default() };
        let mode = rmcp::ClientLifecycleMode::Discover {
            preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
        };
        let transport = http_transport(&gw.mcp, API_KEY, &[]);
        let client = handler.clone().serve_with_lifecycle(transport, mode).await.expect("discover");
        let call = |name: &str, args: Value| {
            let mut params = rmcp::model::CallToolRequestParams::new(name.to_string());
            if let Value::Object(map) = args {
                params = params.with_arguments(map);
            }
            client.call_tool(params)
        };
        let sampled = call("everything__trigger-sampling-request", json!({"prompt": "say hi", "maxTokens": 10}));
        let sampled = serde_json::to_value(sampled.await.expect("sampling in rounds")).unwrap();
        assert!(sampled.to_string().contains("sampled by the test"), "{sampled}");
        let elicited = call("everything__trigger-elicitation-request", json!({})).await.expect("elicitation in rounds");
        assert!(serde_json::to_value(elicited).unwrap().to_string().contains("Ada Lovelace"));
        let echoed = call("everything__echo", json!({"message": "no questions"})).await.expect("a plain call");
        assert!(upstream_text(&serde_json::to_value(echoed).unwrap()).contains("no questions"));
        // The upstream's progress reaches the stateless request on its own stream, with its own token.
        let done = call("everything__trigger-long-running-operation", json!({"duration": 0.3, "steps": 3}));
        let done = serde_json::to_value(done.await.expect("long-running operation")).unwrap();
        assert!(upstream_text(&done).contains("Steps: 3"), "{done}");
        let heard =
            eventually(std::time::Duration::from_secs(5), || async { handler.progress.lock().unwrap().len() >= 3 });
        assert!(heard.await, "progress of a stateless call: {:?}", handler.progress.lock().unwrap());
        let progress = handler.progress.lock().unwrap().clone();
        assert_eq!(progress.iter().map(|(_, p)| *p).collect::<Vec<_>>(), [1.0, 2.0, 3.0], "{progress:?}");
        client.cancel().await.unwrap();
    });
}

/// server-everything started as a remote server (`streamableHttp` or `sse` mode) on a free loopback port; ended when
/// dropped.
struct RemoteEverything {
    child: std::process::Child,
    port: u16,
}

impl RemoteEverything {
    fn start(mode: &str) -> RemoteEverything {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        RemoteEverything::start_on(mode, port)
    }

    fn start_on(mode: &str, port: u16) -> RemoteEverything {
        let child = std::process::Command::new(everything_bin())
            .arg(mode)
            .env("PORT", port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start server-everything");
        let listening = common::wait_until(std::time::Duration::from_secs(60), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        assert!(listening, "server-everything {mode} listens on {port}");
        RemoteEverything { child, port }
    }
}

impl Drop for RemoteEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// server-everything as a remote server, over streamable HTTP and over the 2024-11-05 HTTP+SSE transport: discovered,
/// called securely and transparently, with its progress, sampling and elicitation relayed to the caller during a call,
/// exactly as the process is.
#[test]
fn remote_server_everything_over_streamable_http_and_sse() {
    use rmcp::ServiceExt;
    let streamable = RemoteEverything::start("streamableHttp");
    let sse = RemoteEverything::start("sse");
    let servers = vec![
        json!({"server_name": "streamable",
               "config": {"url": format!("http://127.0.0.1:{}/mcp", streamable.port), "transport": "streamable_http"}}),
        json!({"server_name": "legacy",
               "config": {"url": format!("http://127.0.0.1:{}/sse", sse.port), "transport": "sse"}}),
    ];
    let gw = TestGateway::start(&config_with(servers, json!({"tool_exposure": "both"})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        for server in ["streamable", "legacy"] {
            let found = call(&client, "gw_discover_all_tools", json!({"server_name": server})).await;
            assert_eq!(found["status"], json!("success"), "{server}: {found}");
            assert!(found["server_metadata"]["name"].as_str().is_some_and(|n| n.contains("everything")), "{found}");
            let names = sorted_tool_names(&found);
            assert!(names.iter().any(|n| n == "echo"), "{server}: {names:?}");
            let calls = calls(
                server,
                &[("echo", json!({"message": format!("hello {server}")})), ("get-sum", json!({"a": 2, "b": 40}))],
            );
            let answer = call(&client, "gw_secure_call_tools", calls).await;
            let results = answer["results"].as_array().expect("results");
            assert!(success_text(&results[0], "echo").contains(&format!("hello {server}")), "{server}: {answer}");
            assert!(success_text(&results[1], "get-sum").contains("42"), "{server}: {answer}");
        }
        client.cancel().await.unwrap();

        for server in ["streamable", "legacy"] {
            let handler = AnsweringClient::default();
            let client = handler.clone().serve(http_transport(&gw.mcp, API_KEY, &[])).await.expect("connect");
            relays_of(&client, &handler, server, server).await;
            client.cancel().await.unwrap();
        }

        for transport in ["streamable_http", "sse"] {
            let series = format!("mcpgw_upstream_connections{{transport=\"{transport}\"}}");
            let open = tokio::task::block_in_place(|| metric(&gw, &series));
            assert_eq!(open, 1.0, "{transport} sessions open");
        }

        // Both remotes restart, their sessions gone: the next calls open new ones.
        let (streamable_port, sse_port) = (streamable.port, sse.port);
        drop((streamable, sse));
        let _restarted = (
            RemoteEverything::start_on("streamableHttp", streamable_port),
            RemoteEverything::start_on("sse", sse_port),
        );
        let client = connect(&gw.mcp, API_KEY).await;
        for server in ["streamable", "legacy"] {
            let answer =
                call(&client, "gw_secure_call_tools", calls(server, &[("echo", json!({"message": "again"}))])).await;
            assert!(
                success_text(&answer["results"][0], "echo").contains("again"),
                "{server} after a restart: {answer}"
            );
        }
        client.cancel().await.unwrap();
    });
}

/// A client that declares `roots` (when it has any to give) and answers `roots/list` with them.
#[derive(Clone)]
struct RootsClient {
    roots: Option<Vec<&'static str>>,
}

#[allow(deprecated)]
impl rmcp::ClientHandler for RootsClient {
    async fn list_roots(
        &self,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, rmcp::ErrorData> {
        let roots = self.roots.iter().flatten().map(|uri| json!({"uri": uri, "name": "workspace"})).collect::<Vec<_>>();
        Ok(serde_json::from_value(json!({"roots": roots})).unwrap())
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = if self.roots.is_some() { json!({"roots": {"listChanged": true}}) } else { json!({}) };
        let capabilities = serde_json::from_value(capabilities).unwrap();
        rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::new("roots-test", "1.0.0"))
    }
}

/// Contract 15, "clients are not each other's": server-everything keeps the roots it was told per connection, and
/// one shared process serves every client of the gateway. The roots one client gave must never be shown to another:
/// a process that was told a client's roots serves no other call, so the next client's call gets a process that asks
/// it (or, for a client without roots, one that knows none).
#[test]
fn roots_given_by_one_client_never_reach_another() {
    use rmcp::ServiceExt;
    let bin = everything_bin();
    let server = json!({"server_name": "everything", "config": {"command": bin.to_str().unwrap(), "args": []}});
    let gw = TestGateway::start(&config_with(vec![server], json!({"tool_exposure": "transparent"})));
    runtime().block_on(async {
        let roots_seen_by = |roots: Option<Vec<&'static str>>| {
            let mcp = gw.mcp.clone();
            async move {
                let client = RootsClient { roots }.serve(http_transport(&mcp, API_KEY, &[])).await.expect("connect");
                let params = rmcp::model::CallToolRequestParams::new("everything__get-roots-list");
                let answer = client.call_tool(params).await.expect("get-roots-list");
                client.cancel().await.unwrap();
                upstream_text(&serde_json::to_value(answer).unwrap())
            }
        };
        let first = roots_seen_by(Some(vec!["file:///home/alice/secret-project"])).await;
        assert!(first.contains("secret-project"), "the caller's own roots: {first}");
        let second = roots_seen_by(Some(vec!["file:///home/bob/work"])).await;
        assert!(second.contains("/home/bob/work"), "the second client's own roots: {second}");
        assert!(!second.contains("secret-project"), "another client's roots reached the second client: {second}");
        let third = roots_seen_by(None).await;
        assert!(!third.contains("secret-project") && !third.contains("bob"), "roots reached a client: {third}");
    });
}
