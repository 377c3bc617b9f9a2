//! The gateway against the same mock upstream called directly, measured in one run.
//!
//! Run with `cargo bench --bench gateway`. It starts the release `mcpgw` binary with the mock upstream
//! (`mcpgw-mock-upstream`) as its one server and measures `gw_secure_call_tools` echo calls over streamable HTTP with
//! rmcp's client; the baseline is rmcp's client calling the mock upstream's `echo` directly over stdio. Printed:
//! - latency p50 and p99 at concurrency 1 (goal: the gateway adds at most 0.3 ms at p50);
//! - throughput at concurrency 16 and 64 (goal at 16: at least half of direct);
//! - the gateway's idle RSS (goal: at most 20 MiB) and the time from start to ready (goal: within 100 ms);
//! - the cost of local guardrails (keywords on input and output, PII redaction and restoration) on the same call.
//!
//! Knobs: `MCPGW_BENCH_CALLS` (latency samples, default 2000), `MCPGW_BENCH_SECONDS` (per throughput run, default 3),
//! `MCPGW_BENCH_PROCESSES` (the gateway's `max_processes_per_server`, default 4).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{Peer, RoleClient};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientLifecycleMode, ClientServiceExt, ServiceExt};
use serde_json::{Map, Value, json};

const KEY: &str = "gw_bench-key-0000000000000000000000000000000000";

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A running gateway and its addresses.
struct Gateway {
    child: Child,
    gateway: String,
    ready_after: Duration,
    _dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

fn start_gateway(processes: u64) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gw.json");
    let config = json!({
        "admin_apikey": "bench-admin-key-0123456789abcdefghijklmnop",
        "common_mcp_gateway_config": {"gw_log_level": "WARNING", "upstream_pool": {"max_processes_per_server": processes}},
        "plugins": {"guardrails": {"provider": "custom_keyword", "config": {"blocked_keywords": ["drop table", "rm -rf"]}}},
        "mcp_configs": {"c1": {"mcp_config_name": "bench", "mcp_config": [
            {"server_name": "mock", "config": {"command": env!("CARGO_BIN_EXE_mcpgw-mock-upstream"), "args": []}},
            // The same server behind local guardrails: keywords on input and output, built-in PII redaction.
            {"server_name": "guarded", "config": {"command": env!("CARGO_BIN_EXE_mcpgw-mock-upstream"), "args": []},
             "input_guardrails_policy": {"enabled": true, "additional_config": {"pii_redaction": true}},
             "output_guardrails_policy": {"enabled": true, "additional_config": {"blocked_keywords": ["secret"]}}}]}},
        "projects": {"p1": {"project_name": "bench", "mcp_config_id": "c1", "users": ["u1"]}},
        "users": {"u1": {"email": "bench@example.com"}},
        "apikeys": {KEY: {"project_id": "p1", "user_id": "u1"}}
    });
    std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("json")).expect("write config");
    // The gateway port is chosen here so readiness can be polled without parsing logs (log level WARNING).
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
    let started = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_mcpgw"))
        .args(["serve", "--config"])
        .arg(&path)
        .args(["--gateway-addr", &format!("127.0.0.1:{port}"), "--admin-addr", "127.0.0.1:0"])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mcpgw");
    let ready_after = loop {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", metrics)) {
            use std::io::Write;
            let _ = stream.write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            let mut line = String::new();
            let _ = BufReader::new(stream).read_line(&mut line);
            if line.contains(" 200 ") {
                break started.elapsed();
            }
        }
        assert!(started.elapsed() < Duration::from_secs(10), "mcpgw did not become ready");
        std::thread::sleep(Duration::from_micros(500));
    };
    let mut child = child;
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || for _ in BufReader::new(stderr).lines() {});
    }
    Gateway { child, gateway: format!("http://127.0.0.1:{port}/mcp/"), ready_after, _dir: dir }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// What one measured call is.
#[derive(Clone, Copy)]
enum Call {
    /// `echo` on the mock upstream, directly.
    Direct,
    /// `gw_secure_call_tools` with one `echo` call.
    Gateway,
    /// `gw_get_cache_status`: the gateway alone, no upstream.
    GatewayOnly,
    /// `gw_secure_call_tools` with one `echo` call on the server behind local guardrails.
    Guarded,
}

/// One call; panics on a wrong answer so a broken path cannot look fast.
async fn call(peer: &Peer<RoleClient>, what: Call) {
    let (params, expect) = match what {
        Call::Gateway => (
            CallToolRequestParams::new("gw_secure_call_tools").with_arguments(args(json!({
                "server_name": "mock", "tool_calls": [{"name": "echo", "args": {"text": "hello"}}]
            }))),
            "hello",
        ),
        Call::Direct => (CallToolRequestParams::new("echo").with_arguments(args(json!({"text": "hello"}))), "hello"),
        Call::GatewayOnly => (CallToolRequestParams::new("gw_get_cache_status"), "tool_cache"),
        Call::Guarded => (
            CallToolRequestParams::new("gw_secure_call_tools").with_arguments(args(json!({
                "server_name": "guarded",
                "tool_calls": [{"name": "echo", "args": {"text": "hello from jane.doe@example.com"}}]
            }))),
            "hello from jane.doe@example.com",
        ),
    };
    let response = peer.call_tool_once(params).await.expect("call");
    let text = format!("{response:?}");
    assert!(text.contains(expect) && !text.contains("\"error\""), "unexpected answer: {text}");
}

async fn direct_client() -> rmcp::service::RunningService<RoleClient, ()> {
    let command = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcpgw-mock-upstream"));
    let transport = TokioChildProcess::new(command).expect("spawn mock");
    ().serve(transport).await.expect("initialize mock")
}

type Client = rmcp::service::RunningService<RoleClient, ClientConfig>;

/// A gateway client: a session opened with `initialize` (2025-11-25), or the stateless 2026-07-28 revision.
async fn gateway_client(url: &str, stateless: bool) -> Client {
    // reqwest is built with rustls but without a default crypto provider (see src/outbound.rs).
    mcpgw::outbound::ensure_crypto_provider();
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string()).auth_header(KEY);
    // rmcp's default HTTP client opens a new connection for every request (it turns connection pooling off); a
    // pooled client measures the gateway rather than TCP handshakes, and is what long-running agents use.
    let transport = StreamableHttpClientTransport::with_client(reqwest::Client::new(), config);
    let info = Implementation::new("mcpgw-bench", "1.0.0");
    if stateless {
        let mode = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
        ClientConfig::new(ClientCapabilities::default(), info)
            .with_protocol_version(ProtocolVersion::V_2026_07_28)
            .serve_with_lifecycle(transport, mode)
            .await
            .expect("discover gateway")
    } else {
        ClientConfig::new(ClientCapabilities::default(), info)
            .with_protocol_version(ProtocolVersion::V_2025_11_25)
            .serve(transport)
            .await
            .expect("initialize gateway session")
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn latency(peer: &Peer<RoleClient>, what: Call, calls: u64) -> (Duration, Duration) {
    for _ in 0..50 {
        call(peer, what).await;
    }
    let mut samples = Vec::with_capacity(calls as usize);
    for _ in 0..calls {
        let start = Instant::now();
        call(peer, what).await;
        samples.push(start.elapsed());
    }
    samples.sort();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

async fn throughput(peers: Vec<Peer<RoleClient>>, what: Call, seconds: u64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = peers
        .into_iter()
        .map(|peer| {
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    call(&peer, what).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("throughput task");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let calls = env_number("MCPGW_BENCH_CALLS", 2000);
    let seconds = env_number("MCPGW_BENCH_SECONDS", 3);
    let processes = env_number("MCPGW_BENCH_PROCESSES", 4);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let gw = start_gateway(processes);
        let idle_rss = rss_kib(gw.child.id());
        println!("gateway: ready after {} (goal < 100 ms); idle RSS {:.1} MiB (goal <= 20 MiB)", ms(gw.ready_after), idle_rss as f64 / 1024.0);

        let direct = direct_client().await;
        let (d50, d99) = latency(direct.peer(), Call::Direct, calls).await;
        println!("latency c=1 ({calls} calls), direct echo: p50 {} p99 {}", ms(d50), ms(d99));
        for stateless in [false, true] {
            let mode = if stateless { "stateless 2026-07-28" } else { "session 2025-11-25" };
            let via = gateway_client(&gw.gateway, stateless).await;
            let (o50, o99) = latency(via.peer(), Call::GatewayOnly, calls).await;
            let (g50, g99) = latency(via.peer(), Call::Gateway, calls).await;
            if !stateless {
                let (p50, p99) = latency(via.peer(), Call::Guarded, calls).await;
                println!("latency c=1, gateway {mode}: secure echo with local guardrails (keywords in and out, PII redaction and restoration) p50 {} p99 {}; guardrails add {} at p50 ({:.2}x the unguarded call)",
                    ms(p50), ms(p99), ms(p50.saturating_sub(g50)), p50.as_secs_f64() / g50.as_secs_f64());
            }
            println!("latency c=1, gateway {mode}: gw_get_cache_status p50 {} p99 {}; secure echo p50 {} p99 {}; added p50 {} (goal <= 0.300 ms), ratio p50 {:.2}x",
                ms(o50), ms(o99), ms(g50), ms(g99), ms(g50.saturating_sub(d50)), g50.as_secs_f64() / d50.as_secs_f64());
            let _ = via.cancel().await;
        }

        for concurrency in [16usize, 64] {
            let direct_peers = vec![direct.peer().clone(); concurrency];
            let direct_rate = throughput(direct_peers, Call::Direct, seconds).await;
            println!("throughput c={concurrency}, direct: {direct_rate:.0} calls/s (one process, one session)");
            for stateless in [false, true] {
                let mode = if stateless { "stateless 2026-07-28" } else { "session 2025-11-25" };
                let mut clients = Vec::with_capacity(concurrency);
                for _ in 0..concurrency {
                    clients.push(gateway_client(&gw.gateway, stateless).await);
                }
                let peers: Vec<_> = clients.iter().map(|c| c.peer().clone()).collect();
                let gateway_rate = throughput(peers.clone(), Call::Gateway, seconds).await;
                // The same clients calling a tool that touches no upstream: the ceiling of the HTTP leg alone.
                let http_only = throughput(peers, Call::GatewayOnly, seconds).await;
                println!("throughput c={concurrency}, gateway {mode}: {gateway_rate:.0} calls/s ({concurrency} clients, up to {processes} upstream processes); ratio {:.2} (goal at c=16 >= 0.5); gw_get_cache_status alone {http_only:.0} calls/s",
                    gateway_rate / direct_rate);
                for client in clients {
                    let _ = client.cancel().await;
                }
            }
        }
        println!("gateway RSS after the runs: {:.1} MiB", rss_kib(gw.child.id()) as f64 / 1024.0);
        let _ = direct.cancel().await;
    });
}
