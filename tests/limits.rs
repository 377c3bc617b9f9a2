//! The limits of `common_mcp_gateway_config.limits`, from outside: each limit configurable, answered
//! with its status and error code, counted in `mcpgw_limit_hits_total{limit}`, and following config reloads; invalid
//! limits refused by `check-config`. The drain on SIGTERM is tested in `drain.rs`.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{ADMIN_KEY, API_KEY, RELOAD_DEADLINE, SHORT_DEADLINE, replace_json, wait_until};
use mcp::*;
use serde_json::{Value, json};

/// The `data` of a JSON-RPC error answer, checked to carry `error_code`.
#[track_caller]
fn error_data(r: &Rpc, status: u16, code: &str) -> Value {
    assert_eq!(r.status, status, "expected {status}: {}", r.text);
    let data = r.message["error"]["data"].clone();
    assert_eq!(data["status"], json!("error"), "{}", r.text);
    assert_eq!(data["error_code"], json!(code), "{}", r.text);
    assert!(data["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", r.text);
    data
}

fn limits_config(limits: Value) -> Value {
    config_with(vec![mock_server("mock")], json!({ "limits": limits }))
}

/// A valid JSON-RPC request of about `bytes` bytes.
fn padded_call(bytes: usize) -> Value {
    tools_call_body(7, "gw_get_cache_status", json!({"padding": "p".repeat(bytes)}))
}

#[test]
fn body_and_header_limits_are_configurable_answered_and_counted() {
    let config = limits_config(json!({"max_request_body_bytes": 2048, "max_admin_body_bytes": 2048,
                                      "max_header_bytes": 2048}));
    let gw = TestGateway::start(&config);
    let client = http();

    let big = post(&client, &gw.mcp, Some(API_KEY), &stateless_headers("tools/call", None), &padded_call(3000));
    let data = error_data(&big, 413, "PAYLOAD_TOO_LARGE");
    assert!(data["message"].as_str().unwrap_or("").contains("2048"), "the limit is named: {data}");

    let padding = "h".repeat(3000);
    let headers = [("x-padding", padding.as_str())];
    let tall = post(&client, &gw.mcp, Some(API_KEY), &headers, &initialize_body(1, "2025-11-25"));
    error_data(&tall, 431, "HEADERS_TOO_LARGE");

    // The admin API answers the same limits in its own error shape.
    let url = format!("{}/api/v1/projects", gw.gw.admin);
    let auth = format!("Bearer {ADMIN_KEY}");
    let body = json!({"project_name": "x".repeat(3000)});
    let r = common::send(&gw.gw.client, reqwest::Method::POST, &url, Some(&auth), Some(&body));
    r.err(413, "PAYLOAD_TOO_LARGE");
    let r = gw.gw.client.get(&url).header("authorization", &auth).header("x-padding", &padding).send();
    let r = r.expect("GET with tall headers");
    assert_eq!(r.status().as_u16(), 431);
    let body: Value = r.json().expect("a JSON error body");
    assert_eq!(body["error"], json!("HEADERS_TOO_LARGE"), "{body}");

    assert_eq!(limit_hits(&gw, "request_body"), 2.0);
    assert_eq!(limit_hits(&gw, "request_headers"), 2.0);

    // A reload raises the limits: the same requests now pass both checks.
    let mut raised = read_config(&gw);
    raised["common_mcp_gateway_config"]["limits"] = json!({"max_request_body_bytes": 65536, "max_header_bytes": 65536});
    replace_json(gw.config_path(), &raised);
    let passes = wait_until(RELOAD_DEADLINE, || {
        let r = post(&client, &gw.mcp, Some(API_KEY), &stateless_headers("tools/call", None), &padded_call(3000));
        r.status != 413
    });
    assert!(passes, "a raised body limit did not take effect; stderr:\n{}", gw.logs());
    let tall = post(&client, &gw.mcp, Some(API_KEY), &headers, &initialize_body(1, "2025-11-25"));
    assert_eq!(tall.status, 200, "{}", tall.text);
}

fn read_config(gw: &TestGateway) -> Value {
    common::read_json(gw.config_path())
}

#[test]
fn max_sessions_refuses_one_more_initialize_even_when_they_race() {
    let gw = TestGateway::start(&limits_config(json!({"max_sessions": 3})));
    let url = gw.mcp.clone();
    let racers: Vec<_> = (0..8)
        .map(|i| {
            let url = url.clone();
            std::thread::spawn(move || post(&http(), &url, Some(API_KEY), &[], &initialize_body(i, "2025-11-25")))
        })
        .collect();
    let answers: Vec<Rpc> = racers.into_iter().map(|t| t.join().expect("initialize thread")).collect();
    let opened: Vec<String> = answers.iter().filter_map(|r| r.header("mcp-session-id")).collect();
    assert_eq!(
        opened.len(),
        3,
        "exactly max_sessions sessions open: {:?}",
        answers.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    for refused in answers.iter().filter(|r| r.status != 200) {
        error_data(refused, 503, "TOO_MANY_SESSIONS");
        assert!(refused.header("retry-after").is_some(), "503 without Retry-After: {}", refused.text);
        assert!(refused.message["id"].is_number(), "the refusal answers the request's id: {}", refused.text);
    }
    assert_eq!(limit_hits(&gw, "sessions"), 5.0);
    assert_eq!(metric(&gw, "mcpgw_sessions"), 3.0);

    // Closing one makes room for one more.
    let client = http();
    let closed = client
        .delete(&url)
        .header("authorization", format!("Bearer {API_KEY}"))
        .header("mcp-session-id", opened[0].as_str())
        .send()
        .expect("DELETE session");
    assert_eq!(closed.status().as_u16(), 200, "DELETE of a session answers 200 (contract 15)");
    open_session(&client, &url, API_KEY, "2025-11-25");
    let refused = post(&client, &url, Some(API_KEY), &[], &initialize_body(9, "2025-11-25"));
    error_data(&refused, 503, "TOO_MANY_SESSIONS");
}

#[test]
fn idle_sessions_expire_and_busy_ones_stay() {
    let gw = TestGateway::start(&limits_config(json!({"session_idle_timeout_seconds": 1})));
    let client = http();
    let idle = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let busy = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    // The busy session calls a tool (the fast route) every 200 ms for 3 s, three idle limits.
    let started = Instant::now();
    let mut id = 10;
    while started.elapsed() < Duration::from_secs(3) {
        id += 1;
        let r = post(
            &client,
            &gw.mcp,
            Some(API_KEY),
            &[("mcp-session-id", busy.as_str())],
            &tools_call_body(id, "gw_get_cache_status", json!({})),
        );
        assert_eq!(r.status, 200, "a busy session was closed after {:?}: {}", started.elapsed(), r.text);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(wait_until(SHORT_DEADLINE, || limit_hits(&gw, "session_idle") >= 1.0), "no idle session was closed");
    let r = post(
        &client,
        &gw.mcp,
        Some(API_KEY),
        &[("mcp-session-id", idle.as_str())],
        &tools_call_body(1, "gw_get_cache_status", json!({})),
    );
    error_data(&r, 404, "SESSION_NOT_FOUND");
    assert_eq!(metric(&gw, "mcpgw_sessions"), 1.0, "only the busy session is left");
}

fn tcp(gw: &TestGateway) -> TcpStream {
    let stream = TcpStream::connect(gw.authority()).expect("connect to the gateway");
    stream.set_read_timeout(Some(Duration::from_secs(20))).expect("read timeout");
    stream
}

/// Reads until the server closes the connection (or 20 s pass); returns what arrived.
fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn slow_clients_are_cut_off_at_the_read_timeout() {
    let gw = TestGateway::start(&limits_config(json!({"request_read_timeout_seconds": 1})));
    let host = gw.authority().to_string();

    // Headers that never end: the connection is closed.
    let mut stream = tcp(&gw);
    let started = Instant::now();
    stream.write_all(format!("POST /mcp/ HTTP/1.1\r\nHost: {host}\r\n").as_bytes()).expect("write");
    read_to_close(&mut stream);
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(10), "a client stalling in its headers was kept {waited:?}");
    assert!(
        wait_until(SHORT_DEADLINE, || limit_hits(&gw, "read_timeout") >= 1.0),
        "the header timeout was not counted"
    );

    // A body that never ends: 408 REQUEST_TIMEOUT, then the connection is closed.
    let mut stream = tcp(&gw);
    let head = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\":"
    );
    stream.write_all(head.as_bytes()).expect("write");
    let answer = read_to_close(&mut stream);
    assert!(answer.starts_with("HTTP/1.1 408"), "expected 408 for a stalled body, got: {answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    assert!(limit_hits(&gw, "read_timeout") >= 2.0);

    // A normal client on the same gateway is unaffected.
    let r = post(&http(), &gw.mcp, Some(API_KEY), &[], &initialize_body(1, "2025-11-25"));
    assert_eq!(r.status, 200, "{}", r.text);
}

#[test]
fn a_tool_result_over_the_limit_fails_that_call_only() {
    let gw = TestGateway::start(&limits_config(json!({"max_tool_result_bytes": 4096})));
    let rt = runtime();
    rt.block_on(async {
        let client = connect_mcp(&gw).await;
        let batch = calls("mock", &[("large", json!({"bytes": 100_000})), ("echo", json!({"text": "after"}))]);
        let answer = call(&client, "gw_secure_call_tools", batch).await;
        let results = &answer["results"];
        assert_error(&results[0], "UPSTREAM_OUTPUT_TOO_LARGE");
        assert_eq!(success_text(&results[1], "echo"), "after", "{answer}");
        // Under the limit is fine.
        let small = secure_call_one(&client, "mock", "large", json!({"bytes": 1000})).await;
        assert_eq!(success_text(&small, "large").len(), 1000);
    });
    assert_eq!(limit_hits(&gw, "tool_result"), 1.0);
}

async fn connect_mcp(gw: &TestGateway) -> McpClient {
    connect(&gw.mcp, API_KEY).await
}

#[test]
fn invalid_limits_are_refused_with_every_problem_listed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gw_mcp_config.json");
    let config = limits_config(json!({"max_request_body_bytes": 10, "max_sessions": 0,
                                      "session_idle_timeout_seconds": -1, "max_header_bytes": "big"}));
    common::write_json(&path, &config);
    let (status, out, err) = common::run_cli(&["check-config", "--config", path.to_str().unwrap_or_default()], &[]);
    assert!(!status.success(), "invalid limits passed check-config: {out}");
    let text = format!("{out}{err}");
    for field in ["max_request_body_bytes", "max_sessions", "session_idle_timeout_seconds", "max_header_bytes"] {
        assert!(text.contains(&format!("limits.{field}")), "{field} not reported:\n{text}");
    }
}

/// `limits.session_dormant_seconds`: a quiet session goes dormant (counted in `mcpgw_sessions_dormant`) and its next
/// request, of any kind, is answered as if it had never slept; a `DELETE` still ends it; a busy one stays awake.
#[test]
fn dormant_sessions_wake_unseen_by_their_clients() {
    let gw = TestGateway::start(&limits_config(json!({"session_dormant_seconds": 0.5})));
    let client = http();
    let version = "2025-11-25";
    let first = open_session(&client, &gw.mcp, API_KEY, version);
    let second = open_session(&client, &gw.mcp, API_KEY, version);
    let in_session = |session: &str, body: &Value| {
        post(&client, &gw.mcp, Some(API_KEY), &[("mcp-session-id", session), ("mcp-protocol-version", version)], body)
    };
    let list = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list"});
    let listed = in_session(&first, &list);
    assert_eq!(listed.status, 200, "{}", listed.text);
    let dormant = |n: f64| wait_until(SHORT_DEADLINE, || metric(&gw, "mcpgw_sessions_dormant") == n);
    assert!(dormant(2.0), "both quiet sessions go dormant; stderr:\n{}", gw.logs());
    assert_eq!(metric(&gw, "mcpgw_sessions"), 2.0, "dormant sessions are still open");

    // Woken twice, by the protocol layer's routes (the initialize replayed) and by the fast route.
    for round in 0..2 {
        let again = in_session(&first, &list);
        assert_eq!(again.status, 200, "round {round}: {}", again.text);
        assert_eq!(again.message["result"], listed.message["result"], "round {round}: the same listing");
        let called = in_session(&first, &tools_call_body(6, "gw_get_cache_status", json!({})));
        assert_eq!(called.status, 200, "round {round}: {}", called.text);
        assert!(called.message["result"]["content"].is_array(), "round {round}: {}", called.text);
        assert!(dormant(2.0), "round {round}: the woken session sleeps again");
    }
    let ping = in_session(&second, &json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}));
    assert_eq!(ping.status, 200, "{}", ping.text);
    assert_eq!(ping.message["result"], json!({}), "{}", ping.text);
    assert!(dormant(2.0));

    // A dormant session's DELETE ends it like a live one's.
    assert_eq!(close_session(&client, &gw.mcp, API_KEY, &second, version).as_u16(), 200);
    let gone = in_session(&second, &list);
    error_data(&gone, 404, "SESSION_NOT_FOUND");
    assert_eq!(metric(&gw, "mcpgw_sessions"), 1.0);

    // A session with a call every 100 ms never sleeps (its worker is kept while it is used).
    let started = Instant::now();
    let mut woke_dormant = false;
    while started.elapsed() < Duration::from_secs(2) {
        woke_dormant |= metric(&gw, "mcpgw_sessions_dormant") == 0.0 && started.elapsed() > Duration::from_secs(1);
        let r = in_session(&first, &list);
        assert_eq!(r.status, 200, "{}", r.text);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(woke_dormant, "a session in use is not dormant");
}
