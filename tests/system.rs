//! System routes (spec 4, contract 3): the detailed health report, the metrics listener's probes
//! and metrics, backup (mode 0600, the spec's keys, no API key or admin key in clear, the
//! encryption key from `GW_BACKUP_KEY` or a `gw_backup.key` file next to the config), restore
//! (takes effect at once and brings back working keys; a bad backup gets 400 and changes
//! nothing) and reset (needs `confirm: true`; gives what `init` writes but keeps the admin key).

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

/// `GW_BACKUP_KEY` values: base64 of 32 bytes (as `openssl rand -base64 32` prints).
const BACKUP_KEY_ENV: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const OTHER_BACKUP_KEY_ENV: &str = "ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CBgoM=";

fn backup(gw: &Gateway, out: &Path) {
    let r = gw.post("/api/v1/system/backup", &json!({"output_file": out.to_str().unwrap()}));
    r.ok(200);
    assert!(
        r.body.get("data").is_none() || r.body["data"].is_null(),
        "backup answers message and timestamp only: {}",
        r.text
    );
}

fn restore(gw: &Gateway, input: &Path) -> Resp {
    gw.post("/api/v1/system/restore", &json!({"input_file": input.to_str().unwrap()}))
}

/// The default backup directory of a config file (`backups` beside it; created by the first backup).
fn backup_dir(config_path: &Path) -> PathBuf {
    config_path.parent().unwrap().join("backups")
}

/// Copies a backup into the backup directory of another machine's config (backups are restored from there only).
fn copy_to_backups(backup: &Path, config_path: &Path) -> PathBuf {
    let dir = backup_dir(config_path);
    fs::create_dir_all(&dir).unwrap();
    let copy = dir.join(backup.file_name().unwrap());
    fs::copy(backup, &copy).unwrap();
    copy
}

/// Every string (object keys included) anywhere inside a JSON value.
fn all_strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| all_strings(x, out)),
        Value::Object(o) => {
            for (k, x) in o {
                out.push(k.clone());
                all_strings(x, out);
            }
        }
        _ => {}
    }
}

/// Creates two more keys (for alice and, after joining alpha, bob) and returns all three keys.
fn more_keys(gw: &Gateway) -> Vec<String> {
    gw.post(&format!("/api/v1/projects/{PROJECT_ID}/users"), &json!({"email": BOB})).ok(201);
    let k1 =
        gw.post(&format!("/api/v1/users/{ALICE_ID}/api-keys"), &json!({"project_id": PROJECT_ID})).ok(201)["api_key"]
            .as_str()
            .unwrap()
            .to_string();
    let k2 =
        gw.post(&format!("/api/v1/users/{BOB_ID}/api-keys"), &json!({"project_name": PROJECT_NAME})).ok(201)["api_key"]
            .as_str()
            .unwrap()
            .to_string();
    vec![API_KEY.to_string(), k1, k2]
}

#[track_caller]
fn assert_backup_has_no_clear_secrets(path: &Path, keys: &[String], admin_key: &str) {
    assert_eq!(file_mode(path), 0o600, "backup file mode");
    let text = fs::read_to_string(path).unwrap();
    let v: Value = serde_json::from_str(&text).expect("backup is JSON");
    for key in ["admin_apikey", "mcp_configs", "projects", "users", "apikeys", "plugins", "common_mcp_gateway_config"] {
        assert!(v.get(key).is_some(), "backup lacks top-level {key}: {text}");
    }
    for key in keys {
        assert!(!text.contains(key.as_str()), "API key {key} in clear in the backup");
    }
    assert!(!text.contains(admin_key), "admin key in clear in the backup");
    // The rest of the state is there.
    assert!(text.contains(PROJECT_NAME) && text.contains(ALICE) && text.contains(CONFIG_NAME));
}

#[test]
fn system_health_reports_the_spec_fields() {
    let (_dir, gw) = start_fixture();
    let h = gw.system_health();
    assert_eq!(h["status"], json!("healthy"));
    let version = gw.call_as(None, Method::GET, "/health", None).ok(200)["version"].clone();
    assert_eq!(h["version"], version);
    assert_eq!(h["config_path"], json!(gw.config_path.to_str().unwrap()));
    assert_eq!(h["config_valid"], json!(true));
    assert_eq!(h["total_configs"], json!(2));
    assert_eq!(h["total_projects"], json!(1));
    assert_eq!(h["total_users"], json!(2));
    assert_eq!(h["total_api_keys"], json!(1));
    assert!(h["cache_enabled"].is_boolean(), "{h}");
    assert_eq!(h["cache_type"], json!("local"));
    assert!(h["telemetry_enabled"].is_boolean(), "{h}");
    assert!(h["guardrails_configured"].is_boolean(), "{h}");
    assert!(h["uptime_seconds"].is_u64(), "{h}");

    // Counts follow writes at once.
    gw.post("/api/v1/users", &json!({"email": "carol@example.com"})).ok(201);
    gw.post(&format!("/api/v1/users/{ALICE_ID}/api-keys"), &json!({"project_id": PROJECT_ID})).ok(201);
    let h = gw.system_health();
    assert_eq!(h["total_users"], json!(3));
    assert_eq!(h["total_api_keys"], json!(2));
}

#[test]
fn metrics_listener_serves_probes_and_prometheus_text() {
    let (_dir, gw) = start_fixture();
    assert_eq!(gw.metrics_get("/healthz").status, 200);
    assert_eq!(gw.metrics_get("/readyz").status, 200);
    // Do one reload so both series certainly exist.
    replace_json(&gw.config_path, &fixture());
    let seen = wait_until(RELOAD_DEADLINE, || {
        gw.metrics_get("/metrics").text.contains("mcpgw_config_reloads_total{result=\"ok\"}")
    });
    let text = gw.metrics_get("/metrics").text;
    assert!(seen, "metrics lack mcpgw_config_reloads_total{{result=\"ok\"}}:\n{text}");
    assert!(text.contains("mcpgw_config_reloads_total{result=\"error\"}"), "metrics lack the error series:\n{text}");
    assert!(!text.contains(API_KEY) && !text.contains(ADMIN_KEY), "metrics leak a key");
}

#[test]
fn backup_with_env_key_has_no_key_in_clear() {
    let (dir, path) = fixture_dir();
    let gw = Gateway::start_with(&path, &[("GW_BACKUP_KEY", BACKUP_KEY_ENV)]);
    let keys = more_keys(&gw);
    let out = backup_dir(&path).join("backup-env.json");
    backup(&gw, &out);
    assert_backup_has_no_clear_secrets(&out, &keys, ADMIN_KEY);
    let v = read_json(&out);
    let mut strings = Vec::new();
    all_strings(&v, &mut strings);
    assert!(!strings.iter().any(|s| s.contains(BACKUP_KEY_ENV)), "the encryption key is in the backup");
    assert!(!dir.path().join("gw_backup.key").exists(), "with GW_BACKUP_KEY set no key file is needed");

    // Another machine with another GW_BACKUP_KEY cannot read it; one with the same key can.
    let mut other = fixture();
    other["apikeys"] = json!({});
    let dir_b = tempfile::tempdir().unwrap();
    let path_b = dir_b.path().join("gw_mcp_config.json");
    write_json(&path_b, &other);
    let gw_b = Gateway::start_with(&path_b, &[("GW_BACKUP_KEY", OTHER_BACKUP_KEY_ENV)]);
    let before = fs::read(&path_b).unwrap();
    restore(&gw_b, &copy_to_backups(&out, &path_b)).err_any(400);
    assert_eq!(fs::read(&path_b).unwrap(), before);
    drop(gw_b);
    let dir_c = tempfile::tempdir().unwrap();
    let path_c = dir_c.path().join("gw_mcp_config.json");
    write_json(&path_c, &other);
    let gw_c = Gateway::start_with(&path_c, &[("GW_BACKUP_KEY", BACKUP_KEY_ENV)]);
    restore(&gw_c, &copy_to_backups(&out, &path_c)).ok(200);
    for key in &keys {
        gw_c.get(&format!("/api/v1/api-keys/{key}")).ok(200);
    }
}

#[test]
fn backup_with_key_file_next_to_the_config() {
    let (dir, gw) = start_fixture();
    let keys = more_keys(&gw);
    let out_dir = backup_dir(&gw.config_path);
    let out = out_dir.join("backup.json");
    backup(&gw, &out);
    assert_backup_has_no_clear_secrets(&out, &keys, ADMIN_KEY);
    let key_file = dir.path().join("gw_backup.key");
    assert!(key_file.exists(), "gw_backup.key not created next to the config");
    assert_eq!(file_mode(&key_file), 0o600, "gw_backup.key mode");
    let key_text = fs::read_to_string(&key_file).unwrap();
    assert!(!fs::read_to_string(&out).unwrap().contains(key_text.trim()), "the encryption key is in the backup");

    // A second backup reuses the same key file.
    let out2 = out_dir.join("backup2.json");
    backup(&gw, &out2);
    assert_eq!(fs::read_to_string(&key_file).unwrap(), key_text);
    // Backups overwrite nothing else and the config is untouched by them.
    assert_eq!(read_json(&gw.config_path)["apikeys"].as_object().unwrap().len(), 3);
}

#[test]
fn a_relative_output_path_is_refused() {
    let (dir, gw) = start_fixture();
    for body in [
        json!({"output_file": "relative/backup.json"}),
        json!({"output_file": "backup.json"}),
        json!({"output_file": ""}),
        json!({}),
    ] {
        gw.post("/api/v1/system/backup", &body).err_any(400);
    }
    assert!(!dir.path().join("relative").exists());
    assert!(!dir.path().join("backup.json").exists() && !dir.path().join("backups/backup.json").exists());
    let inside = dir.path().join("backups/backup.json");
    gw.post("/api/v1/system/backup", &json!({"output_file": inside.to_str().unwrap()})).ok(200);
    assert_eq!(file_mode(&inside), 0o600);
}

/// Every listing, each sorted by its id, to compare states.
fn state(gw: &Gateway) -> Value {
    let mut out = serde_json::Map::new();
    for (path, id) in [
        ("/api/v1/configs", "mcp_config_id"),
        ("/api/v1/projects", "project_id"),
        ("/api/v1/users", "user_id"),
        ("/api/v1/api-keys", "key_id"),
    ] {
        let mut list = gw.get(path).ok(200).as_array().unwrap().clone();
        list.sort_by(|a, b| a[id].as_str().cmp(&b[id].as_str()));
        out.insert(path.to_string(), Value::Array(list));
    }
    Value::Object(out)
}

#[test]
fn backup_change_restore_gives_back_the_original_state() {
    let (dir, mut gw) = start_fixture();
    let keys = more_keys(&gw);
    let original = state(&gw);
    let original_file = read_json(&gw.config_path);
    let out = backup_dir(&dir.path().join("gw_mcp_config.json")).join("backup.json");
    backup(&gw, &out);

    // Change everything: delete a key, a user, add a project and a config, rename one,
    // then replace the admin key by hand (hot reload).
    gw.delete(&format!("/api/v1/api-keys/{}", keys[1])).ok(200);
    gw.delete(&format!("/api/v1/users/{BOB_ID}")).ok(200);
    gw.post("/api/v1/projects", &json!({"project_name": "after_backup"})).ok(201);
    gw.post("/api/v1/configs", &json!({"config_name": "after_backup_cfg"})).ok(201);
    gw.put(&format!("/api/v1/projects/{PROJECT_ID}"), &json!({"project_name": "alpha_changed"})).ok(200);
    let new_admin = "replaced-admin-key-0123456789abcdefghijklmnopq";
    let mut cfg = read_json(&gw.config_path);
    cfg["admin_apikey"] = json!(new_admin);
    replace_json(&gw.config_path, &cfg);
    gw.admin_key = new_admin.to_string();
    assert!(wait_until(RELOAD_DEADLINE, || gw.get("/api/v1/configs").status == 200), "admin key edit not picked up");
    assert_ne!(state(&gw), original);

    // Restore, authenticated with the current admin key.
    let r = restore(&gw, &out);
    r.ok(200);
    assert!(
        r.body.get("data").is_none() || r.body["data"].is_null(),
        "restore answers message and timestamp only: {}",
        r.text
    );

    // The backup's admin key is the valid one again, at once.
    let r = gw.get("/api/v1/configs");
    r.err(401, "AUTH_INVALID_CREDENTIALS");
    gw.admin_key = ADMIN_KEY.to_string();
    assert_eq!(state(&gw), original, "restored state differs from the backed-up state");
    for key in &keys {
        let rec = gw.get(&format!("/api/v1/api-keys/{key}")).ok(200).clone();
        assert_eq!(rec["key_id"], json!(key_id(key)));
        assert_eq!(rec["project_id"], json!(PROJECT_ID));
    }
    gw.get("/api/v1/projects/after_backup").err(404, "NOT_FOUND");

    // The file holds the keys in clear again (the config is the source of truth) with mode 0600.
    let file = read_json(&gw.config_path);
    assert_eq!(file_mode(&gw.config_path), 0o600);
    assert_eq!(file["admin_apikey"], json!(ADMIN_KEY));
    for key in &keys {
        assert_eq!(file["apikeys"][key], original_file["apikeys"][key], "key record {key}");
    }
    assert_eq!(file["projects"], original_file["projects"]);
    assert_eq!(file["users"], original_file["users"]);
    assert_eq!(file["mcp_configs"], original_file["mcp_configs"]);
    assert_eq!(gw.system_health()["status"], json!("healthy"));
}

#[test]
fn restore_on_another_machine_needs_the_same_backup_key() {
    let (dir_a, gw_a) = start_fixture();
    let keys = more_keys(&gw_a);
    let out = backup_dir(&gw_a.config_path).join("backup.json");
    backup(&gw_a, &out);
    let key_file = dir_a.path().join("gw_backup.key");

    // Machine B has another config and no copy of the key: the backup cannot be read.
    let dir_b = tempfile::tempdir().unwrap();
    let path_b = dir_b.path().join("gw_mcp_config.json");
    let mut other = fixture();
    other["apikeys"] = json!({});
    other["users"].as_object_mut().unwrap().remove(BOB_ID);
    write_json(&path_b, &other);
    let gw_b = Gateway::start(&path_b);
    let before = fs::read(&path_b).unwrap();
    restore(&gw_b, &copy_to_backups(&out, &path_b)).err_any(400);
    assert_eq!(fs::read(&path_b).unwrap(), before, "a failed restore changed the file");
    drop(gw_b);

    // Machine C has a copy of A's key file next to its config: the restore works.
    let dir_c = tempfile::tempdir().unwrap();
    let path_c = dir_c.path().join("gw_mcp_config.json");
    write_json(&path_c, &other);
    fs::copy(&key_file, dir_c.path().join("gw_backup.key")).unwrap();
    let gw_c = Gateway::start(&path_c);
    restore(&gw_c, &copy_to_backups(&out, &path_c)).ok(200);
    for key in &keys {
        gw_c.get(&format!("/api/v1/api-keys/{key}")).ok(200);
    }
    assert_eq!(gw_c.get("/api/v1/users").ok(200).as_array().unwrap().len(), 2);
}

/// Changes every string inside `apikeys` (keys and values) so that nothing there decrypts.
fn tamper(v: &mut Value) {
    match v {
        Value::String(s) => *s = flip(s),
        Value::Array(a) => a.iter_mut().for_each(tamper),
        Value::Object(o) => {
            let old = std::mem::take(o);
            for (k, mut x) in old {
                tamper(&mut x);
                o.insert(flip(&k), x);
            }
        }
        _ => {}
    }
}

fn flip(s: &str) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return "x".into();
    }
    let i = chars.len() / 2;
    chars[i] = if chars[i] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

#[test]
fn invalid_backups_are_refused_and_change_nothing() {
    let (dir, gw) = start_fixture();
    more_keys(&gw);
    let backups = backup_dir(&dir.path().join("gw_mcp_config.json"));
    let good = backups.join("good.json");
    backup(&gw, &good);
    let good_json = read_json(&good);
    let before = fs::read(&gw.config_path).unwrap();
    let before_state = state(&gw);

    let write = |name: &str, bytes: &[u8]| -> PathBuf {
        let p = backups.join(name);
        fs::write(&p, bytes).unwrap();
        p
    };
    let mut tampered = good_json.clone();
    tamper(&mut tampered["apikeys"]);
    let mut no_apikeys = good_json.clone();
    no_apikeys.as_object_mut().unwrap().remove("apikeys");
    let mut no_admin = good_json.clone();
    no_admin.as_object_mut().unwrap().remove("admin_apikey");
    let mut wrong_type = good_json.clone();
    wrong_type["projects"] = json!("not an object");
    let mut dangling = good_json.clone();
    dangling["projects"] = json!({});

    let bad_files = [
        backups.join("does-not-exist.json"),
        write("empty.json", b""),
        write("garbage.json", b"{ not json"),
        write("array.json", b"[1, 2, 3]"),
        write("tampered.json", &serde_json::to_vec(&tampered).unwrap()),
        write("no_apikeys.json", &serde_json::to_vec(&no_apikeys).unwrap()),
        write("no_admin.json", &serde_json::to_vec(&no_admin).unwrap()),
        write("wrong_type.json", &serde_json::to_vec(&wrong_type).unwrap()),
        // Keys of projects that are not in the backup: fails validation as a whole.
        write("dangling.json", &serde_json::to_vec(&dangling).unwrap()),
    ];
    for bad in &bad_files {
        let r = restore(&gw, bad);
        assert_eq!(r.status, 400, "restore of {} answered {}", bad.display(), r.text);
        r.err_any(400);
        assert_eq!(fs::read(&gw.config_path).unwrap(), before, "{} changed the file", bad.display());
    }
    for body in [json!({"input_file": "../gw_mcp_config.json"}), json!({}), json!({"input_file": ""})] {
        gw.post("/api/v1/system/restore", &body).err_any(400);
    }
    assert_eq!(fs::read(&gw.config_path).unwrap(), before);
    assert_eq!(state(&gw), before_state);
    assert_eq!(gw.system_health()["status"], json!("healthy"));
    // The good one still works after all that.
    restore(&gw, &good).ok(200);
}

#[test]
fn reset_needs_confirm_true() {
    let (_dir, gw) = start_fixture();
    let before = fs::read(&gw.config_path).unwrap();
    for body in [json!({}), json!({"confirm": false})] {
        let r = gw.post("/api/v1/system/reset", &body);
        let detail = r.err(400, "System reset failed");
        assert_eq!(detail, "reset requires confirm=true");
    }
    assert_eq!(fs::read(&gw.config_path).unwrap(), before);
}

#[test]
fn reset_gives_the_init_config_and_keeps_the_admin_key() {
    let (_dir, gw) = start_fixture();
    let r = gw.post("/api/v1/system/reset", &json!({"confirm": true}));
    r.ok(200);
    assert!(
        r.body.get("data").is_none() || r.body["data"].is_null(),
        "reset answers message and timestamp only: {}",
        r.text
    );

    let file = read_json(&gw.config_path);
    assert_eq!(file_mode(&gw.config_path), 0o600);
    assert_eq!(file["admin_apikey"], json!(ADMIN_KEY), "reset must keep the admin key");
    let configs = file["mcp_configs"].as_object().unwrap();
    assert_eq!(configs.len(), 1);
    let (cfg_id, cfg) = configs.iter().next().unwrap();
    assert!(is_uuid_v4(cfg_id));
    assert_eq!(cfg["mcp_config_name"], json!("default_config"));
    assert_eq!(cfg["mcp_config"], json!([]));
    let projects = file["projects"].as_object().unwrap();
    assert_eq!(projects.len(), 1);
    let (project_id, project) = projects.iter().next().unwrap();
    assert_eq!(project["project_name"], json!("default_project"));
    assert_eq!(&project["mcp_config_id"], &json!(cfg_id));
    let users = file["users"].as_object().unwrap();
    assert_eq!(users.len(), 1);
    let (user_id, user) = users.iter().next().unwrap();
    assert_eq!(user["email"], json!("default@example.com"));
    assert_eq!(project["users"], json!([user_id]));
    let keys = file["apikeys"].as_object().unwrap();
    assert_eq!(keys.len(), 1);
    let (key, rec) = keys.iter().next().unwrap();
    assert!(key.len() >= 43);
    assert_eq!(&rec["project_id"], &json!(project_id));
    assert_eq!(&rec["user_id"], &json!(user_id));

    // In effect at once through the API, with the same admin key.
    gw.get(&format!("/api/v1/api-keys/{API_KEY}")).err(404, "NOT_FOUND");
    gw.get(&format!("/api/v1/api-keys/{key}")).ok(200);
    gw.get("/api/v1/projects/default_project").ok(200);
    gw.get(&format!("/api/v1/projects/{PROJECT_NAME}")).err(404, "NOT_FOUND");
    gw.get("/api/v1/users/default@example.com").ok(200);
    let h = gw.system_health();
    assert_eq!(
        (
            h["total_configs"].clone(),
            h["total_projects"].clone(),
            h["total_users"].clone(),
            h["total_api_keys"].clone()
        ),
        (json!(1), json!(1), json!(1), json!(1))
    );
    assert_eq!(h["status"], json!("healthy"));
}
