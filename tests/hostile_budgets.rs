//! Contract 13, "One request's size of work" and "Rate limits count calls", from outside: a batch over
//! `max_calls_per_request` runs none of its calls (`TOO_MANY_CALLS`); once the results of one request reach
//! `max_response_bytes` the calls left are not run (`RESPONSE_TOO_LARGE`); a batch takes one rate-limit token per
//! call besides the request's own, so a key limited to a few requests a second cannot run thousands of calls with one
//! request (HTTP 429 `RATE_LIMITED`, nothing run); stdio follows the same budget.
//!
//! Contract 14, "Budgets per key": a key's requests in flight (an answer still being written included), its answers
//! not taken by its client, the write timeout that frees them, and `initialize` params of at most 64 KiB.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::{API_KEY, SHORT_DEADLINE};
use mcp::*;
use serde_json::{Value, json};

/// The `pid` tool's answers tell whether a call ran: a batch of `n` echo calls.
fn echoes(n: usize) -> Value {
    let list: Vec<(&str, Value)> = (0..n).map(|_| ("echo", json!({"text": "x"}))).collect();
    calls("mock", &list)
}

#[test]
fn a_batch_over_max_calls_per_request_runs_none_of_its_calls() {
    let config = config_with(vec![mock_server("mock")], json!({"limits": {"max_calls_per_request": 3}}));
    let gw = TestGateway::start(&config);
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let refused = call(&client, "gw_secure_call_tools", echoes(4)).await;
        assert_eq!(refused["error_code"], json!("TOO_MANY_CALLS"), "{refused}");
        assert!(refused.get("results").is_none(), "nothing ran: {refused}");
        let served = call(&client, "gw_secure_call_tools", echoes(3)).await;
        assert_eq!(served["results"].as_array().map(Vec::len), Some(3), "{served}");
        client.cancel().await.unwrap();
    });
    assert_eq!(limit_hits(&gw, "calls_per_request"), 1.0);
}

#[test]
fn once_a_requests_results_reach_max_response_bytes_the_calls_left_are_not_run() {
    let limits = json!({"limits": {"max_response_bytes": 50_000, "max_tool_result_bytes": 1_000_000}});
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], limits));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let list: Vec<(&str, Value)> = (0..5).map(|_| ("large", json!({"bytes": 30_000}))).collect();
        let answer = call(&client, "gw_secure_call_tools", calls("mock", &list)).await;
        let results = answer["results"].as_array().cloned().unwrap_or_default();
        assert_eq!(results.len(), 5, "{answer}");
        // 30 KB, then 60 KB gathered: the third and later calls are not run.
        assert_eq!(success_text(&results[0], "large").len(), 30_000);
        assert_eq!(success_text(&results[1], "large").len(), 30_000);
        for result in &results[2..] {
            assert_error(result, "RESPONSE_TOO_LARGE");
        }
        client.cancel().await.unwrap();
    });
    assert_eq!(limit_hits(&gw, "response_bytes"), 3.0);
}

#[test]
fn a_batch_takes_a_token_per_call_so_one_request_cannot_get_around_the_rate_limit() {
    let config =
        config_with(vec![mock_server("mock")], json!({"rate_limits": {"per_key_requests_per_second": 1, "burst": 10}}));
    let gw = TestGateway::start(&config);
    let client = http();
    let headers = stateless_headers("tools/call", Some("gw_secure_call_tools"));
    let batch = |id: u64, n: usize| {
        let mut body = tools_call_body(id, "gw_secure_call_tools", echoes(n));
        body["params"]["_meta"] = stateless_meta();
        body
    };
    // 1 token for the request and 50 for its calls: more than the bucket holds.
    let r = post(&client, &gw.mcp, Some(API_KEY), &headers, &batch(1, 50));
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.message["error"]["data"]["error_code"], json!("RATE_LIMITED"), "{}", r.text);
    assert_eq!(r.message["id"], json!(1), "{}", r.text);
    assert!(r.header("retry-after").is_some());
    // Within the bucket: 1 + 5 tokens, served; the next 1 + 5 do not fit in what is left (10 - 6 = 4, 1 refilled).
    let r = post(&client, &gw.mcp, Some(API_KEY), &headers, &batch(2, 5));
    assert_eq!(r.status, 200, "{}", r.text);
    let r = post(&client, &gw.mcp, Some(API_KEY), &headers, &batch(3, 5));
    assert_eq!(r.status, 429, "{}", r.text);
}

#[test]
fn over_stdio_a_batch_takes_a_token_per_call_too() {
    let config =
        config_with(vec![mock_server("mock")], json!({"rate_limits": {"per_key_requests_per_second": 1, "burst": 10}}));
    let gw = TestGateway::start(&config);
    runtime().block_on(async {
        let (client, _stderr) = connect_stdio(stdio_command(gw.config_path(), &[("GW_GATEWAY_KEY", API_KEY)])).await;
        let refused = call(&client, "gw_secure_call_tools", echoes(50)).await;
        assert_eq!(refused["error_code"], json!("RATE_LIMITED"), "{refused}");
        client.cancel().await.unwrap();
    });
}

// Contract 14, "Budgets per key, not only per request": requests in flight per key, answers not taken by the client,
// the write timeout, and what a session keeps of its `initialize`.

/// A stateless `tools/call` of `gw_secure_call_tools` with one call of the mock's `tool`.
fn stateless_call(id: u64, tool: &str, args: Value) -> Value {
    let mut body = tools_call_body(id, "gw_secure_call_tools", calls("mock", &[(tool, args)]));
    body["params"]["_meta"] = stateless_meta();
    body
}

fn post_call(client: &reqwest::blocking::Client, gw: &TestGateway, key: &str, body: &Value) -> Rpc {
    post(client, &gw.mcp, Some(key), &stateless_headers("tools/call", Some("gw_secure_call_tools")), body)
}

/// The 429 `RATE_LIMITED` of a key over its budget, with `retry_after_seconds`; its message.
#[track_caller]
fn assert_over_budget(r: &Rpc) -> String {
    assert_eq!(r.status, 429, "{}", r.text);
    let data = &r.message["error"]["data"];
    assert_eq!(data["status"], json!("error"), "{}", r.text);
    assert_eq!(data["error_code"], json!("RATE_LIMITED"), "{}", r.text);
    assert_eq!(data["retry_after_seconds"], json!(1), "{}", r.text);
    assert_eq!(r.header("retry-after").as_deref(), Some("1"), "{}", r.text);
    data["message"].as_str().unwrap_or_default().to_string()
}

/// A raw connection that sends one stateless call asking the mock for `bytes` of text, and never reads its answer
/// until told to.
fn unread_large_answer(gw: &TestGateway, bytes: u64) -> std::net::TcpStream {
    use std::io::Write;
    let authority = gw.authority().to_string();
    let body = stateless_call(9, "large", json!({"bytes": bytes})).to_string();
    let mut request = format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {API_KEY}\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         Mcp-Protocol-Version: {STATELESS_REVISION}\r\nMcp-Method: tools/call\r\nMcp-Name: gw_secure_call_tools\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    request.push_str(&body);
    let mut stream = std::net::TcpStream::connect(&authority).expect("connect");
    stream.write_all(request.as_bytes()).expect("send the request");
    // The readiness signal: the answer has begun to arrive (the rest waits on the gateway's side).
    stream.set_read_timeout(Some(std::time::Duration::from_millis(100))).expect("timeout");
    let mut first = [0u8; 1];
    let began = common::wait_until(CALL_DEADLINE, || stream.peek(&mut first).is_ok_and(|n| n > 0));
    assert!(began, "the large answer never began");
    stream
}

/// Reads `stream` to its end (or an error); the bytes read.
fn read_to_end(stream: &mut std::net::TcpStream) -> usize {
    use std::io::Read;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).expect("timeout");
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0;
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        total += n;
    }
    total
}

#[test]
fn a_key_has_at_most_max_inflight_per_key_requests_in_flight_and_other_keys_are_not_affected() {
    let gw =
        TestGateway::start(&config_with(vec![mock_server("mock")], json!({"limits": {"max_inflight_per_key": 2}})));
    let dir = tempfile::tempdir().expect("tempdir");
    let slow: Vec<_> = (0..2)
        .map(|i| {
            let started = dir.path().join(format!("started-{i}"));
            let body = stateless_call(i, "slow", slow_marked(3000, &started));
            let (url, key) = (gw.mcp.clone(), API_KEY);
            let call = std::thread::spawn(move || {
                let headers = stateless_headers("tools/call", Some("gw_secure_call_tools"));
                post(&http(), &url, Some(key), &headers, &body).status
            });
            (started, call)
        })
        .collect();
    for (started, _) in &slow {
        wait_started(started);
    }
    let client = http();
    let refused = post_call(&client, &gw, API_KEY, &stateless_call(7, "echo", json!({"text": "x"})));
    let message = assert_over_budget(&refused);
    assert!(message.contains("max_inflight_per_key"), "{message}");
    assert_eq!(refused.message["id"], Value::Null, "refused before the body is read");
    let other = post_call(&client, &gw, KEY_B, &stateless_call(8, "echo", json!({"text": "x"})));
    assert_eq!(other.status, 200, "another key is not affected: {}", other.text);
    for (_, call) in slow {
        assert_eq!(call.join().expect("the slow call"), 200);
    }
    let again = post_call(&client, &gw, API_KEY, &stateless_call(9, "echo", json!({"text": "x"})));
    assert_eq!(again.status, 200, "the places are given back: {}", again.text);
    assert_eq!(limit_hits(&gw, "inflight_per_key"), 1.0);
}

#[test]
fn an_unread_answer_stays_in_flight_until_the_write_timeout_closes_its_connection_and_frees_it() {
    let limits = json!({"limits": {"max_inflight_per_key": 1, "write_timeout_seconds": 2}});
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], limits));
    let size = 12_000_000;
    let mut unread = unread_large_answer(&gw, size);
    // The answer is being written (more than any socket buffer holds): the key's one request is still in flight.
    let client = http();
    assert_over_budget(&post_call(&client, &gw, API_KEY, &stateless_call(1, "echo", json!({"text": "x"}))));
    // The client takes nothing: its connection is closed after the write timeout, and the key is served again.
    let served = common::wait_until(std::time::Duration::from_secs(15), || {
        post_call(&client, &gw, API_KEY, &stateless_call(2, "echo", json!({"text": "x"}))).status == 200
    });
    assert!(served, "the unread answer was never given up");
    assert!(limit_hits(&gw, "write_timeout") >= 1.0);
    let read = read_to_end(&mut unread);
    assert!(read < size as usize, "the connection was closed before its answer was taken: {read} bytes read");
}

#[test]
fn while_a_key_has_more_than_max_pending_answer_bytes_per_key_unread_its_new_requests_are_refused() {
    let limits = json!({"limits": {"max_pending_answer_bytes_per_key": 1_048_576, "write_timeout_seconds": 60}});
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], limits));
    let mut unread = unread_large_answer(&gw, 12_000_000);
    let client = http();
    let message = assert_over_budget(&post_call(&client, &gw, API_KEY, &stateless_call(1, "echo", json!({"x": 1}))));
    assert!(message.contains("max_pending_answer_bytes_per_key"), "{message}");
    assert!(limit_hits(&gw, "pending_answer_bytes") >= 1.0);
    let other = post_call(&client, &gw, KEY_B, &stateless_call(2, "echo", json!({"text": "x"})));
    assert_eq!(other.status, 200, "another key is not affected: {}", other.text);
    // The client takes its answer: the key is served again.
    assert!(read_whole_answer(&mut unread), "the whole answer arrives once read");
    let served = common::wait_until(SHORT_DEADLINE, || {
        post_call(&client, &gw, API_KEY, &stateless_call(3, "echo", json!({"text": "x"}))).status == 200
    });
    assert!(served, "the key stayed refused after its answers were taken");
}

/// Reads the whole answer on `stream` (kept open by keep-alive: its head, then `Content-Length` bytes); whether it
/// came whole.
fn read_whole_answer(stream: &mut std::net::TcpStream) -> bool {
    use std::io::Read;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).expect("timeout");
    let mut received = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut expected = None;
    loop {
        if expected.is_none()
            && let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n")
        {
            let head = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
            let length = head.lines().find_map(|l| l.strip_prefix("content-length:")).map(str::trim);
            let Some(length) = length.and_then(|l| l.parse::<usize>().ok()) else { return false };
            expected = Some(end + 4 + length);
        }
        if expected.is_some_and(|total| received.len() >= total) {
            return true;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => received.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn initialize_params_over_64_kib_get_invalid_params_and_open_no_session() {
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], json!({})));
    let client = http();
    let with_padding = |bytes: usize| {
        let mut body = initialize_body(1, "2025-11-25");
        body["params"]["capabilities"]["experimental"] = json!({"padding": {"text": "p".repeat(bytes)}});
        body
    };
    let big = post(&client, &gw.mcp, Some(API_KEY), &[], &with_padding(70_000));
    assert_eq!(big.status, 400, "{}", big.text);
    assert_eq!(big.message["error"]["code"], json!(-32602), "{}", big.text);
    assert_eq!(big.message["id"], json!(1), "{}", big.text);
    assert!(big.header("mcp-session-id").is_none(), "no session for oversized params");
    assert_eq!(limit_hits(&gw, "initialize_params"), 1.0);
    assert_eq!(metric(&gw, "mcpgw_sessions"), 0.0, "no session was created");
    let fits = post(&client, &gw.mcp, Some(API_KEY), &[], &with_padding(60_000));
    assert_eq!(fits.status, 200, "{}", fits.text);
    assert!(fits.header("mcp-session-id").is_some());
}

/// The gateway's resident memory, in bytes (`VmRSS` of /proc/PID/status).
fn rss(gw: &TestGateway) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", gw.gw.pid())).expect("read /proc/PID/status");
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next());
    kib.and_then(|v| v.parse::<u64>().ok()).expect("VmRSS") * 1024
}

#[test]
fn the_memory_of_answers_nobody_reads_is_given_back_after_the_write_timeout() {
    // Six answers of 24 MB pending at once are over the key's default budget of unread answer bytes (64 MiB): raised
    // here, so that this test sees the write timeout alone (the budget has its own test above).
    let limits = json!({"limits": {"write_timeout_seconds": 2, "max_pending_answer_bytes_per_key": 1u64 << 30}});
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], limits));
    // Idle, measured after a first call has started the upstream process and warmed the gateway up.
    let client = http();
    assert_eq!(post_call(&client, &gw, API_KEY, &stateless_call(1, "echo", json!({"text": "x"}))).status, 200);
    let idle = rss(&gw);
    let size = 12_000_000;
    let unread: Vec<_> = (0..6).map(|_| unread_large_answer(&gw, size)).collect();
    let held = rss(&gw);
    assert!(held > idle + 3 * size, "the unread answers are held while written: {idle} -> {held} bytes");
    let closed = common::wait_until(std::time::Duration::from_secs(15), || limit_hits(&gw, "write_timeout") >= 6.0);
    assert!(closed, "{} of 6 connections closed at the write timeout", limit_hits(&gw, "write_timeout"));
    // Contract 13's bound after an answer: back under idle + 64 MiB within 10 s.
    let mib = 1024 * 1024;
    let freed = common::wait_until(std::time::Duration::from_secs(10), || rss(&gw) < idle + 64 * mib);
    assert!(freed, "RSS {} MiB, idle {} MiB: the unread answers were not freed", rss(&gw) / mib, idle / mib);
    drop(unread);
}
