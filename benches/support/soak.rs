//! The soak and fault driver (issue 7), shared by `cargo bench --bench soak` and the 30-second CI test
//! (`tests/soak.rs`).
//!
//! It starts the `mcpgw` binary with a real `redis-server` as its shared tool cache and two servers of the mock
//! upstream (`mock`, `steady`), then keeps many clients calling tools (half in sessions, half in the stateless
//! 2026-07-28 form; 85 % `gw_secure_call_tools` echo with a text unique to the request, 5 % slow calls of 20 to 220 ms
//! that keep processes busy, 10 % discoveries that go through the Redis cache) while upstream processes are killed at
//! random, the config file is rewritten in place (valid and invalid versions in turn) and Redis is killed and started
//! again. Every request has its own JSON-RPC id and every answer is checked: the right id exactly once, the echo of
//! this request's own text. At a quiet point after a warm-up and again at the end (load stopped, sessions closed,
//! upstream processes retired by a config change, none running, Redis reachable again) it reads the gateway's resident
//! memory and open descriptors; after SIGTERM it looks for upstream processes that outlived the gateway (they carry a
//! marker in their environment, whoever their parent is now).
//!
//! Beside the normal clients runs a hostile key holder (contract 13), of another project on the same MCP config: it
//! sends batches over `max_calls_per_request`, batches of large results that reach `max_response_bytes`, floods the
//! gateway listener with idle connections (within `max_connections`) and opens sessions with its one key until
//! `max_sessions_per_key` refuses them; and (contract 14) leaves answers of 16 MiB unread on connections with a small
//! receive buffer (with a second key of its own, whose budget they fill; the gateway must cut them after
//! `write_timeout_seconds`), floods a `per_session` server with 40
//! stateless calls at once (its processes are counted per key; none may outlive the run), and leaves 2026-07-28 calls
//! waiting on `input_required` unanswered (at most `max_waiting_rounds_per_key`, each ended after
//! `input_required_seconds`). The normal clients' goals do not change: every request answered once, with its own
//! answer, and no session refused. Before the warm-up, the memory bound of one request is measured: the gateway's
//! resident memory during one batch of 64 results of 1 MiB (more than `max_response_bytes`), and how soon after the
//! answer it is back near idle; then during 16 such batches of one key at once, and for the whole run: under idle + 4
//! x `max_response_bytes` + 64 MiB (contract 14).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "launch.rs"]
#[allow(dead_code)]
mod launch;
use launch::{free_port, http_get, http_get_with, ready, spawn_serve_with_admin};
#[path = "procfs.rs"]
#[allow(dead_code)]
mod procfs;
#[path = "redis.rs"]
mod redis_server;
use redis_server::Redis;
#[path = "raw_clients.rs"]
#[allow(dead_code)]
mod raw_clients;
/// The two-replica mode (issue 21), which shares the launcher and Redis.
#[path = "replicas.rs"]
#[allow(dead_code)]
pub mod replicas;
use raw_clients::{Answer, RawHttp};

const KEY: &str = "gw_soak-key-00000000000000000000000000000000000";
/// The hostile key holder's key (project `p2`, the same MCP config).
const HOSTILE_KEY: &str = "gw_soak-hostile-000000000000000000000000000000000";
/// The hostile key holder's second key, whose answers it never reads (its other attacks keep a budget of their own).
const UNREAD_KEY: &str = "gw_soak-unread-0000000000000000000000000000000000";
/// `limits.max_connections` of the soak's config; the hostile flood holds [`FLOOD_CONNECTIONS`] of them at a time.
const MAX_CONNECTIONS: usize = 512;
const FLOOD_CONNECTIONS: usize = 256;
/// `limits.max_response_bytes` (the default).
const MAX_RESPONSE_BYTES: u64 = 32 << 20;
/// `limits.write_timeout_seconds` and `limits.input_required_seconds` of the soak's config (short, so that what the
/// hostile key holder leaves behind ends within a run).
const WRITE_TIMEOUT_SECONDS: u64 = 5;
const INPUT_REQUIRED_SECONDS: u64 = 5;
/// `limits.max_pending_answer_bytes_per_key` (the default).
const MAX_PENDING_ANSWER_BYTES: u64 = 64 << 20;
/// A request without an answer after this long counts as never answered.
const ANSWER_DEADLINE: Duration = Duration::from_secs(30);

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// The measured run (after the warm-up).
    pub duration: Duration,
    /// Load and faults before the first quiet point, so that the start figures include what every path allocates.
    pub warmup: Duration,
    /// Concurrent clients, each on its own connection (even ones in sessions, odd ones stateless).
    pub clients: usize,
    pub kill_every: Duration,
    pub rewrite_every: Duration,
    pub redis_restart_every: Duration,
    /// Run the hostile key holder beside the clients.
    pub hostile: bool,
}

impl Options {
    /// The defaults for a run of `duration`: 16 clients, an upstream kill and a config rewrite every second, a Redis
    /// restart every 10 seconds, 5 seconds of warm-up.
    pub fn new(duration: Duration) -> Options {
        Options {
            duration,
            warmup: Duration::from_secs(5),
            clients: 16,
            kill_every: Duration::from_secs(1),
            rewrite_every: Duration::from_secs(1),
            redis_restart_every: Duration::from_secs(10),
            hostile: true,
        }
    }
}

/// What the clients saw.
#[derive(Default, Debug)]
pub struct Tally {
    pub sent: u64,
    pub ok: u64,
    /// Answered with an error, by reason (HTTP status, JSON-RPC error code or the call's `error_code`).
    pub errors: BTreeMap<String, u64>,
    /// Never answered, by what the client saw instead.
    pub unanswered: BTreeMap<String, u64>,
    /// Answers to a request that had already been answered (or a second answer in one body).
    pub duplicated: u64,
    /// Successful answers with the wrong content (another request's echo, say), with a sample.
    pub wrong: u64,
    pub wrong_sample: Option<String>,
    /// Sessions that could not be opened, by reason.
    pub connect_failures: BTreeMap<String, u64>,
}

/// A quiet-point reading of the gateway process.
#[derive(Debug, Default, Clone)]
pub struct Reading {
    pub rss_kib: u64,
    pub fds: BTreeMap<String, u64>,
    /// The sockets among them, with their ports and states (`procfs::sockets`).
    pub sockets: Vec<String>,
}

impl Reading {
    pub fn fd_total(&self) -> u64 {
        self.fds.values().sum()
    }
}

/// The memory bound of one request (contract 13), read before the warm-up.
#[derive(Debug, Default, Clone)]
pub struct MemoryBound {
    pub idle_kib: u64,
    pub peak_kib: u64,
    /// Resident memory 10 s after the answer (or as soon as it was back under idle + 64 MiB).
    pub after_kib: u64,
    /// How long after the answer resident memory was back under idle + 64 MiB (`None`: not within 10 s).
    pub back_within: Option<Duration>,
    /// The calls of the batch that ran, and those refused with `RESPONSE_TOO_LARGE`.
    pub ran: u64,
    pub refused: u64,
    /// Resident memory while one key sends [`KEY_BATCHES`] such batches at once (contract 14: the bound of one key is
    /// idle + 4 x `max_response_bytes` + `max_pending_answer_bytes_per_key`), and how their calls ended.
    pub key_peak_kib: u64,
    pub key_calls: BTreeMap<String, u64>,
}

/// The outcome of a run.
#[derive(Debug, Default)]
pub struct Report {
    pub options_text: String,
    pub tally: Tally,
    pub kills: u64,
    pub rewrites_valid: u64,
    pub rewrites_invalid: u64,
    pub redis_restarts: u64,
    /// `mcpgw_config_reloads_total` by result, read from `/metrics` at the end.
    pub reloads: BTreeMap<String, u64>,
    pub start: Reading,
    pub end: Reading,
    pub peak_rss_kib: u64,
    pub exit_code: Option<i32>,
    pub leaked_processes: Vec<u32>,
    /// Gateway log lines that mention a panic.
    pub panics: Vec<String>,
    /// Problems of the run itself (a quiet point not reached, say).
    pub problems: Vec<String>,
    /// What the hostile key holder saw, by kind.
    pub hostile: BTreeMap<String, u64>,
    /// Whether the hostile key holder ran.
    pub options_hostile: bool,
    pub memory: MemoryBound,
}

impl Report {
    pub fn answered(&self) -> u64 {
        self.tally.ok + self.tally.errors.values().sum::<u64>() + self.tally.wrong
    }

    pub fn unanswered(&self) -> u64 {
        self.tally.unanswered.values().sum()
    }

    /// Resident memory growth from the start to the end quiet point, in percent.
    pub fn rss_growth_percent(&self) -> f64 {
        (self.end.rss_kib as f64 / self.start.rss_kib.max(1) as f64 - 1.0) * 100.0
    }

    /// The goals of issue 7 that this run missed (empty: all met).
    pub fn failures(&self) -> Vec<String> {
        let t = &self.tally;
        let mut failures = self.problems.clone();
        let check = |failures: &mut Vec<String>, ok: bool, what: String| {
            if !ok {
                failures.push(what);
            }
        };
        check(&mut failures, t.sent > 0 && t.ok * 2 > t.sent, format!("most calls succeed ({} of {})", t.ok, t.sent));
        check(&mut failures, self.unanswered() == 0, format!("never answered: {:?}", t.unanswered));
        check(&mut failures, t.duplicated == 0, format!("answered twice: {}", t.duplicated));
        check(&mut failures, t.wrong == 0, format!("wrong answers: {} (e.g. {:?})", t.wrong, t.wrong_sample));
        check(&mut failures, t.connect_failures.is_empty(), format!("sessions not opened: {:?}", t.connect_failures));
        check(&mut failures, self.sent_matches(), "every request sent is answered or counted unanswered".into());
        check(
            &mut failures,
            self.rss_growth_percent() < 10.0,
            format!("memory growth under 10 %: {:.1} %", self.rss_growth_percent()),
        );
        check(
            &mut failures,
            self.end.fd_total() <= self.start.fd_total(),
            format!(
                "no leaked descriptors: {:?} at the start, {:?} at the end; sockets at the start {:?}, at the end {:?}",
                self.start.fds, self.end.fds, self.start.sockets, self.end.sockets
            ),
        );
        check(
            &mut failures,
            self.leaked_processes.is_empty(),
            format!("leaked processes: {:?}", self.leaked_processes),
        );
        check(&mut failures, self.exit_code == Some(0), format!("exit code 0 after SIGTERM: {:?}", self.exit_code));
        let m = &self.memory;
        check(
            &mut failures,
            self.peak_within_bound(),
            format!("RSS during one request under idle + 4 x max_response_bytes: {m:?}"),
        );
        check(&mut failures, m.back_within.is_some(), format!("RSS back under idle + 64 MiB within 10 s: {m:?}"));
        check(&mut failures, m.refused > 0, format!("max_response_bytes stopped the large batch: {m:?}"));
        check(
            &mut failures,
            m.key_peak_kib <= self.key_bound_kib(),
            format!(
                "RSS during {KEY_BATCHES} large requests of one key under idle + 4 x max_response_bytes + 64 MiB: {m:?}"
            ),
        );
        check(
            &mut failures,
            self.peak_rss_kib <= self.key_bound_kib(),
            format!(
                "RSS during the run (with the hostile key holder) under idle + 4 x max_response_bytes + 64 MiB: {} KiB",
                self.peak_rss_kib
            ),
        );
        if self.options_hostile {
            let seen = |what: &str| self.hostile.iter().filter(|(k, _)| k.contains(what)).map(|(_, n)| n).sum::<u64>();
            check(
                &mut failures,
                seen("never read: cut by write_timeout") > 0
                    && seen("never read: read whole") + seen("never read: still open") == 0,
                format!("answers never read are cut by write_timeout_seconds: {:?}", self.hostile),
            );
            check(
                &mut failures,
                seen("round left waiting: input_required") > 0 && seen("round left waiting: RATE_LIMITED") > 0,
                format!("waiting rounds are bounded per key: {:?}", self.hostile),
            );
            check(
                &mut failures,
                seen("per_session server: success") > 0,
                format!("the per_session server serves the flood within its processes: {:?}", self.hostile),
            );
        }
        check(&mut failures, self.panics.is_empty(), format!("panics in the gateway log: {:?}", self.panics));
        check(
            &mut failures,
            self.kills > 0 && self.rewrites_valid > 0 && self.rewrites_invalid > 0 && self.redis_restarts > 0,
            "every kind of fault happened".into(),
        );
        check(
            &mut failures,
            self.reloads.get("ok").copied().unwrap_or(0) > 0 && self.reloads.get("error").copied().unwrap_or(0) > 0,
            format!("the gateway took the valid rewrites and refused the invalid ones: {:?}", self.reloads),
        );
        failures
    }

    /// Whether resident memory stayed under idle + 4 x `max_response_bytes` during the one large request.
    pub fn peak_within_bound(&self) -> bool {
        self.memory.peak_kib <= self.memory.idle_kib + 4 * (MAX_RESPONSE_BYTES >> 10)
    }

    /// The bound of one key's requests, whatever their number (contract 14).
    fn key_bound_kib(&self) -> u64 {
        self.memory.idle_kib + 4 * (MAX_RESPONSE_BYTES >> 10) + (MAX_PENDING_ANSWER_BYTES >> 10)
    }

    fn sent_matches(&self) -> bool {
        self.tally.sent == self.answered() + self.unanswered()
    }

    /// The report as printed and recorded in `BENCHMARKS.md`.
    pub fn text(&self) -> String {
        let t = &self.tally;
        let mib = |kib: u64| kib as f64 / 1024.0;
        let mut out = String::new();
        out.push_str(&format!("soak: {}\n", self.options_text));
        out.push_str(&format!(
            "faults: {} upstream processes killed, {} config rewrites ({} valid, {} invalid), {} Redis restarts\n",
            self.kills,
            self.rewrites_valid + self.rewrites_invalid,
            self.rewrites_valid,
            self.rewrites_invalid,
            self.redis_restarts
        ));
        out.push_str(&format!("gateway reloads (mcpgw_config_reloads_total): {:?}\n", self.reloads));
        out.push_str(&format!(
            "requests: sent {}, answered {} (success {}, with an error {}, wrong content {}), never answered {}, \
             answered twice {}\n",
            t.sent,
            self.answered(),
            t.ok,
            t.errors.values().sum::<u64>(),
            t.wrong,
            self.unanswered(),
            t.duplicated
        ));
        out.push_str(&format!("errors by reason: {:?}\n", t.errors));
        if !t.unanswered.is_empty() {
            out.push_str(&format!("never answered, by what the client saw: {:?}\n", t.unanswered));
        }
        if !t.connect_failures.is_empty() {
            out.push_str(&format!("sessions not opened: {:?}\n", t.connect_failures));
        }
        out.push_str(&format!(
            "memory (RSS at quiet points): start {:.1} MiB, end {:.1} MiB ({:+.1} %), peak during the run {:.1} MiB\n",
            mib(self.start.rss_kib),
            mib(self.end.rss_kib),
            self.rss_growth_percent(),
            mib(self.peak_rss_kib)
        ));
        out.push_str(&format!(
            "open descriptors (quiet points): start {} {:?}, end {} {:?}\n",
            self.start.fd_total(),
            self.start.fds,
            self.end.fd_total(),
            self.end.fds
        ));
        out.push_str(&format!("sockets (quiet points): start {:?}, end {:?}\n", self.start.sockets, self.end.sockets));
        let m = &self.memory;
        out.push_str(&format!(
            "one request of 64 results of 1 MiB (max_response_bytes 32 MiB): {} calls ran, {} refused; RSS idle {:.1} \
             MiB, peak {:.1} MiB (+{:.1}, {} idle + 4 x max_response_bytes), back under idle + 64 MiB {}\n",
            m.ran,
            m.refused,
            mib(m.idle_kib),
            mib(m.peak_kib),
            mib(m.peak_kib.saturating_sub(m.idle_kib)),
            if self.peak_within_bound() { "within" } else { "over" },
            m.back_within.map_or("not within 10 s".to_string(), |d| format!("{} ms after the answer", d.as_millis()))
        ));
        out.push_str(&format!(
            "{KEY_BATCHES} such requests of one key at once: calls {:?}; RSS peak {:.1} MiB (+{:.1}, {} idle + 4 x \
             max_response_bytes + 64 MiB)\n",
            m.key_calls,
            mib(m.key_peak_kib),
            mib(m.key_peak_kib.saturating_sub(m.idle_kib)),
            if m.key_peak_kib <= self.key_bound_kib() { "within" } else { "over" },
        ));
        if !self.hostile.is_empty() {
            out.push_str("hostile key holder:\n");
            for (what, n) in &self.hostile {
                out.push_str(&format!("  {what}: {n}\n"));
            }
        }
        out.push_str(&format!(
            "after SIGTERM: exit code {:?}, upstream processes left {}\n",
            self.exit_code,
            self.leaked_processes.len()
        ));
        let failures = self.failures();
        if failures.is_empty() {
            out.push_str("goals: all met\n");
        } else {
            out.push_str(&format!("goals missed: {failures:#?}\n"));
        }
        out
    }
}

/// A small deterministic generator (xorshift), so a run needs no extra crate.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The config file's contents, valid or not.
struct Configs {
    path: PathBuf,
    redis_port: u16,
    marker: String,
    generation: u64,
    rewrites: u64,
}

impl Configs {
    /// A valid config; `generation` goes into every server's environment, so a new one retires every process.
    fn valid(&self, description: &str) -> Value {
        let server = |name: &str| {
            json!({"server_name": name, "description": format!("{name}: {description}"),
                "config": {"command": env!("CARGO_BIN_EXE_mcpgw-mock-upstream"), "args": [],
                    "env": {"MCPGW_SOAK_RUN": self.marker, "SOAK_GENERATION": self.generation.to_string()}}})
        };
        // The hostile key holder's `per_session` server, whose `sample` tool asks the client a question.
        let mut session = server("session");
        session["config"]["args"] = json!(["--sample-tool"]);
        session["config"]["session_affinity"] = json!("per_session");
        json!({
            "admin_apikey": ADMIN_KEY,
            "common_mcp_gateway_config": {
                "gw_log_level": "WARNING",
                "gw_mcp_use_external_cache": true, "gw_cache_host": "127.0.0.1", "gw_cache_port": self.redis_port,
                "gw_cache_db": 0,
                // Eight processes a server, so that the six rounds left waiting at once all reach their server and
                // meet `max_waiting_rounds_per_key` (4), not a process limit of the same size.
                "upstream_pool": {"max_processes_per_server": 8},
                "limits": {"max_connections": MAX_CONNECTIONS, "write_timeout_seconds": WRITE_TIMEOUT_SECONDS,
                           "input_required_seconds": INPUT_REQUIRED_SECONDS}
            },
            "mcp_configs": {"c1": {"mcp_config_name": "soak", "tool_exposure": "both",
                                   "mcp_config": [server("mock"), server("steady"), session]}},
            "projects": {"p1": {"project_name": "soak", "mcp_config_id": "c1", "users": ["u1"]},
                         "p2": {"project_name": "hostile", "mcp_config_id": "c1", "users": ["u2"]}},
            "users": {"u1": {"email": "soak@example.com"}, "u2": {"email": "hostile@example.com"}},
            "apikeys": {KEY: {"project_id": "p1", "user_id": "u1"}, HOSTILE_KEY: {"project_id": "p2", "user_id": "u2"},
                        UNREAD_KEY: {"project_id": "p2", "user_id": "u2"}}
        })
    }

    fn write(&self, text: &[u8]) {
        // In place, not by rename: the gateway may read a half-written file, which is one more invalid version.
        std::fs::write(&self.path, text).expect("write the config file");
    }

    /// Writes a new generation (the gateway retires every upstream process).
    fn new_generation(&mut self) {
        self.generation += 1;
        let text = serde_json::to_vec_pretty(&self.valid("steady state")).expect("json");
        self.write(&text);
    }

    /// The next rewrite in the cycle: a new generation, a truncated file, a description change, a config whose project
    /// names a config that does not exist. Gives whether it was valid.
    fn rewrite(&mut self) -> bool {
        self.rewrites += 1;
        match self.rewrites % 4 {
            0 => {
                self.new_generation();
                true
            }
            1 => {
                let text = serde_json::to_vec_pretty(&self.valid("truncated")).expect("json");
                self.write(&text[..text.len() / 2]);
                false
            }
            2 => {
                let text = serde_json::to_vec_pretty(&self.valid(&format!("rewrite {}", self.rewrites))).expect("json");
                self.write(&text);
                true
            }
            _ => {
                let mut config = self.valid("dangling project");
                config["projects"]["p1"]["mcp_config_id"] = json!("no-such-config");
                self.write(&serde_json::to_vec_pretty(&config).expect("json"));
                false
            }
        }
    }
}

/// The gateway process and where it listens.
struct Gateway {
    child: Child,
    addr: String,
    admin: u16,
    metrics: u16,
    log: Arc<Mutex<Vec<String>>>,
}

impl Gateway {
    fn start(config: &Path) -> Gateway {
        let port = free_port();
        let (admin, metrics) = (free_port(), free_port());
        let mut child = spawn_serve_with_admin(config, port, admin, metrics);
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        if let Some(stderr) = child.stderr.take() {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Ok(mut log) = log.lock()
                        && log.len() < 10_000
                    {
                        log.push(line);
                    }
                }
            });
        }
        let gateway = Gateway { child, addr: format!("127.0.0.1:{port}"), admin, metrics, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready(gateway.metrics) {
            assert!(Instant::now() < deadline, "mcpgw did not become ready; log:\n{}", gateway.log_text());
            std::thread::sleep(Duration::from_millis(5));
        }
        gateway
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `mcpgw_config_reloads_total` by result.
    fn reloads(&self) -> BTreeMap<String, u64> {
        let metrics = http_get(self.metrics, "/metrics");
        metrics
            .lines()
            .filter_map(|line| line.strip_prefix("mcpgw_config_reloads_total{result=\""))
            .filter_map(|rest| {
                let (result, value) = rest.split_once("\"} ")?;
                Some((result.to_string(), value.trim().parse::<f64>().ok()? as u64))
            })
            .collect()
    }

    fn log_text(&self) -> String {
        self.log.lock().map(|log| log.join("\n")).unwrap_or_default()
    }

    /// SIGTERM, then the exit code (`None`: killed after 30 s, or ended by a signal).
    fn terminate(&mut self) -> Option<i32> {
        let _ = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What one request asks for and how its answer is checked.
enum Expect {
    /// `gw_secure_call_tools` echo: this text back.
    Echo(String),
    /// `gw_secure_call_tools` slow: a success.
    Call,
    /// `gw_discover_all_tools`: a tool list with `echo`.
    Tools,
}

fn pick(rng: &mut Rng, client: usize, n: u64) -> (&'static str, Value, Expect) {
    let roll = rng.below(100);
    if roll < 85 {
        let server = if n.is_multiple_of(2) { "mock" } else { "steady" };
        let text = format!("soak {client} {n}");
        let args = json!({"server_name": server, "tool_calls": [{"name": "echo", "args": {"text": text}}]});
        ("gw_secure_call_tools", args, Expect::Echo(text))
    } else if roll < 90 {
        let ms = 20 + rng.below(200);
        let args = json!({"server_name": "mock", "tool_calls": [{"name": "slow", "args": {"ms": ms}}]});
        ("gw_secure_call_tools", args, Expect::Call)
    } else {
        ("gw_discover_all_tools", json!({"server_name": "mock"}), Expect::Tools)
    }
}

/// The JSON-RPC messages of an answer body (one JSON document, or the `data:` lines of an event stream).
fn messages(answer: &Answer) -> Vec<Value> {
    let body = String::from_utf8_lossy(&answer.body);
    let event_stream = answer.headers.iter().any(|(n, v)| n == "content-type" && v.contains("text/event-stream"));
    if event_stream {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    } else {
        serde_json::from_str(&body).map(|v| vec![v]).unwrap_or_default()
    }
}

/// Where an answer goes in the tally.
enum Verdict {
    Ok,
    Error(String),
    Wrong(String),
    Unanswered(String),
}

fn judge(answer: &Answer, id: u64, expect: &Expect, duplicated: &mut u64) -> Verdict {
    if answer.status != 200 {
        return Verdict::Error(format!("HTTP {}", answer.status));
    }
    let mut mine = None;
    for message in messages(answer) {
        if message.get("id").and_then(Value::as_u64) == Some(id) && mine.is_none() {
            mine = Some(message);
        } else if message.get("id").is_some_and(|v| !v.is_null()) {
            *duplicated += 1;
        }
    }
    let Some(message) = mine else {
        return Verdict::Unanswered(format!("HTTP 200 without an answer to the request: {}", answer.body.len()));
    };
    if let Some(error) = message.get("error") {
        return Verdict::Error(format!("JSON-RPC error {}", error["code"]));
    }
    let content = &message["result"]["structuredContent"];
    let call = match expect {
        Expect::Tools => content,
        Expect::Echo(_) | Expect::Call => &content["results"][0],
    };
    if call["status"] != "success" {
        let code = call["error_code"].as_str().or(content["error_code"].as_str()).unwrap_or("no error_code");
        return Verdict::Error(code.to_string());
    }
    let good = match expect {
        Expect::Echo(text) => call["response"]["structuredContent"]["text"] == text.as_str(),
        Expect::Call => call["response"]["structuredContent"]["done"] == true,
        Expect::Tools => content["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "echo")),
    };
    if good { Verdict::Ok } else { Verdict::Wrong(message.to_string()) }
}

/// One client: its own connection, a request at a time, until `stop`.
async fn client(n: usize, addr: String, stop: Arc<AtomicBool>, ids: Arc<AtomicU64>, tally: Arc<Mutex<Tally>>) {
    let stateless = !n.is_multiple_of(2);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (n as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut connection: Option<RawHttp> = None;
    let count = |f: &mut dyn FnMut(&mut Tally)| {
        if let Ok(mut tally) = tally.lock() {
            f(&mut tally)
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let Some(conn) = connection.as_mut() else {
            match tokio::time::timeout(ANSWER_DEADLINE, RawHttp::try_connect(&addr, KEY, stateless)).await {
                Ok(Ok(conn)) => connection = Some(conn),
                Ok(Err(e)) => count(&mut |t| *t.connect_failures.entry(e.clone()).or_default() += 1),
                Err(_) => count(&mut |t| *t.connect_failures.entry("no answer within 30 s".into()).or_default() += 1),
            }
            continue;
        };
        let id = ids.fetch_add(1, Ordering::Relaxed);
        let (tool, args, expect) = pick(&mut rng, n, id);
        let request = conn.tool_call_with_id(id, tool, args);
        count(&mut |t| t.sent += 1);
        let verdict = match tokio::time::timeout(ANSWER_DEADLINE, conn.try_post(&request)).await {
            Err(_) => Verdict::Unanswered("no answer within 30 s".into()),
            Ok(Err(e)) => Verdict::Unanswered(format!("connection: {:?}", e.kind())),
            Ok(Ok(answer)) => {
                let mut duplicated = 0;
                let verdict = judge(&answer, id, &expect, &mut duplicated);
                count(&mut |t| t.duplicated += duplicated);
                verdict
            }
        };
        match verdict {
            Verdict::Ok => count(&mut |t| t.ok += 1),
            Verdict::Error(reason) => {
                // A session the gateway no longer knows cannot be used again: open a new one.
                if reason == "HTTP 404" {
                    connection = None;
                }
                count(&mut |t| *t.errors.entry(reason.clone()).or_default() += 1)
            }
            Verdict::Wrong(sample) => count(&mut |t| {
                t.wrong += 1;
                t.wrong_sample.get_or_insert_with(|| sample.clone());
            }),
            Verdict::Unanswered(reason) => {
                connection = None;
                count(&mut |t| *t.unanswered.entry(reason.clone()).or_default() += 1)
            }
        }
    }
    if let Some(conn) = connection {
        let _ = tokio::time::timeout(Duration::from_secs(5), conn.try_close()).await;
    }
}

/// The calls of one `gw_secure_call_tools` answer by outcome (`success` or the error code; the whole batch's code
/// when it ran none), or what went wrong with the request.
fn batch_outcomes(answer: std::io::Result<Answer>) -> BTreeMap<String, u64> {
    let mut outcomes = BTreeMap::new();
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => {
            outcomes.insert(format!("connection: {:?}", e.kind()), 1);
            return outcomes;
        }
    };
    let Some(message) = messages(&answer).into_iter().next() else {
        outcomes.insert(format!("HTTP {} without a JSON-RPC answer", answer.status), 1);
        return outcomes;
    };
    let content = &message["result"]["structuredContent"];
    match content["results"].as_array() {
        Some(results) => {
            for result in results {
                let outcome = result["error_code"].as_str().unwrap_or("success");
                *outcomes.entry(outcome.to_string()).or_default() += 1;
            }
        }
        None => {
            let code = content["error_code"].as_str().or(message["error"]["data"]["error_code"].as_str());
            outcomes.insert(code.unwrap_or("no error_code").to_string(), 1);
        }
    }
    outcomes
}

/// One `gw_secure_call_tools` of `calls` on `server`, stateless, with `key`.
async fn batch(addr: &str, key: &str, server: &str, calls: Vec<Value>) -> std::io::Result<Answer> {
    let mut conn = RawHttp::try_connect(addr, key, true).await.map_err(std::io::Error::other)?;
    let request =
        conn.tool_call_with_id(1, "gw_secure_call_tools", json!({"server_name": server, "tool_calls": calls}));
    conn.try_post(&request).await
}

fn large_calls(n: usize) -> Vec<Value> {
    (0..n).map(|_| json!({"name": "large", "args": {"bytes": 1 << 20}})).collect()
}

/// The hostile key holder (see the module documentation): one action after another until `stop`, each counted by
/// what came back.
async fn hostile(addr: String, stop: Arc<AtomicBool>, seen: HostileSeen) {
    let count = |kind: String, n: u64| {
        if let Ok(mut seen) = seen.lock() {
            *seen.entry(kind).or_default() += n;
        }
    };
    let mut round = 0u64;
    let mut unread = tokio::task::JoinSet::new();
    while !stop.load(Ordering::Relaxed) {
        match round % 7 {
            4 => {
                // Answers never read: the tasks hold them past `write_timeout_seconds`, then see what arrived. A new
                // set once the last one is done.
                while unread.try_join_next().is_some() {}
                for _ in 0..if unread.is_empty() { UNREAD_CONNECTIONS } else { 0 } {
                    let (addr, seen) = (addr.clone(), Arc::clone(&seen));
                    unread.spawn(async move {
                        let outcome = unread_answer(&addr).await;
                        if let Ok(mut seen) = seen.lock() {
                            *seen.entry(format!("answer of 16 MiB never read: {outcome}")).or_default() += 1;
                        }
                    });
                }
            }
            5 => {
                let calls = (0..40).map(|i| stateless(&addr, "session__echo", json!({"text": format!("f{i}")}), false));
                for outcome in futures_util::future::join_all(calls).await {
                    count(format!("stateless call to the per_session server: {outcome}"), 1);
                }
            }
            6 => {
                let rounds = (0..6).map(|_| stateless(&addr, "session__sample", json!({"text": "q"}), true));
                for outcome in futures_util::future::join_all(rounds).await {
                    count(format!("round left waiting: {outcome}"), 1);
                }
            }
            1 => {
                let calls = (0..65).map(|i| json!({"name": "echo", "args": {"text": format!("h{i}")}})).collect();
                for (outcome, n) in batch_outcomes(batch(&addr, HOSTILE_KEY, "mock", calls).await) {
                    count(format!("batch of 65 echo calls: {outcome}"), n);
                }
            }
            2 => {
                for (outcome, n) in batch_outcomes(batch(&addr, HOSTILE_KEY, "mock", large_calls(64)).await) {
                    count(format!("batch of 64 results of 1 MiB, calls: {outcome}"), n);
                }
            }
            3 => {
                let mut held = Vec::new();
                for _ in 0..FLOOD_CONNECTIONS {
                    match tokio::net::TcpStream::connect(&addr).await {
                        Ok(stream) => held.push(stream),
                        Err(e) => count(format!("flood connection: {:?}", e.kind()), 1),
                    }
                }
                count("idle connections held for a second".into(), held.len() as u64);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            _ => {
                // First of all, so that the key holds all its sessions before the first quiet point.
                for _ in 0..70 {
                    match RawHttp::try_connect(&addr, HOSTILE_KEY, false).await {
                        // Left open: the sessions stay until they idle out.
                        Ok(_) => count("sessions opened".into(), 1),
                        Err(e) if e.contains("SESSION_LIMIT") => count("sessions refused: SESSION_LIMIT".into(), 1),
                        Err(e) => count(format!("session: {}", e.chars().take(80).collect::<String>()), 1),
                    }
                }
            }
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    while unread.join_next().await.is_some() {}
}

/// How many large requests one key sends at once in the memory bound's second part.
const KEY_BATCHES: usize = 16;

/// How many connections of the hostile key holder leave their answer unread, each round of that kind.
const UNREAD_CONNECTIONS: usize = 6;

/// What one answer came to: `success`, `input_required`, the `error_code` of an error result, the JSON-RPC error code,
/// or the HTTP status.
fn outcome(answer: &Answer) -> String {
    if answer.status != 200 {
        return format!("HTTP {}", answer.status);
    }
    let Some(message) = messages(answer).into_iter().next() else { return "no message".into() };
    if let Some(error) = message.get("error") {
        return format!("JSON-RPC error {}", error["code"]);
    }
    let result = &message["result"];
    if result["resultType"] == "input_required" {
        return "input_required".into();
    }
    if result["isError"] == true {
        return result["structuredContent"]["error_code"].as_str().unwrap_or("isError").to_string();
    }
    "success".into()
}

/// A stateless (2026-07-28) `tools/call` of the hostile key on a connection of its own; `sampling`: the client
/// declares it can answer `sampling/createMessage` (and never will).
async fn stateless(addr: &str, tool: &str, arguments: Value, sampling: bool) -> String {
    let mut conn = match RawHttp::try_connect(addr, HOSTILE_KEY, true).await {
        Ok(conn) => conn,
        Err(e) => return format!("connect: {}", e.chars().take(60).collect::<String>()),
    };
    let capabilities = if sampling { json!({"sampling": {}}) } else { json!({}) };
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "soak-hostile", "version": "1"}}}});
    let request = conn.request(&body, &format!("Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\n"));
    match tokio::time::timeout(ANSWER_DEADLINE, conn.try_post(&request)).await {
        Ok(Ok(answer)) => outcome(&answer),
        Ok(Err(e)) => format!("connection: {:?}", e.kind()),
        Err(_) => "no answer in time".into(),
    }
}

/// How long past `write_timeout_seconds` a client that reads nothing waits before it looks whether the gateway cut it.
/// The gateway's watchdog looks at its deadline, but its timers can fire late when its runtime is busy: in the debug
/// build under the soak's load (answers of 16-32 MiB built for the hostile key, 16 clients, processes killed) they
/// were measured up to 6.5 s late with builds running beside it, and with a grace of 3 s one answer in six was read
/// whole after all, in a CI run on a quiet machine too.
const UNREAD_GRACE: Duration = Duration::from_secs(15);

/// A batch of 16 results of 1 MiB asked for on a connection with a small receive buffer: the answer's head is read as
/// soon as it comes, then nothing for `write_timeout_seconds` + [`UNREAD_GRACE`], then the rest: `cut by write_timeout` when the
/// gateway closed the connection before the whole body, `read whole` when it all arrived anyway, or what came instead
/// (a refusal's status).
async fn unread_answer(addr: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(template) = RawHttp::try_connect(addr, UNREAD_KEY, true).await else { return "connect failed".into() };
    let arguments = json!({"server_name": "mock", "tool_calls": large_calls(16)});
    let request = template.tool_call_with_id(1, "gw_secure_call_tools", arguments);
    drop(template);
    let Ok(address) = addr.parse() else { return "bad address".into() };
    let Ok(socket) = tokio::net::TcpSocket::new_v4() else { return "socket failed".into() };
    let _ = socket.set_recv_buffer_size(16 << 10);
    let Ok(mut stream) = socket.connect(address).await else { return "connect failed".into() };
    if stream.write_all(&request).await.is_err() {
        return "send failed".into();
    }
    // The head: status line and headers.
    let mut received = Vec::new();
    let mut piece = [0u8; 1024];
    let head_end = loop {
        if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match tokio::time::timeout(ANSWER_DEADLINE, stream.read(&mut piece)).await {
            Ok(Ok(n)) if n > 0 => received.extend_from_slice(&piece[..n]),
            _ => return "no answer head".into(),
        }
    };
    let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        return format!("answered {}", head.lines().next().unwrap_or_default());
    }
    let length = head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
    let Some(length) = length else { return "answer without a length".into() };
    if length < 8 << 20 {
        // The key's budgets refused most of the calls: an answer this small can fit the connection's buffers (the
        // kernel's send buffer alone grows to 4 MiB, `net.ipv4.tcp_wmem`), and is then sent whole without a read.
        return "small (its calls refused)".into();
    }
    tokio::time::sleep(Duration::from_secs(WRITE_TIMEOUT_SECONDS) + UNREAD_GRACE).await;
    let mut body = received.split_off(head_end);
    let read_all = async {
        while body.len() < length {
            match stream.read(&mut piece).await {
                Ok(n) if n > 0 => body.extend_from_slice(&piece[..n]),
                // Closed (or reset) before the whole body arrived.
                _ => return "cut by write_timeout",
            }
        }
        "read whole after all"
    };
    match tokio::time::timeout(Duration::from_secs(10), read_all).await {
        Ok(outcome) => outcome.into(),
        Err(_) => "still open".into(),
    }
}

/// What the hostile key holder saw, by kind.
type HostileSeen = Arc<Mutex<BTreeMap<String, u64>>>;

/// The memory bound of one request: resident memory while a batch of 64 results of 1 MiB runs (sampled every 5 ms),
/// then how soon after the answer it is back under idle + 64 MiB (10 s at most); then the same for [`KEY_BATCHES`] such
/// batches of one key at once.
fn memory_bound(runtime: &tokio::runtime::Runtime, gateway: &Gateway) -> MemoryBound {
    let pid = gateway.pid();
    // Idle means a gateway that has served: one small call first (lazy state, the first upstream process).
    let echo = vec![json!({"name": "echo", "args": {"text": "warm"}})];
    let _ = runtime.block_on(batch(&gateway.addr, KEY, "mock", echo));
    std::thread::sleep(Duration::from_millis(200));
    let idle_kib = procfs::rss_kib(pid);
    let (outcomes, peak_kib) =
        peak_while(pid, || batch_outcomes(runtime.block_on(batch(&gateway.addr, KEY, "mock", large_calls(64)))));
    let mut bound = MemoryBound {
        idle_kib,
        peak_kib,
        ran: outcomes.get("success").copied().unwrap_or(0),
        refused: outcomes.get("RESPONSE_TOO_LARGE").copied().unwrap_or(0),
        ..MemoryBound::default()
    };
    back_to_idle(pid, &mut bound, Instant::now());
    let (answers, key_peak_kib) = peak_while(pid, || {
        let batches = (0..KEY_BATCHES).map(|_| batch(&gateway.addr, KEY, "mock", large_calls(64)));
        runtime.block_on(futures_util::future::join_all(batches))
    });
    bound.key_peak_kib = key_peak_kib;
    for answer in answers {
        for (outcome, n) in batch_outcomes(answer) {
            *bound.key_calls.entry(outcome).or_default() += n;
        }
    }
    let mut after = MemoryBound { idle_kib, ..MemoryBound::default() };
    back_to_idle(pid, &mut after, Instant::now());
    bound
}

/// What `work` gives, and the peak resident memory of `pid` while it ran (sampled every 5 ms).
fn peak_while<T>(pid: u32, work: impl FnOnce() -> T) -> (T, u64) {
    let peak = Arc::new(AtomicU64::new(procfs::rss_kib(pid)));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(procfs::rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let result = work();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    (result, peak.load(Ordering::Relaxed))
}

/// Waits (10 s at most) for resident memory to be back under idle + 64 MiB after an answer.
fn back_to_idle(pid: u32, bound: &mut MemoryBound, answered: Instant) {
    let idle_kib = bound.idle_kib;
    loop {
        bound.after_kib = procfs::rss_kib(pid);
        if bound.after_kib <= idle_kib + (64 << 10) {
            bound.back_within = Some(answered.elapsed());
            break;
        }
        if answered.elapsed() > Duration::from_secs(10) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The fault counters.
#[derive(Default)]
struct Faults {
    kills: AtomicU64,
    rewrites_valid: AtomicU64,
    rewrites_invalid: AtomicU64,
    redis_restarts: AtomicU64,
    peak_rss_kib: AtomicU64,
}

/// Runs `fault` every `period` on its own thread until `stop`.
fn every<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    stop: &Arc<AtomicBool>,
    period: Duration,
    mut fault: impl FnMut() + Send + 'scope,
) {
    let stop = Arc::clone(stop);
    scope.spawn(move || {
        let mut next = Instant::now() + period;
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next {
                fault();
                next += period;
            }
            std::thread::sleep(next.saturating_duration_since(now).min(Duration::from_millis(50)));
        }
    });
}

/// Load and faults for `length`, then everything stopped (Redis up again, the last config valid).
fn phase(
    runtime: &tokio::runtime::Runtime,
    options: &Options,
    gateway: &Gateway,
    configs: &Arc<Mutex<Configs>>,
    redis: &Arc<Mutex<Redis>>,
    length: Duration,
    shared: (&Arc<AtomicU64>, &Arc<Mutex<Tally>>, &Arc<Faults>, &HostileSeen),
) {
    let (ids, tally, faults, hostile_seen) = shared;
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients: Vec<_> = (0..options.clients)
        .map(|n| runtime.spawn(client(n, gateway.addr.clone(), Arc::clone(&stop), Arc::clone(ids), Arc::clone(tally))))
        .collect();
    if options.hostile {
        clients.push(runtime.spawn(hostile(gateway.addr.clone(), Arc::clone(&stop), Arc::clone(hostile_seen))));
    }
    let gateway_pid = gateway.pid();
    std::thread::scope(|scope| {
        let mut rng = Rng(0xdead_beef_cafe_f00d ^ ids.load(Ordering::Relaxed));
        every(scope, &stop, options.kill_every, move || {
            let children = procfs::children(gateway_pid);
            if !children.is_empty() {
                let victim = children[rng.below(children.len() as u64) as usize];
                let _ = Command::new("kill").args(["-KILL", &victim.to_string()]).status();
                faults.kills.fetch_add(1, Ordering::Relaxed);
            }
        });
        every(scope, &stop, options.rewrite_every, move || {
            let valid = configs.lock().map(|mut c| c.rewrite()).unwrap_or(false);
            let counter = if valid { &faults.rewrites_valid } else { &faults.rewrites_invalid };
            counter.fetch_add(1, Ordering::Relaxed);
        });
        every(scope, &stop, options.redis_restart_every, move || {
            if let Ok(mut redis) = redis.lock() {
                redis.kill();
                std::thread::sleep(Duration::from_millis(500));
                redis.up();
                faults.redis_restarts.fetch_add(1, Ordering::Relaxed);
            }
        });
        every(scope, &stop, Duration::from_millis(100), move || {
            faults.peak_rss_kib.fetch_max(procfs::rss_kib(gateway_pid), Ordering::Relaxed);
        });
        std::thread::sleep(length);
        stop.store(true, Ordering::Relaxed);
    });
    runtime.block_on(async {
        for client in clients {
            let _ = client.await;
        }
    });
}

/// The soak config's admin key.
const ADMIN_KEY: &str = "soak-admin-key-0123456789abcdefghijklmnop";

/// Whether the gateway reports Redis reachable on each of its connections: the shared cache's and the quota counters'
/// (the health report names each one that is not); their probes reconnect within a second or two of a restart.
fn redis_reachable(gateway: &Gateway) -> bool {
    let answer = http_get_with(gateway.admin, "/api/v1/system/health", &format!("Authorization: Bearer {ADMIN_KEY}"));
    let Some((_, body)) = answer.split_once("\r\n\r\n") else { return false };
    let Ok(health) = serde_json::from_str::<Value>(body) else { return false };
    let data = &health["data"];
    let unreachable = data["degraded_reasons"]
        .as_array()
        .is_some_and(|reasons| reasons.iter().any(|r| r.as_str().is_some_and(|r| r.contains("(redis at"))));
    data["external_cache"]["reachable"] == true && !unreachable
}

/// Load stopped: a new config generation retires every upstream process; once none is left, the gateway is connected
/// to Redis again and the descriptor count has settled, the gateway is read.
fn quiet_point(gateway: &Gateway, configs: &Arc<Mutex<Configs>>, problems: &mut Vec<String>) -> Reading {
    if let Ok(mut configs) = configs.lock() {
        configs.new_generation();
    }
    let pid = gateway.pid();
    let deadline = Instant::now() + Duration::from_secs(15);
    while !procfs::children(pid).is_empty() {
        if Instant::now() > deadline {
            let left = procfs::children(pid);
            problems.push(format!("upstream processes still running 15 s after a retiring config change: {left:?}"));
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while !redis_reachable(gateway) {
        if Instant::now() > deadline {
            problems.push("the gateway did not report Redis reachable within 15 s of its restart".into());
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Closed connections and ended processes free their descriptors a moment later: wait for three equal counts.
    let mut last = procfs::fds_by_kind(pid);
    let mut same = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while same < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        let now = procfs::fds_by_kind(pid);
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    Reading { rss_kib: procfs::rss_kib(pid), fds: last, sockets: procfs::sockets(pid) }
}

/// Runs the soak and reports what happened.
pub fn run(options: &Options) -> Report {
    let dir = tempfile::tempdir().expect("tempdir");
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let marker = format!("soak-{}-{nanos}", std::process::id());
    let redis_port = free_port();
    let redis = Arc::new(Mutex::new(Redis::start(redis_port, None)));
    let mut configs =
        Configs { path: dir.path().join("gw.json"), redis_port, marker: marker.clone(), generation: 0, rewrites: 0 };
    configs.new_generation();
    let mut gateway = Gateway::start(&configs.path);
    let configs = Arc::new(Mutex::new(configs));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let ids = Arc::new(AtomicU64::new(1));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let faults = Arc::new(Faults::default());
    let mut report = Report {
        options_text: format!(
            "{} s after {} s of warm-up, {} clients ({} in sessions, {} stateless){}, an upstream kill every {:?}, a \
             config rewrite every {:?}, a Redis restart every {:?}",
            options.duration.as_secs(),
            options.warmup.as_secs(),
            options.clients,
            options.clients.div_ceil(2),
            options.clients / 2,
            if options.hostile { " and a hostile key holder" } else { "" },
            options.kill_every,
            options.rewrite_every,
            options.redis_restart_every
        ),
        ..Report::default()
    };
    report.memory = memory_bound(&runtime, &gateway);
    report.options_hostile = options.hostile;
    // The counts cover the warm-up too: its faults and answers are as real as the measured run's.
    let hostile_seen = Arc::new(Mutex::new(BTreeMap::new()));
    let shared = (&ids, &tally, &faults, &hostile_seen);
    phase(&runtime, options, &gateway, &configs, &redis, options.warmup, shared);
    report.start = quiet_point(&gateway, &configs, &mut report.problems);
    phase(&runtime, options, &gateway, &configs, &redis, options.duration, shared);
    report.end = quiet_point(&gateway, &configs, &mut report.problems);
    report.reloads = gateway.reloads();
    report.kills = faults.kills.load(Ordering::Relaxed);
    report.rewrites_valid = faults.rewrites_valid.load(Ordering::Relaxed);
    report.rewrites_invalid = faults.rewrites_invalid.load(Ordering::Relaxed);
    report.redis_restarts = faults.redis_restarts.load(Ordering::Relaxed);
    report.peak_rss_kib = faults.peak_rss_kib.load(Ordering::Relaxed);
    report.exit_code = gateway.terminate();
    report.leaked_processes = procfs::processes_with_env(&format!("MCPGW_SOAK_RUN={marker}"));
    for pid in &report.leaked_processes {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
    let log = gateway.log_text();
    report.panics = log.lines().filter(|l| l.contains("panicked")).map(str::to_string).collect();
    if let Ok(mut tally) = tally.lock() {
        report.tally = std::mem::take(&mut tally);
    }
    if let Ok(mut seen) = hostile_seen.lock() {
        report.hostile = std::mem::take(&mut seen);
    }
    report
}
