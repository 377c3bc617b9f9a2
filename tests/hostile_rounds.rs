//! Contract 14, "Processes are counted" and "Waiting rounds are bounded", from outside: a key holder that floods a
//! `per_session` server with stateless (2026-07-28) calls, or that parks calls in `input_required` rounds, or replays
//! another key's `requestState`, against the real binary and the mock upstream (whose `sample` tool, listed with
//! `--sample-tool`, asks the client a `sampling/createMessage` during its call or after it, and whose `--starts-file`
//! counts its processes).

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::path::Path;
use std::time::Duration;

use common::{API_KEY, wait_until};
use mcp::*;
use serde_json::{Value, json};

/// The mock as server `mock`, writing one line (its pid) to `starts` at each start, with `affinity`.
fn counted_mock(starts: &Path, affinity: &str) -> Value {
    let mut server = mock_server("mock");
    server["config"]["args"] = json!(["--sample-tool", "--starts-file", starts.display().to_string()]);
    server["config"]["session_affinity"] = json!(affinity);
    server
}

fn gateway(starts: &Path, affinity: &str, limits: Value) -> TestGateway {
    let common = json!({"tool_exposure": "transparent", "limits": limits});
    TestGateway::start(&config_with(vec![counted_mock(starts, affinity)], common))
}

fn starts_in(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|line| line.trim().parse().ok()).collect()
}

fn alive(pid: u32) -> bool {
    std::process::Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// A stateless `tools/call` of `tool` by `key` from a client that declares sampling; `resume` is the
/// `requestState` and the `inputResponses` of a later round.
fn stateless_call(gw: &TestGateway, key: &str, tool: &str, args: Value, resume: Option<(&str, Value)>) -> Rpc {
    let mut body = tools_call_body(1, tool, args);
    let mut meta = stateless_meta();
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({"sampling": {}});
    body["params"]["_meta"] = meta;
    if let Some((state, answers)) = resume {
        body["params"]["requestState"] = json!(state);
        body["params"]["inputResponses"] = answers;
    }
    post(&http(), &gw.mcp, Some(key), &stateless_headers("tools/call", Some(tool)), &body)
}

/// The `requestState` and the one key of `inputRequests` of an `input_required` answer.
#[track_caller]
fn input_required(r: &Rpc) -> (String, String) {
    let result = &r.message["result"];
    assert_eq!(result["resultType"], json!("input_required"), "{}", r.text);
    let requests = result["inputRequests"].as_object().unwrap_or_else(|| panic!("no inputRequests: {}", r.text));
    assert_eq!(requests.len(), 1, "{}", r.text);
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], json!("sampling/createMessage"), "{}", r.text);
    (result["requestState"].as_str().expect("requestState").to_string(), key.clone())
}

/// The client's answer to the sampling request under `key`.
fn sampled(key: &str, text: &str) -> Value {
    json!({key: {"role": "assistant", "model": "test", "content": {"type": "text", "text": text}}})
}

#[track_caller]
fn assert_invalid_params(r: &Rpc) {
    assert_eq!(r.message["error"]["code"], json!(-32602), "expected JSON-RPC invalid params: {}", r.text);
}

#[test]
fn forty_stateless_calls_to_a_per_session_server_share_at_most_the_keys_processes_and_none_is_left_behind() {
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    // 40 requests of one key in flight at once: over the default `max_inflight_per_key` (32), which is not the limit
    // under test here.
    let limits = json!({"max_processes_per_key": 2, "idle_process_seconds": 1, "max_inflight_per_key": 64});
    let gw = gateway(&starts, "per_session", limits);
    // The processes running at once, as the gateway counts them (`mcpgw_upstream_processes`), sampled throughout. The
    // number started over the whole burst may be higher: a call that finds the key's places taken ends an idle process
    // of the key's at once (its discovery's, say) and starts its own in that place.
    let calling = std::sync::atomic::AtomicBool::new(true);
    let (answers, most): (Vec<Rpc>, f64) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut most = 0f64;
            while calling.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(metric(&gw, "mcpgw_upstream_processes"));
                std::thread::sleep(Duration::from_millis(10));
            }
            most
        });
        let calls: Vec<_> = (0..40)
            .map(|_| scope.spawn(|| stateless_call(&gw, API_KEY, "mock__slow", json!({"ms": 100}), None)))
            .collect();
        let answers = calls.into_iter().map(|call| call.join().unwrap()).collect();
        calling.store(false, std::sync::atomic::Ordering::Relaxed);
        (answers, sampler.join().unwrap())
    });
    let mut done = 0;
    for r in &answers {
        assert_eq!(r.status, 200, "{}", r.text);
        let result = &r.message["result"];
        if result["isError"] == json!(true) {
            assert_eq!(result["structuredContent"]["error_code"], json!("UPSTREAM_UNAVAILABLE"), "{}", r.text);
        } else {
            assert_eq!(upstream_text(result), "done", "{}", r.text);
            done += 1;
        }
    }
    assert!(done > 0, "no call was served");
    let pids = starts_in(&starts);
    assert!(!pids.is_empty(), "no process started");
    assert!(
        (1.0..=2.0).contains(&most),
        "40 stateless calls of one key ran {most} processes at once ({} started in all)",
        pids.len()
    );
    // Reused, then idle for idle_process_seconds: they end, and nothing is leaked.
    assert!(wait_until(Duration::from_secs(15), || pids.iter().all(|pid| !alive(*pid))), "processes left: {pids:?}");
}

#[test]
fn a_call_past_the_keys_processes_waits_its_timeout_then_is_unavailable() {
    // A session's process counts against its key as a stateless call's does.
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    let common = json!({"tool_exposure": "transparent", "limits": {"max_processes_per_key": 1},
                        "timeout_settings": {"tool_execution_timeout": 1}});
    let gw = TestGateway::start(&config_with(vec![counted_mock(&starts, "per_session")], common));
    // The key's one place is held by the process of its MCP session (which lives as long as the session does).
    let http = http();
    let session = open_session(&http, &gw.mcp, API_KEY, "2025-11-25");
    let in_session = post(
        &http,
        &gw.mcp,
        Some(API_KEY),
        &[("mcp-session-id", session.as_str())],
        &tools_call_body(2, "mock__echo", json!({"text": "mine"})),
    );
    assert_eq!(upstream_text(&in_session.message["result"]), "mine", "{}", in_session.text);
    let r = stateless_call(&gw, API_KEY, "mock__echo", json!({"text": "x"}), None);
    let answer = &r.message["result"]["structuredContent"];
    assert_eq!(answer["error_code"], json!("UPSTREAM_UNAVAILABLE"), "{}", r.text);
    assert!(answer["message"].as_str().unwrap().contains("max_processes_per_key"), "{}", r.text);
    assert_eq!(limit_hits(&gw, "processes_per_key"), 1.0);
    // Another key is not held up by it.
    let other = stateless_call(&gw, KEY_B, "mock__echo", json!({"text": "other"}), None);
    assert_eq!(upstream_text(&other.message["result"]), "other", "{}", other.text);
    assert_eq!(starts_in(&starts).len(), 2, "one process per key");
}

#[test]
fn a_request_state_resumes_only_its_owners_call_of_the_same_tool() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&dir.path().join("starts"), "shared", json!({}));
    let (state, key) = input_required(&stateless_call(&gw, API_KEY, "mock__sample", json!({"text": "hello"}), None));
    // Another key replaying the state, and the owner naming another tool: refused, and the call goes on waiting.
    let stolen =
        stateless_call(&gw, KEY_B, "mock__sample", json!({"text": "hello"}), Some((&state, sampled(&key, "thief"))));
    assert_invalid_params(&stolen);
    let other_tool =
        stateless_call(&gw, API_KEY, "mock__echo", json!({"text": "x"}), Some((&state, sampled(&key, "x"))));
    assert_invalid_params(&other_tool);
    // The owner's call was left untouched: its answer completes it.
    let resumed = Some((state.as_str(), sampled(&key, "answered by the owner")));
    let r = stateless_call(&gw, API_KEY, "mock__sample", json!({"text": "hello"}), resumed);
    let text = upstream_text(&r.message["result"]);
    assert!(text.starts_with("answered") && text.contains("answered by the owner"), "{text}");
    // A state is good for one resume.
    let again =
        stateless_call(&gw, API_KEY, "mock__sample", json!({"text": "hello"}), Some((&state, sampled(&key, "x"))));
    assert_invalid_params(&again);
}

#[test]
fn a_key_has_at_most_its_waiting_rounds_and_an_unanswered_round_ends_after_input_required_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let limits = json!({"max_waiting_rounds_per_key": 2, "input_required_seconds": 1});
    let gw = gateway(&dir.path().join("starts"), "shared", limits);
    let ask = |key: &str| stateless_call(&gw, key, "mock__sample", json!({"text": "q"}), None);
    let (first, first_key) = input_required(&ask(API_KEY));
    input_required(&ask(API_KEY));
    let refused = ask(API_KEY);
    let result = &refused.message["result"];
    assert_eq!(result["isError"], json!(true), "{}", refused.text);
    assert_eq!(result["structuredContent"]["error_code"], json!("RATE_LIMITED"), "{}", refused.text);
    assert_eq!(result["structuredContent"]["retry_after_seconds"], json!(5), "{}", refused.text);
    assert_eq!(limit_hits(&gw, "waiting_rounds_per_key"), 1.0);
    // Another key has rounds of its own.
    input_required(&ask(KEY_B));
    // Unanswered for input_required_seconds, the rounds end: their processes are free and the key may wait again.
    assert!(wait_until(Duration::from_secs(10), || limit_hits(&gw, "input_required") >= 3.0), "rounds did not end");
    assert_invalid_params(&stateless_call(
        &gw,
        API_KEY,
        "mock__sample",
        json!({"text": "q"}),
        Some((&first, sampled(&first_key, "late"))),
    ));
    input_required(&ask(API_KEY));
    let echoed = stateless_call(&gw, API_KEY, "mock__echo", json!({"text": "still served"}), None);
    assert_eq!(upstream_text(&echoed.message["result"]), "still served", "{}", echoed.text);
}

#[test]
fn a_request_the_server_sends_after_its_call_ended_is_refused_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let gw = gateway(&dir.path().join("starts"), "per_session", json!({}));
    let outcome = dir.path().join("outcome");
    let args = json!({"text": "too late", "late_ms": 300, "outcome_file": outcome.display().to_string()});
    let r = stateless_call(&gw, API_KEY, "mock__sample", args, None);
    assert_eq!(upstream_text(&r.message["result"]), "asking later", "{}", r.text);
    assert!(wait_until(Duration::from_secs(10), || outcome.exists()), "the server never heard back");
    let heard = std::fs::read_to_string(&outcome).unwrap();
    assert!(heard.starts_with("refused"), "a request after the call ended was answered: {heard}");
}
