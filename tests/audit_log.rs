//! The audit log from outside (contract section 11): tool calls (secure and transparent), authentication failures and
//! admin writes recorded as a hash chain, each before its answer is sent, without keys or argument values, mode
//! 0600, continued by the next gateway process on the same file; `mcpgw audit verify` holds on it and names the first
//! broken record after an edit, a removal or an insertion.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use common::{ADMIN_KEY, API_KEY};
use mcp::*;
use serde_json::{Value, json};

const SECRET_ARG: &str = "hunter2-argument-value-7731";

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
    let audit = json!({"tool_exposure": "both", "audit_log": {"enabled": true, "path": path.to_str().unwrap()}});
    let config = config_with(vec![mock_server("mock")], audit);
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
            assert!(last["args_sha256"].as_str().is_some_and(|h| h.len() == 64), "{last}");
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
    for secret in [SECRET_ARG, API_KEY, ADMIN_KEY, "wrong-key-0123456789"] {
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

fn initialize_status(gw: &TestGateway, key: &str) -> u16 {
    post(&http(), &gw.mcp, Some(key), &[], &initialize_body(1, "2025-11-25")).status
}
