//! The audit log and the gateway-wide rules through the admin API, from outside: `GET /api/v1/audit` finds the calls
//! made through the gateway by user, project, tool, event, outcome and time, newest first, at most `limit`, with the
//! count of every match, and refuses a parameter it cannot read, naming it; `GET /api/v1/audit/verify` holds on the
//! live file, leaves a record still being written for later, and names the first record an edit broke;
//! `GET /api/v1/policy` shows the configured rules, a `PUT` that does not compile is refused naming the rule and
//! leaves the file as it was, and one that compiles is applied to the next call at once.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::io::Write;

use common::{ALICE, ALICE_ID, API_KEY, PROJECT_NAME};
use mcp::*;
use reqwest::Method;
use serde_json::{Value, json};

fn get(gw: &TestGateway, path: &str) -> common::Resp {
    admin(gw, Method::GET, path, None)
}

/// The records of `GET /api/v1/audit?{query}`, with `matched`.
fn search(gw: &TestGateway, query: &str) -> (Vec<Value>, u64) {
    let answer = get(gw, &format!("/api/v1/audit?{query}"));
    let data = answer.ok(200);
    (data["records"].as_array().unwrap().clone(), data["matched"].as_u64().unwrap())
}

fn seqs(records: &[Value]) -> Vec<u64> {
    records.iter().map(|r| r["seq"].as_u64().unwrap()).collect()
}

/// One `gw_secure_call_tools` item of server `m` as `key`, in a session of its own: the item's result.
async fn call_one(gw: &TestGateway, key: &str, tool: &str, args: Value) -> Value {
    let client = connect(&gw.mcp, key).await;
    let answer = call(&client, "gw_secure_call_tools", calls("m", &[(tool, args)])).await;
    client.cancel().await.unwrap();
    answer["results"][0].clone()
}

#[test]
fn the_audit_log_is_searched_and_verified_and_the_rules_are_read_and_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let rules = json!([{"name": "no-add", "effect": "deny", "when": "target.name == 'add'"}]);
    let quotas = json!([{"name": "echo-per-key", "per": "key", "when": "target.name == 'echo'", "rate": "100/hour"}]);
    // With its key: a file without one gets it written by the gateway, a change this test does not want.
    let audit = json!({"enabled": true, "path": path.to_str().unwrap(), "hmac_key": "k".repeat(43)});
    let common = json!({"audit_log": audit,
                        "policies": rules, "policy_default": "allow", "quotas": quotas});
    let gw = TestGateway::start(&config_with(vec![mock_server("m")], common));
    let rt = runtime();

    // Three calls: Alice's echo, Alice's add (denied by a rule), Bob's echo.
    rt.block_on(async {
        assert_eq!(call_one(&gw, API_KEY, "echo", json!({"text": "one"})).await["status"], json!("success"));
        assert_error(&call_one(&gw, API_KEY, "add", json!({"a": 1, "b": 2})).await, "POLICY_DENIED");
        assert_eq!(call_one(&gw, KEY_B, "echo", json!({"text": "two"})).await["status"], json!("success"));
    });

    // Every call, newest first, with the path of the file.
    let answer = get(&gw, "/api/v1/audit?event=tool_call");
    let data = answer.ok(200);
    assert_eq!(data["path"], json!(path.to_str().unwrap()));
    assert_eq!(data["matched"], json!(3), "{data}");
    assert!(data["scanned"].as_u64().unwrap() >= 3, "{data}");
    let calls = data["records"].as_array().unwrap().clone();
    let order = seqs(&calls);
    assert!(order.windows(2).all(|w| w[0] > w[1]), "newest first: {order:?}");
    let tools: Vec<&str> = calls.iter().map(|r| r["tool_name"].as_str().unwrap()).collect();
    assert_eq!(tools, ["echo", "add", "echo"]);
    assert_eq!(calls[0]["user_id"], json!(common::BOB_ID));
    let (bob_echo, alice_add, alice_echo) = (&calls[0], &calls[1], &calls[2]);

    // By user (id or e-mail), project (id or name), server, tool and outcome.
    for user in [ALICE, ALICE_ID] {
        let (found, matched) = search(&gw, &format!("event=tool_call&user={user}"));
        assert_eq!((seqs(&found), matched), (vec![alice_add["seq"].as_u64().unwrap(), seqs(&calls)[2]], 2), "{user}");
    }
    for project in [PROJECT_NAME, common::PROJECT_ID] {
        assert_eq!(search(&gw, &format!("event=tool_call&project={project}")).1, 3, "{project}");
    }
    assert_eq!(search(&gw, "event=tool_call&server=m").1, 3);
    assert_eq!(search(&gw, "server=other").1, 0);
    let (added, matched) = search(&gw, "tool=add");
    assert_eq!((matched, &added[0]["error_code"]), (1, &json!("POLICY_DENIED")), "{added:?}");
    assert_eq!(added[0]["policy_rule"], json!("no-add"));
    for outcome in ["error", "POLICY_DENIED"] {
        let (refused, matched) = search(&gw, &format!("event=tool_call&outcome={outcome}"));
        assert_eq!((matched, &refused[0]["seq"]), (1, &alice_add["seq"]), "{outcome}");
    }
    assert_eq!(search(&gw, "event=tool_call&outcome=success").1, 2);
    assert_eq!(search(&gw, "outcome=GUARDRAIL_VIOLATION").1, 0);

    // `limit` keeps the newest, and the reading stops there: the rest of the file is not read.
    let (newest, matched) = search(&gw, "event=tool_call&limit=1");
    assert_eq!((seqs(&newest), matched), (vec![bob_echo["seq"].as_u64().unwrap()], 1));
    let answer = get(&gw, "/api/v1/audit?event=tool_call&limit=1");
    assert_eq!(answer.ok(200)["complete"], json!(false), "{}", answer.text);
    let answer = get(&gw, "/api/v1/audit?event=tool_call");
    assert_eq!(answer.ok(200)["complete"], json!(true), "{}", answer.text);

    // `since` and `until`: RFC 3339 times (inclusive) or spans back from now.
    let at = |record: &Value| format!("{}Z", record["timestamp"].as_str().unwrap());
    let (since, matched) = search(&gw, &format!("event=tool_call&since={}", at(alice_add)));
    assert_eq!((seqs(&since), matched), (seqs(&calls[..2]), 2));
    let (until, matched) = search(&gw, &format!("event=tool_call&until={}", at(alice_add)));
    assert_eq!((seqs(&until), matched), (seqs(&calls[1..]), 2));
    let (both, _) = search(&gw, &format!("event=tool_call&since={0}&until={0}", at(alice_echo)));
    assert_eq!(seqs(&both), seqs(&calls[2..]));
    assert_eq!(search(&gw, "event=tool_call&since=1h").1, 3);
    assert_eq!(search(&gw, "event=tool_call&until=1h").1, 0);
    assert_eq!(search(&gw, "since=2099-01-01T00:00:00Z").1, 0);

    // A parameter that cannot be read is a 400 naming it.
    for (query, named) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("since=yesterday", "since"),
        ("until=2w", "until"),
        ("user=a&user=b", "user"),
        ("tool=", "tool"),
        ("since=1h&until=2h", "until"),
    ] {
        let detail = get(&gw, &format!("/api/v1/audit?{query}")).err(400, "VALIDATION_ERROR").to_string();
        assert!(detail.starts_with(&format!("{named}:")), "{query}: {detail}");
    }
    let unauthenticated = admin_as(&gw, None, "/api/v1/audit");
    assert_eq!(unauthenticated.status, 401);

    // The rules as the configuration holds them.
    let shown = get(&gw, "/api/v1/policy").ok(200).clone();
    assert_eq!(shown, json!({"policies": rules, "policy_default": "allow", "quotas": quotas}));

    // A PUT that does not compile, or has another field: 400, the rule named, the file byte for byte as it was.
    let before = std::fs::read(gw.config_path()).unwrap();
    let broken = json!({"policies": [{"name": "ok", "effect": "deny", "when": "false"},
                                     {"name": "broken", "effect": "deny", "when": "target.name =="}]});
    let detail = admin(&gw, Method::PUT, "/api/v1/policy", Some(&broken)).err(400, "VALIDATION_ERROR").to_string();
    assert!(detail.contains("policies[1] (\"broken\").when: does not compile"), "{detail}");
    let odd = json!({"policies": [], "policy_default": "maybe"});
    let detail = admin(&gw, Method::PUT, "/api/v1/policy", Some(&odd)).err(400, "VALIDATION_ERROR").to_string();
    assert!(detail.contains("policy_default"), "{detail}");
    let other = json!({"policies": [], "tool_exposure": "transparent"});
    let detail = admin(&gw, Method::PUT, "/api/v1/policy", Some(&other)).err(400, "VALIDATION_ERROR").to_string();
    assert!(detail.starts_with("tool_exposure:"), "{detail}");
    let detail = admin(&gw, Method::PUT, "/api/v1/policy", Some(&json!({"quotas": []})))
        .err(400, "VALIDATION_ERROR")
        .to_string();
    assert!(detail.starts_with("policies:"), "{detail}");
    assert_eq!(std::fs::read(gw.config_path()).unwrap(), before, "a refused PUT changed the file");

    // A PUT that compiles replaces the rules, keeps what it leaves out, and decides the next call.
    let bob_rule = json!([{"name": "no-echo-for-bob", "effect": "deny",
                           "when": "target.name == 'echo' && principal.email == 'bob@example.com'",
                           "message": "Bob may not echo"}]);
    let put = admin(&gw, Method::PUT, "/api/v1/policy", Some(&json!({"policies": bob_rule}))).ok(200).clone();
    let now = json!({"policies": bob_rule, "policy_default": "allow", "quotas": quotas});
    assert_eq!(put, now);
    assert_eq!(get(&gw, "/api/v1/policy").ok(200), &now);
    let file = common::read_json(gw.config_path());
    assert_eq!(file["common_mcp_gateway_config"]["policies"], bob_rule);
    rt.block_on(async {
        let denied = call_one(&gw, KEY_B, "echo", json!({"text": "three"})).await;
        assert_eq!(assert_error(&denied, "POLICY_DENIED"), "Bob may not echo");
        assert_eq!(denied["rule"], json!("no-echo-for-bob"));
        assert_eq!(call_one(&gw, API_KEY, "add", json!({"a": 1, "b": 2})).await["status"], json!("success"));
    });
    let (writes, _) = search(&gw, "event=admin_write");
    let outcomes: Vec<&str> = writes.iter().map(|r| r["outcome"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["ok", "refused", "refused", "refused", "refused"], "each PUT is audited");
    let (denied, _) = search(&gw, "tool=echo&outcome=POLICY_DENIED&user=bob@example.com");
    assert_eq!(denied[0]["policy_rule"], json!("no-echo-for-bob"));

    // The chain holds on the live file; a record still being written is left for the next check.
    let lines = |path: &std::path::Path| std::fs::read_to_string(path).unwrap().lines().count() as u64;
    let count = lines(&path);
    let verified = get(&gw, "/api/v1/audit/verify").ok(200).clone();
    assert_eq!(verified, json!({"valid": true, "records": count, "path": path.to_str().unwrap()}));
    let text = std::fs::read_to_string(&path).unwrap();
    let first = text.lines().next().unwrap();
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&first.as_bytes()[..40]).unwrap();
    assert_eq!(get(&gw, "/api/v1/audit/verify").ok(200)["records"], json!(count), "a torn last line");
    let (_, matched) = search(&gw, "limit=1000");
    assert_eq!(matched, count, "a search leaves the torn line out too");

    // An edited record: the answer names it.
    let mut edited: Vec<String> = text.lines().map(str::to_string).collect();
    edited[1] = edited[1].replacen("\"timestamp\":\"2", "\"timestamp\":\"1", 1);
    assert_ne!(edited[1], text.lines().nth(1).unwrap(), "the edit changed something");
    std::fs::write(&path, edited.join("\n") + "\n").unwrap();
    let broken = get(&gw, "/api/v1/audit/verify").ok(200).clone();
    assert_eq!((&broken["valid"], &broken["broken_seq"]), (&json!(false), &json!(2)), "{broken}");
    assert!(broken["why"].as_str().is_some_and(|why| why.contains("hash")), "{broken}");
}

#[test]
fn with_the_audit_log_off_both_routes_say_so() {
    let gw = TestGateway::start(&config_with(vec![mock_server("m")], json!({})));
    for route in ["/api/v1/audit", "/api/v1/audit/verify"] {
        let detail = get(&gw, route).err(400, "VALIDATION_ERROR").to_string();
        assert!(detail.contains("audit log is off"), "{route}: {detail}");
    }
    // A parameter that cannot be read is named first, audit log or not.
    assert!(get(&gw, "/api/v1/audit?limit=0").err(400, "VALIDATION_ERROR").starts_with("limit:"));
    // No rules configured: none shown.
    let shown = get(&gw, "/api/v1/policy").ok(200).clone();
    assert_eq!(shown, json!({"policies": [], "policy_default": null, "quotas": []}));
}

fn admin_as(gw: &TestGateway, auth: Option<&str>, path: &str) -> common::Resp {
    common::send(&gw.gw.client, Method::GET, &format!("{}{}", gw.gw.admin, path), auth, None)
}
