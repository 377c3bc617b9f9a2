//! Contract 13, "Tenants stay apart", from outside: `gw_get_cache_status` reports only the caller's configuration's
//! entries and counts, and `gw_clear_cache` clears only them, so a key of one project can neither see another
//! project's cache traffic nor drop its cached tools and identities. Contract 14: `gw_get_timeout_metrics` counts
//! only the caller's configuration's operations, so another project's calls and timeouts are not seen either.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::API_KEY;
use mcp::*;
use serde_json::json;

#[test]
fn a_key_sees_and_clears_only_its_own_configurations_cache() {
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], json!({})));
    runtime().block_on(async {
        let alpha = connect(&gw.mcp, API_KEY).await;
        let first = call(&alpha, "gw_discover_all_tools", json!({"server_name": "mock"})).await;
        assert_eq!(first["source"], json!("discovery"), "{first}");
        assert_eq!(
            call(&alpha, "gw_discover_all_tools", json!({"server_name": "mock"})).await["source"],
            json!("cache")
        );

        // Beta's configuration has no servers and beta has done nothing with the tool cache.
        let beta = connect(&gw.mcp, BETA_KEY).await;
        let status = call(&beta, "gw_get_cache_status", json!({})).await;
        assert_eq!(status["tool_cache"]["entries"], json!(0), "alpha's cached tools are not beta's: {status}");
        assert_eq!(status["tool_cache"]["hits"], json!(0), "nor are alpha's hits: {status}");
        assert_eq!(status["tool_cache"]["misses"], json!(0), "{status}");
        assert_eq!(status["config_cache"]["entries"], json!(1), "beta's own identity only: {status}");

        let cleared = call(&beta, "gw_clear_cache", json!({})).await;
        assert_eq!(cleared["status"], json!("success"), "{cleared}");
        assert_eq!(cleared["cleared"]["tools"], json!(0), "{cleared}");
        assert_eq!(cleared["cleared"]["gateway_config"], json!(1), "beta's own identity: {cleared}");

        // Alpha's entries survived beta's clear.
        let mine = call(&alpha, "gw_get_cache_status", json!({})).await;
        assert_eq!(mine["tool_cache"]["entries"], json!(1), "{mine}");
        assert!(mine["tool_cache"]["hits"].as_u64().unwrap_or(0) >= 1, "{mine}");
        assert!(mine["config_cache"]["entries"].as_u64().unwrap_or(0) >= 1, "{mine}");
        let again = call(&alpha, "gw_discover_all_tools", json!({"server_name": "mock"})).await;
        assert_eq!(again["source"], json!("cache"), "beta's clear did not reach alpha: {again}");

        // Alpha's own clear still clears alpha's.
        call(&alpha, "gw_clear_cache", json!({})).await;
        let after = call(&alpha, "gw_discover_all_tools", json!({"server_name": "mock"})).await;
        assert_eq!(after["source"], json!("discovery"), "{after}");
        alpha.cancel().await.unwrap();
        beta.cancel().await.unwrap();
    });
}

#[test]
fn a_key_sees_only_its_own_configurations_timeout_metrics() {
    let common = json!({"timeout_settings": {"tool_execution_timeout": 1}});
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], common));
    runtime().block_on(async {
        let alpha = connect(&gw.mcp, API_KEY).await;
        let calls = calls("mock", &[("echo", json!({"text": "hi"})), ("slow", json!({"ms": 5000}))]);
        let answer = call(&alpha, "gw_secure_call_tools", calls).await;
        assert_eq!(answer["results"][1]["error_code"], json!("TIMEOUT"), "{answer}");
        let mine = call(&alpha, "gw_get_timeout_metrics", json!({})).await;
        let tool = &mine["timeout_metrics"]["by_kind"]["tool_execution"];
        assert_eq!(tool["total_operations"], json!(2), "{mine}");
        assert_eq!(tool["timeout_operations"], json!(1), "{mine}");
        assert!(mine["timeout_metrics"]["by_kind"]["discovery"]["total_operations"].as_u64() >= Some(1), "{mine}");

        // Beta's configuration has no servers: none of alpha's calls, discoveries or timeouts are beta's.
        let beta = connect(&gw.mcp, BETA_KEY).await;
        let theirs = call(&beta, "gw_get_timeout_metrics", json!({})).await;
        let m = &theirs["timeout_metrics"];
        assert_eq!(m["timeout_operations"], json!(0), "{theirs}");
        for kind in ["tool_execution", "discovery", "guardrail", "cache"] {
            assert_eq!(m["by_kind"][kind]["total_operations"], json!(0), "{kind}: {theirs}");
        }
        // Alpha's counts did not move for beta's requests.
        let again = call(&alpha, "gw_get_timeout_metrics", json!({})).await;
        assert_eq!(again["timeout_metrics"]["by_kind"]["tool_execution"], *tool, "{again}");
        alpha.cancel().await.unwrap();
        beta.cancel().await.unwrap();
    });
}
