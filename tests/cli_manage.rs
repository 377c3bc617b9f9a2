//! Management from the command line (issue 8): every command family of `mcpgw config|project|user|key|system`, in
//! file mode (`--config`, with a gateway serving the same file, so each change is checked through the admin REST API
//! and the gateway itself) and in HTTP mode (`--admin-url` with `GW_ADMIN_APIKEY`, checked through the file on disk).
//! A user created from the shell gets a key, created from the shell, that opens the gateway. Bad input (unknown ids,
//! taken names, a non-member key, a wrong admin key) exits non-zero with one clear line and the file byte-for-byte
//! unchanged; `--json` parses; listings never show a whole key without `--show-secret`; completions and help exist.

mod common;

use std::fs;
use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// The outcome of one `mcpgw` run.
struct Out {
    code: i32,
    out: String,
    err: String,
}

impl Out {
    #[track_caller]
    fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "command failed: stdout:\n{}\nstderr:\n{}", self.out, self.err);
        assert!(!self.err.contains("panicked"), "{}", self.err);
        &self.out
    }

    #[track_caller]
    fn json(&self) -> Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| panic!("--json output does not parse ({e}):\n{}", self.out))
    }
}

fn mcpgw(args: &[&str], envs: &[(&str, &str)]) -> Out {
    let (status, out, err) = run_cli(args, envs);
    Out { code: status.code().unwrap_or(-1), out, err }
}

/// `mcpgw ARGS --config PATH` (file mode).
fn on_file(path: &Path, args: &[&str]) -> Out {
    let mut all = args.to_vec();
    all.extend(["--config", path.to_str().unwrap()]);
    mcpgw(&all, &[])
}

/// `mcpgw ARGS --admin-url URL` with the admin key in `GW_ADMIN_APIKEY` (HTTP mode).
fn on_api(gw: &Gateway, args: &[&str]) -> Out {
    let mut all = args.to_vec();
    all.extend(["--admin-url", gw.admin.as_str()]);
    mcpgw(&all, &[("GW_ADMIN_APIKEY", ADMIN_KEY)])
}

/// The status of an MCP `initialize` with `key` on the gateway (200 when the key opens it, 401 when not).
fn mcp_status(gw: &Gateway, key: &str) -> u16 {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
        "capabilities": {}, "clientInfo": {"name": "cli-test", "version": "1"}}});
    let resp = gw
        .client
        .post(format!("{}/mcp/", gw.gateway))
        .header("accept", "application/json, text/event-stream")
        .bearer_auth(key)
        .json(&body)
        .send()
        .unwrap();
    resp.status().as_u16()
}

#[track_caller]
fn eventually(what: &str, cond: impl FnMut() -> bool) {
    assert!(wait_until(RELOAD_DEADLINE + Duration::from_secs(2), cond), "never happened: {what}");
}

/// Waits until the REST API answers `path` with 200 and returns its data.
fn rest(gw: &Gateway, path: &str) -> Value {
    let mut data = Value::Null;
    eventually(&format!("GET {path} answers 200"), || {
        let r = gw.get(path);
        data = r.data().clone();
        r.status == 200
    });
    data
}

#[test]
fn file_mode_commands_are_seen_by_the_running_gateway() {
    let (dir, path) = fixture_dir();
    let gw = Gateway::start(&path);
    let f = |args: &[&str]| on_file(&path, args);

    // config family
    f(&["config", "create", "staging"]).ok();
    let staging = rest(&gw, "/api/v1/configs/staging");
    f(&["config", "add-server", "staging", "--name", "echo2", "--command", "python3", "--arg", "echo.py"]).ok();
    f(&["config", "update-server", "staging", "echo2", "--env", &format!("TOKEN={ENV_SECRET}")]).ok();
    f(&["config", "update-server", "staging", "echo2", "--description", "Echo two"]).ok();
    let server = rest(&gw, "/api/v1/configs/staging/servers/echo2");
    assert_eq!(server["description"], json!("Echo two"));
    assert_ne!(server["config"]["env"]["TOKEN"], json!(ENV_SECRET), "env values are masked");
    let on_disk = read_json(&path);
    assert_eq!(
        on_disk["mcp_configs"][staging["mcp_config_id"].as_str().unwrap()]["mcp_config"][0]["config"]["env"]["TOKEN"],
        json!(ENV_SECRET),
        "an edit keeps the secret"
    );
    assert!(f(&["config", "servers", "staging"]).ok().contains("python3 echo.py"));
    assert_eq!(f(&["config", "get-server", "staging", "echo2", "--json"]).json()["server_name"], json!("echo2"));
    assert!(!f(&["config", "get", "staging"]).ok().contains(ENV_SECRET));
    f(&["config", "rename", "staging", "staging2"]).ok();
    f(&["config", "copy", "staging2", "staging3"]).ok();
    rest(&gw, "/api/v1/configs/staging3/servers/echo2");
    f(&["config", "remove-server", "staging3", "echo2"]).ok();
    f(&["config", "delete", "staging3"]).ok();
    eventually("staging3 is gone", || gw.get("/api/v1/configs/staging3").status == 404);
    let names: Vec<Value> = f(&["config", "list", "--json"])
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["mcp_config_name"].clone())
        .collect();
    assert_eq!(names, vec![json!(CONFIG_NAME), json!(SPARE_CONFIG_NAME), json!("staging2")]);
    assert!(f(&["config", "validate"]).ok().contains("valid"));

    // a user, a project, a membership and a key, all from the shell; the key opens the gateway
    let user = f(&["user", "create", "carol@example.com", "--json"]).json();
    let project = f(&["project", "create", "gamma", "--mcp-config", "staging2", "--json"]).json();
    assert_eq!(project["mcp_config_id"], staging["mcp_config_id"]);
    assert!(f(&["project", "add-user", "gamma", "carol@example.com"]).ok().contains("carol@example.com"));
    let created = f(&["key", "create", "--user", "carol@example.com", "--project", "gamma", "--json"]).json();
    let key = created["api_key"].as_str().unwrap().to_string();
    let kid = key_id(&key);
    assert_eq!(created["user_id"], user["user_id"]);
    let carol = rest(&gw, "/api/v1/users/carol@example.com");
    assert_eq!(carol["projects"][0]["project_name"], json!("gamma"));
    eventually("the new key opens the gateway", || mcp_status(&gw, &key) == 200);

    let listing = f(&["key", "list"]).ok().to_string();
    assert!(listing.contains(&kid) && !listing.contains(&key) && !listing.contains(API_KEY), "{listing}");
    assert!(f(&["key", "list", "--show-secret"]).ok().contains(&key));
    f(&["key", "disable", &kid]).ok();
    eventually("a disabled key is refused", || mcp_status(&gw, &key) == 401);
    assert_eq!(f(&["key", "enable", &kid, "--json"]).json()["disabled"], json!(false));
    eventually("an enabled key works again", || mcp_status(&gw, &key) == 200);
    let rotated = f(&["key", "rotate", &kid, "--json"]).json()["api_key"].as_str().unwrap().to_string();
    eventually("the rotated key works", || mcp_status(&gw, &rotated) == 200);
    assert_eq!(mcp_status(&gw, &key), 401, "the old key stops working");

    f(&["project", "rename", "gamma", "delta"]).ok();
    f(&["project", "set-config", "delta", CONFIG_NAME]).ok();
    f(&["project", "update", "delta", "--no-mcp-config"]).ok();
    eventually("delta uses no config", || {
        gw.get("/api/v1/projects/delta").data()["mcp_config_id"].is_null()
            && gw.get("/api/v1/projects/delta").status == 200
    });
    assert!(f(&["project", "members", "delta"]).ok().contains("carol@example.com"));
    f(&["user", "update", "carol@example.com", "caroline@example.com"]).ok();
    assert!(f(&["user", "keys", "caroline@example.com"]).ok().contains(&key_id(&rotated)));
    assert!(f(&["user", "get", "caroline@example.com"]).ok().contains("delta"));
    f(&["project", "remove-user", "delta", "caroline@example.com"]).ok();
    eventually("removing the member deletes the key", || mcp_status(&gw, &rotated) == 401);
    f(&["user", "delete", "caroline@example.com"]).ok();
    f(&["project", "delete", "delta"]).ok();
    eventually("delta is gone", || gw.get("/api/v1/projects/delta").status == 404);

    // system family
    assert_eq!(f(&["system", "health", "--json"]).json()["config_valid"], json!(true));
    let backup = dir.path().join("backups/backup.json");
    assert!(f(&["system", "backup", backup.to_str().unwrap()]).ok().contains("backup written"));
    assert!(!fs::read_to_string(&backup).unwrap().contains(API_KEY), "keys are encrypted in a backup");
    f(&["user", "delete", BOB]).ok();
    eventually("bob is deleted", || gw.get(&format!("/api/v1/users/{BOB}")).status == 404);
    f(&["system", "restore", backup.to_str().unwrap()]).ok();
    rest(&gw, &format!("/api/v1/users/{BOB}"));
    f(&["system", "reset", "--yes-really-reset"]).ok();
    eventually("reset leaves the default user only", || {
        let users = gw.get("/api/v1/users");
        users.status == 200
            && users.data().as_array().is_some_and(|u| u.len() == 1 && u[0]["email"] == json!("default@example.com"))
    });
}

#[test]
fn admin_url_commands_are_written_to_the_file() {
    let (dir, path) = fixture_dir();
    let gw = Gateway::start(&path);
    let a = |args: &[&str]| on_api(&gw, args);
    let file = || read_json(&path);

    let user = a(&["user", "create", "dave@example.com", "--json"]).json();
    let uid = user["user_id"].as_str().unwrap().to_string();
    assert_eq!(file()["users"][&uid]["email"], json!("dave@example.com"));
    a(&["project", "add-user", PROJECT_NAME, "dave@example.com"]).ok();
    assert!(file()["projects"][PROJECT_ID]["users"].as_array().unwrap().contains(&json!(uid)));
    let key = a(&["key", "create", "--user", &uid, "--project", PROJECT_ID, "--json"]).json()["api_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(file()["apikeys"][&key]["user_id"], json!(uid));
    assert_eq!(mcp_status(&gw, &key), 200, "an admin write is in effect at once");
    let kid = key_id(&key);

    let listed = a(&["key", "list", "--json"]).json();
    assert!(!listed.to_string().contains(&key) && !listed.to_string().contains(API_KEY));
    assert!(listed.as_array().unwrap().iter().any(|k| k["key_id"] == json!(kid)));
    let table = a(&["key", "list", "--show-secret"]);
    assert!(!table.ok().contains(&key), "the admin API never returns a whole key");
    assert_eq!(a(&["key", "get", &kid, "--json"]).json()["user_id"], json!(uid));
    a(&["key", "disable", &kid]).ok();
    assert_eq!(file()["apikeys"][&key]["disabled"], json!(true));
    assert_eq!(mcp_status(&gw, &key), 401);
    a(&["key", "enable", &kid]).ok();
    assert_eq!(mcp_status(&gw, &key), 200);
    let rotated = a(&["key", "rotate", &kid, "--json"]).json()["api_key"].as_str().unwrap().to_string();
    assert!(file()["apikeys"].get(&key).is_none() && file()["apikeys"].get(&rotated).is_some());
    assert_eq!((mcp_status(&gw, &key), mcp_status(&gw, &rotated)), (401, 200));
    a(&["key", "delete", &key_id(&rotated)]).ok();
    assert!(file()["apikeys"].get(&rotated).is_none());

    a(&["config", "create", "apicfg"]).ok();
    a(&[
        "config",
        "add-server",
        "apicfg",
        "--name",
        "tool",
        "--command",
        "node",
        "--env",
        &format!("TOKEN={ENV_SECRET}"),
    ])
    .ok();
    a(&["config", "update-server", "apicfg", "tool", "--arg", "server.js", "--name", "tool2"]).ok();
    let cfg_id = a(&["config", "get", "apicfg", "--json"]).json()["mcp_config_id"].as_str().unwrap().to_string();
    let entry = &file()["mcp_configs"][&cfg_id]["mcp_config"][0];
    assert_eq!(entry["server_name"], json!("tool2"));
    assert_eq!(entry["config"]["command"], json!("node"));
    assert_eq!(entry["config"]["args"], json!(["server.js"]));
    assert_eq!(entry["config"]["env"], json!({"TOKEN": ENV_SECRET}), "the masked secret was kept");
    assert!(a(&["config", "servers", "apicfg"]).ok().contains("node server.js"));
    assert!(!a(&["config", "get-server", "apicfg", "tool2"]).ok().contains(ENV_SECRET));
    a(&["config", "rename", "apicfg", "apicfg2"]).ok();
    a(&["config", "copy", "apicfg2", "apicfg3"]).ok();
    assert_eq!(file()["mcp_configs"][&cfg_id]["mcp_config_name"], json!("apicfg2"));
    a(&["config", "remove-server", "apicfg3", "tool2"]).ok();
    a(&["config", "delete", "apicfg3"]).ok();
    assert_eq!(file()["mcp_configs"].as_object().unwrap().len(), 3);

    let pid = a(&["project", "create", "pz", "--mcp-config", "apicfg2", "--json"]).json()["project_id"]
        .as_str()
        .unwrap()
        .to_string();
    a(&["project", "update", "pz", "--name", "pz2", "--mcp-config", SPARE_CONFIG_NAME]).ok();
    assert_eq!(file()["projects"][&pid]["project_name"], json!("pz2"));
    assert_eq!(file()["projects"][&pid]["mcp_config_id"], json!(SPARE_CONFIG_ID));
    a(&["project", "rename", "pz2", "pz3"]).ok();
    a(&["project", "set-config", "pz3", "apicfg2"]).ok();
    a(&["project", "add-user", "pz3", &uid]).ok();
    assert!(a(&["project", "members", "pz3"]).ok().contains("dave@example.com"));
    assert!(a(&["project", "list"]).ok().contains("pz3"));
    a(&["project", "remove-user", "pz3", "dave@example.com"]).ok();
    assert_eq!(file()["projects"][&pid]["users"], json!([]));
    a(&["project", "delete", "pz3"]).ok();
    assert!(file()["projects"].get(&pid).is_none());

    assert!(a(&["user", "list"]).ok().contains("dave@example.com"));
    a(&["user", "update", "dave@example.com", "david@example.com"]).ok();
    assert_eq!(a(&["user", "get", &uid, "--json"]).json()["email"], json!("david@example.com"));
    assert_eq!(a(&["user", "keys", &uid, "--json"]).json(), json!([]));
    a(&["user", "delete", "david@example.com"]).ok();
    assert!(file()["users"].get(&uid).is_none());

    assert_eq!(a(&["system", "health", "--json"]).json()["status"], json!("healthy"));
    assert!(a(&["config", "validate"]).ok().contains("valid"));
    // A file in the backup directory (`backups` beside the config file), by its absolute path: the server's.
    let saved = dir.path().join("backups/api-backup.json");
    let saved = saved.to_str().unwrap();
    a(&["system", "backup", saved]).ok();
    assert!(dir.path().join("backups/api-backup.json").is_file());
    a(&["user", "delete", BOB]).ok();
    a(&["system", "restore", saved]).ok();
    assert_eq!(file()["users"][BOB_ID]["email"], json!(BOB));
    assert_eq!(mcp_status(&gw, API_KEY), 200, "a restore brings the keys back");
    a(&["system", "reset", "--yes-really-reset"]).ok();
    let reset = file();
    assert_eq!(reset["admin_apikey"], json!(ADMIN_KEY), "reset keeps the admin key");
    assert_eq!(reset["users"].as_object().unwrap().len(), 1);
}

#[test]
fn command_line_and_admin_api_writers_never_lose_an_update() {
    let (_dir, path) = fixture_dir();
    let gw = Gateway::start(&path);
    let admin = gw.admin.clone();
    let mut handles = Vec::new();
    for i in 0..8 {
        let path = path.clone();
        handles
            .push(std::thread::spawn(move || on_file(&path, &["user", "create", &format!("cli{i}@example.com")]).code));
        let url = format!("{admin}/api/v1/users");
        handles.push(std::thread::spawn(move || {
            let body = json!({"email": format!("api{i}@example.com")});
            let r = send(&client(), reqwest::Method::POST, &url, Some(&format!("Bearer {ADMIN_KEY}")), Some(&body));
            if r.status == 201 { 0 } else { i32::from(r.status) }
        }));
    }
    for handle in handles {
        assert_eq!(handle.join().unwrap(), 0);
    }
    let users = read_json(&path)["users"].as_object().unwrap().len();
    assert_eq!(users, 2 + 16, "every write landed in the file");
    eventually("the gateway sees all 18 users", || {
        gw.get("/api/v1/users").data().as_array().is_some_and(|u| u.len() == 18)
    });
}

/// (arguments, exit code, words the error line must contain)
const BAD: &[(&[&str], i32, &str)] = &[
    (&["user", "get", "nobody@example.com"], 4, "not found"),
    (&["config", "get", "no-such-config"], 4, "not found"),
    (&["key", "rotate", "000000000000"], 4, "not found"),
    (&["project", "remove-user", PROJECT_NAME, BOB], 4, "not a member"),
    (&["config", "create", CONFIG_NAME], 5, "already exists"),
    (&["user", "create", ALICE], 5, "already exists"),
    (&["project", "create", PROJECT_NAME], 5, "already exists"),
    (&["project", "add-user", PROJECT_NAME, ALICE], 5, "already a member"),
    (&["config", "delete", CONFIG_NAME], 5, "used by"),
    (&["key", "create", "--user", BOB, "--project", PROJECT_NAME], 3, "not a member"),
    (&["user", "create", "not-an-email"], 3, "email"),
    (&["config", "add-server", CONFIG_NAME, "--name", "bad name!", "--command", "x"], 3, "server_name"),
    (&["project", "create", "p9", "--mcp-config", "missing-config"], 3, "does not exist"),
    (&["system", "reset"], 2, "--yes-really-reset"),
];

#[track_caller]
fn assert_clean_failure(out: &Out, code: i32, words: &str, what: &str) {
    assert_eq!(out.code, code, "{what}: exit code; stderr:\n{}", out.err);
    let lines = lines(&out.err);
    assert_eq!(lines.len(), 1, "{what}: one error line expected:\n{}", out.err);
    assert!(lines[0].starts_with("mcpgw: error: ") && lines[0].contains(words), "{what}: {}", lines[0]);
    assert!(out.out.is_empty(), "{what}: nothing on stdout on failure: {}", out.out);
}

#[test]
fn bad_input_fails_with_one_line_and_leaves_the_file_unchanged() {
    let (_dir, path) = fixture_dir();
    let gw = Gateway::start(&path);
    let before = fs::read(&path).unwrap();
    for (args, code, words) in BAD {
        let what = format!("file mode {args:?}");
        assert_clean_failure(&on_file(&path, args), *code, words, &what);
        assert_eq!(fs::read(&path).unwrap(), before, "{what} changed the file");
        let what = format!("admin API {args:?}");
        assert_clean_failure(&on_api(&gw, args), *code, words, &what);
        assert_eq!(fs::read(&path).unwrap(), before, "{what} changed the file");
    }
    let admin = gw.admin.as_str();
    let wrong = mcpgw(&["user", "create", "x@example.com", "--admin-url", admin], &[("GW_ADMIN_APIKEY", "wrong")]);
    assert_clean_failure(&wrong, 7, "refused the admin key", "wrong admin key");
    let missing = mcpgw(&["user", "list", "--admin-url", admin], &[]);
    assert_clean_failure(&missing, 7, "GW_ADMIN_APIKEY", "no admin key");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down =
        mcpgw(&["user", "list", "--admin-url", &format!("http://127.0.0.1:{port}")], &[("GW_ADMIN_APIKEY", ADMIN_KEY)]);
    assert_clean_failure(&down, 6, "cannot reach the admin API", "unreachable admin API");
    let absent = mcpgw(&["user", "list", "--config", "/nonexistent/gw.json"], &[]);
    assert_clean_failure(&absent, 1, "/nonexistent/gw.json", "missing config file");
    assert_eq!(fs::read(&path).unwrap(), before);
}

#[test]
fn validate_lists_every_problem_of_an_invalid_file() {
    let (_dir, path) = fixture_dir();
    let mut bad = fixture();
    bad["apikeys"]["orphan-key-0123456789abcdefghijklmnopqrstuvwxyz"] =
        json!({"project_id": "nope", "user_id": "nope"});
    bad["projects"][PROJECT_ID]["mcp_config_id"] = json!("missing");
    write_json(&path, &bad);
    let out = on_file(&path, &["config", "validate"]);
    assert_eq!(out.code, 3, "{}", out.err);
    assert!(lines(&out.err).len() >= 3, "every problem is listed:\n{}", out.err);
    let listing = on_file(&path, &["user", "list"]);
    assert_eq!(listing.code, 1);
    assert!(listing.err.contains("is invalid"), "{}", listing.err);
}

#[test]
fn tables_are_aligned_and_json_is_the_rest_data() {
    let (_dir, path) = fixture_dir();
    let table = on_file(&path, &["user", "list"]).ok().to_string();
    let rows = lines(&table);
    assert!(rows[0].starts_with("ID") && rows[0].contains("EMAIL") && rows[0].contains("PROJECTS"), "{table}");
    let email_column = rows[0].find("EMAIL").unwrap();
    assert!(rows[1..].iter().all(|r| r[email_column..].contains("@example.com")), "{table}");
    let users = on_file(&path, &["user", "list", "--json"]).json();
    let alice = find(&users, "email", ALICE).unwrap();
    assert_eq!(alice["projects"], json!([{"project_id": PROJECT_ID, "project_name": PROJECT_NAME}]));
    let keys = on_file(&path, &["key", "list", "--json"]).json();
    assert_eq!(keys[0]["key_id"], json!(key_id(API_KEY)));
    assert!(!keys.to_string().contains(API_KEY));
    let shown = on_file(&path, &["key", "list", "--json", "--show-secret"]).json();
    assert_eq!(shown[0]["api_key"], json!(API_KEY));
}

#[test]
fn completions_and_help_for_every_command() {
    for shell in ["bash", "zsh", "fish"] {
        let out = mcpgw(&["completions", shell], &[]);
        assert!(out.ok().len() > 500 && out.out.contains("client-config"), "{shell} completions");
    }
    let families: &[(&str, &[&str])] = &[
        (
            "config",
            &[
                "list",
                "create",
                "get",
                "rename",
                "copy",
                "delete",
                "servers",
                "get-server",
                "add-server",
                "update-server",
                "remove-server",
                "validate",
            ],
        ),
        (
            "project",
            &[
                "list",
                "create",
                "get",
                "update",
                "rename",
                "set-config",
                "delete",
                "members",
                "add-user",
                "remove-user",
            ],
        ),
        (
            "user",
            &[
                "list",
                "create",
                "get",
                "update",
                "delete",
                "keys",
                "credentials",
                "set-credential",
                "delete-credential",
            ],
        ),
        ("secrets", &["rotate-key"]),
        ("key", &["create", "list", "get", "rotate", "disable", "enable", "delete"]),
        ("system", &["health", "backup", "restore", "reset"]),
    ];
    for (family, actions) in families {
        assert!(mcpgw(&[family, "--help"], &[]).ok().contains("Example:"), "{family} --help");
        for action in *actions {
            let help = mcpgw(&[family, action, "--help"], &[]);
            assert!(help.ok().contains("Example: mcpgw"), "{family} {action} --help has no example:\n{}", help.out);
        }
    }
    for top in ["client-config", "completions", "init", "serve", "check-config"] {
        assert!(mcpgw(&[top, "--help"], &[]).ok().contains("Example:"), "{top} --help");
    }
    assert!(mcpgw(&["--help"], &[]).ok().contains("Exit codes"));
}
