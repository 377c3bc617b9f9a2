//! Scale-out (contract section 12) from outside: several `mcpgw serve` processes of one configuration.
//!
//! Sessions: a session opened on one replica is served by another (its id is sealed with a key derived from
//! `session_secret`), stays bound to its key, and a configuration without `session_secret` keeps sessions with the
//! replica that opened them. The Redis store (`config_store: {"type": "redis"}`, a real `redis-server` started by the
//! test): the file seeds an empty store, writes on each replica reach the others within 2 s, concurrent writes on
//! several replicas lose nothing, a key disabled on one is refused on all, Redis going away keeps the replicas serving
//! (health degraded, writes 503 `CONFIG_STORE_UNAVAILABLE`) and coming back takes writes again, backup, restore
//! and reset work on the store, a user's credential set on one replica is listed on the other, sealed in the store,
//! and an OAuth connection started on one replica completes on another (contract 16). A configuration over 4 MiB is
//! stored and read in pieces of 512 KiB, and a stored length or piece that is not what it says is refused.
//!
//! `redis-server` must be installed (`.ci/run` installs it): without it the Redis tests fail and say so.

mod common;
#[path = "common/mcp.rs"]
mod mcp;
#[path = "common/oauth_as.rs"]
mod oauth_as;
#[path = "common/redis.rs"]
mod redis_server;

use std::time::Duration;

use common::{API_KEY, Gateway, write_json};
use mcp::*;
use redis_server::{RedisServer, free_port};
use serde_json::{Value, json};

const SECRET: &str = "scale-out-session-secret-0123456789abcdefgh";
const VERSION: &str = "2025-06-18";

fn session_headers(session: &str) -> [(&str, &str); 2] {
    [("mcp-session-id", session), ("mcp-protocol-version", VERSION)]
}

/// `gw_secure_call_tools` of the mock's `echo` in `session` on `url`: the echoed text, or the HTTP status and body.
fn echo_in(url: &str, key: &str, session: &str, text: &str) -> Result<String, String> {
    let body = tools_call_body(7, "gw_secure_call_tools", calls("mock", &[("echo", json!({"text": text}))]));
    let r = post(&http(), url, Some(key), &session_headers(session), &body);
    if r.status != 200 {
        return Err(format!("{} {}", r.status, r.text));
    }
    let answer = answer_of(&r.message["result"]);
    Ok(success_text(&answer["results"][0], "echo"))
}

/// Two replicas on one config file (as two pods mounting one Secret).
fn two_replicas(common: Value) -> (tempfile::TempDir, Gateway, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    write_json(&path, &config_with(vec![mock_server("mock")], common));
    let a = Gateway::start(&path);
    let b = Gateway::start(&path);
    (dir, a, b)
}

#[test]
fn a_session_opened_on_one_replica_is_served_by_another() {
    let (_dir, a, b) = two_replicas(json!({"session_secret": SECRET, "tool_exposure": "both"}));
    let (url_a, url_b) = (format!("{}/mcp/", a.gateway), format!("{}/mcp/", b.gateway));
    let session = open_session(&http(), &url_a, API_KEY, VERSION);
    assert!(session.starts_with("mcpgw1.") && session.len() > 40, "a sealed id: {session}");
    assert_eq!(echo_in(&url_a, API_KEY, &session, "on a").unwrap(), "on a");

    // The fast route on B, then rmcp's route on B (which replays the session's initialize), then the transparent
    // view's upstream tool on B.
    assert_eq!(echo_in(&url_b, API_KEY, &session, "on b").unwrap(), "on b");
    let list = post(
        &http(),
        &url_b,
        Some(API_KEY),
        &session_headers(&session),
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    );
    assert_eq!(list.status, 200, "{}", list.text);
    let names: Vec<&str> =
        list.message["result"]["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"gw_secure_call_tools") && names.contains(&"mock__echo"), "{names:?}");
    let direct = post(
        &http(),
        &url_b,
        Some(API_KEY),
        &session_headers(&session),
        &tools_call_body(4, "mock__echo", json!({"text": "direct"})),
    );
    assert_eq!(direct.status, 200, "{}", direct.text);
    assert_eq!(upstream_text(&direct.message["result"]), "direct");
    assert!(b.logs().contains("taken over"), "B says it took the session over:\n{}", b.logs());
    // And back on A, which still has it.
    assert_eq!(echo_in(&url_a, API_KEY, &session, "again a").unwrap(), "again a");

    // Bound to its key on every replica; a changed id is no id.
    for url in [&url_a, &url_b] {
        let foreign = echo_in(url, KEY_B, &session, "x").unwrap_err();
        assert!(foreign.starts_with("404") && foreign.contains("SESSION_NOT_FOUND"), "{foreign}");
    }
    let mut tampered = session.clone().into_bytes();
    let at = tampered.len() / 2;
    tampered[at] = if tampered[at] == b'x' { b'y' } else { b'x' };
    let tampered = String::from_utf8(tampered).unwrap();
    assert!(echo_in(&url_b, API_KEY, &tampered, "x").unwrap_err().starts_with("404"));

    // Closed on B: B no longer serves it.
    let closed = a.client.delete(&url_b).bearer_auth(API_KEY).header("mcp-session-id", &session).send().unwrap();
    assert!(closed.status().is_success(), "DELETE: {}", closed.status());
    assert!(echo_in(&url_b, API_KEY, &session, "x").unwrap_err().starts_with("404"));
}

#[test]
fn without_a_session_secret_sessions_stay_with_their_replica() {
    let (_dir, a, b) = two_replicas(json!({}));
    let (url_a, url_b) = (format!("{}/mcp/", a.gateway), format!("{}/mcp/", b.gateway));
    let session = open_session(&http(), &url_a, API_KEY, VERSION);
    assert_eq!(echo_in(&url_a, API_KEY, &session, "here").unwrap(), "here");
    let elsewhere = echo_in(&url_b, API_KEY, &session, "there").unwrap_err();
    assert!(elsewhere.starts_with("404"), "{elsewhere}");
}

#[test]
fn init_writes_a_session_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.json");
    let (status, _, err) = common::run_cli(&["init", "--config", path.to_str().unwrap()], &[]);
    assert!(status.success(), "{err}");
    let written = common::read_json(&path);
    let secret = written["common_mcp_gateway_config"]["session_secret"].as_str().unwrap_or_default();
    assert!(secret.len() >= 32, "{written}");
    assert_eq!(written["common_mcp_gateway_config"]["config_store"], json!({"type": "file"}));
}

// ---------------------------------------------------------------------------------------------------------------
// The Redis store
// ---------------------------------------------------------------------------------------------------------------

/// How long a change may take to reach every replica (contract 12: 2 s), with room for a loaded CI machine.
const PROPAGATION: Duration = Duration::from_secs(6);

/// `n` replicas of one seed file whose `config_store` is Redis at `port`.
fn redis_replicas(n: usize, port: u16, common: Value) -> (tempfile::TempDir, Vec<Gateway>) {
    redis_replicas_of(n, port, common, mock_server("mock"))
}

/// [`redis_replicas`] with `server` as the configuration's one server.
fn redis_replicas_of(n: usize, port: u16, common: Value, server: Value) -> (tempfile::TempDir, Vec<Gateway>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    let mut settings = json!({"config_store": {"type": "redis"}, "gw_cache_host": "127.0.0.1", "gw_cache_port": port});
    if let Value::Object(extra) = common {
        for (k, v) in extra {
            settings[k] = v;
        }
    }
    write_json(&path, &config_with(vec![server], settings));
    let replicas = (0..n).map(|_| Gateway::start(&path)).collect();
    (dir, replicas)
}

/// The configuration document in Redis.
fn stored_document(redis: &RedisServer) -> Value {
    let document: String =
        redis::cmd("HGET").arg("mcpgw:config:current").arg("document").query(&mut redis.connection().unwrap()).unwrap();
    serde_json::from_str(&document).unwrap()
}

fn user_emails(gw: &Gateway) -> Vec<String> {
    let r = gw.get("/api/v1/users");
    r.ok(200).as_array().unwrap().iter().filter_map(|u| u["email"].as_str().map(str::to_string)).collect()
}

fn has_user(gw: &Gateway, email: &str) -> bool {
    user_emails(gw).iter().any(|e| e == email)
}

#[test]
fn writes_on_any_replica_reach_every_replica_and_none_is_lost() {
    let redis = RedisServer::start(free_port(), None);
    let (dir, replicas) = redis_replicas(3, redis.port, json!({}));
    let seed = std::fs::read(dir.path().join("gw_mcp_config.json")).unwrap();
    for gw in &replicas {
        let health = gw.system_health();
        assert_eq!(health["config_store"]["type"], json!("redis"), "{health}");
        assert_eq!(health["config_store"]["reachable"], json!(true), "{health}");
        assert_eq!(health["config_store"]["version"], json!(1), "seeded once: {health}");
    }

    // A write on each replica reaches the two others.
    for (i, gw) in replicas.iter().enumerate() {
        let email = format!("first-{i}@example.com");
        gw.post("/api/v1/users", &json!({"email": email})).ok(201);
        for other in &replicas {
            assert!(common::wait_until(PROPAGATION, || has_user(other, &email)), "{email} not on every replica");
        }
    }

    // 30 writes at once, split across the replicas: all land.
    std::thread::scope(|scope| {
        for (i, gw) in replicas.iter().enumerate() {
            for j in 0..10 {
                scope.spawn(move || {
                    let email = format!("burst-{i}-{j}@example.com");
                    gw.post("/api/v1/users", &json!({"email": email})).ok(201);
                });
            }
        }
    });
    for gw in &replicas {
        let complete = common::wait_until(PROPAGATION, || {
            user_emails(gw).iter().filter(|e| e.starts_with("burst-")).count() == 30
        });
        assert!(complete, "a write was lost: {:?}", user_emails(gw));
        assert_eq!(gw.system_health()["config_store"]["version"], json!(1 + 3 + 30));
    }
    // The file was the seed only.
    assert_eq!(std::fs::read(dir.path().join("gw_mcp_config.json")).unwrap(), seed);
}

#[test]
fn a_key_disabled_on_one_replica_is_refused_on_all_and_sessions_move() {
    let redis = RedisServer::start(free_port(), None);
    // No session_secret in the file: the store's seed gets one, so sessions work on every replica.
    let (_dir, replicas) = redis_replicas(3, redis.port, json!({}));
    let urls: Vec<String> = replicas.iter().map(|gw| format!("{}/mcp/", gw.gateway)).collect();
    let session = open_session(&http(), &urls[0], KEY_B, VERSION);
    for url in &urls {
        assert_eq!(echo_in(url, KEY_B, &session, "moved").unwrap(), "moved");
    }

    replicas[1].post_empty(&format!("/api/v1/api-keys/{}/disable", common::seg(KEY_B))).ok(200);
    for url in &urls {
        let refused =
            common::wait_until(PROPAGATION, || echo_in(url, KEY_B, &session, "x").is_err_and(|e| e.starts_with("401")));
        assert!(refused, "the disabled key still works on {url}");
    }
    assert_eq!(echo_in(&urls[2], API_KEY, &open_session(&http(), &urls[2], API_KEY, VERSION), "ok").unwrap(), "ok");
}

#[test]
fn redis_going_away_keeps_serving_and_refuses_writes_until_it_is_back() {
    let port = free_port();
    let mut redis = RedisServer::start(port, None);
    let (_dir, replicas) = redis_replicas(2, port, json!({}));
    replicas[0].post("/api/v1/users", &json!({"email": "before@example.com"})).ok(201);
    assert!(common::wait_until(PROPAGATION, || has_user(&replicas[1], "before@example.com")));

    redis.stop();
    for gw in &replicas {
        let degraded = common::wait_until(PROPAGATION, || {
            let health = gw.system_health();
            health["status"] == json!("degraded")
                && health["degraded_reasons"].to_string().contains("configuration store")
        });
        assert!(degraded, "{}", gw.system_health());
        assert!(common::wait_until(PROPAGATION, || gw.metric("mcpgw_config_store_up") == 0.0));
        // Serving goes on from the last configuration.
        let url = format!("{}/mcp/", gw.gateway);
        assert_eq!(echo_in(&url, API_KEY, &open_session(&http(), &url, API_KEY, VERSION), "up").unwrap(), "up");
        let refused = gw.post("/api/v1/users", &json!({"email": "during@example.com"}));
        refused.err(503, "CONFIG_STORE_UNAVAILABLE");
        assert!(has_user(gw, "before@example.com") && !has_user(gw, "during@example.com"));
    }

    // Back (empty: this Redis keeps nothing on disk): re-seeded from the configuration serving, writes accepted.
    let _redis = RedisServer::start(port, None);
    for gw in &replicas {
        let healthy = common::wait_until(PROPAGATION, || {
            gw.system_health()["status"] == json!("healthy") && gw.metric("mcpgw_config_store_up") == 1.0
        });
        assert!(healthy, "{} up={}\n{}", gw.system_health(), gw.metric("mcpgw_config_store_up"), gw.logs());
    }
    replicas[1].post("/api/v1/users", &json!({"email": "after@example.com"})).ok(201);
    for gw in &replicas {
        assert!(common::wait_until(PROPAGATION, || has_user(gw, "after@example.com")));
        assert!(has_user(gw, "before@example.com"), "the re-seed kept the earlier write");
    }
}

#[test]
fn backup_restore_and_reset_work_on_the_store_and_the_file_cli_points_at_the_admin_api() {
    let redis = RedisServer::start(free_port(), None);
    let (dir, replicas) = redis_replicas(2, redis.port, json!({}));
    let (a, b) = (&replicas[0], &replicas[1]);
    let backup = dir.path().join("backups").join("scale-out.json");
    let backup = backup.to_str().unwrap();
    a.post("/api/v1/system/backup", &json!({"output_file": backup})).ok(200);
    b.post("/api/v1/users", &json!({"email": "later@example.com"})).ok(201);
    assert!(common::wait_until(PROPAGATION, || has_user(a, "later@example.com")));
    let stored = stored_document(&redis);
    let secret = stored["common_mcp_gateway_config"]["session_secret"].as_str().unwrap().to_string();
    assert!(
        !std::fs::read_to_string(backup).unwrap().contains(&secret),
        "the session secret is in clear in the backup"
    );
    a.post("/api/v1/system/restore", &json!({"input_file": backup})).ok(200);
    assert!(common::wait_until(PROPAGATION, || !has_user(b, "later@example.com")), "the restore reached B");
    assert_eq!(stored_document(&redis)["common_mcp_gateway_config"]["session_secret"], json!(secret));
    let url_b = format!("{}/mcp/", b.gateway);
    let session = open_session(&http(), &format!("{}/mcp/", a.gateway), API_KEY, VERSION);
    assert_eq!(echo_in(&url_b, API_KEY, &session, "restored").unwrap(), "restored");
    b.post("/api/v1/system/reset", &json!({"confirm": true})).ok(200);
    assert!(common::wait_until(PROPAGATION, || user_emails(a).len() == 1), "the reset reached A: {:?}", user_emails(a));
    let document = stored_document(&redis);
    let kept = &document["common_mcp_gateway_config"];
    assert_eq!(kept["config_store"], json!({"type": "redis"}), "a reset keeps the store: {kept}");
    assert_eq!(kept["gw_cache_port"], json!(redis.port));
    a.post("/api/v1/users", &json!({"email": "after-reset@example.com"})).ok(201);
    assert!(common::wait_until(PROPAGATION, || has_user(b, "after-reset@example.com")));

    // The management commands in file mode refuse (the file is not the configuration), and say what to do.
    let path = dir.path().join("gw_mcp_config.json");
    let (status, out, err) = common::run_cli(&["user", "list", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success(), "{out}");
    assert!(err.contains("Redis") && err.contains("--admin-url"), "{err}");
    let (status, out, err) = common::run_cli(
        &["user", "list", "--json", "--admin-url", &a.admin],
        &[("GW_ADMIN_APIKEY", common::ADMIN_KEY)],
    );
    assert!(status.success(), "{err}");
    assert!(out.contains('@'), "{out}");
}

#[test]
fn an_invalid_configuration_written_into_redis_is_not_used_and_a_restore_replaces_it() {
    let redis = RedisServer::start(free_port(), None);
    let (dir, replicas) = redis_replicas(2, redis.port, json!({}));
    let (a, b) = (&replicas[0], &replicas[1]);
    let backup = dir.path().join("backups").join("good.json");
    let backup = backup.to_str().unwrap();
    a.post("/api/v1/system/backup", &json!({"output_file": backup})).ok(200);

    // Something other than a gateway writes a document that does not validate.
    let mut con = redis.connection().unwrap();
    let version: u64 = redis::cmd("HGET").arg("mcpgw:config:current").arg("version").query(&mut con).unwrap();
    let _: () = redis::cmd("HSET")
        .arg("mcpgw:config:current")
        .arg("version")
        .arg(version + 1)
        .arg("document")
        .arg(r#"{"users": {"u": {"email": "not an e-mail"}}}"#)
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("PUBLISH").arg("mcpgw:config:changes").arg(version + 1).query(&mut con).unwrap();
    for gw in &replicas {
        let flagged = common::wait_until(PROPAGATION, || gw.system_health()["config_valid"] == json!(false));
        assert!(flagged, "{}", gw.system_health());
        // The last valid configuration keeps serving.
        let url = format!("{}/mcp/", gw.gateway);
        assert_eq!(echo_in(&url, API_KEY, &open_session(&http(), &url, API_KEY, VERSION), "still").unwrap(), "still");
    }
    let refused = b.post("/api/v1/users", &json!({"email": "x@example.com"}));
    assert!(refused.err(409, "CONFLICT").contains("Redis store"), "{}", refused.data());
    a.post("/api/v1/system/restore", &json!({"input_file": backup})).ok(200);
    for gw in &replicas {
        let healthy = common::wait_until(PROPAGATION, || gw.system_health()["config_valid"] == json!(true));
        assert!(healthy, "{}", gw.system_health());
    }
    b.post("/api/v1/users", &json!({"email": "x@example.com"})).ok(201);
}

#[test]
fn a_bad_store_or_session_secret_is_named_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.json");
    let common = json!({"config_store": {"type": "etcd"}, "session_secret": "too-short"});
    write_json(&path, &config_with(vec![mock_server("mock")], common));
    let (status, _, err) = common::run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success());
    assert!(err.contains("config_store.type") && err.contains("\"etcd\""), "{err}");
    assert!(err.contains("session_secret: must be at least 32 characters"), "{err}");
    assert!(!err.contains("too-short"), "the secret is not repeated: {err}");
    let before = std::fs::read(&path).unwrap();
    let (status, _, err) = common::run_cli(&["serve", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success() && err.contains("config_store.type"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before, "the file is left alone");
}

#[test]
fn a_credential_set_on_one_replica_is_listed_on_the_other_and_stored_sealed() {
    const MARKER: &str = "MARKER-redis-credential-41c2";
    let redis = RedisServer::start(free_port(), None);
    let mut server = mock_server("mock");
    server["credentials"] = json!({"mode": "per_user", "kind": "secret", "names": ["TOKEN"]});
    server["config"]["env"] = json!({"MOCK_TOKEN": "${user.TOKEN}"});
    let (dir, replicas) = redis_replicas_of(2, redis.port, json!({}), server);
    // No secrets_key in the file: the store's seed gets one, shared by every replica.
    let key = stored_document(&redis)["common_mcp_gateway_config"]["secrets_key"].as_str().unwrap_or_default().len();
    assert!(key >= 43, "the seed has a secrets_key");
    let slot = format!("/api/v1/users/{}/credentials/{}/mock", common::ALICE_ID, common::CONFIG_ID);
    replicas[0].put(&slot, &json!({"values": {"TOKEN": MARKER}})).ok(200);
    let listed = common::wait_until(PROPAGATION, || replicas[1].get(&slot).ok(200)["names"] == json!(["TOKEN"]));
    assert!(listed, "the credential did not reach the other replica");
    let stored = stored_document(&redis);
    let sealed = &stored["user_credentials"][common::ALICE_ID][common::CONFIG_ID]["mock"]["values"]["TOKEN"];
    assert!(sealed.as_str().unwrap().starts_with("enc:v1:"), "{sealed}");
    assert!(!stored.to_string().contains(MARKER));
    let seed = std::fs::read_to_string(dir.path().join("gw_mcp_config.json")).unwrap();
    assert!(!seed.contains(MARKER) && !seed.contains("user_credentials"), "the file was the seed only");
    for gw in &replicas {
        assert!(!gw.logs().contains(MARKER));
    }
}

#[test]
fn an_oauth_connection_started_on_one_replica_completes_on_another() {
    const PUBLIC: &str = "http://mcpgw.test";
    let redis = RedisServer::start(free_port(), None);
    let issuer = oauth_as::AuthServer::start(oauth_as::AsOptions::default());
    let mut server = mock_server("mock");
    server["config"]["env"] = json!({"MOCK_TOKEN": "${user.ACCESS_TOKEN}"});
    server["credentials"] = json!({"mode": "per_user", "kind": "oauth", "authorization_url": issuer.authorize_url(),
        "token_url": issuer.token_url(), "client_id": "gw-client", "client_secret": "gw-secret", "scopes": ["repo"]});
    let common = json!({"public_url": PUBLIC, "secrets_key": "scale-out-secrets-key-0123456789abcdefghijk",
                        "tool_exposure": "gateway"});
    let (_dir, replicas) = redis_replicas_of(2, redis.port, common, server);
    let token_call = |gw: &Gateway| {
        runtime().block_on(async {
            let client = connect(&format!("{}/mcp/", gw.gateway), API_KEY).await;
            let args = calls("mock", &[("env", json!({"name": "MOCK_TOKEN"}))]);
            let answer = call(&client, "gw_secure_call_tools", args).await;
            client.cancel().await.unwrap();
            answer["results"][0].clone()
        })
    };
    let asked = token_call(&replicas[0]);
    assert_error(&asked, "CREDENTIALS_REQUIRED");
    let url = asked["authorize_url"].as_str().unwrap().to_string();
    // The browser's requests reach the other replica (no affinity behind the proxy).
    let (status, body, _) = oauth_as::browse(&url, PUBLIC, &replicas[1].gateway);
    assert_eq!(status, 200, "{body}");
    let token = issuer.issued()[0].clone();
    let served = common::wait_until(PROPAGATION, || token_call(&replicas[0])["status"] == json!("success"));
    assert!(served, "the token stored by the other replica did not reach this one");
    assert_eq!(upstream_text(&token_call(&replicas[0])["response"]), token);
    let stored = stored_document(&redis);
    assert!(!stored.to_string().contains(&token), "the token is in the store in clear");
    let slot = &stored["user_credentials"][common::ALICE_ID][common::CONFIG_ID]["mock"];
    assert_eq!(slot["kind"], json!("oauth"), "{slot}");
}

#[test]
fn a_quota_of_n_a_minute_lets_exactly_n_through_across_two_replicas() {
    const N: usize = 5;
    let redis = RedisServer::start(free_port(), None);
    let quotas = json!({"tool_exposure": "transparent",
                        "quotas": [{"name": "five-a-minute", "per": "project", "rate": "5/minute"}]});
    let (_dir, replicas) = redis_replicas(2, redis.port, quotas);
    let client = http();
    let mut through = 0;
    let mut refused = 0;
    // Stateless calls, alternating between the replicas, more than the quota allows.
    for i in 0..(2 * N + 2) {
        let url = format!("{}/mcp/", replicas[i % 2].gateway);
        let body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                          "params": {"name": "mock__echo", "arguments": {"text": "x"}, "_meta": stateless_meta()}});
        let r = post(&client, &url, Some(API_KEY), &stateless_headers("tools/call", Some("mock__echo")), &body);
        match r.status {
            200 => through += 1,
            429 => {
                refused += 1;
                assert!(r.text.contains("QUOTA_EXCEEDED") && r.header("retry-after").is_some(), "{}", r.text);
            }
            other => panic!("{other} {}", r.text),
        }
    }
    assert_eq!((through, refused), (N, N + 2));
    let keys: Vec<String> = redis::cmd("KEYS").arg("mcpgw:quota:*").query(&mut redis.connection().unwrap()).unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
}

/// A configuration over 4 MiB is stored and read in pieces (issue 36: no 100 MB transfer in one command): the seed and
/// each write land under `mcpgw:config:document:{version}:{n}`, named by the hash, every replica follows them, the
/// replaced version's pieces are kept for the replicas still reading them and then expire, and no staging key is left
/// behind.
#[test]
fn a_large_configuration_is_stored_and_read_in_pieces() {
    let redis = RedisServer::start(free_port(), None);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    let settings =
        json!({"config_store": {"type": "redis"}, "gw_cache_host": "127.0.0.1", "gw_cache_port": redis.port});
    let mut config = config_with(vec![mock_server("mock")], settings);
    let padding = "p".repeat(180);
    for i in 0..25_000u64 {
        let id = format!("{i:08x}-0000-4000-8000-{i:012x}");
        config["users"][id] =
            json!({"email": format!("user{i}.{padding}@example.com"), "created_at": common::CREATED_AT});
    }
    write_json(&path, &config);
    let replicas: Vec<Gateway> = (0..2).map(|_| Gateway::start(&path)).collect();
    let mut con = redis.connection().unwrap();
    type Layout = (Option<String>, Option<String>, Option<u64>, Option<u64>);
    let layout = |con: &mut redis::Connection| -> Layout {
        redis::cmd("HMGET")
            .arg("mcpgw:config:current")
            .arg("document")
            .arg("document_key")
            .arg("document_length")
            .arg("document_pieces")
            .query(con)
            .unwrap()
    };
    // The whole document, from its pieces.
    let document = |con: &mut redis::Connection, prefix: &str, pieces: u64| -> Vec<u8> {
        (0..pieces)
            .flat_map(|n| redis::cmd("GET").arg(format!("{prefix}:{n}")).query::<Vec<u8>>(con).unwrap())
            .collect()
    };
    let (inline, key, length, pieces) = layout(&mut con);
    assert!(inline.is_none(), "a document over 4 MiB is not kept in the hash");
    assert_eq!(key.as_deref(), Some("mcpgw:config:document:1"));
    let pieces = pieces.unwrap();
    let stored = document(&mut con, "mcpgw:config:document:1", pieces);
    assert!(stored.len() > 4 << 20 && Some(stored.len() as u64) == length, "{} bytes against {length:?}", stored.len());
    assert_eq!(pieces as usize, stored.len().div_ceil(512 << 10), "pieces of 512 KiB");
    serde_json::from_slice::<Value>(&stored).expect("the pieces make the document");
    for gw in &replicas {
        let health = gw.system_health();
        assert_eq!(health["config_store"]["version"], json!(1), "{health}");
        assert_eq!(health["total_users"], json!(25_002), "{health}");
    }

    // A write on the second replica reaches the first; the first version's key is kept a while, then expires.
    replicas[1].post("/api/v1/users", &json!({"email": "pieces@example.com"})).ok(201);
    assert!(common::wait_until(PROPAGATION, || replicas[0].system_health()["config_store"]["version"] == json!(2)));
    let (_, key, _, pieces_now) = layout(&mut con);
    assert_eq!(key.as_deref(), Some("mcpgw:config:document:2"));
    let written = document(&mut con, "mcpgw:config:document:2", pieces_now.unwrap());
    assert!(written.windows(18).any(|w| w == b"pieces@example.com"));
    for n in 0..pieces {
        let ttl: i64 = redis::cmd("PTTL").arg(format!("mcpgw:config:document:1:{n}")).query(&mut con).unwrap();
        assert!(ttl > 0 && ttl <= 60_000, "the replaced version's piece {n} expires (PTTL {ttl})");
    }
    let current_ttl: i64 = redis::cmd("PTTL").arg("mcpgw:config:document:2:0").query(&mut con).unwrap();
    assert_eq!(current_ttl, -1, "the serving version's pieces do not expire");
    let staging: Vec<String> = redis::cmd("KEYS").arg("mcpgw:config:staging:*").query(&mut con).unwrap();
    assert!(staging.is_empty(), "{staging:?}");

    // A replica started now reads the pieces too.
    let late = Gateway::start(&path);
    let health = late.system_health();
    assert_eq!(health["config_store"]["version"], json!(2), "{health}");
    assert_eq!(health["total_users"], json!(25_003), "{health}");

    // Something else writes a version whose length is a lie: nothing is allocated for it, it is not used, and says so.
    let _: () = redis::cmd("HSET")
        .arg("mcpgw:config:current")
        .arg("version")
        .arg(3)
        .arg("document_length")
        .arg(1u64 << 50)
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("PUBLISH").arg("mcpgw:config:changes").arg(3).query(&mut con).unwrap();
    assert!(common::wait_until(PROPAGATION, || late.logs().contains("the stored document says it has")));
    // And one that names a piece that is not there: read again, then given up, and the last version keeps serving.
    let _: () = redis::cmd("HSET")
        .arg("mcpgw:config:current")
        .arg("version")
        .arg(4)
        .arg("document_length")
        .arg(written.len() + 10)
        .arg("document_pieces")
        .arg(pieces_now.unwrap() + 1)
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("PUBLISH").arg("mcpgw:config:changes").arg(4).query(&mut con).unwrap();
    assert!(common::wait_until(PROPAGATION, || late.logs().contains("the document changed under 3 reads in a row")));
    for gw in replicas.iter().chain([&late]) {
        let health = gw.system_health();
        assert_eq!(health["config_store"]["version"], json!(2), "{health}");
        assert_eq!(health["total_users"], json!(25_003), "{health}");
    }
}
