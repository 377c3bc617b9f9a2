//! Remote upstream server entries in the configuration (contract section 9, issue 18): `config.url` with its
//! `transport`, `headers` and `tls`, refused when they are not right (a problem in `check-config`, 400 on the admin
//! API, exit code 3 from the CLI), the header values masked in every listing, and `config add-server --url`.

mod common;

use common::*;
use serde_json::{Value, json};

const HEADER_SECRET: &str = "remote-header-secret-0123456789";

fn remote_entry(url: &str) -> Value {
    json!({"server_name": "remote", "description": "A hosted server",
           "config": {"url": url, "transport": "streamable_http", "headers": {"X-Api-Key": HEADER_SECRET}}})
}

#[test]
fn check_config_names_every_problem_of_a_remote_entry() {
    let mut config = fixture();
    let servers = json!([
        {"server_name": "ftp", "config": {"url": "ftp://example.com/mcp"}},
        {"server_name": "both", "config": {"url": "https://example.com/mcp", "command": "npx"}},
        {"server_name": "odd", "config": {"url": "https://example.com/mcp", "transport": "websocket",
                                          "headers": {"Mcp-Session-Id": "x"}}},
        {"server_name": "local", "config": {"command": "npx", "headers": {"A": "b"}}},
    ]);
    config["mcp_configs"][CONFIG_ID]["mcp_config"] = servers;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.json");
    write_json(&path, &config);
    let (status, out, err) = run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success());
    let text = out + &err;
    let base = format!("mcp_configs.{CONFIG_ID}.mcp_config");
    for expected in [
        format!("{base}[0].config.url: must be an http:// or https:// URL"),
        format!("{base}[1].config: give either command (a local server) or url (a remote server), not both"),
        format!("{base}[2].config.transport: must be \"streamable_http\" or \"sse\""),
        format!("{base}[2].config.headers.Mcp-Session-Id: set by the gateway itself"),
        format!("{base}[3].config.headers: only for a remote server (one with a url)"),
    ] {
        assert!(text.contains(&expected), "{expected:?} in\n{text}");
    }
}

#[test]
fn the_admin_api_takes_remote_entries_masks_their_headers_and_refuses_bad_urls() {
    let (_dir, gw) = start_fixture();
    let path = format!("/api/v1/configs/{CONFIG_ID}/servers");
    let refused = gw.post(&path, &remote_entry("file:///etc/passwd"));
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(refused.text.contains("http:// or https://"), "{}", refused.text);

    let created = gw.post(&path, &remote_entry("https://mcp.example.com/mcp"));
    assert!(created.status == 200 || created.status == 201, "{}", created.text);
    let listed = gw.get(&format!("/api/v1/configs/{CONFIG_ID}"));
    assert!(!listed.text.contains(HEADER_SECRET), "header values are masked: {}", listed.text);
    let server = listed.body["data"]["servers"]
        .as_array()
        .and_then(|servers| servers.iter().find(|s| s["server_name"] == json!("remote")).cloned())
        .unwrap_or_else(|| panic!("the remote server is listed: {}", listed.text));
    assert_eq!(server["config"]["url"], json!("https://mcp.example.com/mcp"));
    assert!(server["config"]["headers"]["X-Api-Key"].is_string());
    // The file keeps the value itself.
    let file = std::fs::read_to_string(&gw.config_path).unwrap();
    assert!(file.contains(HEADER_SECRET));
}

#[test]
fn the_cli_adds_a_remote_server_with_url_transport_and_headers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.json");
    write_json(&path, &fixture());
    let p = path.to_str().unwrap();
    let header = format!("X-Api-Key={HEADER_SECRET}");
    let args = [
        "config",
        "add-server",
        CONFIG_NAME,
        "--name",
        "hosted",
        "--url",
        "https://mcp.example.com/mcp",
        "--transport",
        "sse",
        "--header",
        &header,
        "--config",
        p,
    ];
    let (status, out, err) = run_cli(&args, &[]);
    assert!(status.success(), "{out}\n{err}");
    assert!(!out.contains(HEADER_SECRET) && !err.contains(HEADER_SECRET), "never printed: {out}\n{err}");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let servers = file["mcp_configs"][CONFIG_ID]["mcp_config"].as_array().unwrap().clone();
    let hosted = servers.iter().find(|s| s["server_name"] == json!("hosted")).expect("added");
    assert_eq!(
        hosted["config"],
        json!({"args": [], "url": "https://mcp.example.com/mcp", "transport": "sse",
               "headers": {"X-Api-Key": HEADER_SECRET}})
    );
    let bad = ["config", "add-server", CONFIG_NAME, "--name", "bad", "--url", "gopher://x", "--config", p];
    let (status, out, err) = run_cli(&bad, &[]);
    assert_eq!(status.code(), Some(3), "{out}\n{err}");
    assert!(err.contains("http:// or https://"), "{err}");
}
