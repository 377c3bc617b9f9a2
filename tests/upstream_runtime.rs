//! Contract section 7 from outside: upstream servers that start slowly (the mock upstream with `--start-delay-ms`,
//! standing in for `npx`/`uvx` downloading on a first start), callers that give up, cold bursts, a call after a
//! timeout, `prestart`, starts that fail (and the cool-down that stops a spawn loop), and `per_session` processes.
//! Starts are counted by the mock's `--starts-file` (one line per start) or by a shell wrapper that appends a line.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{API_KEY, wait_until};
use mcp::*;
use serde_json::{Value, json};

/// A mock server entry whose start takes `delay_ms` and is recorded in `starts`.
fn slow_server(name: &str, delay_ms: u64, starts: &Path) -> Value {
    json!({
        "server_name": name,
        "config": {"command": mock_bin(),
                   "args": ["--start-delay-ms", delay_ms.to_string(), "--starts-file", starts.display().to_string()]}
    })
}

/// The starts recorded in `file` (one pid per line).
fn starts(file: &Path) -> Vec<u32> {
    std::fs::read_to_string(file).unwrap_or_default().lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn discover(server: &str) -> Value {
    json!({"server_name": server})
}

#[test]
fn a_slow_start_serves_the_first_call_and_does_not_count_against_the_call_timeouts() {
    // A 5 s start (a first `npx -y` run) with tool and discovery timeouts of 2 s: the start is bounded by
    // start_timeout_seconds (default 120 s), the timeouts bound the server's own work once it is ready.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("starts");
    let gw = TestGateway::start(&config_with(
        vec![slow_server("slow", 5000, &file)],
        json!({"timeout_settings": {"tool_execution_timeout": 2, "discovery_timeout": 2}}),
    ));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let began = Instant::now();
        let echoed = secure_call_one(&client, "slow", "echo", json!({"text": "first"})).await;
        assert_eq!(success_text(&echoed, "echo"), "first", "logs:\n{}", gw.logs());
        assert!(began.elapsed() >= Duration::from_secs(5), "the start was not as slow as asked");
        // Warm now: the next call does not start anything.
        let echoed = secure_call_one(&client, "slow", "echo", json!({"text": "second"})).await;
        assert_eq!(success_text(&echoed, "echo"), "second");
        assert_eq!(starts(&file).len(), 1);
    });
}

#[test]
fn a_caller_that_gives_up_does_not_end_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("starts");
    // One process at most: a second start could only come from the first one having been ended.
    let common = json!({"upstream_pool": {"max_processes_per_server": 1}});
    let gw = TestGateway::start(&config_with(vec![slow_server("slow", 3000, &file)], common));
    let impatient = reqwest::blocking::Client::builder().timeout(Duration::from_millis(700)).build().unwrap();
    let session = open_session(&impatient, &gw.mcp, API_KEY, "2025-11-25");
    let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-11-25")];
    let body = tools_call_body(2, "gw_discover_all_tools", discover("slow"));
    let sent = impatient
        .post(&gw.mcp)
        .bearer_auth(API_KEY)
        .header("accept", "application/json, text/event-stream")
        .header(headers[0].0, headers[0].1)
        .header(headers[1].0, headers[1].1)
        .json(&body)
        .send();
    assert!(sent.is_err(), "the impatient client should have given up");
    assert!(wait_until(Duration::from_secs(5), || starts(&file).len() == 1), "the start did not begin");
    let started = starts(&file)[0];
    // The process the abandoned call started lives on, finishes its start and serves the next caller.
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let pid = upstream_pid(&client, "slow").await;
        assert_eq!(pid, started, "the next call was served by a new process; logs:\n{}", gw.logs());
    });
    assert_eq!(starts(&file).len(), 1, "the abandoned start was killed and started again");
}

#[test]
fn forty_cold_clients_share_at_most_max_processes_starts_and_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("starts");
    let gw = TestGateway::start(&config_with(
        vec![slow_server("cold", 2000, &file)],
        // Timeouts well above the 2 s start: on two cores shared with other test binaries the 40 calls can queue.
        json!({"upstream_pool": {"max_processes_per_server": 4},
               "timeout_settings": {"tool_execution_timeout": 10, "discovery_timeout": 10}}),
    ));
    let results = runtime().block_on(async {
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..40 {
            let url = gw.mcp.clone();
            // Two keys, 20 clients each: one key's 40 requests at once would pass `max_inflight_per_key` (32,
            // contract 14), which is not what this test is about.
            let key = if i % 2 == 0 { API_KEY } else { KEY_B };
            calls.spawn(async move {
                let client = connect_stateless(&url, key).await;
                let text = format!("client {i}");
                let result = secure_call_one(&client, "cold", "echo", json!({"text": text})).await;
                (text, result)
            });
        }
        calls.join_all().await
    });
    assert_eq!(results.len(), 40);
    for (text, result) in &results {
        assert_eq!(&success_text(result, "echo"), text, "logs:\n{}", gw.logs());
    }
    let count = starts(&file).len();
    assert!((1..=4).contains(&count), "{count} starts for 40 cold clients (at most 4 allowed)");
}

#[test]
fn after_a_timeout_the_next_call_of_the_batch_gets_a_replacement_without_paying_its_start() {
    // One process at most, tool_execution_timeout 1 s, and a start that takes 1.5 s: the first call times out and
    // its process is killed; the echo after it waits for the replacement (its start does not count) and succeeds.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("starts");
    let gw = TestGateway::start(&config_with(
        vec![slow_server("mock", 1500, &file)],
        json!({"upstream_pool": {"max_processes_per_server": 1},
               "timeout_settings": {"tool_execution_timeout": 1}}),
    ));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let batch = calls("mock", &[("slow", json!({"ms": 10_000})), ("echo", json!({"text": "after"}))]);
        let answer = call(&client, "gw_secure_call_tools", batch).await;
        assert_error(&answer["results"][0], "TIMEOUT");
        assert_eq!(success_text(&answer["results"][1], "echo"), "after", "{answer}\nlogs:\n{}", gw.logs());
        // The replacement was started when the timeout ended the first process, once.
        assert_eq!(starts(&file).len(), 2, "{answer}");
    });
}

#[test]
fn prestart_starts_each_server_when_the_config_loads_and_when_a_reload_adds_one() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let common = json!({"upstream_pool": {"prestart": true}});
    let gw = TestGateway::start(&config_with(vec![slow_server("early", 0, &first)], common.clone()));
    assert!(wait_until(Duration::from_secs(10), || starts(&first).len() == 1), "no prestart; logs:\n{}", gw.logs());
    let prestarted = starts(&first)[0];
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        assert_eq!(upstream_pid(&client, "early").await, prestarted, "the first call did not use the prestarted one");
    });
    // A reload that adds a server starts it as well; the unchanged one is not started again.
    let servers = vec![slow_server("early", 0, &first), slow_server("late", 0, &second)];
    common::replace_json(gw.config_path(), &config_with(servers, common));
    assert!(wait_until(Duration::from_secs(10), || starts(&second).len() == 1), "no prestart after the reload");
    assert_eq!(starts(&first).len(), 1);
}

#[test]
fn failed_starts_name_their_cause_then_cool_the_server_down_without_spawning() {
    let dir = tempfile::tempdir().unwrap();
    let spawns = dir.path().join("spawns");
    let secret = "sk-test-0123456789abcdef";
    // Exits before `initialize`, as a server with a missing dependency does, saying why on stderr (with a secret).
    let broken = json!({"server_name": "broken", "config": {"command": "sh", "args": ["-c",
        format!("echo spawn >> '{}'; echo \"Error: cannot reach the API with $API_TOKEN\" >&2; exit 1", spawns.display())],
        "env": {"API_TOKEN": secret}}});
    let missing = json!({"server_name": "missing", "config": {"command": "/nonexistent/mcp-server"}});
    let gw = TestGateway::start(&config_with(vec![broken, missing], json!({})));
    let spawned = || std::fs::read_to_string(&spawns).unwrap_or_default().lines().count();
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let missing = call(&client, "gw_discover_all_tools", discover("missing")).await;
        let message = assert_error(&missing, "UPSTREAM_ERROR");
        assert!(message.contains("cannot run `/nonexistent/mcp-server`"), "{message}");

        for attempt in 1..=3 {
            let found = call(&client, "gw_discover_all_tools", discover("broken")).await;
            let message = assert_error(&found, "UPSTREAM_ERROR");
            assert!(message.contains("exit code 1"), "{message}");
            assert!(message.contains("Error: cannot reach the API with sk-t****"), "{message}");
            assert!(!message.contains("cdef"), "more than 4 characters of the secret show: {message}");
            assert!(!message.contains(secret), "the secret leaked: {message}");
            assert_eq!(spawned(), attempt);
        }
        // Three failures in a row: 1 s of cool-down, answered at once without spawning.
        let began = Instant::now();
        let cooling = call(&client, "gw_discover_all_tools", discover("broken")).await;
        let message = assert_error(&cooling, "UPSTREAM_UNAVAILABLE");
        assert!(message.contains("retry in 1 seconds"), "{message}");
        assert!(began.elapsed() < Duration::from_millis(500));
        assert_eq!(spawned(), 3, "a call during the cool-down spawned the server");
        // After it, one more start is tried; it fails, and the cool-down doubles.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_error(&call(&client, "gw_discover_all_tools", discover("broken")).await, "UPSTREAM_ERROR");
        assert_eq!(spawned(), 4);
        let cooling = call(&client, "gw_discover_all_tools", discover("broken")).await;
        assert!(assert_error(&cooling, "UPSTREAM_UNAVAILABLE").contains("retry in 2 seconds"), "{cooling}");
        assert_eq!(spawned(), 4);
    });
    assert!(!gw.logs().contains(secret), "the secret reached the logs");
}

#[test]
fn per_session_servers_get_a_process_per_session_that_ends_with_it() {
    let mut server = mock_server("private");
    server["config"]["session_affinity"] = json!("per_session");
    let gw = TestGateway::start(&config_with(
        vec![server, mock_server("shared")],
        json!({"limits": {"session_idle_timeout_seconds": 2, "idle_process_seconds": 1}}),
    ));
    runtime().block_on(async {
        let (one, two) = (connect(&gw.mcp, API_KEY).await, connect(&gw.mcp, API_KEY).await);
        let first = upstream_pid(&one, "private").await;
        assert_eq!(upstream_pid(&one, "private").await, first, "a session's calls went to different processes");
        let second = upstream_pid(&two, "private").await;
        assert_ne!(first, second, "two sessions shared a per_session process");
        // A shared server is still one pool for everyone.
        assert_eq!(upstream_pid(&one, "shared").await, upstream_pid(&two, "shared").await);

        // Closing a session (DELETE) ends its process, and only its own.
        one.cancel().await.ok();
        assert!(wait_gone(&[first], Duration::from_secs(5)).is_empty(), "the closed session's process lives on");
        assert!(alive(second));

        // Stateless calls (no session) get a process of the key's, apart from the sessions', reused by the key's
        // next stateless call and ended after idle_process_seconds (1 s).
        let stateless = connect_stateless(&gw.mcp, API_KEY).await;
        let lone = upstream_pid(&stateless, "private").await;
        assert!(lone != second && lone != first);
        assert_eq!(upstream_pid(&stateless, "private").await, lone, "the key's stateless process was not reused");
        assert!(wait_gone(&[lone], Duration::from_secs(5)).is_empty(), "the idle stateless process lives on");

        // A session that idles out (2 s) ends its process too.
        assert!(wait_gone(&[second], Duration::from_secs(8)).is_empty(), "the idle session's process lives on");
        drop(two);
    });
}

#[test]
fn an_invalid_session_affinity_or_start_timeout_is_refused_with_both_problems() {
    let mut server = mock_server("odd");
    server["config"]["session_affinity"] = json!("per_user");
    let config = config_with(vec![server], json!({"upstream_pool": {"start_timeout_seconds": 0}}));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.json");
    common::write_json(&path, &config);
    let (status, _out, err) = common::run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success());
    assert!(err.contains("config.session_affinity: must be \"shared\" or \"per_session\""), "{err}");
    assert!(err.contains("upstream_pool.start_timeout_seconds: must be a positive number"), "{err}");
}
