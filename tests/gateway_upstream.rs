//! The gateway in front of real upstream processes (the crate's `mcpgw-mock-upstream` over stdio), from outside:
//! discovery order and the tool cache, `gw_secure_call_tools` results (success, unknown tool, crash, garbage, timeout;
//! the batch carries on), timeout metrics, the pool (`max_processes_per_server`, `idle_timeout_seconds`, crashed and
//! hung processes replaced), 50 concurrent sessions, servers added or changed without a restart, the upstream's
//! minimal environment, and SIGTERM ending every upstream process with its process group.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    ALICE_ID, API_KEY, CONFIG_ID, ENV_SECRET, PROJECT_ID, RELOAD_DEADLINE, read_json, replace_json, wait_until,
};
use mcp::*;
use reqwest::Method;
use serde_json::{Value, json};

const MOCK_TOOLS: [&str; 12] =
    ["add", "changed", "crash", "echo", "env", "fail", "garbage", "large", "pid", "raw", "rpc_error", "slow"];

fn start_mock(common: Value) -> TestGateway {
    TestGateway::start(&config_with(vec![mock_server("mock")], common))
}

#[test]
fn discovery_goes_to_the_live_server_then_the_cache_and_clear_cache_resets_it() {
    let mut mixed = mock_server("mixed");
    mixed["tools"] = json!({"configured_only": {"description": "from the config", "inputSchema": {"type": "object"}}});
    let gw = TestGateway::start(&config_with(vec![mock_server("mock"), mixed], json!({})));
    let rt = runtime();
    rt.block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let discover = |args: Value| call(&client, "gw_discover_all_tools", args);

        let first = discover(json!({"server_name": "mock"})).await;
        assert_eq!(first["status"], json!("success"), "{first}");
        assert_eq!(first["source"], json!("discovery"), "first discovery after start: {first}");
        assert_eq!(sorted_tool_names(&first), MOCK_TOOLS, "{first}");
        assert!(first["message"].as_str().is_some_and(|m| m.contains("12")), "message gives the count: {first}");
        let meta = &first["server_metadata"];
        assert_eq!(meta["name"], json!("mcpgw-mock-upstream"), "server_metadata: {first}");
        assert!(meta["version"].as_str().is_some_and(|v| !v.is_empty()), "server_metadata.version: {first}");
        assert!(meta["description"].as_str().is_some_and(|d| !d.is_empty()), "server_metadata.description: {first}");
        let echo = first["tools"].as_array().unwrap().iter().find(|t| t["name"] == json!("echo")).unwrap();
        assert_eq!(echo["inputSchema"]["type"], json!("object"), "tool records carry inputSchema: {echo}");
        assert!(echo["description"].is_string(), "{echo}");

        let second = discover(json!({"server_name": "mock"})).await;
        assert_eq!(second["source"], json!("cache"), "{second}");
        assert_eq!(second["tools"], first["tools"]);

        // The cache is shared by every session and key of the configuration.
        let bob = connect(&gw.mcp, KEY_B).await;
        let shared = call(&bob, "gw_discover_all_tools", json!({"server_name": "mock"})).await;
        assert_eq!(shared["source"], json!("cache"), "another key of the same config: {shared}");
        bob.cancel().await.unwrap();

        // Configured tools win over the live server.
        let configured = discover(json!({"server_name": "mixed"})).await;
        assert_eq!(configured["source"], json!("config"), "{configured}");
        assert_eq!(sorted_tool_names(&configured), ["configured_only"]);

        let status = call(&client, "gw_get_cache_status", json!({})).await;
        assert!(status["tool_cache"]["entries"].as_u64().unwrap() >= 1, "{status}");
        assert!(status["tool_cache"]["hits"].as_u64().unwrap() >= 2, "{status}");
        assert!(status["tool_cache"]["misses"].as_u64().unwrap() >= 1, "{status}");

        // Clearing the gateway config cache leaves the tools cached.
        call(&client, "gw_clear_cache", json!({"cache_type": "gateway_config"})).await;
        assert_eq!(discover(json!({"server_name": "mock"})).await["source"], json!("cache"));

        for clear in
            [json!({}), json!({"server_name": "mock"}), json!({"cache_type": "tools"}), json!({"cache_type": "all"})]
        {
            let cleared = call(&client, "gw_clear_cache", clear.clone()).await;
            assert_eq!(cleared["status"], json!("success"), "{cleared}");
            let again = discover(json!({"server_name": "mock"})).await;
            assert_eq!(again["source"], json!("discovery"), "after gw_clear_cache {clear}: {again}");
            assert!(again["server_metadata"].is_object(), "{again}");
            assert_eq!(discover(json!({"server_name": "mock"})).await["source"], json!("cache"));
        }
        let after = call(&client, "gw_get_cache_status", json!({})).await;
        assert!(after["tool_cache"]["entries"].as_u64().unwrap() >= 1, "{after}");

        let all = discover(json!({})).await;
        assert_eq!(all["status"], json!("success"), "{all}");
        assert_eq!(all["servers"]["mock"]["source"], json!("cache"), "{all}");
        assert_eq!(all["servers"]["mixed"]["source"], json!("config"), "{all}");

        let listed = call(&client, "gw_list_all_servers", json!({"discover_tools": true})).await;
        let mock = listed["servers"].as_array().unwrap().iter().find(|s| s["server_name"] == json!("mock")).cloned();
        let mock = mock.unwrap_or_else(|| panic!("mock not listed: {listed}"));
        assert_eq!(sorted_tool_names(&mock), MOCK_TOOLS, "{listed}");

        let info = call(&client, "gw_get_server_info", json!({"server_name": "mock"})).await;
        assert_eq!(info["server_info"]["tools"].as_array().map(Vec::len), Some(MOCK_TOOLS.len()), "{info}");
        client.cancel().await.unwrap();
    });
}

#[test]
fn secure_call_answers_each_call_with_the_upstream_result() {
    let gw = start_mock(json!({}));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let batch = calls(
            "mock",
            &[
                ("echo", json!({"text": "hello, gateway"})),
                ("add", json!({"a": 2, "b": 3})),
                ("fail", json!({"message": "the tool said no"})),
                ("large", json!({"bytes": 1_000_000})),
            ],
        );
        let answer = call(&client, "gw_secure_call_tools", batch).await;
        assert_eq!(answer["status"], json!("success"), "{answer}");
        let results = answer["results"].as_array().expect("results");
        assert_eq!(results.len(), 4, "one result per call");

        assert_eq!(success_text(&results[0], "echo"), "hello, gateway");
        assert_eq!(results[0]["response"]["structuredContent"], json!({"text": "hello, gateway"}), "{}", results[0]);
        assert_eq!(success_text(&results[1], "add"), "5");
        // A tool error of the upstream is its result, passed on as it is.
        assert_eq!(success_text(&results[2], "fail"), "the tool said no");
        assert_eq!(results[2]["response"]["isError"], json!(true), "{}", results[2]);
        let large = success_text(&results[3], "large");
        assert_eq!(large.len(), 1_000_000, "a large result arrives whole");
        assert!(large.bytes().all(|b| b == b'x'));

        let meta = &answer["metadata"];
        assert_eq!(meta["server_name"], json!("mock"), "{meta}");
        assert!(meta["execution_time_ms"].is_u64(), "{meta}");
        assert_eq!(meta["guardrails_applied"], json!(false), "{meta}");

        let empty = call(&client, "gw_secure_call_tools", json!({"server_name": "mock", "tool_calls": []})).await;
        assert_eq!(empty["status"], json!("success"), "{empty}");
        assert_eq!(empty["results"], json!([]), "{empty}");
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_batch_carries_on_after_an_unknown_tool_a_crash_garbage_and_a_timeout() {
    let gw = start_mock(json!({"timeout_settings": {"tool_execution_timeout": 1}}));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let batch = calls(
            "mock",
            &[
                ("echo", json!({"text": "one"})),
                ("no_such_tool", json!({})),
                ("echo", json!({"text": "two"})),
                ("crash", json!({})),
                ("echo", json!({"text": "three"})),
                ("garbage", json!({})),
                ("echo", json!({"text": "four"})),
                ("slow", json!({"ms": 8000})),
                ("echo", json!({"text": "five"})),
            ],
        );
        let started = Instant::now();
        let answer = call(&client, "gw_secure_call_tools", batch).await;
        let elapsed = started.elapsed();
        assert_eq!(answer["status"], json!("success"), "{answer}");
        let r = answer["results"].as_array().expect("results");
        assert_eq!(r.len(), 9, "one result per call, in order: {answer}");
        assert_eq!(success_text(&r[0], "echo"), "one");
        assert_error(&r[1], "TOOL_NOT_FOUND");
        assert_eq!(success_text(&r[2], "echo"), "two");
        assert_error(&r[3], "UPSTREAM_ERROR");
        assert_eq!(success_text(&r[4], "echo"), "three", "the call after a crash works");
        assert_error(&r[5], "UPSTREAM_ERROR");
        assert_eq!(success_text(&r[6], "echo"), "four", "the call after garbage works");
        let message = assert_error(&r[7], "TIMEOUT");
        assert_eq!(message, "operation timed out after 1 seconds");
        assert_eq!(success_text(&r[8], "echo"), "five", "the call after a timeout works");
        assert!(
            elapsed < Duration::from_secs(6),
            "the 8 s call was not cut at its 1 s timeout: batch took {elapsed:?}"
        );

        let metrics = call(&client, "gw_get_timeout_metrics", json!({})).await;
        let m = &metrics["timeout_metrics"];
        assert!(m["timeout_operations"].as_u64().unwrap() >= 1, "{metrics}");
        let tool = &m["by_kind"]["tool_execution"];
        assert!(tool["timeout_operations"].as_u64().unwrap() >= 1, "a tool_execution timeout is counted: {metrics}");
        assert!(tool["total_operations"].as_u64().unwrap() >= 5, "{metrics}");
        assert!(tool["successful_operations"].as_u64().unwrap() >= 5, "{metrics}");
        assert!(m["success_rate"].as_f64().unwrap() < 1.0, "{metrics}");
        assert_eq!(metrics["timeout_config"]["tool_execution_timeout"].as_f64(), Some(1.0), "{metrics}");
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_crashed_process_is_replaced_and_a_hung_one_is_killed() {
    let common = json!({
        "timeout_settings": {"tool_execution_timeout": 1},
        "upstream_pool": {"max_processes_per_server": 1, "idle_timeout_seconds": 300}
    });
    let gw = start_mock(common);
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let first = upstream_pid(&client, "mock").await;
        assert_eq!(upstream_pid(&client, "mock").await, first, "a warm call reuses the idle process");

        assert_error(&secure_call_one(&client, "mock", "crash", json!({})).await, "UPSTREAM_ERROR");
        let second = upstream_pid(&client, "mock").await;
        assert_ne!(second, first, "the crashed process was replaced");
        assert!(wait_gone(&[first], Duration::from_secs(5)).is_empty(), "the crashed process {first} is still there");

        let hung = secure_call_one(&client, "mock", "slow", json!({"ms": 30000})).await;
        assert_error(&hung, "TIMEOUT");
        assert!(
            wait_gone(&[second], Duration::from_secs(5)).is_empty(),
            "the process {second} that overran its timeout was not killed"
        );
        let third = upstream_pid(&client, "mock").await;
        assert!(third != second && third != first);
        client.cancel().await.unwrap();
    });
}

#[test]
fn fifty_concurrent_sessions_each_get_their_own_answer() {
    let gw = start_mock(json!({}));
    let rt = runtime();
    rt.block_on(async {
        let url = Arc::new(gw.mcp.clone());
        let mut tasks = Vec::new();
        for i in 0..50 {
            let url = Arc::clone(&url);
            tasks.push(tokio::spawn(async move {
                let key = if i % 2 == 0 { API_KEY } else { KEY_B };
                let client = connect(&url, key).await;
                let text = format!("session {i} says hello");
                let result = secure_call_one(&client, "mock", "echo", json!({"text": text})).await;
                let got = success_text(&result, "echo");
                client.cancel().await.unwrap();
                (text, got)
            }));
        }
        let mut answered = 0;
        for task in tasks {
            let (sent, got) = task.await.expect("a session task panicked");
            assert_eq!(got, sent, "a session got another session's answer");
            answered += 1;
        }
        assert_eq!(answered, 50);
    });
}

/// Six concurrent 700 ms `slow` calls, each from its own session: the pids that served them and how long it took.
async fn six_slow_calls(gw: &TestGateway) -> (HashSet<u64>, Duration) {
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(Arc::new(connect(&gw.mcp, API_KEY).await));
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for client in &clients {
        let client = Arc::clone(client);
        tasks.push(tokio::spawn(async move {
            let result = secure_call_one(&client, "mock", "slow", json!({"ms": 700})).await;
            assert_eq!(success_text(&result, "slow"), "done", "{result}");
            result["response"]["structuredContent"]["pid"].as_u64().expect("slow answers its pid")
        }));
    }
    let mut pids = HashSet::new();
    for task in tasks {
        pids.insert(task.await.expect("a call task panicked"));
    }
    let elapsed = started.elapsed();
    for client in clients {
        if let Ok(client) = Arc::try_unwrap(client) {
            client.cancel().await.unwrap();
        }
    }
    (pids, elapsed)
}

#[test]
fn max_processes_per_server_bounds_the_processes_and_max_calls_per_process_lets_them_share() {
    let gw = start_mock(json!({"upstream_pool": {"max_processes_per_server": 2, "idle_timeout_seconds": 300}}));
    let rt = runtime();
    rt.block_on(async {
        let (pids, elapsed) = six_slow_calls(&gw).await;
        assert_eq!(pids.len(), 2, "6 concurrent calls with max_processes_per_server 2 ran on {pids:?}");
        assert!(elapsed >= Duration::from_millis(2000), "6 calls of 700 ms on 2 processes took only {elapsed:?}");
        assert!(elapsed < Duration::from_millis(4000), "the 2 processes did not serve concurrently: {elapsed:?}");

        // Sharing, turned on by a config edit without a restart: three calls at once on each of the two processes.
        let mut config = read_json(gw.config_path());
        config["common_mcp_gateway_config"]["upstream_pool"]["max_calls_per_process"] = json!(3);
        replace_json(gw.config_path(), &config);
        let reloaded = wait_until(RELOAD_DEADLINE, || gw.logs().contains("configuration reloaded"));
        assert!(reloaded, "no reload in the logs:\n{}", gw.logs());
        let (shared, elapsed) = six_slow_calls(&gw).await;
        assert!(shared.is_subset(&pids), "sharing started new processes: {shared:?} after {pids:?}");
        assert!(elapsed >= Duration::from_millis(700), "{elapsed:?}");
        assert!(elapsed < Duration::from_millis(1350), "6 calls of 700 ms sharing 2 processes took {elapsed:?}");
    });
}

#[test]
fn idle_processes_end_after_idle_timeout_seconds() {
    let gw = start_mock(json!({"upstream_pool": {"max_processes_per_server": 2, "idle_timeout_seconds": 1}}));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let pid = upstream_pid(&client, "mock").await;
        assert!(alive(pid), "the process serving a call is running right after it");
        let left = wait_gone(&[pid], Duration::from_secs(10));
        assert!(left.is_empty(), "the idle process {pid} did not end within 10 s of an idle timeout of 1 s");
        let next = upstream_pid(&client, "mock").await;
        assert_ne!(next, pid, "a new process serves the next call");
        client.cancel().await.unwrap();
    });
}

#[test]
fn servers_added_or_changed_in_the_config_are_callable_without_restart() {
    let gw = start_mock(json!({}));
    let rt = runtime();
    let client = rt.block_on(connect(&gw.mcp, API_KEY));

    // Edit the file: a new server.
    let mut config = read_json(gw.config_path());
    let mut added = mock_server("added");
    added["config"]["env"] = json!({"MOCK_GENERATION": "first"});
    config["mcp_configs"][CONFIG_ID]["mcp_config"].as_array_mut().unwrap().push(added.clone());
    replace_json(gw.config_path(), &config);
    rt.block_on(async {
        let listed = eventually(RELOAD_DEADLINE, || async {
            let servers = call(&client, "gw_list_all_servers", json!({})).await;
            servers["servers"].as_array().is_some_and(|l| l.iter().any(|s| s["server_name"] == json!("added")))
        })
        .await;
        assert!(listed, "a server added to the file was not listed within {RELOAD_DEADLINE:?}");
        let result = secure_call_one(&client, "added", "echo", json!({"text": "new server"})).await;
        assert_eq!(success_text(&result, "echo"), "new server");
        let env = secure_call_one(&client, "added", "env", json!({"name": "MOCK_GENERATION"})).await;
        assert_eq!(success_text(&env, "env"), "first");
    });
    let old_pid = rt.block_on(upstream_pid(&client, "added"));

    // A changed env retires the server's processes: the next call sees the new value in a new process.
    added["config"]["env"] = json!({"MOCK_GENERATION": "second"});
    let r = admin(&gw, Method::PUT, &format!("/api/v1/configs/{CONFIG_ID}/servers/added"), Some(&added));
    assert_eq!(r.status, 200, "PUT server: {}", r.text);
    rt.block_on(async {
        let env = secure_call_one(&client, "added", "env", json!({"name": "MOCK_GENERATION"})).await;
        assert_eq!(success_text(&env, "env"), "second", "an admin change is in effect at once");
        assert_ne!(upstream_pid(&client, "added").await, old_pid);
    });
    assert!(wait_gone(&[old_pid], Duration::from_secs(10)).is_empty(), "the retired process {old_pid} still runs");

    // Through the admin API: in effect at once.
    let r = admin(&gw, Method::POST, &format!("/api/v1/configs/{CONFIG_ID}/servers"), Some(&mock_server("via_admin")));
    assert_eq!(r.status, 201, "POST server: {}", r.text);
    rt.block_on(async {
        let result = secure_call_one(&client, "via_admin", "add", json!({"a": 40, "b": 2})).await;
        assert_eq!(success_text(&result, "add"), "42");
    });

    // A removed server is gone.
    let r = admin(&gw, Method::DELETE, &format!("/api/v1/configs/{CONFIG_ID}/servers/mock"), None);
    assert_eq!(r.status, 200, "DELETE server: {}", r.text);
    rt.block_on(async {
        let answer = call(&client, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": "x"}))])).await;
        assert_error(&answer, "SERVER_NOT_FOUND");
        client.cancel().await.unwrap();
    });
}

#[test]
fn upstreams_get_a_minimal_environment_without_the_gateway_credentials() {
    let mut server = mock_server("mock");
    server["config"]["env"] = json!({"MOCK_SETTING": "configured-value", "TOKEN": ENV_SECRET});
    server["config"]["inherit_env"] = json!(["MCPGW_TEST_INHERITED"]);
    let envs = [
        ("GW_GATEWAY_KEY", API_KEY),
        ("GW_PROJECT_ID", PROJECT_ID),
        ("GW_USER_ID", ALICE_ID),
        ("MCPGW_TEST_LEAK", "must-not-leak"),
        ("MCPGW_TEST_INHERITED", "inherited-value"),
    ];
    let gw = TestGateway::start_with(&config_with(vec![server], json!({})), &envs);
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let env = |name: &'static str| {
            let client = &client;
            async move { success_text(&secure_call_one(client, "mock", "env", json!({"name": name})).await, "env") }
        };
        for name in ["GW_GATEWAY_KEY", "GW_PROJECT_ID", "GW_USER_ID", "MCPGW_TEST_LEAK"] {
            assert_eq!(env(name).await, "<unset>", "{name} reached the upstream");
        }
        assert_eq!(env("MOCK_SETTING").await, "configured-value", "the server's configured env");
        assert_eq!(env("TOKEN").await, ENV_SECRET);
        assert_eq!(env("MCPGW_TEST_INHERITED").await, "inherited-value", "a name listed in inherit_env");
        assert_ne!(env("PATH").await, "<unset>", "PATH is part of the minimal environment");

        let info = call(&client, "gw_get_server_info", json!({"server_name": "mock"})).await;
        assert_eq!(info["server_info"]["tools"].as_array().map(Vec::len), Some(MOCK_TOOLS.len()), "{info}");
        let text = info.to_string();
        assert!(!text.contains(ENV_SECRET) && !text.contains("configured-value"), "env values shown: {text}");
        client.cancel().await.unwrap();
    });
}

#[test]
fn sigterm_ends_every_upstream_process_with_its_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let grandchild_file = dir.path().join("grandchild.pid");
    // An upstream that leaves a grandchild in its process group: only ending the whole group ends it (the mock
    // itself would also end when its stdin closes).
    let script =
        format!("sleep 300 </dev/null >/dev/null 2>&1 & echo $! > '{}'; exec \"$0\"", grandchild_file.display());
    let grouped = json!({
        "server_name": "grouped",
        "description": "Mock behind a shell with a grandchild",
        "config": {"command": "/bin/sh", "args": ["-c", script, mock_bin()]}
    });
    let mut gw = TestGateway::start(&config_with(vec![mock_server("mock"), grouped], json!({})));
    let rt = runtime();
    let mut pids: Vec<u32> = rt.block_on(async {
        let client = Arc::new(connect(&gw.mcp, API_KEY).await);
        // Several processes of one server: concurrent calls grow its pool.
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let client = Arc::clone(&client);
            tasks.push(tokio::spawn(async move {
                let result = secure_call_one(&client, "mock", "slow", json!({"ms": 400})).await;
                result["response"]["structuredContent"]["pid"].as_u64().expect("slow answers its pid") as u32
            }));
        }
        let mut pids = vec![upstream_pid(&client, "grouped").await];
        for task in tasks {
            pids.push(task.await.unwrap());
        }
        pids.sort();
        pids.dedup();
        pids
    });
    assert!(pids.len() >= 2, "expected processes of both servers: {pids:?}");
    assert!(wait_until(Duration::from_secs(5), || std::fs::read_to_string(&grandchild_file)
        .is_ok_and(|s| !s.trim().is_empty())));
    let grandchild: u32 = std::fs::read_to_string(&grandchild_file).unwrap().trim().parse().unwrap();
    let _cleanup = KillOnDrop(vec![grandchild]);
    assert!(alive(grandchild), "the grandchild {grandchild} should run while its upstream does");
    pids.push(grandchild);
    for pid in &pids {
        assert!(alive(*pid), "upstream process {pid} should run before SIGTERM");
    }

    let status = sigterm(&mut gw);
    assert!(status.success(), "mcpgw exited with {status} after SIGTERM; stderr:\n{}", gw.logs());
    let left = wait_gone(&pids, Duration::from_secs(5));
    assert!(left.is_empty(), "processes left after SIGTERM: {left:?} (of {pids:?}, the last is the grandchild)");
}

#[test]
fn sigterm_lets_a_call_in_flight_finish_before_exiting() {
    // A grace period longer than the test: the drain ends because the client closes its session.
    let config = config_with(vec![mock_server("mock")], json!({}));
    let mut gw = TestGateway::start_with(&config, &[("GW_SHUTDOWN_GRACE_SECONDS", "30")]);
    let rt = runtime();
    let client = Arc::new(rt.block_on(connect(&gw.mcp, API_KEY)));
    // Warm: the slow call below starts at once.
    let warm = rt.block_on(upstream_pid(&client, "mock"));
    let started = gw.dir.path().join("slow-started");
    let in_flight = {
        let client = Arc::clone(&client);
        let batch = calls("mock", &[("slow", slow_marked(2000, &started))]);
        rt.spawn(async move { try_call(&client, "gw_secure_call_tools", batch).await })
    };
    // The signal comes once the call (2 s) has reached the upstream.
    wait_started(&started);
    let term = std::process::Command::new("kill").args(["-TERM", &gw.gw.pid().to_string()]).status();
    assert!(term.is_ok_and(|s| s.success()), "kill -TERM failed");
    let outcome = rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), in_flight).await });
    let answer = match outcome {
        Ok(Ok(Ok(result))) => answer_of(&result),
        Ok(Ok(Err(e))) => panic!("the call in flight during the drain failed: {e}; stderr:\n{}", gw.logs()),
        Ok(Err(e)) => panic!("the call task failed: {e}"),
        Err(_) => panic!("the call in flight during the drain got no answer; stderr:\n{}", gw.logs()),
    };
    let result = &answer["results"][0];
    assert_eq!(success_text(result, "slow"), "done", "the call in flight during the drain finished: {answer}");
    // The client closes its session (DELETE): nothing is left to drain.
    if let Ok(client) = Arc::try_unwrap(client) {
        let _ = rt.block_on(client.cancel());
    }
    let status = gw.gw.wait_exit(Duration::from_secs(10));
    let status = status.unwrap_or_else(|| panic!("no exit after the session closed; stderr:\n{}", gw.logs()));
    assert!(status.success(), "mcpgw exited with {status} after SIGTERM; stderr:\n{}", gw.logs());
    assert!(wait_gone(&[warm], Duration::from_secs(5)).is_empty(), "upstream process {warm} left after SIGTERM");
}

#[test]
fn a_server_that_fails_on_a_certificate_says_so_and_names_the_setting_that_fixes_it() {
    // What `npx` prints behind a TLS-inspecting proxy (npm 10): the cause three lines above the boilerplate.
    let npm = "echo 'npm error code SELF_SIGNED_CERT_IN_CHAIN' >&2; echo 'npm error errno SELF_SIGNED_CERT_IN_CHAIN' >&2; \
               echo 'npm error request to https://registry.npmjs.org/x failed, reason: self-signed certificate in \
               certificate chain' >&2; echo 'npm error A complete log of this run can be found in: /tmp/x.log' >&2; \
               exit 1";
    let proxied = json!({"server_name": "proxied", "config": {"command": "sh", "args": ["-c", npm]}});
    let gw = TestGateway::start(&config_with(vec![proxied], json!({})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let found = call(&client, "gw_discover_all_tools", json!({"server_name": "proxied"})).await;
        let message = assert_error(&found, "UPSTREAM_ERROR");
        assert!(message.contains("on stderr: npm error code SELF_SIGNED_CERT_IN_CHAIN"), "{message}");
        assert!(!message.contains("complete log of this run"), "{message}");
        assert!(message.contains("NODE_EXTRA_CA_CERTS") && message.contains("inherit_env"), "{message}");
    });
}

#[test]
fn a_server_that_does_not_start_in_time_fails_at_the_start_timeout() {
    // A "server" that never answers `initialize`: its start is bounded by upstream_pool.start_timeout_seconds (1 s),
    // not by the 20 s discovery timeout nor by connectivity_timeout; the error names the cause and its last stderr line.
    let silent = json!({"server_name": "silent", "config": {"command": "sh",
        "args": ["-c", "echo 'loading the model' >&2; sleep 30"]}});
    let gw = TestGateway::start(&config_with(
        vec![mock_server("mock"), silent],
        json!({"upstream_pool": {"start_timeout_seconds": 1}, "timeout_settings": {"connectivity_timeout": 0.1}}),
    ));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let started = Instant::now();
        let found = call(&client, "gw_discover_all_tools", json!({"server_name": "silent"})).await;
        let elapsed = started.elapsed();
        let message = assert_error(&found, "UPSTREAM_ERROR");
        assert!(message.contains("did not answer `initialize` within 1 seconds"), "{message}");
        assert!(message.contains("its last line on stderr: loading the model"), "{message}");
        assert!(elapsed < Duration::from_secs(5), "discovery waited {elapsed:?}, not the 1 s start timeout");

        let metrics = call(&client, "gw_get_timeout_metrics", json!({})).await;
        assert_eq!(metrics["upstream_starts"]["timeouts"], json!(1), "{metrics}");
        assert_eq!(metrics["upstream_starts"]["start_timeout_seconds"], json!(1.0), "{metrics}");

        // A server that does start is unaffected by the tiny connectivity_timeout (it bounds network connects only).
        let echoed = secure_call_one(&client, "mock", "echo", json!({"text": "still here"})).await;
        assert_eq!(success_text(&echoed, "echo"), "still here");
    });
}
