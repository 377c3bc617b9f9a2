use super::*;
use serde_json::json;

fn rule(name: &str, allow: bool, when: &str) -> Rule {
    Rule::compile(name, allow, when, None).unwrap()
}

fn principal() -> Principal {
    Principal::new(from_json(&json!({"user_id": "u1", "email": "a@example.com", "auth": "oauth", "groups": ["oncall"],
                      "roles": [], "scopes": ["mcp"], "claims": {"dept": "sre"}})))
}

/// A call of tool `tool` of server `gh` (a listing without `args`).
struct Call {
    target: Target<'static>,
    args: Option<Value>,
}

fn call(tool: &str, args: Option<Value>) -> Call {
    let leak = |text: String| -> &'static str { Box::leak(text.into_boxed_str()) };
    let annotations = Box::leak(Box::new(json!({"destructiveHint": tool.starts_with("delete")})));
    let (name, exposed_name) = (leak(tool.to_string()), leak(format!("gh__{tool}")));
    Call { target: Target { kind: "tool", server: "gh", name, exposed_name, annotations }, args }
}

impl Call {
    fn input<'a>(&'a self, principal: &'a Principal) -> Input<'a> {
        Input {
            principal,
            target: &self.target,
            request: self.args.as_ref().map(|args| Request { method: "tools/call", args: Some(args) }),
            now: chrono::Utc::now().fixed_offset(),
        }
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
    let decided = decide(&rules, false, &call("delete_repo", None).input(&p));
    assert!(decided.allowed && decided.rule.unwrap().name == "oncall-may-delete");
    let other = Principal::new(from_json(&json!({"groups": [], "claims": {}})));
    let decided = decide(&rules, true, &call("delete_repo", None).input(&other));
    assert!(!decided.allowed && decided.rule.unwrap().name == "no-destructive");
    // `principal.claims.dept` is absent: the allow rule fails closed (does not match), the default decides.
    let decided = decide(&rules, false, &call("search", None).input(&other));
    assert!(!decided.allowed && decided.rule.is_none());
}

#[test]
fn a_listing_shows_what_a_call_could_be_allowed_for() {
    let p = principal();
    let deny_big = [rule("no-big-queries", false, "request.args.limit > 100")];
    assert!(decide(&deny_big, true, &call("search", None).input(&p)).allowed, "listed: a call can escape the rule");
    assert!(!decide(&deny_big, true, &call("search", Some(json!({"limit": 500}))).input(&p)).allowed);
    assert!(decide(&deny_big, true, &call("search", Some(json!({"limit": 5}))).input(&p)).allowed);
    let allow_small = [rule("small-only", true, "request.args.limit <= 10")];
    assert!(decide(&allow_small, false, &call("search", None).input(&p)).allowed, "listed: some call is allowed");
    assert!(!decide(&allow_small, false, &call("search", Some(json!({"limit": 50}))).input(&p)).allowed);
    // A deny rule that cannot be evaluated on these arguments fails closed.
    assert!(!decide(&deny_big, true, &call("search", Some(json!({}))).input(&p)).allowed);
}

#[test]
fn time_is_a_timestamp() {
    let p = principal();
    let rules = [rule("after-2020", true, "now > timestamp('2020-01-01T00:00:00Z')")];
    assert!(decide(&rules, false, &call("search", None).input(&p)).allowed);
}

/// The remembered decision is the sequential one, cold and warm, for calls and listings, whatever the mix of rules
/// that vary (read `request` or `now`) and rules that do not.
#[test]
fn remembered_decisions_are_the_sequential_ones() {
    let p = principal();
    let shapes = [
        (false, "target.annotations.destructiveHint && !('admins' in principal.groups)"),
        (true, "target.name == 'search'"),
        (false, "request.args.limit > 100"),
        (true, "request.args.limit <= 10"),
        (false, "target.name.startsWith('drop') && now > timestamp('2020-01-01T00:00:00Z')"),
        (true, "'oncall' in principal.groups && target.name == 'delete_repo'"),
        (false, "principal.claims.absent == 'x'"),
        (true, "principal.claims.dept == 'sre' && target.name == 'list'"),
        (false, "request.args.limit > 100 || target.name == 'search'"),
        (true, "request.args.limit == 5 && target.name == 'list'"),
        (true, "now > timestamp('2020-01-01T00:00:00Z') || target.name == 'x'"),
        (false, "target.name == 'other' ? request.args.limit > 1 : false"),
    ];
    let tools = ["search", "delete_repo", "drop_table", "list", "other"];
    let args =
        [None, Some(json!({"limit": 5})), Some(json!({"limit": 50})), Some(json!({"limit": 500})), Some(json!({}))];
    // Every ordered subset of up to three shapes, both defaults.
    let mut sets: Vec<Vec<usize>> = vec![vec![]];
    for a in 0..shapes.len() {
        sets.push(vec![a]);
        for b in 0..shapes.len() {
            sets.push(vec![a, b]);
            sets.push(vec![a, b, (a + b + 1) % shapes.len()]);
        }
    }
    for set in &sets {
        let rules: Vec<Rule> =
            set.iter().enumerate().map(|(i, &s)| rule(&format!("r{i}"), shapes[s].0, shapes[s].1)).collect();
        for default_allow in [true, false] {
            let memo = Memo::default();
            for round in 0..2 {
                for tool in tools {
                    for args in &args {
                        let c = call(tool, args.clone());
                        let expected = decide(&rules, default_allow, &c.input(&p));
                        let recall = Recall { memo: &memo, key: ["tool", "gh", tool], fingerprint: 7 };
                        let mut vars = Lazy::new(|| c.input(&p));
                        let got = decide_lazily(&rules, default_allow, args.is_some(), Some(&recall), &mut vars);
                        assert_eq!(
                            (got.allowed, got.rule.map(|r| &r.name)),
                            (expected.allowed, expected.rule.map(|r| &r.name)),
                            "rules {set:?}, default {default_allow}, round {round}, {tool}, {args:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_remembered_decision_binds_nothing_and_the_memo_is_bounded() {
    let p = principal();
    let rules = [rule("no-destructive", false, "target.annotations.destructiveHint")];
    let memo = Memo::default();
    let recall = Recall { memo: &memo, key: ["tool", "gh", "delete_repo"], fingerprint: 1 };
    let listing = call("delete_repo", None);
    let mut vars = Lazy::new(|| listing.input(&p));
    assert!(!decide_lazily(&rules, true, false, Some(&recall), &mut vars).allowed);
    let bound = std::cell::Cell::new(0);
    let calling = call("delete_repo", Some(json!({})));
    let mut vars = Lazy::new(|| {
        bound.set(bound.get() + 1);
        calling.input(&p)
    });
    assert!(!decide_lazily(&rules, true, true, Some(&recall), &mut vars).allowed);
    assert_eq!(bound.get(), 0, "a remembered outcome needs no variables");
    // Another fingerprint (the upstream changed the annotations): evaluated again.
    let changed = Recall { memo: &memo, key: ["tool", "gh", "delete_repo"], fingerprint: 2 };
    let search = call("search", None);
    let mut vars = Lazy::new(|| {
        bound.set(bound.get() + 1);
        search.input(&p)
    });
    assert!(decide_lazily(&rules, true, false, Some(&changed), &mut vars).allowed);
    assert_eq!(bound.get(), 1);
    for n in 0..MEMO_TARGETS + 10 {
        let key = format!("tool-{n}");
        let recall = Recall { memo: &memo, key: ["tool", "gh", &key], fingerprint: 1 };
        decide_lazily(&rules, true, false, Some(&recall), &mut Lazy::new(|| search.input(&p)));
    }
    assert!(memo.len() <= MEMO_TARGETS);
}

#[test]
fn fingerprints_follow_the_value() {
    let a = json!({"readOnlyHint": true, "title": "x", "n": [1, 2.5, null]});
    assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
    assert_ne!(fingerprint(&a), fingerprint(&json!({"readOnlyHint": false, "title": "x", "n": [1, 2.5, null]})));
    assert_ne!(fingerprint(&json!("1")), fingerprint(&json!(1)));
}
