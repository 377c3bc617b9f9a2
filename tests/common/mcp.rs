//! Helpers for the black-box tests of the MCP gateway (contract section 4): configs with upstream servers, a gateway
//! that is stopped with SIGTERM when the test ends, rmcp's real MCP client over streamable HTTP and over stdio, raw
//! HTTP for the wire-level cases (status codes, headers, JSON or SSE bodies), and the assertions every tool result must
//! satisfy (`structuredContent` plus the same JSON as the one text content, `isError` unless the status is success).
//!
//! Test files include it next to `common` with `#[path = "common/mcp.rs"] mod mcp;`, so the admin tests do not build it.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Map, Value, json};

use crate::common::{
    ADMIN_KEY, ALICE_ID, BOB_ID, CONFIG_ID, CREATED_AT, Gateway, PROJECT_ID, SPARE_CONFIG_ID, base_command, fixture,
    write_json,
};

/// A second key in project alpha, for bob (same MCP config as [`API_KEY`]).
pub const KEY_B: &str = "gwkey-bob-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ";
/// A key of project alpha that is disabled in the file.
pub const DISABLED_KEY: &str = "gwkey-disabled-0123456789abcdefghijklmnopqrstuvwxyzABCDE";
/// Project beta uses the spare config (no servers); its key is [`BETA_KEY`].
pub const BETA_PROJECT_ID: &str = "b7c8d9e0-1f2a-4b3c-9d4e-5f6a7b8c9d0e";
pub const BETA_KEY: &str = "gwkey-beta-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHI";

/// The protocol revisions that open a session with `initialize`.
pub const INITIALIZE_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// The stateless revision.
pub const STATELESS_REVISION: &str = "2026-07-28";

/// The seven tools of contract section 4.
pub const GW_TOOLS: [&str; 7] = [
    "gw_list_all_servers",
    "gw_get_server_info",
    "gw_discover_all_tools",
    "gw_secure_call_tools",
    "gw_get_cache_status",
    "gw_clear_cache",
    "gw_get_timeout_metrics",
];

/// Deadline for an MCP round trip that may start an upstream process.
pub const CALL_DEADLINE: Duration = Duration::from_secs(60);

/// The mock upstream binary built with the crate.
pub fn mock_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mcpgw-mock-upstream")
}

/// A server entry running the mock upstream over stdio.
pub fn mock_server(name: &str) -> Value {
    json!({
        "server_name": name,
        "description": format!("Mock upstream {name}"),
        "config": {"command": mock_bin(), "args": []}
    })
}

/// A server entry `up` running `tests/fixtures/hostile_upstream.py` with `offers` (written to a file in `dir`), which
/// records what it receives in `dir/received.jsonl`.
pub fn hostile_upstream_offering(dir: &Path, mut offers: Value) -> Value {
    offers["record"] = json!(dir.join("received.jsonl"));
    let file = dir.join("offers.json");
    std::fs::write(&file, offers.to_string()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile_upstream.py");
    json!({"server_name": "up", "config": {"command": "python3",
        "args": [script.to_str().unwrap(), file.to_str().unwrap()]}})
}

/// A config with the fixture's users and projects, `servers` as the servers of `default_config`, and `common` merged
/// into `common_mcp_gateway_config`. Keys: [`API_KEY`] (alice) and [`KEY_B`] (bob) in alpha, [`DISABLED_KEY`],
/// and [`BETA_KEY`] in project beta, whose config (`spare_config`) has no servers.
pub fn config_with(servers: Vec<Value>, common: Value) -> Value {
    let mut c = fixture();
    c["mcp_configs"][CONFIG_ID]["mcp_config"] = Value::Array(servers);
    if let Value::Object(extra) = common {
        for (k, v) in extra {
            c["common_mcp_gateway_config"][k] = v;
        }
    }
    c["projects"][PROJECT_ID]["users"] = json!([ALICE_ID, BOB_ID]);
    c["projects"][BETA_PROJECT_ID] = json!({
        "project_name": "beta", "mcp_config_id": SPARE_CONFIG_ID, "users": [BOB_ID], "created_at": CREATED_AT
    });
    c["apikeys"][KEY_B] =
        json!({"project_id": PROJECT_ID, "user_id": BOB_ID, "created_at": CREATED_AT, "disabled": false});
    c["apikeys"][DISABLED_KEY] =
        json!({"project_id": PROJECT_ID, "user_id": ALICE_ID, "created_at": CREATED_AT, "disabled": true});
    c["apikeys"][BETA_KEY] =
        json!({"project_id": BETA_PROJECT_ID, "user_id": BOB_ID, "created_at": CREATED_AT, "disabled": false});
    c
}

/// A running gateway on its own temporary config. Dropping it sends SIGTERM (so upstream processes are ended the way
/// the product ends them) and kills it if it has not exited after a few seconds.
pub struct TestGateway {
    pub gw: Gateway,
    pub dir: tempfile::TempDir,
    /// `http://127.0.0.1:PORT/mcp/`
    pub mcp: String,
}

impl TestGateway {
    pub fn start(config: &Value) -> TestGateway {
        Self::start_with(config, &[])
    }

    /// Starts `mcpgw serve` on port-0 listeners with extra environment variables.
    pub fn start_with(config: &Value, envs: &[(&str, &str)]) -> TestGateway {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gw_mcp_config.json");
        write_json(&path, config);
        let gw = Gateway::start_with(&path, envs);
        assert!(!gw.gateway.is_empty(), "no gateway listening line; stderr:\n{}", gw.logs());
        let mcp = format!("{}/mcp/", gw.gateway);
        TestGateway { gw, dir, mcp }
    }

    pub fn config_path(&self) -> &Path {
        &self.gw.config_path
    }

    /// `host:port` of the gateway listener.
    pub fn authority(&self) -> &str {
        self.gw.gateway.trim_start_matches("http://")
    }

    pub fn logs(&self) -> String {
        self.gw.logs()
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        self.gw.terminate(Duration::from_secs(10));
    }
}

/// A tokio runtime for the async parts of a synchronous test (rmcp's client). Blocking HTTP (`reqwest::blocking`)
/// must stay outside `block_on`.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Whether a process runs: `kill -0` succeeds and it is not a zombie waiting for a reaper.
pub fn alive(pid: u32) -> bool {
    let signalled = Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !signalled {
        return false;
    }
    // A zombie has ended; it only waits for its (possibly non-reaping) parent.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with('Z')).unwrap_or(true),
        Err(_) => false,
    }
}

/// Polls until every pid is gone or `within` passes; returns the pids still alive.
pub fn wait_gone(pids: &[u32], within: Duration) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Tool results
// ---------------------------------------------------------------------------------------------------------------

/// Checks the contract's shape of a gateway tool result (`structuredContent` is the answer object, the one text
/// content is the same object as JSON, `isError` exactly when `status` is not `success`) and returns the object.
#[track_caller]
pub fn answer_of(result: &Value) -> Value {
    let structured = result
        .get("structuredContent")
        .cloned()
        .unwrap_or_else(|| panic!("tool result without structuredContent: {result}"));
    assert!(structured.is_object(), "structuredContent is not an object: {result}");
    let content = result["content"].as_array().unwrap_or_else(|| panic!("tool result without content: {result}"));
    assert_eq!(content.len(), 1, "expected exactly one content block: {result}");
    assert_eq!(content[0]["type"], json!("text"), "the content block is not text: {result}");
    let text = content[0]["text"].as_str().unwrap_or_else(|| panic!("text content without text: {result}"));
    let parsed: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("text content is not JSON ({e}): {text}"));
    assert_eq!(parsed, structured, "text content and structuredContent differ");
    let success = structured["status"] == json!("success");
    let is_error = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
    assert_eq!(is_error, !success, "isError must be true exactly when status is not success: {result}");
    structured
}

/// [`answer_of`] for rmcp's typed result.
#[track_caller]
pub fn answer(result: &CallToolResult) -> Value {
    answer_of(&serde_json::to_value(result).unwrap())
}

/// Asserts `{status: "error", error_code: code, message: <string>}` and returns the message.
#[track_caller]
pub fn assert_error(value: &Value, code: &str) -> String {
    assert_eq!(value["status"], json!("error"), "expected an error: {value}");
    assert_eq!(value["error_code"], json!(code), "unexpected error_code: {value}");
    value["message"].as_str().unwrap_or_else(|| panic!("error without message: {value}")).to_string()
}

/// The text of the first text content of an upstream `CallToolResult` (as JSON).
#[track_caller]
pub fn upstream_text(response: &Value) -> String {
    response["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("upstream response without text content: {response}"))
        .to_string()
}

/// One successful element of `results`: asserts `{status: "success", tool_name}` and returns the upstream text.
#[track_caller]
pub fn success_text(result: &Value, tool: &str) -> String {
    assert_eq!(result["status"], json!("success"), "expected a successful call of {tool}: {result}");
    assert_eq!(result["tool_name"], json!(tool), "tool_name: {result}");
    upstream_text(&result["response"])
}

/// `{"server_name": server, "tool_calls": [{name, args}, ..]}`.
pub fn calls(server: &str, list: &[(&str, Value)]) -> Value {
    let calls: Vec<Value> = list.iter().map(|(name, args)| json!({"name": name, "args": args})).collect();
    json!({"server_name": server, "tool_calls": calls})
}

// ---------------------------------------------------------------------------------------------------------------
// rmcp client
// ---------------------------------------------------------------------------------------------------------------

pub type McpClient = RunningService<RoleClient, ClientConfig>;

/// What the test client says about itself, asking for `version`.
pub fn client_config(version: ProtocolVersion) -> ClientConfig {
    ClientConfig::new(ClientCapabilities::default(), Implementation::new("mcpgw-tests", "1.0.0"))
        .with_protocol_version(version)
}

pub fn http_transport(
    url: &str,
    key: &str,
    headers: &[(&str, &str)],
) -> StreamableHttpClientTransport<reqwest::Client> {
    let mut custom = HashMap::new();
    for (name, value) in headers {
        custom.insert(
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            reqwest::header::HeaderValue::from_str(value).unwrap(),
        );
    }
    // reqwest is built with rustls but without a default crypto provider (see src/outbound.rs).
    mcpgw::outbound::ensure_crypto_provider();
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string())
        .auth_header(key.to_string())
        .custom_headers(custom)
        .reinit_on_expired_session(false);
    StreamableHttpClientTransport::from_config(config)
}

/// An rmcp client session over streamable HTTP with `Authorization: Bearer key` and extra headers, initialized with
/// the given protocol revision.
pub async fn try_connect(
    url: &str,
    key: &str,
    headers: &[(&str, &str)],
    version: ProtocolVersion,
) -> Result<McpClient, String> {
    let transport = http_transport(url, key, headers);
    client_config(version).serve(transport).await.map_err(|e| e.to_string())
}

/// An rmcp client session (latest revision with `initialize`).
pub async fn connect(url: &str, key: &str) -> McpClient {
    try_connect(url, key, &[], ProtocolVersion::V_2025_11_25)
        .await
        .unwrap_or_else(|e| panic!("MCP client could not connect to {url}: {e}"))
}

/// An rmcp client in the stateless 2026-07-28 mode (`server/discover`, per-request `_meta`).
pub async fn connect_stateless(url: &str, key: &str) -> McpClient {
    let transport = http_transport(url, key, &[]);
    client_config(ProtocolVersion::V_2026_07_28)
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] },
        )
        .await
        .unwrap_or_else(|e| panic!("stateless MCP client could not discover {url}: {e}"))
}

/// Calls a gateway tool; the raw result as JSON, or the protocol error's text.
pub async fn try_call(client: &McpClient, tool: &str, args: Value) -> Result<Value, String> {
    let mut params = CallToolRequestParams::new(tool.to_string());
    if let Value::Object(map) = args {
        params = params.with_arguments(map);
    }
    let call = client.call_tool(params);
    match tokio::time::timeout(CALL_DEADLINE, call).await {
        Err(_) => Err(format!("{tool} did not answer within {CALL_DEADLINE:?}")),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(result)) => Ok(serde_json::to_value(&result).unwrap()),
    }
}

/// Calls a gateway tool and returns its checked answer object.
pub async fn call(client: &McpClient, tool: &str, args: Value) -> Value {
    let result = try_call(client, tool, args).await.unwrap_or_else(|e| panic!("{tool} failed: {e}"));
    answer_of(&result)
}

/// The tool names `tools/list` answers.
pub async fn tool_names(client: &McpClient) -> Vec<String> {
    let tools = client.list_all_tools().await.expect("tools/list");
    tools.iter().map(|t| t.name.to_string()).collect()
}

/// A command that runs `mcpgw serve --transport stdio` on `config_path` with the given credentials.
pub fn stdio_command(config_path: &Path, creds: &[(&str, &str)]) -> Command {
    let mut cmd = base_command();
    cmd.arg("serve").arg("--config").arg(config_path).args(["--transport", "stdio"]);
    for (k, v) in creds {
        cmd.env(k, v);
    }
    cmd
}

/// An rmcp client over a `mcpgw serve --transport stdio` child process; its stderr is collected in a thread.
pub async fn connect_stdio(cmd: Command) -> (McpClient, std::sync::Arc<std::sync::Mutex<String>>) {
    let (transport, stderr) = TokioChildProcess::builder(tokio::process::Command::from(cmd))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mcpgw serve --transport stdio");
    let collected = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    if let Some(stderr) = stderr {
        let sink = collected.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
    }
    let client = client_config(ProtocolVersion::V_2025_11_25).serve(transport).await.unwrap_or_else(|e| {
        panic!("stdio MCP client could not initialize: {e}; stderr:\n{}", collected.lock().unwrap())
    });
    (client, collected)
}

// ---------------------------------------------------------------------------------------------------------------
// Raw HTTP
// ---------------------------------------------------------------------------------------------------------------

/// An HTTP answer of the MCP endpoint. `message` is the JSON-RPC message: the body itself for a JSON answer, or the
/// first SSE `data:` event that is a response (has `result` or `error`) for an SSE answer.
#[derive(Debug)]
pub struct Rpc {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub content_type: String,
    pub text: String,
    pub message: Value,
}

impl Rpc {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_string)
    }

    pub fn is_sse(&self) -> bool {
        self.content_type.starts_with("text/event-stream")
    }

    pub fn is_json(&self) -> bool {
        self.content_type.starts_with("application/json")
    }
}

pub fn http() -> Client {
    crate::common::client_with_timeout(Duration::from_secs(60))
}

pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

/// POSTs a JSON-RPC body to the MCP endpoint. `key`: the bearer key, or None for no Authorization header. `headers`
/// come after the defaults (`Accept` both types, `Content-Type: application/json`) and replace them.
pub fn post(client: &Client, url: &str, key: Option<&str>, headers: &[(&str, &str)], body: &Value) -> Rpc {
    post_bytes(client, url, key, headers, serde_json::to_vec(body).unwrap())
}

pub fn post_bytes(client: &Client, url: &str, key: Option<&str>, headers: &[(&str, &str)], body: Vec<u8>) -> Rpc {
    let mut req = client.post(url).body(body);
    let mut map = vec![("accept", ACCEPT_BOTH.to_string()), ("content-type", "application/json".to_string())];
    if let Some(k) = key {
        map.push(("authorization", format!("Bearer {k}")));
    }
    for (name, value) in headers {
        map.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        map.push((name, value.to_string()));
    }
    for (name, value) in &map {
        req = req.header(*name, value);
    }
    read_rpc(req.send().unwrap_or_else(|e| panic!("POST {url} failed: {e}")))
}

/// Reads an answer; an SSE body is read only up to its first JSON-RPC response.
pub fn read_rpc(resp: reqwest::blocking::Response) -> Rpc {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let content_type =
        headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_ascii_lowercase();
    if content_type.starts_with("text/event-stream") {
        let mut text = String::new();
        let mut message = Value::Null;
        for line in BufReader::new(resp).lines() {
            let Ok(line) = line else { break };
            text.push_str(&line);
            text.push('\n');
            if let Some(data) = line.strip_prefix("data:")
                && let Ok(v) = serde_json::from_str::<Value>(data.trim())
                && (v.get("result").is_some() || v.get("error").is_some())
            {
                message = v;
                break;
            }
        }
        return Rpc { status, headers, content_type, text, message };
    }
    let text = resp.text().unwrap_or_default();
    let message = serde_json::from_str(&text).unwrap_or(Value::Null);
    Rpc { status, headers, content_type, text, message }
}

/// An `initialize` request for `version`.
pub fn initialize_body(id: u64, version: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "1"}}
    })
}

/// Opens a session with raw HTTP (`initialize` + `notifications/initialized`) and returns its id.
#[track_caller]
pub fn open_session(client: &Client, url: &str, key: &str, version: &str) -> String {
    let init = post(client, url, Some(key), &[], &initialize_body(1, version));
    assert_eq!(init.status, 200, "initialize failed: {}", init.text);
    let session = init.header("mcp-session-id").unwrap_or_else(|| panic!("initialize gave no Mcp-Session-Id"));
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", version)];
    let ack = post(client, url, Some(key), &headers, &note);
    assert_eq!(ack.status, 202, "notifications/initialized should get 202: {}", ack.text);
    session
}

/// A raw `tools/call` request body.
pub fn tools_call_body(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}})
}

/// The `_meta` the stateless revision requires on every request.
pub fn stateless_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS_REVISION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"}
    })
}

/// The headers of a stateless request for `method` (and `name` for tools/call).
pub fn stateless_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![("mcp-protocol-version", STATELESS_REVISION), ("mcp-method", method)];
    if let Some(n) = name {
        h.push(("mcp-name", n));
    }
    h
}

/// Asserts the 401 of contract 4 and returns `details`.
#[track_caller]
pub fn assert_auth_failed(r: &Rpc) -> String {
    assert_eq!(r.status, 401, "expected 401, got {}: {}", r.status, r.text);
    let challenge = r.header("www-authenticate").unwrap_or_else(|| panic!("401 without WWW-Authenticate: {}", r.text));
    assert!(challenge.starts_with("Bearer"), "WWW-Authenticate should be Bearer, got {challenge:?}");
    assert_eq!(r.message["jsonrpc"], json!("2.0"), "401 body is not JSON-RPC: {}", r.text);
    assert!(r.message["error"]["code"].is_i64(), "401 body without a JSON-RPC error code: {}", r.text);
    let data = &r.message["error"]["data"];
    assert_eq!(data["status"], json!("error"), "{}", r.text);
    assert_eq!(data["error_code"], json!("AUTH_FAILED"), "{}", r.text);
    assert!(data["message"].is_string(), "AUTH_FAILED without message: {}", r.text);
    data["details"].as_str().unwrap_or_else(|| panic!("AUTH_FAILED without details: {}", r.text)).to_string()
}

// ---------------------------------------------------------------------------------------------------------------
// Admin API and config edits
// ---------------------------------------------------------------------------------------------------------------

/// `DELETE` of an MCP session (the client closing it); the answer's status.
pub fn close_session(client: &Client, url: &str, key: &str, session: &str, version: &str) -> reqwest::StatusCode {
    client
        .delete(url)
        .header("authorization", format!("Bearer {key}"))
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", version)
        .send()
        .unwrap_or_else(|e| panic!("DELETE of the session failed: {e}"))
        .status()
}

/// A counter or gauge from the gateway's `/metrics`, e.g. `mcpgw_limit_hits_total{limit="sessions"}`; 0 when absent.
pub fn metric(gw: &TestGateway, series: &str) -> f64 {
    gw.gw.metric(series)
}

/// `mcpgw_limit_hits_total{limit}` from the gateway's `/metrics`; 0 when the series is absent.
pub fn limit_hits(gw: &TestGateway, limit: &str) -> f64 {
    metric(gw, &format!("mcpgw_limit_hits_total{{limit=\"{limit}\"}}"))
}

/// An admin API request with the fixture's admin key.
pub fn admin(gw: &TestGateway, method: reqwest::Method, path: &str, body: Option<&Value>) -> crate::common::Resp {
    crate::common::send(
        &gw.gw.client,
        method,
        &format!("{}{}", gw.gw.admin, path),
        Some(&format!("Bearer {ADMIN_KEY}")),
        body,
    )
}

// ---------------------------------------------------------------------------------------------------------------
// server-everything from npm
// ---------------------------------------------------------------------------------------------------------------

pub const EVERYTHING_PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// Installs `@modelcontextprotocol/server-everything` once into `target/npm-peers` and returns its stdio binary.
pub fn everything_bin() -> PathBuf {
    npm_peer("", EVERYTHING_PACKAGE, &[".bin", "mcp-server-everything"])
}

/// Installs npm `package` once into `target/npm-peers/<prefix>` (a lock file keeps parallel tests from installing
/// twice) and returns the file at `node_modules/<file...>`. Panics with a clear message when node or npm is missing:
/// the README's test command (`.ci/test`) installs them, and a test that needs a real peer must never pass without one.
pub fn npm_peer(prefix: &str, package: &str, file: &[&str]) -> PathBuf {
    let node = Command::new("node").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status();
    assert!(
        node.is_ok_and(|s| s.success()),
        "node is required for the tests with real MCP peers (install Node.js and npm); could not run `node --version`"
    );
    let mut dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target").join("npm-peers");
    if !prefix.is_empty() {
        dir = dir.join(prefix);
    }
    let bin = file.iter().fold(dir.join("node_modules"), |path, part| path.join(part));
    // `name@version`: installed when that exact version (or, for `node@22`, that major) is not there yet, so a new pin
    // replaces what an older one installed.
    let installed = || bin.exists() && npm_version_installed(&dir, package);
    if installed() {
        return bin;
    }
    let npm = Command::new("npm").arg("--version").output();
    match npm {
        Ok(out) if out.status.success() => {}
        _ => panic!(
            "npm is required for the tests with real MCP peers (install Node.js and npm); could not run `npm --version`"
        ),
    }
    fs::create_dir_all(&dir).unwrap();
    let lock = dir.join(".install.lock");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        match fs::OpenOptions::new().write(true).create_new(true).open(&lock) {
            Ok(_) => break,
            Err(_) => {
                if installed() {
                    return bin;
                }
                // A lock left by a killed run: older than the longest install we wait for.
                let stale = fs::metadata(&lock)
                    .and_then(|m| m.modified())
                    .map(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(600))
                    .unwrap_or(false);
                if stale {
                    let _ = fs::remove_file(&lock);
                }
                assert!(
                    Instant::now() < deadline,
                    "waited 10 minutes for another test's npm install ({})",
                    lock.display()
                );
                thread::sleep(Duration::from_millis(200));
            }
        }
    }
    struct Unlock(PathBuf);
    impl Drop for Unlock {
        fn drop(&mut self) {
            let _ = fs::remove_file(&self.0);
        }
    }
    let _unlock = Unlock(lock);
    if installed() {
        return bin;
    }
    let out = Command::new("npm")
        .arg("install")
        .arg("--prefix")
        .arg(&dir)
        .args(["--no-audit", "--no-fund", package])
        .stdin(Stdio::null())
        .output()
        .expect("run npm install");
    assert!(
        out.status.success() && installed(),
        "npm install {package} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// Whether `node_modules/<name>/package.json` under `dir` has the version `package` (`name@version`) asks for: that
/// exact version, or any of a bare major (`node@22`).
fn npm_version_installed(dir: &Path, package: &str) -> bool {
    let Some((name, wanted)) = package.rsplit_once('@').filter(|(name, _)| !name.is_empty()) else {
        return true;
    };
    let manifest = name.split('/').fold(dir.join("node_modules"), |path, part| path.join(part)).join("package.json");
    let Ok(text) = fs::read_to_string(manifest) else { return false };
    let version = serde_json::from_str::<Value>(&text).ok().and_then(|v| v["version"].as_str().map(str::to_string));
    version.is_some_and(|v| v == wanted || (!wanted.contains('.') && v.starts_with(&format!("{wanted}."))))
}

/// Sends SIGTERM to the gateway and waits for its exit status.
pub fn sigterm(gw: &mut TestGateway) -> ExitStatus {
    gw.gw.signal_and_wait("TERM")
}

/// Converts a JSON object into rmcp's argument map.
pub fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Polls an async condition every 50 ms until it holds or `within` passes; returns whether it held.
pub async fn eventually<F, Fut>(within: Duration, mut condition: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if condition().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Arguments of the mock's `slow` tool that make it write `started` when the call reaches it (the readiness signal of
/// a call in flight).
pub fn slow_marked(ms: u64, started: &Path) -> Value {
    json!({"ms": ms, "started_file": started.display().to_string()})
}

/// Waits until the call given [`slow_marked`] arguments has reached the mock upstream.
#[track_caller]
pub fn wait_started(started: &Path) {
    let reached = crate::common::wait_until(Duration::from_secs(30), || started.exists());
    assert!(reached, "the slow call did not reach the upstream");
}

/// Runs one call through `gw_secure_call_tools` and returns its element of `results`.
pub async fn secure_call_one(client: &McpClient, server: &str, tool: &str, args: Value) -> Value {
    let answer = call(client, "gw_secure_call_tools", calls(server, &[(tool, args)])).await;
    assert_eq!(answer["status"], json!("success"), "gw_secure_call_tools: {answer}");
    let results = answer["results"].as_array().unwrap_or_else(|| panic!("no results: {answer}"));
    assert_eq!(results.len(), 1, "one result per call: {answer}");
    results[0].clone()
}

/// The pid of the mock upstream process that serves the next call of `server`.
pub async fn upstream_pid(client: &McpClient, server: &str) -> u32 {
    let result = secure_call_one(client, server, "pid", json!({})).await;
    let text = success_text(&result, "pid");
    text.trim().parse().unwrap_or_else(|_| panic!("pid tool answered {text:?}"))
}

/// Kills the listed processes when dropped, so a failed test leaves nothing behind.
pub struct KillOnDrop(pub Vec<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).stderr(Stdio::null()).status();
        }
    }
}

/// The sorted names of the `tools` array of `value` (a `tools/list` result or a discovery answer).
pub fn sorted_tool_names(value: &Value) -> Vec<String> {
    let mut names: Vec<String> = value["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools array in {value}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_string())
        .collect();
    names.sort();
    names
}

/// `mcpgw-conformance-upstream --http 127.0.0.1:PORT` (rmcp's streamable HTTP server) with `flags`, once it listens:
/// a real remote MCP server for the tests of remote upstreams.
pub fn start_conformance_http(port: u16, flags: &[&str]) -> std::process::Child {
    let child = Command::new(env!("CARGO_BIN_EXE_mcpgw-conformance-upstream"))
        .args(["--http", &format!("127.0.0.1:{port}")])
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the remote server");
    let up = crate::common::wait_until(Duration::from_secs(20), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "the remote server listens on {port}");
    child
}
