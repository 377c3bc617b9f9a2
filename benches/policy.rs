//! The cost of an authorization decision (contract 17) through the library, without the gateway around it: 0, 10 and
//! 1,000 rules, and compiling 1,000 rules (what a config load pays).
//!
//! Run with `cargo bench --bench policy` (about a minute). What one decision costs here is what the gateway pays per
//! call: `principal` built once per caller (`policy::principal`, kept with its identity), `target` and `request` bound
//! per call from the item's `annotations` and the call's arguments (borrowed, `policy::Scope`), then every rule run in
//! order ([`decide`]). No rule matches and the default allows, the worst case: every rule is
//! evaluated. The rules are ten realistic shapes (a server and a hint, a tool name and a project, a prefix and a role,
//! an e-mail domain, a time, a list of names, an argument, a key id), rule `n` being shape `n % 10` with `n` in its
//! constants; `benches/policy.py` runs the same rules end to end through the release binary.
//!
//! Cases (criterion): `decide/0`, `decide/10`, `decide/1000`: building the input and deciding from scratch (a caller's
//! first call to a target); `decide/10_regex`: the ten with the e-mail rule written with `matches()` (a regular
//! expression); `decide/remembered/10`, `…/1000`: the gateway's path at every later call (the outcome of the rules that
//! neither read `request` nor `now` remembered per caller and target, `policy::decide_lazily`; two of the ten shapes
//! read them and are evaluated at every call); `input`: building the input alone; `compile/1000`. After them, `summary` prints the p50 per decision of each case measured in alternation in one run,
//! and the ratio to the 0-rule case (the input and the evaluation scope alone, what any decision pays).
//!
//! Goal (issue 34): under 5 µs per call for 10 rules (without Redis).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use mcpgw::policy::{self, Input, Lazy, Memo, Recall, Rule, Who, decide, decide_lazily};
use serde_json::{Map, Value, json};

/// The same allocator as the binary: building the variables is mostly small allocations.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Rule `n`'s condition and effect: shape `n % 10`, with `n` in its constants so that no two rules are alike. None
/// matches the call below, and none fails to evaluate on it (a `deny` rule that fails would match: fail closed).
fn when(n: usize) -> (bool, String) {
    match n % 10 {
        0 => (
            false,
            format!(
                "target.server == 'github_{n}' && target.annotations.destructiveHint && !('oncall' in principal.groups)"
            ),
        ),
        1 => (false, format!("target.name == 'tool_{n}' && principal.project_id == 'p'")),
        2 => (
            false,
            format!("target.kind == 'tool' && target.name.startsWith('delete_{n}_') && !('admin' in principal.roles)"),
        ),
        3 => (false, format!("principal.email.endsWith('@contractor{n}.example.com') && target.server == 'billing'")),
        4 => (false, format!("'readonly_{n}' in principal.roles && !target.annotations.readOnlyHint")),
        5 => (false, format!("target.server == 'deploy_{n}' && now > timestamp('2026-01-01T00:00:00Z')")),
        6 => (
            true,
            format!("target.name in ['search_{n}', 'list_issues_{n}', 'get_file_{n}'] && principal.auth == 'oauth'"),
        ),
        7 => (false, format!("has(request.args.limit_{n}) && request.args.limit_{n} > 100")),
        8 => (false, format!("principal.key_id == 'revoked-{n}' || principal.user_id == 'blocked-{n}'")),
        _ => (
            false,
            format!(
                "target.server == 'payments_{n}' && (!has(principal.claims.dept) || principal.claims.dept != 'finance')"
            ),
        ),
    }
}

/// Rules 0 to `count` - 1.
fn rules(count: usize) -> Vec<Rule> {
    (0..count)
        .map(|n| {
            let (allow, when) = when(n);
            Rule::compile(&format!("rule-{n}"), allow, &when, Some("denied by the benchmark".into()))
                .unwrap_or_else(|e| panic!("rule {n}: {e}"))
        })
        .collect()
}

/// The ten, the e-mail rule written as a regular expression.
fn rules_with_regex() -> Vec<Rule> {
    let mut rules = rules(10);
    rules[3] = Rule::compile(
        "rule-3",
        false,
        r"principal.email.matches('^.*@contractor[0-9]+\\.example\\.com$') && target.server == 'billing'",
        None,
    )
    .expect("the regex rule compiles");
    rules
}

/// What the gateway keeps per caller: an OAuth user with claims, groups, roles and scopes.
struct Caller {
    claims: Map<String, Value>,
}

impl Caller {
    fn new() -> Caller {
        let claims = match json!({"sub": "u-42", "email": "dev@example.com", "dept": "engineering",
                                  "groups": ["eng", "platform"], "roles": ["developer"], "scope": "mcp tools"})
        {
            Value::Object(claims) => claims,
            _ => Map::new(),
        };
        Caller { claims }
    }

    fn principal(&self) -> policy::Principal {
        policy::principal(&Who {
            user_id: "u-42",
            email: "dev@example.com",
            project_id: "p1",
            key_id: "k-0123456789abcdef",
            auth: "oauth",
            claims: &self.claims,
            groups: &["eng", "platform"],
            roles: &["developer"],
            scopes: &["mcp", "tools"],
        })
    }
}

/// One call's variables, built as the gateway builds them: the target from the tool's annotations (the MCP defaults
/// filled in), the request from its arguments.
struct Call {
    target: policy::Target<'static>,
    args: Value,
}

impl Call {
    fn new() -> Call {
        let annotations = json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": false,
                                 "openWorldHint": true});
        let annotations: &'static Value = Box::leak(Box::new(annotations));
        Call {
            target: policy::Target {
                kind: "tool",
                server: "mock",
                name: "echo",
                exposed_name: "mock__echo",
                annotations,
            },
            args: json!({"text": "hello from the benchmark"}),
        }
    }

    /// The decision as the gateway takes it at a call: the outcome of the rules that do not vary remembered per caller
    /// and target (`memo`, warm after the first call), the variables bound only when a rule that varies is evaluated.
    fn remembered<'r>(&self, rules: &'r [Rule], principal: &policy::Principal, memo: &Memo) -> policy::Decision<'r> {
        let recall =
            Recall { memo, key: ["tool", "mock", "echo"], fingerprint: policy::fingerprint(self.target.annotations) };
        decide_lazily(rules, true, true, Some(&recall), &mut Lazy::new(|| self.input(principal)))
    }

    fn input<'p>(&'p self, principal: &'p policy::Principal) -> Input<'p> {
        Input {
            principal,
            target: &self.target,
            request: Some(policy::Request { method: "tools/call", args: Some(&self.args) }),
            now: chrono::Utc::now().fixed_offset(),
        }
    }
}

/// Every rule set is checked once: nothing matches, nothing fails closed, the default allows.
fn checked(rules: Vec<Rule>, principal: &policy::Principal, call: &Call) -> Vec<Rule> {
    let decision = decide(&rules, true, &call.input(principal));
    assert!(decision.allowed && decision.rule.is_none(), "a rule decided: {:?}", decision.rule.map(|r| &r.name));
    rules
}

fn decisions(c: &mut Criterion) {
    let caller = Caller::new();
    let principal = caller.principal();
    let call = Call::new();
    let sets = [
        ("0", checked(Vec::new(), &principal, &call)),
        ("10", checked(rules(10), &principal, &call)),
        ("10_regex", checked(rules_with_regex(), &principal, &call)),
        ("1000", checked(rules(1000), &principal, &call)),
    ];
    let mut group = c.benchmark_group("decide");
    for (name, rules) in &sets {
        group.bench_with_input(BenchmarkId::from_parameter(name), rules, |b, rules| {
            b.iter(|| black_box(decide(rules, true, &call.input(black_box(&principal)))).allowed)
        });
    }
    for (name, rules) in sets.iter().filter(|(name, _)| ["10", "1000"].contains(name)) {
        let memo = Memo::default();
        group.bench_with_input(BenchmarkId::new("remembered", name), rules, |b, rules| {
            b.iter(|| black_box(call.remembered(rules, black_box(&principal), &memo)).allowed)
        });
    }
    group.finish();
    c.bench_function("input", |b| b.iter(|| black_box(call.input(black_box(&principal)))));
}

fn compile(c: &mut Criterion) {
    let sources: Vec<(bool, String)> = (0..1000).map(when).collect();
    let mut group = c.benchmark_group("compile");
    group.sample_size(10);
    group.bench_function("1000", |b| {
        b.iter(|| {
            sources
                .iter()
                .enumerate()
                .map(|(n, (allow, when))| Rule::compile(&format!("rule-{n}"), *allow, black_box(when), None))
                .collect::<Result<Vec<_>, _>>()
                .expect("the rules compile")
        })
    });
    group.finish();
}

/// The p50 per decision of each case, measured in alternation (batches of decisions, the median batch of each of
/// several rounds, the median round), and the ratio to the 0-rule case.
fn summary(_: &mut Criterion) {
    const ROUNDS: usize = 5;
    const BATCHES: usize = 101;
    let caller = Caller::new();
    let principal = caller.principal();
    let call = Call::new();
    // (name, rules, decisions a batch, remembered): every decision evaluated from scratch (what a first call of a
    // caller to a target pays), or remembered (every later call).
    let sets = [
        ("0 rules (the input alone)", Vec::new(), 1000, false),
        ("10 rules", rules(10), 200, false),
        ("10 rules, one a regex", rules_with_regex(), 100, false),
        ("1,000 rules", rules(1000), 4, false),
        ("10 rules, remembered", rules(10), 400, true),
        ("1,000 rules, remembered", rules(1000), 20, true),
    ];
    let memos: Vec<Memo> = sets.iter().map(|_| Memo::default()).collect();
    let batch = |i: usize, size: usize| {
        let (_, rules, _, remembered) = &sets[i];
        let start = Instant::now();
        for _ in 0..size {
            if *remembered {
                black_box(call.remembered(rules, black_box(&principal), &memos[i]));
            } else {
                black_box(decide(rules, true, &call.input(black_box(&principal))));
            }
        }
        start.elapsed() / size as u32
    };
    let mut rounds: Vec<Vec<Duration>> = vec![Vec::new(); sets.len()];
    for (i, (_, _, size, _)) in sets.iter().enumerate() {
        batch(i, size * 10); // warm-up
    }
    for _ in 0..ROUNDS {
        for (i, (_, _, size, _)) in sets.iter().enumerate() {
            let mut times: Vec<Duration> = (0..BATCHES).map(|_| batch(i, *size)).collect();
            times.sort_unstable();
            rounds[i].push(times[BATCHES / 2]);
        }
    }
    let p50: Vec<f64> = rounds
        .iter_mut()
        .map(|times| {
            times.sort_unstable();
            times[ROUNDS / 2].as_secs_f64() * 1e9
        })
        .collect();
    eprintln!("one decision at a call (no rule matches, default allow), p50 of {ROUNDS} alternating rounds:");
    for ((name, _, _, _), ns) in sets.iter().zip(&p50) {
        eprintln!("  {name:<28} {:>10.0} ns  {:>8.1}x the 0-rule case", ns, ns / p50[0]);
    }
    eprintln!(
        "  a first decision with 10 rules: {:.2} µs (per rule, 1,000 vs 10: {:.0} ns); every later call of that caller \
         to that target: {:.2} µs (goal: 10 rules under 5 µs a call: {}); 1,000 rules remembered: {:.2} µs (goal of \
         issue 36: under 50 µs)",
        p50[1] / 1e3,
        (p50[3] - p50[1]) / 990.0,
        p50[4] / 1e3,
        if p50[4] < 5_000.0 { "met" } else { "NOT met" },
        p50[5] / 1e3,
    );
}

fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(30)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = decisions, compile, summary
}
criterion_main!(benches);
