//! The gateway against the same mock upstream called directly, measured in one run.
//!
//! Run with `cargo bench --bench gateway`. It starts the release `mcpgw` binary with the mock upstream
//! (`mcpgw-mock-upstream`) as its one server and measures `gw_secure_call_tools` echo calls over streamable HTTP; the
//! baseline is the mock upstream's `echo` called directly over stdio. The main figures use light clients on both sides
//! (raw HTTP/1.1 keep-alive with pre-built requests to the gateway, raw JSON-RPC lines to the mock, see
//! `support/raw_clients.rs`), so that they measure the gateway and not a client library; a shorter section repeats the
//! latency and the c=16 throughput with rmcp's client on both sides. Printed:
//! - latency p50 and p99 at concurrency 1 (goal: the gateway adds at most 0.3 ms at p50);
//! - throughput at concurrency 16 and 64 (goal at 16: at least half of direct), each with the CPU time per call of the
//!   client (this process), the gateway and the upstream processes, or of the client and the mock for direct calls,
//!   read from `/proc` (all share the machine's cores, so these say where a ratio comes from);
//! - the gateway's idle RSS (goal: at most 16 MiB; after the runs at most 25 MiB, also with `MCPGW_WORKER_THREADS=16`)
//!   and the time from start to ready (goal: within 100 ms);
//! - the cost of local guardrails (keywords on input and output, PII redaction and restoration) on the same call;
//! - cold starts (`support/cold_start.rs`): the first call to a server that starts in 0.5 s and in 5 s, against the
//!   same start made directly, and a burst of 64 cold clients (successes, starts, p50 and p99);
//! - a remote streamable HTTP upstream (rmcp's server) through the gateway against the same server called directly:
//!   p50 at c=1 and throughput at c=16 (`MCPGW_BENCH_REMOTE_ONLY=1` runs that section alone);
//! - a call authenticated by a JWT (provider `oauth`) against one authenticated by an API key: p50 at c=1 and
//!   throughput at c=16 in alternating rounds (`MCPGW_BENCH_OAUTH_ONLY=1` runs that section alone, `MCPGW_BENCH_ROUNDS`);
//! - the audit log on against off at c=16, alternating rounds (`MCPGW_BENCH_AUDIT_ONLY=1` only, `MCPGW_BENCH_ROUNDS`,
//!   `MCPGW_BENCH_AUDIT_PATH`);
//! - the costs of INFO logs, traces, the audit log and the Redis cache, each against the base gateway measured just
//!   before it (`MCPGW_BENCH_COSTS_ONLY=1` runs that section alone).
//!
//! Knobs: `MCPGW_BENCH_CALLS` (latency samples, default 2000), `MCPGW_BENCH_SECONDS` (per throughput run, default 3),
//! `MCPGW_BENCH_PROCESSES` (the gateway's `max_processes_per_server`, default 4), `MCPGW_BENCH_CALLS_PER_PROCESS`
//! (its `max_calls_per_process`, default 1), `MCPGW_BENCH_BASELINE` (the path of another `mcpgw` build, e.g. one of the
//! previous commit: adds a section that measures it against this build in alternation, in the same run;
//! `MCPGW_BENCH_BASELINE_ROUNDS` rounds, default 3; `MCPGW_BENCH_BASELINE_ONLY=1` runs that section alone; with
//! `MCPGW_BENCH_REMOTE_ONLY=1` the remote call through both builds in `MCPGW_BENCH_ROUNDS` alternating rounds).

use std::collections::HashMap;
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

#[path = "support/raw_clients.rs"]
mod raw_clients;
use raw_clients::{RawHttp, RawStdio};
#[path = "support/procfs.rs"]
#[allow(dead_code)]
mod procfs;
use procfs::{children, cpu_micros, rss_kib};
#[path = "support/cold_start.rs"]
mod cold_start;
#[path = "support/launch.rs"]
#[allow(dead_code)]
mod launch;
// The tests' local authorization server (OpenID configuration and JWKS over HTTP, tokens signed with ring).
#[path = "../tests/common/http_mock.rs"]
#[allow(dead_code)]
mod http_mock;
#[path = "../tests/common/jwt_issuer.rs"]
mod jwt_issuer;
use launch::{free_port, ready, spawn_serve_binary};

const KEY: &str = "gw_bench-key-0000000000000000000000000000000000";

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A running gateway and its addresses.
struct Gateway {
    child: Child,
    /// `http://127.0.0.1:port/mcp/`
    url: String,
    /// `127.0.0.1:port`
    addr: String,
    ready_after: Duration,
    _dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

fn start_gateway(processes: u64, calls_per_process: u64, variant: impl FnOnce(&mut Value)) -> Gateway {
    start_gateway_binary(env!("CARGO_BIN_EXE_mcpgw"), processes, calls_per_process, variant)
}

/// [`start_gateway`] with another build of `mcpgw`.
fn start_gateway_binary(
    binary: &str,
    processes: u64,
    calls_per_process: u64,
    variant: impl FnOnce(&mut Value),
) -> Gateway {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("gw.json");
    let mut config = json!({
        "admin_apikey": "bench-admin-key-0123456789abcdefghijklmnop",
        // The clients share one key: its session limit is raised so that c=64 in sessions fits.
        // "both": the gw_* tools and the upstream tools themselves (transparent calls, `mock__echo`).
        "common_mcp_gateway_config": {"gw_log_level": "WARNING", "tool_exposure": "both", "upstream_pool": {
            "max_processes_per_server": processes, "max_calls_per_process": calls_per_process},
            "limits": {"max_sessions_per_key": 100_000}},
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
    variant(&mut config);
    std::fs::write(&path, serde_json::to_vec_pretty(&config).expect("json")).expect("write config");
    let (port, metrics) = (free_port(), free_port());
    let started = Instant::now();
    let child = spawn_serve_binary(binary, &path, port, metrics);
    let ready_after = loop {
        if ready(metrics) {
            break started.elapsed();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "mcpgw did not become ready");
        std::thread::sleep(Duration::from_micros(500));
    };
    let mut child = child;
    if let Some(stderr) = child.stderr.take() {
        std::thread::spawn(move || for _ in BufReader::new(stderr).lines() {});
    }
    Gateway {
        child,
        url: format!("http://127.0.0.1:{port}/mcp/"),
        addr: format!("127.0.0.1:{port}"),
        ready_after,
        _dir: dir,
    }
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
    /// `mock__echo`: the upstream tool called by its exposed name (transparent mode).
    Transparent,
}

/// One call; panics on a wrong answer so a broken path cannot look fast.
async fn call(peer: &Peer<RoleClient>, what: Call) {
    let (params, expect) = match what {
        Call::Gateway => (
            CallToolRequestParams::new("gw_secure_call_tools").with_arguments(args(secure_echo("mock", "hello"))),
            "hello",
        ),
        Call::Direct => (CallToolRequestParams::new("echo").with_arguments(args(json!({"text": "hello"}))), "hello"),
        Call::GatewayOnly => (CallToolRequestParams::new("gw_get_cache_status"), "tool_cache"),
        Call::Guarded => (
            CallToolRequestParams::new("gw_secure_call_tools")
                .with_arguments(args(secure_echo("guarded", GUARDED_TEXT))),
            GUARDED_TEXT,
        ),
        Call::Transparent => {
            (CallToolRequestParams::new("mock__echo").with_arguments(args(json!({"text": "hello"}))), "hello")
        }
    };
    let response = peer.call_tool_once(params).await.expect("call");
    let text = format!("{response:?}");
    assert!(text.contains(expect) && !text.contains("\"error\""), "unexpected answer: {text}");
}

const GUARDED_TEXT: &str = "hello from jane.doe@example.com";

fn secure_echo(server: &str, text: &str) -> Value {
    json!({"server_name": server, "tool_calls": [{"name": "echo", "args": {"text": text}}]})
}

/// A client making one kind of call again and again.
enum Caller {
    /// rmcp's client (over stdio or streamable HTTP).
    Rmcp(Peer<RoleClient>, Call),
    /// One raw keep-alive HTTP connection sending pre-built requests.
    Http(Box<RawHttp>, Vec<u8>, &'static str),
    /// Raw JSON-RPC lines to one mock process (callers share it, like rmcp's client does).
    Stdio(Arc<RawStdio>),
}

impl Caller {
    /// Ends a gateway session opened by a raw caller.
    async fn close(self) {
        if let Caller::Http(client, _, _) = self {
            client.close().await;
        }
    }

    async fn call(&mut self) {
        match self {
            Caller::Rmcp(peer, what) => call(peer, *what).await,
            Caller::Http(client, request, expect) => client.call(request, expect).await,
            Caller::Stdio(client) => client.echo().await,
        }
    }
}

/// A raw HTTP caller of `what` (not `Direct`).
async fn raw_gateway(addr: &str, stateless: bool, what: Call) -> Caller {
    let client = RawHttp::connect(addr, KEY, stateless).await;
    let (request, expect) = match what {
        Call::Gateway => (client.tool_call("gw_secure_call_tools", secure_echo("mock", "hello")), "hello"),
        Call::Guarded => (client.tool_call("gw_secure_call_tools", secure_echo("guarded", GUARDED_TEXT)), GUARDED_TEXT),
        Call::Transparent => (client.tool_call("mock__echo", json!({"text": "hello"})), "hello"),
        Call::GatewayOnly | Call::Direct => (client.tool_call("gw_get_cache_status", json!({})), "tool_cache"),
    };
    Caller::Http(Box::new(client), request, expect)
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

async fn latency(mut caller: Caller, calls: u64) -> (Duration, Duration) {
    for _ in 0..50 {
        caller.call().await;
    }
    let mut samples = Vec::with_capacity(calls as usize);
    for _ in 0..calls {
        let start = Instant::now();
        caller.call().await;
        samples.push(start.elapsed());
    }
    samples.sort();
    caller.close().await;
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

async fn throughput(callers: Vec<Caller>, seconds: u64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = callers
        .into_iter()
        .map(|mut caller| {
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    caller.call().await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                caller
            })
        })
        .collect();
    let mut callers = Vec::with_capacity(tasks.len());
    for task in tasks {
        callers.push(task.await.expect("throughput task"));
    }
    let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    for caller in callers {
        caller.close().await;
    }
    rate
}

/// CPU time of groups of processes, read before and after a run, as microseconds per call. Each group is listed again
/// at the end, so processes started during the run count too.
struct CpuSplit(Vec<(&'static str, Pids, HashMap<u32, u64>)>);

/// Lists the processes of a group.
type Pids = Box<dyn Fn() -> Vec<u32>>;

impl CpuSplit {
    fn start(groups: Vec<(&'static str, Pids)>) -> CpuSplit {
        CpuSplit(
            groups
                .into_iter()
                .map(|(name, list)| {
                    let before = list().into_iter().map(|pid| (pid, cpu_micros(pid))).collect();
                    (name, list, before)
                })
                .collect(),
        )
    }

    /// The CPU microseconds a group used since the start.
    fn micros(&self, group: &str) -> f64 {
        let Some((_, list, before)) = self.0.iter().find(|(name, _, _)| *name == group) else { return 0.0 };
        let used: u64 =
            list().into_iter().map(|pid| cpu_micros(pid).saturating_sub(before.get(&pid).copied().unwrap_or(0))).sum();
        used as f64
    }

    /// `name X + ... = total µs` per call for `calls` calls.
    fn per_call(&self, calls: f64) -> String {
        let mut parts = Vec::new();
        let mut total = 0.0;
        for (name, list, before) in &self.0 {
            let used: u64 = list()
                .into_iter()
                .map(|pid| cpu_micros(pid).saturating_sub(before.get(&pid).copied().unwrap_or(0)))
                .sum();
            let used = used as f64 / calls.max(1.0);
            total += used;
            parts.push(format!("{name} {used:.0}"));
        }
        format!("{} = {total:.0} µs", parts.join(" + "))
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// A local `redis-server` on a free port for the shared-cache variant, or `None` when it is not installed.
struct Redis(Child, u16);

impl Redis {
    fn start() -> Option<Redis> {
        let port = free_port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if started.elapsed() > Duration::from_secs(5) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Some(Redis(child, port))
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Secure echo p50 at c=1 and throughput at c=16 (light client, session) of one gateway.
async fn secure_echo_figures(gw: &Gateway, calls: u64, seconds: u64) -> (Duration, f64) {
    let (p50, _) = latency(raw_gateway(&gw.addr, false, Call::Gateway).await, calls).await;
    let mut callers = Vec::with_capacity(16);
    for _ in 0..16 {
        callers.push(raw_gateway(&gw.addr, false, Call::Gateway).await);
    }
    (p50, throughput(callers, seconds).await)
}

/// What logs, traces and the shared Redis cache cost: the same secure echo on gateways with them on, each against
/// the base gateway (`WARNING` logs, no traces, local cache) measured again just before it.
async fn costs(base: &Gateway, processes: u64, calls_per_process: u64, calls: u64, seconds: u64) {
    println!("-- cost of logs, traces, the audit log and the Redis cache (secure echo, light client, session) --");
    let redis = Redis::start();
    type Variant = Box<dyn FnOnce(&mut Value)>;
    let mut variants: Vec<(&str, Variant)> = vec![
        (
            "INFO logs (two JSON lines per call)",
            Box::new(|c: &mut Value| c["common_mcp_gateway_config"]["gw_log_level"] = json!("INFO")),
        ),
        (
            "audit log (one hash-chained line per call, written before the answer)",
            Box::new(|c: &mut Value| {
                c["common_mcp_gateway_config"]["audit_log"] = json!({"enabled": true, "path": "audit.jsonl"});
            }),
        ),
        (
            "INFO logs and traces (stdout provider)",
            Box::new(|c: &mut Value| {
                c["common_mcp_gateway_config"]["gw_log_level"] = json!("INFO");
                c["plugins"]["telemetry"] = json!({"provider": "stdout", "config": {"enabled": true}});
            }),
        ),
    ];
    match &redis {
        Some(Redis(_, port)) => {
            let port = *port;
            variants.push((
                "shared Redis cache",
                Box::new(move |c: &mut Value| {
                    let common = &mut c["common_mcp_gateway_config"];
                    common["gw_mcp_use_external_cache"] = json!(true);
                    common["gw_cache_host"] = json!("127.0.0.1");
                    common["gw_cache_port"] = json!(port);
                }),
            ));
        }
        None => println!("shared Redis cache: skipped (redis-server is not installed)"),
    }
    for (name, variant) in variants {
        let (base50, base_rate) = secure_echo_figures(base, calls, seconds).await;
        let gw = start_gateway(processes, calls_per_process, variant);
        let (p50, rate) = secure_echo_figures(&gw, calls, seconds).await;
        println!(
            "{name}: p50 {} against {} (+{}), c=16 {rate:.0} against {base_rate:.0} calls/s ({:.2} of base)",
            ms(p50),
            ms(base50),
            ms(p50.saturating_sub(base50)),
            rate / base_rate
        );
    }
}

/// This build against another build of `mcpgw` (`MCPGW_BENCH_BASELINE`, e.g. one built from the previous commit),
/// measured in alternation in this run, `MCPGW_BENCH_BASELINE_ROUNDS` rounds (default 3): secure echo p50 at c=1 in a
/// session and stateless, c=16 throughput in a session and the gateway's CPU per call in it (from `/proc`); medians.
async fn against_baseline(baseline: &str, processes: u64, calls_per_process: u64, calls: u64, seconds: u64) {
    let rounds = env_number("MCPGW_BENCH_BASELINE_ROUNDS", 3);
    println!(
        "-- this build against the baseline build {baseline} (light client, alternating, median of {rounds} rounds) --"
    );
    let builds = [("baseline", baseline), ("this build", env!("CARGO_BIN_EXE_mcpgw"))];
    let gateways: Vec<Gateway> =
        builds.iter().map(|(_, binary)| start_gateway_binary(binary, processes, calls_per_process, |_| {})).collect();
    // Per build: (session p50 s, stateless p50 s, c=16 calls/s, gateway CPU µs per call) of each round.
    let mut figures: Vec<Vec<[f64; 4]>> = vec![Vec::new(), Vec::new()];
    for round in 0..rounds {
        // Each build goes first in every other round, so that neither gains from its place.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for build in order {
            let (gw, figures) = (&gateways[build], &mut figures[build]);
            let (session, _) = latency(raw_gateway(&gw.addr, false, Call::Gateway).await, calls).await;
            let (stateless, _) = latency(raw_gateway(&gw.addr, true, Call::Gateway).await, calls).await;
            let mut callers = Vec::with_capacity(16);
            for _ in 0..16 {
                callers.push(raw_gateway(&gw.addr, false, Call::Gateway).await);
            }
            let before = cpu_micros(gw.child.id());
            let rate = throughput(callers, seconds).await;
            let cpu = cpu_micros(gw.child.id()).saturating_sub(before) as f64 / (rate * seconds as f64).max(1.0);
            figures.push([session.as_secs_f64(), stateless.as_secs_f64(), rate, cpu]);
        }
    }
    for ((name, _), figures) in builds.iter().zip(&figures) {
        let median = |i: usize| {
            let mut values: Vec<f64> = figures.iter().map(|f| f[i]).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        println!(
            "{name}: secure echo p50 session {}, stateless {}; c=16 session {:.0} calls/s (2 shared cores), gateway CPU {:.0} µs per call",
            ms(Duration::from_secs_f64(median(0))),
            ms(Duration::from_secs_f64(median(1))),
            median(2),
            median(3),
        );
    }
}

/// A remote streamable HTTP upstream (rmcp's server: `mcpgw-conformance-upstream --http`, its `test_simple_text`)
/// through the gateway (`gw_secure_call_tools`), against the same upstream called directly, in this run: p50 at c=1
/// and throughput at c=16, light clients on both sides (one raw keep-alive connection and session per caller), with the
/// CPU time per call of the client, the gateway and the remote server.
async fn remote_upstream(processes: u64, calls: u64, seconds: u64) {
    println!("-- a remote streamable HTTP upstream (rmcp's server), light clients --");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut remote = Command::new(env!("CARGO_BIN_EXE_mcpgw-conformance-upstream"))
        .args(["--http", &addr])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the remote server");
    let started = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(started.elapsed() < Duration::from_secs(10), "the remote server did not listen");
        std::thread::sleep(Duration::from_millis(5));
    }
    let url = format!("http://{addr}/mcp");
    let gw = start_gateway(processes, 1, |config| {
        if let Some(servers) = config["mcp_configs"]["c1"]["mcp_config"].as_array_mut() {
            servers.push(json!({"server_name": "remote", "config": {"url": url}}));
        }
    });
    const EXPECT: &str = "simple text response";
    let direct = |_| async {
        let client = RawHttp::connect(&addr, "unused", false).await;
        let request = client.tool_call("test_simple_text", json!({}));
        Caller::Http(Box::new(client), request, EXPECT)
    };
    let secure = json!({"server_name": "remote", "tool_calls": [{"name": "test_simple_text", "args": {}}]});
    let via = |_| async {
        let client = RawHttp::connect(&gw.addr, KEY, false).await;
        let request = client.tool_call("gw_secure_call_tools", secure.clone());
        Caller::Http(Box::new(client), request, EXPECT)
    };
    let (d50, d99) = latency(direct(0).await, calls).await;
    let (g50, g99) = latency(via(0).await, calls).await;
    println!(
        "latency c=1 ({calls} calls): direct p50 {} p99 {}; through the gateway p50 {} p99 {}; added p50 {}, ratio p50 {:.2}x",
        ms(d50),
        ms(d99),
        ms(g50),
        ms(g99),
        ms(g50.saturating_sub(d50)),
        g50.as_secs_f64() / d50.as_secs_f64()
    );
    let concurrency = 16;
    let (me, gw_pid, remote_pid) = (std::process::id(), gw.child.id(), remote.id());
    let mut callers = Vec::with_capacity(concurrency);
    for i in 0..concurrency {
        callers.push(direct(i).await);
    }
    let cpu =
        CpuSplit::start(vec![("client", Box::new(move || vec![me])), ("remote", Box::new(move || vec![remote_pid]))]);
    let direct_rate = throughput(callers, seconds).await;
    let direct_cpu = cpu.per_call(direct_rate * seconds as f64);
    let mut callers = Vec::with_capacity(concurrency);
    for i in 0..concurrency {
        callers.push(via(i).await);
    }
    let cpu = CpuSplit::start(vec![
        ("client", Box::new(move || vec![me])),
        ("gateway", Box::new(move || vec![gw_pid])),
        ("remote", Box::new(move || vec![remote_pid])),
    ]);
    let gateway_rate = throughput(callers, seconds).await;
    println!(
        "throughput c={concurrency} (2 cores shared by client, gateway and remote): direct {direct_rate:.0} calls/s (CPU per call: {direct_cpu}); through the gateway {gateway_rate:.0} calls/s, ratio {:.2} (up to {processes} sessions with the remote; CPU per call: {})",
        gateway_rate / direct_rate,
        cpu.per_call(gateway_rate * seconds as f64)
    );
    if let Ok(baseline) = std::env::var("MCPGW_BENCH_BASELINE") {
        // The same remote call through another build, the two measured in turn (`MCPGW_BENCH_ROUNDS`, default 5).
        let rounds = env_number("MCPGW_BENCH_ROUNDS", 5);
        let before = start_gateway_binary(&baseline, processes, 1, |config| {
            if let Some(servers) = config["mcp_configs"]["c1"]["mcp_config"].as_array_mut() {
                servers.push(json!({"server_name": "remote", "config": {"url": url}}));
            }
        });
        let gateways = [&before, &gw];
        let variants = [("baseline", before.child.id()), ("this build", gw.child.id())];
        let [(before_rate, before_cpu), (after_rate, after_cpu)] = alternating(rounds, seconds, variants, |slot| {
            let (addr, secure) = (gateways[slot].addr.clone(), secure.clone());
            async move {
                let client = RawHttp::connect(&addr, KEY, false).await;
                let request = client.tool_call("gw_secure_call_tools", secure);
                Caller::Http(Box::new(client), request, EXPECT)
            }
        })
        .await;
        println!(
            "remote call at c=16, medians of {rounds} alternating rounds: this build {after_rate:.0} against baseline {before_rate:.0} calls/s; gateway CPU per call {after_cpu:.1} against {before_cpu:.1} us (goal <= 60 us)"
        );
    }
    drop(gw);
    let _ = remote.kill();
    let _ = remote.wait();
}

/// A call authenticated by a JWT (provider `oauth`, the tests' local issuer, RS256) against the same call
/// authenticated by an API key, on one gateway, in this run: p50 at c=1 of the secure echo, measured key, token, key
/// again, token again; and throughput at c=16 of each. The token is verified once and then served from the cache, as
/// a client's token is for its lifetime.
async fn client_oauth(processes: u64, calls: u64, seconds: u64) {
    println!("-- OAuth for clients: a JWT (RS256) against an API key, light clients --");
    let issuer = jwt_issuer::JwtIssuer::start();
    let gw = start_gateway(processes, 1, |config| {
        config["plugins"]["auth"] = json!({"provider": "oauth", "config": {
            "issuer": issuer.issuer, "audience": jwt_issuer::AUDIENCE, "required_scopes": ["mcp"]}});
    });
    let mut claims = issuer.claims("bench@example.com", "bench");
    claims["exp"] = json!(jwt_issuer::now() + 3600);
    let token = issuer.sign(&claims);
    let caller = |credential: String| {
        let addr = gw.addr.clone();
        async move {
            let client = RawHttp::connect(&addr, &credential, false).await;
            let request = client.tool_call("gw_secure_call_tools", secure_echo("mock", "hello"));
            Caller::Http(Box::new(client), request, "hello")
        }
    };
    let mut figures = Vec::new();
    for (name, credential) in
        [("API key", KEY.to_string()), ("JWT", token.clone()), ("API key", KEY.to_string()), ("JWT", token.clone())]
    {
        let (p50, p99) = latency(caller(credential).await, calls).await;
        println!("latency c=1 ({calls} calls), secure echo with {name}: p50 {} p99 {}", ms(p50), ms(p99));
        figures.push(p50);
    }
    let key_p50 = (figures[0] + figures[2]) / 2;
    let jwt_p50 = (figures[1] + figures[3]) / 2;
    println!(
        "JWT against API key: p50 {} against {}, added {} (goal <= 0.050 ms)",
        ms(jwt_p50),
        ms(key_p50),
        if jwt_p50 >= key_p50 { ms(jwt_p50 - key_p50) } else { format!("-{}", ms(key_p50 - jwt_p50)) }
    );
    let gw_pid = gw.child.id();
    let rounds = env_number("MCPGW_BENCH_ROUNDS", 3);
    let credentials = [KEY.to_string(), token];
    let [(key_rate, key_cpu), (jwt_rate, jwt_cpu)] =
        alternating(rounds, seconds, [("with API key", gw_pid), ("with JWT", gw_pid)], |slot| {
            caller(credentials[slot].clone())
        })
        .await;
    println!(
        "JWT against API key at c=16, medians of {rounds} alternating rounds: {jwt_rate:.0} against {key_rate:.0} calls/s ({:.3}, goal >= 0.97); gateway CPU per call {jwt_cpu:.1} against {key_cpu:.1} us",
        jwt_rate / key_rate
    );
}

/// Two variants measured in turn at c=16 for `rounds` rounds of `seconds` each (the order of two runs on this shared
/// machine moves a ratio by more than the difference measured): 16 callers from `caller(slot)` each round, the
/// gateway of `variants[slot]` by its pid. Per variant, the median throughput and the median gateway CPU per call (from
/// `/proc`, which moves less with the machine's other load than the throughput does).
async fn alternating<F, Fut>(rounds: u64, seconds: u64, variants: [(&str, u32); 2], caller: F) -> [(f64, f64); 2]
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Caller>,
{
    let mut rates: [Vec<f64>; 2] = Default::default();
    let mut cpus: [Vec<f64>; 2] = Default::default();
    for round in 0..rounds {
        for (slot, (name, pid)) in variants.into_iter().enumerate() {
            let mut callers = Vec::with_capacity(16);
            for _ in 0..16 {
                callers.push(caller(slot).await);
            }
            let cpu = CpuSplit::start(vec![("gateway", Box::new(move || vec![pid]))]);
            let rate = throughput(callers, seconds).await;
            let calls = rate * seconds as f64;
            println!(
                "round {round}: c=16 {name} (2 cores shared by client, gateway and upstreams): {rate:.0} calls/s; CPU per call: {}",
                cpu.per_call(calls)
            );
            rates[slot].push(rate);
            cpus[slot].push(cpu.micros("gateway") / calls.max(1.0));
        }
    }
    [0, 1].map(|slot| (median(&mut rates[slot]), median(&mut cpus[slot])))
}

/// The median of `values` (not empty).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `MCPGW_BENCH_AUDIT_ONLY=1`: the audit log's cost at c=16 (issue 36: at least 0.95 of the throughput without it),
/// the base gateway and one with the audit log on measured in turn for `MCPGW_BENCH_ROUNDS` rounds (default 5):
/// medians of the throughput and of each gateway's CPU per call (from `/proc`), which moves less with the machine's
/// other load than the throughput does.
async fn audit_ratio(processes: u64, calls_per_process: u64, seconds: u64) {
    let rounds = env_number("MCPGW_BENCH_ROUNDS", 5);
    println!("-- the audit log at c=16 against the base gateway (light clients, alternating, {rounds} rounds) --");
    let base = start_gateway(processes, calls_per_process, |_| {});
    // `MCPGW_BENCH_AUDIT_PATH`: the file elsewhere (another file system: what the file system's append costs).
    let path = std::env::var("MCPGW_BENCH_AUDIT_PATH").unwrap_or_else(|_| "audit.jsonl".into());
    println!("audit log at {path}");
    let audited = start_gateway(processes, calls_per_process, |c: &mut Value| {
        c["common_mcp_gateway_config"]["audit_log"] = json!({"enabled": true, "path": path});
    });
    let gateways = [&base, &audited];
    let variants = [("base", base.child.id()), ("audit log on", audited.child.id())];
    let [(base_rate, base_cpu), (audit_rate, audit_cpu)] =
        alternating(rounds, seconds, variants, |slot| raw_gateway(&gateways[slot].addr, false, Call::Gateway)).await;
    println!(
        "audit log on against base at c=16, medians of {rounds} alternating rounds: {audit_rate:.0} against {base_rate:.0} calls/s ({:.3}, goal >= 0.95); gateway CPU per call {audit_cpu:.1} against {base_cpu:.1} us (+{:.1})",
        audit_rate / base_rate,
        audit_cpu - base_cpu
    );
}

/// `MCPGW_BENCH_PROFILE_SECONDS=N`: the c=16 secure echo in sessions (light clients) for N seconds against one gateway
/// whose pid is printed first, for a profiler to attach (`perf record -g -p PID`); then its CPU per call and RSS.
/// `MCPGW_BENCH_PROFILE_AUDIT=1` turns the audit log on.
async fn profile_run(processes: u64, calls_per_process: u64, seconds: u64) {
    // `MCPGW_BENCH_PROFILE_AUDIT=1`: with the audit log on (what it costs, profiled).
    let audit = std::env::var("MCPGW_BENCH_PROFILE_AUDIT").is_ok();
    let gw = start_gateway(processes, calls_per_process, |c: &mut Value| {
        if audit {
            let path = std::env::var("MCPGW_BENCH_AUDIT_PATH").unwrap_or_else(|_| "audit.jsonl".into());
            c["common_mcp_gateway_config"]["audit_log"] = json!({"enabled": true, "path": path});
        }
    });
    let gw_pid = gw.child.id();
    println!("gateway pid {gw_pid}; idle RSS {:.1} MiB", rss_kib(gw_pid) as f64 / 1024.0);
    let mut callers = Vec::with_capacity(16);
    for _ in 0..16 {
        callers.push(raw_gateway(&gw.addr, false, Call::Gateway).await);
    }
    // Warm: every upstream process started, every connection open.
    let _ = throughput(std::mem::take(&mut callers), 1).await;
    for _ in 0..16 {
        callers.push(raw_gateway(&gw.addr, false, Call::Gateway).await);
    }
    println!("profiling window starts");
    let me = std::process::id();
    let cpu = CpuSplit::start(vec![
        ("client", Box::new(move || vec![me])),
        ("gateway", Box::new(move || vec![gw_pid])),
        ("upstream processes", Box::new(move || children(gw_pid))),
    ]);
    let rate = throughput(callers, seconds).await;
    println!(
        "throughput c=16, gateway session: {rate:.0} calls/s; CPU per call: {}",
        cpu.per_call(rate * seconds as f64)
    );
    println!("gateway RSS after: {:.1} MiB", rss_kib(gw_pid) as f64 / 1024.0);
}

fn mode_name(stateless: bool) -> &'static str {
    if stateless { "stateless 2026-07-28" } else { "session 2025-11-25" }
}

fn main() {
    let calls = env_number("MCPGW_BENCH_CALLS", 2000);
    let seconds = env_number("MCPGW_BENCH_SECONDS", 3);
    let processes = env_number("MCPGW_BENCH_PROCESSES", 4);
    let calls_per_process = env_number("MCPGW_BENCH_CALLS_PER_PROCESS", 1);
    let mock = env!("CARGO_BIN_EXE_mcpgw-mock-upstream");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let baseline = std::env::var("MCPGW_BENCH_BASELINE").ok();
        if let (Some(baseline), Ok(_)) = (&baseline, std::env::var("MCPGW_BENCH_BASELINE_ONLY")) {
            return against_baseline(baseline, processes, calls_per_process, calls, seconds).await;
        }
        if std::env::var("MCPGW_BENCH_REMOTE_ONLY").is_ok() {
            return remote_upstream(processes, calls, seconds).await;
        }
        if std::env::var("MCPGW_BENCH_OAUTH_ONLY").is_ok() {
            return client_oauth(processes, calls, seconds).await;
        }
        if std::env::var("MCPGW_BENCH_AUDIT_ONLY").is_ok() {
            return audit_ratio(processes, calls_per_process, seconds).await;
        }
        if let Ok(hold) = std::env::var("MCPGW_BENCH_PROFILE_SECONDS") {
            return profile_run(processes, calls_per_process, hold.parse().unwrap_or(20)).await;
        }
        if std::env::var("MCPGW_BENCH_COSTS_ONLY").is_ok() {
            let base = start_gateway(processes, calls_per_process, |_| {});
            return costs(&base, processes, calls_per_process, calls.min(1000), seconds).await;
        }
        let gw = start_gateway(processes, calls_per_process, |_| {});
        let idle_rss = rss_kib(gw.child.id());
        let workers = std::env::var("MCPGW_WORKER_THREADS").unwrap_or_else(|_| "unset: half the CPUs".into());
        println!("gateway: ready after {} (goal < 100 ms); idle RSS {:.1} MiB (goal <= 16 MiB); MCPGW_WORKER_THREADS {workers}", ms(gw.ready_after), idle_rss as f64 / 1024.0);

        println!("-- light clients: raw HTTP/1.1 keep-alive to the gateway, raw JSON-RPC lines to the mock upstream --");
        let direct = RawStdio::start(mock).await;
        let (d50, d99) = latency(Caller::Stdio(Arc::clone(&direct)), calls).await;
        println!("latency c=1 ({calls} calls), direct echo: p50 {} p99 {}", ms(d50), ms(d99));
        for stateless in [false, true] {
            let mode = mode_name(stateless);
            let (o50, o99) = latency(raw_gateway(&gw.addr, stateless, Call::GatewayOnly).await, calls).await;
            let (g50, g99) = latency(raw_gateway(&gw.addr, stateless, Call::Gateway).await, calls).await;
            if !stateless {
                let (p50, p99) = latency(raw_gateway(&gw.addr, stateless, Call::Guarded).await, calls).await;
                println!("latency c=1, gateway {mode}: secure echo with local guardrails (keywords in and out, PII redaction and restoration) p50 {} p99 {}; guardrails add {} at p50 ({:.2}x the unguarded call)",
                    ms(p50), ms(p99), ms(p50.saturating_sub(g50)), p50.as_secs_f64() / g50.as_secs_f64());
            }
            println!("latency c=1, gateway {mode}: gw_get_cache_status p50 {} p99 {}; secure echo p50 {} p99 {}; added p50 {} (goal <= 0.300 ms), ratio p50 {:.2}x",
                ms(o50), ms(o99), ms(g50), ms(g99), ms(g50.saturating_sub(d50)), g50.as_secs_f64() / d50.as_secs_f64());
            let (t50, t99) = latency(raw_gateway(&gw.addr, stateless, Call::Transparent).await, calls).await;
            println!("latency c=1, gateway {mode}: transparent echo (mock__echo) p50 {} p99 {}; added p50 {} over direct (goal: no more than the secure echo adds, {}), ratio to the secure echo {:.2}x",
                ms(t50), ms(t99), ms(t50.saturating_sub(d50)), ms(g50.saturating_sub(d50)), t50.as_secs_f64() / g50.as_secs_f64());
        }
        for concurrency in [16usize, 64] {
            let direct_callers = (0..concurrency).map(|_| Caller::Stdio(Arc::clone(&direct))).collect();
            // CPU per call: this process is the client; the direct mock is its child that is not the gateway.
            let (me, gw_pid) = (std::process::id(), gw.child.id());
            let cpu = CpuSplit::start(vec![
                ("client", Box::new(move || vec![me])),
                ("mock", Box::new(move || children(me).into_iter().filter(|&pid| pid != gw_pid).collect())),
            ]);
            let direct_rate = throughput(direct_callers, seconds).await;
            println!("throughput c={concurrency}, direct: {direct_rate:.0} calls/s (one process, {concurrency} calls in flight); CPU per call: {}",
                cpu.per_call(direct_rate * seconds as f64));
            for stateless in [false, true] {
                let mode = mode_name(stateless);
                let mut callers = Vec::with_capacity(concurrency);
                let mut only = Vec::with_capacity(concurrency);
                for _ in 0..concurrency {
                    callers.push(raw_gateway(&gw.addr, stateless, Call::Gateway).await);
                    only.push(raw_gateway(&gw.addr, stateless, Call::GatewayOnly).await);
                }
                let cpu = CpuSplit::start(vec![
                    ("client", Box::new(move || vec![me])),
                    ("gateway", Box::new(move || vec![gw_pid])),
                    ("upstream processes", Box::new(move || children(gw_pid))),
                ]);
                let gateway_rate = throughput(callers, seconds).await;
                let split = cpu.per_call(gateway_rate * seconds as f64);
                // A tool that touches no upstream: the ceiling of the HTTP leg alone.
                let http_only = throughput(only, seconds).await;
                println!("throughput c={concurrency}, gateway {mode}: {gateway_rate:.0} calls/s ({concurrency} connections, up to {processes} upstream processes); ratio {:.2} (goal at c=16 >= 0.5); gw_get_cache_status alone {http_only:.0} calls/s; CPU per call (goal: gateway <= 45 µs): {split}",
                    gateway_rate / direct_rate);
                if !stateless {
                    let mut transparent = Vec::with_capacity(concurrency);
                    for _ in 0..concurrency {
                        transparent.push(raw_gateway(&gw.addr, stateless, Call::Transparent).await);
                    }
                    let cpu = CpuSplit::start(vec![
                        ("client", Box::new(move || vec![me])),
                        ("gateway", Box::new(move || vec![gw_pid])),
                        ("upstream processes", Box::new(move || children(gw_pid))),
                    ]);
                    let rate = throughput(transparent, seconds).await;
                    println!("throughput c={concurrency}, gateway {mode}: transparent echo {rate:.0} calls/s; ratio to direct {:.2}, to the secure echo {:.2}; CPU per call: {}",
                        rate / direct_rate, rate / gateway_rate, cpu.per_call(rate * seconds as f64));
                }
            }
        }

        costs(&gw, processes, calls_per_process, calls.min(1000), seconds).await;
        if let Some(baseline) = &baseline {
            against_baseline(baseline, processes, calls_per_process, calls, seconds).await;
        }

        println!("-- rmcp's client on both sides (streamable HTTP with a pooled reqwest client; stdio) --");
        let direct = direct_client().await;
        let (d50, d99) = latency(Caller::Rmcp(direct.peer().clone(), Call::Direct), calls).await;
        println!("latency c=1 ({calls} calls), direct echo: p50 {} p99 {}", ms(d50), ms(d99));
        let via = gateway_client(&gw.url, false).await;
        let (g50, g99) = latency(Caller::Rmcp(via.peer().clone(), Call::Gateway), calls).await;
        println!("latency c=1, gateway session 2025-11-25: secure echo p50 {} p99 {}; added p50 {}, ratio p50 {:.2}x",
            ms(g50), ms(g99), ms(g50.saturating_sub(d50)), g50.as_secs_f64() / d50.as_secs_f64());
        let concurrency = 16;
        let direct_rate = throughput((0..concurrency).map(|_| Caller::Rmcp(direct.peer().clone(), Call::Direct)).collect(), seconds).await;
        let mut clients = Vec::with_capacity(concurrency);
        for _ in 0..concurrency {
            clients.push(gateway_client(&gw.url, false).await);
        }
        let callers = clients.iter().map(|c| Caller::Rmcp(c.peer().clone(), Call::Gateway)).collect();
        let gateway_rate = throughput(callers, seconds).await;
        println!("throughput c={concurrency}: direct {direct_rate:.0} calls/s, gateway session {gateway_rate:.0} calls/s; ratio {:.2}",
            gateway_rate / direct_rate);
        for client in clients {
            let _ = client.cancel().await;
        }
        let _ = via.cancel().await;
        let _ = direct.cancel().await;
        println!("gateway RSS after the runs: {:.1} MiB (goal <= 25 MiB, with 16 worker threads too)", rss_kib(gw.child.id()) as f64 / 1024.0);
        drop(gw);
        remote_upstream(processes, calls, seconds).await;
        client_oauth(processes, calls, seconds).await;
        cold_start::cold_starts(processes).await;
    });
}
