//! The command line (contract 1): `init` writes the documented config with mode 0600 in a 0700
//! directory and refuses to overwrite without `--force`; `check-config` exits 0 on a valid file
//! and lists every problem of an invalid one; `serve` creates a missing config, honours the
//! environment equivalents of its flags, exits 0 on SIGTERM and SIGINT, and on a bad flag, a busy
//! port or a bad config exits non-zero with a one-line error and no panic.

mod common;

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

/// The value after `label` on its stdout line, e.g. `Admin API key: <key>`.
fn printed(text: &str, label: &str) -> String {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(label).map(|v| v.trim().to_string()))
        .unwrap_or_else(|| panic!("no line starting with {label:?} in:\n{text}"))
}

fn url_safe(s: &str) -> bool {
    s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
}

#[track_caller]
fn assert_no_panic(stderr: &str) {
    assert!(!stderr.contains("panicked"), "panic trace on stderr:\n{stderr}");
    assert!(!stderr.contains("RUST_BACKTRACE"), "panic hint on stderr:\n{stderr}");
}

/// Checks the structure `init` (and `reset`) must write; returns (admin key, gateway key).
fn assert_init_structure(cfg: &Value) -> (String, String) {
    let admin = cfg["admin_apikey"].as_str().expect("admin_apikey").to_string();
    assert!(admin.len() >= 43 && url_safe(&admin), "weak admin key {admin:?}");
    let configs = cfg["mcp_configs"].as_object().unwrap();
    assert_eq!(configs.len(), 1);
    let (cfg_id, c) = configs.iter().next().unwrap();
    assert!(is_uuid_v4(cfg_id), "{cfg_id}");
    assert_eq!(c["mcp_config_name"], json!("default_config"));
    assert_eq!(c["mcp_config"], json!([]));
    assert_timestamp(&c["created_at"]);
    let projects = cfg["projects"].as_object().unwrap();
    assert_eq!(projects.len(), 1);
    let (project_id, p) = projects.iter().next().unwrap();
    assert!(is_uuid_v4(project_id));
    assert_eq!(p["project_name"], json!("default_project"));
    assert_eq!(p["mcp_config_id"], json!(cfg_id));
    assert_timestamp(&p["created_at"]);
    let users = cfg["users"].as_object().unwrap();
    assert_eq!(users.len(), 1);
    let (user_id, u) = users.iter().next().unwrap();
    assert!(is_uuid_v4(user_id));
    assert_eq!(u["email"], json!("default@example.com"));
    assert_timestamp(&u["created_at"]);
    assert_eq!(p["users"], json!([user_id]));
    let keys = cfg["apikeys"].as_object().unwrap();
    assert_eq!(keys.len(), 1);
    let (key, k) = keys.iter().next().unwrap();
    assert!(key.len() >= 43 && url_safe(key), "weak gateway key {key:?}");
    assert_ne!(key, &admin);
    assert_eq!(k["project_id"], json!(project_id));
    assert_eq!(k["user_id"], json!(user_id));
    assert_timestamp(&k["created_at"]);
    (admin, key.clone())
}

#[test]
fn init_writes_the_documented_config() {
    let outer = tempfile::tempdir().unwrap();
    let path = outer.path().join("fresh").join("gw_mcp_config.json");
    let p = path.to_str().unwrap();
    let (st, out, err) = run_cli(&["init", "--config", p], &[]);
    assert!(st.success(), "init failed: {err}");
    assert_eq!(printed(&out, "Config written to"), p);
    let printed_admin = printed(&out, "Admin API key:");
    let printed_key = printed(&out, "Gateway API key:");

    assert_eq!(file_mode(&path), 0o600, "config file mode");
    assert_eq!(file_mode(path.parent().unwrap()), 0o700, "config dir mode");
    let cfg = read_json(&path);
    let (admin, key) = assert_init_structure(&cfg);
    assert_eq!(printed_admin, admin);
    assert_eq!(printed_key, key);

    // The file is valid and serves with the printed admin key.
    let (st, _, err) = run_cli(&["check-config", "--config", p], &[]);
    assert!(st.success(), "check-config rejects init's file: {err}");
    let mut gw = Gateway::start(&path);
    gw.admin_key = admin;
    gw.get("/api/v1/configs").ok(200);
    gw.get(&format!("/api/v1/api-keys/{key}")).ok(200);

    // Two inits give different keys.
    let other = outer.path().join("other.json");
    let (st, _, _) = run_cli(&["init", "--config", other.to_str().unwrap()], &[]);
    assert!(st.success());
    let cfg2 = read_json(&other);
    assert_ne!(cfg2["admin_apikey"], cfg["admin_apikey"]);
}

#[test]
fn init_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    let p = path.to_str().unwrap();
    assert!(run_cli(&["init", "--config", p], &[]).0.success());
    let before = fs::read(&path).unwrap();

    let (st, _, err) = run_cli(&["init", "--config", p], &[]);
    assert!(!st.success(), "init overwrote an existing file");
    assert_eq!(lines(&err).len(), 1, "expected one line on stderr, got:\n{err}");
    assert_no_panic(&err);
    assert_eq!(fs::read(&path).unwrap(), before);

    let (st, out, err) = run_cli(&["init", "--config", p, "--force"], &[]);
    assert!(st.success(), "init --force failed: {err}");
    let cfg = read_json(&path);
    assert_init_structure(&cfg);
    assert_ne!(fs::read(&path).unwrap(), before);
    assert_eq!(printed(&out, "Admin API key:"), cfg["admin_apikey"].as_str().unwrap());
    assert_eq!(file_mode(&path), 0o600);
}

#[test]
fn init_takes_the_path_from_gw_config_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("from_env.json");
    let (st, out, err) = run_cli(&["init"], &[("GW_CONFIG_PATH", path.to_str().unwrap())]);
    assert!(st.success(), "{err}");
    assert_eq!(printed(&out, "Config written to"), path.to_str().unwrap());
    assert_init_structure(&read_json(&path));

    // The flag wins over the environment.
    let flag_path = dir.path().join("from_flag.json");
    let (st, _, err) = run_cli(
        &["init", "--config", flag_path.to_str().unwrap()],
        &[("GW_CONFIG_PATH", dir.path().join("ignored.json").to_str().unwrap())],
    );
    assert!(st.success(), "{err}");
    assert!(flag_path.exists());
    assert!(!dir.path().join("ignored.json").exists());
}

#[test]
fn check_config_accepts_a_valid_file() {
    let (_dir, path) = fixture_dir();
    let (st, _, err) = run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(st.success(), "valid fixture rejected: {err}");
    let (st, _, err) = run_cli(&["check-config"], &[("GW_CONFIG_PATH", path.to_str().unwrap())]);
    assert!(st.success(), "valid fixture rejected via GW_CONFIG_PATH: {err}");
}

#[test]
fn check_config_lists_every_problem() {
    let (_dir, path) = fixture_dir();
    let missing_project = "11111111-2222-4333-8444-555555555555";
    let missing_user = "66666666-7777-4888-9999-aaaaaaaaaaaa";
    let missing_config = "bbbbbbbb-cccc-4ddd-8eee-ffffffffffff";
    let mut cfg = fixture();
    // 1. a key of a missing project; 2. a key of a missing user.
    cfg["apikeys"]["key-of-missing-project-0123456789abcdefghijklmnop"] =
        json!({"project_id": missing_project, "user_id": ALICE_ID, "created_at": CREATED_AT});
    cfg["apikeys"]["key-of-missing-user-0123456789abcdefghijklmnopqrs"] =
        json!({"project_id": PROJECT_ID, "user_id": missing_user, "created_at": CREATED_AT});
    // 3. a project with a missing mcp_config_id.
    cfg["projects"]["d1d2d3d4-e5e6-4f7f-8a8b-c9c0d1d2d3d4"] =
        json!({"project_name": "orphan", "mcp_config_id": missing_config, "users": [], "created_at": CREATED_AT});
    // 4. duplicate server names; 5. a server name outside [A-Za-z0-9_.-].
    let servers = cfg["mcp_configs"][CONFIG_ID]["mcp_config"].as_array_mut().unwrap();
    servers.push(json!({"server_name": "echo", "config": {"command": "x", "args": []}}));
    servers.push(json!({"server_name": "bad name!", "config": {"command": "x", "args": []}}));
    // 6. a non-positive timeout; 7. a bad log level.
    cfg["common_mcp_gateway_config"] = json!({
        "gw_log_level": "LOUD",
        "timeout_settings": {"discovery_timeout": 0, "auth_timeout": -5}
    });
    write_json(&path, &cfg);

    let (st, out, err) = run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!st.success(), "invalid file accepted; stdout: {out}");
    assert_no_panic(&err);
    let problems = lines(&err);
    assert!(problems.len() >= 7, "expected at least 7 problems, one per line, got:\n{err}");
    for needle in [
        missing_project,
        missing_user,
        missing_config,
        "echo",
        "bad name!",
        "discovery_timeout",
        "auth_timeout",
        "gw_log_level",
    ] {
        assert!(err.contains(needle), "problem naming {needle:?} not reported:\n{err}");
    }
}

/// A typo is an unknown key: refused, with the nearest known key named (contract 15), never a setting silently off.
#[test]
fn check_config_names_an_unknown_key_and_the_nearest_known_one() {
    let (_dir, path) = fixture_dir();
    let mut cfg = fixture();
    cfg["mcp_configs"][CONFIG_ID]["mcp_config"][0]["output_guardrail_policy"] =
        json!({"enabled": true, "policy_name": "keywords", "block": ["secret"]});
    cfg["common_mcp_gateway_config"]["limits"] = json!({"max_sesions": 10});
    cfg["x_owner"] = json!("platform team");
    cfg["mcp_configs"][CONFIG_ID]["mcp_config"][0]["config"]["inherit_env"] = json!(["HTTPS_PROXY", "GW_ADMIN_APIKEY"]);
    write_json(&path, &cfg);
    let (st, out, err) = run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!st.success(), "a typo was accepted; stdout: {out}");
    assert_no_panic(&err);
    assert!(err.contains("output_guardrail_policy: unknown key; did you mean `output_guardrails_policy`?"), "{err}");
    assert!(err.contains("limits.max_sesions: unknown key; did you mean `max_sessions`?"), "{err}");
    assert!(err.contains("inherit_env: \"GW_ADMIN_APIKEY\": the gateway's own GW_* variables"), "{err}");
    assert!(
        !err.contains("x_owner") && !err.contains("HTTPS_PROXY"),
        "an annotation or a good name was refused:\n{err}"
    );
}

#[test]
fn check_config_reports_wrong_types_and_bad_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    let p = path.to_str().unwrap();

    // Wrong types, two of them, both reported.
    let mut cfg = fixture();
    cfg["common_mcp_gateway_config"]["gw_cache_port"] = json!("x");
    cfg["users"][BOB_ID]["email"] = json!(42);
    write_json(&path, &cfg);
    let (st, _, err) = run_cli(&["check-config", "--config", p], &[]);
    assert!(!st.success(), "wrong types accepted");
    assert_no_panic(&err);
    assert!(err.contains("gw_cache_port"), "gw_cache_port not named:\n{err}");
    assert!(err.contains("email") || err.contains(BOB_ID), "the user's e-mail type not named:\n{err}");

    // Not JSON.
    fs::write(&path, b"{\"admin_apikey\": ").unwrap();
    let (st, _, err) = run_cli(&["check-config", "--config", p], &[]);
    assert!(!st.success());
    assert_no_panic(&err);
    assert!(!lines(&err).is_empty());

    // Missing file.
    let (st, _, err) = run_cli(&["check-config", "--config", dir.path().join("nope.json").to_str().unwrap()], &[]);
    assert!(!st.success(), "missing file accepted");
    assert_no_panic(&err);
    assert!(!dir.path().join("nope.json").exists(), "check-config must not create the file");
}

#[test]
fn serve_creates_a_missing_config_and_prints_the_keys_to_stderr() {
    let outer = tempfile::tempdir().unwrap();
    let path = outer.path().join("new").join("gw_mcp_config.json");
    let mut gw = Gateway::start(&path);
    assert!(path.exists());
    assert_eq!(file_mode(&path), 0o600);
    let cfg = read_json(&path);
    let (admin, key) = assert_init_structure(&cfg);
    let logs = gw.logs();
    assert!(logs.contains(&admin), "admin key not printed to stderr:\n{logs}");
    assert!(logs.contains(&key), "gateway key not printed to stderr:\n{logs}");
    gw.admin_key = admin;
    gw.get("/api/v1/projects/default_project").ok(200);
    assert_eq!(gw.signal_and_wait("TERM").code(), Some(0));
}

#[test]
fn serve_takes_config_and_addresses_from_the_environment() {
    let (_dir, path) = fixture_dir();
    let mut cmd = base_command();
    cmd.arg("serve")
        .env("GW_CONFIG_PATH", &path)
        .env("GW_ADMIN_ADDR", "127.0.0.1:0")
        .env("GW_METRICS_ADDR", "127.0.0.1:0")
        .env("GW_GATEWAY_ADDR", "127.0.0.1:0");
    let gw = Gateway::spawn(cmd, &path);
    let h = gw.call_as(None, Method::GET, "/health", None);
    assert_eq!(h.ok(200)["config_path"], json!(path.to_str().unwrap()));
    gw.get("/api/v1/configs").ok(200);
}

#[test]
fn sigterm_and_sigint_exit_zero() {
    for signal in ["TERM", "INT"] {
        let (_dir, mut gw) = start_fixture();
        gw.get("/api/v1/configs").ok(200);
        let status = gw.signal_and_wait(signal);
        assert_eq!(status.code(), Some(0), "exit after SIG{signal}: {status}; logs:\n{}", gw.logs());
        assert_no_panic(&gw.logs());
    }
}

/// Runs `serve` with extra args that must make it fail; returns its stderr.
fn serve_must_fail(config: &Path, extra: &[&str]) -> String {
    let mut cmd = base_command();
    cmd.arg("serve").arg("--config").arg(config);
    let defaults: Vec<&str> =
        [("--admin-addr", "127.0.0.1:0"), ("--metrics-addr", "127.0.0.1:0"), ("--gateway-addr", "127.0.0.1:0")]
            .into_iter()
            .filter(|(flag, _)| !extra.contains(flag))
            .flat_map(|(f, v)| [f, v])
            .collect();
    cmd.args(defaults).args(extra).stdin(Stdio::null());
    let (st, _out, err) = run_to_end(cmd, Duration::from_secs(30));
    assert!(!st.success(), "serve {extra:?} succeeded; stderr:\n{err}");
    assert_no_panic(&err);
    assert!(!lines(&err).is_empty(), "no error on stderr");
    err
}

#[test]
fn bad_flag_is_one_line_and_non_zero() {
    let (_dir, path) = fixture_dir();
    let err = serve_must_fail(&path, &["--bogus-flag"]);
    assert_eq!(lines(&err).len(), 1, "expected one line on stderr, got:\n{err}");
    assert!(err.contains("--bogus-flag"), "the error does not name the flag:\n{err}");

    let err = serve_must_fail(&path, &["--transport", "carrier-pigeon"]);
    assert_eq!(lines(&err).len(), 1, "expected one line on stderr, got:\n{err}");

    let (st, _, err) = run_cli(&["no-such-command"], &[]);
    assert!(!st.success());
    assert_eq!(lines(&err).len(), 1, "expected one line on stderr, got:\n{err}");
}

#[test]
fn busy_port_is_a_one_line_error_and_non_zero() {
    let (_dir, path) = fixture_dir();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let port = taken.local_addr().unwrap().port().to_string();
    for flag in ["--admin-addr", "--metrics-addr"] {
        let err = serve_must_fail(&path, &[flag, &addr]);
        let named = lines(&err).iter().any(|l| l.contains(&port) || l.to_lowercase().contains("in use"));
        assert!(named, "no line names the busy port {addr} ({flag}):\n{err}");
    }
    drop(taken);
}

#[test]
fn unreadable_or_invalid_config_is_an_error_at_start() {
    let dir = tempfile::tempdir().unwrap();

    // Not JSON.
    let garbage = dir.path().join("garbage.json");
    fs::write(&garbage, b"{ nope").unwrap();
    let before = fs::read(&garbage).unwrap();
    serve_must_fail(&garbage, &[]);
    assert_eq!(fs::read(&garbage).unwrap(), before, "serve overwrote a broken config");

    // A directory where the file should be.
    let as_dir = dir.path().join("is_a_dir.json");
    fs::create_dir(&as_dir).unwrap();
    serve_must_fail(&as_dir, &[]);

    // Valid JSON that fails validation: the problems are listed.
    let invalid = dir.path().join("invalid.json");
    let mut cfg = fixture();
    cfg["projects"][PROJECT_ID]["mcp_config_id"] = json!("bbbbbbbb-cccc-4ddd-8eee-ffffffffffff");
    write_json(&invalid, &cfg);
    let err = serve_must_fail(&invalid, &[]);
    assert!(err.contains("bbbbbbbb-cccc-4ddd-8eee-ffffffffffff"), "the problem is not named:\n{err}");
}

#[test]
fn check_config_reports_type_errors_together_with_other_problems() {
    let (_dir, path) = fixture_dir();
    let mut cfg = fixture();
    cfg["common_mcp_gateway_config"] = json!({
        "gw_cache_port": "x",
        "gw_log_level": "LOUD",
        "timeout_settings": {"discovery_timeout": 0}
    });
    cfg["projects"][PROJECT_ID]["mcp_config_id"] = json!("bbbbbbbb-cccc-4ddd-8eee-ffffffffffff");
    write_json(&path, &cfg);
    let (st, _, err) = run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!st.success());
    assert_no_panic(&err);
    for needle in ["gw_cache_port", "gw_log_level", "discovery_timeout", "bbbbbbbb-cccc-4ddd-8eee-ffffffffffff"] {
        assert!(err.contains(needle), "problem naming {needle:?} not reported:\n{err}");
    }
}

#[test]
fn config_path_is_reported_as_given() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    write_json(&dir.path().join("sub").join("gw_mcp_config.json"), &fixture());
    let given = "./sub/../sub/gw_mcp_config.json";
    let mut cmd = base_command();
    cmd.current_dir(dir.path())
        .args(["serve", "--config", given])
        .args(["--admin-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"])
        .args(["--gateway-addr", "127.0.0.1:0"]);
    let gw = Gateway::spawn(cmd, &dir.path().join("sub").join("gw_mcp_config.json"));
    let h = gw.call_as(None, Method::GET, "/health", None);
    assert_eq!(h.ok(200)["config_path"], json!(given));
    assert_eq!(gw.system_health()["config_path"], json!(given));
}

/// The allocator's options (src/main.rs): the gateway starts itself again once with them in its environment, unless
/// the environment names them already; jemalloc complains on stderr about any option it does not know.
#[cfg(target_os = "linux")]
#[test]
fn the_allocator_options_are_set_unless_the_environment_sets_them() {
    let conf = |gw: &Gateway| {
        let environ = std::fs::read(format!("/proc/{}/environ", gw.pid())).expect("the gateway's environment");
        let vars = String::from_utf8_lossy(&environ).into_owned();
        vars.split('\0').find_map(|v| v.strip_prefix("_RJEM_MALLOC_CONF=").map(str::to_string))
    };
    let (_dir, path) = fixture_dir();
    let gw = Gateway::start(&path);
    let set = conf(&gw).expect("_RJEM_MALLOC_CONF set by the restart");
    for option in ["narenas:1", "tcache_nslots_small_max:16", "dirty_decay_ms:0", "muzzy_decay_ms:0"] {
        assert!(set.split(',').any(|o| o == option), "{option} missing from {set}");
    }
    gw.get("/api/v1/configs").ok(200);
    assert!(!gw.logs().contains("<jemalloc>"), "jemalloc refused an option:\n{}", gw.logs());
    drop(gw);

    let gw = Gateway::start_with(&path, &[("_RJEM_MALLOC_CONF", "narenas:2")]);
    assert_eq!(conf(&gw).as_deref(), Some("narenas:2"), "the environment's value is kept");
}

#[test]
fn worker_threads_come_from_the_environment_and_a_bad_value_stops_the_start() {
    let (_dir, path) = fixture_dir();
    let mut cmd = base_command();
    cmd.arg("serve").arg("--config").arg(&path).env("MCPGW_WORKER_THREADS", "3").args([
        "--admin-addr",
        "127.0.0.1:0",
        "--metrics-addr",
        "127.0.0.1:0",
        "--gateway-addr",
        "127.0.0.1:0",
    ]);
    let gw = Gateway::spawn(cmd, &path);
    gw.get("/api/v1/configs").ok(200);
    let ready = wait_until(Duration::from_secs(10), || gw.logs().lines().any(|l| l.contains("mcpgw ready")));
    assert!(ready, "no ready line:\n{}", gw.logs());
    let line = gw.logs().lines().find(|l| l.contains("mcpgw ready")).unwrap_or_default().to_string();
    let record: Value = serde_json::from_str(&line).expect("the ready line is JSON");
    assert_eq!(record["worker_threads"], json!(3), "{line}");

    for bad in ["0", "many", "2000"] {
        let mut cmd = base_command();
        cmd.arg("serve").arg("--config").arg(&path).env("MCPGW_WORKER_THREADS", bad).stdin(Stdio::null());
        let (status, _out, err) = run_to_end(cmd, Duration::from_secs(30));
        assert!(!status.success(), "MCPGW_WORKER_THREADS={bad} started");
        assert!(err.contains("MCPGW_WORKER_THREADS must be a whole number from 1 to 1024"), "{err}");
        assert_no_panic(&err);
    }
}
