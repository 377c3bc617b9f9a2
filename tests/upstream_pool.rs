//! The upstream pool against real processes: `mcpgw-mock-upstream` (built with the crate) started through
//! [`UpstreamPool`], checked from outside by process ids, `kill -0`, timings and the answers the calls get.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcpgw::upstream::{Caller, PoolKey, PoolSettings, ServerSpec, UpstreamError, UpstreamPool};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

const MOCK: &str = env!("CARGO_BIN_EXE_mcpgw-mock-upstream");
const TIMEOUT: Duration = Duration::from_secs(10);

fn mock() -> ServerSpec {
    ServerSpec {
        command: MOCK.to_string(),
        remote: None,
        args: vec![],
        env: vec![],
        inherit_env: vec![],
        per_session: false,
        masked_settings: vec![],
        per_user: None,
    }
}

fn key() -> PoolKey {
    PoolKey::new("config-1", "mock")
}

fn pool(max_processes_per_server: usize, idle_timeout: Duration) -> Arc<UpstreamPool> {
    UpstreamPool::new(PoolSettings { max_processes_per_server, idle_timeout, ..PoolSettings::default() })
}

async fn call(
    pool: &UpstreamPool,
    spec: &ServerSpec,
    tool: &str,
    args: Value,
) -> Result<CallToolResult, UpstreamError> {
    call_within(pool, spec, tool, args, TIMEOUT).await
}

async fn call_within(
    pool: &UpstreamPool,
    spec: &ServerSpec,
    tool: &str,
    args: Value,
    timeout: Duration,
) -> Result<CallToolResult, UpstreamError> {
    let args = args.as_object().cloned().unwrap_or_default();
    let result = pool.call_tool(&key(), spec, Caller::default(), tool, args, timeout, None).await?;
    Ok(serde_json::from_value(result).expect("the pool returns a CallToolResult"))
}

fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|content| content.as_text()).map(|text| text.text.as_str()).collect()
}

async fn pid(pool: &UpstreamPool, spec: &ServerSpec) -> u32 {
    let result = call(pool, spec, "pid", json!({})).await.expect("pid call");
    text(&result).parse().expect("a pid")
}

/// Whether a process with this id exists (`kill -0`).
fn alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Polls `condition` every 20 ms until it holds or `within` has passed; returns whether it held.
async fn eventually(within: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn discovery_lists_the_tools_and_the_server_identity() {
    let pool = pool(2, Duration::from_secs(60));
    let discovered = pool.list_tools(&key(), &mock(), Caller::default(), TIMEOUT).await.expect("discovery");
    let names: HashSet<&str> = discovered.tools.iter().filter_map(|tool| tool["name"].as_str()).collect();
    for name in ["echo", "add", "slow", "crash", "large", "garbage", "env", "pid", "fail"] {
        assert!(names.contains(name), "missing tool {name}");
    }
    let echo = discovered.tools.iter().find(|tool| tool["name"] == json!("echo")).expect("echo");
    assert_eq!(echo["inputSchema"]["type"], json!("object"));
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]));
    assert_eq!(discovered.server_name.as_deref(), Some("mcpgw-mock-upstream"));
    assert_eq!(discovered.server_version.as_deref(), Some(mcpgw::VERSION));
    assert!(discovered.server_description.is_some_and(|description| !description.is_empty()));
    pool.shutdown().await;
}

#[tokio::test]
async fn calls_answer_with_the_upstream_result() {
    let pool = pool(1, Duration::from_secs(60));
    let spec = mock();
    let echo = call(&pool, &spec, "echo", json!({"text": "hello"})).await.expect("echo");
    assert_eq!(text(&echo), "hello");
    assert_eq!(echo.structured_content, Some(json!({"text": "hello"})));
    assert_ne!(echo.is_error, Some(true));
    let sum = call(&pool, &spec, "add", json!({"a": 2, "b": 40})).await.expect("add");
    assert_eq!(text(&sum), "42");
    let failed = call(&pool, &spec, "fail", json!({"message": "it broke"})).await.expect("a tool error is a result");
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(text(&failed), "it broke");

    // A JSON-RPC error from the server is a protocol error for that call; the process stays.
    let before = pid(&pool, &spec).await;
    let error = call(&pool, &spec, "no_such_tool", json!({})).await.expect_err("unknown tool");
    assert!(
        matches!(error, UpstreamError::Rejected { ref message, .. } if message.contains("unknown tool")),
        "{error:?}"
    );
    assert_eq!(pid(&pool, &spec).await, before);
    assert_eq!(pool.stats().restarts, 0);
    pool.shutdown().await;
}

#[tokio::test]
async fn concurrent_calls_grow_the_pool_to_its_maximum_and_no_further() {
    let pool = pool(4, Duration::from_secs(60));
    let spec = mock();
    let started = Instant::now();
    let results = concurrently(&pool, &spec, 8, "slow", json!({"ms": 400})).await;
    let elapsed = started.elapsed();
    let pids: HashSet<u64> = results
        .iter()
        .map(|result| {
            let result = result.as_ref().expect("slow call");
            assert_eq!(text(result), "done");
            result.structured_content.as_ref().and_then(|content| content["pid"].as_u64()).expect("pid")
        })
        .collect();
    assert!(pids.len() <= 4, "{} processes served the calls", pids.len());
    assert!(pool.stats().started <= 4, "{:?}", pool.stats());
    // Eight 400 ms calls on at most four processes take two rounds: not one, and far less than eight.
    assert!(elapsed >= Duration::from_millis(800), "finished in {elapsed:?}, faster than two rounds");
    assert!(elapsed < Duration::from_millis(2800), "took {elapsed:?}, the calls did not run in parallel");
    pool.shutdown().await;
}

/// Runs `count` calls of `tool` with `args` concurrently, each in its own task.
async fn concurrently(
    pool: &Arc<UpstreamPool>,
    spec: &ServerSpec,
    count: usize,
    tool: &'static str,
    args: Value,
) -> Vec<Result<CallToolResult, UpstreamError>> {
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..count {
        let (pool, spec, args) = (pool.clone(), spec.clone(), args.clone());
        calls.spawn(async move { call(&pool, &spec, tool, args).await });
    }
    calls.join_all().await
}

#[tokio::test]
async fn a_warm_call_reuses_the_idle_process() {
    let pool = pool(4, Duration::from_secs(60));
    let spec = mock();
    let first = pid(&pool, &spec).await;
    let second = pid(&pool, &spec).await;
    assert_eq!(first, second);
    assert_eq!(pool.stats().started, 1);
    assert_eq!(pool.stats().processes, 1);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_call_waits_for_a_busy_process_within_its_timeout() {
    let pool = pool(1, Duration::from_secs(60));
    let spec = mock();
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let busy = call(&pool, &spec, "slow", json!({"ms": 600, "started_file": started.display().to_string()}));
    let impatient = async {
        // Once the slow call holds the one process.
        assert!(eventually(Duration::from_secs(10), || started.exists()).await, "the slow call did not start");
        call_within(&pool, &spec, "echo", json!({"text": "x"}), Duration::from_millis(200)).await
    };
    let (busy, impatient) = tokio::join!(busy, impatient);
    assert!(busy.is_ok(), "the busy call was disturbed: {busy:?}");
    assert!(matches!(impatient, Err(UpstreamError::Timeout(_))), "{impatient:?}");
    // Waiting for a process is not the process's fault: nothing was killed.
    assert_eq!(pool.stats().restarts, 0);
    assert_eq!(pool.stats().started, 1);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_crashed_process_is_replaced_on_the_next_call() {
    let pool = pool(1, Duration::from_secs(60));
    let spec = mock();
    let before = pid(&pool, &spec).await;
    let started = Instant::now();
    let error = call(&pool, &spec, "crash", json!({})).await.expect_err("crash");
    assert!(matches!(error, UpstreamError::Crashed(ref message) if message.contains("exit code 1")), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(3), "the crash was noticed late");
    let after = pid(&pool, &spec).await;
    assert_ne!(before, after);
    assert!(!alive(before));
    assert_eq!(pool.stats().restarts, 1);
    assert_eq!(pool.stats().started, 2);
    pool.shutdown().await;
}

#[tokio::test]
async fn a_call_over_its_timeout_kills_its_process() {
    let pool = pool(1, Duration::from_secs(60));
    let spec = mock();
    let hung = pid(&pool, &spec).await;
    let started = Instant::now();
    let error = call_within(&pool, &spec, "slow", json!({"ms": 30_000}), Duration::from_millis(300)).await;
    assert!(
        matches!(error, Err(UpstreamError::Timeout(timeout)) if timeout == Duration::from_millis(300)),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(eventually(Duration::from_secs(3), || !alive(hung)).await, "process {hung} survived its timeout");
    assert_ne!(pid(&pool, &spec).await, hung);
    assert_eq!(pool.stats().restarts, 1);
    pool.shutdown().await;
}

#[tokio::test]
async fn garbage_on_stdout_fails_the_call_and_the_next_call_works() {
    let pool = pool(1, Duration::from_secs(60));
    let spec = mock();
    let started = Instant::now();
    let error = call(&pool, &spec, "garbage", json!({})).await.expect_err("garbage");
    assert!(matches!(error, UpstreamError::Protocol(ref message) if message.contains("garbage")), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    let echo = call(&pool, &spec, "echo", json!({"text": "after"})).await.expect("next call");
    assert_eq!(text(&echo), "after");
    pool.shutdown().await;
}

#[tokio::test]
async fn a_large_result_arrives_whole() {
    let pool = pool(1, Duration::from_secs(60));
    let result = call(&pool, &mock(), "large", json!({"bytes": 1024 * 1024})).await.expect("large");
    let body = text(&result);
    assert_eq!(body.len(), 1024 * 1024);
    assert!(body.bytes().all(|byte| byte == b'x'));
    pool.shutdown().await;
}

#[tokio::test]
async fn a_result_over_the_message_limit_is_refused_and_the_process_stays() {
    let pool = pool(1, Duration::from_secs(60));
    pool.set_max_message_bytes(64 * 1024);
    let spec = mock();
    let before = pid(&pool, &spec).await;
    let error = call(&pool, &spec, "large", json!({"bytes": 1024 * 1024})).await.expect_err("too large");
    assert!(matches!(error, UpstreamError::OutputTooLarge { limit: 65536 }), "{error:?}");
    let small = call(&pool, &spec, "large", json!({"bytes": 1000})).await.expect("small");
    assert_eq!(text(&small).len(), 1000);
    assert_eq!(pid(&pool, &spec).await, before);
    pool.shutdown().await;
}

/// The upstream sees only the minimal environment. The gateway's credentials must be in *this* process's environment
/// for the test to mean anything, so the test re-runs itself in a child process that has them.
#[test]
fn upstream_environment_is_minimal() {
    if std::env::var_os("MCPGW_ENV_TEST_CHILD").is_none() {
        let output = Command::new(std::env::current_exe().expect("test binary"))
            .args(["upstream_environment_is_minimal", "--exact", "--nocapture"])
            .env("MCPGW_ENV_TEST_CHILD", "1")
            .env("GW_GATEWAY_KEY", "gateway-secret")
            .env("GW_ADMIN_APIKEY", "admin-secret")
            .env("MCPGW_INHERITED", "inherited-value")
            .env("MCPGW_NOT_LISTED", "not-listed")
            .output()
            .expect("run the child test");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
        assert!(stdout.contains("1 passed"), "the child ran no test: {stdout}");
        return;
    }
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let pool = pool(1, Duration::from_secs(60));
        let spec = ServerSpec {
            env: vec![("TOKEN".into(), "configured".into()), ("TZ".into(), "Configured/Zone".into())],
            inherit_env: vec!["MCPGW_INHERITED".into(), "GW_ADMIN_APIKEY".into()],
            ..mock()
        };
        let mut env = HashMap::new();
        for name in ["GW_GATEWAY_KEY", "GW_ADMIN_APIKEY", "MCPGW_INHERITED", "MCPGW_NOT_LISTED", "TOKEN", "TZ", "PATH"]
        {
            let result = call(&pool, &spec, "env", json!({"name": name})).await.expect("env");
            env.insert(name, text(&result));
        }
        assert_eq!(env["GW_GATEWAY_KEY"], "<unset>");
        assert_eq!(env["GW_ADMIN_APIKEY"], "<unset>", "a listed GW_ name must not be inherited either");
        assert_eq!(env["MCPGW_NOT_LISTED"], "<unset>");
        assert_eq!(env["MCPGW_INHERITED"], "inherited-value");
        assert_eq!(env["TOKEN"], "configured");
        assert_eq!(env["TZ"], "Configured/Zone");
        assert_eq!(env["PATH"], std::env::var("PATH").unwrap_or_else(|_| "<unset>".into()));
        pool.shutdown().await;
    });
}

#[tokio::test]
async fn idle_processes_end_after_the_idle_timeout() {
    let pool = pool(2, Duration::from_millis(300));
    let spec = mock();
    let idle = pid(&pool, &spec).await;
    assert!(alive(idle));
    assert!(eventually(Duration::from_secs(5), || !alive(idle) && pool.stats().processes == 0).await);
    // Ending an idle process is no restart, and the next call starts a fresh one.
    assert_eq!(pool.stats().restarts, 0);
    assert_ne!(pid(&pool, &spec).await, idle);
    pool.shutdown().await;
}

#[tokio::test]
async fn retain_retires_the_processes_of_changed_specs_only() {
    let pool = pool(2, Duration::from_secs(60));
    let spec = mock();
    let other_key = PoolKey::new("config-1", "other");
    let first = pid(&pool, &spec).await;
    let other = pool
        .call_tool(&other_key, &spec, Caller::default(), "pid", serde_json::Map::new(), TIMEOUT, None)
        .await
        .expect("other");
    let other: CallToolResult = serde_json::from_value(other).expect("a CallToolResult");
    let other_pid: u32 = text(&other).parse().expect("pid");

    // Unchanged: the process stays.
    pool.retain(&HashMap::from([(key(), spec.clone()), (other_key.clone(), spec.clone())]));
    assert_eq!(pid(&pool, &spec).await, first);

    // Changed env for `mock`, `other` removed: both processes end; `mock` gets a new one with the new spec.
    let changed = ServerSpec { env: vec![("VERSION".into(), "2".into())], ..mock() };
    pool.retain(&HashMap::from([(key(), changed.clone())]));
    assert!(eventually(Duration::from_secs(5), || !alive(first) && !alive(other_pid)).await);
    let result = call(&pool, &changed, "env", json!({"name": "VERSION"})).await.expect("env");
    assert_eq!(text(&result), "2");
    assert_ne!(pid(&pool, &changed).await, first);
    assert_eq!(pool.stats().restarts, 0);
    pool.shutdown().await;
}

#[tokio::test]
async fn shutdown_ends_every_process_and_its_group() {
    let pool = pool(3, Duration::from_secs(60));
    let dir = tempfile::tempdir().expect("temp dir");
    let helper_file = dir.path().join("helper.pid");
    // A wrapper that leaves a helper in its process group, like servers started through shells or npx.
    let wrapped = ServerSpec {
        command: "/bin/sh".into(),
        args: vec![
            "-c".into(),
            r#"sleep 300 </dev/null >/dev/null 2>&1 & echo $! > "$HELPER_FILE"; exec "$MOCK""#.into(),
        ],
        env: vec![("HELPER_FILE".into(), helper_file.display().to_string()), ("MOCK".into(), MOCK.into())],
        ..mock()
    };
    let pids: HashSet<u64> = concurrently(&pool, &wrapped, 3, "slow", json!({"ms": 100}))
        .await
        .iter()
        .map(|result| {
            let result = result.as_ref().expect("slow call");
            result.structured_content.as_ref().and_then(|content| content["pid"].as_u64()).expect("pid")
        })
        .collect();
    assert_eq!(pids.len(), 3);
    let helper: u32 = std::fs::read_to_string(&helper_file).expect("helper pid").trim().parse().expect("a pid");
    assert!(alive(helper));
    // One more process busy in a call while shutdown happens.
    let plain = mock();
    let started = dir.path().join("slow-started");
    let busy = call(&pool, &plain, "slow", json!({"ms": 30_000, "started_file": started.display().to_string()}));
    let (busy, ()) = tokio::join!(busy, async {
        assert!(eventually(Duration::from_secs(10), || started.exists()).await, "the slow call did not start");
        pool.shutdown().await;
    });
    assert!(matches!(busy, Err(UpstreamError::ShuttingDown)), "{busy:?}");
    for pid in pids {
        assert!(!alive(pid as u32), "process {pid} survived shutdown");
    }
    assert!(eventually(Duration::from_secs(2), || !alive(helper)).await, "the helper {helper} survived shutdown");
    assert_eq!(pool.stats().processes, 0);
    assert!(matches!(call(&pool, &mock(), "pid", json!({})).await, Err(UpstreamError::ShuttingDown)));
    pool.shutdown().await;
}

#[tokio::test]
async fn a_command_that_cannot_start_is_a_start_error() {
    let pool = pool(1, Duration::from_secs(60));
    let missing = ServerSpec { command: "/nonexistent/mcp-server".into(), ..mock() };
    let error = call(&pool, &missing, "pid", json!({})).await.expect_err("no such command");
    assert!(matches!(error, UpstreamError::Start(_)), "{error:?}");
    let not_mcp = ServerSpec { command: "/bin/sh".into(), args: vec!["-c".into(), "exit 3".into()], ..mock() };
    let error = call(&pool, &not_mcp, "pid", json!({})).await.expect_err("exits at once");
    assert!(matches!(error, UpstreamError::Start(ref message) if message.contains("exit code 3")), "{error:?}");
    assert_eq!(pool.stats().started, 0);
    assert_eq!(pool.stats().processes, 0);
    pool.shutdown().await;
}

/// Captured log output of one test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn upstream_stderr_is_forwarded_to_the_logs() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
    // Global, not per thread: tracing caches per call site whether anyone listens, and with tests on other threads a
    // thread-local subscriber can miss events. The other tests' events land in the buffer too, which does no harm.
    tracing::subscriber::set_global_default(subscriber).expect("the only test that sets a subscriber");
    let pool = pool(1, Duration::from_secs(60));
    let upstream = pid(&pool, &mock()).await;
    let logs = || String::from_utf8_lossy(&captured.0.lock().expect("log buffer")).into_owned();
    let line = format!("mcpgw-mock-upstream {} started (pid {upstream})", mcpgw::VERSION);
    assert!(eventually(Duration::from_secs(3), || logs().contains(&line)).await, "not in the logs:\n{}", logs());
    assert!(logs().lines().any(|log| log.contains(&line) && log.contains("server=mock")), "{}", logs());
    pool.shutdown().await;
}

#[tokio::test]
async fn shared_processes_serve_several_calls_at_once() {
    let pool = pool(2, Duration::from_secs(60));
    pool.set_max_calls_per_process(4);
    let spec = mock();
    let started = Instant::now();
    let results = concurrently(&pool, &spec, 8, "slow", json!({"ms": 800})).await;
    let elapsed = started.elapsed();
    let pids: HashSet<u64> = results
        .iter()
        .map(|result| {
            let result = result.as_ref().expect("slow call");
            result.structured_content.as_ref().and_then(|content| content["pid"].as_u64()).expect("pid")
        })
        .collect();
    assert!(pids.len() <= 2, "{} processes served the calls", pids.len());
    // Eight 800 ms calls on two processes taking four calls each: one round, where two rounds would take 1600 ms.
    assert!(elapsed >= Duration::from_millis(800));
    assert!(elapsed < Duration::from_millis(1500), "took {elapsed:?}, the calls did not share the processes");
    pool.shutdown().await;
}

#[tokio::test]
async fn a_timeout_on_a_shared_process_lets_the_other_call_finish_first() {
    let pool = pool(1, Duration::from_secs(60));
    pool.set_max_calls_per_process(2);
    let spec = mock();
    let shared = pid(&pool, &spec).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let started = dir.path().join("started");
    let hung_args = json!({"ms": 30_000, "started_file": started.display().to_string()});
    let hung = call_within(&pool, &spec, "slow", hung_args, Duration::from_millis(1_000));
    let neighbour = async {
        // Once the hung call holds the shared process, the neighbour's call joins it there.
        assert!(eventually(Duration::from_secs(10), || started.exists()).await, "the hung call did not start");
        // Still running when the hung call times out.
        call(&pool, &spec, "slow", json!({"ms": 2_000})).await
    };
    let (hung, neighbour) = tokio::join!(hung, neighbour);
    assert!(matches!(hung, Err(UpstreamError::Timeout(_))), "{hung:?}");
    let neighbour = neighbour.expect("the neighbour's call was cut off");
    let served_by = neighbour.structured_content.as_ref().and_then(|content| content["pid"].as_u64());
    assert_eq!(served_by, Some(u64::from(shared)));
    // The timed-out process ends once its other call is done, and counts as a restart.
    assert!(eventually(Duration::from_secs(3), || !alive(shared)).await, "process {shared} survived");
    assert_ne!(pid(&pool, &spec).await, shared);
    assert_eq!(pool.stats().restarts, 1);
    pool.shutdown().await;
}

/// A `per_session` server's spec; its processes write their pids to `starts` (one line per start).
fn per_session(starts: &std::path::Path) -> ServerSpec {
    ServerSpec { per_session: true, args: vec!["--starts-file".into(), starts.display().to_string()], ..mock() }
}

fn starts_in(path: &std::path::Path) -> Vec<u32> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|line| line.trim().parse().ok()).collect()
}

fn counted_pool(max_processes_per_server: usize, max_processes_per_key: usize) -> Arc<UpstreamPool> {
    UpstreamPool::new(PoolSettings {
        max_processes_per_server,
        max_processes_per_key,
        idle_process_timeout: Duration::from_millis(400),
        ..PoolSettings::default()
    })
}

/// `count` stateless calls of `tool` by `key` to `spec`, at once, each within `timeout`.
async fn calls_of_key(
    pool: &Arc<UpstreamPool>,
    spec: &ServerSpec,
    key: [u8; 32],
    count: usize,
    args: Value,
    timeout: Duration,
) -> Vec<Result<Value, UpstreamError>> {
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..count {
        let (pool, spec, args) = (pool.clone(), spec.clone(), args.as_object().cloned().unwrap_or_default());
        calls.spawn(async move {
            pool.call_tool(
                &PoolKey::new("config-1", "mock"),
                &spec,
                Caller::new(&key, None),
                "slow",
                args,
                timeout,
                None,
            )
            .await
        });
    }
    calls.join_all().await
}

#[tokio::test]
async fn stateless_calls_to_a_per_session_server_share_the_keys_processes_up_to_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let starts = dir.path().join("starts");
    let (pool, spec) = (counted_pool(4, 2), per_session(&starts));
    let results = calls_of_key(&pool, &spec, [1; 32], 12, json!({"ms": 100}), TIMEOUT).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(starts_in(&starts).len(), 2, "12 calls of one key started {:?}", starts_in(&starts));
    // Another key has places of its own, within the server's 4.
    let other = calls_of_key(&pool, &spec, [2; 32], 6, json!({"ms": 100}), TIMEOUT).await;
    assert!(other.iter().all(Result::is_ok), "{other:?}");
    assert_eq!(starts_in(&starts).len(), 4, "{:?}", starts_in(&starts));
    // Idle for idle_process_timeout, they end: nothing is left behind.
    assert!(eventually(Duration::from_secs(5), || pool.stats().processes == 0).await, "{:?}", pool.stats());
    assert!(starts_in(&starts).into_iter().all(|pid| !alive(pid)));
    pool.shutdown().await;
}

#[tokio::test]
async fn a_call_that_finds_every_place_taken_waits_its_timeout_then_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let (pool, spec) = (counted_pool(2, 8), per_session(&dir.path().join("starts")));
    // Two keys hold the server's two places with calls of 3 s.
    let busy = {
        let pool = pool.clone();
        let spec = spec.clone();
        tokio::spawn(async move {
            let (a, b) = tokio::join!(
                calls_of_key(&pool, &spec, [1; 32], 1, json!({"ms": 3000}), TIMEOUT),
                calls_of_key(&pool, &spec, [2; 32], 1, json!({"ms": 3000}), TIMEOUT)
            );
            a.into_iter().chain(b).collect::<Vec<_>>()
        })
    };
    assert!(eventually(Duration::from_secs(10), || pool.stats().processes == 2).await);
    let started = Instant::now();
    let refused = calls_of_key(&pool, &spec, [3; 32], 1, json!({"ms": 0}), Duration::from_millis(500)).await;
    match &refused[0] {
        Err(UpstreamError::NoProcessSlot { limit: "processes_per_server", .. }) => {}
        other => panic!("expected NoProcessSlot, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(450), "it did not wait: {:?}", started.elapsed());
    assert!(busy.await.unwrap().iter().all(Result::is_ok));
    // A place freed: the third key is served now.
    let served = calls_of_key(&pool, &spec, [3; 32], 1, json!({"ms": 0}), TIMEOUT).await;
    assert!(served[0].is_ok(), "{served:?}");
    pool.shutdown().await;
}

#[tokio::test]
async fn an_idle_process_of_the_key_gives_its_place_to_a_call_of_another_server() {
    let dir = tempfile::tempdir().unwrap();
    let pool = UpstreamPool::new(PoolSettings {
        max_processes_per_key: 1,
        idle_process_timeout: Duration::from_secs(60),
        ..PoolSettings::default()
    });
    let first = per_session(&dir.path().join("first"));
    let second = ServerSpec {
        args: vec!["--starts-file".into(), dir.path().join("second").display().to_string()],
        ..first.clone()
    };
    let key = [7u8; 32];
    let call = |server: &'static str, spec: &ServerSpec| {
        let (pool, spec) = (pool.clone(), spec.clone());
        async move {
            let args = serde_json::Map::new();
            pool.call_tool(
                &PoolKey::new("config-1", server),
                &spec,
                Caller::new(&key, None),
                "pid",
                args,
                TIMEOUT,
                None,
            )
            .await
        }
    };
    call("first", &first).await.expect("first server");
    let idle = starts_in(&dir.path().join("first"));
    assert_eq!(idle.len(), 1);
    // The key's one place is held by an idle process: the call of the other server ends it rather than wait.
    let started = Instant::now();
    call("second", &second).await.expect("second server");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(eventually(Duration::from_secs(5), || !alive(idle[0])).await, "the idle process was not ended");
    assert_eq!(pool.stats().processes, 1);
    pool.shutdown().await;
}
