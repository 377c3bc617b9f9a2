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
//! The variables are built by the caller (`gateway/`): [`principal`] once per identity, [`target`] per item. This
//! module is a leaf: the configuration compiles rules with it, the gateway decides with it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::objects::{Key, Map};
use cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;

pub mod quota;

/// The variables a rule may read.
pub const VARIABLES: [&str; 4] = ["principal", "target", "request", "now"];

/// The standard CEL environment, built once.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(Env::stdlib()));

/// One compiled rule.
pub struct Rule {
    pub name: String,
    pub allow: bool,
    pub message: Option<String>,
    /// Whether `when` reads `request` (decided at a call only).
    pub reads_request: bool,
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
        Ok(Rule { name: name.to_string(), allow, message, reads_request, program })
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

/// What a decision is about: the variables of one evaluation.
pub struct Input<'a> {
    pub principal: &'a Principal,
    pub target: Cel,
    /// `Some` at a call: `{method, args}`.
    pub request: Option<Cel>,
    pub now: chrono::DateTime<chrono::FixedOffset>,
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

/// The variables of one evaluation, bound once for every rule and quota that reads them (`principal` from its own
/// context, [`Principal`]).
pub struct Scope<'p> {
    context: Context<'p, 'static>,
    call: bool,
}

impl<'p> Scope<'p> {
    /// `input`'s variables.
    pub fn new(input: &Input<'p>) -> Scope<'p> {
        let mut context = input.principal.context.new_inner_scope();
        context.add_variable_from_value("target", input.target.clone());
        context.add_variable_from_value("now", Cel::Timestamp(input.now));
        if let Some(request) = &input.request {
            context.add_variable_from_value("request", request.clone());
        }
        Scope { context, call: input.request.is_some() }
    }

    /// See [`decide`].
    pub fn decide<'r>(&self, rules: impl IntoIterator<Item = &'r Rule>, default_allow: bool) -> Decision<'r> {
        for rule in rules {
            if rule.reads_request && !self.call {
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
    pub fn evaluate(&self, rule: &Rule) -> Option<bool> {
        match rule.program.execute(&self.context) {
            Ok(Cel::Bool(matched)) => Some(matched),
            Ok(_) | Err(_) => None,
        }
    }

    /// Whether `rule`'s condition holds; one that fails or is not a boolean fails closed (a `deny` rule, or a quota's
    /// condition, matches; an `allow` rule does not).
    pub fn matches(&self, rule: &Rule) -> bool {
        match rule.program.execute(&self.context) {
            Ok(Cel::Bool(matched)) => matched,
            Ok(_) | Err(_) => {
                tracing::debug!(rule = %rule.name, "a policy rule did not evaluate to a boolean; it fails closed");
                !rule.allow
            }
        }
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

/// `target`: `{kind, server, name, exposed_name, annotations}`.
pub fn target(kind: &str, server: &str, name: &str, exposed_name: &str, annotations: &Value) -> Cel {
    map([
        ("kind", string(kind)),
        ("server", string(server)),
        ("name", string(name)),
        ("exposed_name", string(exposed_name)),
        ("annotations", from_json(annotations)),
    ])
}

/// `request`: `{method, args}`.
pub fn request(method: &str, args: &Value) -> Cel {
    map([("method", string(method)), ("args", from_json(args))])
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
