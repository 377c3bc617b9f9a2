//! Contract 13, "One request's size of work" and "Rate limits count calls", from outside: a batch over
//! `max_calls_per_request` runs none of its calls (`TOO_MANY_CALLS`); once the results of one request reach
//! `max_response_bytes` the calls left are not run (`RESPONSE_TOO_LARGE`); a batch takes one rate-limit token per
//! call besides the request's own, so a key limited to a few requests a second cannot run thousands of calls with one
//! request (HTTP 429 `RATE_LIMITED`, nothing run); stdio follows the same budget.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::API_KEY;
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
