//! Quotas, usage and the policy simulator (contract 17), from outside: a rate per key matched by CEL refuses the call
//! past it with `QUOTA_EXCEEDED`, `quota` and `retry_after_seconds` (HTTP 429 with `Retry-After` for a stateless
//! single call), counted in `mcpgw_quota_rejections_total`; `GET /api/v1/usage` groups calls, errors and rejections
//! by project, user, server and tool; `POST /api/v1/policy/simulate` and `mcpgw policy test` report exactly the
//! audited calls a proposed rule would change; `mcpgw policy check` compiles rules without a gateway. Two replicas on
//! one Redis share the counters: `tests/scale_out.rs`.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::{ALICE_ID, API_KEY, BOB_ID};
use mcp::*;
use reqwest::Method;
use serde_json::{Value, json};

fn echo(client: &reqwest::blocking::Client, url: &str, key: &str, text: &str) -> Value {
    let body = tools_call_body(1, "gw_secure_call_tools", calls("m", &[("echo", json!({"text": text}))]));
    let session = open_session(client, url, key, "2025-06-18");
    let r =
        post(client, url, Some(key), &[("mcp-session-id", &session), ("mcp-protocol-version", "2025-06-18")], &body);
    assert_eq!(r.status, 200, "{}", r.text);
    answer_of(&r.message["result"])["results"][0].clone()
}

#[test]
fn a_rate_per_key_refuses_the_call_past_it_and_usage_counts_it() {
    let common = json!({"tool_exposure": "both", "quotas": [
        {"name": "echo-per-key", "per": "key", "when": "target.name == 'echo'", "rate": "2/hour"}]});
    let gw = TestGateway::start(&config_with(vec![mock_server("m")], common));
    let client = http();
    assert_eq!(success_text(&echo(&client, &gw.mcp, API_KEY, "one"), "echo"), "one");
    assert_eq!(success_text(&echo(&client, &gw.mcp, API_KEY, "two"), "echo"), "two");
    let over = echo(&client, &gw.mcp, API_KEY, "three");
    assert_error(&over, "QUOTA_EXCEEDED");
    assert_eq!(over["quota"], json!("echo-per-key"), "{over}");
    let wait = over["retry_after_seconds"].as_u64().unwrap();
    assert!((1..=1800).contains(&wait), "{over}");
    // Another key has its own count; a tool the quota does not match is not counted.
    assert_eq!(success_text(&echo(&client, &gw.mcp, KEY_B, "bob"), "echo"), "bob");
    let session = open_session(&client, &gw.mcp, API_KEY, "2025-06-18");
    let body = tools_call_body(2, "m__env", json!({"name": "HOME"}));
    let env = post(&client, &gw.mcp, Some(API_KEY), &[("mcp-session-id", &session)], &body);
    assert_eq!(env.message["result"]["isError"], json!(false), "{}", env.text);

    // A stateless single call over the quota: HTTP 429 with Retry-After, the same answer in the body.
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "m__echo", "arguments": {"text": "x"}, "_meta": stateless_meta()}});
    let r = post(&client, &gw.mcp, Some(API_KEY), &stateless_headers("tools/call", Some("m__echo")), &body);
    assert_eq!(r.status, 429, "{}", r.text);
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    assert_error(&answer_of(&r.message["result"]), "QUOTA_EXCEEDED");
    assert_eq!(metric(&gw, "mcpgw_quota_rejections_total{quota=\"echo-per-key\"}"), 2.0);

    // Usage: by tool, user and project; a dimension that does not exist is refused.
    let usage = |by: &str| admin(&gw, Method::GET, &format!("/api/v1/usage?by={by}&since=1h"), None);
    let tools = usage("tool").ok(200).clone();
    assert_eq!(tools["source"], json!("memory"), "{tools}");
    let echo_row = tools["groups"].as_array().unwrap().iter().find(|g| g["tool"] == json!("echo")).unwrap().clone();
    assert_eq!(
        (&echo_row["server"], &echo_row["calls"], &echo_row["errors"], &echo_row["quota_rejections"]),
        (&json!("m"), &json!(5), &json!(2), &json!(2)),
        "{tools}"
    );
    assert!(echo_row["bytes"].as_u64().unwrap() > 0);
    let users = usage("user").ok(200).clone();
    let calls_of = |id: &str| {
        users["groups"].as_array().unwrap().iter().find(|g| g["user"] == json!(id)).unwrap()["calls"].clone()
    };
    assert_eq!((calls_of(ALICE_ID), calls_of(BOB_ID)), (json!(5), json!(1)), "{users}");
    assert_eq!(usage("project").ok(200)["groups"][0]["calls"], json!(6));
    let refused = usage("team");
    assert_eq!(refused.status, 400, "{}", refused.text);
    let refused = admin(&gw, Method::GET, "/api/v1/usage?since=yesterday", None);
    assert_eq!(refused.status, 400, "{}", refused.text);
}

#[test]
fn the_simulator_reports_exactly_the_audited_calls_a_rule_would_change() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let common = json!({"tool_exposure": "gateway", "audit_log": {"enabled": true, "path": audit.to_str().unwrap()},
                        "policies": [{"name": "no-env", "effect": "deny", "when": "target.name == 'env'"}]});
    let gw = TestGateway::start(&config_with(vec![mock_server("m")], common));
    let client = http();
    for (key, text) in [(API_KEY, "a1"), (KEY_B, "b1"), (API_KEY, "a2")] {
        assert_eq!(success_text(&echo(&client, &gw.mcp, key, text), "echo"), text);
    }
    let session = open_session(&client, &gw.mcp, KEY_B, "2025-06-18");
    let body = tools_call_body(2, "gw_secure_call_tools", calls("m", &[("env", json!({"name": "HOME"}))]));
    post(&client, &gw.mcp, Some(KEY_B), &[("mcp-session-id", &session)], &body);
    let records: Vec<Value> =
        std::fs::read_to_string(&audit).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let seqs_of = |user: &str, tool: &str| -> Vec<Value> {
        records
            .iter()
            .filter(|r| r["user_id"] == json!(user) && r["tool_name"] == json!(tool))
            .map(|r| r["seq"].clone())
            .collect()
    };
    let alice_echoes = seqs_of(ALICE_ID, "echo");
    assert_eq!(alice_echoes.len(), 2);

    // Denying alice's echo changes exactly her two echo calls; a rule on the arguments cannot be replayed.
    let proposal = json!({"policies": [
        {"name": "no-echo-for-alice", "effect": "deny", "when": "target.name == 'echo' && principal.email == 'alice@example.com'"},
        {"name": "no-secret-env", "effect": "deny", "when": "target.name == 'env' && request.args.name == 'SECRET'"}]});
    let simulated = admin(&gw, Method::POST, "/api/v1/policy/simulate", Some(&proposal)).ok(200).clone();
    let changed: Vec<Value> = simulated["changed"].as_array().unwrap().iter().map(|c| c["seq"].clone()).collect();
    assert_eq!(changed, alice_echoes, "{simulated}");
    assert_eq!((&simulated["evaluated"], &simulated["undecided"]), (&json!(3), &json!(1)), "{simulated}");
    let first = &simulated["changed"][0];
    assert_eq!(
        (&first["before"], &first["after"], &first["rule"]),
        (&json!("allow"), &json!("deny"), &json!("no-echo-for-alice"))
    );
    // A quota of one echo per user: the second echo of alice would be refused; nothing else.
    let quota = json!({"policies": [{"name": "no-env", "effect": "deny", "when": "target.name == 'env'"}], "quotas": [{"name": "one-echo", "per": "user", "when": "target.name == 'echo'", "rate": "1/hour"}]});
    let simulated = admin(&gw, Method::POST, "/api/v1/policy/simulate", Some(&quota)).ok(200).clone();
    assert_eq!(simulated["changed"].as_array().unwrap().len(), 1, "{simulated}");
    assert_eq!(
        (&simulated["changed"][0]["seq"], &simulated["changed"][0]["after"]),
        (&alice_echoes[1], &json!("quota_exceeded"))
    );
    // No rules at all: only bob's env call, denied when made, would change.
    let none = admin(&gw, Method::POST, "/api/v1/policy/simulate", Some(&json!({"policies": []}))).ok(200).clone();
    let env_seq = seqs_of(BOB_ID, "env");
    assert_eq!(none["changed"].as_array().unwrap().len(), 1, "{none}");
    let change = &none["changed"][0];
    assert_eq!((&change["seq"], &change["before"], &change["after"]), (&env_seq[0], &json!("deny"), &json!("allow")));
    // A proposal that does not compile is refused, named; nothing changed in the gateway.
    let broken = admin(
        &gw,
        Method::POST,
        "/api/v1/policy/simulate",
        Some(&json!({"policies": [{"name": "b", "effect": "deny", "when": "target.name =="}]})),
    );
    assert_eq!(broken.status, 400, "{}", broken.text);
    assert!(
        broken.text.contains("(\\\"b\\\").when: does not compile") || broken.text.contains("(\"b\").when"),
        "{}",
        broken.text
    );
    assert_eq!(success_text(&echo(&client, &gw.mcp, API_KEY, "still"), "echo"), "still");

    // The command line: `policy test` on the config file gives the same answer; `policy check` compiles or names.
    let rules = dir.path().join("rules.json");
    common::write_json(&rules, &proposal);
    let config = gw.config_path().to_str().unwrap().to_string();
    let (status, out, err) = common::run_cli(
        &["policy", "test", rules.to_str().unwrap(), "--config", &config, "--json", "--last", "4"],
        &[],
    );
    assert!(status.success(), "{err}");
    let from_cli: Value = serde_json::from_str(&out).unwrap();
    let cli_changed: Vec<Value> = from_cli["changed"].as_array().unwrap().iter().map(|c| c["seq"].clone()).collect();
    // The last 4 calls: bob's echo, alice's second, bob's env and alice's echo after the simulations.
    let still = std::fs::read_to_string(&audit).unwrap().lines().filter(|l| l.contains("\"tool_call\"")).count();
    assert_eq!(still, 5);
    assert_eq!(cli_changed.len(), 2, "{out}");
    assert_eq!(cli_changed[0], alice_echoes[1], "{out}");
    let (status, out, _) = common::run_cli(&["policy", "check", rules.to_str().unwrap()], &[]);
    assert!(status.success() && out.contains("2 rules and 0 quotas compile"), "{out}");
    common::write_json(
        &rules,
        &json!({"policies": [{"name": "x", "effect": "deny", "when": "user.id == 1"}],
        "quotas": [{"name": "q", "per": "team", "rate": "1/minute"}]}),
    );
    let (status, _, err) = common::run_cli(&["policy", "check", rules.to_str().unwrap()], &[]);
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("(\"x\").when: names the unknown variable \"user\"") && err.contains("(\"q\").per: must be"),
        "{err}"
    );
}

#[test]
fn with_redis_unreachable_quotas_still_hold_in_the_replica() {
    // The external cache points at a port nothing listens on: the counters fall back to this process's.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let common = json!({"tool_exposure": "gateway", "gw_mcp_use_external_cache": true, "gw_cache_host": "127.0.0.1",
                        "gw_cache_port": dead, "quotas": [{"name": "two", "per": "user", "rate": "2/hour"}]});
    let gw = TestGateway::start(&config_with(vec![mock_server("m")], common));
    let client = http();
    assert_eq!(success_text(&echo(&client, &gw.mcp, API_KEY, "one"), "echo"), "one");
    assert_eq!(success_text(&echo(&client, &gw.mcp, API_KEY, "two"), "echo"), "two");
    assert_error(&echo(&client, &gw.mcp, API_KEY, "three"), "QUOTA_EXCEEDED");
    assert!(gw.gw.logs().contains("quota and usage counters (redis) unreachable"), "{}", gw.gw.logs());
    // The health report says so too, naming where and what the replica does meanwhile.
    let health = gw.gw.system_health();
    assert_eq!(health["status"], json!("degraded"), "{health}");
    let reason = format!(
        "quota and usage counters (redis at 127.0.0.1:{dead}) unreachable; counting in this process (quotas hold per \
         replica) until it answers again"
    );
    assert!(health["degraded_reasons"].as_array().is_some_and(|r| r.contains(&json!(reason))), "{health}");
}
