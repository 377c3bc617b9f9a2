//! Cost as the work grows (issue 36): the release `mcpgw` driven along five dimensions, each a curve of at least four
//! points (three for replicas) with a fitted constant.
//!
//! Run with `cargo bench --bench scale` (about 6 minutes; needs `redis-server` for `keys` and `replicas`). Every
//! figure is measured on one machine where the clients, the gateways, their upstreams and Redis share the cores, so
//! read the constants, not the absolute times. Dimensions (`MCPGW_SCALE_ONLY=sessions,keys,...` runs some of them):
//!
//! - `sessions`: 100, 1,000, 3,000 and 10,000 MCP sessions (2025-06-18 `initialize` + `notifications/initialized`
//!   over four keep-alive connections) opened and held idle, each count in a gateway of its own; RSS after opening
//!   and again after `MCPGW_SCALE_IDLE_SECONDS` (default 40) of idleness, the KiB per session (least-squares slope),
//!   the p50 of a `gw_secure_call_tools` echo in one of the sessions, and a `tools/list` in a session after the wait
//!   (an error is printed when it fails).
//! - `keys`: 10k, 100k, 300k and 1M API keys in the file (1,000 users in 100 projects): start to ready, RSS, the p50
//!   of an echo authenticated by the key in the middle of the table; then the same 1M keys in the Redis
//!   configuration store, a client calling without pause while the store is reloaded (a write by another replica,
//!   followed through pub/sub) and while the gateway makes an admin write: the longest call of each window.
//! - `tools`: transparent mode, 50, 500, 2,000 and 5,000 upstream tools over five servers (the mock upstream's
//!   `--tools-file`): the p50 of a `tools/list` from the cache, the gateway's CPU per listing, RSS.
//! - `rules`: 1, 10, 100 and 1,000 authorization rules (contract 17) that do not match the call: the gateway's CPU
//!   per echo call (four clients, `MCPGW_SCALE_SECONDS` each, default 3) and the p50 at one client.
//! - `replicas`: 1, 2 and 4 replicas on one Redis configuration store, eight clients spread over them: calls per
//!   second, the CPU per call of each replica, and the time an admin write on one takes to reach the others.
//!
//! `MCPGW_SCALE_LISTINGS` sets the timed listings per point of `tools` (default 200), `MCPGW_SCALE_RELOAD_KEYS` the keys
//! of the reloaded store (default 1,000,000). `MCPGW_SCALE_BIN_DIR` runs another build (a directory holding `mcpgw` and `mcpgw-mock-upstream`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "support/scale/dimensions.rs"]
mod dimensions;
#[path = "support/launch.rs"]
#[allow(dead_code)]
mod launch;
#[path = "support/procfs.rs"]
#[allow(dead_code)]
mod procfs;
#[path = "support/raw_clients.rs"]
#[allow(dead_code)]
mod raw_clients;
#[path = "support/redis.rs"]
#[allow(dead_code)]
mod redis_server;
#[path = "support/scale/reload.rs"]
mod reload;

use launch::{free_port, http_get, ready};
use raw_clients::{Answer, RawHttp};

const KEY: &str = "gw_scale-key-00000000000000000000000000000000000";
const ADMIN: &str = "scale-admin-key-0123456789abcdefghijklmnop";
const VERSION: &str = "2025-06-18";
const SHARED: &str = "2 cores shared by clients, gateways, upstreams and redis";

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Where the binaries are: `MCPGW_SCALE_BIN_DIR`, else the ones cargo built with this bench.
fn binary(name: &str) -> String {
    match std::env::var("MCPGW_SCALE_BIN_DIR") {
        Ok(dir) => Path::new(&dir).join(name).to_string_lossy().into_owned(),
        Err(_) if name == "mcpgw" => env!("CARGO_BIN_EXE_mcpgw").to_string(),
        Err(_) => env!("CARGO_BIN_EXE_mcpgw-mock-upstream").to_string(),
    }
}

/// A configuration with the mock upstream as server `mock`, one project, one user and [`KEY`].
fn base_config() -> Value {
    json!({
        "admin_apikey": ADMIN,
        "common_mcp_gateway_config": {"gw_log_level": "WARNING", "upstream_pool": {"max_processes_per_server": 2},
            "limits": {"max_sessions_per_key": 1_000_000, "max_inflight_per_key": 1000}},
        "mcp_configs": {"c1": {"mcp_config_name": "scale", "mcp_config": [
            {"server_name": "mock", "config": {"command": binary("mcpgw-mock-upstream"), "args": []}}]}},
        "projects": {"p1": {"project_name": "scale", "mcp_config_id": "c1", "users": ["u1"]}},
        "users": {"u1": {"email": "scale@example.com"}},
        "apikeys": {KEY: {"project_id": "p1", "user_id": "u1"}}
    })
}

/// A running `mcpgw serve`, killed (SIGTERM, then waited for) when dropped.
pub struct Gateway {
    child: Child,
    pub addr: String,
    pub metrics: u16,
    pub admin: u16,
    pub ready_after: Duration,
    stderr: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Gateway {
    /// Writes `config` into a temporary directory and starts the gateway on it.
    fn start(config: &Value) -> Gateway {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("gw.json");
        std::fs::write(&path, serde_json::to_vec(config).expect("json")).expect("write the config");
        let mut gateway = Gateway::start_file(&path, Duration::from_secs(30));
        gateway._dir = Some(dir);
        gateway
    }

    /// Starts the gateway on the file at `path`, waiting up to `patience` for it to be ready.
    fn start_file(path: &Path, patience: Duration) -> Gateway {
        let (port, metrics, admin) = (free_port(), free_port(), free_port());
        let stderr = path.with_extension(format!("{port}.stderr"));
        let log = std::fs::File::create(&stderr).expect("a stderr file");
        let started = Instant::now();
        let child = Command::new(binary("mcpgw"))
            .args(["serve", "--config"])
            .arg(path)
            .args(["--gateway-addr", &format!("127.0.0.1:{port}")])
            .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
            .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
            .args(["--shutdown-grace", "2"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start mcpgw");
        let mut gateway = Gateway {
            child,
            addr: format!("127.0.0.1:{port}"),
            metrics,
            admin,
            ready_after: Duration::ZERO,
            stderr,
            _dir: None,
        };
        while !ready(metrics) {
            if started.elapsed() > patience || gateway.child.try_wait().ok().flatten().is_some() {
                panic!("mcpgw did not become ready within {patience:?}:\n{}", gateway.log_tail());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        gateway.ready_after = started.elapsed();
        gateway
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn rss_mib(&self) -> f64 {
        procfs::rss_kib(self.pid()) as f64 / 1024.0
    }

    pub fn cpu_micros(&self) -> u64 {
        procfs::cpu_micros(self.pid())
    }

    /// The last lines the gateway wrote to stderr.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }

    /// A gauge or counter of `/metrics` (the first sample of `name`, labels included in `name` when given).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let text = http_get(self.metrics, "/metrics");
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

/// One keep-alive connection that carries requests of any number of sessions (or of none).
pub struct Conn {
    http: RawHttp,
    addr: String,
    key: String,
}

impl Conn {
    pub async fn open(addr: &str, key: &str) -> Conn {
        // A "stateless" raw client makes no handshake: the requests below carry their own headers.
        let http = RawHttp::try_connect(addr, key, true).await.expect("connect to the gateway");
        Conn { http, addr: addr.to_string(), key: key.to_string() }
    }

    /// The bytes of a `POST /mcp/` of `body`, in `session` when given.
    pub fn bytes(&self, session: Option<&str>, body: &Value) -> Vec<u8> {
        let body = serde_json::to_vec(body).expect("json");
        let session = session
            .map(|id| format!("Mcp-Session-Id: {id}\r\nMCP-Protocol-Version: {VERSION}\r\n"))
            .unwrap_or_default();
        let mut request = format!(
            "POST /mcp/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{session}Content-Length: {}\r\n\r\n",
            self.addr,
            self.key,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(&body);
        request
    }

    pub async fn send(&mut self, request: &[u8]) -> Answer {
        self.http.try_post(request).await.expect("an answer from the gateway")
    }

    /// Opens a session (`initialize`, then `notifications/initialized`) and gives its id.
    pub async fn initialize(&mut self) -> Result<String, String> {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "mcpgw-bench-scale", "version": "1"}}});
        let answer = self.send(&self.bytes(None, &init)).await;
        if answer.status != 200 {
            return Err(format!("initialize: {} {}", answer.status, String::from_utf8_lossy(&answer.body)));
        }
        let id = answer
            .headers
            .iter()
            .find(|(name, _)| name == "mcp-session-id")
            .map(|(_, v)| v.clone())
            .ok_or("initialize: no session id")?;
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer = self.send(&self.bytes(Some(&id), &initialized)).await;
        if answer.status != 202 {
            return Err(format!("initialized: {} {}", answer.status, String::from_utf8_lossy(&answer.body)));
        }
        Ok(id)
    }

    /// A `gw_secure_call_tools` echo of `text` to server `mock`.
    pub fn echo(&self, session: Option<&str>, text: &str) -> Vec<u8> {
        self.bytes(
            session,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "gw_secure_call_tools",
                "arguments": {"server_name": "mock", "tool_calls": [{"name": "echo", "args": {"text": text}}]}}}),
        )
    }
}

/// Whether an answer is a successful echo of `text`.
pub fn echoed(answer: &Answer, text: &str) -> bool {
    let body = String::from_utf8_lossy(&answer.body);
    answer.status == 200 && body.contains(text) && !body.contains("error_code") && !body.contains("\"isError\":true")
}

/// Sends `request` `count` times at concurrency 1 and gives each round trip; panics on a wrong answer.
pub async fn timed(conn: &mut Conn, request: &[u8], count: usize, check: impl Fn(&Answer) -> bool) -> Vec<Duration> {
    let mut times = Vec::with_capacity(count);
    for _ in 0..count {
        let start = Instant::now();
        let answer = conn.send(request).await;
        times.push(start.elapsed());
        assert!(check(&answer), "unexpected answer {}: {}", answer.status, String::from_utf8_lossy(&answer.body));
    }
    times
}

/// The `p`-quantile of `times` (sorted in place), in milliseconds.
pub fn quantile_ms(times: &mut [Duration], p: f64) -> f64 {
    if times.is_empty() {
        return f64::NAN;
    }
    times.sort_unstable();
    times[((times.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1e3
}

/// The least-squares line through `points`: (slope, intercept).
pub fn fit(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let (sx, sy) = points.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let sxx: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    let sxy: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (slope, my - slope * mx)
}

/// A blocking request to 127.0.0.1:`port` with the admin key: (status, body).
pub fn admin_request(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return (0, Value::Null) };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
    let body = body.map(|b| serde_json::to_vec(b).expect("json")).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {ADMIN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body)).is_err() {
        return (0, Value::Null);
    }
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    let _ = reader.read_line(&mut status_line);
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut rest = String::new();
    let _ = reader.read_to_string(&mut rest);
    let body = rest.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    // A chunked body: the JSON starts at the first brace.
    let json = body.find('{').and_then(|at| serde_json::Deserializer::from_str(&body[at..]).into_iter().next());
    (status, json.and_then(Result::ok).unwrap_or(Value::Null))
}

fn selected(name: &str) -> bool {
    match std::env::var("MCPGW_SCALE_ONLY") {
        Ok(only) => only.split(',').any(|d| d.trim() == name),
        Err(_) => true,
    }
}

fn main() {
    // `cargo test --benches` runs benchmarks as tests: skip the long run there.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    println!("cost as the work grows (issue 36); {SHARED}\n");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    if selected("sessions") {
        runtime.block_on(dimensions::sessions());
    }
    if selected("keys") {
        runtime.block_on(dimensions::keys());
    }
    if selected("keys") || selected("reload") {
        runtime.block_on(reload::redis_reload());
    }
    if selected("tools") {
        runtime.block_on(dimensions::tools());
    }
    if selected("rules") {
        runtime.block_on(dimensions::rules());
    }
    if selected("replicas") {
        runtime.block_on(dimensions::replicas());
    }
}
