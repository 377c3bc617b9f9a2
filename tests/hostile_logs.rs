//! Contract section 13, "Logs never carry what a client or upstream controls in bulk, nor a secret", from outside:
//! the JSON log lines of a real gateway are read and searched. Refused admin requests are logged with the route
//! template, never the key in their path, and at most 10 a second with a count of the rest; upstream stderr lines are
//! cut to 1 KiB and every value of the server's `env` and OAuth settings is masked in them, whatever its name; a
//! masked secret shows at most 4 of its characters; every admin write is logged with its route template, outcome and
//! ids, and never a key; gateway refusals quote a client's header only briefly, and are bounded the same way.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{ADMIN_KEY, ALICE_ID, API_KEY, CONFIG_ID, Gateway, PROJECT_ID, SHORT_DEADLINE, key_id, wait_until};
use mcp::*;
use reqwest::Method;
use serde_json::{Value, json};

/// The records of the gateway's log (every line is one JSON object).
fn records(logs: &str) -> Vec<Value> {
    logs.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line}")))
        .collect()
}

fn with_message<'a>(all: &'a [Value], message: &str) -> Vec<&'a Value> {
    all.iter().filter(|record| record["message"] == json!(message)).collect()
}

/// Asserts that no line of the log contains `secret`.
fn assert_absent(logs: &str, secret: &str, what: &str) {
    if let Some(line) = logs.lines().find(|line| line.contains(secret)) {
        panic!("{what} is in the log: {line}");
    }
}

/// Polls the log until `condition` holds on its records.
fn wait_for_records(logs: impl Fn() -> String, what: &str, condition: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let found = wait_until(SHORT_DEADLINE, || condition(&records(&logs())));
    assert!(found, "{what}: not in the log within {SHORT_DEADLINE:?}:\n{}", logs());
    records(&logs())
}

fn start_admin() -> (tempfile::TempDir, Gateway) {
    common::start_fixture()
}

// ---------------------------------------------------------------------------------------------------------------
// Refused admin requests
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn a_refused_admin_request_logs_the_route_template_never_the_key_in_its_path() {
    let (_dir, gw) = start_admin();
    let path = format!("/api/v1/api-keys/{API_KEY}");
    assert_eq!(gw.call_as(Some("Bearer wrong-admin-key"), Method::GET, &path, None).status, 401);
    assert_eq!(gw.call_as(None, Method::DELETE, &path, None).status, 401);
    assert_eq!(gw.call_as(Some("Bearer wrong-admin-key"), Method::POST, &format!("{path}/rotate"), None).status, 401);
    // With the admin key, a key that is not there: a 404 names the route, not the key either.
    let unknown = "gw_not-a-key-0123456789abcdefghijklmnopqrstuvwxyz";
    assert_eq!(gw.get(&format!("/api/v1/api-keys/{unknown}")).status, 404);
    // 60 KB of path on a route that does not exist.
    let bulk = "b".repeat(60 * 1024);
    assert_eq!(gw.call_as(Some("Bearer wrong-admin-key"), Method::GET, &format!("/api/v1/{bulk}"), None).status, 401);

    let all = wait_for_records(
        || gw.logs(),
        "five refused requests",
        |all| with_message(all, "admin request refused").len() >= 5,
    );
    let refused = with_message(&all, "admin request refused");
    let routes: Vec<&str> = refused.iter().map(|r| r["route"].as_str().unwrap_or("")).collect();
    assert_eq!(
        routes,
        [
            "/api/v1/api-keys/{key}",
            "/api/v1/api-keys/{key}",
            "/api/v1/api-keys/{key}/rotate",
            "/api/v1/api-keys/{key}",
            "(no route)"
        ],
        "{refused:?}"
    );
    assert_eq!(refused[0]["status"], json!(401), "{}", refused[0]);
    assert_eq!(refused[0]["method"], json!("GET"), "{}", refused[0]);
    assert_eq!(refused[0]["reason"], json!("wrong key"), "{}", refused[0]);
    assert_eq!(refused[0]["error"], json!("AUTH_INVALID_CREDENTIALS"), "{}", refused[0]);
    assert_eq!(refused[1]["reason"], json!("missing"), "{}", refused[1]);
    assert_eq!((&refused[3]["status"], &refused[3]["error"]), (&json!(404), &json!("NOT_FOUND")), "{}", refused[3]);
    assert!(refused.iter().all(|r| r.get("path").is_none()), "a raw path is logged: {refused:?}");

    let logs = gw.logs();
    assert_absent(&logs, API_KEY, "the API key of the path");
    assert_absent(&logs, &API_KEY[..12], "a part of the API key of the path");
    assert_absent(&logs, &unknown[..12], "the unknown key of the path");
    assert_absent(&logs, "wrong-admin-key", "the presented admin key");
    assert_absent(&logs, &"b".repeat(100), "the bulk of the path");
    assert!(logs.lines().all(|line| line.len() < 2048), "a log line of more than 2 KB");
}

/// The time of a record, in seconds.
fn seconds(record: &Value) -> f64 {
    let text = record["timestamp"].as_str().unwrap_or_default();
    let time = chrono::DateTime::parse_from_rfc3339(text).unwrap_or_else(|e| panic!("timestamp {text:?}: {e}"));
    time.timestamp_micros() as f64 / 1e6
}

/// Asserts that no second holds more than 10 of `records` (sorted by time), with room for the moment a record is
/// stamped after its place was taken (a busy machine may delay one; without the bound, 200 come within a blink).
fn assert_at_most_ten_a_second(records: &[&Value]) {
    let times: Vec<f64> = records.iter().map(|r| seconds(r)).collect();
    for (i, window) in times.windows(11).enumerate() {
        let span = window[10] - window[0];
        assert!(span >= 0.75, "records {i} to {} within {span:.3} s: {records:?}", i + 10);
    }
}

#[test]
fn a_burst_of_refused_admin_requests_yields_at_most_ten_records_a_second_and_a_count_of_the_rest() {
    let (_dir, gw) = start_admin();
    let path = format!("/api/v1/api-keys/{API_KEY}");
    let began = Instant::now();
    for _ in 0..200 {
        assert_eq!(gw.call_as(Some("Bearer wrong"), Method::GET, &path, None).status, 401);
    }
    let burst = began.elapsed();

    // Every refusal is either a record or counted in `left_out` (of a later record, or of the summary that follows a
    // burst once its second has passed).
    let accounted = |all: &[Value]| -> u64 {
        let refused = with_message(all, "admin request refused");
        let summaries = with_message(all, "refused requests left out of the log");
        let left_out: u64 = refused.iter().chain(&summaries).map(|r| r["left_out"].as_u64().unwrap_or(0)).sum();
        refused.len() as u64 + left_out
    };
    let all = wait_for_records(|| gw.logs(), "200 refusals accounted for", |all| accounted(all) == 200);
    assert_eq!(accounted(&all), 200);
    let refused = with_message(&all, "admin request refused");
    let summaries = with_message(&all, "refused requests left out of the log");
    let most = 10 * (burst.as_secs() as usize + 2);
    assert!(refused.len() <= most, "{} records for a burst of {burst:?}", refused.len());
    assert!(refused.len() >= 10, "{} records", refused.len());
    assert!(summaries.iter().all(|s| s["front"] == json!("admin")), "{summaries:?}");
    let mut bounded: Vec<&Value> = refused.iter().chain(&summaries).copied().collect();
    bounded.sort_by(|a, b| seconds(a).total_cmp(&seconds(b)));
    assert_at_most_ten_a_second(&bounded);
    assert_absent(&gw.logs(), API_KEY, "the API key of the path");
}

// ---------------------------------------------------------------------------------------------------------------
// Admin writes
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn every_admin_write_is_logged_with_its_route_template_outcome_and_ids_and_no_key() {
    let (_dir, gw) = start_admin();
    let project = gw.post("/api/v1/projects", &json!({"project_name": "hostile", "mcp_config_id": CONFIG_ID}));
    let project_id = project.ok(201)["project_id"].as_str().unwrap().to_string();
    assert_eq!(gw.post("/api/v1/projects", &json!({"project_name": "hostile"})).status, 409);
    let created = gw.post(&format!("/api/v1/users/{ALICE_ID}/api-keys"), &json!({"project_id": PROJECT_ID}));
    let new_key = created.ok(201)["api_key"].as_str().unwrap().to_string();
    // The key itself in the path, as a client may send it.
    let rotated = gw.post_empty(&format!("/api/v1/api-keys/{new_key}/rotate"));
    let rotated_key = rotated.ok(200)["api_key"].as_str().unwrap().to_string();

    let all = wait_for_records(|| gw.logs(), "four admin writes", |all| with_message(all, "admin write").len() >= 4);
    let writes = with_message(&all, "admin write");
    let create = writes[0];
    assert_eq!(create["route"], json!("/api/v1/projects"), "{create}");
    assert_eq!(create["method"], json!("POST"), "{create}");
    assert_eq!(create["status"], json!(201), "{create}");
    assert!(create["ids"].as_str().unwrap_or("").contains(&format!("project_id={project_id}")), "{create}");
    let conflict = writes[1];
    assert_eq!((&conflict["status"], &conflict["error"]), (&json!(409), &json!("CONFLICT")), "{conflict}");
    let key = writes[2];
    assert_eq!(key["route"], json!("/api/v1/users/{user}/api-keys"), "{key}");
    let ids = key["ids"].as_str().unwrap_or("");
    assert!(ids.contains(&format!("user={ALICE_ID}")) && ids.contains(&key_id(&new_key)), "{key}");
    let rotate = writes[3];
    assert_eq!(rotate["route"], json!("/api/v1/api-keys/{key}/rotate"), "{rotate}");
    assert_eq!(rotate["status"], json!(200), "{rotate}");
    let ids = rotate["ids"].as_str().unwrap_or("");
    assert!(ids.contains(&format!("key={}", key_id(&new_key))), "the path's key as its id: {rotate}");
    assert!(ids.contains(&format!("rotated_key_id={}", key_id(&new_key))), "{rotate}");
    assert!(ids.contains(&format!("key_id={}", key_id(&rotated_key))), "{rotate}");
    assert!(with_message(&all, "admin request refused").is_empty(), "a write is logged as a refusal too: {all:?}");

    let logs = gw.logs();
    assert_absent(&logs, ADMIN_KEY, "the admin key");
    assert_absent(&logs, &new_key, "the created API key");
    assert_absent(&logs, &new_key[..12], "a part of the created API key");
    assert_absent(&logs, &rotated_key, "the rotated API key");
    assert_absent(&logs, API_KEY, "the fixture's API key");
}

// ---------------------------------------------------------------------------------------------------------------
// Upstream stderr
// ---------------------------------------------------------------------------------------------------------------

const TOKEN_VALUE: &str = "api-token-value-0123456789";
const PLAIN_VALUE: &str = "plain-value-abcdefghijklmn";
const CLIENT_ID: &str = "oauth-client-id-0123456789";
const CLIENT_SECRET: &str = "oauth-client-secret-abcdefgh";

/// The mock upstream, writing `args` on stderr at start, with env values and (switched off) OAuth settings.
fn noisy_mock(args: Vec<String>) -> Value {
    let mut server = mock_server("noisy");
    server["config"]["args"] = json!(args);
    server["config"]["env"] = json!({"API_TOKEN": TOKEN_VALUE, "PLAIN_VALUE": PLAIN_VALUE});
    server["oauth_config"] = json!({"enabled": false, "OAUTH_CLIENT_ID": CLIENT_ID,
        "OAUTH_CLIENT_SECRET": CLIENT_SECRET, "OAUTH_TOKEN_URL": "http://127.0.0.1:1/token"});
    server
}

/// Starts the gateway with `server`, starts the server (a discovery) and waits for its `started` line in the log.
fn start_noisy(server: Value) -> TestGateway {
    let gw = TestGateway::start(&config_with(vec![server], json!({})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let found = call(&client, "gw_discover_all_tools", json!({"server_name": "noisy"})).await;
        assert!(found.to_string().contains("echo"), "{found}");
        client.cancel().await.unwrap();
    });
    wait_for_records(
        || gw.logs(),
        "the mock's started line",
        |all| all.iter().any(|r| r["message"].as_str().is_some_and(|m| m.starts_with("mcpgw-mock-upstream "))),
    );
    gw
}

/// The message of the stderr record that starts with `start`.
fn stderr_line(all: &[Value], start: &str) -> String {
    let found = all.iter().filter_map(|r| r["message"].as_str()).find(|m| m.starts_with(start));
    found.unwrap_or_else(|| panic!("no stderr line starting with {start:?}: {all:?}")).to_string()
}

#[test]
fn upstream_stderr_never_shows_a_value_of_the_servers_env_or_oauth_settings_whatever_its_name() {
    let text = format!("connecting as {CLIENT_ID} with {CLIENT_SECRET}");
    let args = ["--stderr-env", "API_TOKEN", "--stderr-env", "PLAIN_VALUE", "--stderr-text", &text];
    let gw = start_noisy(noisy_mock(args.iter().map(|a| a.to_string()).collect()));
    let logs = gw.logs();
    for (value, what) in [
        (TOKEN_VALUE, "the API_TOKEN value"),
        (PLAIN_VALUE, "the PLAIN_VALUE value"),
        (CLIENT_ID, "the OAuth client id"),
        (CLIENT_SECRET, "the OAuth client secret"),
    ] {
        assert_absent(&logs, value, what);
        // At most 4 characters of a masked value show.
        assert_absent(&logs, &value[..5], &format!("more than 4 characters of {what}"));
    }
    let all = records(&logs);
    assert_eq!(stderr_line(&all, "API_TOKEN="), "API_TOKEN=api-****");
    assert_eq!(stderr_line(&all, "PLAIN_VALUE="), "PLAIN_VALUE=plai****");
    assert_eq!(stderr_line(&all, "connecting as"), "connecting as oaut**** with oaut****");
}

#[test]
fn a_100_kb_stderr_line_is_cut_to_1_kib_in_the_log() {
    let gw = start_noisy(noisy_mock(vec!["--stderr-bytes".into(), (100 * 1024).to_string()]));
    let all = records(&gw.logs());
    let line = stderr_line(&all, "xxxxxxxx");
    assert!(line.len() <= 1024, "a stderr line of {} bytes was logged", line.len());
    assert!(line.len() >= 1000 && line.ends_with('…'), "the cut is not marked: {} bytes", line.len());
    assert!(gw.logs().lines().all(|l| l.len() < 2048), "a log line of more than 2 KB");
}

// ---------------------------------------------------------------------------------------------------------------
// The gateway front
// ---------------------------------------------------------------------------------------------------------------

/// Sends one HTTP/1.1 request with the given `Host` and reads the status line of the answer.
fn post_with_host(authority: &str, host: &str) -> String {
    let mut stream = TcpStream::connect(authority).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let request = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, \
         text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_string()
}

#[test]
fn gateway_refusals_quote_a_clients_header_briefly_and_are_bounded_too() {
    let gw = TestGateway::start(&config_with(vec![], json!({})));
    let host = format!("evil.example{}", "h".repeat(30 * 1024));
    let status = post_with_host(gw.authority(), &host);
    assert!(status.contains(" 403 "), "{status}");
    let all = wait_for_records(
        || gw.logs(),
        "the Host refusal",
        |all| !with_message(all, "gateway request refused").is_empty(),
    );
    let refusal = with_message(&all, "gateway request refused")[0];
    assert!(refusal.to_string().len() < 1024, "a refusal record of {} bytes", refusal.to_string().len());
    assert_absent(&gw.logs(), &"h".repeat(300), "the bulk of the Host header");

    // 200 requests with a wrong key: at most about 10 records a second, the rest counted.
    let client = http();
    let began = Instant::now();
    for _ in 0..200 {
        let r = post(&client, &gw.mcp, Some("gw_wrong-key"), &[], &initialize_body(1, "2025-06-18"));
        assert_eq!(r.status, 401);
    }
    let burst = began.elapsed();
    let accounted = |all: &[Value]| -> u64 {
        let refused = with_message(all, "gateway request refused");
        let summaries = with_message(all, "refused requests left out of the log");
        let left_out: u64 = refused.iter().chain(&summaries).map(|r| r["left_out"].as_u64().unwrap_or(0)).sum();
        refused.len() as u64 + left_out
    };
    let all = wait_for_records(|| gw.logs(), "201 refusals accounted for", |all| accounted(all) == 201);
    let refused = with_message(&all, "gateway request refused");
    assert!(refused.len() <= 10 * (burst.as_secs() as usize + 2) + 1, "{} records in {burst:?}", refused.len());
    let summaries = with_message(&all, "refused requests left out of the log");
    assert!(summaries.iter().all(|s| s["front"] == json!("gateway")), "{summaries:?}");
}
