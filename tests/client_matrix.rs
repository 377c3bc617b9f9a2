//! The client matrix of contract section 15 ("Proven with clients nobody here wrote"): MCP clients written elsewhere,
//! each run against `@modelcontextprotocol/server-everything` directly (its stdio mode) and through the gateway (over
//! streamable HTTP with the gateway key, and over stdio with `mcpgw serve --transport stdio`). Every step that passes
//! directly must pass through the gateway; the exclusions below say why each one left out is.
//!
//! The clients (`tests/clients/`, one script each, printing one JSON line per step):
//! - the official Python SDK (PyPI `mcp`) in its default mode (`Client(mode="auto")`: `server/discover`, so
//!   2026-07-28 through the gateway, falling back to `initialize` at 2025-11-25 against server-everything, which
//!   does not offer 2026-07-28) and in its legacy mode (`mode="legacy"`: the `initialize` handshake at 2025-11-25);
//! - the official TypeScript SDK's client (npm `@modelcontextprotocol/sdk`, StreamableHTTPClientTransport and
//!   StdioClientTransport; `initialize` at 2025-11-25);
//! - the MCP Inspector's CLI (npm `@modelcontextprotocol/inspector`, one process per step), in its default `legacy`
//!   protocol era over HTTP and stdio, and in its `auto` era over HTTP (2026-07-28 through the gateway). The CLI has
//!   no `ping` and no `completion/complete`, so it does not report those steps.
//!
//! The steps: initialize, tools/list, tools/call of `echo` and of `get-structured-content` (structured output),
//! prompts/list, prompts/get of `simple-prompt`, resources/list, resources/read of the first resource,
//! resources/templates/list, completion/complete of `completable-prompt`, logging/setLevel, ping. One gateway serves
//! every run: server-everything over stdio with `tool_exposure: "both"` and `tool_prefix: ""`, so the transparent
//! steps use the upstream's own names while the gateway view's steps, run only through the gateway and required to
//! pass, see the seven `gw_*` tools and call `gw_list_all_servers`, `gw_get_server_info` and `gw_secure_call_tools`.
//!
//! The peers are pinned (docs/development.md, "Test peers"): the README's test command (`.ci/test`) installs them
//! into `target/npm-peers` and `target/py-peers`; this test installs a missing one on first use too, and fails (never
//! skips) when it cannot.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::API_KEY;
use mcp::*;
use serde_json::{Value, json};

const NODE_PACKAGE: &str = "node@22.23.3";
const TS_SDK_PACKAGE: &str = "@modelcontextprotocol/sdk@1.32.2";
const INSPECTOR_PACKAGE: &str = "@modelcontextprotocol/inspector@2.12.0";
const PYTHON_MCP_VERSION: &str = "2.3.0";

/// How long one client run may take (the Inspector starts one process per step).
const RUN_DEADLINE: Duration = Duration::from_secs(240);
/// Client runs at once: each is mostly waiting on processes starting, but CI machines are small and shared.
const PARALLEL_RUNS: usize = 3;

/// Steps that pass directly but are not compared through the gateway: (client, front, step, why). `*` matches any.
/// Each is a difference of protocol revision, not of the gateway: server-everything offers only `initialize`
/// revisions, so a client that prefers 2026-07-28 speaks 2025-11-25 to it directly and 2026-07-28 to the gateway.
const EXCLUSIONS: &[(&str, &str, &str, &str)] = &[
    (
        "python-sdk default",
        "*",
        "ping",
        "2026-07-28 removed ping (the SDK itself says so: `send_ping` \"only works under mode='legacy'\"); the gateway \
         answers it -32601 at that revision, as rmcp's server does; the legacy row compares ping",
    ),
    (
        "inspector-cli auto",
        "*",
        "logging/setLevel",
        "the Inspector's client refuses it before sending anything at 2026-07-28 (\"Method 'logging/setLevel' is not \
         supported by the negotiated protocol version (wire era 2026-07-28)\"); the legacy rows compare it",
    ),
];

/// Where a run reaches server-everything.
#[derive(Clone, Copy, PartialEq)]
enum Front {
    /// server-everything's stdio mode, started by the client.
    Direct,
    /// The gateway's streamable HTTP endpoint with `Authorization: Bearer <key>`.
    GatewayHttp,
    /// `mcpgw serve --transport stdio`, started by the client with `GW_GATEWAY_KEY`.
    GatewayStdio,
}

impl Front {
    fn name(self) -> &'static str {
        match self {
            Front::Direct => "direct",
            Front::GatewayHttp => "gateway-http",
            Front::GatewayStdio => "gateway-stdio",
        }
    }
}

/// One client of the matrix: its name, the program and arguments that start it, and the fronts it runs through.
struct MatrixClient {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    fronts: &'static [Front],
}

/// Everything a run needs to reach server-everything on each front.
struct Targets {
    everything: PathBuf,
    gateway_url: String,
    config: PathBuf,
}

/// One step's outcome as a client printed it.
#[derive(Clone, Debug)]
struct Step {
    ok: bool,
    detail: String,
}

/// A run's steps by name, and what it printed besides (for the failure message).
struct Run {
    steps: BTreeMap<String, Step>,
    log: String,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The official Python SDK in a venv at `target/py-peers` (the machine's `python3 -m venv`, then pip from PyPI),
/// created once (a lock keeps parallel tests from creating it twice). Panics when python3 or its venv module is
/// missing: `.ci/test` installs them.
fn python_peer() -> PathBuf {
    let venv = repo().join("target").join("py-peers");
    let python = venv.join("bin").join("python");
    let installed = || {
        Command::new(&python)
            .args(["-c", "import importlib.metadata as m; print(m.version('mcp'))"])
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == PYTHON_MCP_VERSION)
    };
    if installed() {
        return python;
    }
    fs::create_dir_all(venv.parent().unwrap()).unwrap();
    let lock = venv.with_extension("install.lock");
    let deadline = Instant::now() + Duration::from_secs(600);
    while fs::OpenOptions::new().write(true).create_new(true).open(&lock).is_err() {
        if installed() {
            return python;
        }
        assert!(Instant::now() < deadline, "waited 10 minutes for another test's venv ({})", lock.display());
        thread::sleep(Duration::from_millis(200));
    }
    let result = std::panic::catch_unwind(|| {
        let _ = fs::remove_dir_all(&venv);
        let made = Command::new("python3").arg("-m").arg("venv").arg(&venv).output();
        let made =
            made.unwrap_or_else(|e| panic!("python3 is required for the client matrix (.ci/test installs it): {e}"));
        assert!(made.status.success(), "python3 -m venv failed: {}", String::from_utf8_lossy(&made.stderr));
        let pip = Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", &format!("mcp=={PYTHON_MCP_VERSION}")])
            .stdin(Stdio::null())
            .output()
            .expect("run pip");
        assert!(
            pip.status.success() && installed(),
            "pip install mcp=={PYTHON_MCP_VERSION} failed:\n{}",
            String::from_utf8_lossy(&pip.stderr)
        );
    });
    let _ = fs::remove_file(&lock);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    python
}

/// The command line of one run: the client's own, then where it connects.
fn command_of(client: &MatrixClient, front: Front, targets: &Targets) -> Command {
    let mut cmd = Command::new(&client.program);
    cmd.args(&client.args);
    for (k, v) in &client.envs {
        cmd.env(k, v);
    }
    match front {
        Front::Direct => {
            cmd.arg("--stdio").arg("--").arg(&targets.everything);
        }
        Front::GatewayHttp => {
            cmd.args(["--gateway", "everything", "--http", &targets.gateway_url]);
            cmd.args(["--header", &format!("Authorization: Bearer {API_KEY}")]);
        }
        Front::GatewayStdio => {
            // The key reaches `mcpgw` in its environment: each script passes `--env` to the server it starts.
            cmd.args(["--gateway", "everything", "--env", &format!("GW_GATEWAY_KEY={API_KEY}")]);
            cmd.arg("--stdio").arg("--").arg(env!("CARGO_BIN_EXE_mcpgw"));
            cmd.arg("serve").arg("--config").arg(&targets.config).args(["--transport", "stdio"]);
        }
    }
    cmd
}

/// Runs one client to its end (at most [`RUN_DEADLINE`]) and reads its step lines.
fn run(mut cmd: Command) -> Run {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {shown}: {e}"));
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let finished = common::wait_until(RUN_DEADLINE, || child.try_wait().is_ok_and(|s| s.is_some()));
    if !finished {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    let mut steps = BTreeMap::new();
    for line in out.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let Some(name) = v["step"].as_str() else { continue };
        let step = Step { ok: v["ok"] == json!(true), detail: v["detail"].as_str().unwrap_or_default().to_string() };
        // A step reported twice (a failed close after a good run) keeps its worst outcome.
        let worse = steps.get(name).is_some_and(|s: &Step| !s.ok);
        if !worse {
            steps.insert(name.to_string(), step);
        }
    }
    let timed_out = if finished { "" } else { " (killed after the deadline)" };
    let tail: String = err.chars().rev().take(3000).collect::<Vec<_>>().into_iter().rev().collect();
    Run { steps, log: format!("{shown}\nexit {status}{timed_out}\nstdout:\n{out}\nstderr (end):\n{tail}") }
}

fn excluded(client: &str, front: Front, step: &str) -> bool {
    EXCLUSIONS.iter().any(|(c, f, s, _)| {
        (*c == "*" || *c == client) && (*f == "*" || *f == front.name()) && (*s == "*" || *s == step)
    })
}

#[test]
fn clients_nobody_here_wrote_pass_through_the_gateway_as_they_pass_directly() {
    let everything = everything_bin();
    let node = npm_peer("node22", NODE_PACKAGE, &[".bin", "node"]);
    npm_peer("clients", TS_SDK_PACKAGE, &["@modelcontextprotocol", "sdk", "dist", "esm", "client", "index.js"]);
    let inspector = npm_peer(
        "clients",
        INSPECTOR_PACKAGE,
        &["@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js"],
    );
    let python = python_peer();
    let scripts = repo().join("tests").join("clients");
    let sdk_dir = repo().join("target").join("npm-peers").join("clients");

    let server = json!({
        "server_name": "everything",
        "description": "MCP reference server",
        "tool_prefix": "",
        "config": {"command": everything.to_str().unwrap(), "args": []},
    });
    let gw = TestGateway::start(&config_with(vec![server], json!({"tool_exposure": "both"})));
    let targets = Targets { everything, gateway_url: gw.mcp.clone(), config: gw.config_path().to_path_buf() };

    const ALL: &[Front] = &[Front::Direct, Front::GatewayHttp, Front::GatewayStdio];
    let python_client = |name, mode: &str| MatrixClient {
        name,
        program: python.clone(),
        args: vec![scripts.join("python_client.py").display().to_string(), "--mode".into(), mode.into()],
        envs: vec![],
        fronts: ALL,
    };
    let inspector_client = |name, era: &str, fronts| MatrixClient {
        name,
        program: node.clone(),
        args: vec![scripts.join("inspector_client.mjs").display().to_string(), "--era".into(), era.into()],
        envs: vec![("INSPECTOR_BIN".into(), inspector.display().to_string())],
        fronts,
    };
    let clients = vec![
        python_client("python-sdk default", "default"),
        python_client("python-sdk legacy", "legacy"),
        MatrixClient {
            name: "typescript-sdk",
            program: node.clone(),
            args: vec![scripts.join("typescript_client.mjs").display().to_string()],
            envs: vec![("MCP_SDK_DIR".into(), sdk_dir.display().to_string())],
            fronts: ALL,
        },
        inspector_client("inspector-cli", "legacy", ALL),
        inspector_client("inspector-cli auto", "auto", &[Front::Direct, Front::GatewayHttp]),
    ];

    // [`PARALLEL_RUNS`] runs at once, the Inspector's (the longest: a process per step) first.
    let started = Instant::now();
    let queue: Vec<(&MatrixClient, Front)> =
        clients.iter().rev().flat_map(|client| client.fronts.iter().map(move |front| (client, *front))).collect();
    let queue = std::sync::Mutex::new(queue.into_iter());
    let done = std::sync::Mutex::new(Vec::new());
    thread::scope(|scope| {
        for _ in 0..PARALLEL_RUNS {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().unwrap().next();
                    let Some((client, front)) = next else { break };
                    let outcome = run(command_of(client, front, &targets));
                    done.lock().unwrap().push((client, front, outcome));
                }
            });
        }
    });
    let runs: Vec<(&MatrixClient, Front, Run)> = done.into_inner().unwrap();
    let elapsed = started.elapsed();

    let mut table = String::new();
    let mut lost = Vec::new();
    for client in &clients {
        let of = |front: Front| runs.iter().find(|(c, f, _)| c.name == client.name && *f == front).map(|r| &r.2);
        let direct = of(Front::Direct).unwrap();
        let direct_passed = direct.steps.values().filter(|s| s.ok).count();
        assert!(
            direct.steps.get("initialize").is_some_and(|s| s.ok) && direct_passed >= 8,
            "{} passes too few steps against server-everything directly:\n{}",
            client.name,
            direct.log
        );
        for front in client.fronts.iter().copied().filter(|f| *f != Front::Direct) {
            let through = of(front).unwrap();
            let mut problems = Vec::new();
            for (step, outcome) in &direct.steps {
                if !outcome.ok || excluded(client.name, front, step) {
                    continue;
                }
                match through.steps.get(step) {
                    Some(s) if s.ok => {}
                    Some(s) => problems.push(format!("{step}: {}", s.detail)),
                    None => problems.push(format!("{step}: not reported")),
                }
            }
            // The gateway view's steps have no direct counterpart: each must pass.
            for (step, outcome) in through.steps.iter().filter(|(name, _)| name.starts_with("gw")) {
                if !outcome.ok && !excluded(client.name, front, step) {
                    problems.push(format!("{step}: {}", outcome.detail));
                }
            }
            if through.steps.get("close").is_some_and(|s| !s.ok) && !excluded(client.name, front, "close") {
                problems.push(format!("close: {}", through.steps["close"].detail));
            }
            let passed = through.steps.values().filter(|s| s.ok).count();
            let revision = |run: &Run| run.steps.get("initialize").map_or("?", |s| s.detail.as_str()).to_string();
            table.push_str(&format!(
                "{:<20} {:<14} {passed:>2} of {:>2} steps pass, {}; directly {direct_passed} pass, {}\n",
                client.name,
                front.name(),
                through.steps.len(),
                revision(through),
                revision(direct),
            ));
            if !problems.is_empty() {
                lost.push(format!(
                    "{} through {}:\n  {}\n--- its run:\n{}",
                    client.name,
                    front.name(),
                    problems.join("\n  "),
                    through.log
                ));
            }
        }
    }
    eprintln!("client matrix ({elapsed:.1?}):\n{table}");
    assert!(
        lost.is_empty(),
        "steps that pass directly fail through the gateway:\n\n{}\n\ngateway log (end):\n{}",
        lost.join("\n\n"),
        gw.logs().lines().rev().take(60).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    );
}

/// A client that accepts every elicitation with `{ok: true}`, and records what it was asked and told.
#[derive(Clone, Default)]
struct Confirming(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Confirming {
    fn heard(&self, what: &str) -> bool {
        self.0.lock().unwrap().iter().any(|seen| seen.contains(what))
    }
}

impl rmcp::ClientHandler for Confirming {
    async fn on_tool_list_changed(&self, _: rmcp::service::NotificationContext<rmcp::RoleClient>) {
        self.0.lock().unwrap().push("tools/list_changed".into());
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.lock().unwrap().push(format!("updated {}", params.uri));
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        self.0.lock().unwrap().push(serde_json::to_string(&request).unwrap());
        Ok(serde_json::from_value(json!({"action": "accept", "content": {"ok": true}})).unwrap())
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities = serde_json::from_value(json!({"elicitation": {}})).unwrap();
        rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::new("confirming", "1.0.0"))
    }
}

/// Contract 15, "Parameter headers": the official Python SDK's server, which answers `server/discover` with only
/// 2026-07-28, is spoken to in that revision: each request carries `Mcp-Method`, `Mcp-Name`, the `Mcp-Param-*` of the
/// tool's `x-mcp-header` parameters (Base64 where the value needs it) and no session; its question during a call
/// (`input_required`) is put to the gateway's client and answered in the next round; its list changes and the updates
/// of a resource a client subscribed to come on the gateway's `subscriptions/listen` stream to it.
#[test]
#[allow(deprecated)] // resources/subscribe is how a 2025-11-25 session subscribes
fn the_python_sdk_as_a_2026_07_28_upstream_gets_its_headers_and_its_questions_answered() {
    let python = python_peer();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut upstream = Command::new(&python)
        .arg(repo().join("tests/clients/modern_upstream.py"))
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the Python SDK upstream");
    let ready =
        common::wait_until(Duration::from_secs(60), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    assert!(ready, "the Python SDK upstream listens");
    let server = json!({"server_name": "modern", "config": {"url": format!("http://127.0.0.1:{port}/mcp")}});
    let gw = TestGateway::start(&config_with(vec![server], json!({"tool_exposure": "transparent"})));
    runtime().block_on(async {
        use rmcp::ServiceExt;
        let asked = Confirming::default();
        let client = asked.clone().serve(http_transport(&gw.mcp, API_KEY, &[])).await.expect("connect");
        let params = rmcp::model::CallToolRequestParams::new("modern__regional")
            .with_arguments(json!({"region": "Zürich"}).as_object().unwrap().clone());
        let result = serde_json::to_value(client.call_tool(params).await.expect("regional")).unwrap();
        let text = result["content"][0]["text"].as_str().unwrap_or_default();
        let seen: Value = serde_json::from_str(text).unwrap_or_else(|_| panic!("{result}"));
        assert_eq!(seen["region"], json!("Zürich"), "{seen}");
        let headers = &seen["headers"];
        assert_eq!(headers["mcp-protocol-version"], json!("2026-07-28"), "{seen}");
        assert_eq!(headers["mcp-method"], json!("tools/call"), "{seen}");
        assert_eq!(headers["mcp-name"], json!("regional"), "the upstream's own name: {seen}");
        assert_eq!(headers["mcp-param-region"], json!("=?base64?WsO8cmljaA==?="), "{seen}");
        assert!(headers.get("mcp-session-id").is_none(), "no session in 2026-07-28: {seen}");

        let confirmed = client.call_tool(rmcp::model::CallToolRequestParams::new("modern__confirm")).await;
        let confirmed = serde_json::to_value(confirmed.expect("confirm")).unwrap();
        assert_eq!(confirmed["content"][0]["text"], json!("confirmed: true"), "{confirmed}");
        assert_ne!(confirmed["isError"], json!(true), "{confirmed}");
        assert!(asked.heard("Proceed?"), "the client was asked");

        // A subscription becomes a URI of the gateway's listen stream to the server; what the server tells on it
        // reaches the client (the stream is opened again with the URI: touched until heard).
        let watched = serde_json::from_value::<rmcp::model::SubscribeRequestParams>(json!({"uri": "test://watched"}));
        client.subscribe(watched.unwrap()).await.expect("subscribe");
        let touch = rmcp::model::CallToolRequestParams::new("modern__touch")
            .with_arguments(json!({"uri": "test://watched"}).as_object().unwrap().clone());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(asked.heard("updated test://watched") && asked.heard("tools/list_changed")) {
            assert!(Instant::now() < deadline, "no update heard: {:?}", asked.0.lock().unwrap());
            client.call_tool(touch.clone()).await.expect("touch");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        client.cancel().await.unwrap();
    });
    let _ = upstream.kill();
    let _ = upstream.wait();
}

/// Issue 36, dormant sessions: the official Python SDK holds its session's `GET` stream open from the handshake on,
/// and its session still goes dormant (`limits.session_dormant_seconds`: the gateway serves that stream from the
/// session's own queue, not from rmcp's worker); a reload that changes what the key sees is told on that stream to the
/// dormant session, and the SDK lists again through the same session.
#[test]
fn a_python_sdk_session_holding_its_get_stream_goes_dormant_and_is_still_told() {
    let python = python_peer();
    let common = json!({"limits": {"session_dormant_seconds": 1}});
    let gw = TestGateway::start(&config_with(vec![mock_server("m1")], common));
    let mut client = Command::new(&python)
        .arg(repo().join("tests/clients/python_dormant.py"))
        .args([gw.mcp.as_str(), API_KEY, &format!("{}/metrics", gw.gw.metrics)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python SDK client");
    let (Some(mut stdin), Some(stdout)) = (client.stdin.take(), client.stdout.take()) else { panic!("pipes") };
    let (sender, steps) = std::sync::mpsc::channel::<Value>();
    thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(step) = serde_json::from_str::<Value>(&line) {
                let _ = sender.send(step);
            }
        }
    });
    let next_step = |name: &str| {
        let step = steps.recv_timeout(Duration::from_secs(60));
        let step = step.unwrap_or_else(|_| panic!("no {name} step from the Python SDK client; stderr:\n{}", gw.logs()));
        assert_eq!(step["step"], json!(name), "{step}");
        assert_eq!(step["ok"], json!(true), "{step}; stderr:\n{}", gw.logs());
    };
    next_step("connected");
    next_step("dormant");
    // The configuration's view turns to "both": the upstream's tools join the seven gw_* tools.
    let mut file = common::read_json(gw.config_path());
    file["common_mcp_gateway_config"]["tool_exposure"] = json!("both");
    common::replace_json(gw.config_path(), &file);
    std::io::Write::write_all(&mut stdin, b"go\n").expect("tell the client");
    next_step("told");
    next_step("listed");
    let _ = client.kill();
    let _ = client.wait();
}
