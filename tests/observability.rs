//! Metrics, logs and rate limits from outside (issue 5): `/metrics` parsed with a Prometheus text parser and checked
//! to count real calls; JSON log lines parsed and searched for secrets and for the spec 2.7 fields; per-key rate
//! limits with 429, `Retry-After` and `RATE_LIMITED`, changed by a config edit without a restart.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::time::Duration;

use common::{
    ALICE, ALICE_ID, API_KEY, CONFIG_ID, ENV_SECRET, PROJECT_ID, RELOAD_DEADLINE, read_json, replace_json, wait_until,
};
use mcp::*;
use prometheus_parse::{Scrape, Value as Sample};
use serde_json::{Value, json};

/// The mock upstream with a secret in its environment.
fn mock_with_secret() -> Value {
    let mut server = mock_server("mock");
    server["config"]["env"] = json!({"API_TOKEN": ENV_SECRET});
    server
}

fn scrape(gw: &TestGateway) -> (Scrape, String) {
    let r = gw.gw.metrics_get("/metrics");
    assert_eq!(r.status, 200, "{}", r.text);
    let lines = r.text.lines().map(|l| Ok(l.to_string()));
    (Scrape::parse(lines).expect("Prometheus text format"), r.text)
}

/// The value of the sample `name` whose labels include `labels` (0 when there is none).
fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => *v,
            Sample::Histogram(buckets) => buckets.iter().map(|b| b.count).fold(0.0, f64::max),
            Sample::Summary(_) => 0.0,
        })
        .sum()
}

#[test]
fn metrics_count_real_calls_with_bounded_labels() {
    let gw = TestGateway::start(&config_with(vec![mock_with_secret()], json!({})));
    let rt = runtime();
    rt.block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let crash = call(&client, "gw_secure_call_tools", calls("mock", &[("crash", json!({}))])).await;
        assert_eq!(crash["results"][0]["error_code"], json!("UPSTREAM_ERROR"), "{crash}");
        for text in ["one", "two", "three"] {
            let result = secure_call_one(&client, "mock", "echo", json!({"text": text})).await;
            assert_eq!(upstream_text(&result["response"]), text);
        }
        let missing = call(&client, "gw_get_server_info", json!({"server_name": "nope"})).await;
        assert_error(&missing, "SERVER_NOT_FOUND");
        call(&client, "gw_discover_all_tools", json!({"server_name": "mock"})).await;
        client.cancel().await.unwrap();
    });
    let (metrics, text) = scrape(&gw);
    let secure = [("tool", "gw_secure_call_tools"), ("outcome", "success")];
    assert_eq!(value(&metrics, "mcpgw_tool_calls_total", &secure), 4.0, "{text}");
    let missing = [("tool", "gw_get_server_info"), ("outcome", "SERVER_NOT_FOUND")];
    assert_eq!(value(&metrics, "mcpgw_tool_calls_total", &missing), 1.0, "{text}");
    assert_eq!(value(&metrics, "mcpgw_upstream_calls_total", &[("outcome", "success")]), 3.0, "{text}");
    assert_eq!(value(&metrics, "mcpgw_upstream_calls_total", &[("outcome", "UPSTREAM_ERROR")]), 1.0, "{text}");
    let count = value(&metrics, "mcpgw_tool_call_duration_seconds_count", &[("tool", "gw_secure_call_tools")]);
    assert_eq!(count, 4.0, "{text}");
    // initialize, initialized, six tool calls, the closing DELETE: all counted by method and status.
    let posts = value(&metrics, "mcpgw_requests_total", &[("transport", "http"), ("method", "POST")]);
    assert!(posts >= 8.0, "{posts} POSTs counted:\n{text}");
    assert!(value(&metrics, "mcpgw_request_duration_seconds_count", &[("transport", "http")]) >= 8.0, "{text}");
    // The first secure call missed the tool cache (live discovery); the later ones hit it.
    assert!(value(&metrics, "mcpgw_cache_misses_total", &[("cache", "tools")]) >= 1.0, "{text}");
    assert!(value(&metrics, "mcpgw_cache_hits_total", &[("cache", "tools")]) >= 3.0, "{text}");
    assert_eq!(value(&metrics, "mcpgw_upstream_processes", &[]), 1.0, "the crashed process was replaced:\n{text}");
    assert_eq!(value(&metrics, "mcpgw_upstream_starts_total", &[]), 2.0, "{text}");
    assert_eq!(value(&metrics, "mcpgw_upstream_restarts_total", &[]), 1.0, "the crash is a restart:\n{text}");
    assert_eq!(value(&metrics, "mcpgw_rate_limited_total", &[]), 0.0, "{text}");
    assert!(text.contains("# TYPE mcpgw_guardrail_blocks_total counter"), "{text}");
    for secret in [API_KEY, ALICE_ID, ALICE, ENV_SECRET, "one", "three"] {
        assert!(!text.contains(secret), "the metrics contain {secret:?}:\n{text}");
    }
}

/// The gateway's JSON log records.
fn records(gw: &TestGateway) -> Vec<Value> {
    gw.logs()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line}")))
        .collect()
}

#[test]
fn logs_are_json_lines_with_the_spec_fields_and_no_secrets() {
    let gw = TestGateway::start(&config_with(vec![mock_with_secret()], json!({"gw_log_level": "INFO"})));
    let rt = runtime();
    rt.block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        secure_call_one(&client, "mock", "env", json!({"name": "API_TOKEN"})).await;
        client.cancel().await.unwrap();
    });
    let found = wait_until(Duration::from_secs(5), || records(&gw).iter().any(|r| r["message"] == json!("tool call")));
    assert!(found, "no tool call record:\n{}", gw.logs());
    let all = records(&gw);
    for record in &all {
        for field in ["timestamp", "level", "message", "service_name"] {
            assert!(record.get(field).is_some(), "{field} missing: {record}");
        }
        assert!(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"].contains(&record["level"].as_str().unwrap_or("")));
    }
    let record = all.iter().find(|r| r["message"] == json!("tool call")).unwrap();
    assert_eq!(record["tool_name"], json!("gw_secure_call_tools"), "{record}");
    assert_eq!(record["server_name"], json!("mock"), "{record}");
    assert_eq!(record["project_id"], json!(PROJECT_ID), "{record}");
    assert_eq!(record["project_name"], json!("alpha"), "{record}");
    assert_eq!(record["user_id"], json!(ALICE_ID), "{record}");
    assert_eq!(record["mcp_config_id"], json!(CONFIG_ID), "{record}");
    assert_eq!(record["success"], json!(true), "{record}");
    assert!(record["duration_ms"].is_u64(), "{record}");
    assert_eq!(record["email"], json!("a***@example.com"), "the e-mail is masked: {record}");
    let custom_id = record["custom_id"].as_str().unwrap_or_default();
    let (head, time) = custom_id.split_once('_').unwrap_or_default();
    assert!(head.len() == 34 && time.parse::<u64>().is_ok(), "custom_id {custom_id:?}");
    let upstream = all.iter().find(|r| r["message"] == json!("upstream tool call")).expect("an upstream call record");
    assert_eq!((&upstream["server_name"], &upstream["tool_name"]), (&json!("mock"), &json!("env")), "{upstream}");
    let logs = gw.logs();
    // The env tool answered the secret to the client; it never reaches a log line, nor does the key.
    for secret in [API_KEY, ENV_SECRET, ALICE] {
        assert!(!logs.contains(secret), "the logs contain {secret:?}:\n{logs}");
    }

    // A reload to WARNING silences the INFO records.
    let mut config = read_json(gw.config_path());
    config["common_mcp_gateway_config"]["gw_log_level"] = json!("WARNING");
    replace_json(gw.config_path(), &config);
    let reloaded = wait_until(RELOAD_DEADLINE, || {
        let before = records(&gw).len();
        rt.block_on(async {
            let client = connect(&gw.mcp, API_KEY).await;
            call(&client, "gw_get_cache_status", json!({})).await;
            client.cancel().await.unwrap();
        });
        let after = records(&gw);
        !after[before..].iter().any(|r| r["message"] == json!("tool call"))
    });
    assert!(reloaded, "INFO records still written after the level went to WARNING:\n{}", gw.logs());
}

/// Log records and spans are held back while a worker has work and written together (telemetry/log_output.rs): under
/// concurrent calls every record still arrives, whole, on a line of its own, spans included.
#[test]
fn records_of_concurrent_calls_arrive_whole_with_their_spans() {
    let mut config = config_with(vec![mock_server("mock")], json!({"gw_log_level": "INFO"}));
    config["plugins"]["telemetry"] = json!({"provider": "stdout", "config": {"enabled": true}});
    let gw = TestGateway::start_with(&config, &[("OTEL_BSP_SCHEDULE_DELAY", "100")]);
    const CLIENTS: usize = 4;
    const CALLS: usize = 25;
    let rt = runtime();
    rt.block_on(async {
        let mut calls = tokio::task::JoinSet::new();
        for c in 0..CLIENTS {
            let url = gw.mcp.clone();
            calls.spawn(async move {
                let client = connect(&url, API_KEY).await;
                for n in 0..CALLS {
                    let text = format!("call {c}-{n} \"quoted\"\n");
                    secure_call_one(&client, "mock", "echo", json!({"text": text})).await;
                }
                client.cancel().await.unwrap();
            });
        }
        calls.join_all().await;
    });
    let count = |message: &str| records(&gw).iter().filter(|r| r["message"] == json!(message)).count();
    let spans = |name: &str| {
        records(&gw).iter().filter(|r| r["message"] == json!("span") && r["span_name"] == json!(name)).count()
    };
    let all = CLIENTS * CALLS;
    let arrived = wait_until(Duration::from_secs(10), || {
        count("tool call") == all && count("upstream tool call") == all && spans("tool_execution") == all
    });
    assert!(arrived, "records missing:\n{}", gw.logs());
    // `records` parses every line: none is cut or joined to another.
    for record in records(&gw).iter().filter(|r| r["message"] == json!("tool call")) {
        assert_eq!(record["success"], json!(true), "{record}");
        assert_eq!(record["email"], json!("a***@example.com"), "{record}");
    }
    assert_eq!(spans("gw_tool_call"), all, "{}", gw.logs());
}

/// A stateless `gw_get_cache_status` call (one request, no session).
#[test]
fn a_request_answered_with_an_error_logs_no_warning() {
    let gw = TestGateway::start(&config_with(vec![mock_with_secret()], json!({"gw_log_level": "INFO"})));
    let client = http();
    let session = open_session(&client, &gw.mcp, API_KEY, "2025-11-25");
    let headers = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", "2025-11-25")];
    // The Inspector probes prompts/list of a gateway-mode session: -32601, the client's business only.
    let probe = json!({"jsonrpc": "2.0", "id": 5, "method": "prompts/list", "params": {}});
    let answer = post(&client, &gw.mcp, Some(API_KEY), &headers, &probe);
    assert_eq!(answer.message["error"]["code"], json!(-32601), "{}", answer.text);
    // A request after it, so that anything logged for the probe has been written.
    let ping = json!({"jsonrpc": "2.0", "id": 6, "method": "ping"});
    assert_eq!(post(&client, &gw.mcp, Some(API_KEY), &headers, &ping).status, 200);
    let warnings: Vec<Value> = records(&gw).into_iter().filter(|r| r["level"] == json!("WARNING")).collect();
    assert!(warnings.is_empty(), "{warnings:?}");
}

fn rpc_post(gw: &TestGateway, key: &str) -> Rpc {
    let mut body = tools_call_body(7, "gw_get_cache_status", json!({}));
    body["params"]["_meta"] = stateless_meta();
    post(&http(), &gw.mcp, Some(key), &stateless_headers("tools/call", Some("gw_get_cache_status")), &body)
}

#[test]
fn rate_limits_are_per_key_answer_429_and_follow_reloads() {
    let limits = json!({"rate_limits": {"per_key_requests_per_second": 0.2, "burst": 2}});
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], limits));
    assert_eq!(rpc_post(&gw, API_KEY).status, 200);
    assert_eq!(rpc_post(&gw, API_KEY).status, 200);
    let limited = rpc_post(&gw, API_KEY);
    assert_eq!(limited.status, 429, "{}", limited.text);
    let retry: u64 = limited.header("retry-after").and_then(|v| v.parse().ok()).expect("Retry-After in seconds");
    assert!((1..=5).contains(&retry), "Retry-After {retry}");
    let data = &limited.message["error"]["data"];
    assert_eq!(data["status"], json!("error"), "{}", limited.text);
    assert_eq!(data["error_code"], json!("RATE_LIMITED"), "{}", limited.text);
    assert!(data["message"].is_string(), "{}", limited.text);
    // Another key of the same project is not limited by alice's traffic.
    assert_eq!(rpc_post(&gw, KEY_B).status, 200);
    let (metrics, text) = scrape(&gw);
    assert_eq!(value(&metrics, "mcpgw_rate_limited_total", &[]), 1.0, "{text}");
    assert_eq!(value(&metrics, "mcpgw_requests_total", &[("status", "429")]), 1.0, "{text}");

    // Lifting the limit in the file takes effect without a restart.
    let mut config = read_json(gw.config_path());
    config["common_mcp_gateway_config"]["rate_limits"] = json!({"per_key_requests_per_second": 0, "burst": 0});
    replace_json(gw.config_path(), &config);
    assert!(wait_until(RELOAD_DEADLINE, || rpc_post(&gw, API_KEY).status == 200), "the limit stayed after the reload");
    for _ in 0..20 {
        assert_eq!(rpc_post(&gw, API_KEY).status, 200);
    }
}

#[test]
fn rate_limits_apply_over_stdio_too() {
    let limits = json!({"rate_limits": {"per_key_requests_per_second": 0.2, "burst": 1}});
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.json");
    common::write_json(&path, &config_with(vec![mock_server("mock")], limits));
    let rt = runtime();
    rt.block_on(async {
        let (client, _stderr) = connect_stdio(stdio_command(&path, &[("GW_GATEWAY_KEY", API_KEY)])).await;
        let first = call(&client, "gw_get_cache_status", json!({})).await;
        assert_eq!(first["status"], json!("success"), "{first}");
        let second = call(&client, "gw_get_cache_status", json!({})).await;
        assert_error(&second, "RATE_LIMITED");
        client.cancel().await.unwrap();
    });
}
