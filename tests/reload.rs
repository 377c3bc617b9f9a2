//! Hot reload of the config file (contract 2): an in-place edit, a rename over the file and a
//! Kubernetes ConfigMap `..data` symlink swap are each in effect within 2 seconds; a changed
//! admin key invalidates the old one (spec 5.1.8); an invalid edit keeps the last good snapshot
//! serving while `/api/v1/system/health` says `config_valid: false, status: "degraded"` and the
//! reload error metric counts it; fixing the file makes it healthy again.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Instant;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

const NEW_PROJECT_ID: &str = "c4d5e6f7-a8b9-4c0d-9e1f-203142536475";

fn fixture_with_project(name: &str) -> Value {
    let mut cfg = fixture();
    cfg["projects"][NEW_PROJECT_ID] = json!({
        "project_name": name, "mcp_config_id": CONFIG_ID, "users": [], "created_at": CREATED_AT
    });
    cfg
}

#[track_caller]
fn assert_project_appears(gw: &Gateway, name: &str) {
    let start = Instant::now();
    let seen = wait_until(RELOAD_DEADLINE, || gw.get(&format!("/api/v1/projects/{name}")).status == 200);
    assert!(seen, "project {name} not visible {:?} after the edit; logs:\n{}", start.elapsed(), gw.logs());
    let d = gw.get(&format!("/api/v1/projects/{name}")).ok(200).clone();
    assert_eq!(d["project_id"], json!(NEW_PROJECT_ID));
}

/// Reads a counter's value from the Prometheus text, e.g. `mcpgw_config_reloads_total{result="ok"}`.
fn metric(gw: &Gateway, series: &str) -> f64 {
    gw.metric(series)
}

const RELOAD_OK: &str = "mcpgw_config_reloads_total{result=\"ok\"}";
const RELOAD_ERR: &str = "mcpgw_config_reloads_total{result=\"error\"}";

#[test]
fn in_place_edit_is_in_effect_within_two_seconds() {
    let (_dir, gw) = start_fixture();
    gw.get("/api/v1/projects/hot_inplace").err(404, "NOT_FOUND");
    let ok_before = metric(&gw, RELOAD_OK);

    // Truncate and rewrite the same inode, as `echo > file` or an editor without backup does.
    let mut f = fs::OpenOptions::new().write(true).truncate(true).open(&gw.config_path).unwrap();
    f.write_all(&serde_json::to_vec_pretty(&fixture_with_project("hot_inplace")).unwrap()).unwrap();
    f.sync_all().unwrap();
    drop(f);

    assert_project_appears(&gw, "hot_inplace");
    assert!(wait_until(SHORT_DEADLINE, || metric(&gw, RELOAD_OK) > ok_before), "reload ok metric did not grow");
    assert_eq!(gw.system_health()["config_valid"], json!(true));
}

#[test]
fn rename_over_the_file_is_in_effect_within_two_seconds() {
    let (_dir, gw) = start_fixture();
    replace_json(&gw.config_path, &fixture_with_project("hot_renamed"));
    assert_project_appears(&gw, "hot_renamed");

    // A second replacement is picked up too (the watcher survives the inode change).
    let mut cfg = fixture_with_project("hot_renamed_again");
    cfg["users"].as_object_mut().unwrap().remove(BOB_ID);
    replace_json(&gw.config_path, &cfg);
    assert_project_appears(&gw, "hot_renamed_again");
    assert!(wait_until(RELOAD_DEADLINE, || gw.get(&format!("/api/v1/users/{BOB_ID}")).status == 404));
}

/// Builds `dir/..<version>/gw_mcp_config.json` holding `cfg`.
fn configmap_version(dir: &Path, version: &str, cfg: &Value) {
    let vdir = dir.join(version);
    fs::create_dir(&vdir).unwrap();
    write_json(&vdir.join("gw_mcp_config.json"), cfg);
}

#[test]
fn configmap_symlink_swap_is_in_effect_within_two_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    configmap_version(d, "..2026_1", &fixture());
    symlink("..2026_1", d.join("..data")).unwrap();
    symlink("..data/gw_mcp_config.json", d.join("gw_mcp_config.json")).unwrap();
    let path = d.join("gw_mcp_config.json");
    let gw = Gateway::start(&path);

    // config_path is reported as given, not resolved through the symlinks.
    let health = gw.call_as(None, Method::GET, "/health", None);
    assert_eq!(health.ok(200)["config_path"], json!(path.to_str().unwrap()));
    assert_eq!(gw.system_health()["config_path"], json!(path.to_str().unwrap()));
    gw.get("/api/v1/projects/hot_swapped").err(404, "NOT_FOUND");

    // The kubelet's atomic swap.
    configmap_version(d, "..2026_2", &fixture_with_project("hot_swapped"));
    symlink("..2026_2", d.join("..data_tmp")).unwrap();
    fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
    fs::remove_dir_all(d.join("..2026_1")).unwrap();
    assert_project_appears(&gw, "hot_swapped");

    // And once more.
    let mut cfg = fixture_with_project("hot_swapped");
    cfg["admin_apikey"] = json!("swapped-admin-key-0123456789abcdefghijklmnop");
    configmap_version(d, "..2026_3", &cfg);
    symlink("..2026_3", d.join("..data_tmp")).unwrap();
    fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
    fs::remove_dir_all(d.join("..2026_2")).unwrap();
    let auth = "Bearer swapped-admin-key-0123456789abcdefghijklmnop";
    let changed =
        wait_until(RELOAD_DEADLINE, || gw.call_as(Some(auth), Method::GET, "/api/v1/configs", None).status == 200);
    assert!(changed, "second swap not picked up; logs:\n{}", gw.logs());
}

#[test]
fn changed_admin_key_invalidates_the_old_one() {
    let (_dir, mut gw) = start_fixture();
    let new_key = "rotated-by-hand-admin-key-abcdefghijklmnopqrstuvwxyz";
    let mut cfg = fixture();
    cfg["admin_apikey"] = json!(new_key);
    write_json(&gw.config_path, &cfg);

    let old_auth = format!("Bearer {ADMIN_KEY}");
    let new_auth = format!("Bearer {new_key}");
    let start = Instant::now();
    let switched =
        wait_until(RELOAD_DEADLINE, || gw.call_as(Some(&new_auth), Method::GET, "/api/v1/configs", None).status == 200);
    assert!(switched, "new admin key not accepted after {:?}; logs:\n{}", start.elapsed(), gw.logs());
    let r = gw.call_as(Some(&old_auth), Method::GET, "/api/v1/configs", None);
    assert!(r.err(401, "AUTH_INVALID_CREDENTIALS").starts_with("invalid admin key"));

    // Writes through the API keep the new key in the file.
    gw.admin_key = new_key.to_string();
    gw.post("/api/v1/users", &json!({"email": "carol@example.com"})).ok(201);
    assert_eq!(read_json(&gw.config_path)["admin_apikey"], json!(new_key));
}

#[test]
fn removed_api_key_is_gone_after_an_edit() {
    let (_dir, gw) = start_fixture();
    gw.get(&format!("/api/v1/api-keys/{API_KEY}")).ok(200);
    let mut cfg = fixture();
    cfg["apikeys"] = json!({});
    replace_json(&gw.config_path, &cfg);
    let gone = wait_until(RELOAD_DEADLINE, || gw.get(&format!("/api/v1/api-keys/{API_KEY}")).status == 404);
    assert!(gone, "deleted key still served; logs:\n{}", gw.logs());
}

#[test]
fn admin_write_after_an_external_edit_keeps_that_edit() {
    let (_dir, gw) = start_fixture();
    replace_json(&gw.config_path, &fixture_with_project("edited_outside"));
    assert_project_appears(&gw, "edited_outside");
    gw.post("/api/v1/users", &json!({"email": "carol@example.com"})).ok(201);
    let file = read_json(&gw.config_path);
    assert_eq!(file["projects"][NEW_PROJECT_ID]["project_name"], json!("edited_outside"));
    assert_eq!(file["users"].as_object().unwrap().len(), 3);
}

#[test]
fn invalid_edit_keeps_the_last_good_snapshot() {
    let (_dir, gw) = start_fixture();
    let h = gw.system_health();
    assert_eq!(h["status"], json!("healthy"));
    assert_eq!(h["config_valid"], json!(true));
    let err_before = metric(&gw, RELOAD_ERR);

    // 1. Not JSON at all.
    fs::write(&gw.config_path, b"{ this is not json").unwrap();
    let degraded = wait_until(RELOAD_DEADLINE, || {
        let h = gw.system_health();
        h["config_valid"] == json!(false) && h["status"] == json!("degraded")
    });
    assert!(degraded, "health never reported the invalid file: {}", gw.system_health());
    // The old snapshot keeps serving, with the old admin key and the old data.
    assert_eq!(gw.get(&format!("/api/v1/projects/{PROJECT_NAME}")).ok(200)["project_id"], json!(PROJECT_ID));
    gw.get(&format!("/api/v1/api-keys/{API_KEY}")).ok(200);
    assert_eq!(gw.get("/api/v1/users").ok(200).as_array().unwrap().len(), 2);
    assert!(
        wait_until(SHORT_DEADLINE, || metric(&gw, RELOAD_ERR) > err_before),
        "mcpgw_config_reloads_total{{result=\"error\"}} did not grow"
    );
    assert_eq!(gw.metrics_get("/healthz").status, 200);

    // 2. Valid JSON that fails validation (a key of a missing project), with a new project and
    //    a new admin key that must not take effect.
    let mut bad = fixture_with_project("must_not_appear");
    bad["admin_apikey"] = json!("must-not-work-admin-key-0123456789abcdefghij");
    bad["apikeys"]["dangling-key-0123456789abcdefghijklmnopqrstuvwxyz"] = json!({
        "project_id": "00000000-0000-4000-8000-000000000000", "user_id": ALICE_ID, "created_at": CREATED_AT
    });
    let err_mid = metric(&gw, RELOAD_ERR);
    replace_json(&gw.config_path, &bad);
    assert!(
        wait_until(SHORT_DEADLINE, || metric(&gw, RELOAD_ERR) > err_mid),
        "the invalid edit was not counted; logs:\n{}",
        gw.logs()
    );
    let h = gw.system_health();
    assert_eq!(h["config_valid"], json!(false));
    assert_eq!(h["status"], json!("degraded"));
    gw.get("/api/v1/projects/must_not_appear").err(404, "NOT_FOUND");
    let r =
        gw.call_as(Some("Bearer must-not-work-admin-key-0123456789abcdefghij"), Method::GET, "/api/v1/configs", None);
    r.err(401, "AUTH_INVALID_CREDENTIALS");

    // 3. Fixed: healthy again and the new content in effect.
    replace_json(&gw.config_path, &fixture_with_project("fixed_now"));
    assert_project_appears(&gw, "fixed_now");
    let healthy = wait_until(RELOAD_DEADLINE, || {
        let h = gw.system_health();
        h["config_valid"] == json!(true) && h["status"] == json!("healthy")
    });
    assert!(healthy, "health did not recover: {}", gw.system_health());
    assert_eq!(gw.system_health()["total_projects"], json!(2));
}

#[test]
fn the_last_of_several_quick_edits_wins() {
    let (_dir, gw) = start_fixture();
    for i in 0..5 {
        replace_json(&gw.config_path, &fixture_with_project(&format!("burst_{i}")));
    }
    assert_project_appears(&gw, "burst_4");
    for i in 0..4 {
        gw.get(&format!("/api/v1/projects/burst_{i}")).err(404, "NOT_FOUND");
    }
}

#[test]
fn requests_in_flight_never_fail_and_each_sees_one_snapshot() {
    let (_dir, gw) = start_fixture();
    // State A: the fixture. State B: bob joins alpha and project "hot" exists.
    let mut state_b = fixture_with_project("hot");
    state_b["projects"][PROJECT_ID]["users"] = json!([ALICE_ID, BOB_ID]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let url = format!("{}/api/v1/projects", gw.admin);
            let stop = stop.clone();
            std::thread::spawn(move || {
                let c = client();
                let auth = format!("Bearer {ADMIN_KEY}");
                let mut seen = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let r = send(&c, Method::GET, &url, Some(&auth), None);
                    let list = r.ok(200).as_array().unwrap().clone();
                    let alpha = list.iter().find(|p| p["project_id"] == json!(PROJECT_ID)).unwrap();
                    let members = alpha["users"].as_array().unwrap().len();
                    // One snapshot per request: either all of A or all of B.
                    assert!(
                        (list.len() == 1 && members == 1) || (list.len() == 2 && members == 2),
                        "torn read: {}",
                        r.text
                    );
                    seen += 1;
                }
                seen
            })
        })
        .collect();
    for i in 0..10 {
        let cfg = if i % 2 == 0 { state_b.clone() } else { fixture() };
        replace_json(&gw.config_path, &cfg);
        std::thread::sleep(std::time::Duration::from_millis(150));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().expect("a reader failed") > 0);
    }
}

#[test]
fn sighup_does_not_stop_the_server() {
    let (_dir, gw) = start_fixture();
    let st = std::process::Command::new("kill").args(["-HUP", &gw.pid().to_string()]).status().unwrap();
    assert!(st.success());
    replace_json(&gw.config_path, &fixture_with_project("after_hup"));
    assert_project_appears(&gw, "after_hup");
    assert_eq!(gw.system_health()["status"], json!("healthy"));
}
