//! The audit log from outside (contract sections 11 and 14): tool calls (secure and transparent), authentication
//! failures and admin writes recorded as a hash chain, each before its answer is sent, without keys or argument values,
//! mode 0600, continued by the next gateway process on the same file; `mcpgw audit verify` holds on it and names the
//! first broken record after an edit, a removal or an insertion, and refuses a record with a key twice, an empty file
//! and a chain that does not start at seq 1. Arguments appear only as `args_hmac`, keyed by `audit_log.hmac_key`
//! (written into a file that lacks it, encrypted in backups); authentication failures of both fronts are recorded at
//! most 10 a second per source address, with `suppressed`; approvals and pin removals name the server and the tool;
//! a review that finds more than 100 tools changed writes one summary. Many calls at once (the records of calls in
//! flight written together) each have their record before their answer, and the chain holds.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::{ADMIN_KEY, API_KEY, CONFIG_ID};
use mcp::*;
use serde_json::{Value, json};
use sha2::Digest;

const SECRET_ARG: &str = "hunter2-argument-value-7731";
const HMAC_KEY: &str = "audit-hmac-key-of-the-tests-0123456789abcdef";

/// HMAC-SHA-256 in hex, as an auditor holding the key computes it.
fn hmac_hex(key: &str, text: &str) -> String {
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key.as_bytes()), text.as_bytes());
    tag.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256_hex(text: &str) -> String {
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

fn audit_config(path: &std::path::Path, key: Option<&str>) -> Value {
    let mut audit = json!({"enabled": true, "path": path.to_str().unwrap()});
    if let Some(key) = key {
        audit["hmac_key"] = json!(key);
    }
    json!({"tool_exposure": "both", "audit_log": audit})
}

fn records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn events(path: &std::path::Path) -> Vec<String> {
    records(path).iter().map(|r| r["event"].as_str().unwrap_or_default().to_string()).collect()
}

fn verify(path: &std::path::Path) -> (bool, String) {
    let (status, out, err) = common::run_cli(&["audit", "verify", path.to_str().unwrap()], &[]);
    (status.success(), format!("{out}{err}"))
}

#[test]
fn events_are_chained_without_secrets_and_tampering_shows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let config = config_with(vec![mock_server("mock")], audit_config(&path, Some(HMAC_KEY)));
    {
        let gw = TestGateway::start(&config);
        runtime().block_on(async {
            let client = connect(&gw.mcp, API_KEY).await;
            call(&client, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": SECRET_ARG}))])).await;
            // Recorded before the answer was sent: it is in the file already.
            let last = records(&path).pop().unwrap();
            assert_eq!(
                (last["event"].as_str(), last["tool_name"].as_str()),
                (Some("tool_call"), Some("echo")),
                "{last}"
            );
            assert_eq!(last["outcome"], json!("success"));
            assert_eq!(last["server_name"], json!("mock"));
            // The keyed digest of the sorted-key arguments: whoever holds the key can check it, nobody can guess it.
            let args = format!(r#"{{"text":"{SECRET_ARG}"}}"#);
            assert_eq!(last["args_hmac"], json!(hmac_hex(HMAC_KEY, &args)), "{last}");
            assert!(last.get("args_sha256").is_none(), "{last}");
            try_call(&client, "mock__echo", json!({"text": SECRET_ARG})).await.expect("transparent call");
            let refused = call(&client, "gw_secure_call_tools", calls("mock", &[("nope", json!({}))])).await;
            assert_eq!(refused["results"][0]["error_code"], json!("TOOL_NOT_FOUND"));
            client.cancel().await.unwrap();
        });
        assert_eq!(initialize_status(&gw, "wrong-key-0123456789"), 401);
        let created = admin(&gw, reqwest::Method::POST, "/api/v1/users", Some(&json!({"email": "carol@example.com"})));
        assert!(created.status < 300, "{}", created.text);
        // A reload of an edited file, and one of a file that is not valid.
        let mut edited = config.clone();
        edited["users"]["u-dave"] = json!({"email": "dave@example.com"});
        std::fs::write(gw.config_path(), serde_json::to_vec_pretty(&edited).unwrap()).unwrap();
        let reloaded = common::wait_until(common::RELOAD_DEADLINE * 4, || {
            records(&path).iter().any(|r| r["event"] == json!("config_reload") && r["outcome"] == json!("ok"))
        });
        assert!(reloaded, "the reload is recorded: {:?}", events(&path));
        std::fs::write(gw.config_path(), b"{ not json").unwrap();
        let failed = common::wait_until(common::RELOAD_DEADLINE * 4, || {
            records(&path).iter().any(|r| r["event"] == json!("config_reload") && r["outcome"] == json!("error"))
        });
        assert!(failed, "the failed reload is recorded: {:?}", events(&path));
        std::fs::write(gw.config_path(), serde_json::to_vec_pretty(&edited).unwrap()).unwrap();
        let seen = events(&path);
        for event in ["tool_call", "auth_failure", "admin_write"] {
            assert!(seen.contains(&event.to_string()), "{event} not recorded: {seen:?}");
        }
        let last_call = records(&path).into_iter().rfind(|r| r["event"] == json!("tool_call")).unwrap();
        assert_eq!(last_call["error_code"], json!("TOOL_NOT_FOUND"), "{last_call}");
    }
    // The next process continues the chain.
    let gw = TestGateway::start(&config);
    let before = records(&path).len();
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        call(&client, "gw_secure_call_tools", calls("mock", &[("add", json!({"a": 1, "b": 2}))])).await;
        client.cancel().await.unwrap();
    });
    let all = records(&path);
    assert!(all.len() > before);
    let seqs: Vec<u64> = all.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=all.len() as u64).collect::<Vec<_>>(), "seq counts up across restarts");
    drop(gw);

    let text = std::fs::read_to_string(&path).unwrap();
    for secret in [SECRET_ARG, API_KEY, ADMIN_KEY, "wrong-key-0123456789", HMAC_KEY] {
        assert!(!text.contains(secret), "{secret} in the audit log");
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let (holds, said) = verify(&path);
    assert!(holds && said.contains(&format!("{} records", all.len())), "{said}");

    let lines: Vec<&str> = text.lines().collect();
    let tampered = dir.path().join("tampered.jsonl");
    let mut changed: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    changed[1] = changed[1].replacen("\"timestamp\":\"2", "\"timestamp\":\"1", 1);
    assert_ne!(changed[1], lines[1], "the edit changed something");
    std::fs::write(&tampered, changed.join("\n") + "\n").unwrap();
    let (holds, said) = verify(&tampered);
    assert!(!holds && said.contains("seq 2"), "an edit: {said}");
    let mut removed: Vec<&str> = lines.clone();
    removed.remove(2);
    std::fs::write(&tampered, removed.join("\n") + "\n").unwrap();
    let (holds, said) = verify(&tampered);
    assert!(!holds && said.contains("seq 3"), "a removal: {said}");
}

#[test]
fn arguments_are_keyed_digests_under_a_key_written_into_a_file_without_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], audit_config(&path, None)));
    // A file older than the setting: the gateway writes the key it uses into it (trust on first use).
    let mut key = String::new();
    let written = common::wait_until(common::RELOAD_DEADLINE * 4, || {
        let file = common::read_json(gw.config_path());
        key = file["common_mcp_gateway_config"]["audit_log"]["hmac_key"].as_str().unwrap_or_default().to_string();
        !key.is_empty()
    });
    assert!(written, "no hmac_key written into the configuration");
    assert!(key.len() >= 43, "32 random bytes in URL-safe base64: {key}");
    let ssn = json!({"ssn": "123456789"});
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        for args in [ssn.clone(), ssn.clone(), json!({"ssn": "123456780"})] {
            call(&client, "gw_secure_call_tools", calls("mock", &[("echo", args)])).await;
        }
        client.cancel().await.unwrap();
    });
    let digests: Vec<String> = records(&path)
        .into_iter()
        .filter(|r| r["event"] == json!("tool_call"))
        .map(|r| r["args_hmac"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(digests.len(), 3, "{digests:?}");
    assert_eq!(digests[0], digests[1], "the same arguments give the same args_hmac");
    assert_ne!(digests[0], digests[2]);
    assert_eq!(digests[0], hmac_hex(&key, r#"{"ssn":"123456789"}"#), "keyed with the key in the file");
    // The plain hash, which anyone could confirm a guessed value with, is nowhere.
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(&sha256_hex(r#"{"ssn":"123456789"}"#)), "{text}");
    assert!(!text.contains("123456789") && !text.contains(&key));
    // The key is a secret: not in the logs, encrypted in backups.
    let out = gw.config_path().parent().unwrap().join("backups").join("b.json");
    let made = admin(&gw, reqwest::Method::POST, "/api/v1/system/backup", Some(&json!({"output_file": out})));
    assert_eq!(made.status, 200, "{}", made.text);
    let saved = std::fs::read_to_string(&out).unwrap();
    assert!(!saved.contains(&key), "the hmac_key is in clear in the backup");
    let sealed: Value = serde_json::from_str(&saved).unwrap();
    assert!(sealed["common_mcp_gateway_config"]["audit_log"]["hmac_key"].as_str().is_some_and(|k| !k.is_empty()));
    let restored = admin(&gw, reqwest::Method::POST, "/api/v1/system/restore", Some(&json!({"input_file": out})));
    assert_eq!(restored.status, 200, "{}", restored.text);
    let file = common::read_json(gw.config_path());
    assert_eq!(file["common_mcp_gateway_config"]["audit_log"]["hmac_key"], json!(key), "restored as it was");
    assert!(!gw.logs().contains(&key), "the hmac_key is in the logs");
    drop(gw);

    // `mcpgw audit verify` refuses, naming why: a key twice in a record (a lenient reader takes the last one, so the
    // hash of what it reads still matches), an empty file, a chain whose beginning was cut.
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert!(lines.len() >= 3 && lines[1].contains(r#""outcome":"#), "{text}");
    let tampered = dir.path().join("tampered.jsonl");
    let mut doubled = lines.clone();
    doubled[1] = doubled[1].replacen('{', r#"{"outcome":"forged","#, 1);
    std::fs::write(&tampered, doubled.join("\n") + "\n").unwrap();
    let (holds, said) = verify(&tampered);
    assert!(!holds && said.contains("seq 2") && said.contains(r#""outcome" twice"#), "a key twice: {said}");
    std::fs::write(&tampered, "").unwrap();
    let (holds, said) = verify(&tampered);
    assert!(!holds && said.contains("no audit record"), "an empty file: {said}");
    std::fs::write(&tampered, lines[1..].join("\n") + "\n").unwrap();
    let (holds, said) = verify(&tampered);
    assert!(!holds && said.contains("does not start at seq 1"), "a cut beginning: {said}");
}

#[test]
fn failed_logins_are_audited_at_most_ten_a_second_per_address_with_what_was_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], audit_config(&path, Some(HMAC_KEY))));
    let client = http();
    let wrong = |i: usize| format!("wrong-credential-{i:04}-abcdefghijklmnop");
    let count = |event: &str| records(&path).iter().filter(|r| r["event"] == json!(event)).count();
    let refused = |front: &str, key: &str| match front {
        "gateway" => post(&client, &gw.mcp, Some(key), &[], &initialize_body(1, "2025-11-25")).status,
        _ => {
            let url = format!("{}/api/v1/users", gw.gw.admin);
            common::send(&gw.gw.client, reqwest::Method::GET, &url, Some(&format!("Bearer {key}")), None).status
        }
    };

    for (front, event) in [("gateway", "auth_failure"), ("admin", "admin_auth_failure")] {
        let started = std::time::Instant::now();
        for i in 0..200 {
            assert_eq!(refused(front, &wrong(i)), 401);
        }
        let seconds = started.elapsed().as_secs_f64().ceil() as usize;
        let written = count(event);
        assert!((1..=10 * (seconds + 1)).contains(&written), "{front}: {written} records in {seconds} s");
        // Once the second has passed, the next failure from the address is recorded with the count left out.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        assert_eq!(refused(front, &wrong(999)), 401);
        let all: Vec<Value> = records(&path).into_iter().filter(|r| r["event"] == json!(event)).collect();
        let last = all.last().unwrap();
        assert_eq!(last["source_address"], json!("127.0.0.1"), "{last}");
        assert!(last["suppressed"].as_u64().unwrap_or_default() > 0, "the count left out: {last}");
        // Each failure is a record or counted in a later record's `suppressed` (on a loaded machine the 200 can span
        // several windows, each of whose left-out count rides on the next record written).
        let suppressed: u64 = all.iter().map(|r| r["suppressed"].as_u64().unwrap_or_default()).sum();
        assert_eq!(all.len() + suppressed as usize, 201, "every failure written or counted: {all:?}");
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("wrong-credential"), "a presented credential is in the audit log");
    drop(gw);
    assert!(verify(&path).0);
}

#[test]
fn approvals_and_pin_removals_name_the_server_and_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut common = audit_config(&path, Some(HMAC_KEY));
    common["tool_pinning"] = json!("enforce");
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], common));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        call(&client, "gw_discover_all_tools", json!({"server_name": "mock"})).await;
        client.cancel().await.unwrap();
    });
    let pins = format!("/api/v1/configs/{CONFIG_ID}/servers/mock/tool-pins");
    let listed = admin(&gw, reqwest::Method::GET, &pins, None);
    let data = listed.ok(200);
    let rows = data.get("tool_pins").unwrap_or(data).as_array().cloned().unwrap_or_default();
    let echo = rows.iter().find(|r| r["tool_name"] == json!("echo")).expect("echo was discovered");
    let body = json!({"sha256": echo["current"]});
    let approved = admin(&gw, reqwest::Method::POST, &format!("{pins}/echo/approve"), Some(&body));
    assert_eq!(approved.status, 200, "{}", approved.text);
    let removed = admin(&gw, reqwest::Method::DELETE, &format!("{pins}/add"), None);
    assert_eq!(removed.status, 200, "{}", removed.text);
    let writes: Vec<Value> = records(&path).into_iter().filter(|r| r["event"] == json!("admin_write")).collect();
    for tool in ["echo", "add"] {
        assert!(
            writes.iter().any(|r| r["server_name"] == json!("mock") && r["tool_name"] == json!(tool)),
            "no admin write naming mock/{tool}: {writes:?}"
        );
    }
}

#[test]
fn a_review_that_changes_more_than_100_tools_writes_one_summary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let tools_file = dir.path().join("tools.json");
    let schema = json!({"type": "object", "properties": {"text": {"type": "string"}}});
    let tools: Vec<Value> = (0..150)
        .map(|i| json!({"name": format!("bulk_{i:03}"), "description": "Stores a value.", "inputSchema": schema}))
        .collect();
    std::fs::write(&tools_file, Value::Array(tools).to_string()).unwrap();
    let mut server = mock_server("mock");
    server["config"]["args"] = json!(["--tools-file", tools_file.to_str().unwrap()]);
    // Pinned already (one stale pin), so that the 150 tools are new ones rather than pinned on first use.
    server["pinned_tools"] = json!({"echo": format!("sha256:{}", "0".repeat(64))});
    let mut common = audit_config(&path, Some(HMAC_KEY));
    common["tool_pinning"] = json!("enforce");
    let gw = TestGateway::start(&config_with(vec![server], common));
    let found = runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let found = call(&client, "gw_discover_all_tools", json!({"server_name": "mock"})).await;
        client.cancel().await.unwrap();
        found
    });
    assert!(found["quarantined"].as_array().is_some_and(|q| q.len() > 150), "{found}");
    let all = records(&path);
    let per_tool =
        all.iter().filter(|r| r["event"] == json!("tool_new") || r["event"] == json!("tool_definition_changed"));
    assert_eq!(per_tool.count(), 0, "one record per tool: {:?}", events(&path));
    let summaries: Vec<&Value> = all.iter().filter(|r| r["event"] == json!("tools_changed_summary")).collect();
    assert_eq!(summaries.len(), 1, "{:?}", events(&path));
    assert_eq!(summaries[0]["server_name"], json!("mock"));
    assert_eq!(summaries[0]["outcome"], json!("quarantined"));
    assert!(summaries[0]["count"].as_u64().is_some_and(|n| n > 150), "{}", summaries[0]);
    let logs = gw.logs();
    assert_eq!(logs.matches("tool definitions changed on many tools at once").count(), 1, "{logs}");
    assert!(!logs.contains("\"new tool\"") && !logs.contains("bulk_149"), "a log record per tool: {logs}");
}

/// Many calls in flight at once, secure and transparent: the records of calls answered together are written together
/// (group commit), and still each before its answer. Every answered call has its record, once, and the chain holds.
#[test]
fn concurrent_calls_each_have_their_record_before_the_answer_and_the_chain_holds() {
    const CLIENTS: usize = 16;
    const CALLS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let gw = TestGateway::start(&config_with(vec![mock_server("mock")], audit_config(&path, Some(HMAC_KEY))));
    let answered: Vec<String> = runtime().block_on(async {
        let tasks = (0..CLIENTS).map(|client_number| {
            let (url, path) = (gw.mcp.clone(), path.clone());
            tokio::spawn(async move {
                let client = connect(&url, API_KEY).await;
                let mut digests = Vec::new();
                for i in 0..CALLS {
                    let args = json!({"text": format!("client {client_number} call {i}")});
                    let digest = hmac_hex(HMAC_KEY, &format!(r#"{{"text":"client {client_number} call {i}"}}"#));
                    if i % 2 == 0 {
                        let done = call(&client, "gw_secure_call_tools", calls("mock", &[("echo", args)])).await;
                        assert_eq!(done["results"][0]["status"], json!("success"), "{done}");
                    } else {
                        try_call(&client, "mock__echo", args).await.expect("transparent call");
                    }
                    // The answer is here: its record is in the file already.
                    let text = std::fs::read_to_string(&path).unwrap();
                    assert!(text.contains(&digest), "client {client_number} call {i} answered before its record");
                    digests.push(digest);
                }
                client.cancel().await.unwrap();
                digests
            })
        });
        let mut all = Vec::new();
        for task in tasks.collect::<Vec<_>>() {
            all.extend(task.await.unwrap());
        }
        all
    });
    drop(gw);
    let all = records(&path);
    let (holds, said) = verify(&path);
    assert!(holds && said.contains(&format!("{} records", all.len())), "{said}");
    for digest in &answered {
        let found = all.iter().filter(|r| r["event"] == json!("tool_call") && r["args_hmac"] == json!(digest));
        assert_eq!(found.count(), 1, "the record of the call with args_hmac {digest}");
    }
    assert_eq!(answered.len(), CLIENTS * CALLS);
}

fn initialize_status(gw: &TestGateway, key: &str) -> u16 {
    post(&http(), &gw.mcp, Some(key), &[], &initialize_body(1, "2025-11-25")).status
}
