//! Signing in to the console with the OAuth issuer (contract 18, with section 10 configured), over plain HTTP against
//! the binary: a local authorization server (`common/oauth_as.rs`, issuing JWT access tokens signed by
//! `common/jwt_issuer.rs`'s key) stands in for Keycloak or Entra, and the test follows the redirects by hand, as a
//! browser would: the sign-in page -> `/ui/oauth/start` -> the authorization endpoint -> `/ui/oauth/callback` -> a
//! session. A holder of `console_admin_role` gets a session; a user of the gateway without it a session for their own
//! page only (`/ui/me`); anyone else 403 and no cookie; a replayed,
//! unknown or foreign state and a wrong `iss` are refused; the token shows up nowhere; `check-config` names a bad
//! console configuration.

mod common;
#[path = "common/http_mock.rs"]
mod http_mock;
#[path = "common/jwt_issuer.rs"]
mod jwt_issuer;
#[path = "common/oauth_as.rs"]
mod oauth_as;

use std::sync::{Arc, Mutex};

use common::{ALICE, BOB, BOB_ID, Gateway, fixture, run_cli, write_json};
use jwt_issuer::{AUDIENCE, JwtIssuer};
use oauth_as::{AsJwt, AsOptions, AuthServer};
use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};

const ROLE: &str = "mcpgw-admin";
const CLIENT_ID: &str = "mcpgw-console";
const CLIENT_SECRET: &str = "console-secret-0123456789";

struct Setup {
    _dir: tempfile::TempDir,
    gw: Gateway,
    server: AuthServer,
    /// The claims of the next token the authorization server issues (who "logs in" there).
    claims: Arc<Mutex<Value>>,
    http: Client,
}

fn console_auth(issuer: &str) -> Value {
    json!({"issuer": issuer, "audience": AUDIENCE, "claim_mappings": {"roles": "roles", "groups": "groups"},
           "console_admin_role": ROLE, "console_client_id": CLIENT_ID, "console_client_secret": CLIENT_SECRET})
}

fn setup() -> Setup {
    let issuer = Arc::new(JwtIssuer::start());
    let claims = Arc::new(Mutex::new(Value::Null));
    let signer = Arc::clone(&issuer);
    let jwt = AsJwt { sign: Arc::new(move |c| signer.sign(c)), jwks: issuer.jwks(), claims: Arc::clone(&claims) };
    let server = AuthServer::start(AsOptions {
        client_id: CLIENT_ID.into(),
        client_secret: Some(CLIENT_SECRET.into()),
        jwt: Some(jwt),
        ..AsOptions::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    let mut config = fixture();
    config["plugins"] = json!({"auth": {"provider": "oauth", "config": console_auth(&server.url)}});
    // A server that takes each user's own token: what a user sets on their own page.
    let echo = &mut config["mcp_configs"][common::CONFIG_ID]["mcp_config"][0];
    echo["credentials"] = json!({"mode": "per_user", "kind": "secret", "names": ["GITHUB_TOKEN"]});
    echo["config"]["env"]["GITHUB_TOKEN"] = json!("${user.GITHUB_TOKEN}");
    let audit = dir.path().join("audit.jsonl");
    config["common_mcp_gateway_config"]["audit_log"] =
        json!({"enabled": true, "path": audit.to_str().unwrap(), "hmac_key": "k".repeat(43)});
    write_json(&path, &config);
    let gw = Gateway::start(&path);
    let http = Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    Setup { _dir: dir, gw, server, claims, http }
}

impl Setup {
    /// The next sign-in at the authorization server is `email`'s, with these roles and groups.
    fn user(&self, email: &str, roles: &[&str], groups: &[&str]) {
        *self.claims.lock().unwrap() =
            json!({"aud": AUDIENCE, "sub": email, "email": email, "roles": roles, "groups": groups});
    }

    /// The sign-in page and the start of a sign-in with the issuer: the authorization URL and this browser's state
    /// cookie.
    fn start(&self) -> (String, String) {
        let page = self.http.get(format!("{}/ui/login", self.gw.admin)).send().unwrap();
        assert_eq!(page.status(), 200);
        let login_cookie = cookie(&page, "mcpgw_console_login").expect("the sign-in page's cookie");
        let policy = page.headers()["content-security-policy"].to_str().unwrap().to_string();
        assert!(policy.contains(&format!("form-action 'self' {}", self.server.url)), "{policy}");
        let html = page.text().unwrap();
        assert!(html.contains(&format!("Sign in with {}", self.server.url)), "{html}");
        assert!(html.contains(r#"action="/ui/oauth/start""#), "{html}");
        let csrf = html.split(r#"name="csrf" value=""#).nth(1).unwrap().split('"').next().unwrap().to_string();
        let started = self
            .http
            .post(format!("{}/ui/oauth/start", self.gw.admin))
            .header("cookie", format!("mcpgw_console_login={login_cookie}"))
            .form(&[("csrf", csrf.as_str())])
            .send()
            .unwrap();
        assert_eq!(started.status(), 303);
        let state_cookie = cookie(&started, "mcpgw_console_oauth").expect("the sign-in's state cookie");
        (location(&started), state_cookie)
    }

    /// The authorization server's answer to `authorize_url`: the callback URL it sends the browser to.
    fn authorize(&self, authorize_url: &str) -> String {
        let answer = self.http.get(authorize_url).send().unwrap();
        assert_eq!(answer.status(), 302, "{}", answer.text().unwrap_or_default());
        location(&answer)
    }

    fn callback(&self, callback_url: &str, state_cookie: &str) -> Response {
        self.http.get(callback_url).header("cookie", format!("mcpgw_console_oauth={state_cookie}")).send().unwrap()
    }

    /// A whole sign-in of the current user: the callback's answer.
    fn sign_in(&self) -> Response {
        let (authorize_url, state_cookie) = self.start();
        let callback_url = self.authorize(&authorize_url);
        self.callback(&callback_url, &state_cookie)
    }

    fn audit(&self) -> Vec<Value> {
        let answer = self.gw.get("/api/v1/audit?event=console_sign_in");
        answer.ok(200)["records"].as_array().cloned().unwrap_or_default()
    }
}

fn location(response: &Response) -> String {
    response.headers()["location"].to_str().unwrap().to_string()
}

/// The value a `Set-Cookie` of `response` gives cookie `name` (`None` when it sets none, or clears it).
fn cookie(response: &Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next()?.trim().strip_prefix(&format!("{name}=")).map(str::to_string))
        .find(|value| !value.is_empty())
}

fn query(url: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(url).unwrap().query_pairs().into_owned().collect()
}

fn param(url: &str, name: &str) -> String {
    query(url).into_iter().find(|(k, _)| k == name).map(|(_, v)| v).unwrap_or_default()
}

#[test]
fn an_admin_of_the_issuer_signs_in_and_others_do_not() {
    let s = setup();
    s.user(ALICE, &["viewer", ROLE], &[]);
    let (authorize_url, state_cookie) = s.start();
    assert!(authorize_url.starts_with(&format!("{}/authorize?", s.server.url)), "{authorize_url}");
    assert_eq!(param(&authorize_url, "response_type"), "code");
    assert_eq!(param(&authorize_url, "client_id"), CLIENT_ID);
    assert_eq!(param(&authorize_url, "redirect_uri"), format!("{}/ui/oauth/callback", s.gw.admin));
    assert_eq!(param(&authorize_url, "code_challenge_method"), "S256");
    assert_eq!(param(&authorize_url, "scope"), "openid");
    assert!(param(&authorize_url, "code_challenge").len() >= 43);
    let callback_url = s.authorize(&authorize_url);
    assert_eq!(param(&callback_url, "iss"), s.server.url, "the server sends RFC 9207's iss");
    let signed_in = s.callback(&callback_url, &state_cookie);
    assert_eq!(signed_in.status(), 200);
    let session = cookie(&signed_in, "mcpgw_console").expect("a session cookie");
    let set: Vec<String> =
        signed_in.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    let session_cookie = set.iter().find(|c| c.starts_with("mcpgw_console=")).unwrap();
    assert!(session_cookie.contains("HttpOnly") && session_cookie.contains("SameSite=Strict"), "{session_cookie}");
    assert!(signed_in.text().unwrap().contains(ALICE));
    let overview =
        s.http.get(format!("{}/ui/", s.gw.admin)).header("cookie", format!("mcpgw_console={session}")).send().unwrap();
    assert_eq!(overview.status(), 200);
    let html = overview.text().unwrap();
    assert!(html.contains("/ui/logout"), "signed in");
    // A write through the session is logged with the operator the issuer named.
    let csrf = html.split(r#"name="csrf" value=""#).nth(1).unwrap().split('"').next().unwrap().to_string();
    let created = s
        .http
        .post(format!("{}/ui/users", s.gw.admin))
        .header("cookie", format!("mcpgw_console={session}"))
        .form(&[("csrf", csrf.as_str()), ("email", "carol@example.com")])
        .send()
        .unwrap();
    assert!(created.status().is_success() || created.status().is_redirection(), "{}", created.status());
    let logged = common::wait_until(common::SHORT_DEADLINE, || {
        s.gw.logs().lines().any(|l| l.contains("admin write") && l.contains(&format!("\"operator\":\"{ALICE}\"")))
    });
    assert!(logged, "{}", s.gw.logs());
    // The token exchange used the verifier and the client's secret.
    let exchange = s.server.seen_on("/token").pop().unwrap();
    assert_eq!(exchange.form["client_secret"], CLIENT_SECRET);
    assert!(exchange.form["code_verifier"].len() >= 43);
    // Replayed: the state was used up.
    let replayed = s.callback(&callback_url, &state_cookie);
    assert_eq!(replayed.status(), 400);
    assert!(cookie(&replayed, "mcpgw_console").is_none());
    assert!(replayed.text().unwrap().contains("used already"));

    // A user of the gateway without the role (as a role, or as a group): a session for their own page only.
    s.user(BOB, &["viewer"], &["staff"]);
    let own = s.sign_in();
    assert_eq!(own.status(), 200);
    let own_session = format!("mcpgw_console={}", cookie(&own, "mcpgw_console").expect("a session of their own"));
    assert!(own.text().unwrap().contains("url=/ui/me"), "on to their own page");
    let visit = |path: &str| s.http.get(format!("{}{path}", s.gw.admin)).header("cookie", &own_session).send().unwrap();
    assert_eq!(visit("/ui/").headers()["location"], "/ui/me");
    let me = visit("/ui/me");
    assert_eq!(me.status(), 200);
    let me_page = me.text().unwrap();
    assert!(me_page.contains("Your upstream credentials") && !me_page.contains("/ui/keys"), "{me_page}");
    for admin_page in ["/ui/keys", "/ui/users", "/ui/audit", "/ui/playground", format!("/ui/users/{BOB_ID}").as_str()] {
        let refused = visit(admin_page);
        assert_eq!(refused.status(), 403, "{admin_page}");
        assert!(refused.text().unwrap().contains("not a console admin"));
    }
    let own_csrf = me_page.split(r#"name="csrf" value=""#).nth(1).unwrap().split('"').next().unwrap().to_string();
    let write = s
        .http
        .post(format!("{}/ui/users", s.gw.admin))
        .header("cookie", &own_session)
        .form(&[("csrf", own_csrf.as_str()), ("email", "mallory@example.com")])
        .send()
        .unwrap();
    assert_eq!(write.status(), 403, "no admin write from a user's own session");
    // Their own credential: set on their page, sealed, theirs only.
    let value = "ghp-bobs-own-token-0123456789abcdef";
    let set = s
        .http
        .post(format!("{}/ui/me/credentials/{}/echo/set", s.gw.admin, common::CONFIG_ID))
        .header("cookie", &own_session)
        .form(&[("csrf", own_csrf.as_str()), ("name", "GITHUB_TOKEN"), ("value", value)])
        .send()
        .unwrap();
    assert_eq!(set.status(), 303, "{}", set.text().unwrap());
    let theirs = s.gw.get(&format!("/api/v1/users/{BOB_ID}/credentials")).ok(200).clone();
    assert_eq!(theirs[0]["set"], json!(true), "{theirs}");
    let alices = s.gw.get(&format!("/api/v1/users/{}/credentials", common::ALICE_ID)).ok(200).clone();
    assert_eq!(alices[0]["set"], json!(false), "{alices}");
    let me_page = visit("/ui/me").text().unwrap();
    assert!(me_page.contains("<td>set</td>") && !me_page.contains(value), "{me_page}");
    // A user's changes are bounded (each rewrites the configuration and is audited): 10 a minute, then 429.
    let statuses: Vec<u16> = (0..10)
        .map(|_| {
            let path = format!("{}/ui/me/credentials/{}/echo/clear", s.gw.admin, common::CONFIG_ID);
            let form = [("csrf", own_csrf.as_str())];
            s.http.post(path).header("cookie", &own_session).form(&form).send().unwrap().status().as_u16()
        })
        .collect();
    assert_eq!(statuses.last(), Some(&429), "{statuses:?}");
    assert!(!statuses[..9].contains(&429), "the first ten changes of the minute pass: {statuses:?}");

    // Someone the issuer knows who is neither a console admin nor a user of the gateway: 403, no session.
    s.user("mallory@example.com", &["viewer"], &["staff"]);
    let refused = s.sign_in();
    assert_eq!(refused.status(), 403);
    assert!(cookie(&refused, "mcpgw_console").is_none(), "no session");
    let text = refused.text().unwrap();
    assert!(text.contains("not a console admin") && text.contains("nor a user of this gateway"), "{text}");
    // The role may come from the groups claim too (the same claims as `principal.groups`).
    s.user(BOB, &[], &[ROLE]);
    assert_eq!(s.sign_in().status(), 200);

    // Both outcomes audited; the token shown and logged nowhere.
    let records = s.audit();
    let outcomes: Vec<&str> = records.iter().filter_map(|r| r["outcome"].as_str()).collect();
    assert!(outcomes.contains(&"ok") && outcomes.contains(&"refused"), "{records:?}");
    assert!(records.iter().any(|r| r["error_code"] == "NOT_CONSOLE_ADMIN"), "{records:?}");
    let logs = s.gw.logs();
    for token in s.server.issued() {
        assert!(!logs.contains(&token) && !logs.contains(token.split('.').nth(1).unwrap()), "a token in the logs");
    }
    assert!(!logs.contains(CLIENT_SECRET));
    assert!(logs.contains("a console admin signed in with the OAuth issuer"), "{logs}");
}

#[test]
fn foreign_unknown_and_wrongly_issued_answers_are_refused() {
    let s = setup();
    s.user(ALICE, &[ROLE], &[]);
    // Another browser's state (the attacker's own sign-in, its callback opened in the victim's browser).
    let (authorize_url, _attacker_cookie) = s.start();
    let (_, victim_cookie) = s.start();
    let foreign = s.callback(&s.authorize(&authorize_url), &victim_cookie);
    assert_eq!(foreign.status(), 400);
    assert!(cookie(&foreign, "mcpgw_console").is_none());
    // A state the console never issued, and none at all.
    let callback = format!("{}/ui/oauth/callback", s.gw.admin);
    let made_up = s.callback(&format!("{callback}?code=x&state=made-up"), &victim_cookie);
    assert_eq!(made_up.status(), 400);
    assert_eq!(s.http.get(&callback).send().unwrap().status(), 400);
    // RFC 9207: an answer that says it comes from another issuer.
    let (authorize_url, state_cookie) = s.start();
    let genuine = s.authorize(&authorize_url);
    let tampered = genuine.replace(
        &format!("iss={}", oauth_as::percent_encode(&s.server.url)),
        &format!("iss={}", oauth_as::percent_encode(oauth_as::EVIL_ISSUER)),
    );
    assert_ne!(tampered, genuine);
    let wrong_iss = s.callback(&tampered, &state_cookie);
    assert_eq!(wrong_iss.status(), 403);
    assert!(cookie(&wrong_iss, "mcpgw_console").is_none());
    assert!(wrong_iss.text().unwrap().contains("RFC 9207"));
    // Starting a sign-in needs the sign-in page's CSRF token: no other site can start one.
    let forged = s.http.post(format!("{}/ui/oauth/start", s.gw.admin)).form(&[("csrf", "x")]).send().unwrap();
    assert_eq!(forged.status(), 403);
    // No token was exchanged for the refused answers.
    assert!(s.server.seen_on("/token").is_empty());
}

#[test]
fn check_config_names_a_bad_console_sign_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw_mcp_config.json");
    let check = |auth: Value| {
        let mut config = fixture();
        config["plugins"] = json!({"auth": {"provider": "oauth", "config": auth}});
        write_json(&path, &config);
        let (status, out, err) = run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
        (status.success(), format!("{out}{err}"))
    };
    let (ok, text) = check(console_auth("https://idp.example.com"));
    assert!(ok, "{text}");
    assert!(!text.contains(CLIENT_SECRET));
    let mut no_client = console_auth("https://idp.example.com");
    no_client.as_object_mut().unwrap().remove("console_client_id");
    let (ok, text) = check(no_client);
    assert!(!ok);
    assert!(text.contains("plugins.auth.config.console_admin_role: needs console_client_id"), "{text}");
    assert!(!text.contains(CLIENT_SECRET), "the secret is never printed");
    let mut no_mapping = console_auth("https://idp.example.com");
    no_mapping.as_object_mut().unwrap().remove("claim_mappings");
    let (ok, text) = check(no_mapping);
    assert!(!ok && text.contains("needs claim_mappings.roles or claim_mappings.groups"), "{text}");
}
