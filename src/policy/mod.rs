//! Authorization policies (contract 17): rules in CEL, compiled once when the configuration loads, and the one
//! decision a listing and a call both ask for.
//!
//! A rule is `{"name", "effect": "allow"|"deny", "when": "<CEL>", "message"?}`. [`Rule::compile`] parses `when`
//! with the `cel` crate and refuses a rule that does not parse or that names a variable other than `principal`,
//! `target`, `request` and `now`. [`decide`] runs the rules in order, first match wins, else the default:
//!
//! - at a call, every rule is evaluated with `request` (`method`, `args`);
//! - for a listing there is no `request`: a rule that reads it could match some call and not another, so an `allow`
//!   rule that reads it makes the target visible (a call could be allowed), and a `deny` rule that reads it is passed
//!   over (a call could escape it). A listing thus shows exactly the targets a call could be allowed for.
//!
//! A rule whose evaluation fails (a claim that is absent, a type that does not fit) or yields something other than a
//! boolean fails closed: a `deny` rule matches, an `allow` rule does not.
//!
//! The variables are built by the caller (`gateway/`): [`principal`] once per identity, [`Target`] per item. This
//! module is a leaf: the configuration compiles rules with it, the gateway decides with it.
//!
//! What costs: binding the variables (converting JSON into the evaluator's values) and running each rule. The
//! gateway decides through [`decide_lazily`] (`memo.rs`): what the rules decide whatever `request` and `now` are is
//! remembered per caller and target ([`Memo`]), so that a later call evaluates only the rules whose outcome depends on
//! the call, and binds a variable only when such a rule (or a quota's condition) reads it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelTimestamp, CelUInt,
};
use cel::common::value::Val;
use cel::objects::{Key, Map};
use cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;

mod memo;
pub mod quota;

pub use memo::{Lazy, MEMO_TARGETS, Memo, Recall, decide_lazily, fingerprint};

/// The variables a rule may read.
pub const VARIABLES: [&str; 4] = ["principal", "target", "request", "now"];

/// The standard CEL environment, built once.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// One compiled rule.
pub struct Rule {
    pub name: String,
    pub allow: bool,
    pub message: Option<String>,
    /// Whether `when` reads `target`.
    pub reads_target: bool,
    /// Whether `when` reads `request` (decided at a call only).
    pub reads_request: bool,
    /// Whether `when` reads `now`.
    pub reads_now: bool,
    program: Program,
}

impl std::fmt::Debug for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rule").field("name", &self.name).field("allow", &self.allow).finish_non_exhaustive()
    }
}

impl Rule {
    /// Compiles `when`; the error says why (the parser's message, or the unknown variable).
    pub fn compile(name: &str, allow: bool, when: &str, message: Option<String>) -> Result<Rule, String> {
        let program = ENV.compile(when).map_err(|e| format!("does not compile: {}", one_line(&e.to_string())))?;
        let references = program.references();
        let mut unknown: Vec<&str> = references.variables().into_iter().filter(|v| !VARIABLES.contains(v)).collect();
        unknown.sort_unstable();
        if let Some(first) = unknown.first() {
            return Err(format!(
                "names the unknown variable {first:?} (rules read {})",
                VARIABLES.map(|v| format!("`{v}`")).join(", ")
            ));
        }
        let reads_request = references.has_variable("request");
        let reads_now = references.has_variable("now");
        let reads_target = references.has_variable("target");
        Ok(Rule { name: name.to_string(), allow, message, reads_target, reads_request, reads_now, program })
    }

    /// Whether the outcome can differ between two decisions about the same caller and target (the rule reads
    /// `request` or `now`); the outcome of any other rule is remembered ([`Memo`]). A new variable whose value changes
    /// from call to call must count here.
    pub fn varies(&self) -> bool {
        self.reads_request || self.reads_now
    }
}

/// A parser's message on one line, cut to a readable length.
fn one_line(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.chars().take(300).collect()
}

/// `principal` as rules read it, built once per caller (kept with its identity): bound into a root evaluation context
/// of its own, so that a decision binds only `target`, `request` and `now` (binding converts a value into the
/// evaluator's own form, a deep copy: the principal's claims would be copied at every decision otherwise).
pub struct Principal {
    context: Context<'static, 'static>,
}

impl Principal {
    /// `value` (a map) as `principal`.
    pub fn new(value: Cel) -> Principal {
        let mut context = Context::with_env(Arc::clone(&ENV));
        context.add_variable_from_value("principal", value);
        Principal { context }
    }
}

impl std::fmt::Debug for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Principal")
    }
}

/// What a decision is about: the variables of one evaluation, borrowed until a [`Scope`] binds them.
#[derive(Clone, Copy)]
pub struct Input<'a> {
    pub principal: &'a Principal,
    /// `target`, asked for when a rule reads it.
    pub target: &'a dyn TargetVars,
    /// `Some` at a call.
    pub request: Option<Request<'a>>,
    pub now: chrono::DateTime<chrono::FixedOffset>,
}

/// `target`: `{kind, server, name, exposed_name, annotations}`, each field asked for only when a rule reads `target`
/// (the gateway works out the exposed name and a tool's annotations with their defaults on demand).
pub trait TargetVars {
    fn kind(&self) -> &str;
    fn server(&self) -> &str;
    fn name(&self) -> &str;
    fn exposed_name(&self) -> &str;
    fn annotations(&self) -> &Value;
}

/// A [`TargetVars`] whose fields are at hand.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub kind: &'a str,
    pub server: &'a str,
    pub name: &'a str,
    pub exposed_name: &'a str,
    pub annotations: &'a Value,
}

impl TargetVars for Target<'_> {
    fn kind(&self) -> &str {
        self.kind
    }
    fn server(&self) -> &str {
        self.server
    }
    fn name(&self) -> &str {
        self.name
    }
    fn exposed_name(&self) -> &str {
        self.exposed_name
    }
    fn annotations(&self) -> &Value {
        self.annotations
    }
}

/// `request`: `{method, args}`; without `args` when they are not known (a replay of an audit record).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub args: Option<&'a Value>,
}

/// The outcome: allowed or not, and the rule that decided (none: the default).
#[derive(Debug, Clone, Copy)]
pub struct Decision<'r> {
    pub allowed: bool,
    pub rule: Option<&'r Rule>,
}

/// Runs `rules` in order on `input`; the first that matches decides, else `default_allow`.
pub fn decide<'r>(rules: impl IntoIterator<Item = &'r Rule>, default_allow: bool, input: &Input<'_>) -> Decision<'r> {
    Scope::new(input).decide(rules, default_allow)
}

/// The variables of one evaluation (`principal` from its own context, [`Principal`]), each of the others converted
/// from the input's JSON into the evaluator's values at most once, when the first rule that reads it is evaluated.
pub struct Scope<'p> {
    context: Context<'p, 'p>,
    input: Input<'p>,
    /// Whether `target`, `request` and `now` are bound.
    bound: [bool; 3],
    /// `false`: `request` and `now` are never bound ([`Scope::without_call`]).
    varying: bool,
}

impl<'p> Scope<'p> {
    /// `input`'s variables.
    pub fn new(input: &Input<'p>) -> Scope<'p> {
        let root: &'p Context<'p, 'p> = &input.principal.context;
        Scope { context: root.new_inner_scope(), input: *input, bound: [false; 3], varying: true }
    }

    /// `principal` and `target` only: a rule that reads `request` or `now` evaluates here to what it is whatever they
    /// are (a boolean: the rest of its condition decides), or fails.
    pub fn without_call(input: &Input<'p>) -> Scope<'p> {
        Scope { varying: false, ..Scope::new(input) }
    }

    /// Binds what `rule` reads and is not bound yet.
    fn bind(&mut self, rule: &Rule) {
        let input = &self.input;
        if rule.reads_target && !self.bound[0] {
            let target = input.target;
            self.context.add_variable_as_val(
                "target",
                fields([
                    ("kind", text(target.kind())),
                    ("server", text(target.server())),
                    ("name", text(target.name())),
                    ("exposed_name", text(target.exposed_name())),
                    ("annotations", val(target.annotations())),
                ]),
            );
            self.bound[0] = true;
        }
        if !self.varying {
            return;
        }
        if rule.reads_request
            && !self.bound[1]
            && let Some(request) = &input.request
        {
            let method = ("method", text(request.method));
            let bound = match request.args {
                Some(args) => fields([method, ("args", val(args))]),
                None => fields([method]),
            };
            self.context.add_variable_as_val("request", bound);
            self.bound[1] = true;
        }
        if rule.reads_now && !self.bound[2] {
            self.context.add_variable_as_val("now", Box::new(CelTimestamp::from(input.now)));
            self.bound[2] = true;
        }
    }

    /// Whether this scope is a call's (it binds `request`).
    pub fn call(&self) -> bool {
        self.input.request.is_some()
    }

    /// See [`decide`].
    pub fn decide<'r>(&mut self, rules: impl IntoIterator<Item = &'r Rule>, default_allow: bool) -> Decision<'r> {
        for rule in rules {
            if rule.reads_request && !self.call() {
                // A listing: could some call be allowed by it (an allow rule), or escape it (a deny rule)?
                if rule.allow {
                    return Decision { allowed: true, rule: Some(rule) };
                }
                continue;
            }
            if self.matches(rule) {
                return Decision { allowed: rule.allow, rule: Some(rule) };
            }
        }
        Decision { allowed: default_allow, rule: None }
    }

    /// `rule`'s condition, or `None` when it fails or is not a boolean (a rule reading a variable this scope does not
    /// bind fails unless the rest of the condition decides it: what a replay without arguments can know).
    pub fn evaluate(&mut self, rule: &Rule) -> Option<bool> {
        self.bind(rule);
        match rule.program.execute(&self.context) {
            Ok(Cel::Bool(matched)) => Some(matched),
            Ok(_) | Err(_) => None,
        }
    }

    /// Whether `rule`'s condition holds; one that fails or is not a boolean fails closed (a `deny` rule, or a quota's
    /// condition, matches; an `allow` rule does not).
    pub fn matches(&mut self, rule: &Rule) -> bool {
        self.evaluate(rule).unwrap_or_else(|| {
            tracing::debug!(rule = %rule.name, "a policy rule did not evaluate to a boolean; it fails closed");
            !rule.allow
        })
    }
}

/// Who a caller is, as `principal` reads it.
pub struct Who<'a> {
    pub user_id: &'a str,
    pub email: &'a str,
    pub project_id: &'a str,
    pub key_id: &'a str,
    /// `"apikey"` or `"oauth"`.
    pub auth: &'a str,
    pub claims: &'a serde_json::Map<String, Value>,
    pub groups: &'a [&'a str],
    pub roles: &'a [&'a str],
    pub scopes: &'a [&'a str],
}

/// `principal` of `who`.
pub fn principal(who: &Who<'_>) -> Principal {
    Principal::new(map([
        ("user_id", string(who.user_id)),
        ("email", string(who.email)),
        ("project_id", string(who.project_id)),
        ("key_id", string(who.key_id)),
        ("auth", string(who.auth)),
        ("claims", map(who.claims.iter().map(|(k, v)| (k.as_str(), from_json(v))))),
        ("groups", strings(who.groups.iter().copied())),
        ("roles", strings(who.roles.iter().copied())),
        ("scopes", strings(who.scopes.iter().copied())),
    ]))
}

/// JSON as the evaluator's own value, built directly (not through [`Cel`], which binding would copy again; numbers as integers when they are, else as doubles).
fn val(value: &Value) -> Box<dyn Val + '_> {
    match value {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            _ => Box::new(CelDouble::from(n.as_f64().unwrap_or_default())),
        },
        Value::String(s) => text(s),
        Value::Array(items) => Box::new(CelList::from(items.iter().map(val).collect::<Vec<_>>())),
        Value::Object(object) => fields(object.iter().map(|(k, v)| (k.as_str(), val(v)))),
    }
}

/// A map of string keys, as the evaluator's own value.
fn fields<'a>(pairs: impl IntoIterator<Item = (&'a str, Box<dyn Val + 'a>)>) -> Box<dyn Val + 'a> {
    let map: HashMap<CelMapKey<'a>, Box<dyn Val + 'a>> =
        pairs.into_iter().map(|(k, v)| (CelMapKey::from(k), v)).collect();
    Box::new(CelMap::from(map))
}

/// A string as the evaluator's own value (copied: the evaluator reads owned strings faster than borrowed ones, in
/// `benches/policy.rs`).
fn text(text: &str) -> Box<dyn Val + '_> {
    Box::new(CelString::from(text.to_string()))
}

/// JSON as a CEL value (numbers as integers when they are, else as doubles).
pub fn from_json(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(items) => Cel::List(Arc::new(items.iter().map(from_json).collect())),
        Value::Object(fields) => map(fields.iter().map(|(k, v)| (k.as_str(), from_json(v)))),
    }
}

/// A CEL map of string keys.
pub fn map<'k>(fields: impl IntoIterator<Item = (&'k str, Cel)>) -> Cel {
    let fields: HashMap<Key, Cel> =
        fields.into_iter().map(|(k, v)| (Key::String(Arc::new(k.to_string())), v)).collect();
    Cel::Map(Map { map: Arc::new(fields) })
}

/// A CEL list of strings.
pub fn strings<'s>(items: impl IntoIterator<Item = &'s str>) -> Cel {
    Cel::List(Arc::new(items.into_iter().map(|s| Cel::String(Arc::new(s.to_string()))).collect()))
}

/// A CEL string.
pub fn string(text: &str) -> Cel {
    Cel::String(Arc::new(text.to_string()))
}

#[cfg(test)]
mod tests;
