//! One-step client setup (issue 8): `mcpgw client-config` prints valid JSON in each client's own format (Claude
//! Desktop, Cursor, Claude Code, VS Code; HTTP and stdio), refers to the key through the client's variable syntax with
//! `--key-from-env`, and `--write` merges into an existing client file without losing its other servers or top-level
//! keys, keeping a `.bak` copy, or creates the file when it is missing.

mod common;

use std::fs;
use std::path::Path;

use common::*;
use serde_json::{Value, json};

const KEY: &str = "gwkey-client-0123456789abcdefghijklmnopqrstuvwxyzABCDE";

fn client_config(args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
    let mut all = vec!["client-config"];
    all.extend(args);
    let (status, out, err) = run_cli(&all, envs);
    (status.code().unwrap_or(-1), out, err)
}

#[track_caller]
fn printed(args: &[&str], envs: &[(&str, &str)]) -> Value {
    let (code, out, err) = client_config(args, envs);
    assert_eq!(code, 0, "client-config {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("client-config {args:?} printed invalid JSON ({e}):\n{out}"))
}

#[test]
fn http_entries_in_each_clients_format() {
    let env = [("GW_GATEWAY_KEY", KEY)];
    let url = "http://127.0.0.1:8000/mcp/";
    let bearer = json!({"Authorization": format!("Bearer {KEY}")});

    let cursor = printed(&["--client", "cursor", "--url", url], &env);
    assert_eq!(cursor, json!({"mcpServers": {"mcpgw": {"url": url, "headers": bearer}}}));
    let code = printed(&["--client", "claude-code", "--url", url, "--name", "gw"], &env);
    assert_eq!(code, json!({"mcpServers": {"gw": {"type": "http", "url": url, "headers": bearer}}}));

    let desktop = printed(&["--client", "claude-desktop", "--url", url], &env);
    let entry = &desktop["mcpServers"]["mcpgw"];
    assert_eq!(entry["command"], json!("npx"));
    let args: Vec<&str> = entry["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(args.contains(&"mcp-remote") && args.contains(&url) && args.contains(&"--header"), "{args:?}");
    assert_eq!(entry["env"]["MCPGW_AUTH_HEADER"], json!(format!("Bearer {KEY}")));

    // VS Code without --key-from-env prompts for the key: it never lands in the file.
    let vscode = printed(&["--client", "vscode", "--url", url], &[]);
    let server = &vscode["servers"]["mcpgw"];
    assert_eq!(server["type"], json!("http"));
    let header = server["headers"]["Authorization"].as_str().unwrap();
    let input = &vscode["inputs"][0];
    assert_eq!(header, format!("Bearer ${{input:{}}}", input["id"].as_str().unwrap()));
    assert_eq!((input["type"].clone(), input["password"].clone()), (json!("promptString"), json!(true)));
}

#[test]
fn key_from_env_uses_each_clients_variable_syntax() {
    let cases = [
        ("cursor", "mcpServers", "Bearer ${env:MY_GW_KEY}"),
        ("claude-code", "mcpServers", "Bearer ${MY_GW_KEY}"),
        ("vscode", "servers", "Bearer ${env:MY_GW_KEY}"),
    ];
    for (client, servers, header) in cases {
        let doc = printed(&["--client", client, "--key-from-env", "MY_GW_KEY"], &[("GW_GATEWAY_KEY", KEY)]);
        assert_eq!(doc[servers]["mcpgw"]["headers"]["Authorization"], json!(header), "{client}");
        assert!(!doc.to_string().contains(KEY), "{client}: the key must not be embedded");
        let stdio = printed(&["--client", client, "--transport", "stdio", "--key-from-env", "MY_GW_KEY"], &[]);
        let want = header.trim_start_matches("Bearer ");
        assert_eq!(stdio[servers]["mcpgw"]["env"]["GW_GATEWAY_KEY"], json!(want), "{client} stdio");
    }
    // Claude Desktop cannot expand variables: the key is read now, and the user is told so.
    let (code, out, err) =
        client_config(&["--client", "claude-desktop", "--key-from-env", "MY_GW_KEY"], &[("MY_GW_KEY", KEY)]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(KEY) && err.contains("cannot expand environment variables"), "{err}");
}

#[test]
fn stdio_entries_start_this_binary_with_the_gw_variables() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.json");
    let cfg = config.to_str().unwrap();
    for (client, servers) in [
        ("claude-desktop", "mcpServers"),
        ("cursor", "mcpServers"),
        ("claude-code", "mcpServers"),
        ("vscode", "servers"),
    ] {
        let args = ["--client", client, "--transport", "stdio", "--config", cfg, "--project-id", PROJECT_ID];
        let doc = printed(&args, &[("GW_GATEWAY_KEY", KEY)]);
        let entry = &doc[servers]["mcpgw"];
        assert!(Path::new(entry["command"].as_str().unwrap()).ends_with("mcpgw"), "{client}: {entry}");
        assert_eq!(entry["args"], json!(["serve", "--transport", "stdio", "--config", cfg]), "{client}");
        assert_eq!(entry["env"]["GW_PROJECT_ID"], json!(PROJECT_ID), "{client}");
        if client != "vscode" {
            assert_eq!(entry["env"]["GW_GATEWAY_KEY"], json!(KEY), "{client}");
        }
    }
}

#[test]
fn write_merges_into_an_existing_file_and_keeps_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("GW_GATEWAY_KEY", KEY)];
    for (client, servers) in [
        ("cursor", "mcpServers"),
        ("claude-code", "mcpServers"),
        ("claude-desktop", "mcpServers"),
        ("vscode", "servers"),
    ] {
        let file = dir.path().join(format!("{client}.json"));
        let mut existing = json!({"globalShortcut": "Ctrl+Space", "theme": {"dark": true}});
        existing[servers] = json!({"other": {"command": "other-server", "args": ["--x"]}});
        if client == "vscode" {
            existing["inputs"] = json!([{"type": "promptString", "id": "other-token", "password": true}]);
        }
        let original = serde_json::to_vec_pretty(&existing).unwrap();
        fs::write(&file, &original).unwrap();
        let (code, out, err) =
            client_config(&["--client", client, "--write", "--config-file", file.to_str().unwrap()], &env);
        assert_eq!(code, 0, "{client}: {err}");
        assert!(out.contains(file.to_str().unwrap()), "{out}");
        let merged = read_json(&file);
        assert_eq!(merged["globalShortcut"], existing["globalShortcut"], "{client}");
        assert_eq!(merged["theme"], existing["theme"], "{client}");
        assert_eq!(merged[servers]["other"], existing[servers]["other"], "{client}: other server kept");
        assert!(merged[servers]["mcpgw"].is_object(), "{client}: entry added");
        assert_eq!(fs::read(dir.path().join(format!("{client}.json.bak"))).unwrap(), original, "{client}: .bak");
        if client == "vscode" {
            assert_eq!(merged["inputs"].as_array().unwrap().len(), 2, "{merged}");
        }
        // Writing again replaces our entry and keeps everything else.
        let again = client_config(
            &[
                "--client",
                client,
                "--write",
                "--config-file",
                file.to_str().unwrap(),
                "--url",
                "http://gw.example:8000/mcp/",
            ],
            &env,
        );
        assert_eq!(again.0, 0, "{}", again.2);
        let twice = read_json(&file);
        assert_eq!(twice[servers].as_object().unwrap().len(), 2);
        assert!(twice[servers]["mcpgw"].to_string().contains("gw.example"));
    }
    let fresh = dir.path().join("new").join(".mcp.json");
    let (code, _, err) =
        client_config(&["--client", "claude-code", "--write", "--config-file", fresh.to_str().unwrap()], &env);
    assert_eq!(code, 0, "{err}");
    assert!(read_json(&fresh)["mcpServers"]["mcpgw"]["url"].is_string());
    assert!(!dir.path().join("new").join(".mcp.json.bak").exists());
}

#[test]
fn a_broken_client_file_or_a_missing_key_is_refused_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mcp.json");
    fs::write(&file, b"{ not json").unwrap();
    let (code, _, err) = client_config(
        &["--client", "cursor", "--write", "--config-file", file.to_str().unwrap()],
        &[("GW_GATEWAY_KEY", KEY)],
    );
    assert_ne!(code, 0);
    assert!(err.starts_with("mcpgw: error:") && err.contains("not valid JSON"), "{err}");
    assert_eq!(fs::read(&file).unwrap(), b"{ not json");
    let (code, _, err) = client_config(&["--client", "cursor"], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("GW_GATEWAY_KEY"), "{err}");
}

#[test]
fn exposure_asks_for_a_view_in_the_header_or_the_stdio_environment() {
    let env = [("GW_GATEWAY_KEY", KEY)];
    let url = "http://127.0.0.1:8000/mcp/";
    let cursor = printed(&["--client", "cursor", "--url", url, "--exposure", "transparent"], &env);
    let headers = &cursor["mcpServers"]["mcpgw"]["headers"];
    assert_eq!(headers["X-Mcpgw-Tool-Exposure"], json!("transparent"), "{cursor}");
    let desktop = printed(&["--client", "claude-desktop", "--url", url, "--exposure", "transparent"], &env);
    let args = desktop["mcpServers"]["mcpgw"]["args"].to_string();
    assert!(args.contains("X-Mcpgw-Tool-Exposure:transparent"), "{args}");
    let stdio = printed(&["--client", "claude-code", "--transport", "stdio", "--exposure", "both"], &env);
    assert_eq!(stdio["mcpServers"]["mcpgw"]["env"]["GW_TOOL_EXPOSURE"], json!("both"), "{stdio}");
    let (code, _, err) = client_config(&["--client", "cursor", "--exposure", "everything"], &env);
    assert_ne!(code, 0);
    assert!(err.contains("everything"), "{err}");
}
