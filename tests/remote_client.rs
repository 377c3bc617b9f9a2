//! The gateway's streamable HTTP client toward remote MCP servers (contract section 9, issue 18), against a real
//! remote server: `mcpgw-conformance-upstream --http` (rmcp's streamable HTTP server with sessions). The session is
//! opened, tools listed and called, the server's progress and sampling request during a call reach the call's relay,
//! and a server restarted (its sessions gone, 404) gets a new session and the request once more; then the same server
//! behind the gateway, discovered and called as a process is.

mod common;
#[path = "common/http_mock.rs"]
mod http_mock;
#[path = "common/mcp.rs"]
mod mcp;
#[path = "common/tls_issuer.rs"]
mod tls_issuer;

use std::process::Child;
use std::time::Duration;

use mcpgw::upstream::http_client::HttpRpc;
use mcpgw::upstream::relay::FromServer;
use mcpgw::upstream::remote::Endpoint;
use serde_json::{Value, json};
use tokio::sync::mpsc;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn start_remote(port: u16) -> Child {
    mcp::start_conformance_http(port, &[])
}

fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

#[test]
fn a_remote_session_lists_calls_relays_and_survives_a_restart() {
    let port = free_port();
    let mut remote = start_remote(port);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let url = reqwest::Url::parse(&format!("http://localhost:{port}/mcp")).unwrap();
        let http = mcpgw::upstream::remote::client(&url, None, Duration::from_secs(30)).await.unwrap();
        let client =
            HttpRpc::new(Endpoint::new(http, &[("X-Api-Key".into(), "remote-key".into())], None), url, 1 << 20)
                .unwrap();
        let info = client.initialize().await.expect("initialize");
        assert!(info.capabilities.tools.is_some(), "{info:?}");

        let listed = client.request("tools/list", json!({}), None).await.expect("tools/list");
        let names: Vec<&str> = listed["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
        assert!(names.contains(&"test_simple_text"), "{names:?}");
        let called = client.request("tools/call", json!({"name": "test_simple_text", "arguments": {}}), None).await;
        assert!(!text(&called.expect("tools/call")).is_empty());

        // Progress during the call reaches the relay, in order, before the answer.
        let (relay, mut messages) = mpsc::channel(16);
        let params = json!({"name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": "p-1"}});
        client.request("tools/call", params, Some(&relay)).await.expect("progress call");
        let mut progress = Vec::new();
        while let Ok(FromServer::Notification { method, params }) = messages.try_recv() {
            assert_eq!(method, "notifications/progress");
            progress.push(params["progress"].as_f64().unwrap_or(-1.0));
        }
        assert_eq!(progress, [0.0, 50.0, 100.0]);

        // The server's sampling request is answered through the relay.
        let answering = tokio::spawn(async move {
            while let Some(message) = messages.recv().await {
                if let FromServer::Request { method, answer, .. } = message {
                    assert_eq!(method, "sampling/createMessage");
                    let sampled = json!({"model": "m", "role": "assistant",
                                         "content": {"type": "text", "text": "answered by the relay"}});
                    let _ = answer.send(Ok(sampled));
                }
            }
        });
        let params = json!({"name": "test_sampling", "arguments": {"prompt": "hello"}});
        let sampled = client.request("tools/call", params, Some(&relay)).await.expect("sampling call");
        assert!(sampled.to_string().contains("answered by the relay"), "{sampled}");
        drop(relay);
        answering.await.unwrap();

        // Restarted: the session is gone (404); a new one is opened and the request sent again.
        let _ = remote.kill();
        let _ = remote.wait();
        remote = start_remote(port);
        let again = client.request("tools/list", json!({}), None).await.expect("tools/list after a restart");
        assert!(again["tools"].as_array().is_some_and(|tools| !tools.is_empty()));
        client.close().await;
    });
    let _ = remote.kill();
    let _ = remote.wait();
}

#[test]
fn a_remote_server_that_is_down_fails_at_once() {
    let port = free_port();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let url = reqwest::Url::parse(&format!("http://127.0.0.1:{port}/mcp")).unwrap();
        let http = mcpgw::upstream::remote::client(&url, None, Duration::from_secs(30)).await.unwrap();
        let client = HttpRpc::new(Endpoint::new(http, &[], None), url, 1 << 20).unwrap();
        let started = std::time::Instant::now();
        let failed = client.initialize().await.expect_err("nothing listens");
        assert!(failed.to_string().contains("could not be reached"), "{failed}");
        assert!(started.elapsed() < Duration::from_secs(5), "no hang: {:?}", started.elapsed());
    });
}

/// Through the gateway: a remote server in the configuration is discovered and called as a local one is (secure calls
/// and transparent calls with their progress), and a remote that is down answers UPSTREAM_ERROR, not a hang.
#[test]
fn the_gateway_serves_a_remote_server_as_it_serves_a_process() {
    use mcp::*;
    let port = free_port();
    let mut remote = start_remote(port);
    let down = free_port();
    let servers = vec![
        json!({"server_name": "remote", "config": {"url": format!("http://127.0.0.1:{port}/mcp"),
               "headers": {"X-Api-Key": "remote-key"}}}),
        json!({"server_name": "down", "config": {"url": format!("http://127.0.0.1:{down}/mcp")}}),
    ];
    let gw = TestGateway::start(&config_with(servers, json!({"tool_exposure": "both"})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, common::API_KEY).await;
        let found = call(&client, "gw_discover_all_tools", json!({"server_name": "remote"})).await;
        assert_eq!(found["source"], json!("discovery"), "{found}");
        let answer = call(&client, "gw_secure_call_tools", calls("remote", &[("test_simple_text", json!({}))])).await;
        assert_eq!(answer["results"][0]["status"], json!("success"), "{answer}");
        let direct = try_call(&client, "remote__test_simple_text", json!({})).await.expect("transparent call");
        assert!(!upstream_text(&direct).is_empty(), "{direct}");
        let refused = call(&client, "gw_discover_all_tools", json!({"server_name": "down"})).await;
        assert_eq!(refused["error_code"], json!("UPSTREAM_ERROR"), "{refused}");
        let (sessions, processes) = tokio::task::block_in_place(|| {
            (
                metric(&gw, r#"mcpgw_upstream_connections{transport="streamable_http"}"#),
                metric(&gw, "mcpgw_upstream_processes"),
            )
        });
        assert_eq!((sessions, processes), (1.0, 0.0), "a remote session is counted, and not as a process");

        // The remote restarts and forgets the gateway's session: the next call opens a new one and succeeds.
        let _ = remote.kill();
        let _ = remote.wait();
        remote = start_remote(port);
        let answer = call(&client, "gw_secure_call_tools", calls("remote", &[("test_simple_text", json!({}))])).await;
        assert_eq!(answer["results"][0]["status"], json!("success"), "after the restart: {answer}");
        client.cancel().await.unwrap();
    });
    let _ = remote.kill();
    let _ = remote.wait();
}

/// The headers a remote server received with one call, through the gateway (`test_request_headers`).
async fn headers_seen(client: &mcp::McpClient, server: &str) -> Value {
    let answer =
        mcp::call(client, "gw_secure_call_tools", mcp::calls(server, &[("test_request_headers", json!({}))])).await;
    assert_eq!(answer["results"][0]["status"], json!("success"), "{answer}");
    serde_json::from_str(&mcp::success_text(&answer["results"][0], "test_request_headers")).expect("headers as JSON")
}

/// A hosted server behind an OAuth issuer: the entry's headers and the access token reach it with every request and
/// the client's own key never does; when the server stops taking the token (401), the gateway fetches a new one once
/// and the call succeeds without the client noticing. Neither the header's value nor a token is logged.
#[test]
fn headers_and_the_token_reach_the_remote_a_401_refreshes_it_and_the_client_key_never_does() {
    use mcp::*;
    const HEADER_VALUE: &str = "remote-header-value-5f2c";
    let issuer = http_mock::HttpMock::start(vec![(
        "/token",
        200,
        json!({"access_token": "first-token-aaaa", "token_type": "Bearer", "expires_in": 3600}),
    )]);
    let dir = tempfile::tempdir().unwrap();
    let accepted = dir.path().join("accepted-token");
    std::fs::write(&accepted, "first-token-aaaa").unwrap();
    let port = free_port();
    let mut remote = mcp::start_conformance_http(port, &["--require-bearer-file", accepted.to_str().unwrap()]);
    let server = json!({
        "server_name": "hosted",
        "config": {"url": format!("http://127.0.0.1:{port}/mcp"), "headers": {"X-Api-Key": HEADER_VALUE}},
        "oauth_config": {"enabled": true, "OAUTH_GRANT_TYPE": "client_credentials", "OAUTH_CLIENT_ID": "gw",
                         "OAUTH_CLIENT_SECRET": "issuer-secret-9d8e", "OAUTH_TOKEN_URL": format!("{}/token", issuer.base_url)}
    });
    let gw = TestGateway::start(&config_with(vec![server], json!({})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, common::API_KEY).await;
        let headers = headers_seen(&client, "hosted").await;
        assert_eq!(headers["x-api-key"], json!(HEADER_VALUE), "{headers}");
        assert_eq!(headers["authorization"], json!("Bearer first-token-aaaa"), "{headers}");
        assert!(!headers.to_string().contains(common::API_KEY), "the client's key reached the remote: {headers}");
        assert!(headers.get("mcp-session-id").is_some(), "the gateway's own session: {headers}");

        // The server stops taking the first token; the issuer now gives the second.
        std::fs::write(&accepted, "second-token-bbbb").unwrap();
        issuer.set(
            "/token",
            200,
            json!({"access_token": "second-token-bbbb", "token_type": "Bearer", "expires_in": 3600}),
        );
        let headers = headers_seen(&client, "hosted").await;
        assert_eq!(headers["authorization"], json!("Bearer second-token-bbbb"), "{headers}");
        let fetched = issuer.seen().iter().filter(|seen| seen.path == "/token").count();
        assert_eq!(fetched, 2, "one token, then one forced refresh");
        // The same session went on with the new token.
        let again = headers_seen(&client, "hosted").await;
        assert_eq!(again["mcp-session-id"], headers["mcp-session-id"], "{again}");

        // A token the server never takes: one refresh, then the call fails as UPSTREAM_ERROR, and is not repeated.
        std::fs::write(&accepted, "nobody-gets-this").unwrap();
        let answer =
            call(&client, "gw_secure_call_tools", calls("hosted", &[("test_request_headers", json!({}))])).await;
        let failed = &answer["results"][0];
        assert_eq!(failed["error_code"], json!("UPSTREAM_ERROR"), "{answer}");
        assert!(failed.to_string().contains("401"), "{answer}");
        assert_eq!(issuer.seen().iter().filter(|seen| seen.path == "/token").count(), 3);
        client.cancel().await.unwrap();
    });
    let logs = gw.logs();
    for secret in [HEADER_VALUE, "first-token-aaaa", "second-token-bbbb", "issuer-secret-9d8e"] {
        assert!(!logs.contains(secret), "{secret} in the logs:\n{logs}");
    }
    let _ = remote.kill();
    let _ = remote.wait();
}

/// Contract 14: a remote server that refuses every token (401 on every request) costs the issuer at most one token
/// request per client request: the first request obtains a token and, the server refusing that brand-new token, does
/// not fetch another; later requests refresh the cached token once each. The calls fail as UPSTREAM_ERROR naming 401.
#[test]
fn a_remote_that_refuses_every_token_gets_at_most_one_token_request_per_request() {
    use mcp::*;
    let issuer = http_mock::HttpMock::start(vec![(
        "/token",
        200,
        json!({"access_token": "refused-token-cccc", "token_type": "Bearer", "expires_in": 3600}),
    )]);
    let remote = http_mock::HttpMock::start(vec![("/mcp", 401, json!({"error": "invalid_token"}))]);
    let server = json!({
        "server_name": "refusing",
        "config": {"url": format!("{}/mcp", remote.base_url)},
        "oauth_config": {"enabled": true, "OAUTH_GRANT_TYPE": "client_credentials", "OAUTH_CLIENT_ID": "gw",
                         "OAUTH_CLIENT_SECRET": "issuer-secret-7a6b",
                         "OAUTH_TOKEN_URL": format!("{}/token", issuer.base_url)}
    });
    let gw = TestGateway::start(&config_with(vec![server], json!({})));
    let token_requests = || issuer.seen().iter().filter(|seen| seen.path == "/token").count();
    runtime().block_on(async {
        let client = connect(&gw.mcp, common::API_KEY).await;
        for round in 1..=3 {
            let before = token_requests();
            let answer = call(&client, "gw_secure_call_tools", calls("refusing", &[("anything", json!({}))])).await;
            let failed = &answer["results"][0];
            assert_eq!(failed["error_code"], json!("UPSTREAM_ERROR"), "{answer}");
            assert!(failed.to_string().contains("401"), "{answer}");
            assert!(token_requests() - before <= 1, "round {round}: {} token requests", token_requests() - before);
        }
        client.cancel().await.unwrap();
    });
    // The first request obtained the token and did not ask again when the server refused it.
    assert!(remote.seen().iter().all(|seen| seen.path == "/mcp"), "{:?}", remote.seen());
    assert!(token_requests() >= 1);
}

/// A remote server behind mutual TLS: with the entry's CA bundle and client certificate the gateway reaches it; an
/// entry without the client certificate is refused in the handshake, one without the CA does not trust the server,
/// and both are UPSTREAM_ERROR with the reason.
#[test]
fn mutual_tls_reaches_a_remote_that_requires_a_client_certificate() {
    use mcp::*;
    let port = free_port();
    let mut remote = start_remote(port);
    let front = tls_issuer::TlsFront::start(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    let url = format!("https://localhost:{}/mcp", front.port);
    let path = |name: &str| front.path(name).to_str().unwrap().to_string();
    let servers = vec![
        json!({"server_name": "mtls", "config": {"url": url, "tls": {"ca_bundle_path": path("ca.pem"),
               "client_cert_path": path("client.pem"), "client_key_path": path("client-key.pem")}}}),
        json!({"server_name": "nocert", "config": {"url": url, "tls": {"ca_bundle_path": path("ca.pem")}}}),
        json!({"server_name": "noca", "config": {"url": url}}),
    ];
    let gw = TestGateway::start(&config_with(servers, json!({})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, common::API_KEY).await;
        let answer = call(&client, "gw_secure_call_tools", calls("mtls", &[("test_simple_text", json!({}))])).await;
        assert_eq!(answer["results"][0]["status"], json!("success"), "{answer}");
        for (server, why) in [("nocert", "CertificateRequired"), ("noca", "UnknownIssuer")] {
            let refused = call(&client, "gw_discover_all_tools", json!({"server_name": server})).await;
            assert_eq!(refused["error_code"], json!("UPSTREAM_ERROR"), "{server}: {refused}");
            assert!(refused["message"].as_str().is_some_and(|m| m.contains(why)), "{server}: {refused}");
        }
        client.cancel().await.unwrap();
    });
    assert!(*front.refused.lock().unwrap() >= 1, "the front refused the handshake without a client certificate");
    let _ = remote.kill();
    let _ = remote.wait();
}

/// `session_affinity: "per_session"` on a remote server: each client session gets a session of its own with the
/// remote (the gateway's MCP session id the remote sees differs), kept across that client's calls.
#[test]
fn per_session_affinity_gives_each_client_session_its_own_remote_session() {
    use mcp::*;
    let port = free_port();
    let mut remote = start_remote(port);
    let server = json!({"server_name": "affine",
                        "config": {"url": format!("http://127.0.0.1:{port}/mcp"), "session_affinity": "per_session"}});
    let gw = TestGateway::start(&config_with(vec![server], json!({})));
    runtime().block_on(async {
        let first = connect(&gw.mcp, common::API_KEY).await;
        let second = connect(&gw.mcp, common::API_KEY).await;
        let a = headers_seen(&first, "affine").await["mcp-session-id"].clone();
        let b = headers_seen(&second, "affine").await["mcp-session-id"].clone();
        let a_again = headers_seen(&first, "affine").await["mcp-session-id"].clone();
        assert!(a.is_string() && b.is_string(), "{a} {b}");
        assert_ne!(a, b, "two client sessions share one remote session");
        assert_eq!(a, a_again, "a client session keeps its remote session");
        first.cancel().await.unwrap();
        second.cancel().await.unwrap();
    });
    let _ = remote.kill();
    let _ = remote.wait();
}

/// A hostile server spoken to in 2026-07-28 cannot keep a call asking questions: a round of more than 16 questions
/// fails the call, and so does a 17th round; no question is put to a client without a relay (a discovery). The
/// probe and every request name the revision and carry no session.
#[test]
fn a_2026_07_28_server_that_keeps_asking_is_cut_off() {
    let question = |n: usize| {
        (0..n)
            .map(|i| (format!("q{i}"), json!({"method": "elicitation/create", "params": {"message": "again?"}})))
            .collect::<serde_json::Map<String, Value>>()
    };
    // One answer for every request: server/discover reads supportedVersions, a call reads the questions.
    let asking = |n: usize| {
        json!({"jsonrpc": "2.0", "id": "$request_id", "result": {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}},
               "resultType": "input_required", "inputRequests": question(n), "requestState": "s"}})
    };
    let remote = http_mock::HttpMock::start(vec![("/mcp", 200, asking(17))]);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let url = reqwest::Url::parse(&format!("{}/mcp", remote.base_url)).unwrap();
        let http = mcpgw::upstream::remote::client(&url, None, Duration::from_secs(30)).await.unwrap();
        let client = HttpRpc::new(Endpoint::new(http, &[], None), url, 1 << 20).unwrap();
        client.initialize().await.expect("discovered");
        assert!(client.is_modern());
        let call = json!({"name": "t", "arguments": {}});
        let (relay, mut messages) = mpsc::channel(64);
        let answering = tokio::spawn(async move {
            let mut asked = 0;
            while let Some(message) = messages.recv().await {
                if let FromServer::Request { answer, .. } = message {
                    asked += 1;
                    let _ = answer.send(Ok(json!({"action": "accept", "content": {}})));
                }
            }
            asked
        });
        let many = client.request("tools/call", call.clone(), Some(&relay)).await.expect_err("17 questions");
        assert!(many.to_string().contains("17 questions in one round"), "{many}");
        remote.set("/mcp", 200, asking(1));
        let endless = client.request("tools/call", call.clone(), Some(&relay)).await.expect_err("endless rounds");
        assert!(endless.to_string().contains("more than 16 rounds"), "{endless}");
        let unasked = client.request("tools/call", call, None).await.expect_err("no relay");
        assert!(matches!(unasked, mcpgw::upstream::http_client::HttpRpcError::Server { .. }), "{unasked}");
        drop(relay);
        assert_eq!(answering.await.unwrap(), 16, "one question a round, 16 rounds; none of the 17");
    });
    let seen = remote.seen();
    assert!(seen.iter().all(|s| s.headers.get("mcp-protocol-version").map(String::as_str) == Some("2026-07-28")));
    assert!(seen.iter().all(|s| !s.headers.contains_key("mcp-session-id")));
    assert!(seen.iter().any(|s| s.headers.get("mcp-method").map(String::as_str) == Some("server/discover")));
}

/// A proxy as an egress proxy is: `CONNECT host:port` tunnels, and requests in absolute form forwarded to their
/// host. It notes each connection's first line and its `Proxy-Authorization`.
struct TestProxy {
    port: u16,
    seen: Seen,
}

/// Each connection's first line and `Proxy-Authorization`, as the proxy saw them.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

impl TestProxy {
    fn start() -> TestProxy {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Seen = std::sync::Arc::default();
        let noted = std::sync::Arc::clone(&seen);
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let noted = std::sync::Arc::clone(&noted);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(client.try_clone().unwrap());
                    let mut head = Vec::new();
                    let mut first = String::new();
                    let mut auth = None;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if first.is_empty() {
                            first = line.trim_end().to_string();
                        } else if let Some(value) = line.to_ascii_lowercase().strip_prefix("proxy-authorization:") {
                            auth = Some(line[line.len() - value.len()..].trim().to_string());
                        }
                        head.extend_from_slice(line.as_bytes());
                        if line == "\r\n" {
                            break;
                        }
                    }
                    noted.lock().unwrap().push((first.clone(), auth));
                    let mut parts = first.split(' ');
                    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                    let host = if method == "CONNECT" {
                        target.to_string()
                    } else {
                        target.trim_start_matches("http://").split('/').next().unwrap_or("").to_string()
                    };
                    let Ok(mut upstream) = std::net::TcpStream::connect(host.replace("localhost", "127.0.0.1")) else {
                        return;
                    };
                    // What came after the head (a request's body) is in the reader's buffer.
                    let early = reader.buffer().to_vec();
                    let mut client = reader.into_inner();
                    if method == "CONNECT" {
                        client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").unwrap();
                    } else {
                        upstream.write_all(&head).unwrap();
                    }
                    upstream.write_all(&early).unwrap();
                    let (mut up_read, mut client_write) = (upstream.try_clone().unwrap(), client.try_clone().unwrap());
                    std::thread::spawn(move || std::io::copy(&mut up_read, &mut client_write));
                    let _ = std::io::copy(&mut client, &mut upstream);
                });
            }
        });
        TestProxy { port, seen }
    }
}

/// With `HTTPS_PROXY`/`HTTP_PROXY` in its environment (as curl and reqwest read them), the gateway reaches an
/// `https` remote through a `CONNECT` tunnel and an `http` one through the proxy as a forward proxy, both with the
/// proxy URL's credentials; a host in `NO_PROXY` is reached directly.
#[test]
fn remote_servers_are_reached_through_the_proxy_the_environment_names() {
    use mcp::*;
    let port = free_port();
    let mut remote = start_remote(port);
    let front = tls_issuer::TlsFront::start(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    let path = |name: &str| front.path(name).to_str().unwrap().to_string();
    let proxy = TestProxy::start();
    let proxy_url = format!("http://user:pw@127.0.0.1:{}", proxy.port);
    let servers = vec![
        json!({"server_name": "tls", "config": {"url": format!("https://localhost:{}/mcp", front.port),
               "tls": {"ca_bundle_path": path("ca.pem"), "client_cert_path": path("client.pem"),
                       "client_key_path": path("client-key.pem")}}}),
        json!({"server_name": "plain", "config": {"url": format!("http://localhost:{port}/mcp")}}),
        json!({"server_name": "direct", "config": {"url": format!("http://127.0.0.1:{port}/mcp")}}),
    ];
    let envs = [("HTTPS_PROXY", proxy_url.as_str()), ("HTTP_PROXY", proxy_url.as_str()), ("NO_PROXY", "127.0.0.1")];
    let gw = TestGateway::start_with(&config_with(servers, json!({})), &envs);
    runtime().block_on(async {
        let client = connect(&gw.mcp, common::API_KEY).await;
        for server in ["tls", "plain", "direct"] {
            let answer = call(&client, "gw_secure_call_tools", calls(server, &[("test_simple_text", json!({}))])).await;
            assert_eq!(answer["results"][0]["status"], json!("success"), "{server}: {answer}");
        }
        client.cancel().await.unwrap();
    });
    let seen = proxy.seen.lock().unwrap().clone();
    let basic = Some("Basic dXNlcjpwdw==".to_string());
    assert!(seen.contains(&(format!("CONNECT localhost:{} HTTP/1.1", front.port), basic.clone())), "{seen:?}");
    assert!(
        seen.iter()
            .any(|(line, auth)| line.starts_with(&format!("POST http://localhost:{port}/mcp ")) && *auth == basic),
        "{seen:?}"
    );
    assert!(!seen.iter().any(|(line, _)| line.contains("127.0.0.1")), "NO_PROXY: {seen:?}");
    assert!(!gw.logs().contains("user:pw"), "the proxy's credentials are not logged");
    let _ = remote.kill();
    let _ = remote.wait();
}

/// A server that takes the TCP connection and never answers the TLS handshake fails the connect within
/// `connectivity_timeout`, not at the session's start timeout.
#[test]
fn a_tls_handshake_that_never_finishes_fails_within_the_connectivity_timeout() {
    use mcp::*;
    let tarpit = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tarpit.local_addr().unwrap().port();
    let held = std::thread::spawn(move || tarpit.incoming().take(4).map_while(Result::ok).collect::<Vec<_>>());
    let server = json!({"server_name": "tarpit", "config": {"url": format!("https://127.0.0.1:{port}/mcp")}});
    let common =
        json!({"upstream_pool": {"start_timeout_seconds": 20}, "timeout_settings": {"connectivity_timeout": 0.5}});
    let gw = TestGateway::start(&config_with(vec![server], common));
    runtime().block_on(async {
        let client = connect(&gw.mcp, common::API_KEY).await;
        let started = std::time::Instant::now();
        let refused = call(&client, "gw_discover_all_tools", json!({"server_name": "tarpit"})).await;
        assert_eq!(refused["error_code"], json!("UPSTREAM_ERROR"), "{refused}");
        assert!(refused["message"].as_str().is_some_and(|m| m.contains("connectivity_timeout")), "{refused}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "took {:?}", started.elapsed());
        client.cancel().await.unwrap();
    });
    drop(gw);
    drop(held);
}

/// TLS files that are not what they should be fail the server's session with the field at fault named, and change
/// nothing else: a bundle without a certificate, a client certificate without its key.
#[test]
fn tls_files_that_are_not_pem_name_the_field_at_fault() {
    use mcp::*;
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let junk = junk.to_str().unwrap();
    let url = "https://127.0.0.1:9/mcp";
    let servers = vec![
        json!({"server_name": "badca", "config": {"url": url, "tls": {"ca_bundle_path": junk}}}),
        json!({"server_name": "badcert", "config": {"url": url,
               "tls": {"client_cert_path": junk, "client_key_path": junk}}}),
    ];
    let gw = TestGateway::start(&config_with(servers, json!({})));
    runtime().block_on(async {
        let client = connect(&gw.mcp, common::API_KEY).await;
        for (server, why) in [
            ("badca", format!("tls.ca_bundle_path: no PEM certificate in {junk}")),
            ("badcert", "tls.client_cert_path, tls.client_key_path: not a PEM certificate and private key".into()),
        ] {
            let refused = call(&client, "gw_discover_all_tools", json!({"server_name": server})).await;
            assert_eq!(refused["error_code"], json!("UPSTREAM_ERROR"), "{server}: {refused}");
            assert!(refused["message"].as_str().is_some_and(|m| m.contains(&why)), "{server}: {refused}");
        }
        client.cancel().await.unwrap();
    });
}
