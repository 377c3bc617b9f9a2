//! The gateway on a config mounted from a Kubernetes Secret, as the sidecar manifests and the Helm chart run it.
//!
//! A Secret volume is laid out by the kubelet as `..<timestamp>/gw_mcp_config.json` (the real file, read-only),
//! `..data -> ..<timestamp>` and `gw_mcp_config.json -> ..data/gw_mcp_config.json`. An edit of the Secret writes a new
//! timestamped directory, points a `..data_tmp` link at it, renames that link over `..data` (one atomic step) and
//! removes the old directory. This test builds exactly that layout, starts the real binary on it through
//! `GW_CONFIG_PATH` (as the container image and the manifests do), rotates the gateway key the way an operator does on
//! a cluster (by editing the Secret) and checks from outside, over HTTP, that the new key works and the old one gets
//! 401 within 2 seconds, and that the admin API refuses writes with `CONFIG_READ_ONLY` all along.

mod common;
#[path = "common/mcp.rs"]
mod mcp;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use mcp::*;
use reqwest::blocking::Client;
use serde_json::{Value, json};

/// How long the kubelet's swap may take to be in effect (contract section 2: 2 seconds).
const SWAP_DEADLINE: Duration = Duration::from_secs(2);

/// The gateway key the Secret holds after the rotation.
const ROTATED_KEY: &str = "gwkey-rotated-in-secret-0123456789abcdefghijklmnopqrstuv";

/// A directory laid out like a mounted Secret with one key, `gw_mcp_config.json`.
struct SecretMount {
    dir: tempfile::TempDir,
    current: PathBuf,
}

impl SecretMount {
    /// Mounts the first version of the Secret.
    fn new(cfg: &Value) -> SecretMount {
        let dir = tempfile::tempdir().unwrap();
        let current = write_version(dir.path(), "..2026_11_22_01", cfg);
        symlink(current.file_name().unwrap(), dir.path().join("..data")).unwrap();
        symlink("..data/gw_mcp_config.json", dir.path().join("gw_mcp_config.json")).unwrap();
        SecretMount { dir, current }
    }

    /// The path the gateway is given: the top-level link, as `GW_CONFIG_PATH` names it in the pod.
    fn config_path(&self) -> PathBuf {
        self.dir.path().join("gw_mcp_config.json")
    }

    /// Swaps in a new version the way the kubelet's atomic writer does.
    fn update(&mut self, version: &str, cfg: &Value) {
        let d = self.dir.path();
        let next = write_version(d, version, cfg);
        symlink(version, d.join("..data_tmp")).unwrap();
        fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
        // The kubelet (root) removes the old directory; a test running as another user must make it writable first.
        fs::set_permissions(&self.current, fs::Permissions::from_mode(0o755)).unwrap();
        fs::remove_dir_all(&self.current).unwrap();
        self.current = next;
    }
}

impl Drop for SecretMount {
    /// Makes the current version writable again so the temporary directory can be removed by a non-root user too.
    fn drop(&mut self) {
        let _ = fs::set_permissions(&self.current, fs::Permissions::from_mode(0o755));
    }
}

/// Writes `dir/<version>/gw_mcp_config.json` with the kubelet's read-only modes (file 0444, directory 0555).
fn write_version(dir: &Path, version: &str, cfg: &Value) -> PathBuf {
    let vdir = dir.join(version);
    fs::create_dir(&vdir).unwrap();
    let file = vdir.join("gw_mcp_config.json");
    fs::write(&file, serde_json::to_vec_pretty(cfg).unwrap()).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o444)).unwrap();
    fs::set_permissions(&vdir, fs::Permissions::from_mode(0o555)).unwrap();
    vdir
}

/// Starts `mcpgw serve` with the config path in `GW_CONFIG_PATH` (no `--config`), as the container image runs it.
fn start_on(path: &Path) -> Gateway {
    let mut cmd = base_command();
    cmd.env("GW_CONFIG_PATH", path).arg("serve").args([
        "--gateway-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--metrics-addr",
        "127.0.0.1:0",
    ]);
    let gw = Gateway::spawn(cmd, path);
    assert!(!gw.gateway.is_empty(), "no gateway listening line; stderr:\n{}", gw.logs());
    gw
}

/// One stateless MCP `tools/call` of `gw_get_cache_status` with `key`; returns the HTTP status.
fn mcp_status(http: &Client, gw: &Gateway, key: &str) -> u16 {
    let mut body = tools_call_body(1, "gw_get_cache_status", json!({}));
    body["params"]["_meta"] = stateless_meta();
    let headers = stateless_headers("tools/call", Some("gw_get_cache_status"));
    let r = post(http, &format!("{}/mcp/", gw.gateway), Some(key), &headers, &body);
    if r.status == 200 {
        assert_eq!(answer_of(&r.message["result"])["status"], json!("success"), "{}", r.text);
    }
    r.status
}

/// The fixture with its one gateway key replaced by `key` (same project and user).
fn config_with_key(key: &str) -> Value {
    let mut cfg = fixture();
    let record = cfg["apikeys"][API_KEY].take();
    cfg["apikeys"] = json!({ key: record });
    cfg
}

/// `mcpgw_config_reloads_total{result="ok"}` from the metrics listener.
fn reloads_ok(gw: &Gateway) -> f64 {
    let text = gw.metrics_get("/metrics").text;
    text.lines()
        .find_map(|l| l.strip_prefix("mcpgw_config_reloads_total{result=\"ok\"}").and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0)
}

#[test]
fn rotating_a_key_by_editing_the_secret_is_in_effect_within_two_seconds() {
    let mut secret = SecretMount::new(&fixture());
    let path = secret.config_path();
    let gw = start_on(&path);
    let http = http();

    // The key from the Secret works; a key that is not in it gets the contract's 401.
    assert_eq!(mcp_status(&http, &gw, API_KEY), 200, "logs:\n{}", gw.logs());
    let bad = post(
        &http,
        &format!("{}/mcp/", gw.gateway),
        Some(ROTATED_KEY),
        &stateless_headers("tools/list", None),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": stateless_meta()}}),
    );
    assert_auth_failed(&bad);
    // rmcp's client, with a session, as an agent next to the sidecar would connect.
    let mcp_url = format!("{}/mcp/", gw.gateway);
    runtime().block_on(async {
        let client = connect(&mcp_url, API_KEY).await;
        assert_eq!(call(&client, "gw_get_cache_status", json!({})).await["status"], json!("success"));
    });
    let reloads_before = reloads_ok(&gw);

    // The operator edits the Secret: the old gateway key is replaced by a new one.
    secret.update("..2026_11_22_02", &config_with_key(ROTATED_KEY));
    let swapped = Instant::now();
    let rotated = wait_until(SWAP_DEADLINE, || {
        mcp_status(&http, &gw, ROTATED_KEY) == 200 && mcp_status(&http, &gw, API_KEY) == 401
    });
    assert!(rotated, "rotation not in effect {:?} after the swap; logs:\n{}", swapped.elapsed(), gw.logs());
    let r = post(
        &http,
        &format!("{}/mcp/", gw.gateway),
        Some(API_KEY),
        &stateless_headers("tools/list", None),
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": stateless_meta()}}),
    );
    assert_auth_failed(&r);

    // What docs/kubernetes.md tells operators to watch: the log line and the reload counter.
    assert!(wait_until(SHORT_DEADLINE, || gw.logs().contains("configuration reloaded")), "logs:\n{}", gw.logs());
    assert!(reloads_ok(&gw) > reloads_before, "mcpgw_config_reloads_total{{result=\"ok\"}} did not grow");
    assert_eq!(gw.system_health()["config_valid"], json!(true));

    // A second edit is seen too: the watcher follows the new `..data` target, not the removed directory.
    secret.update("..2026_11_22_03", &config_with_key(API_KEY));
    let back = wait_until(SWAP_DEADLINE, || {
        mcp_status(&http, &gw, API_KEY) == 200 && mcp_status(&http, &gw, ROTATED_KEY) == 401
    });
    assert!(back, "second swap not in effect; logs:\n{}", gw.logs());
}

#[test]
fn admin_writes_on_a_mounted_secret_answer_config_read_only() {
    let secret = SecretMount::new(&fixture());
    let path = secret.config_path();
    let gw = start_on(&path);
    let before = fs::read(&path).unwrap();

    // Reads work; config_path is reported as given, not resolved through `..data`.
    assert_eq!(gw.system_health()["config_path"], json!(path.to_str().unwrap()));
    gw.get("/api/v1/users").ok(200);

    let refused = gw.post("/api/v1/users", &json!({"email": "carol@example.com"}));
    let detail = refused.err(409, "CONFIG_READ_ONLY");
    assert!(detail.contains("Secret"), "the detail should say to change the Secret: {detail}");
    gw.post(&format!("/api/v1/users/{ALICE}/api-keys"), &json!({"project_name": PROJECT_NAME}))
        .err(409, "CONFIG_READ_ONLY");
    gw.post_empty(&format!("/api/v1/api-keys/{}/rotate", key_id(API_KEY))).err(409, "CONFIG_READ_ONLY");

    assert_eq!(fs::read(&path).unwrap(), before, "a refused write changed the mounted file");
    let names: Vec<String> =
        fs::read_dir(secret.dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(names.len(), 3, "the gateway left files in the mount: {names:?}");
    // Still serving with the key from the Secret.
    assert_eq!(mcp_status(&http(), &gw, API_KEY), 200);
}

/// The config file a manifest's Secret carries in `stringData` (`gw_mcp_config.json: |` and the indented block).
fn config_in_manifest(manifest: &str) -> String {
    let mut lines = manifest.lines().skip_while(|l| l.trim() != "gw_mcp_config.json: |").skip(1);
    let first = lines.next().expect("no gw_mcp_config.json block");
    let indent = first.len() - first.trim_start().len();
    let block = std::iter::once(first)
        .chain(lines.take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent));
    block.map(|l| l.get(indent..).unwrap_or("")).collect::<Vec<_>>().join("\n")
}

#[test]
fn the_example_secrets_in_k8s_hold_valid_configs() {
    let dir = tempfile::tempdir().unwrap();
    for manifest in ["k8s/sidecar/10-secret.yaml", "k8s/shared/10-secret.yaml"] {
        let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(manifest)).unwrap();
        let path = dir.path().join("gw_mcp_config.json");
        fs::write(&path, config_in_manifest(&text)).unwrap();
        let (status, _, stderr) = run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
        assert!(status.success(), "{manifest}: mcpgw check-config failed:\n{stderr}");
        // Placeholders only: no key in the repository may look usable.
        let cfg = read_json(&path);
        assert!(cfg["admin_apikey"].as_str().unwrap().contains("FAKE"), "{manifest}: admin key is not a placeholder");
        for key in cfg["apikeys"].as_object().unwrap().keys() {
            assert!(key.contains("FAKE"), "{manifest}: gateway key {key} is not a placeholder");
        }
    }
}
