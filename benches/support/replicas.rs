//! The two-replica soak (issue 21, contract section 12): two `mcpgw serve` processes whose configuration lives in one
//! real `redis-server` (`config_store: {"type": "redis"}`).
//!
//! Clients open MCP sessions on one replica and use them on both, alternately (each call a `gw_secure_call_tools`
//! echo of a text unique to the request, checked); one admin writer per replica creates users as fast as it can and,
//! after each acknowledged write, reads the new user on the *other* replica until it is there (the propagation time);
//! Redis is killed and started again at an interval (it keeps an append-only file, fsynced on every write, as a
//! production Redis would). At the end every acknowledged write must be on both replicas. Writes refused with 503
//! `CONFIG_STORE_UNAVAILABLE` while Redis is down are counted apart: they changed nothing and said so.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::{Value, json};

use super::launch::{free_port, ready};
use super::redis_server::Redis;

const KEY: &str = "gw_replicas-key-000000000000000000000000000000000";
const ADMIN: &str = "replicas-admin-key-0123456789abcdefghijklmnop";
const VERSION: &str = "2025-06-18";

/// What to run.
#[derive(Clone, Debug)]
pub struct ReplicaOptions {
    pub duration: Duration,
    pub clients: usize,
    pub redis_restart_every: Duration,
    /// How long Redis stays down at each restart.
    pub redis_down_for: Duration,
}

/// What happened.
#[derive(Debug, Default)]
pub struct ReplicaReport {
    pub duration: Duration,
    pub clients: usize,
    pub calls_ok: u64,
    pub calls_unanswered: u64,
    pub calls_wrong: u64,
    /// Calls answered by the replica that did not open their session.
    pub calls_moved: u64,
    pub writes_acked: u64,
    pub writes_refused: u64,
    pub writes_lost: u64,
    pub redis_restarts: u64,
    /// Write acknowledged on one replica to visible on the other, in milliseconds, sorted.
    pub propagation_ms: Vec<f64>,
    pub notes: Vec<String>,
}

impl ReplicaReport {
    fn percentile(&self, p: f64) -> f64 {
        if self.propagation_ms.is_empty() {
            return f64::NAN;
        }
        let at = ((self.propagation_ms.len() - 1) as f64 * p).round() as usize;
        self.propagation_ms[at]
    }

    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.calls_unanswered > 0 {
            out.push(format!("{} calls unanswered", self.calls_unanswered));
        }
        if self.calls_wrong > 0 {
            out.push(format!("{} calls answered wrongly", self.calls_wrong));
        }
        if self.writes_lost > 0 {
            out.push(format!("{} acknowledged writes lost", self.writes_lost));
        }
        if self.writes_acked == 0 || self.calls_moved == 0 {
            out.push("no write or no call on the other replica: the run measured nothing".to_string());
        }
        out.extend(self.notes.iter().cloned());
        out
    }

    pub fn text(&self) -> String {
        format!(
            "two replicas, one Redis store ({} s, {} clients; 2 cores shared by clients, both replicas, their upstreams \
             and Redis)\n  calls: {} answered correctly ({} on the replica that did not open the session), {} \
             unanswered, {} wrong\n  admin writes: {} acknowledged, {} refused with 503 while Redis was down, {} lost\n  \
             Redis restarts: {}\n  propagation to the other replica: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} \
             samples)\n",
            self.duration.as_secs(),
            self.clients,
            self.calls_ok,
            self.calls_moved,
            self.calls_unanswered,
            self.calls_wrong,
            self.writes_acked,
            self.writes_refused,
            self.writes_lost,
            self.redis_restarts,
            self.percentile(0.5),
            self.percentile(0.99),
            self.propagation_ms.last().copied().unwrap_or(f64::NAN),
            self.propagation_ms.len(),
        )
    }
}

struct Replica {
    child: Child,
    mcp: String,
    admin: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking HTTP client (reqwest has rustls without a default crypto provider, see `src/outbound/`). Idle pooled
/// connections are dropped early: reusing one a replica is closing at that moment fails the request (a race of the
/// client, not a gateway fault).
fn http_client() -> Client {
    mcpgw::outbound::ensure_crypto_provider();
    Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .pool_idle_timeout(Duration::from_millis(500))
        .build()
        .expect("an HTTP client")
}

fn start_replica(config: &Path) -> Replica {
    let (port, admin, metrics) = (free_port(), free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_mcpgw"))
        .args(["serve", "--config"])
        .arg(config)
        .args(["--gateway-addr", &format!("127.0.0.1:{port}")])
        .args(["--admin-addr", &format!("127.0.0.1:{admin}")])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics}")])
        .args(["--shutdown-grace", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mcpgw");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready(metrics) {
        assert!(Instant::now() < deadline, "a replica did not become ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    Replica { child, mcp: format!("http://127.0.0.1:{port}/mcp/"), admin: format!("http://127.0.0.1:{admin}") }
}

fn post(client: &Client, url: &str, session: Option<&str>, body: &Value) -> Option<(u16, Option<String>, Value)> {
    let mut request = client
        .post(url)
        .bearer_auth(KEY)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .json(body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session).header("mcp-protocol-version", VERSION);
    }
    let response = request.send().ok()?;
    let status = response.status().as_u16();
    let session = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let text = response.text().ok()?;
    // A JSON answer, or the data line of an SSE answer.
    let json = text.lines().find_map(|line| serde_json::from_str(line.trim_start_matches("data:").trim()).ok());
    Some((status, session, json.unwrap_or(Value::Null)))
}

fn open_session(client: &Client, url: &str) -> Option<String> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "replicas", "version": "1"}}});
    let (status, session, _) = post(client, url, None, &init)?;
    let session = session.filter(|_| status == 200)?;
    post(client, url, Some(&session), &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))?;
    Some(session)
}

/// One client: a session opened on replica `client % 2`, its calls alternating between the two replicas.
fn client(n: usize, urls: Arc<Vec<String>>, stop: Arc<AtomicBool>, report: Arc<Mutex<ReplicaReport>>) {
    let http = http_client();
    let home = n % 2;
    let Some(session) = open_session(&http, &urls[home]) else {
        report.lock().expect("report").calls_unanswered += 1;
        return;
    };
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        k += 1;
        let target = (home + k as usize) % 2;
        let text = format!("client {n} call {k}");
        let body = json!({"jsonrpc": "2.0", "id": k, "method": "tools/call", "params": {"name": "gw_secure_call_tools",
            "arguments": {"server_name": "mock", "tool_calls": [{"name": "echo", "args": {"text": text}}]}}});
        let answer = post(&http, &urls[target], Some(&session), &body);
        let mut report = report.lock().expect("report");
        match answer {
            None => report.calls_unanswered += 1,
            Some((200, _, message)) => {
                let echoed = message.pointer("/result/structuredContent/results/0/response/content/0/text");
                if message["id"] == json!(k) && echoed == Some(&json!(text)) {
                    report.calls_ok += 1;
                    if target != home {
                        report.calls_moved += 1;
                    }
                } else {
                    report.calls_wrong += 1;
                }
            }
            Some(_) => report.calls_wrong += 1,
        }
    }
}

/// One admin writer on replica `mine`: creates users, and after each acknowledged one waits until `other` has it.
fn writer(
    mine: String,
    other: String,
    tag: usize,
    stop: Arc<AtomicBool>,
    report: Arc<Mutex<ReplicaReport>>,
    acked: Arc<Mutex<Vec<String>>>,
) {
    let http = http_client();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let email = format!("w{tag}-{n}@example.com");
        let sent = http.post(format!("{mine}/api/v1/users")).bearer_auth(ADMIN).json(&json!({"email": email})).send();
        let Ok(response) = sent else {
            report.lock().expect("report").notes.push(format!("admin write {email} unanswered"));
            continue;
        };
        let status = response.status().as_u16();
        let body: Value = response.json().unwrap_or(Value::Null);
        match status {
            201 => {}
            503 if body["error"] == json!("CONFIG_STORE_UNAVAILABLE") => {
                report.lock().expect("report").writes_refused += 1;
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            _ => {
                report.lock().expect("report").notes.push(format!("admin write {email}: {status} {body}"));
                continue;
            }
        }
        let acked_at = Instant::now();
        acked.lock().expect("acked").push(email.clone());
        report.lock().expect("report").writes_acked += 1;
        let id = body.pointer("/data/user_id").or_else(|| body.pointer("/data/id")).and_then(Value::as_str);
        let Some(id) = id.map(str::to_string) else { continue };
        let deadline = acked_at + Duration::from_secs(10);
        while Instant::now() < deadline {
            let seen = http.get(format!("{other}/api/v1/users/{id}")).bearer_auth(ADMIN).send();
            if seen.is_ok_and(|r| r.status().as_u16() == 200) {
                report.lock().expect("report").propagation_ms.push(acked_at.elapsed().as_secs_f64() * 1000.0);
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn emails(http: &Client, admin: &str) -> Option<Vec<String>> {
    let body: Value = http.get(format!("{admin}/api/v1/users")).bearer_auth(ADMIN).send().ok()?.json().ok()?;
    Some(body["data"].as_array()?.iter().filter_map(|u| u["email"].as_str().map(str::to_string)).collect())
}

/// Runs the two-replica soak.
pub fn run(options: &ReplicaOptions) -> ReplicaReport {
    let dir = tempfile::tempdir().expect("tempdir");
    let redis_dir = dir.path().join("redis");
    std::fs::create_dir_all(&redis_dir).expect("redis dir");
    let redis = Arc::new(Mutex::new(Redis::start(free_port(), Some(&redis_dir))));
    let port = redis.lock().expect("redis").port;
    let config = dir.path().join("gw.json");
    let seed = json!({
        "admin_apikey": ADMIN,
        "common_mcp_gateway_config": {"gw_log_level": "WARNING", "config_store": {"type": "redis"},
            "gw_cache_host": "127.0.0.1", "gw_cache_port": port},
        "mcp_configs": {"c1": {"mcp_config_name": "replicas", "mcp_config": [{"server_name": "mock",
            "description": "mock", "config": {"command": env!("CARGO_BIN_EXE_mcpgw-mock-upstream"), "args": []}}]}},
        "projects": {"p1": {"project_name": "replicas", "mcp_config_id": "c1", "users": ["u1"]}},
        "users": {"u1": {"email": "replicas@example.com"}},
        "apikeys": {KEY: {"project_id": "p1", "user_id": "u1"}}
    });
    std::fs::write(&config, serde_json::to_vec_pretty(&seed).expect("json")).expect("write the seed");
    let replicas = [start_replica(&config), start_replica(&config)];
    let urls = Arc::new(replicas.iter().map(|r| r.mcp.clone()).collect::<Vec<_>>());
    let report = Arc::new(Mutex::new(ReplicaReport {
        duration: options.duration,
        clients: options.clients,
        ..Default::default()
    }));
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|scope| {
        for n in 0..options.clients {
            let (urls, stop, report) = (Arc::clone(&urls), Arc::clone(&stop), Arc::clone(&report));
            scope.spawn(move || client(n, urls, stop, report));
        }
        for (tag, (mine, other)) in [(0, 1), (1, 0)].into_iter().enumerate() {
            let (mine, other) = (replicas[mine].admin.clone(), replicas[other].admin.clone());
            let (stop, report, acked) = (Arc::clone(&stop), Arc::clone(&report), Arc::clone(&acked));
            scope.spawn(move || writer(mine, other, tag, stop, report, acked));
        }
        let started = Instant::now();
        let mut next_restart = started + options.redis_restart_every;
        while started.elapsed() < options.duration {
            std::thread::sleep(Duration::from_millis(50));
            if Instant::now() >= next_restart {
                redis.lock().expect("redis").kill();
                std::thread::sleep(options.redis_down_for);
                redis.lock().expect("redis").up();
                report.lock().expect("report").redis_restarts += 1;
                next_restart = Instant::now() + options.redis_restart_every;
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    // Every acknowledged write on both replicas (they follow the store within 2 s; 10 s allowed here).
    let http = http_client();
    let acked = acked.lock().expect("acked").clone();
    let mut report = std::mem::take(&mut *report.lock().expect("report"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let missing = loop {
        let missing: usize = replicas
            .iter()
            .map(|r| {
                let present = emails(&http, &r.admin).unwrap_or_default();
                acked.iter().filter(|e| !present.contains(e)).count()
            })
            .sum();
        if missing == 0 || Instant::now() > deadline {
            break missing;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    report.writes_lost = missing as u64;
    report.propagation_ms.sort_by(f64::total_cmp);
    report
}
