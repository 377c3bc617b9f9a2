use super::*;
use serde_json::json;

fn rule(name: &str, allow: bool, when: &str) -> Rule {
    Rule::compile(name, allow, when, None).unwrap()
}

fn principal() -> Principal {
    Principal::new(from_json(&json!({"user_id": "u1", "email": "a@example.com", "auth": "oauth", "groups": ["oncall"],
                      "roles": [], "scopes": ["mcp"], "claims": {"dept": "sre"}})))
}

fn input<'a>(principal: &'a Principal, tool: &str, args: Option<Value>) -> Input<'a> {
    Input {
        principal,
        target: from_json(&json!({"kind": "tool", "server": "gh", "name": tool, "exposed_name": format!("gh__{tool}"),
                                  "annotations": {"destructiveHint": tool.starts_with("delete")}})),
        request: args.map(|args| from_json(&json!({"method": "tools/call", "args": args}))),
        now: chrono::Utc::now().fixed_offset(),
    }
}

#[test]
fn rules_that_do_not_compile_or_name_unknown_variables_are_refused() {
    assert!(Rule::compile("r", true, "principal.user_id ==", None).unwrap_err().contains("does not compile"));
    let unknown = Rule::compile("r", true, "user.id == 'x'", None).unwrap_err();
    assert!(unknown.contains("unknown variable \"user\""), "{unknown}");
    assert!(rule("r", true, "request.args.q == 'x'").reads_request);
    assert!(!rule("r", true, "target.name == 'x'").reads_request);
}

#[test]
fn first_match_wins_then_the_default() {
    let p = principal();
    let rules = [
        rule("oncall-may-delete", true, "target.annotations.destructiveHint && 'oncall' in principal.groups"),
        rule("no-destructive", false, "target.annotations.destructiveHint"),
        rule("sre-reads", true, "principal.claims.dept == 'sre'"),
    ];
    let decided = decide(&rules, false, &input(&p, "delete_repo", None));
    assert!(decided.allowed && decided.rule.unwrap().name == "oncall-may-delete");
    let other = Principal::new(from_json(&json!({"groups": [], "claims": {}})));
    let decided = decide(&rules, true, &input(&other, "delete_repo", None));
    assert!(!decided.allowed && decided.rule.unwrap().name == "no-destructive");
    // `principal.claims.dept` is absent: the allow rule fails closed (does not match), the default decides.
    let decided = decide(&rules, false, &input(&other, "search", None));
    assert!(!decided.allowed && decided.rule.is_none());
}

#[test]
fn a_listing_shows_what_a_call_could_be_allowed_for() {
    let p = principal();
    let deny_big = [rule("no-big-queries", false, "request.args.limit > 100")];
    assert!(decide(&deny_big, true, &input(&p, "search", None)).allowed, "listed: a call can escape the rule");
    assert!(!decide(&deny_big, true, &input(&p, "search", Some(json!({"limit": 500})))).allowed);
    assert!(decide(&deny_big, true, &input(&p, "search", Some(json!({"limit": 5})))).allowed);
    let allow_small = [rule("small-only", true, "request.args.limit <= 10")];
    assert!(decide(&allow_small, false, &input(&p, "search", None)).allowed, "listed: some call is allowed");
    assert!(!decide(&allow_small, false, &input(&p, "search", Some(json!({"limit": 50})))).allowed);
    // A deny rule that cannot be evaluated on these arguments fails closed.
    assert!(!decide(&deny_big, true, &input(&p, "search", Some(json!({})))).allowed);
}

#[test]
fn time_is_a_timestamp() {
    let p = principal();
    let rules = [rule("after-2020", true, "now > timestamp('2020-01-01T00:00:00Z')")];
    assert!(decide(&rules, false, &input(&p, "search", None)).allowed);
}
