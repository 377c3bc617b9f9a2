//! Each user's own upstream credentials (contract 16), from outside.
//!
//! Through the binary: a `per_user` server whose caller has no stored values answers `CREDENTIALS_REQUIRED` (naming
//! the server and the missing names, never a value) and starts no process, in the gateway view and the transparent
//! view, and listings leave it out for that user; the audit log says whose credentials each call carried;
//! `check-config` refuses an undeclared `${user.X}` and a declared name nothing uses.
//!
//! At the library level (the stored values come from the vault, branch `creds-vault`, which this branch has not
//! got): the pool keeps two users of one `per_user` server in separate processes, each started with that user's own
//! values, and a reload keeps a user's pool while its entry is unchanged.
//!
//! The two-users test through the binary needs values stored in the vault: it is written against the admin API the
//! vault adds and ignored until the merge.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use common::{API_KEY, BOB_ID, CONFIG_ID, run_cli, write_json};
use mcp::{KEY_B, TestGateway, answer_of, assert_error, call, calls, config_with, connect, mock_bin, mock_server};
use mcp::{runtime, tool_names, try_call, upstream_text};
use mcpgw::config::model::{ServerCommand, ServerEntry};
use mcpgw::upstream::{Caller, PoolKey, PoolSettings, ServerSpec, UpstreamPool};
use serde_json::{Value, json};

/// A `per_user` server running the mock upstream, its `MOCK_TOKEN` the user's `TOKEN`; when `marker` is given the
/// process first touches that file (so a test can tell that none was started).
fn per_user_server(name: &str, marker: Option<&Path>) -> Value {
    let (command, args) = match marker {
        Some(marker) => {
            ("sh".to_string(), json!(["-c", format!("touch '{}'; exec '{}'", marker.display(), mock_bin())]))
        }
        None => (mock_bin().to_string(), json!([])),
    };
    json!({
        "server_name": name,
        "config": {"command": command, "args": args, "env": {"MOCK_TOKEN": "${user.TOKEN}", "MOCK_ORG": "${user.ORG}"}},
        "credentials": {"mode": "per_user", "kind": "secret", "names": ["TOKEN", "ORG"]}
    })
}

#[test]
fn a_user_without_values_gets_credentials_required_and_no_process_in_the_gateway_view() {
    let dir = tempfile::tempdir().unwrap();
    let (marker, audit) = (dir.path().join("started"), dir.path().join("audit.jsonl"));
    let servers = vec![per_user_server("gh", Some(&marker)), mock_server("m1")];
    let common = json!({"tool_exposure": "gateway", "audit_log": {"enabled": true, "path": audit.to_str().unwrap()}});
    let gw = TestGateway::start(&config_with(servers, common));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let answer =
            call(&client, "gw_secure_call_tools", calls("gh", &[("env", json!({"name": "MOCK_TOKEN"}))])).await;
        let result = &answer["results"][0];
        let message = assert_error(result, "CREDENTIALS_REQUIRED");
        assert!(message.contains("\"gh\"") && message.contains("TOKEN, ORG"), "{message}");
        assert_eq!(result["server_name"], json!("gh"), "{result}");
        assert_eq!(result["missing"], json!(["TOKEN", "ORG"]), "{result}");

        let discovered = call(&client, "gw_discover_all_tools", json!({"server_name": "gh"})).await;
        assert_error(&discovered, "CREDENTIALS_REQUIRED");
        // A shared server beside it is served as before.
        let shared = call(&client, "gw_secure_call_tools", calls("m1", &[("echo", json!({"text": "hi"}))])).await;
        assert_eq!(shared["results"][0]["status"], json!("success"), "{shared}");
        client.cancel().await.unwrap();
    });
    assert!(!marker.exists(), "a process was started for a user without values");
    let records: Vec<Value> =
        std::fs::read_to_string(&audit).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let credential_of = |server: &str| {
        let record = records.iter().find(|r| r["event"] == json!("tool_call") && r["server_name"] == json!(server));
        record
            .map(|r| r["credential"].clone())
            .unwrap_or_else(|| panic!("no tool_call record of {server}: {records:?}"))
    };
    assert_eq!(credential_of("gh"), json!("secret"));
    assert_eq!(credential_of("m1"), json!("shared"));
    let gh = records.iter().find(|r| r["server_name"] == json!("gh")).unwrap();
    assert_eq!(gh["error_code"], json!("CREDENTIALS_REQUIRED"), "{gh}");
}

#[test]
fn the_transparent_view_leaves_the_server_out_of_lists_and_answers_credentials_required() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let servers = vec![per_user_server("gh", Some(&marker)), mock_server("m1")];
    let gw = TestGateway::start(&config_with(servers, json!({"tool_exposure": "transparent"})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        let names = tool_names(&client).await;
        assert!(names.iter().any(|n| n == "m1__echo"), "{names:?}");
        assert!(!names.iter().any(|n| n.starts_with("gh__")), "listed without credentials: {names:?}");
        let result = try_call(&client, "gh__env", json!({"name": "MOCK_TOKEN"})).await.unwrap();
        let message = assert_error(&answer_of(&result), "CREDENTIALS_REQUIRED");
        assert!(message.contains("\"gh\"") && message.contains("TOKEN"), "{message}");
        // A prompt of that server: the same answer, as the JSON-RPC error's data.
        let prompt = serde_json::from_value::<rmcp::model::GetPromptRequestParams>(json!({"name": "gh__any"})).unwrap();
        let refused = client.get_prompt(prompt).await.expect_err("prompts/get without credentials");
        let rmcp::ServiceError::McpError(refused) = refused else { panic!("{refused:?}") };
        assert_eq!(refused.data.unwrap_or_default()["error_code"], json!("CREDENTIALS_REQUIRED"));
        let echoed = try_call(&client, "m1__echo", json!({"text": "still here"})).await.unwrap();
        assert_eq!(upstream_text(&echoed), "still here");
        client.cancel().await.unwrap();
    });
    assert!(!marker.exists(), "a process was started for a user without values");
    assert!(gw.logs().contains("their credentials are not set"), "the left-out server is logged");
}

#[test]
fn check_config_refuses_an_undeclared_reference_and_an_unused_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.json");
    let mut server = per_user_server("gh", None);
    server["config"]["args"] = json!(["--team=${user.TEAM}"]);
    server["credentials"]["names"] = json!(["TOKEN", "ORG", "UNUSED"]);
    write_json(&path, &config_with(vec![server], json!({})));
    let (status, _, err) = run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success(), "check-config accepted it");
    assert!(err.contains("(server \"gh\"): ${user.TEAM} is not in credentials.names"), "{err}");
    assert!(err.contains("credentials.names lists \"UNUSED\" but nothing uses it"), "{err}");

    let mut oauth = per_user_server("gh", None);
    oauth["credentials"] = json!({"mode": "per_user", "kind": "oauth", "authorization_url": "https://a.example/auth",
        "token_url": "https://a.example/token", "client_id": "c", "scopes": ["repo"], "colour": "blue"});
    write_json(&path, &config_with(vec![oauth], json!({})));
    let (status, _, err) = run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success(), "check-config accepted an oauth entry without public_url, secrets_key or its token");
    assert!(err.contains("kind \"oauth\" needs common_mcp_gateway_config.public_url"), "{err}");
    assert!(err.contains("needs the user's token handed to it: write ${user.ACCESS_TOKEN}"), "{err}");
    assert!(err.contains("credentials.colour: unknown key"), "{err}");

    write_json(&path, &config_with(vec![per_user_server("gh", None)], json!({})));
    let (status, _, err) = run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(status.success(), "a valid per_user entry refused: {err}");
}

fn entry() -> ServerEntry {
    let env = [("MOCK_TOKEN", "${user.TOKEN}")].map(|(k, v)| (k.to_string(), v.to_string()));
    ServerEntry {
        server_name: "gh".into(),
        config: ServerCommand {
            command: mock_bin().into(),
            env: Some(env.into_iter().collect()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

#[test]
fn two_users_of_a_per_user_server_get_their_own_processes_and_values() {
    runtime().block_on(async {
        let pool = UpstreamPool::new(PoolSettings { max_processes_per_user_server: 1, ..PoolSettings::default() });
        let entry = entry();
        let timeout = Duration::from_secs(30);
        let mut pids = HashMap::new();
        for (user, token) in [("alice", "alice-token-1"), ("bob", "bob-token-2")] {
            let values = HashMap::from([("TOKEN".to_string(), token.to_string())]);
            let spec = ServerSpec::for_user(&entry, user, &values);
            let key = PoolKey::for_user("c", "gh", user);
            let args = json!({"name": "MOCK_TOKEN"}).as_object().cloned().unwrap();
            let seen = pool.call_tool(&key, &spec, Caller::default(), "env", args, timeout, None).await.unwrap();
            assert_eq!(text(&seen), token, "{user} sees their own value");
            let pid = pool.call_tool(&key, &spec, Caller::default(), "pid", Default::default(), timeout, None).await;
            pids.insert(user, text(&pid.unwrap()));
        }
        assert_ne!(pids["alice"], pids["bob"], "two users never share a process");
        assert_eq!(pool.stats().processes, 2, "one process per (server, user)");

        // A reload with the entry unchanged keeps the users' processes; a changed entry retires them.
        let live = HashMap::from([(PoolKey::new("c", "gh"), ServerSpec::from_entry(&entry))]);
        pool.retain(&live);
        assert_eq!(pool.stats().processes, 2, "an unchanged entry keeps its users' processes");
        let mut changed = entry.clone();
        changed.config.args = vec!["--changed".into()];
        pool.retain(&HashMap::from([(PoolKey::new("c", "gh"), ServerSpec::from_entry(&changed))]));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while pool.stats().processes > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(pool.stats().processes, 0, "a changed entry retires its users' processes");
        pool.shutdown().await;
    });
}

/// Each user's values stored through the admin API (encrypted by the vault) reach the upstream in that user's own
/// process only.
#[test]
fn two_users_reach_the_upstream_with_their_own_values_through_the_gateway() {
    let servers = vec![per_user_server("gh", None)];
    let gw = TestGateway::start(&config_with(servers, json!({"tool_exposure": "gateway"})));
    for (user, token) in [(common::ALICE_ID, "alice-token-1"), (BOB_ID, "bob-token-2")] {
        let path = format!("/api/v1/users/{user}/credentials/{CONFIG_ID}/gh");
        gw.gw.put(&path, &json!({"values": {"TOKEN": token, "ORG": "acme"}})).ok(200);
    }
    runtime().block_on(async {
        let mut pids = Vec::new();
        for (key, token) in [(API_KEY, "alice-token-1"), (KEY_B, "bob-token-2")] {
            let client = connect(&gw.mcp, key).await;
            let batch = calls("gh", &[("env", json!({"name": "MOCK_TOKEN"})), ("pid", json!({}))]);
            let answer = call(&client, "gw_secure_call_tools", batch).await;
            assert_eq!(upstream_text(&answer["results"][0]["response"]), token, "{answer}");
            pids.push(upstream_text(&answer["results"][1]["response"]));
            client.cancel().await.unwrap();
        }
        assert_ne!(pids[0], pids[1], "two users never share a process");
    });
    assert!(!gw.logs().contains("alice-token-1"), "a value reached the logs");
}
