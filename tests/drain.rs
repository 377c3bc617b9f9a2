//! The drain on SIGTERM (contract section 7, refining section 1), from outside: `/readyz` turns 503 at once; an MCP
//! session that exists keeps being served during the grace period, on new connections too, and its call in flight
//! answers; a new session (`initialize`) gets 503 `SHUTTING_DOWN`; a stateless request is served while work is in
//! flight and refused after; the process exits 0 as soon as the last session is closed, or at the end of the grace
//! period when a session stays open.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::{API_KEY, SHORT_DEADLINE, wait_until};
use mcp::*;
use serde_json::json;

const VERSION: &str = "2025-11-25";

/// A gateway with the mock upstream and a grace period of `grace_seconds`.
fn start(grace_seconds: &str) -> TestGateway {
    let config = config_with(vec![mock_server("mock")], json!({}));
    TestGateway::start_with(&config, &[("GW_SHUTDOWN_GRACE_SECONDS", grace_seconds)])
}

fn session_headers(session: &str) -> [(&str, &str); 2] {
    [("mcp-session-id", session), ("mcp-protocol-version", VERSION)]
}

/// `tools/list` in `session`, on a new connection (a new client has no connection to reuse).
fn list_in_session(gw: &TestGateway, session: &str) -> Rpc {
    let list = json!({"jsonrpc": "2.0", "id": 20, "method": "tools/list"});
    post(&http(), &gw.mcp, Some(API_KEY), &session_headers(session), &list)
}

/// A stateless (2026-07-28) `tools/list`, on a new connection.
fn stateless_list(gw: &TestGateway) -> Rpc {
    let list = json!({"jsonrpc": "2.0", "id": 30, "method": "tools/list", "params": {"_meta": stateless_meta()}});
    post(&http(), &gw.mcp, Some(API_KEY), &stateless_headers("tools/list", None), &list)
}

/// Asserts 503 `SHUTTING_DOWN` with `Connection: close`.
#[track_caller]
fn assert_shutting_down(r: &Rpc) {
    assert_eq!(r.status, 503, "expected 503 SHUTTING_DOWN: {}", r.text);
    assert_eq!(r.message["error"]["data"]["error_code"], json!("SHUTTING_DOWN"), "{}", r.text);
    assert_eq!(r.header("connection").as_deref(), Some("close"), "{:?}", r.headers);
}

fn sigterm_now(gw: &TestGateway) {
    let term = std::process::Command::new("kill").args(["-TERM", &gw.gw.pid().to_string()]).status();
    assert!(term.is_ok_and(|s| s.success()), "kill -TERM failed");
}

/// Waits up to `within` for the gateway to exit; its exit status and when it was seen to exit.
fn exit_within(gw: &mut TestGateway, within: Duration) -> Option<(std::process::ExitStatus, Instant)> {
    gw.gw.wait_exit(within).map(|status| (status, Instant::now()))
}

#[test]
fn a_session_is_served_through_the_drain_on_new_connections_and_its_delete_ends_the_drain() {
    let grace = Duration::from_secs(30);
    let mut gw = start("30");
    let session = open_session(&http(), &gw.mcp, API_KEY, VERSION);
    // A warm upstream, so the slow call below is running upstream when the signal comes.
    let warm = tools_call_body(2, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": "warm"}))]));
    let r = post(&http(), &gw.mcp, Some(API_KEY), &session_headers(&session), &warm);
    assert_eq!(r.status, 200, "{}", r.text);

    let started = gw.dir.path().join("slow-started");
    let in_flight = {
        let (url, session, args) = (gw.mcp.clone(), session.clone(), slow_marked(3000, &started));
        thread::spawn(move || {
            let slow = tools_call_body(3, "gw_secure_call_tools", calls("mock", &[("slow", args)]));
            post(&http(), &url, Some(API_KEY), &session_headers(&session), &slow)
        })
    };
    // The call lasts 3 s; the signal comes once it has reached the upstream.
    wait_started(&started);
    sigterm_now(&gw);
    let signalled = Instant::now();

    let not_ready = wait_until(SHORT_DEADLINE, || gw.gw.metrics_get("/readyz").status == 503);
    assert!(not_ready, "/readyz did not turn 503 at once; stderr:\n{}", gw.logs());
    assert!(!in_flight.is_finished(), "the 3 s call should still run when /readyz turns 503");

    // The session's client opens a new connection for its next request: it is accepted and served.
    assert!(TcpStream::connect(gw.authority()).is_ok(), "the gateway listener stopped accepting during the drain");
    let listed = list_in_session(&gw, &session);
    assert_eq!(listed.status, 200, "a session's request on a new connection during the drain: {}", listed.text);
    assert_eq!(sorted_tool_names(&listed.message["result"]), sorted_gw_tools());

    // A new session is refused; so is a caller without a valid key (401 as always) or, while work is in flight, with an
    // unknown session (404 as always).
    let init = post(&http(), &gw.mcp, Some(API_KEY), &[], &initialize_body(9, VERSION));
    assert_shutting_down(&init);
    assert_eq!(init.message["id"], json!(9), "the refusal answers the initialize's id: {}", init.text);
    assert_auth_failed(&post(
        &http(),
        &gw.mcp,
        None,
        &session_headers(&session),
        &json!({"jsonrpc": "2.0",
        "id": 1, "method": "tools/list"}),
    ));
    let foreign = list_in_session(&gw, "not-a-session");
    assert_eq!(foreign.status, 404, "{}", foreign.text);

    // Outside a session: served while the call is in flight...
    let stateless = stateless_list(&gw);
    assert_eq!(stateless.status, 200, "a stateless request while a call is in flight: {}", stateless.text);
    // ...and the call in flight answers with its result.
    let slow = in_flight.join().expect("the in-flight call's thread");
    assert_eq!(slow.status, 200, "{}", slow.text);
    let answer = answer_of(&slow.message["result"]);
    assert_eq!(success_text(&answer["results"][0], "slow"), "done", "{answer}");

    // Nothing in flight now: a stateless request or an unknown session is refused, the session is still served, the
    // process still runs.
    assert_shutting_down(&stateless_list(&gw));
    assert_shutting_down(&list_in_session(&gw, "not-a-session"));
    assert_eq!(list_in_session(&gw, &session).status, 200);
    assert!(gw.gw.running(), "the drain ended with a session open; stderr:\n{}", gw.logs());

    // The client closes its session: the drain ends well before the grace period does.
    let closed = close_session(&http(), &gw.mcp, API_KEY, &session, VERSION);
    assert!(closed.is_success(), "DELETE of the session: {closed}");
    let exited = exit_within(&mut gw, Duration::from_secs(10));
    let (status, at) =
        exited.unwrap_or_else(|| panic!("no exit after the last session closed; stderr:\n{}", gw.logs()));
    assert!(status.success(), "exit status {status}; stderr:\n{}", gw.logs());
    assert!(at - signalled < grace / 2, "the drain took {:?}; stderr:\n{}", at - signalled, gw.logs());
}

#[test]
fn a_session_left_open_holds_the_drain_until_the_grace_period_ends() {
    let mut gw = start("3");
    let session = open_session(&http(), &gw.mcp, API_KEY, VERSION);
    sigterm_now(&gw);
    let signalled = Instant::now();
    assert!(wait_until(SHORT_DEADLINE, || gw.gw.metrics_get("/readyz").status == 503), "{}", gw.logs());
    let listed = list_in_session(&gw, &session);
    assert_eq!(listed.status, 200, "the open session during the drain: {}", listed.text);

    let exited = exit_within(&mut gw, Duration::from_secs(15));
    let (status, at) = exited.unwrap_or_else(|| panic!("no exit after the grace period; stderr:\n{}", gw.logs()));
    assert!(status.success(), "exit status {status}; stderr:\n{}", gw.logs());
    let took = at - signalled;
    assert!(took >= Duration::from_millis(2500), "the drain ended after {took:?}, before its 3 s grace period");
    assert!(took < Duration::from_secs(10), "the drain took {took:?} for a 3 s grace period");
}

#[test]
fn without_sessions_or_calls_the_drain_ends_at_once() {
    let mut gw = start("30");
    let r = stateless_list(&gw);
    assert_eq!(r.status, 200, "{}", r.text);
    sigterm_now(&gw);
    let signalled = Instant::now();
    let exited = exit_within(&mut gw, Duration::from_secs(10));
    let (status, at) = exited.unwrap_or_else(|| panic!("no exit; stderr:\n{}", gw.logs()));
    assert!(status.success(), "exit status {status}; stderr:\n{}", gw.logs());
    assert!(at - signalled < Duration::from_secs(5), "an idle gateway took {:?} to drain", at - signalled);
}

/// The gateway's seven tools, sorted.
fn sorted_gw_tools() -> Vec<String> {
    let mut names: Vec<String> = GW_TOOLS.iter().map(|t| t.to_string()).collect();
    names.sort();
    names
}
