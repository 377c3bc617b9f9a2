//! Authorization policies (contract 17), from outside: rules in CEL on the caller's claims (groups from
//! `claim_mappings`, from the local issuer of the OAuth tests), on tool annotations, on arguments and on time; the
//! same decision for a listing and a call, in the gateway view and the transparent view, for tools, prompts and
//! resources; `POLICY_DENIED` naming the rule; the deciding rule in the audit log; a rule that does not compile
//! refused by `check-config`, named.

mod common;
#[path = "common/http_mock.rs"]
mod http_mock;
#[path = "common/jwt_issuer.rs"]
mod jwt_issuer;
#[path = "common/mcp.rs"]
mod mcp;

use common::{ALICE, API_KEY, BOB, PROJECT_NAME};
use jwt_issuer::{AUDIENCE, JwtIssuer};
use mcp::*;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

/// The mock upstream with two more tools: `delete_repo` (destructive) and `search` (read-only).
fn github(dir: &std::path::Path) -> Value {
    let tools = json!([
        {"name": "delete_repo", "description": "Deletes a repository", "inputSchema": {"type": "object"},
         "annotations": {"destructiveHint": true}},
        {"name": "search", "description": "Searches", "inputSchema": {"type": "object"},
         "annotations": {"readOnlyHint": true}}
    ]);
    let path = dir.join("tools.json");
    common::write_json(&path, &tools);
    json!({"server_name": "gh", "config": {"command": mock_bin(), "args": ["--tools-file", path.to_str().unwrap()]}})
}

fn rules() -> Value {
    json!([
        {"name": "oncall-may-delete", "effect": "allow",
         "when": "target.annotations.destructiveHint && 'oncall' in principal.groups"},
        {"name": "no-destructive", "effect": "deny", "when": "target.server == 'gh' && target.annotations.destructiveHint",
         "message": "destructive tools are for the on-call group"},
        {"name": "no-forbidden-echo", "effect": "deny", "when": "request.args.text == 'forbidden'"},
        {"name": "no-prompts-for-bob", "effect": "deny",
         "when": "target.kind == 'prompt' && principal.email == 'bob@example.com'"}
    ])
}

/// A call through rmcp's client: the result as JSON (an `isError` result for a gateway refusal).
async fn call_tool(client: &McpClient, name: &str, args: Value) -> Value {
    let params = CallToolRequestParams::new(name.to_string()).with_arguments(args.as_object().unwrap().clone());
    serde_json::to_value(client.call_tool(params).await.expect("tools/call")).unwrap()
}

#[test]
fn rules_on_claims_annotations_and_arguments_decide_listing_and_call_alike_in_both_views() {
    let issuer = JwtIssuer::start();
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let conformance =
        json!({"server_name": "conf", "config": {"command": env!("CARGO_BIN_EXE_mcpgw-conformance-upstream")}});
    let common = json!({"tool_exposure": "both", "policies": rules(),
                        "audit_log": {"enabled": true, "path": audit.to_str().unwrap()}});
    let mut config = config_with(vec![github(dir.path()), mock_server("m"), conformance], common);
    config["plugins"]["auth"] = json!({"provider": "oauth", "config": {"issuer": issuer.issuer, "audience": AUDIENCE,
        "required_scopes": ["mcp"], "claim_mappings": {"groups": "groups"}}});
    let gw = TestGateway::start(&config);
    let token = |user: &str, groups: Value| {
        let mut claims = issuer.claims(user, PROJECT_NAME);
        claims["groups"] = groups;
        issuer.sign(&claims)
    };
    let (alice, bob) = (token(ALICE, json!(["oncall", "dev"])), token(BOB, json!(["dev"])));
    runtime().block_on(async {
        // Alice is on call: the destructive tool is listed and runs.
        let client = connect(&gw.mcp, &alice).await;
        let names = tool_names(&client).await;
        assert!(names.contains(&"gh__delete_repo".to_string()), "{names:?}");
        let called = call_tool(&client, "gh__delete_repo", json!({})).await;
        assert_eq!(upstream_text(&called), "called delete_repo", "{called}");
        client.cancel().await.unwrap();

        // Bob is not: it is left out of every listing, and a call of it is denied, naming the rule.
        let client = connect(&gw.mcp, &bob).await;
        let names = tool_names(&client).await;
        assert!(!names.contains(&"gh__delete_repo".to_string()) && names.contains(&"gh__search".to_string()));
        let denied = answer_of(&call_tool(&client, "gh__delete_repo", json!({})).await);
        let message = assert_error(&denied, "POLICY_DENIED");
        assert_eq!(
            (message.as_str(), &denied["rule"]),
            ("destructive tools are for the on-call group", &json!("no-destructive"))
        );
        let discovered = call(&client, "gw_discover_all_tools", json!({"server_name": "gh"})).await;
        let listed: Vec<&str> =
            discovered["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
        assert!(!listed.contains(&"delete_repo") && listed.contains(&"search"), "{discovered}");
        let gateway = call(&client, "gw_secure_call_tools", calls("gh", &[("delete_repo", json!({}))])).await;
        assert_error(&gateway["results"][0], "POLICY_DENIED");
        assert_eq!(gateway["results"][0]["rule"], json!("no-destructive"));

        // A rule on the arguments: the tool is listed (a call can escape the rule), that call is denied.
        assert!(names.contains(&"m__echo".to_string()), "{names:?}");
        let fine = call_tool(&client, "m__echo", json!({"text": "fine"})).await;
        assert_eq!(upstream_text(&fine), "fine");
        let forbidden = answer_of(&call_tool(&client, "m__echo", json!({"text": "forbidden"})).await);
        assert_error(&forbidden, "POLICY_DENIED");
        assert_eq!(forbidden["rule"], json!("no-forbidden-echo"));

        // Prompts: Bob's listing leaves them out and a get is refused; Alice's has them.
        let prompts = serde_json::to_value(client.list_all_prompts().await.unwrap()).unwrap();
        assert_eq!(prompts, json!([]), "{prompts}");
        let refused = client.get_prompt(rmcp::model::GetPromptRequestParams::new("conf__test_simple_prompt")).await;
        assert!(refused.is_err(), "{refused:?}");
        client.cancel().await.unwrap();
        let client = connect(&gw.mcp, &alice).await;
        let prompts = serde_json::to_value(client.list_all_prompts().await.unwrap()).unwrap();
        assert!(prompts.to_string().contains("conf__test_simple_prompt"), "{prompts}");
        client.cancel().await.unwrap();
    });
    let records: Vec<Value> =
        std::fs::read_to_string(&audit).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let decided = |rule: &str| records.iter().any(|r| r["policy_rule"] == json!(rule));
    assert!(decided("oncall-may-delete") && decided("no-destructive") && decided("no-forbidden-echo"), "{records:?}");
}

#[test]
fn a_default_of_deny_with_a_rule_on_time_and_api_keys() {
    let common = json!({"tool_exposure": "transparent", "policy_default": "deny", "policies": [
        {"name": "echo-since-2020", "effect": "allow",
         "when": "target.name == 'echo' && principal.auth == 'apikey' && now > timestamp('2020-01-01T00:00:00Z')"}]});
    let gw = TestGateway::start(&config_with(vec![mock_server("m")], common));
    runtime().block_on(async {
        let client = connect(&gw.mcp, API_KEY).await;
        assert_eq!(tool_names(&client).await, ["m__echo"]);
        let denied = answer_of(&call_tool(&client, "m__env", json!({"name": "HOME"})).await);
        let message = assert_error(&denied, "POLICY_DENIED");
        assert!(message.contains("policy_default"), "{message}");
        assert_eq!(denied["rule"], json!(null));
        client.cancel().await.unwrap();
    });
}

#[test]
fn a_rule_that_does_not_compile_is_named_by_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let mut config = config_with(vec![mock_server("m")], json!({}));
    config["projects"][common::PROJECT_ID]["policies"] = json!([
        {"name": "broken", "effect": "deny", "when": "target.name =="},
        {"name": "unknown", "effect": "deny", "when": "user.id == 'x'"},
        {"name": "odd", "effect": "maybe", "when": "true"}]);
    common::write_json(&path, &config);
    let (status, _, err) = common::run_cli(&["check-config", "--config", path.to_str().unwrap()], &[]);
    assert!(!status.success(), "check-config accepted it");
    for expected in [
        "(\"broken\").when: does not compile",
        "(\"unknown\").when: names the unknown variable \"user\"",
        "(\"odd\").effect: must be \"allow\" or \"deny\"",
    ] {
        assert!(err.contains(expected), "{expected} not in {err}");
    }
}

#[test]
fn rules_on_roles_and_scopes_decide_resources_and_templates_alike_when_listed_and_read() {
    let issuer = JwtIssuer::start();
    let conformance =
        json!({"server_name": "conf", "config": {"command": env!("CARGO_BIN_EXE_mcpgw-conformance-upstream")}});
    let common = json!({"tool_exposure": "transparent", "policies": [
        {"name": "templates-for-readers", "effect": "deny",
         "when": "target.kind == 'template' && !('reader' in principal.roles)"},
        {"name": "binary-needs-scope", "effect": "deny",
         "when": "target.kind == 'resource' && target.name == 'test://static-binary' && !('files:read' in principal.scopes)"}]});
    let mut config = config_with(vec![conformance], common);
    config["plugins"]["auth"] = json!({"provider": "oauth", "config": {"issuer": issuer.issuer, "audience": AUDIENCE,
        "required_scopes": ["mcp"], "claim_mappings": {"roles": "realm_roles"}}});
    let gw = TestGateway::start(&config);
    let token = |user: &str, roles: Value, scope: &str| {
        let mut claims = issuer.claims(user, PROJECT_NAME);
        claims["realm_roles"] = roles;
        claims["scope"] = json!(scope);
        issuer.sign(&claims)
    };
    let alice = token(ALICE, json!(["reader"]), "openid mcp files:read");
    let bob = token(BOB, json!([]), "openid mcp");
    runtime().block_on(async {
        let client = connect(&gw.mcp, &alice).await;
        let resources = serde_json::to_value(client.list_all_resources().await.unwrap()).unwrap().to_string();
        let templates = serde_json::to_value(client.list_all_resource_templates().await.unwrap()).unwrap();
        assert!(resources.contains("test://static-binary"), "{resources}");
        assert_eq!(templates.as_array().unwrap().len(), 1, "{templates}");
        assert!(read_ok(&client, "test://static-binary").await && read_ok(&client, "test://template/5/data").await);
        client.cancel().await.unwrap();

        let client = connect(&gw.mcp, &bob).await;
        let resources = serde_json::to_value(client.list_all_resources().await.unwrap()).unwrap().to_string();
        let templates = serde_json::to_value(client.list_all_resource_templates().await.unwrap()).unwrap();
        assert!(!resources.contains("test://static-binary") && resources.contains("test://static-text"), "{resources}");
        assert_eq!(templates, json!([]));
        assert!(!read_ok(&client, "test://static-binary").await, "a hidden resource was read");
        assert!(!read_ok(&client, "test://template/5/data").await, "a hidden template was read");
        assert!(read_ok(&client, "test://static-text").await);
        client.cancel().await.unwrap();
    });
}

async fn read_ok(client: &McpClient, uri: &str) -> bool {
    client.read_resource(rmcp::model::ReadResourceRequestParams::new(uri)).await.is_ok()
}
