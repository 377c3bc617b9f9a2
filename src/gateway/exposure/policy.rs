//! The caller's authorization rules applied to one target (contract 17): the variables the rules read, built from
//! the identity and the target, and the one decision that listings and calls share.
//!
//! `principal` is built once per identity (`user_id`, `email`, `project_id`, `key_id`, `auth`, `claims`, `groups`
//! and `roles` from the claims `claim_mappings` names, `scopes`) and kept with it. `target` is `{kind, server, name,
//! exposed_name, annotations}`; `request` (`{method, args}`) only at a call. A configuration without rules and with
//! the default `allow` decides nothing and costs one check.
//!
//! A denial is `POLICY_DENIED` with the rule's `message` (or a default naming the target) and its `name` in `rule`;
//! listings leave denied targets out. Decisions are logged at DEBUG.

use std::borrow::Cow;
use std::cell::OnceCell;

use serde_json::{Map, Value};

use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::error::{ErrorCode, GatewayError};
use crate::meter::{self, Charge};
use crate::policy::{self, Decision, Input, Lazy, Principal};

/// What kind of target a decision is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Tool,
    Prompt,
    Resource,
    Template,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Prompt => "prompt",
            Kind::Resource => "resource",
            Kind::Template => "template",
        }
    }
}

/// One target: an upstream tool, prompt, resource or template. Its exposed name and annotations are worked out when
/// first asked for (a decision remembered, [`policy::Memo`], needs neither).
pub struct Target<'a> {
    pub kind: Kind,
    pub entry: &'a ServerEntry,
    /// The upstream's name (a resource's URI, a template's URI template).
    pub name: &'a str,
    identity: &'a Identity,
    /// The item's `annotations` as the upstream declared them (an object), if it did.
    declared: Option<&'a Value>,
    exposed_name: OnceCell<String>,
    annotations: OnceCell<Cow<'a, Value>>,
}

impl<'a> Target<'a> {
    /// `item` of `entry` as a target of kind `kind`: a tool or prompt by its `name`, a resource by its `uri`, a
    /// template by its `uriTemplate`.
    pub fn of(identity: &'a Identity, kind: Kind, entry: &'a ServerEntry, item: &'a Value) -> Target<'a> {
        let field = match kind {
            Kind::Tool | Kind::Prompt => "name",
            Kind::Resource => "uri",
            Kind::Template => "uriTemplate",
        };
        let name = item.get(field).and_then(Value::as_str).unwrap_or_default();
        let declared = item.get("annotations").filter(|a| a.is_object());
        Target { kind, entry, name, identity, declared, exposed_name: OnceCell::new(), annotations: OnceCell::new() }
    }

    /// The name the caller sees it by: a tool's or prompt's `{prefix}{name}` in the caller's configuration.
    pub fn exposed_name(&self) -> &str {
        self.exposed_name.get_or_init(|| match self.kind {
            Kind::Tool | Kind::Prompt => {
                let identity = self.identity;
                let separator = identity.snapshot.exposure(identity.mcp_config_id.as_deref()).separator;
                let entry = self.entry;
                let prefix = super::names::prefix_of(&entry.server_name, entry.tool_prefix.as_deref(), &separator);
                super::names::exposed_name(&prefix, self.name)
            }
            Kind::Resource | Kind::Template => self.name.to_string(),
        })
    }

    /// The item's `annotations` as the upstream declared them; a tool's with the MCP defaults of the hints it left
    /// out (`readOnlyHint` false, `destructiveHint` true unless read-only, `idempotentHint` false, `openWorldHint`
    /// true).
    pub fn annotations(&self) -> &Value {
        self.annotations.get_or_init(|| match (self.kind, self.declared) {
            (Kind::Tool, declared) => Cow::Owned(tool_hints(declared)),
            (_, Some(declared)) => Cow::Borrowed(declared),
            (_, None) => Cow::Owned(Value::Object(Map::new())),
        })
    }

    /// What a remembered decision knows the target by: its kind, server and name, and the fingerprint of the
    /// annotations as declared (what the rules read of it besides is the same for every call in one snapshot).
    fn recall<'m>(&'m self, memo: &'m policy::Memo) -> policy::Recall<'m> {
        policy::Recall {
            memo,
            key: [self.kind.as_str(), &self.entry.server_name, self.name],
            fingerprint: policy::fingerprint(self.declared.unwrap_or(&Value::Null)),
        }
    }
}

impl policy::TargetVars for Target<'_> {
    fn kind(&self) -> &str {
        self.kind.as_str()
    }
    fn server(&self) -> &str {
        &self.entry.server_name
    }
    fn name(&self) -> &str {
        self.name
    }
    fn exposed_name(&self) -> &str {
        Target::exposed_name(self)
    }
    fn annotations(&self) -> &Value {
        Target::annotations(self)
    }
}

/// A tool's annotations with the defaults of the MCP specification for the hints left out.
fn tool_hints(declared: Option<&Value>) -> Value {
    let mut hints = declared.and_then(Value::as_object).cloned().unwrap_or_default();
    let read_only = hints.get("readOnlyHint").and_then(Value::as_bool).unwrap_or(false);
    for (hint, default) in
        [("readOnlyHint", false), ("destructiveHint", !read_only), ("idempotentHint", false), ("openWorldHint", true)]
    {
        if !hints.get(hint).is_some_and(Value::is_boolean) {
            hints.insert(hint.to_string(), Value::Bool(default));
        }
    }
    Value::Object(hints)
}

/// Whether `identity` may see `item` of `entry` in a listing (always, without rules).
pub fn listed(identity: &Identity, kind: Kind, entry: &ServerEntry, item: &Value) -> bool {
    !applies(identity) || decide(identity, &Target::of(identity, kind, entry, item), None).allowed
}

/// A call's target and caller as its audit record keeps them for the simulator: canonical JSON texts
/// ([`audit_fields`]).
pub type AuditFields = (std::sync::Arc<str>, std::sync::Arc<str>);

/// What a call the rules allow counts against: the rule that allowed it (`None`: none decided, or there are none) and
/// the quotas it matches (contract 17).
#[derive(Debug, Default)]
pub struct Admitted {
    pub rule: Option<String>,
    pub charges: Vec<Charge>,
    /// What the audit record keeps of the target and the caller for the simulator (asked for with `audited`).
    pub audit: Option<AuditFields>,
    /// Set when the rules deny the call: its `POLICY_DENIED` answer (the audit fields are kept for its record).
    pub denied: Option<GatewayError>,
}

/// The call of `item` of `entry` with `args` (`method` its JSON-RPC method): what denied it (`denied`) or allowed it,
/// and the quotas it counts against (the counting itself is the caller's: `Meter::admit`). With
/// `audited`, also what the call's audit record keeps for `POST /api/v1/policy/simulate` ([`audit_fields`]).
pub fn check_call(
    identity: &Identity,
    (kind, entry, item): (Kind, &ServerEntry, &Value),
    method: &str,
    args: Option<&Value>,
    audited: bool,
) -> Admitted {
    let book = &identity.snapshot.policies;
    let rules = applies(identity);
    if !rules && book.quotas.is_empty() && !audited {
        return Admitted::default();
    }
    let target = Target::of(identity, kind, entry, item);
    let audit = audited.then(|| audit_fields(identity, &target));
    if !rules && book.quotas.is_empty() {
        return Admitted { audit, ..Admitted::default() };
    }
    let empty = Value::Object(Map::new());
    // The variables are bound only when a rule or a quota's condition is evaluated.
    let mut vars = Lazy::new(|| input(identity, &target, Some((method, args.unwrap_or(&empty)))));
    let mut admitted = Admitted { audit, ..Admitted::default() };
    if rules {
        let decision = decided(identity, &target, true, &mut vars);
        if !decision.allowed {
            admitted.denied = Some(denied(&target, &decision));
            return admitted;
        }
        admitted.rule = decision.rule.map(|rule| rule.name.clone());
    }
    let now = chrono::Utc::now();
    let (key, user, project) = (&identity.key_id, &identity.user_id, &identity.project_id);
    admitted.charges = book
        .quotas
        .iter()
        .filter(|quota| quota.when.as_ref().is_none_or(|when| vars.scope().matches(when)))
        .map(|quota| Charge::new(quota, meter::subject(quota.per, key, user, project), now))
        .collect();
    admitted
}

/// What a call's audit record keeps for the simulator (contract 17), as the canonical JSON text the record holds: the
/// target (`{kind, exposed_name, annotations}`) and what of the caller is not elsewhere in the record (`{auth, groups,
/// roles, scopes}`). Never a claim's value beyond those lists, never an argument. Each is written once per caller and
/// target and kept with the identity ([`policy::Memo`]): this runs for every audited call.
fn audit_fields(identity: &Identity, target: &Target<'_>) -> AuditFields {
    use crate::json_strict::{canonical, object};
    let memo = &identity.decisions;
    let written_target = memo.target_text(&target.recall(memo), || {
        canonical(&object([
            ("kind", Value::from(target.kind.as_str())),
            ("exposed_name", Value::from(target.exposed_name())),
            ("annotations", target.annotations().clone()),
        ]))
    });
    let principal = memo.principal_text(|| {
        let lists = lists(identity);
        let strings = |list: Vec<&str>| Value::Array(list.into_iter().map(Value::from).collect());
        canonical(&object([
            ("auth", Value::from(if identity.claims.is_some() { "oauth" } else { "apikey" })),
            ("groups", strings(lists.groups)),
            ("roles", strings(lists.roles)),
            ("scopes", strings(lists.scopes)),
        ]))
    });
    (written_target, principal)
}

/// Whether `identity`'s rules decide anything at all (no rules and the default `allow`: nothing to evaluate).
pub fn applies(identity: &Identity) -> bool {
    !identity.snapshot.policies.allows_everything()
}

/// The decision for `target`: for a listing (`request: None`) or a call (`Some((method, args))`).
pub fn decide<'s>(identity: &'s Identity, target: &Target<'_>, request: Option<(&str, &Value)>) -> Decision<'s> {
    decided(identity, target, request.is_some(), &mut Lazy::new(|| input(identity, target, request)))
}

/// The rules of `identity` decided on `vars` (the outcome of the rules that do not vary remembered with the identity,
/// [`policy::Memo`]), the decision logged.
fn decided<'s, 'p>(
    identity: &'s Identity,
    target: &Target<'_>,
    call: bool,
    vars: &mut Lazy<'p, impl Fn() -> Input<'p>>,
) -> Decision<'s> {
    let book = &identity.snapshot.policies;
    let rules = book.rules(identity.mcp_config_id.as_deref(), &identity.project_id);
    let recall = target.recall(&identity.decisions);
    let decision = policy::decide_lazily(rules, book.default_allow, call, Some(&recall), vars);
    tracing::debug!(kind = target.kind.as_str(), server_name = %target.entry.server_name, target = target.name,
        call, allowed = decision.allowed, rule = decision.rule.map(|r| r.name.as_str()),
        "authorization rules decided");
    decision
}

/// The variables of a decision about `target` for `identity`.
fn input<'i>(identity: &'i Identity, target: &'i Target<'_>, request: Option<(&'i str, &'i Value)>) -> Input<'i> {
    let principal = identity.principal.get_or_init(|| std::sync::Arc::new(principal(identity)));
    Input {
        principal,
        target,
        request: request.map(|(method, args)| policy::Request { method, args: Some(args) }),
        now: chrono::Utc::now().fixed_offset(),
    }
}

/// The `POLICY_DENIED` answer of a denial.
pub fn denied(target: &Target<'_>, decision: &Decision<'_>) -> GatewayError {
    let rule = decision.rule.map(|r| r.name.as_str());
    let message = decision.rule.and_then(|r| r.message.clone()).unwrap_or_else(|| match rule {
        Some(rule) => format!("{} {:?} is denied by rule {rule:?}", target.kind.as_str(), target.exposed_name()),
        None => format!("{} {:?} is denied by policy_default", target.kind.as_str(), target.exposed_name()),
    });
    let error = GatewayError::new(ErrorCode::PolicyDenied, message);
    match rule {
        Some(rule) => error.with("rule", rule.to_string()),
        None => error.with("rule", Value::Null),
    }
}

/// The caller's groups, roles and scopes, read from its claims (empty for API keys).
struct Lists<'a> {
    groups: Vec<&'a str>,
    roles: Vec<&'a str>,
    scopes: Vec<&'a str>,
}

fn lists(identity: &Identity) -> Lists<'_> {
    let claims = identity.claims.as_deref();
    let oauth = identity.snapshot.settings.client_oauth.as_deref();
    // The one reading of roles and groups, shared with the console's `console_admin_role`.
    let listed = |claim: Option<&String>| -> Vec<&str> {
        claims.map(|claims| crate::auth::oauth::claim_values(claims, claim.map(String::as_str))).unwrap_or_default()
    };
    Lists {
        groups: listed(oauth.and_then(|o| o.groups_claim.as_ref())),
        roles: listed(oauth.and_then(|o| o.roles_claim.as_ref())),
        scopes: claims.map(|c| crate::auth::oauth::scopes(c).collect()).unwrap_or_default(),
    }
}

/// `principal` of `identity`.
fn principal(identity: &Identity) -> Principal {
    let lists = lists(identity);
    let empty = Map::new();
    policy::principal(&policy::Who {
        user_id: &identity.user_id,
        email: &identity.email,
        project_id: &identity.project_id,
        key_id: &identity.key_id,
        auth: if identity.claims.is_some() { "oauth" } else { "apikey" },
        claims: identity.claims.as_deref().unwrap_or(&empty),
        groups: &lists.groups,
        roles: &lists.roles,
        scopes: &lists.scopes,
    })
}
