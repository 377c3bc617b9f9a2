//! The admin API's resource families (contract 3): configs, servers, projects, project members,
//! users and API keys. For each: the happy path (201 on create, the documented data shapes, the
//! change visible in the next GET and in the file on disk), ids or names in paths, and the
//! 400 / 404 / 409 answers. Secrets in server entries never appear in any answer, and API keys
//! appear in full only in the answer that creates them.

mod common;

use common::*;
use serde_json::{Value, json};

fn cfg_file(gw: &Gateway) -> Value {
    read_json(&gw.config_path)
}

#[track_caller]
fn assert_no_secret(r: &Resp) {
    assert!(!r.text.contains(ENV_SECRET), "env secret leaked: {}", r.text);
    assert!(!r.text.contains(OAUTH_SECRET), "OAuth secret leaked: {}", r.text);
}

#[test]
fn configs_list_get_create_rename_delete() {
    let (_dir, gw) = start_fixture();

    // List: array of config views.
    let r = gw.get("/api/v1/configs");
    assert_no_secret(&r);
    let list = r.ok(200);
    assert_eq!(list.as_array().unwrap().len(), 2, "{}", r.text);
    let def = find(list, "mcp_config_id", CONFIG_ID).expect("default_config listed");
    assert_eq!(def["mcp_config_name"], json!(CONFIG_NAME));
    assert!(def["created_at"].is_string());
    assert_eq!(def["servers"][0]["server_name"], json!("echo"));
    assert_eq!(def["servers"][0]["config"]["command"], json!("python3"));
    assert!(def["servers"][0]["config"]["env"]["TOKEN"].is_string(), "env key kept, value masked");
    assert_eq!(def["projects"], json!([{"project_id": PROJECT_ID, "project_name": PROJECT_NAME}]));

    // Get by id and by name.
    for ident in [CONFIG_ID, CONFIG_NAME] {
        let r = gw.get(&format!("/api/v1/configs/{ident}"));
        assert_no_secret(&r);
        let d = r.ok(200);
        assert_eq!(d["mcp_config_id"], json!(CONFIG_ID));
        assert_eq!(d["mcp_config_name"], json!(CONFIG_NAME));
        assert_eq!(d["servers"].as_array().unwrap().len(), 1);
    }
    gw.get("/api/v1/configs/no_such_config").err(404, "NOT_FOUND");
    gw.get("/api/v1/configs/00000000-0000-4000-8000-000000000000").err(404, "NOT_FOUND");

    // Create.
    let r = gw.post("/api/v1/configs", &json!({"config_name": "new_config"}));
    let d = r.ok(201).clone();
    let new_id = d["mcp_config_id"].as_str().unwrap().to_string();
    assert!(is_uuid_v4(&new_id), "{new_id}");
    assert_eq!(d["mcp_config_name"], json!("new_config"));
    let file = cfg_file(&gw);
    assert_eq!(file["mcp_configs"][&new_id]["mcp_config_name"], json!("new_config"));
    assert_eq!(file_mode(&gw.config_path), 0o600);
    let d = gw.get("/api/v1/configs/new_config").ok(200).clone();
    assert_eq!(d["mcp_config_id"], json!(new_id));
    assert_eq!(d["servers"], json!([]));

    // Create errors.
    gw.post("/api/v1/configs", &json!({"config_name": "new_config"})).err(409, "CONFLICT");
    gw.post("/api/v1/configs", &json!({"config_name": CONFIG_NAME})).err(409, "CONFLICT");
    gw.post("/api/v1/configs", &json!({})).err(400, "VALIDATION_ERROR");
    gw.post("/api/v1/configs", &json!({"config_name": ""})).err(400, "VALIDATION_ERROR");

    // Rename (by id), then the old name is gone and the new one resolves.
    let r = gw.put(&format!("/api/v1/configs/{new_id}"), &json!({"config_name": "renamed_config"}));
    r.ok(200);
    gw.get("/api/v1/configs/new_config").err(404, "NOT_FOUND");
    assert_eq!(gw.get("/api/v1/configs/renamed_config").ok(200)["mcp_config_id"], json!(new_id));
    assert_eq!(cfg_file(&gw)["mcp_configs"][&new_id]["mcp_config_name"], json!("renamed_config"));
    gw.put("/api/v1/configs/renamed_config", &json!({"config_name": CONFIG_NAME})).err(409, "CONFLICT");
    gw.put("/api/v1/configs/no_such_config", &json!({"config_name": "x"})).err(404, "NOT_FOUND");

    // Delete: a config used by a project is refused; an unused one goes.
    let before = std::fs::read(&gw.config_path).unwrap();
    gw.delete(&format!("/api/v1/configs/{CONFIG_ID}")).err(409, "CONFLICT");
    gw.delete(&format!("/api/v1/configs/{CONFIG_NAME}")).err(409, "CONFLICT");
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before);
    gw.delete("/api/v1/configs/renamed_config").ok(200);
    gw.get(&format!("/api/v1/configs/{new_id}")).err(404, "NOT_FOUND");
    assert!(cfg_file(&gw)["mcp_configs"].get(&new_id).is_none());
    gw.delete(&format!("/api/v1/configs/{new_id}")).err(404, "NOT_FOUND");
    assert_eq!(gw.get("/api/v1/configs").ok(200).as_array().unwrap().len(), 2);
}

#[test]
fn configs_copy() {
    let (_dir, gw) = start_fixture();
    let r = gw.post(&format!("/api/v1/configs/{CONFIG_NAME}/copy"), &json!({"config_name": "copied"}));
    assert_no_secret(&r);
    let d = r.ok(201).clone();
    let copy_id = d["mcp_config_id"].as_str().unwrap().to_string();
    assert!(is_uuid_v4(&copy_id));
    assert_ne!(copy_id, CONFIG_ID);
    assert_eq!(d["mcp_config_name"], json!("copied"));
    assert_eq!(d["servers"][0]["server_name"], json!("echo"));
    assert_eq!(d["projects"], json!([]), "a fresh copy is used by no project");

    // The copy in the file carries the real server entry, secrets included.
    let file = cfg_file(&gw);
    let servers = &file["mcp_configs"][&copy_id]["mcp_config"];
    assert_eq!(servers[0]["config"]["env"]["TOKEN"], json!(ENV_SECRET));
    assert_eq!(servers[0]["oauth_config"]["OAUTH_CLIENT_SECRET"], json!(OAUTH_SECRET));
    // The original is untouched.
    assert_eq!(file["mcp_configs"][CONFIG_ID]["mcp_config"], json!([echo_server()]));

    gw.post(&format!("/api/v1/configs/{CONFIG_ID}/copy"), &json!({"config_name": "copied"})).err(409, "CONFLICT");
    gw.post("/api/v1/configs/no_such_config/copy", &json!({"config_name": "other"})).err(404, "NOT_FOUND");
    gw.post(&format!("/api/v1/configs/{CONFIG_ID}/copy"), &json!({})).err(400, "VALIDATION_ERROR");
}

#[test]
fn servers_crud_with_masked_secrets() {
    let (_dir, gw) = start_fixture();
    let base = format!("/api/v1/configs/{CONFIG_ID}/servers");

    let r = gw.get(&base);
    assert_no_secret(&r);
    let list = r.ok(200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["server_name"], json!("echo"));
    assert_eq!(list[0]["description"], json!("Echo"));
    assert_eq!(list[0]["config"]["args"], json!(["echo.py"]));

    let r = gw.get(&format!("/api/v1/configs/{CONFIG_NAME}/servers/echo"));
    assert_no_secret(&r);
    assert_eq!(r.ok(200)["server_name"], json!("echo"));
    gw.get(&format!("{base}/nope")).err(404, "NOT_FOUND");
    gw.get("/api/v1/configs/no_such_config/servers").err(404, "NOT_FOUND");

    // Create.
    let second_secret = "another-secret-password-987654";
    let entry = json!({
        "server_name": "files.v2",
        "description": "Files",
        "config": {"command": "node", "args": ["files.js", "--root", "/tmp"], "env": {"API_PASSWORD": second_secret}}
    });
    let r = gw.post(&format!("/api/v1/configs/{SPARE_CONFIG_NAME}/servers"), &entry);
    assert!(!r.text.contains(second_secret), "secret in create answer: {}", r.text);
    let d = r.ok(201);
    assert_eq!(d["server_name"], json!("files.v2"));
    assert_eq!(d["config"]["command"], json!("node"));
    let file = cfg_file(&gw);
    let stored = &file["mcp_configs"][SPARE_CONFIG_ID]["mcp_config"][0];
    assert_eq!(stored["config"]["env"]["API_PASSWORD"], json!(second_secret));
    assert_eq!(stored["config"]["args"], json!(["files.js", "--root", "/tmp"]));
    let r = gw.get(&format!("/api/v1/configs/{SPARE_CONFIG_ID}/servers/files.v2"));
    assert!(!r.text.contains(second_secret));
    r.ok(200);

    // Create errors leave the file as it was.
    let before = std::fs::read(&gw.config_path).unwrap();
    gw.post(&base, &json!({"server_name": "echo", "config": {"command": "x", "args": []}})).err(409, "CONFLICT");
    gw.post(&base, &json!({"server_name": "bad name!", "config": {"command": "x", "args": []}}))
        .err(400, "VALIDATION_ERROR");
    gw.post(&base, &json!({"server_name": "a/b", "config": {"command": "x", "args": []}})).err(400, "VALIDATION_ERROR");
    gw.post(&base, &json!({"server_name": "nocmd", "config": {"args": []}})).err(400, "VALIDATION_ERROR");
    gw.post(&base, &json!({"server_name": "noconfig"})).err(400, "VALIDATION_ERROR");
    gw.post(&base, &json!({"config": {"command": "x", "args": []}})).err(400, "VALIDATION_ERROR");
    gw.post(
        "/api/v1/configs/no_such_config/servers",
        &json!({"server_name": "ok", "config": {"command": "x", "args": []}}),
    )
    .err(404, "NOT_FOUND");
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before);

    // Replace with PUT.
    let replacement = json!({
        "server_name": "echo",
        "description": "Echo v2",
        "config": {"command": "python3", "args": ["echo2.py"], "env": {"TOKEN": "replacement-token-value-42"}}
    });
    let r = gw.put(&format!("{base}/echo"), &replacement);
    assert!(!r.text.contains("replacement-token-value-42"), "{}", r.text);
    assert_eq!(r.ok(200)["description"], json!("Echo v2"));
    let r = gw.get(&format!("{base}/echo"));
    assert_eq!(r.ok(200)["config"]["args"], json!(["echo2.py"]));
    let file = cfg_file(&gw);
    let servers = file["mcp_configs"][CONFIG_ID]["mcp_config"].as_array().unwrap().clone();
    assert_eq!(servers.len(), 1);
    assert_eq!(servers[0]["config"]["env"]["TOKEN"], json!("replacement-token-value-42"));
    gw.put(&format!("{base}/nope"), &replacement).err(404, "NOT_FOUND");
    gw.put(&format!("{base}/echo"), &json!({"server_name": "echo", "config": {"args": []}}))
        .err(400, "VALIDATION_ERROR");

    // Renaming a server onto another server's name is a conflict; onto a free name it works.
    gw.post(&base, &json!({"server_name": "second", "config": {"command": "x", "args": []}})).ok(201);
    let before = std::fs::read(&gw.config_path).unwrap();
    gw.put(&format!("{base}/second"), &json!({"server_name": "echo", "config": {"command": "x", "args": []}}))
        .err(409, "CONFLICT");
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before);
    gw.put(&format!("{base}/second"), &json!({"server_name": "third", "config": {"command": "x", "args": []}})).ok(200);
    gw.get(&format!("{base}/second")).err(404, "NOT_FOUND");
    gw.get(&format!("{base}/third")).ok(200);
    gw.delete(&format!("{base}/third")).ok(200);

    // Delete.
    gw.delete(&format!("{base}/echo")).ok(200);
    gw.get(&format!("{base}/echo")).err(404, "NOT_FOUND");
    gw.delete(&format!("{base}/echo")).err(404, "NOT_FOUND");
    assert_eq!(cfg_file(&gw)["mcp_configs"][CONFIG_ID]["mcp_config"], json!([]));
    assert_eq!(gw.get(&base).ok(200), &json!([]));
}

#[test]
fn projects_crud() {
    let (_dir, gw) = start_fixture();

    let list = gw.get("/api/v1/projects").ok(200).clone();
    assert_eq!(list.as_array().unwrap().len(), 1);
    let alpha = &list[0];
    assert_eq!(alpha["project_id"], json!(PROJECT_ID));
    assert_eq!(alpha["project_name"], json!(PROJECT_NAME));
    assert_eq!(alpha["mcp_config_id"], json!(CONFIG_ID));
    assert!(alpha["created_at"].is_string());
    assert_eq!(alpha["users"], json!([{"user_id": ALICE_ID, "email": ALICE}]));

    for ident in [PROJECT_ID, PROJECT_NAME] {
        let d = gw.get(&format!("/api/v1/projects/{ident}")).ok(200).clone();
        assert_eq!(d["project_id"], json!(PROJECT_ID));
        assert_eq!(d["users"][0]["email"], json!(ALICE));
    }
    gw.get("/api/v1/projects/nope").err(404, "NOT_FOUND");

    // Create with the config given by name: the answer carries the id.
    let r = gw.post("/api/v1/projects", &json!({"project_name": "beta", "mcp_config_id": SPARE_CONFIG_NAME}));
    let d = r.ok(201).clone();
    let beta_id = d["project_id"].as_str().unwrap().to_string();
    assert!(is_uuid_v4(&beta_id));
    assert_eq!(d["project_name"], json!("beta"));
    assert_eq!(d["mcp_config_id"], json!(SPARE_CONFIG_ID));
    let file = cfg_file(&gw);
    assert_eq!(file["projects"][&beta_id]["project_name"], json!("beta"));
    assert_eq!(file["projects"][&beta_id]["mcp_config_id"], json!(SPARE_CONFIG_ID));
    // The config now lists the project.
    let spare = gw.get(&format!("/api/v1/configs/{SPARE_CONFIG_ID}")).ok(200).clone();
    assert_eq!(spare["projects"], json!([{"project_id": beta_id, "project_name": "beta"}]));

    // Create with the config given by id, and without a config.
    let r = gw.post("/api/v1/projects", &json!({"project_name": "gamma", "mcp_config_id": CONFIG_ID}));
    assert_eq!(r.ok(201)["mcp_config_id"], json!(CONFIG_ID));
    let r = gw.post("/api/v1/projects", &json!({"project_name": "delta"}));
    r.ok(201);

    // Create errors.
    let before = std::fs::read(&gw.config_path).unwrap();
    gw.post("/api/v1/projects", &json!({"project_name": "beta"})).err(409, "CONFLICT");
    gw.post("/api/v1/projects", &json!({"project_name": "eps", "mcp_config_id": "no_such_config"}))
        .err(400, "VALIDATION_ERROR");
    gw.post(
        "/api/v1/projects",
        &json!({"project_name": "eps", "mcp_config_id": "00000000-0000-4000-8000-000000000000"}),
    )
    .err(400, "VALIDATION_ERROR");
    gw.post("/api/v1/projects", &json!({})).err(400, "VALIDATION_ERROR");
    gw.post("/api/v1/projects", &json!({"project_name": ""})).err(400, "VALIDATION_ERROR");
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before);

    // Update: rename, move to another config (by name).
    let r = gw.put("/api/v1/projects/beta", &json!({"project_name": "beta2"}));
    r.ok(200);
    gw.get("/api/v1/projects/beta").err(404, "NOT_FOUND");
    assert_eq!(gw.get("/api/v1/projects/beta2").ok(200)["project_id"], json!(beta_id));
    let r = gw.put(&format!("/api/v1/projects/{beta_id}"), &json!({"mcp_config_id": CONFIG_NAME}));
    r.ok(200);
    let d = gw.get(&format!("/api/v1/projects/{beta_id}")).ok(200).clone();
    assert_eq!(d["mcp_config_id"], json!(CONFIG_ID));
    assert_eq!(d["project_name"], json!("beta2"));
    assert_eq!(cfg_file(&gw)["projects"][&beta_id]["mcp_config_id"], json!(CONFIG_ID));

    // Update errors.
    let before = std::fs::read(&gw.config_path).unwrap();
    gw.put("/api/v1/projects/beta2", &json!({"project_name": PROJECT_NAME})).err(409, "CONFLICT");
    gw.put("/api/v1/projects/beta2", &json!({"mcp_config_id": "no_such_config"})).err(400, "VALIDATION_ERROR");
    gw.put("/api/v1/projects/nope", &json!({"project_name": "x"})).err(404, "NOT_FOUND");
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before);

    // Delete.
    gw.delete("/api/v1/projects/delta").ok(200);
    gw.get("/api/v1/projects/delta").err(404, "NOT_FOUND");
    gw.delete("/api/v1/projects/delta").err(404, "NOT_FOUND");
    let names: Vec<Value> =
        gw.get("/api/v1/projects").ok(200).as_array().unwrap().iter().map(|p| p["project_name"].clone()).collect();
    assert_eq!(names.len(), 3);
    assert!(!names.contains(&json!("delta")));
}

#[test]
fn project_members() {
    let (_dir, gw) = start_fixture();
    let members = format!("/api/v1/projects/{PROJECT_NAME}/users");

    assert_eq!(gw.get(&members).ok(200), &json!([{"user_id": ALICE_ID, "email": ALICE}]));
    gw.get("/api/v1/projects/nope/users").err(404, "NOT_FOUND");

    // Add by e-mail: the answer is the member list.
    let d = gw.post(&members, &json!({"email": BOB})).ok(201).clone();
    let list = d.as_array().expect("member list");
    assert_eq!(list.len(), 2);
    assert!(find(&d, "user_id", BOB_ID).is_some());
    assert!(cfg_file(&gw)["projects"][PROJECT_ID]["users"].as_array().unwrap().contains(&json!(BOB_ID)));
    // The user view shows the project.
    let bob = gw.get(&format!("/api/v1/users/{BOB}")).ok(200).clone();
    assert_eq!(bob["projects"], json!([{"project_id": PROJECT_ID, "project_name": PROJECT_NAME}]));

    // Errors.
    let before = std::fs::read(&gw.config_path).unwrap();
    gw.post(&members, &json!({"email": BOB})).err(409, "CONFLICT");
    gw.post(&members, &json!({"user_id": ALICE_ID})).err(409, "CONFLICT");
    let r = gw.post(&members, &json!({"email": "ghost@example.com"}));
    assert!(r.status == 400 || r.status == 404, "{}", r.text);
    r.err(r.status, if r.status == 400 { "VALIDATION_ERROR" } else { "NOT_FOUND" });
    let r = gw.post(&members, &json!({"user_id": "00000000-0000-4000-8000-000000000000"}));
    assert!(r.status == 400 || r.status == 404, "{}", r.text);
    gw.post(&members, &json!({})).err(400, "VALIDATION_ERROR");
    gw.post("/api/v1/projects/nope/users", &json!({"email": BOB})).err(404, "NOT_FOUND");
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before);

    // Add by user id to a second project.
    let beta =
        gw.post("/api/v1/projects", &json!({"project_name": "beta", "mcp_config_id": CONFIG_ID})).ok(201).clone();
    let beta_id = beta["project_id"].as_str().unwrap().to_string();
    let d = gw.post(&format!("/api/v1/projects/{beta_id}/users"), &json!({"user_id": BOB_ID})).ok(201).clone();
    assert_eq!(d, json!([{"user_id": BOB_ID, "email": BOB}]));

    // Removing bob from alpha deletes his alpha keys but keeps his beta key.
    let alpha_key =
        gw.post(&format!("/api/v1/users/{BOB_ID}/api-keys"), &json!({"project_name": PROJECT_NAME})).ok(201)["api_key"]
            .as_str()
            .unwrap()
            .to_string();
    let beta_key =
        gw.post(&format!("/api/v1/users/{BOB_ID}/api-keys"), &json!({"project_id": beta_id})).ok(201)["api_key"]
            .as_str()
            .unwrap()
            .to_string();
    gw.delete(&format!("{members}/{BOB}")).ok(200);
    assert_eq!(gw.get(&members).ok(200), &json!([{"user_id": ALICE_ID, "email": ALICE}]));
    gw.get(&format!("/api/v1/api-keys/{alpha_key}")).err(404, "NOT_FOUND");
    gw.get(&format!("/api/v1/api-keys/{beta_key}")).ok(200);
    let file = cfg_file(&gw);
    assert!(file["apikeys"].get(&alpha_key).is_none(), "bob's alpha key is still in the file");
    assert!(file["apikeys"].get(&beta_key).is_some());
    assert!(file["apikeys"].get(API_KEY).is_some(), "alice's key must stay");
    gw.delete(&format!("{members}/{BOB}")).err(404, "NOT_FOUND");
    // Removal by user id works too.
    gw.delete(&format!("/api/v1/projects/beta/users/{BOB_ID}")).ok(200);
    gw.get(&format!("/api/v1/api-keys/{beta_key}")).err(404, "NOT_FOUND");
}

#[test]
fn users_crud() {
    let (_dir, gw) = start_fixture();

    let list = gw.get("/api/v1/users").ok(200).clone();
    assert_eq!(list.as_array().unwrap().len(), 2);
    let alice = find(&list, "user_id", ALICE_ID).unwrap();
    assert_eq!(alice["email"], json!(ALICE));
    assert!(alice["created_at"].is_string());
    assert_eq!(alice["projects"], json!([{"project_id": PROJECT_ID, "project_name": PROJECT_NAME}]));
    assert_eq!(find(&list, "user_id", BOB_ID).unwrap()["projects"], json!([]));

    for ident in [ALICE_ID, ALICE] {
        let d = gw.get(&format!("/api/v1/users/{}", seg(ident))).ok(200).clone();
        assert_eq!(d["user_id"], json!(ALICE_ID));
        assert_eq!(d["email"], json!(ALICE));
    }
    gw.get("/api/v1/users/ghost@example.com").err(404, "NOT_FOUND");

    // Create.
    let d = gw.post("/api/v1/users", &json!({"email": "carol@example.com"})).ok(201).clone();
    let carol = d["user_id"].as_str().unwrap().to_string();
    assert!(is_uuid_v4(&carol));
    assert_eq!(d["email"], json!("carol@example.com"));
    assert_eq!(cfg_file(&gw)["users"][&carol]["email"], json!("carol@example.com"));
    assert_eq!(gw.get("/api/v1/users/carol@example.com").ok(200)["user_id"], json!(carol));

    // Create errors.
    let before = std::fs::read(&gw.config_path).unwrap();
    gw.post("/api/v1/users", &json!({"email": ALICE})).err(409, "CONFLICT");
    for bad in ["not-an-email", "", "a@", "@example.com", "two@@example.com", "sp ace@example.com"] {
        gw.post("/api/v1/users", &json!({"email": bad})).err(400, "VALIDATION_ERROR");
    }
    gw.post("/api/v1/users", &json!({})).err(400, "VALIDATION_ERROR");
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before);

    // Update.
    gw.put(&format!("/api/v1/users/{carol}"), &json!({"email": "carol2@example.com"})).ok(200);
    gw.get("/api/v1/users/carol@example.com").err(404, "NOT_FOUND");
    assert_eq!(gw.get("/api/v1/users/carol2@example.com").ok(200)["user_id"], json!(carol));
    gw.put("/api/v1/users/carol2@example.com", &json!({"email": BOB})).err(409, "CONFLICT");
    gw.put("/api/v1/users/carol2@example.com", &json!({"email": "nope"})).err(400, "VALIDATION_ERROR");
    gw.put("/api/v1/users/ghost@example.com", &json!({"email": "g2@example.com"})).err(404, "NOT_FOUND");

    // Delete alice: her key goes, and she is no longer a member of alpha.
    gw.delete(&format!("/api/v1/users/{ALICE}")).ok(200);
    gw.get(&format!("/api/v1/users/{ALICE_ID}")).err(404, "NOT_FOUND");
    gw.get(&format!("/api/v1/api-keys/{API_KEY}")).err(404, "NOT_FOUND");
    let file = cfg_file(&gw);
    assert!(file["users"].get(ALICE_ID).is_none());
    assert!(file["apikeys"].get(API_KEY).is_none(), "alice's key survived her deletion");
    assert_eq!(gw.get(&format!("/api/v1/projects/{PROJECT_ID}")).ok(200)["users"], json!([]));
    gw.delete(&format!("/api/v1/users/{ALICE_ID}")).err(404, "NOT_FOUND");
    assert_eq!(gw.get("/api/v1/users").ok(200).as_array().unwrap().len(), 2);
}

#[test]
fn api_key_create_list_get() {
    let (_dir, gw) = start_fixture();
    let keys_of_alice = format!("/api/v1/users/{ALICE}/api-keys");

    // Create by project name and by project id.
    let a = gw.post(&keys_of_alice, &json!({"project_name": PROJECT_NAME})).ok(201).clone();
    let b = gw.post(&format!("/api/v1/users/{ALICE_ID}/api-keys"), &json!({"project_id": PROJECT_ID})).ok(201).clone();
    let mut created = Vec::new();
    for d in [&a, &b] {
        let key = d["api_key"].as_str().unwrap().to_string();
        assert!(key.len() >= 43, "key too short: {key}");
        assert!(key.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'), "key is not URL-safe: {key}");
        assert_eq!(d["key_id"], json!(key_id(&key)));
        assert_eq!(d["project_id"], json!(PROJECT_ID));
        assert_eq!(d["user_id"], json!(ALICE_ID));
        created.push(key);
    }
    assert_ne!(created[0], created[1]);
    let file = cfg_file(&gw);
    for key in &created {
        let rec = &file["apikeys"][key];
        assert_eq!(rec["project_id"], json!(PROJECT_ID));
        assert_eq!(rec["user_id"], json!(ALICE_ID));
        assert_timestamp(&rec["created_at"]);
    }

    // Listings show key_id and a masked form, never the whole key.
    let all_keys: Vec<String> = created.iter().cloned().chain([API_KEY.to_string()]).collect();
    for path in ["/api/v1/api-keys".to_string(), keys_of_alice.clone()] {
        let r = gw.get(&path);
        for key in &all_keys {
            assert!(!r.text.contains(key.as_str()), "{path} shows a whole key: {}", r.text);
        }
        let list = r.ok(200).clone();
        assert_eq!(list.as_array().unwrap().len(), 3, "{path}: {}", r.text);
        for key in &all_keys {
            let rec = find(&list, "key_id", &key_id(key)).unwrap_or_else(|| panic!("{path} lacks {key}"));
            assert!(rec["masked"].is_string());
            assert_eq!(rec["project_id"], json!(PROJECT_ID));
            assert_eq!(rec["user_id"], json!(ALICE_ID));
            assert!(rec["created_at"].is_string());
            assert_eq!(rec["disabled"], json!(false));
        }
    }
    assert_eq!(gw.get(&format!("/api/v1/users/{BOB}/api-keys")).ok(200), &json!([]));

    // Get by whole key and by key_id.
    for ident in [API_KEY.to_string(), key_id(API_KEY)] {
        let r = gw.get(&format!("/api/v1/api-keys/{ident}"));
        assert!(!r.text.contains(API_KEY), "GET shows the whole key: {}", r.text);
        let d = r.ok(200);
        assert_eq!(d["key_id"], json!(key_id(API_KEY)));
        assert_eq!(d["project_id"], json!(PROJECT_ID));
        assert_eq!(d["user_id"], json!(ALICE_ID));
        assert_eq!(d["disabled"], json!(false));
    }
    gw.get("/api/v1/api-keys/not-a-key").err(404, "NOT_FOUND");
    gw.get("/api/v1/api-keys/0123456789ab").err(404, "NOT_FOUND");
    // No other answer shows a whole key either.
    for path in [
        format!("/api/v1/users/{ALICE_ID}"),
        "/api/v1/users".to_string(),
        format!("/api/v1/projects/{PROJECT_ID}"),
        format!("/api/v1/projects/{PROJECT_ID}/users"),
        "/api/v1/configs".to_string(),
        "/api/v1/system/health".to_string(),
    ] {
        let r = gw.get(&path);
        r.ok(200);
        for key in &all_keys {
            assert!(!r.text.contains(key.as_str()), "{path} shows a whole key: {}", r.text);
        }
    }

    // Errors: non-member, unknown project, unknown user, no project given.
    let before = std::fs::read(&gw.config_path).unwrap();
    gw.post(&format!("/api/v1/users/{BOB}/api-keys"), &json!({"project_name": PROJECT_NAME}))
        .err(400, "VALIDATION_ERROR");
    let r = gw.post(&keys_of_alice, &json!({"project_name": "nope"}));
    assert!(r.status == 400 || r.status == 404, "{}", r.text);
    gw.post("/api/v1/users/ghost@example.com/api-keys", &json!({"project_name": PROJECT_NAME})).err(404, "NOT_FOUND");
    gw.post(&keys_of_alice, &json!({})).err(400, "VALIDATION_ERROR");
    gw.get("/api/v1/users/ghost@example.com/api-keys").err(404, "NOT_FOUND");
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before);
}

#[test]
fn api_key_rotate_disable_enable_delete_take_effect_at_once() {
    let (_dir, gw) = start_fixture();
    let key =
        gw.post(&format!("/api/v1/users/{ALICE}/api-keys"), &json!({"project_name": PROJECT_NAME})).ok(201)["api_key"]
            .as_str()
            .unwrap()
            .to_string();
    gw.get(&format!("/api/v1/api-keys/{key}")).ok(200);

    // Rotate by key_id: a new key, the old one gone at once.
    let d = gw.post_empty(&format!("/api/v1/api-keys/{}/rotate", key_id(&key))).ok(200).clone();
    let new_key = d["api_key"].as_str().unwrap().to_string();
    assert_ne!(new_key, key);
    assert!(new_key.len() >= 43);
    assert_eq!(d["key_id"], json!(key_id(&new_key)));
    gw.get(&format!("/api/v1/api-keys/{key}")).err(404, "NOT_FOUND");
    gw.get(&format!("/api/v1/api-keys/{}", key_id(&key))).err(404, "NOT_FOUND");
    let rec = gw.get(&format!("/api/v1/api-keys/{new_key}")).ok(200).clone();
    assert_eq!(rec["project_id"], json!(PROJECT_ID));
    assert_eq!(rec["user_id"], json!(ALICE_ID));
    let file = cfg_file(&gw);
    assert!(file["apikeys"].get(&key).is_none());
    assert_eq!(file["apikeys"][&new_key]["user_id"], json!(ALICE_ID));
    gw.post_empty(&format!("/api/v1/api-keys/{key}/rotate")).err(404, "NOT_FOUND");

    // Disable (by whole key) and enable (by key_id).
    let d = gw.post_empty(&format!("/api/v1/api-keys/{new_key}/disable")).ok(200).clone();
    assert_eq!(d["disabled"], json!(true));
    assert_eq!(gw.get(&format!("/api/v1/api-keys/{new_key}")).ok(200)["disabled"], json!(true));
    assert_eq!(cfg_file(&gw)["apikeys"][&new_key]["disabled"], json!(true));
    let listed = gw.get("/api/v1/api-keys").ok(200).clone();
    assert_eq!(find(&listed, "key_id", &key_id(&new_key)).unwrap()["disabled"], json!(true));

    let d = gw.post_empty(&format!("/api/v1/api-keys/{}/enable", key_id(&new_key))).ok(200).clone();
    assert_eq!(d["disabled"], json!(false));
    assert_eq!(gw.get(&format!("/api/v1/api-keys/{new_key}")).ok(200)["disabled"], json!(false));
    assert_eq!(cfg_file(&gw)["apikeys"][&new_key]["disabled"], json!(false));
    gw.post_empty("/api/v1/api-keys/not-a-key/disable").err(404, "NOT_FOUND");
    gw.post_empty("/api/v1/api-keys/not-a-key/enable").err(404, "NOT_FOUND");

    // Delete.
    gw.delete(&format!("/api/v1/api-keys/{new_key}")).ok(200);
    gw.get(&format!("/api/v1/api-keys/{new_key}")).err(404, "NOT_FOUND");
    assert!(cfg_file(&gw)["apikeys"].get(&new_key).is_none());
    gw.delete(&format!("/api/v1/api-keys/{new_key}")).err(404, "NOT_FOUND");
    // Delete by key_id.
    gw.delete(&format!("/api/v1/api-keys/{}", key_id(API_KEY))).ok(200);
    gw.get(&format!("/api/v1/api-keys/{API_KEY}")).err(404, "NOT_FOUND");
    assert_eq!(gw.get("/api/v1/api-keys").ok(200), &json!([]));
    assert_eq!(cfg_file(&gw)["apikeys"], json!({}));
}

#[test]
fn key_state_answers_never_show_the_whole_key() {
    let (_dir, gw) = start_fixture();
    for action in ["disable", "enable"] {
        let r = gw.post_empty(&format!("/api/v1/api-keys/{API_KEY}/{action}"));
        r.ok(200);
        assert!(!r.text.contains(API_KEY), "{action} answer shows the whole key: {}", r.text);
    }
    let r = gw.delete(&format!("/api/v1/api-keys/{API_KEY}"));
    r.ok(200);
    assert!(!r.text.contains(API_KEY), "delete answer shows the whole key: {}", r.text);
}

#[test]
fn records_created_through_the_api_carry_ids_and_timestamps() {
    let (_dir, gw) = start_fixture();
    let c = gw.post("/api/v1/configs", &json!({"config_name": "c_new"})).ok(201)["mcp_config_id"]
        .as_str()
        .unwrap()
        .to_string();
    let p = gw.post("/api/v1/projects", &json!({"project_name": "p_new", "mcp_config_id": c})).ok(201)["project_id"]
        .as_str()
        .unwrap()
        .to_string();
    let u = gw.post("/api/v1/users", &json!({"email": "u_new@example.com"})).ok(201)["user_id"]
        .as_str()
        .unwrap()
        .to_string();
    let file = cfg_file(&gw);
    assert_timestamp(&file["mcp_configs"][&c]["created_at"]);
    assert_timestamp(&file["projects"][&p]["created_at"]);
    assert_timestamp(&file["users"][&u]["created_at"]);
    assert_eq!(file["projects"][&p]["mcp_config_id"], json!(c));
    for (path, id) in [
        (format!("/api/v1/configs/{c}"), "mcp_config_id"),
        (format!("/api/v1/projects/{p}"), "project_id"),
        (format!("/api/v1/users/{u}"), "user_id"),
    ] {
        let d = gw.get(&path).ok(200).clone();
        assert!(is_uuid_v4(d[id].as_str().unwrap()));
        assert_timestamp(&d["created_at"]);
    }
}

#[test]
fn deleting_a_project_with_keys_never_leaves_dangling_keys() {
    // The contract does not say whether such a delete cascades or is refused; either way the
    // file must stay valid.
    let (_dir, gw) = start_fixture();
    let before = std::fs::read(&gw.config_path).unwrap();
    let r = gw.delete(&format!("/api/v1/projects/{PROJECT_NAME}"));
    match r.status {
        409 => {
            r.err(409, "CONFLICT");
            assert_eq!(std::fs::read(&gw.config_path).unwrap(), before);
        }
        200 => {
            gw.get(&format!("/api/v1/api-keys/{API_KEY}")).err(404, "NOT_FOUND");
            assert!(cfg_file(&gw)["apikeys"].get(API_KEY).is_none(), "dangling key in the file");
        }
        other => panic!("unexpected status {other}: {}", r.text),
    }
    let (st, _, err) = run_cli(&["check-config", "--config", gw.config_path.to_str().unwrap()], &[]);
    assert!(st.success(), "the file is invalid after the delete: {err}");
    assert_eq!(gw.system_health()["config_valid"], json!(true));
}
