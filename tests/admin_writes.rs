//! How the admin API writes the config file (contract 2 and 3): concurrent creates lose no
//! update; malformed JSON, wrong types, oversized bodies and foreign content types are refused
//! with the file's bytes unchanged; annotations (keys that start with `x_`, `x-` or `_`) anywhere in the file survive
//! a rewrite, and any other unknown key is refused with the nearest known one (contract 15); writes
//! keep mode 0600 and leave no temporary files; a read-only file or directory gets 409
//! `CONFIG_READ_ONLY` on every write route.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::thread;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

fn dir_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn sixty_concurrent_user_creates_all_land() {
    let (_dir, gw) = start_fixture();
    let admin = gw.admin.clone();
    let handles: Vec<_> = (0..60)
        .map(|i| {
            let url = format!("{admin}/api/v1/users");
            thread::spawn(move || {
                let c = client();
                let auth = format!("Bearer {ADMIN_KEY}");
                let body = json!({"email": format!("user{i:02}@example.com")});
                send(&c, Method::POST, &url, Some(&auth), Some(&body))
            })
        })
        .collect();
    for h in handles {
        let r = h.join().unwrap();
        r.ok(201);
    }
    let file = read_json(&gw.config_path);
    let users = file["users"].as_object().unwrap();
    assert_eq!(users.len(), 62, "lost updates: {} users in the file", users.len());
    let listed = gw.get("/api/v1/users").ok(200).clone();
    assert_eq!(listed.as_array().unwrap().len(), 62);
    for i in 0..60 {
        let email = format!("user{i:02}@example.com");
        assert!(users.values().any(|u| u["email"] == json!(email)), "{email} missing in file");
        assert!(find(&listed, "email", &email).is_some(), "{email} missing in listing");
    }
    assert_eq!(file_mode(&gw.config_path), 0o600);
}

#[test]
fn sixty_concurrent_mixed_creates_all_land() {
    let (_dir, gw) = start_fixture();
    let admin = gw.admin.clone();
    let handles: Vec<_> = (0..60)
        .map(|i| {
            let admin = admin.clone();
            thread::spawn(move || {
                let c = client();
                let auth = format!("Bearer {ADMIN_KEY}");
                let (path, body) = match i % 4 {
                    0 => ("/api/v1/configs".to_string(), json!({"config_name": format!("cfg{i}")})),
                    1 => (
                        "/api/v1/projects".to_string(),
                        json!({"project_name": format!("proj{i}"), "mcp_config_id": CONFIG_ID}),
                    ),
                    2 => (format!("/api/v1/users/{ALICE_ID}/api-keys"), json!({"project_id": PROJECT_ID})),
                    _ => (
                        format!("/api/v1/configs/{SPARE_CONFIG_ID}/servers"),
                        json!({"server_name": format!("srv{i}"), "config": {"command": "true", "args": []}}),
                    ),
                };
                send(&c, Method::POST, &format!("{admin}{path}"), Some(&auth), Some(&body))
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap().ok(201);
    }
    let file = read_json(&gw.config_path);
    assert_eq!(file["mcp_configs"].as_object().unwrap().len(), 2 + 15);
    assert_eq!(file["projects"].as_object().unwrap().len(), 1 + 15);
    assert_eq!(file["apikeys"].as_object().unwrap().len(), 1 + 15);
    assert_eq!(file["mcp_configs"][SPARE_CONFIG_ID]["mcp_config"].as_array().unwrap().len(), 15);
    assert_eq!(gw.get("/api/v1/configs").ok(200).as_array().unwrap().len(), 17);
    assert_eq!(gw.get("/api/v1/projects").ok(200).as_array().unwrap().len(), 16);
    assert_eq!(gw.get("/api/v1/api-keys").ok(200).as_array().unwrap().len(), 16);
    assert_eq!(gw.get(&format!("/api/v1/configs/{SPARE_CONFIG_ID}/servers")).ok(200).as_array().unwrap().len(), 15);
}

#[test]
fn malformed_json_is_400_and_leaves_the_file_unchanged() {
    let (_dir, gw) = start_fixture();
    let before = fs::read(&gw.config_path).unwrap();
    let bodies: [&[u8]; 5] =
        [b"{", b"{\"email\": }", b"not json at all", b"{\"email\": \"x@example.com\"", b"\xff\xfe"];
    for body in bodies {
        for path in ["/api/v1/users", "/api/v1/projects", "/api/v1/configs"] {
            let r = gw.raw(Method::POST, path, Some("application/json"), body.to_vec()).unwrap();
            r.err(400, "VALIDATION_ERROR");
        }
        let r =
            gw.raw(Method::PUT, &format!("/api/v1/users/{ALICE_ID}"), Some("application/json"), body.to_vec()).unwrap();
        r.err(400, "VALIDATION_ERROR");
        let r = gw.raw(Method::POST, "/api/v1/system/reset", Some("application/json"), body.to_vec()).unwrap();
        r.err_any(400);
    }
    assert_eq!(fs::read(&gw.config_path).unwrap(), before);
}

#[test]
fn wrong_types_are_400_and_leave_the_file_unchanged() {
    let (_dir, gw) = start_fixture();
    let before = fs::read(&gw.config_path).unwrap();
    let cases: Vec<(Method, String, Value)> = vec![
        (Method::POST, "/api/v1/users".into(), json!({"email": 5})),
        (Method::POST, "/api/v1/users".into(), json!(["alice@example.com"])),
        (Method::POST, "/api/v1/users".into(), json!("carol@example.com")),
        (Method::POST, "/api/v1/projects".into(), json!({"project_name": ["x"]})),
        (Method::POST, "/api/v1/projects".into(), json!({"project_name": "ok", "mcp_config_id": 7})),
        (Method::POST, "/api/v1/configs".into(), json!({"config_name": null})),
        (Method::POST, "/api/v1/configs".into(), json!({"config_name": {"a": 1}})),
        (Method::PUT, format!("/api/v1/configs/{CONFIG_ID}"), json!({"config_name": 1})),
        (Method::PUT, format!("/api/v1/projects/{PROJECT_ID}"), json!({"project_name": true})),
        (Method::PUT, format!("/api/v1/users/{ALICE_ID}"), json!({"email": false})),
        (Method::POST, format!("/api/v1/projects/{PROJECT_ID}/users"), json!({"email": 3})),
        (Method::POST, format!("/api/v1/users/{BOB_ID}/api-keys"), json!({"project_id": 12})),
        (
            Method::POST,
            format!("/api/v1/configs/{CONFIG_ID}/servers"),
            json!({"server_name": "s1", "config": {"command": "x", "args": "not-an-array"}}),
        ),
        (
            Method::POST,
            format!("/api/v1/configs/{CONFIG_ID}/servers"),
            json!({"server_name": "s2", "config": {"command": 42, "args": []}}),
        ),
        (
            Method::POST,
            format!("/api/v1/configs/{CONFIG_ID}/servers"),
            json!({"server_name": "s3", "config": {"command": "x", "args": [], "env": {"A": 1}}}),
        ),
        (
            Method::POST,
            format!("/api/v1/configs/{CONFIG_ID}/servers"),
            json!({"server_name": 9, "config": {"command": "x", "args": []}}),
        ),
        // A typo of a server entry's key (contract 15): refused, never a guardrail silently off.
        (
            Method::POST,
            format!("/api/v1/configs/{CONFIG_ID}/servers"),
            json!({"server_name": "s4", "config": {"command": "x", "args": []},
                   "output_guardrail_policy": {"enabled": true}}),
        ),
    ];
    for (method, path, body) in cases {
        let r = gw.call(method.clone(), &path, Some(&body));
        assert_eq!(r.status, 400, "{method} {path} {body}: {}", r.text);
        r.err(400, "VALIDATION_ERROR");
        if body.get("output_guardrail_policy").is_some() {
            assert!(r.text.contains("did you mean `output_guardrails_policy`?"), "{}", r.text);
        }
    }
    // System routes: 400 in the error shape (the code may be the route's own failure code,
    // as with the spec's "System reset failed").
    for (path, body) in [
        ("/api/v1/system/backup", json!({"output_file": 17})),
        ("/api/v1/system/restore", json!({"input_file": ["/x"]})),
        ("/api/v1/system/reset", json!({"confirm": "true"})),
        ("/api/v1/system/reset", json!({"confirm": 1})),
    ] {
        gw.post(path, &body).err_any(400);
    }
    assert_eq!(fs::read(&gw.config_path).unwrap(), before);
}

#[test]
fn two_mib_body_is_413_and_leaves_the_file_unchanged() {
    let (_dir, gw) = start_fixture();
    let before = fs::read(&gw.config_path).unwrap();
    let big = format!("{{\"email\": \"{}@example.com\"}}", "a".repeat(2 * 1024 * 1024));
    for (method, path) in [
        (Method::POST, "/api/v1/users".to_string()),
        (Method::POST, format!("/api/v1/configs/{CONFIG_ID}/servers")),
        (Method::PUT, format!("/api/v1/users/{ALICE_ID}")),
    ] {
        // The server may close the connection after answering early; retry a transport error.
        let mut answer = None;
        for _ in 0..3 {
            match gw.raw(method.clone(), &path, Some("application/json"), big.clone().into_bytes()) {
                Ok(r) => {
                    answer = Some(r);
                    break;
                }
                Err(e) => eprintln!("transport error on {method} {path}: {e}"),
            }
        }
        let r = answer.unwrap_or_else(|| panic!("no answer to a 2 MiB body on {method} {path}"));
        r.err(413, "PAYLOAD_TOO_LARGE");
    }
    // Just over the 1 MiB limit is refused too.
    let over = format!("{{\"email\": \"{}@example.com\"}}", "a".repeat(1024 * 1024 + 16));
    let r = (0..3)
        .find_map(|_| gw.raw(Method::POST, "/api/v1/users", Some("application/json"), over.clone().into_bytes()).ok())
        .expect("no answer to a body just over 1 MiB");
    r.err(413, "PAYLOAD_TOO_LARGE");
    assert_eq!(fs::read(&gw.config_path).unwrap(), before);
    // The server still works afterwards.
    gw.get("/api/v1/users").ok(200);
}

#[test]
fn a_body_just_under_one_mib_is_not_413() {
    let (_dir, gw) = start_fixture();
    // ~900 KiB: under the limit, so the answer is about the content (a bad e-mail), not the size.
    let body = format!("{{\"email\": \"{}\"}}", "a".repeat(900 * 1024));
    let r = gw.raw(Method::POST, "/api/v1/users", Some("application/json"), body.into_bytes()).unwrap();
    r.err(400, "VALIDATION_ERROR");
}

#[test]
fn foreign_content_type_is_415_and_leaves_the_file_unchanged() {
    let (_dir, gw) = start_fixture();
    let before = fs::read(&gw.config_path).unwrap();
    for ct in ["text/plain", "application/x-www-form-urlencoded", "application/xml"] {
        let r = gw.raw(Method::POST, "/api/v1/users", Some(ct), br#"{"email": "carol@example.com"}"#.to_vec()).unwrap();
        r.err(415, "UNSUPPORTED_MEDIA_TYPE");
        let r = gw
            .raw(Method::PUT, &format!("/api/v1/projects/{PROJECT_ID}"), Some(ct), br#"{"project_name": "z"}"#.to_vec())
            .unwrap();
        r.err(415, "UNSUPPORTED_MEDIA_TYPE");
    }
    assert_eq!(fs::read(&gw.config_path).unwrap(), before);
    // A JSON content type with a charset parameter is fine.
    let r = gw
        .raw(
            Method::POST,
            "/api/v1/users",
            Some("application/json; charset=utf-8"),
            br#"{"email": "carol@example.com"}"#.to_vec(),
        )
        .unwrap();
    r.ok(201);
}

#[test]
fn routes_without_a_body_accept_an_empty_one() {
    let (_dir, gw) = start_fixture();
    let id = key_id(API_KEY);
    let r = gw.raw(Method::POST, &format!("/api/v1/api-keys/{id}/disable"), None, Vec::new()).unwrap();
    assert_eq!(r.ok(200)["disabled"], json!(true));
    let r =
        gw.raw(Method::POST, &format!("/api/v1/api-keys/{id}/enable"), Some("application/json"), Vec::new()).unwrap();
    assert_eq!(r.ok(200)["disabled"], json!(false));
}

#[test]
fn semantically_bad_writes_leave_the_file_unchanged() {
    let (_dir, gw) = start_fixture();
    let before = fs::read(&gw.config_path).unwrap();
    gw.post("/api/v1/projects", &json!({"project_name": "p", "mcp_config_id": "missing"})).err(400, "VALIDATION_ERROR");
    gw.put(
        &format!("/api/v1/configs/{CONFIG_ID}/servers/echo"),
        &json!({"server_name": "bad name", "config": {"command": "x", "args": []}}),
    )
    .err(400, "VALIDATION_ERROR");
    gw.post("/api/v1/users", &json!({"email": "bad"})).err(400, "VALIDATION_ERROR");
    gw.post("/api/v1/users", &json!({"email": ALICE})).err(409, "CONFLICT");
    gw.delete(&format!("/api/v1/configs/{CONFIG_ID}")).err(409, "CONFLICT");
    assert_eq!(fs::read(&gw.config_path).unwrap(), before);
}

#[test]
fn annotations_survive_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    let mut cfg = fixture();
    cfg["x_top_level"] = json!({"keep": [1, 2, 3], "nested": {"deep": true}});
    cfg["common_mcp_gateway_config"]["x_common"] = json!("common-extra");
    cfg["common_mcp_gateway_config"]["timeout_settings"] = json!({"default_timeout": 30, "x_timeout_extra": 5});
    cfg["plugins"] = json!({"telemetry": {"provider": "stdout", "config": {"enabled": false, "x_plugin": 1}}, "x_plugin_family": {}});
    cfg["mcp_configs"][CONFIG_ID]["x_config_extra"] = json!("config-extra");
    cfg["mcp_configs"][CONFIG_ID]["mcp_config"][0]["x_server_extra"] = json!({"a": "b"});
    cfg["mcp_configs"][CONFIG_ID]["mcp_config"][0]["config"]["x_cmd_extra"] = json!(42);
    cfg["projects"][PROJECT_ID]["x_project_extra"] = json!([true, null]);
    cfg["users"][ALICE_ID]["x_user_extra"] = json!("user-extra");
    cfg["apikeys"][API_KEY]["x_key_extra"] = json!(1.5);
    write_json(&path, &cfg);
    let gw = Gateway::start(&path);

    // An unrelated write, a write to the project holding an unknown key, a write to the user
    // holding one and a key state change.
    gw.post("/api/v1/users", &json!({"email": "carol@example.com"})).ok(201);
    gw.put(&format!("/api/v1/projects/{PROJECT_ID}"), &json!({"project_name": "alpha_renamed"})).ok(200);
    gw.put(&format!("/api/v1/users/{ALICE_ID}"), &json!({"email": "alice2@example.com"})).ok(200);
    gw.post_empty(&format!("/api/v1/api-keys/{}/disable", key_id(API_KEY))).ok(200);
    gw.put(&format!("/api/v1/configs/{CONFIG_ID}"), &json!({"config_name": "renamed_config"})).ok(200);

    let file = read_json(&path);
    assert_eq!(file["x_top_level"], cfg["x_top_level"]);
    assert_eq!(file["common_mcp_gateway_config"]["x_common"], json!("common-extra"));
    assert_eq!(file["common_mcp_gateway_config"]["timeout_settings"]["x_timeout_extra"], json!(5));
    assert_eq!(file["plugins"]["telemetry"]["config"]["x_plugin"], json!(1));
    assert_eq!(file["plugins"]["x_plugin_family"], json!({}));
    assert_eq!(file["mcp_configs"][CONFIG_ID]["x_config_extra"], json!("config-extra"));
    assert_eq!(file["mcp_configs"][CONFIG_ID]["mcp_config"][0]["x_server_extra"], json!({"a": "b"}));
    assert_eq!(file["mcp_configs"][CONFIG_ID]["mcp_config"][0]["config"]["x_cmd_extra"], json!(42));
    assert_eq!(file["mcp_configs"][CONFIG_ID]["mcp_config"][0]["config"]["env"]["TOKEN"], json!(ENV_SECRET));
    assert_eq!(
        file["mcp_configs"][CONFIG_ID]["mcp_config"][0]["oauth_config"]["OAUTH_CLIENT_SECRET"],
        json!(OAUTH_SECRET)
    );
    assert_eq!(file["projects"][PROJECT_ID]["x_project_extra"], json!([true, null]));
    assert_eq!(file["projects"][PROJECT_ID]["project_name"], json!("alpha_renamed"));
    assert_eq!(file["users"][ALICE_ID]["x_user_extra"], json!("user-extra"));
    assert_eq!(file["users"][ALICE_ID]["email"], json!("alice2@example.com"));
    assert_eq!(file["apikeys"][API_KEY]["x_key_extra"], json!(1.5));
    assert_eq!(file["apikeys"][API_KEY]["disabled"], json!(true));
    assert_eq!(file["admin_apikey"], json!(ADMIN_KEY));
}

#[test]
fn writes_keep_mode_0600_and_leave_no_temporary_files() {
    let (dir, gw) = start_fixture();
    let before = dir_entries(dir.path());
    gw.post("/api/v1/users", &json!({"email": "carol@example.com"})).ok(201);
    gw.post("/api/v1/configs", &json!({"config_name": "c2"})).ok(201);
    gw.delete(&format!("/api/v1/api-keys/{API_KEY}")).ok(200);
    assert_eq!(file_mode(&gw.config_path), 0o600);
    // The file is always complete, valid JSON.
    let file = read_json(&gw.config_path);
    assert_eq!(file["users"].as_object().unwrap().len(), 3);
    let ok = wait_until(SHORT_DEADLINE, || dir_entries(dir.path()) == before);
    assert!(ok, "stray files after writes: {:?} (before: {before:?})", dir_entries(dir.path()));
}

/// Every write route with a body that would succeed on a writable file.
fn write_routes(backup: &str) -> Vec<(Method, String, Option<Value>)> {
    let kid = key_id(API_KEY);
    vec![
        (Method::POST, "/api/v1/configs".into(), Some(json!({"config_name": "ro_new"}))),
        (Method::PUT, format!("/api/v1/configs/{SPARE_CONFIG_ID}"), Some(json!({"config_name": "ro_renamed"}))),
        (Method::DELETE, format!("/api/v1/configs/{SPARE_CONFIG_ID}"), None),
        (Method::POST, format!("/api/v1/configs/{CONFIG_ID}/copy"), Some(json!({"config_name": "ro_copy"}))),
        (
            Method::POST,
            format!("/api/v1/configs/{CONFIG_ID}/servers"),
            Some(json!({"server_name": "ro_srv", "config": {"command": "x", "args": []}})),
        ),
        (
            Method::PUT,
            format!("/api/v1/configs/{CONFIG_ID}/servers/echo"),
            Some(json!({"server_name": "echo", "config": {"command": "y", "args": []}})),
        ),
        (Method::DELETE, format!("/api/v1/configs/{CONFIG_ID}/servers/echo"), None),
        (Method::POST, "/api/v1/projects".into(), Some(json!({"project_name": "ro_proj"}))),
        (Method::PUT, format!("/api/v1/projects/{PROJECT_ID}"), Some(json!({"project_name": "ro_alpha"}))),
        (Method::POST, format!("/api/v1/projects/{PROJECT_ID}/users"), Some(json!({"email": BOB}))),
        (Method::DELETE, format!("/api/v1/projects/{PROJECT_ID}/users/{ALICE_ID}"), None),
        (Method::DELETE, "/api/v1/projects/ro_victim".into(), None),
        (Method::POST, "/api/v1/users".into(), Some(json!({"email": "ro@example.com"}))),
        (Method::PUT, format!("/api/v1/users/{BOB_ID}"), Some(json!({"email": "bob2@example.com"}))),
        (Method::DELETE, format!("/api/v1/users/{BOB_ID}"), None),
        (Method::POST, format!("/api/v1/users/{ALICE_ID}/api-keys"), Some(json!({"project_id": PROJECT_ID}))),
        (
            Method::PUT,
            format!("/api/v1/users/{ALICE_ID}/credentials/{CONFIG_ID}/echo"),
            Some(json!({"values": {"TOKEN": "ro-value"}})),
        ),
        (Method::POST, format!("/api/v1/api-keys/{kid}/rotate"), None),
        (Method::POST, format!("/api/v1/api-keys/{kid}/disable"), None),
        (Method::POST, format!("/api/v1/api-keys/{kid}/enable"), None),
        (Method::DELETE, format!("/api/v1/api-keys/{kid}"), None),
        (Method::POST, "/api/v1/system/restore".into(), Some(json!({"input_file": backup}))),
        (Method::POST, "/api/v1/system/reset".into(), Some(json!({"confirm": true}))),
    ]
}

/// Prepares what the write routes need (a backup to restore, a project without keys to
/// delete) while the file is still writable.
fn prepare_for_read_only(gw: &Gateway, backup: &Path) {
    gw.post("/api/v1/projects", &json!({"project_name": "ro_victim"})).ok(201);
    gw.post("/api/v1/system/backup", &json!({"output_file": backup.to_str().unwrap()})).ok(200);
}

fn assert_every_write_is_read_only(gw: &Gateway, backup: &str) {
    let before = fs::read(&gw.config_path).unwrap();
    for (method, path, body) in write_routes(backup) {
        let r = gw.call(method.clone(), &path, body.as_ref());
        assert_eq!(r.status, 409, "{method} {path}: {}", r.text);
        r.err(409, "CONFIG_READ_ONLY");
    }
    assert_eq!(fs::read(&gw.config_path).unwrap(), before, "a read-only file was changed");
    // Reads still work.
    gw.get("/api/v1/configs").ok(200);
    gw.get(&format!("/api/v1/api-keys/{API_KEY}")).ok(200);
}

#[test]
fn read_only_file_gets_409_config_read_only_on_every_write() {
    let (dir, gw) = start_fixture();
    let backup = dir.path().join("backups/backup.json");
    prepare_for_read_only(&gw, &backup);
    fs::set_permissions(&gw.config_path, fs::Permissions::from_mode(0o444)).unwrap();
    assert_every_write_is_read_only(&gw, backup.to_str().unwrap());
    assert_eq!(file_mode(&gw.config_path), 0o444);
}

#[test]
fn read_only_directory_gets_409_config_read_only_on_every_write() {
    let outer = tempfile::tempdir().unwrap();
    let conf_dir = outer.path().join("conf");
    fs::create_dir(&conf_dir).unwrap();
    let path = conf_dir.join("gw_mcp_config.json");
    write_json(&path, &fixture());
    let gw = Gateway::start(&path);
    let backup = conf_dir.join("backups/backup.json");
    prepare_for_read_only(&gw, &backup);
    fs::set_permissions(&conf_dir, fs::Permissions::from_mode(0o555)).unwrap();
    assert_every_write_is_read_only(&gw, backup.to_str().unwrap());
    fs::set_permissions(&conf_dir, fs::Permissions::from_mode(0o700)).unwrap();
}

#[test]
fn concurrent_creates_of_one_name_give_one_record() {
    let (_dir, gw) = start_fixture();
    let url = format!("{}/api/v1/users", gw.admin);
    let handles: Vec<_> = (0..20)
        .map(|_| {
            let url = url.clone();
            thread::spawn(move || {
                let auth = format!("Bearer {ADMIN_KEY}");
                send(&client(), Method::POST, &url, Some(&auth), Some(&json!({"email": "same@example.com"})))
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap().status).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 1, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 409).count(), 19, "{statuses:?}");
    let file = read_json(&gw.config_path);
    let same = file["users"].as_object().unwrap().values().filter(|u| u["email"] == json!("same@example.com")).count();
    assert_eq!(same, 1);
}

#[test]
fn concurrent_rotations_of_one_key_give_one_new_key() {
    let (_dir, gw) = start_fixture();
    let url = format!("{}/api/v1/api-keys/{}/rotate", gw.admin, key_id(API_KEY));
    let handles: Vec<_> = (0..10)
        .map(|_| {
            let url = url.clone();
            thread::spawn(move || {
                let auth = format!("Bearer {ADMIN_KEY}");
                send(&client(), Method::POST, &url, Some(&auth), None)
            })
        })
        .collect();
    let answers: Vec<Resp> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let winners: Vec<&Resp> = answers.iter().filter(|r| r.status == 200).collect();
    assert_eq!(winners.len(), 1, "{:?}", answers.iter().map(|r| r.status).collect::<Vec<_>>());
    assert!(answers.iter().all(|r| r.status == 200 || r.status == 404));
    let new_key = winners[0].data()["api_key"].as_str().unwrap();
    let file = read_json(&gw.config_path);
    let keys: Vec<&String> = file["apikeys"].as_object().unwrap().keys().collect();
    assert_eq!(keys, vec![new_key], "exactly the one new key must remain");
}
