//! Contract 13, "Connections and descriptors" and "Streams and sessions": a listener past its cap closes a new
//! connection at once while the probes, `GET /health` and reloads keep working; idle connections close after
//! `idle_connection_seconds` while a long call or a stream is never cut; the soft descriptor limit is raised to the
//! hard one and the gateway never holds more than half of it; a session has one `GET` stream, which ends with it.
//! Contract 14, "Unauthenticated clients are bounded apart": idle connections without a key are held to
//! `max_connections_per_ip` and `max_unauthenticated_connections`, and clients with a key keep connecting and calling.
//!
//! Resource use stays small (tens to two hundred loopback connections) so the suite is safe on a CI machine.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{API_KEY, Gateway, RELOAD_DEADLINE, SHORT_DEADLINE, read_json, replace_json, wait_until};
use mcp::*;
use serde_json::{Value, json};

fn connections(gw: &TestGateway, listener: &str) -> f64 {
    metric(gw, &format!("mcpgw_connections{{listener=\"{listener}\"}}"))
}

fn connect(authority: &str) -> TcpStream {
    let stream = TcpStream::connect(authority).expect("connect");
    stream.set_read_timeout(Some(Duration::from_millis(200))).expect("read timeout");
    stream
}

/// Whether the peer closes `stream` within `within` (end of stream or a reset; bytes sent before are read and
/// dropped).
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

fn authority_of(url: &str) -> &str {
    url.trim_start_matches("http://").trim_end_matches('/')
}

/// Opens `n` connections to `authority` and waits until the gateway counts `n` open on `listener`.
fn hold(gw: &TestGateway, authority: &str, listener: &str, n: usize) -> Vec<TcpStream> {
    let held: Vec<TcpStream> = (0..n).map(|_| connect(authority)).collect();
    assert!(
        wait_until(SHORT_DEADLINE, || connections(gw, listener) >= n as f64),
        "{listener}: {} of {n} connections counted",
        connections(gw, listener)
    );
    held
}

/// Whether a new connection gets an `initialize` answered (false when the connection is closed on it).
fn initialize_works(gw: &TestGateway) -> bool {
    http()
        .post(&gw.mcp)
        .header("authorization", format!("Bearer {API_KEY}"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(initialize_body(1, "2025-11-25").to_string())
        .send()
        .is_ok_and(|r| r.status().as_u16() == 200)
}

#[test]
fn a_full_listener_closes_new_connections_and_probes_health_and_reloads_keep_working() {
    let limits = json!({"max_connections": 20, "max_admin_connections": 4});
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], json!({ "limits": limits })));
    let gateway = gw.authority().to_string();
    let held = hold(&gw, &gateway, "gateway", 20);

    // One more is closed at once, and counted.
    let mut extra = connect(&gateway);
    assert!(closed_within(&mut extra, SHORT_DEADLINE), "a connection past max_connections was kept open");
    assert!(limit_hits(&gw, "connections") >= 1.0);

    // Probes, metrics and the admin API answer; a reload works and applies to the listener at once.
    assert_eq!(gw.gw.metrics_get("/healthz").status, 200);
    assert_eq!(gw.gw.metrics_get("/readyz").status, 200);
    assert_eq!(gw.gw.get("/health").status, 200, "GET /health while the gateway listener is full");
    let mut config = read_json(gw.config_path());
    config["common_mcp_gateway_config"]["limits"]["max_connections"] = json!(30);
    replace_json(gw.config_path(), &config);
    assert!(wait_until(RELOAD_DEADLINE, || initialize_works(&gw)), "no room after max_connections was raised");

    // Connections given back make room again.
    let mut config = read_json(gw.config_path());
    config["common_mcp_gateway_config"]["limits"]["max_connections"] = json!(20);
    replace_json(gw.config_path(), &config);
    assert!(wait_until(RELOAD_DEADLINE, || !initialize_works(&gw)), "max_connections lowered again");
    drop(held);
    assert!(wait_until(SHORT_DEADLINE, || initialize_works(&gw)), "closed connections did not free their places");

    // The admin listener has its own cap; the gateway is not affected by it.
    let admin = authority_of(&gw.gw.admin).to_string();
    assert!(wait_until(SHORT_DEADLINE, || connections(&gw, "admin") == 0.0), "the test's admin connections linger");
    let _held_admin = hold(&gw, &admin, "admin", 4);
    let mut extra = connect(&admin);
    assert!(closed_within(&mut extra, SHORT_DEADLINE), "a connection past max_admin_connections was kept open");
    assert!(limit_hits(&gw, "admin_connections") >= 1.0);
    assert!(initialize_works(&gw), "the gateway listener is not affected by a full admin listener");
    assert_eq!(gw.gw.metrics_get("/healthz").status, 200);
}

#[test]
fn idle_connections_close_and_calls_in_flight_are_never_cut() {
    let limits = json!({"idle_connection_seconds": 1});
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], json!({ "limits": limits })));
    let authority = gw.authority().to_string();

    // A connection that never sends anything.
    let mut silent = connect(&authority);
    assert!(closed_within(&mut silent, SHORT_DEADLINE), "a silent connection was kept open");

    // A keep-alive connection after its answer.
    let mut used = connect(&authority);
    let request = format!("GET /mcp/ HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    used.write_all(request.as_bytes()).expect("write");
    assert!(closed_within(&mut used, SHORT_DEADLINE), "an idle keep-alive connection was kept open");
    assert!(limit_hits(&gw, "connection_idle") >= 2.0);

    // A call that takes longer than the idle time is answered.
    let client = http();
    let session = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-11-25")];
    let call = tools_call_body(3, "gw_secure_call_tools", calls("mock", &[("slow", json!({"ms": 2500}))]));
    let r = post(&client, &gw.mcp, Some(API_KEY), &headers, &call);
    assert_eq!(r.status, 200, "{}", r.text);
    let answer = answer_of(&r.message["result"]);
    assert_eq!(success_text(&answer["results"][0], "slow"), "done", "{answer}");
}

#[test]
fn the_soft_descriptor_limit_is_raised_and_the_gateway_keeps_half_of_it_free() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    // The idle connections below have no key: their own caps are lifted, so that the descriptor cap is what binds.
    let limits = json!({"max_connections_per_ip": 1000, "max_unauthenticated_connections": 1000});
    common::write_json(&path, &config_with(vec![mock_server("mock")], json!({ "limits": limits })));
    let mut cmd = Command::new("prlimit");
    cmd.arg("--nofile=128:400").arg("--").arg(env!("CARGO_BIN_EXE_mcpgw"));
    cmd.arg("serve").arg("--config").arg(&path);
    for listener in ["--admin-addr", "--metrics-addr", "--gateway-addr"] {
        cmd.args([listener, "127.0.0.1:0"]);
    }
    cmd.env("GW_SHUTDOWN_GRACE_SECONDS", "0").env_remove("RUST_LOG");
    let gw = TestGateway { gw: Gateway::spawn(cmd, &path), mcp: String::new(), dir };
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", gw.gw.pid())).expect("read limits");
    let open_files = limits.lines().find(|l| l.starts_with("Max open files")).expect("Max open files").to_string();
    let numbers: Vec<&str> = open_files.split_whitespace().filter(|w| w.parse::<u64>().is_ok()).collect();
    assert_eq!(numbers, ["400", "400"], "the soft limit was not raised to the hard one: {open_files}");

    // The default max_connections (4096) is held to half of 400.
    let gateway = gw.gw.gateway.trim_start_matches("http://").to_string();
    let _held = hold(&gw, &gateway, "gateway", 200);
    let mut extra = connect(&gateway);
    assert!(closed_within(&mut extra, SHORT_DEADLINE), "the gateway held more than half the descriptor limit");
    assert_eq!(gw.gw.metrics_get("/healthz").status, 200);
    assert_eq!(gw.gw.get("/health").status, 200);
}

fn open_stream(client: &reqwest::blocking::Client, gw: &TestGateway, session: &str) -> reqwest::blocking::Response {
    client
        .get(&gw.mcp)
        .header("authorization", format!("Bearer {API_KEY}"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .expect("GET /mcp/")
}

/// Reads a stream until it ends, at most `within`; whether it ended.
fn ends_within(mut stream: reqwest::blocking::Response, within: Duration) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = tx.send(stream.read_to_end(&mut sink).is_ok());
    });
    rx.recv_timeout(within).is_ok()
}

#[test]
fn a_session_has_one_get_stream_which_ends_with_the_session() {
    let limits = json!({"session_idle_timeout_seconds": 2});
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], json!({ "limits": limits })));
    let client = http();
    let session = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let first = open_stream(&client, &gw, &session);
    assert_eq!(first.status().as_u16(), 200);

    let second = open_stream(&client, &gw, &session);
    assert_eq!(second.status().as_u16(), 409);
    let body: Value = second.json().expect("a JSON-RPC error");
    assert_eq!(body["error"]["data"]["error_code"], json!("STREAM_ALREADY_OPEN"), "{body}");

    // Closed by the client: the place is free again.
    drop(first);
    let mut reopened = None;
    assert!(
        wait_until(SHORT_DEADLINE, || {
            let stream = open_stream(&client, &gw, &session);
            let ok = stream.status().as_u16() == 200;
            reopened = ok.then_some(stream);
            ok
        }),
        "the stream's place was not given back"
    );
    let stream = reopened.expect("a stream");

    // The session ends (closed by the client): its stream ends.
    let closed = close_session(&client, &gw.mcp, API_KEY, &session, "2025-11-25");
    assert!(closed.is_success(), "{closed}");
    assert!(ends_within(stream, SHORT_DEADLINE), "the stream outlived its session");

    // The session idles out: its stream ends (the stream itself does not keep the session alive).
    let session = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let stream = open_stream(&client, &gw, &session);
    assert_eq!(stream.status().as_u16(), 200);
    assert!(ends_within(stream, Duration::from_secs(15)), "the stream outlived its idle session");
}

/// Sends `request` on `stream` and reads one answer (its head, then `Content-Length` bytes); its status, or `None`
/// when the connection was closed first.
fn exchange(stream: &mut TcpStream, request: &str) -> Option<u16> {
    stream.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut received = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&received[..end]).to_ascii_lowercase();
            let status = head.split_whitespace().nth(1)?.parse().ok()?;
            let length: usize =
                head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|l| l.trim().parse().ok())?;
            if received.len() >= end + 4 + length {
                return Some(status);
            }
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// A stateless `tools/call` of `gw_get_cache_status` with `key`, as raw HTTP/1.1 on a keep-alive connection.
fn keyed_call(authority: &str, key: &str) -> String {
    let mut body = tools_call_body(1, "gw_get_cache_status", json!({}));
    body["params"]["_meta"] = stateless_meta();
    let body = body.to_string();
    format!(
        "POST /mcp/ HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {key}\r\n\
         Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n\
         Mcp-Protocol-Version: {STATELESS_REVISION}\r\nMcp-Method: tools/call\r\nMcp-Name: gw_get_cache_status\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[test]
fn a_client_without_a_key_holding_hundreds_of_idle_connections_does_not_lock_out_clients_with_one() {
    // The default caps (256 unauthenticated connections, 128 from one address), and room for them all.
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], json!({"limits": {"max_connections": 1000}})));
    let authority = gw.authority().to_string();
    // A client with a key, connected before the flood: its connection has authenticated and is never closed for it.
    let mut keyed = TcpStream::connect(&authority).expect("connect");
    assert_eq!(exchange(&mut keyed, &keyed_call(&authority, API_KEY)), Some(200));

    // One anonymous client opens 300 connections and sends nothing: at most 128 of them stay open.
    let anonymous: Vec<TcpStream> = (0..300).map(|_| connect(&authority)).collect();
    assert!(
        wait_until(SHORT_DEADLINE, || limit_hits(&gw, "connections_per_ip") >= 172.0),
        "{} connections closed past max_connections_per_ip",
        limit_hits(&gw, "connections_per_ip")
    );
    assert!(
        wait_until(SHORT_DEADLINE, || connections(&gw, "gateway") <= 129.0 + 1.0),
        "{} gateway connections open",
        connections(&gw, "gateway")
    );
    // Clients with a key still connect and call; the one connected before goes on.
    assert!(initialize_works(&gw), "a new client with a key was locked out");
    assert_eq!(exchange(&mut keyed, &keyed_call(&authority, API_KEY)), Some(200), "the keyed connection was cut");
    let mut fresh = TcpStream::connect(&authority).expect("connect");
    assert_eq!(exchange(&mut fresh, &keyed_call(&authority, KEY_B)), Some(200));
    // A request without a valid key does not make its connection authenticated.
    let mut refused = TcpStream::connect(&authority).expect("connect");
    assert_eq!(exchange(&mut refused, &keyed_call(&authority, "gwkey-wrong")), Some(401));
    drop(anonymous);

    // The cap on all unauthenticated connections, whatever their address, follows a reload.
    let mut config = read_json(gw.config_path());
    config["common_mcp_gateway_config"]["limits"]["max_unauthenticated_connections"] = json!(10);
    replace_json(gw.config_path(), &config);
    let probe = |n: usize| -> Vec<TcpStream> { (0..n).map(|_| connect(&authority)).collect() };
    assert!(
        wait_until(RELOAD_DEADLINE, || {
            let _held = probe(12);
            limit_hits(&gw, "unauthenticated_connections") >= 1.0
        }),
        "max_unauthenticated_connections was not applied"
    );
    let _held = probe(30);
    assert!(initialize_works(&gw), "a client with a key was locked out by 10 unauthenticated connections");
    assert_eq!(exchange(&mut keyed, &keyed_call(&authority, API_KEY)), Some(200));
}
