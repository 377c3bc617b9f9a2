//! Shared helpers for the black-box tests: a fixture configuration with known ids and keys, a
//! `Gateway` that runs the real `mcpgw serve` binary on ephemeral ports (and kills it on drop),
//! a small blocking HTTP client for the admin API, and assertions for the wire shapes of the
//! contract (envelope, error body, timestamps, UUID v4 ids).
//!
//! Every test makes its own temporary directory, writes a config file into it and starts its own
//! gateway, so tests never share state and can run in parallel.

#![allow(dead_code)]

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use reqwest::Method;
use reqwest::blocking::Client;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The admin key written into every fixture config.
pub const ADMIN_KEY: &str = "test-admin-key-0123456789abcdefghijklmnop";
/// The one user API key of the fixture (alice in project alpha).
pub const API_KEY: &str = "gwkey-fixture-0123456789abcdefghijklmnopqrstuvwxyzABCD";
pub const CONFIG_ID: &str = "3f1c2a4e-8b7d-4c2e-9a1f-0d2b3c4e5f60";
pub const CONFIG_NAME: &str = "default_config";
pub const SPARE_CONFIG_ID: &str = "7a2b9c1d-3e4f-4a5b-8c6d-7e8f9a0b1c2d";
pub const SPARE_CONFIG_NAME: &str = "spare_config";
pub const PROJECT_ID: &str = "5d6e7f80-9a1b-4c2d-8e3f-4a5b6c7d8e9f";
pub const PROJECT_NAME: &str = "alpha";
pub const ALICE_ID: &str = "0a1b2c3d-4e5f-4a6b-9c7d-8e9fa0b1c2d3";
pub const ALICE: &str = "alice@example.com";
pub const BOB_ID: &str = "9f8e7d6c-5b4a-4392-a817-263544536271";
pub const BOB: &str = "bob@example.com";
/// Secret values that must never appear in any admin API answer.
pub const ENV_SECRET: &str = "secret-token-value-123456";
pub const OAUTH_SECRET: &str = "oauth-client-secret-abcdef123456";
pub const CREATED_AT: &str = "2026-01-02T03:04:05.123456";

/// How long a change may take to be in effect (contract: 2 s), plus a little polling slack.
pub const RELOAD_DEADLINE: Duration = Duration::from_millis(2500);
/// Generic deadline for conditions that should hold "at once".
pub const SHORT_DEADLINE: Duration = Duration::from_secs(5);
/// Start-up can be slow when several test binaries share two cores.
pub const STARTUP_DEADLINE: Duration = Duration::from_secs(30);

/// The server entry used in the fixture: env and OAuth secrets that must be masked.
pub fn echo_server() -> Value {
    json!({
        "server_name": "echo",
        "description": "Echo",
        "config": {"command": "python3", "args": ["echo.py"], "env": {"TOKEN": ENV_SECRET}},
        "oauth_config": {
            "enabled": false,
            "OAUTH_GRANT_TYPE": "client_credentials",
            "OAUTH_CLIENT_ID": "client-id",
            "OAUTH_CLIENT_SECRET": OAUTH_SECRET,
            "OAUTH_TOKEN_URL": "http://127.0.0.1:1/token"
        }
    })
}

/// A complete, valid config: two MCP configs (one with the echo server), project alpha using
/// default_config with alice as member, users alice and bob, and one API key for alice in alpha.
pub fn fixture() -> Value {
    json!({
        "admin_apikey": ADMIN_KEY,
        "common_mcp_gateway_config": {"gw_log_level": "INFO"},
        "mcp_configs": {
            CONFIG_ID: {
                "mcp_config_name": CONFIG_NAME,
                "created_at": CREATED_AT,
                "mcp_config": [echo_server()]
            },
            SPARE_CONFIG_ID: {
                "mcp_config_name": SPARE_CONFIG_NAME,
                "created_at": CREATED_AT,
                "mcp_config": []
            }
        },
        "projects": {
            PROJECT_ID: {
                "project_name": PROJECT_NAME,
                "mcp_config_id": CONFIG_ID,
                "users": [ALICE_ID],
                "created_at": CREATED_AT
            }
        },
        "users": {
            ALICE_ID: {"email": ALICE, "created_at": CREATED_AT},
            BOB_ID: {"email": BOB, "created_at": CREATED_AT}
        },
        "apikeys": {
            API_KEY: {"project_id": PROJECT_ID, "user_id": ALICE_ID, "created_at": CREATED_AT, "disabled": false}
        }
    })
}

/// Writes `value` as pretty JSON with mode 0600 (in place, truncating an existing file).
pub fn write_json(path: &Path, value: &Value) {
    fs::write(path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}

/// Writes `value` to a temporary file in the same directory and renames it over `path`.
pub fn replace_json(path: &Path, value: &Value) {
    let tmp = path.with_extension("json.tmp-test");
    write_json(&tmp, value);
    fs::rename(&tmp, path).unwrap();
}

pub fn read_json(path: &Path) -> Value {
    let bytes = fs::read(path).unwrap();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

pub fn file_mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// A temp dir holding the fixture config at `<dir>/gw_mcp_config.json`.
pub fn fixture_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    write_json(&path, &fixture());
    (dir, path)
}

/// Starts a gateway on the fixture config. Keep the returned dir alive as long as the gateway.
pub fn start_fixture() -> (tempfile::TempDir, Gateway) {
    let (dir, path) = fixture_dir();
    let gw = Gateway::start(&path);
    (dir, gw)
}

/// The `key_id` of an API key: first 12 hex characters of its SHA-256.
pub fn key_id(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    hex[..12].to_string()
}

pub fn is_uuid_v4(s: &str) -> bool {
    match uuid::Uuid::parse_str(s) {
        Ok(u) => u.get_version_num() == 4 && s.len() == 36,
        Err(_) => false,
    }
}

/// ISO 8601 without zone, with microseconds: `2026-11-21T23:50:20.752804`.
pub fn assert_timestamp(value: &Value) {
    let s = value.as_str().unwrap_or_else(|| panic!("timestamp is not a string: {value}"));
    assert_eq!(s.len(), 26, "timestamp {s:?} should look like 2026-11-21T23:50:20.752804");
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.6f")
        .unwrap_or_else(|e| panic!("timestamp {s:?} does not parse: {e}"));
}

/// Polls `cond` every 25 ms until it holds or `timeout` passes; returns whether it held.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(25));
    }
}

/// An HTTP answer: status, raw text and the body parsed as JSON (Null when it is not JSON).
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub text: String,
    pub body: Value,
}

impl Resp {
    pub fn data(&self) -> &Value {
        &self.body["data"]
    }

    /// Asserts a success envelope with the given status and returns `data`.
    #[track_caller]
    pub fn ok(&self, status: u16) -> &Value {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.text);
        assert!(self.body["message"].is_string(), "envelope without message: {}", self.text);
        assert_timestamp(&self.body["timestamp"]);
        &self.body["data"]
    }

    /// Asserts an error body `{error, detail, timestamp}` with this status and error code.
    #[track_caller]
    pub fn err(&self, status: u16, error: &str) -> &str {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.text);
        assert_eq!(self.body["error"], json!(error), "unexpected error; body: {}", self.text);
        assert!(self.body["detail"].is_string(), "error without detail: {}", self.text);
        assert_timestamp(&self.body["timestamp"]);
        self.body["detail"].as_str().unwrap()
    }

    /// Asserts an error body with this status and any `error` code; returns the code.
    #[track_caller]
    pub fn err_any(&self, status: u16) -> &str {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.text);
        assert!(self.body["error"].is_string(), "error body without error: {}", self.text);
        assert!(self.body["detail"].is_string(), "error without detail: {}", self.text);
        assert_timestamp(&self.body["timestamp"]);
        self.body["error"].as_str().unwrap()
    }
}

pub fn client() -> Client {
    client_with_timeout(Duration::from_secs(30))
}

/// A blocking client without proxies whose requests give up after `timeout`.
pub fn client_with_timeout(timeout: Duration) -> Client {
    // reqwest is built with rustls but without a default crypto provider (see src/outbound.rs).
    mcpgw::outbound::ensure_crypto_provider();
    // Idle pooled connections are dropped after 0.5 s, below the shortest read timeout the tests configure (1 s):
    // reusing a connection the gateway is closing at that moment fails the request (a race, not a gateway bug).
    Client::builder().no_proxy().timeout(timeout).pool_idle_timeout(Duration::from_millis(500)).build().unwrap()
}

/// Sends one request. `auth`: the full Authorization header value, or None for no header.
/// `body`: JSON body (sent with `Content-Type: application/json`), or None.
pub fn send(client: &Client, method: Method, url: &str, auth: Option<&str>, body: Option<&Value>) -> Resp {
    let mut req = client.request(method, url);
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    if let Some(b) = body {
        req = req.json(b);
    }
    into_resp(req.send().unwrap_or_else(|e| panic!("request to {url} failed: {e}")))
}

/// Sends raw bytes with an explicit content type. Returns Err on a transport error.
pub fn send_raw(
    client: &Client,
    method: Method,
    url: &str,
    auth: Option<&str>,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<Resp, reqwest::Error> {
    let mut req = client.request(method, url).body(body);
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    if let Some(ct) = content_type {
        req = req.header(CONTENT_TYPE, ct);
    }
    Ok(into_resp(req.send()?))
}

fn into_resp(r: reqwest::blocking::Response) -> Resp {
    let status = r.status().as_u16();
    let text = r.text().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Resp { status, text, body }
}

/// A running `mcpgw serve` process with its captured stderr and listener addresses.
pub struct Gateway {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT` of the admin API.
    pub admin: String,
    /// `http://127.0.0.1:PORT` of the metrics listener.
    pub metrics: String,
    /// `http://127.0.0.1:PORT` of the MCP gateway listener (empty when it was not opened).
    pub gateway: String,
    pub config_path: PathBuf,
    /// The admin key the helper methods send (change it after the key changes).
    pub admin_key: String,
    pub stderr: Arc<Mutex<String>>,
    pub client: Client,
}

impl Gateway {
    pub fn start(config_path: &Path) -> Gateway {
        Self::start_with(config_path, &[])
    }

    /// Starts `mcpgw serve --config PATH` on port 0 listeners with extra environment variables,
    /// waits for the admin and metrics "listening" log lines and for `/readyz` to answer 200.
    pub fn start_with(config_path: &Path, envs: &[(&str, &str)]) -> Gateway {
        let mut cmd = base_command();
        cmd.arg("serve")
            .arg("--config")
            .arg(config_path)
            .args(["--admin-addr", "127.0.0.1:0"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(["--gateway-addr", "127.0.0.1:0"]);
        // No drain by default: a test that leaves an MCP session open would otherwise wait out the 25 s grace period
        // when its gateway is stopped. Tests of the drain set their own grace (`envs` come after this).
        cmd.env("GW_SHUTDOWN_GRACE_SECONDS", "0");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        Self::spawn(cmd, config_path)
    }

    /// Spawns a prepared `serve` command and waits until it is ready.
    pub fn spawn(mut cmd: Command, config_path: &Path) -> Gateway {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn mcpgw");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<(String, String)>();
        {
            let pipe = child.stderr.take().unwrap();
            let stderr = stderr.clone();
            thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if let Some((listener, addr)) = listening_line(&line) {
                        let _ = tx.send((listener, addr));
                    }
                    let mut s = stderr.lock().unwrap();
                    s.push_str(&line);
                    s.push('\n');
                }
            });
        }
        {
            let mut pipe = child.stdout.take().unwrap();
            thread::spawn(move || {
                let mut sink = Vec::new();
                let _ = pipe.read_to_end(&mut sink);
            });
        }

        let mut addrs: HashMap<String, String> = HashMap::new();
        let deadline = Instant::now() + STARTUP_DEADLINE;
        while !(addrs.contains_key("admin") && addrs.contains_key("metrics")) {
            if let Ok(Some(status)) = child.try_wait() {
                // Give the reader thread a moment to collect the last lines.
                thread::sleep(Duration::from_millis(100));
                panic!("mcpgw serve exited early with {status}; stderr:\n{}", stderr.lock().unwrap());
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                panic!(
                    "mcpgw serve did not log admin and metrics listening lines; stderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
            if let Ok((listener, addr)) = rx.recv_timeout(Duration::from_millis(25)) {
                addrs.insert(listener, addr);
            }
        }
        let gw = Gateway {
            child: Some(child),
            admin: format!("http://{}", addrs["admin"]),
            metrics: format!("http://{}", addrs["metrics"]),
            // The gateway listener logs before admin and metrics, so its line has been read by now when it exists.
            gateway: addrs.get("gateway").map(|a| format!("http://{a}")).unwrap_or_default(),
            config_path: config_path.to_path_buf(),
            admin_key: ADMIN_KEY.to_string(),
            stderr,
            client: client(),
        };
        let ready = wait_until(STARTUP_DEADLINE, || {
            gw.client.get(format!("{}/readyz", gw.metrics)).send().map(|r| r.status().as_u16() == 200).unwrap_or(false)
        });
        assert!(ready, "/readyz never answered 200; stderr:\n{}", gw.logs());
        gw
    }

    pub fn logs(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.admin, path)
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.admin_key)
    }

    /// A request with the admin key.
    pub fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Resp {
        send(&self.client, method, &self.url(path), Some(&self.bearer()), body)
    }

    /// A request with an explicit Authorization header (or none).
    pub fn call_as(&self, auth: Option<&str>, method: Method, path: &str, body: Option<&Value>) -> Resp {
        send(&self.client, method, &self.url(path), auth, body)
    }

    pub fn raw(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Resp, reqwest::Error> {
        send_raw(&self.client, method, &self.url(path), Some(&self.bearer()), content_type, body)
    }

    pub fn get(&self, path: &str) -> Resp {
        self.call(Method::GET, path, None)
    }

    pub fn post(&self, path: &str, body: &Value) -> Resp {
        self.call(Method::POST, path, Some(body))
    }

    /// POST without a body (routes that take none).
    pub fn post_empty(&self, path: &str) -> Resp {
        self.call(Method::POST, path, None)
    }

    pub fn put(&self, path: &str, body: &Value) -> Resp {
        self.call(Method::PUT, path, Some(body))
    }

    pub fn delete(&self, path: &str) -> Resp {
        self.call(Method::DELETE, path, None)
    }

    /// GET on the metrics listener.
    pub fn metrics_get(&self, path: &str) -> Resp {
        send(&self.client, Method::GET, &format!("{}{}", self.metrics, path), None, None)
    }

    /// A counter or gauge from `/metrics`, e.g. `mcpgw_config_reloads_total{result="ok"}`; 0 when absent.
    pub fn metric(&self, series: &str) -> f64 {
        let r = self.metrics_get("/metrics");
        assert_eq!(r.status, 200);
        r.text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse::<f64>().ok()))
            .unwrap_or(0.0)
    }

    /// `data` of `GET /api/v1/system/health`.
    pub fn system_health(&self) -> Value {
        let r = self.get("/api/v1/system/health");
        r.ok(200).clone()
    }

    /// Sends a signal with `kill -SIG pid` and waits up to 30 s for the exit status.
    pub fn signal_and_wait(&mut self, signal: &str) -> ExitStatus {
        let pid = self.pid().to_string();
        let st = Command::new("kill").arg(format!("-{signal}")).arg(&pid).status().unwrap();
        assert!(st.success(), "kill -{signal} {pid} failed");
        let child = self.child.as_mut().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(Instant::now() < deadline, "mcpgw did not exit after SIG{signal}");
            thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Gateway {
    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Waits up to `within` for the process to exit by itself (no signal); its exit status when it did.
    pub fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            let child = self.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// SIGTERM, then up to `within` for the exit; SIGKILL after that. Returns the exit status when it exited in time.
    /// Never panics (safe in `Drop`).
    pub fn terminate(&mut self, within: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A `mcpgw` command with the gateway's own environment variables removed, so that the
/// developer's shell cannot change what a test sees.
pub fn base_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mcpgw"));
    for var in [
        "GW_CONFIG_PATH",
        "GW_ADMIN_ADDR",
        "GW_METRICS_ADDR",
        "GW_GATEWAY_ADDR",
        "GW_SHUTDOWN_GRACE_SECONDS",
        "GW_BACKUP_KEY",
        "MCPGW_SECRETS_KEY",
        "MCPGW_SECRETS_KEY_PREVIOUS",
        "MCP_TRANSPORT",
        "GW_GATEWAY_KEY",
        "GW_PROJECT_ID",
        "GW_USER_ID",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `mcpgw ARGS` to completion (60 s at most) and returns (status, stdout, stderr).
pub fn run_cli(args: &[&str], envs: &[(&str, &str)]) -> (ExitStatus, String, String) {
    let mut cmd = base_command();
    cmd.args(args).stdin(Stdio::null());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_to_end(cmd, Duration::from_secs(60))
}

/// Runs a prepared command to completion within `timeout` (killing it otherwise).
pub fn run_to_end(mut cmd: Command, timeout: Duration) -> (ExitStatus, String, String) {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn mcpgw");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let err = t_err.join().unwrap();
            panic!("command did not finish within {timeout:?}; stderr:\n{err}");
        }
        thread::sleep(Duration::from_millis(25));
    };
    (status, t_out.join().unwrap(), t_err.join().unwrap())
}

/// Recognises the `listening` log line and returns (listener, addr).
fn listening_line(line: &str) -> Option<(String, String)> {
    let v: Value = serde_json::from_str(line).ok()?;
    // Fields are flattened at the top level; also accept tracing's nested `fields` object.
    for obj in [&v, &v["fields"]] {
        if obj["message"] == json!("listening")
            && let (Some(l), Some(a)) = (obj["listener"].as_str(), obj["addr"].as_str())
        {
            return Some((l.to_string(), a.to_string()));
        }
    }
    None
}

/// Non-empty lines of a text.
pub fn lines(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.trim().is_empty()).collect()
}

/// Finds the array element whose `field` equals `value`.
pub fn find<'a>(list: &'a Value, field: &str, value: &str) -> Option<&'a Value> {
    list.as_array()?.iter().find(|e| e[field] == json!(value))
}

/// `%XX`-encodes characters that are not safe in a path segment (e-mails keep `@` and `.`).
pub fn seg(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
