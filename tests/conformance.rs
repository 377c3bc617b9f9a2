//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, npm, its newest version) run THROUGH the
//! gateway: its server scenarios (tools, prompts, resources, completion, logging, progress, elicitation, sampling,
//! sessions, the stateless 2026-07-28 wire with its `input_required` rounds, caching hints and header checks) against a
//! conformance-style upstream (`mcpgw-conformance-upstream`) behind mcpgw in transparent mode with `tool_prefix: ""`,
//! and against the same upstream directly, in one test, at every revision the suite offers (`--spec-version` 2025-03-26,
//! 2025-06-18, 2025-11-25 and 2026-07-28: the scenarios of that revision, run at its wire). Every check that passes
//! directly must pass through the gateway at the same revision; the exclusions below say why each one is left out.
//!
//! The suite needs Node.js 22, installed from the npm registry (the `node` package) into `target/npm-peers/node22`,
//! and the suite into `target/npm-peers/conformance` (the README's test command, `.ci/test`, installs both; the test
//! installs them on first use). It sends no custom headers, so a small proxy in this test adds the gateway key to
//! every request.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::API_KEY;
use mcp::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const CONFORMANCE_PACKAGE: &str = "@modelcontextprotocol/conformance@0.2.0-alpha.12";
const NODE_PACKAGE: &str = "node@22.23.3";

/// The revisions the suite offers (`conformance list --spec-version` accepts exactly these).
const REVISIONS: [&str; 4] = ["2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"];

/// Checks that pass directly but are not expected through the gateway: (revision or `*`, scenario, check id or `*`,
/// why).
const EXCLUSIONS: &[(&str, &str, &str, &str)] = &[
    (
        "*",
        "server-sse-polling",
        "server-sse-priming-event",
        "the gateway answers a tools/call that the upstream sends nothing else for as one JSON body, as streamable HTTP \
         allows a server to; SSE priming events (SEP-1699) belong to resumable SSE answers, which the gateway does not \
         offer, and the suite reports them not applicable to a JSON answer (INFO)",
    ),
    (
        "*",
        "server-sse-polling",
        "server-sse-retry-field",
        "as server-sse-priming-event: a JSON answer has no SSE retry field",
    ),
    (
        "*",
        "server-sse-multiple-streams",
        "server-sse-streams-functional",
        "the gateway answers the scenario's three concurrent tools/list requests as JSON, as streamable HTTP allows (SSE \
         is optional); the suite reports that INFO (\"Server returned JSON for all requests\"), and its other check, \
         server-accepts-multiple-post-streams, passes through the gateway",
    ),
];

/// Every check of every scenario of a run: scenario -> check id -> status.
type Results = BTreeMap<String, BTreeMap<String, String>>;

/// Runs the suite (`--suite all --spec-version revision`) against `url`; the checks of each scenario, from the
/// `checks.json` files it writes.
fn run_suite(node: &Path, suite: &Path, url: &str, revision: &str, out: &Path) -> Results {
    let output = Command::new(node)
        .arg(suite)
        .args(["server", "--url", url, "--suite", "all", "--spec-version", revision, "-o"])
        .arg(out)
        .stdin(Stdio::null())
        .output()
        .expect("run the conformance suite");
    let log = format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    let mut results = Results::new();
    for entry in std::fs::read_dir(out).unwrap_or_else(|e| panic!("no results in {} ({e}):\n{log}", out.display())) {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        // `server-<scenario>-<timestamp>`, the timestamp always 24 characters (`2026-11-25T21-57-33-623Z`).
        let scenario = name.strip_prefix("server-").unwrap_or(&name);
        let scenario = scenario[..scenario.len().saturating_sub(25)].to_string();
        let found: Value = serde_json::from_slice(&std::fs::read(dir.join("checks.json")).unwrap()).unwrap();
        let checks = results.entry(scenario).or_default();
        for check in found.as_array().into_iter().flatten() {
            let id = check["id"].as_str().unwrap_or("?").to_string();
            let status = check["status"].as_str().unwrap_or("?").to_string();
            // A check repeated within a scenario keeps its worst status.
            let worst = checks.get(&id).is_some_and(|s| s == "FAILURE");
            if !worst {
                checks.insert(id, status);
            }
        }
    }
    assert!(!results.is_empty(), "the suite wrote no results:\n{log}");
    results
}

/// A proxy on `127.0.0.1` that sends every request on to `target` with `Authorization: Bearer key` added (the suite
/// cannot send headers). Request heads are read one at a time and their `Content-Length` bodies passed on; answers
/// (SSE streams included) are copied back as they come.
async fn auth_proxy(target: String, key: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                let Ok(upstream) = TcpStream::connect(&target).await else { return };
                let (client_read, mut client_write) = client.into_split();
                let (mut upstream_read, mut upstream_write) = upstream.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut upstream_read, &mut client_write).await;
                });
                let mut client_read = BufReader::new(client_read);
                loop {
                    let mut head = String::new();
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        match client_read.read_line(&mut line).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {}
                        }
                        if line == "\r\n" || line == "\n" {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':')
                            && name.trim().eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap_or(0);
                        }
                        head.push_str(&line);
                    }
                    head.push_str(&format!("Authorization: Bearer {key}\r\n\r\n"));
                    let mut body = vec![0u8; length];
                    if client_read.read_exact(&mut body).await.is_err()
                        || upstream_write.write_all(head.as_bytes()).await.is_err()
                        || upstream_write.write_all(&body).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    port
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until something listens on `port`.
fn wait_listening(port: u16) {
    let ready =
        common::wait_until(Duration::from_secs(20), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    assert!(ready, "nothing listens on port {port}");
}

/// Runs the suite at every revision of [`REVISIONS`] against `url`, the revisions in parallel (each run is mostly
/// waiting on the server); revision -> its results.
fn run_revisions(node: &Path, suite: &Path, url: &str, out: &Path) -> BTreeMap<String, Results> {
    std::thread::scope(|scope| {
        let runs: Vec<_> = REVISIONS
            .iter()
            .map(|revision| {
                let dir = out.join(revision);
                (revision.to_string(), scope.spawn(move || run_suite(node, suite, url, revision, &dir)))
            })
            .collect();
        runs.into_iter().map(|(revision, run)| (revision, run.join().unwrap())).collect()
    })
}

#[test]
fn the_conformance_scenarios_pass_through_the_gateway_as_they_pass_directly() {
    let node = npm_peer("node22", NODE_PACKAGE, &[".bin", "node"]);
    let suite =
        npm_peer("conformance", CONFORMANCE_PACKAGE, &["@modelcontextprotocol", "conformance", "dist", "index.js"]);
    let upstream_bin = env!("CARGO_BIN_EXE_mcpgw-conformance-upstream");
    let out = tempfile::tempdir().unwrap();

    // Directly: the upstream over streamable HTTP.
    let port = free_port();
    let mut direct = Command::new(upstream_bin)
        .args(["--http", &format!("127.0.0.1:{port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the conformance upstream");
    wait_listening(port);
    let direct_results =
        run_revisions(&node, &suite, &format!("http://localhost:{port}/mcp"), &out.path().join("direct"));
    let _ = direct.kill();
    let _ = direct.wait();

    // Through the gateway: the same upstream over stdio, its names unchanged.
    let server = json!({
        "server_name": "conformance",
        "tool_prefix": "",
        "config": {"command": upstream_bin, "args": []},
    });
    let gw = TestGateway::start(&config_with(vec![server], json!({"tool_exposure": "transparent"})));
    let proxy = runtime().block_on(async {
        let port = auth_proxy(gw.authority().to_string(), API_KEY).await;
        let url = format!("http://localhost:{port}/mcp/");
        let node = node.clone();
        let suite = suite.clone();
        let dir = out.path().join("gateway");
        tokio::task::spawn_blocking(move || run_revisions(&node, &suite, &url, &dir)).await.unwrap()
    });

    let mut lost = Vec::new();
    let mut summary = String::new();
    let mut direct_total = 0;
    for (revision, results) in &direct_results {
        let (mut passed, mut direct_passed) = (0, 0);
        for (scenario, checks) in results {
            for (check, status) in checks {
                if status != "SUCCESS" {
                    continue;
                }
                direct_passed += 1;
                let excluded = EXCLUSIONS
                    .iter()
                    .any(|(r, s, c, _)| (*r == "*" || r == revision) && s == scenario && (*c == "*" || c == check));
                let through =
                    proxy[revision].get(scenario).and_then(|c| c.get(check)).map_or("missing", String::as_str);
                if through == "SUCCESS" {
                    passed += 1;
                } else if !excluded {
                    lost.push(format!("{revision} {scenario} / {check}: {through}"));
                }
            }
        }
        direct_total += direct_passed;
        summary.push_str(&format!(
            "{revision}: {} scenarios, {passed} of the {direct_passed} checks that pass directly pass through the gateway\n",
            results.len()
        ));
    }
    eprintln!("conformance {CONFORMANCE_PACKAGE}:\n{summary}");
    assert!(direct_total >= 100, "the upstream passes too few checks directly: {direct_results:#?}");
    assert!(
        lost.is_empty(),
        "checks that pass directly fail through the gateway:\n{}\n\n{summary}\nthrough the gateway: {proxy:#?}\n\ngateway log:\n{}",
        lost.join("\n"),
        gw.logs()
    );
}
