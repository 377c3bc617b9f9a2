//! The shared cache (Redis) from outside: real `mcpgw` processes sharing one real `redis-server` started by the test
//! on a free port. Two gateways share discovered tools and a `gw_clear_cache` on one reaches the other; a Redis that
//! goes away leaves calls working from the local cache, the health report degraded and the cache status unreachable
//! with errors counted; Redis coming back on the same port makes the gateway healthy and use the shared cache again;
//! and nothing in Redis ever holds the API key, an env secret of a server entry or the Redis password.
//!
//! `redis-server` must be installed (`apt-get install -y redis-server`; `.ci/run` installs it): without it these
//! tests fail and say so, they never pass silently.

mod common;
#[path = "common/mcp.rs"]
mod mcp;
#[path = "common/redis.rs"]
mod redis_server;

use std::time::{Duration, Instant};

use common::{ADMIN_KEY, API_KEY, CONFIG_ID, ENV_SECRET};
use mcp::*;
use redis_server::{RedisServer, free_port};
use serde_json::{Value, json};

const PASSWORD: &str = "redis-test-password-0123456789";

/// Nothing in Redis is a secret: no API key, no env value, no admin key, no Redis password.
fn assert_no_secrets(redis: &RedisServer) {
    let dump = redis.dump();
    for (key, value) in &dump {
        // The shared cache's keys, and the usage counters' (flushed once a second, docs/admin-api.md).
        let namespaced = ["mcpgw:v1:", "mcpgw:usage:"].iter().any(|prefix| key.starts_with(prefix));
        assert!(namespaced, "a key outside the namespaces: {key}");
        for secret in [API_KEY, ENV_SECRET, ADMIN_KEY, PASSWORD] {
            assert!(!key.contains(secret) && !value.contains(secret), "a secret in Redis under {key}: {value}");
        }
    }
}

/// The mock upstream with an env secret, behind the external cache at `port`.
fn shared_config(port: u16, password: Option<&str>) -> Value {
    let mut mock = mock_server("mock");
    mock["config"]["env"] = json!({"TOKEN": ENV_SECRET});
    let common = json!({
        "gw_mcp_use_external_cache": true,
        "gw_cache_host": "127.0.0.1",
        "gw_cache_port": port,
        "gw_cache_db": 0,
        "gw_cache_password": password,
        "timeout_settings": {"cache_timeout": 1},
    });
    config_with(vec![mock], common)
}

async fn discover(client: &McpClient) -> Value {
    let found = call(client, "gw_discover_all_tools", json!({"server_name": "mock"})).await;
    assert_eq!(found["status"], json!("success"), "{found}");
    found
}

#[test]
fn two_gateways_share_discovered_tools_and_a_clear_on_one_reaches_the_other() {
    let redis = RedisServer::start(free_port(), Some(PASSWORD));
    let config = shared_config(redis.port, Some(PASSWORD));
    let a = TestGateway::start(&config);
    let b = TestGateway::start(&config);
    let tools_key = format!("mcpgw:v1:tools:{CONFIG_ID}:mock");
    let rt = runtime();
    rt.block_on(async {
        let on_a = connect(&a.mcp, API_KEY).await;
        let on_b = connect(&b.mcp, API_KEY).await;
        let first = discover(&on_a).await;
        assert_eq!(first["source"], json!("discovery"), "{first}");
        let shared = discover(&on_b).await;
        assert_eq!(shared["source"], json!("cache"), "B's local cache is empty; the tools come from Redis: {shared}");
        assert_eq!(sorted_tool_names(&shared), sorted_tool_names(&first));

        let status = call(&on_b, "gw_get_cache_status", json!({})).await;
        assert_eq!(status["cache_type"], json!("external"), "{status}");
        assert_eq!(status["tool_cache"]["hits"], json!(1), "a shared hit counts as a hit: {status}");
        let external = &status["external"];
        assert_eq!(external["reachable"], json!(true), "{status}");
        assert_eq!(external["host"], json!("127.0.0.1"), "{status}");
        assert_eq!(external["port"], json!(redis.port), "{status}");
        assert_eq!(external["db"], json!(0), "{status}");
        assert!(external["errors"].is_u64(), "{status}");
        assert!(!status.to_string().contains(PASSWORD), "the password is never reported: {status}");

        let cleared = call(&on_a, "gw_clear_cache", json!({"server_name": "mock"})).await;
        assert_eq!(cleared["external_cleared"]["tools"], json!(1), "{cleared}");
        let again = discover(&on_b).await;
        assert_eq!(again["source"], json!("discovery"), "cleared on A, so B discovers live: {again}");
        let from_b = discover(&on_a).await;
        assert_eq!(from_b["source"], json!("cache"), "A now gets what B discovered: {from_b}");

        let all = call(&on_b, "gw_clear_cache", json!({"cache_type": "all"})).await;
        assert_eq!(all["external_cleared"]["tools"], json!(1), "{all}");
        assert_eq!(discover(&on_a).await["source"], json!("discovery"));
        on_a.cancel().await.unwrap();
        on_b.cancel().await.unwrap();
    });
    let ttl = redis.ttl_ms(&tools_key);
    assert!(ttl > 3 * 3600 * 1000 && ttl <= 4 * 3600 * 1000, "lifetime gw_tool_cache_expiration (4 h): {ttl} ms");
    assert_no_secrets(&redis);
    for gw in [&a, &b] {
        assert!(!gw.logs().contains(PASSWORD), "the password is never logged");
        assert_eq!(gw.gw.system_health()["status"], json!("healthy"));
    }
}

#[test]
fn a_redis_outage_falls_back_to_the_local_cache_degrades_health_and_recovers() {
    let port = free_port();
    let mut redis = RedisServer::start(port, None);
    let gw = TestGateway::start(&shared_config(port, None));
    let rt = runtime();
    let client = rt.block_on(connect(&gw.mcp, API_KEY));
    rt.block_on(async {
        assert_eq!(discover(&client).await["source"], json!("discovery"));
        assert_eq!(discover(&client).await["source"], json!("cache"));
    });
    let health = gw.gw.system_health();
    assert_eq!(health["status"], json!("healthy"), "{health}");
    assert_eq!(health["external_cache"]["reachable"], json!(true), "{health}");

    redis.stop();
    rt.block_on(async {
        for _ in 0..3 {
            let started = Instant::now();
            let found = discover(&client).await;
            assert_eq!(found["source"], json!("cache"), "the local cache answers while Redis is down: {found}");
            assert!(started.elapsed() < Duration::from_secs(3), "a down Redis must not stall calls");
        }
        let echoed = secure_call_one(&client, "mock", "echo", json!({"text": "still here"})).await;
        assert_eq!(echoed["status"], json!("success"), "{echoed}");
        let status = call(&client, "gw_get_cache_status", json!({})).await;
        assert_eq!(status["external"]["reachable"], json!(false), "{status}");
        assert!(status["external"]["errors"].as_u64().unwrap() > 0, "{status}");
    });
    let reason = format!("external cache (redis at 127.0.0.1:{port}) unreachable");
    let health = gw.gw.system_health();
    assert_eq!(health["status"], json!("degraded"), "{health}");
    let reasons = health["degraded_reasons"].as_array().cloned().unwrap_or_default();
    assert!(reasons.contains(&json!(reason)), "{health}");
    let metrics = gw.gw.metrics_get("/metrics").text;
    let errors = metrics
        .lines()
        .find_map(|l| l.strip_prefix("mcpgw_cache_errors_total{cache=\"external\"} "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert!(errors.is_some_and(|e| e >= 1.0), "Redis errors are counted in the metrics:\n{metrics}");
    let logs = gw.logs();
    let warnings = logs.lines().filter(|l| l.contains("external cache (redis) unreachable")).count();
    assert_eq!(warnings, 1, "one warning per outage, not one per call:\n{logs}");

    let redis = RedisServer::start(port, None);
    let deadline = Instant::now() + Duration::from_secs(10);
    while gw.gw.system_health()["status"] != json!("healthy") {
        assert!(Instant::now() < deadline, "health did not turn healthy again: {}", gw.gw.system_health());
        std::thread::sleep(Duration::from_millis(100));
    }
    rt.block_on(async {
        let status = call(&client, "gw_get_cache_status", json!({})).await;
        assert_eq!(status["external"]["reachable"], json!(true), "{status}");
        // The restarted Redis is empty and is the authority again: live discovery, shared, then a shared hit.
        assert_eq!(discover(&client).await["source"], json!("discovery"));
        assert_eq!(discover(&client).await["source"], json!("cache"));
        client.cancel().await.unwrap();
    });
    // The shared cache's keys (the usage counters may have been flushed to the restarted Redis too).
    let keys: Vec<String> = redis.dump().into_iter().map(|(k, _)| k).filter(|k| k.starts_with("mcpgw:v1:")).collect();
    assert_eq!(keys, [format!("mcpgw:v1:tools:{CONFIG_ID}:mock")], "the shared cache is used again");
    assert_no_secrets(&redis);
}
