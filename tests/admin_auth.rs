//! Admin API authentication (spec 5.1 and 7) and the error shape of unknown routes and wrong
//! methods: a missing header, a header that is not `Bearer <key>`, a wrong key and a config
//! without `admin_apikey` each get exactly the spec's status, `error` and `detail`; `GET /health`
//! needs no credential; every other route needs one.

mod common;

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

/// One route of every family, with a body where the route takes one. None of these may act
/// without a valid admin key.
fn protected_routes() -> Vec<(Method, String, Option<Value>)> {
    let key = key_id(API_KEY);
    vec![
        (Method::GET, "/api/v1/system/health".into(), None),
        (Method::POST, "/api/v1/system/backup".into(), Some(json!({"output_file": "/tmp/mcpgw-auth-never.json"}))),
        (Method::POST, "/api/v1/system/restore".into(), Some(json!({"input_file": "/tmp/mcpgw-auth-never.json"}))),
        (Method::POST, "/api/v1/system/reset".into(), Some(json!({"confirm": true}))),
        (Method::GET, "/api/v1/configs".into(), None),
        (Method::POST, "/api/v1/configs".into(), Some(json!({"config_name": "nope"}))),
        (Method::GET, format!("/api/v1/configs/{CONFIG_ID}"), None),
        (Method::PUT, format!("/api/v1/configs/{CONFIG_ID}"), Some(json!({"config_name": "renamed"}))),
        (Method::DELETE, format!("/api/v1/configs/{SPARE_CONFIG_ID}"), None),
        (Method::POST, format!("/api/v1/configs/{CONFIG_ID}/copy"), Some(json!({"config_name": "copy"}))),
        (Method::GET, format!("/api/v1/configs/{CONFIG_ID}/servers"), None),
        (Method::GET, format!("/api/v1/configs/{CONFIG_ID}/servers/echo"), None),
        (Method::DELETE, format!("/api/v1/configs/{CONFIG_ID}/servers/echo"), None),
        (Method::GET, "/api/v1/projects".into(), None),
        (Method::POST, "/api/v1/projects".into(), Some(json!({"project_name": "nope"}))),
        (Method::GET, format!("/api/v1/projects/{PROJECT_ID}"), None),
        (Method::DELETE, format!("/api/v1/projects/{PROJECT_ID}"), None),
        (Method::GET, format!("/api/v1/projects/{PROJECT_ID}/users"), None),
        (Method::POST, format!("/api/v1/projects/{PROJECT_ID}/users"), Some(json!({"email": BOB}))),
        (Method::GET, "/api/v1/users".into(), None),
        (Method::POST, "/api/v1/users".into(), Some(json!({"email": "eve@example.com"}))),
        (Method::GET, format!("/api/v1/users/{ALICE_ID}"), None),
        (Method::DELETE, format!("/api/v1/users/{BOB_ID}"), None),
        (Method::GET, format!("/api/v1/users/{ALICE_ID}/api-keys"), None),
        (Method::POST, format!("/api/v1/users/{ALICE_ID}/api-keys"), Some(json!({"project_id": PROJECT_ID}))),
        (Method::GET, "/api/v1/api-keys".into(), None),
        (Method::GET, format!("/api/v1/api-keys/{key}"), None),
        (Method::POST, format!("/api/v1/api-keys/{key}/rotate"), None),
        (Method::POST, format!("/api/v1/api-keys/{key}/disable"), None),
        (Method::DELETE, format!("/api/v1/api-keys/{key}"), None),
    ]
}

#[test]
fn health_needs_no_credential_and_reports_version_and_path() {
    let (_dir, gw) = start_fixture();
    let r = gw.call_as(None, Method::GET, "/health", None);
    let data = r.ok(200);
    assert!(data["version"].as_str().is_some_and(|v| !v.is_empty()), "{}", r.text);
    assert_eq!(data["config_path"], json!(gw.config_path.to_str().unwrap()));

    // A wrong key does not matter on /health either.
    let r = gw.call_as(Some("Bearer wrong"), Method::GET, "/health", None);
    assert_eq!(r.status, 200, "{}", r.text);
}

#[test]
fn missing_header_is_401_header_required_on_every_route() {
    let (_dir, gw) = start_fixture();
    let before = std::fs::read(&gw.config_path).unwrap();
    for (method, path, body) in protected_routes() {
        let r = gw.call_as(None, method.clone(), &path, body.as_ref());
        let detail = r.err(401, "AUTH_INVALID_CREDENTIALS");
        assert_eq!(detail, "header required", "{method} {path}");
    }
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before, "an unauthenticated request changed the file");
    assert!(!std::path::Path::new("/tmp/mcpgw-auth-never.json").exists());
}

#[test]
fn header_not_bearer_is_401_invalid_authorization_format() {
    let (_dir, gw) = start_fixture();
    let bad_headers = [
        "Basic dXNlcjpwYXNzd29yZA==".to_string(),
        ADMIN_KEY.to_string(),
        format!("Token {ADMIN_KEY}"),
        format!("Bearer{ADMIN_KEY}"),
    ];
    for header in &bad_headers {
        for (method, path, body) in protected_routes().into_iter().take(6) {
            let r = gw.call_as(Some(header), method.clone(), &path, body.as_ref());
            let detail = r.err(401, "AUTH_INVALID_CREDENTIALS");
            assert_eq!(detail, "invalid authorization format", "header {header:?} on {method} {path}");
        }
    }
}

#[test]
fn wrong_key_is_401_invalid_admin_key() {
    let (_dir, gw) = start_fixture();
    let before = std::fs::read(&gw.config_path).unwrap();
    let wrong_keys = [
        "wrong-key".to_string(),
        format!("{ADMIN_KEY}x"),
        ADMIN_KEY[..ADMIN_KEY.len() - 1].to_string(),
        ADMIN_KEY.to_uppercase(),
        // A user's gateway key is no admin credential.
        API_KEY.to_string(),
    ];
    for key in &wrong_keys {
        for (method, path, body) in protected_routes() {
            let r = gw.call_as(Some(&format!("Bearer {key}")), method.clone(), &path, body.as_ref());
            let detail = r.err(401, "AUTH_INVALID_CREDENTIALS");
            assert!(detail.starts_with("invalid admin key"), "{method} {path}: detail {detail:?}");
        }
    }
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before, "a request with a wrong key changed the file");
}

#[test]
fn right_key_is_accepted() {
    let (_dir, gw) = start_fixture();
    for path in ["/api/v1/system/health", "/api/v1/configs", "/api/v1/projects", "/api/v1/users", "/api/v1/api-keys"] {
        let r = gw.get(path);
        r.ok(200);
    }
}

#[test]
fn missing_admin_key_in_config_is_500_but_the_server_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    let mut cfg = fixture();
    cfg.as_object_mut().unwrap().remove("admin_apikey");
    write_json(&path, &cfg);
    let gw = Gateway::start(&path);

    let r = gw.call_as(None, Method::GET, "/health", None);
    r.ok(200);

    for key in [ADMIN_KEY, "anything-at-all"] {
        for path in ["/api/v1/configs", "/api/v1/system/health", "/api/v1/users"] {
            let r = gw.call_as(Some(&format!("Bearer {key}")), Method::GET, path, None);
            let detail = r.err(500, "AUTH_INVALID_CREDENTIALS");
            assert_eq!(detail, "admin key not configured; regenerate configuration");
        }
    }
    let r = gw.call_as(
        Some(&format!("Bearer {ADMIN_KEY}")),
        Method::POST,
        "/api/v1/users",
        Some(&json!({"email": "eve@example.com"})),
    );
    r.err(500, "AUTH_INVALID_CREDENTIALS");
    assert!(read_json(&path)["users"].as_object().unwrap().len() == 2, "the user was created anyway");
}

#[test]
fn unknown_routes_are_404_in_the_error_shape() {
    let (_dir, gw) = start_fixture();
    for path in ["/api/v1/nope", "/nope", "/api/v2/configs", "/api/v1/configs/x/y/z/w"] {
        let r = gw.get(path);
        r.err(404, "NOT_FOUND");
    }
    let r = gw.post("/api/v1/nothing-here", &json!({}));
    r.err(404, "NOT_FOUND");
}

#[test]
fn wrong_method_is_405_in_the_error_shape() {
    let (_dir, gw) = start_fixture();
    let before = std::fs::read(&gw.config_path).unwrap();
    for (method, path) in [
        (Method::DELETE, "/api/v1/configs"),
        (Method::PUT, "/api/v1/users"),
        (Method::DELETE, "/api/v1/api-keys"),
        (Method::GET, "/api/v1/system/reset"),
        (Method::PATCH, "/api/v1/projects"),
    ] {
        let r = gw.call(method.clone(), path, None);
        r.err(405, "METHOD_NOT_ALLOWED");
    }
    assert_eq!(std::fs::read(&gw.config_path).unwrap(), before);
}
