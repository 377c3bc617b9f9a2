//! The policy simulator and checker (contract 17): `POST /api/v1/policy/simulate`, `mcpgw policy test FILE` and
//! `mcpgw policy check FILE`; and the gateway-wide rules and quotas read and replaced (`GET` and `PUT
//! /api/v1/policy`: [`rules`], [`replacement`] compiled as `mcpgw policy check` compiles, then [`replace`] inside
//! the store's update, like every admin write).
//!
//! A proposal is `{"policies", "policy_default"?, "quotas"?, "last"?}`: `policies` takes the place of
//! `common_mcp_gateway_config.policies` (the rules of MCP configurations and projects stay as they are),
//! `policy_default` of the current default when given (else the current one stands), `quotas` of the current quotas
//! when given. It is compiled as the
//! configuration would be (the same problems, the same names).
//!
//! [`simulate`] replays the last `last` (default 1,000, at most [`MAX_LAST`]) audited calls of tools, prompts and
//! resources against it, in the order they were made: each record's caller (`key_id`, `user_id`, `project_id`, the
//! user's `email` from the configuration, and `auth`, `groups`, `roles` and `scopes` as the record kept them; no other
//! claim), its target (`server_name`, `tool_name`, and `kind`, `exposed_name` and `annotations` as the record kept
//! them) and its time. `before` is what the call met (`allow`, `deny` for `POLICY_DENIED`, `quota_exceeded`); `after`
//! what the proposal decides; `changed` lists the records where they differ, with the deciding rule (or quota). With
//! `quotas`, the calls the proposal allows are counted through fresh counters at their recorded times; without, a call
//! that met a quota still meets it. Records the proposal cannot decide are counted, not guessed: a rule that reads
//! `request` (the record keeps no arguments) makes the record `undecided`, and so does a record written before the
//! gateway kept targets in the audit log. Calls refused before any rule applies (an unknown or quarantined tool, a
//! `tool_filter`) are left out. Nothing is applied.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::{Map, Value, json};

use super::{ManageError, ManageResult};
use crate::config::Snapshot;
use crate::config::model::{ConfigFile, PolicyRule, QuotaRule};
use crate::config::policies::PolicyBook;
use crate::meter::{self, Charge};
use crate::policy::{self, Input, Rule, Scope};

/// How many records a simulation replays at most.
pub const MAX_LAST: usize = 100_000;
/// How many it replays by default.
pub const DEFAULT_LAST: usize = 1_000;

/// The audit events a simulation replays.
const CALL_EVENTS: [&str; 3] = ["tool_call", "prompt_get", "resource_read"];
/// Error codes of calls refused before any rule applied.
const BEFORE_RULES: [&str; 4] = ["TOOL_NOT_FOUND", "TOOL_NOT_ALLOWED", "TOOL_QUARANTINED", "SERVER_NOT_FOUND"];

/// A compiled proposal.
pub struct Proposal {
    book: PolicyBook,
    /// Whether the proposal has its own `policy_default`.
    default: bool,
    /// Whether the proposal has its own `quotas`.
    quotas: bool,
    last: usize,
}

/// Compiles `body` (see the module documentation); the error lists every problem, named as in the configuration.
pub fn proposal(body: Value) -> ManageResult<Proposal> {
    let Value::Object(mut body) = body else {
        return Err(ManageError::Validation("the request body must be a JSON object".into()));
    };
    let last = match body.remove("last") {
        None | Some(Value::Null) => DEFAULT_LAST,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| (1..=MAX_LAST as u64).contains(&n)) => {
            n.as_u64().unwrap_or_default() as usize
        }
        Some(other) => {
            return Err(ManageError::Validation(format!("last: must be from 1 to {MAX_LAST}, found {other}")));
        }
    };
    if !body.contains_key("policies") {
        return Err(ManageError::Validation("policies: is required (a list of rules, maybe empty)".into()));
    }
    let quotas = body.contains_key("quotas");
    let default = body.get("policy_default").is_some_and(|d| !d.is_null());
    let (book, problems) = compile(Value::Object(body));
    if !problems.is_empty() {
        return Err(ManageError::Invalid(problems));
    }
    Ok(Proposal { book, default, quotas, last })
}

/// Compiles a rules document (`{"policies", "policy_default", "quotas"}`) or a whole configuration file: the rules
/// and quotas, and every problem (an empty list: they all compile). `mcpgw policy check FILE`.
pub fn compile(document: Value) -> (PolicyBook, Vec<String>) {
    let (_, book, problems) = decode(document);
    (book, problems)
}

/// [`compile`], with the file the document decoded into (a rules document's fields in its
/// `common_mcp_gateway_config`).
fn decode(document: Value) -> (ConfigFile, PolicyBook, Vec<String>) {
    let whole = document.get("common_mcp_gateway_config").is_some() || document.get("mcp_configs").is_some();
    let document = if whole {
        document
    } else {
        let mut common = Map::new();
        if let Value::Object(fields) = document {
            for (name, value) in fields {
                if matches!(name.as_str(), "policies" | "policy_default" | "quotas") {
                    common.insert(name, value);
                } else {
                    return (
                        ConfigFile::default(),
                        PolicyBook::default(),
                        vec![format!("{name}: a rules document has only policies, policy_default and quotas")],
                    );
                }
            }
        }
        json!({ "common_mcp_gateway_config": common })
    };
    let (file, mut problems) = ConfigFile::from_value_partial(document);
    if !whole {
        problems.retain(|p| p.contains("policies") || p.contains("policy_default") || p.contains("quotas"));
    }
    let book = PolicyBook::compile(&file, &mut problems);
    (file, book, problems)
}

/// `common_mcp_gateway_config`'s rules and quotas as the configuration file holds them: `{policies, policy_default,
/// quotas}` (`[]`, `null` and `[]` when the file leaves them out: no rule, the default `allow`, no quota).
pub fn rules(file: &ConfigFile) -> ManageResult {
    #[derive(serde::Serialize)]
    struct Rules<'a> {
        policies: &'a [PolicyRule],
        policy_default: Option<&'a str>,
        quotas: &'a [QuotaRule],
    }
    let common = file.common_mcp_gateway_config.as_ref();
    let rules = Rules {
        policies: common.and_then(|c| c.policies.as_deref()).unwrap_or_default(),
        policy_default: common.and_then(|c| c.policy_default.as_deref()),
        quotas: common.and_then(|c| c.quotas.as_deref()).unwrap_or_default(),
    };
    serde_json::to_value(rules).map_err(|e| ManageError::Internal(format!("the rules cannot be shown: {e}")))
}

/// New rules and quotas for `common_mcp_gateway_config` (`PUT /api/v1/policy`), compiled.
pub struct Replacement {
    policies: Vec<PolicyRule>,
    /// `None`: the current default stays.
    policy_default: Option<String>,
    /// `None`: the current quotas stay.
    quotas: Option<Vec<QuotaRule>>,
}

/// Reads and compiles `{policies, policy_default?, quotas?}` as the configuration would (the same problems, the same
/// names; `policies` required, `null` for the others is the same as leaving them out, no other field). Every problem
/// is in the error, and nothing is changed.
pub fn replacement(body: Value) -> ManageResult<Replacement> {
    let Value::Object(mut body) = body else {
        return Err(ManageError::Validation("the request body must be a JSON object".into()));
    };
    if let Some(other) = body.keys().find(|k| !matches!(k.as_str(), "policies" | "policy_default" | "quotas")) {
        return Err(ManageError::Validation(format!("{other}: the body has only policies, policy_default and quotas")));
    }
    body.retain(|_, value| !value.is_null());
    if !body.contains_key("policies") {
        return Err(ManageError::Validation("policies: is required (a list of rules, maybe empty)".into()));
    }
    let (file, _, problems) = decode(Value::Object(body));
    if !problems.is_empty() {
        return Err(ManageError::Invalid(problems));
    }
    let common = file.common_mcp_gateway_config.unwrap_or_default();
    Ok(Replacement {
        policies: common.policies.unwrap_or_default(),
        policy_default: common.policy_default,
        quotas: common.quotas,
    })
}

/// Writes `replacement` into `file` (inside `ConfigStore::update`, which validates the whole configuration again
/// and applies it); answers the rules and quotas as they now are ([`rules`]).
pub fn replace(file: &mut ConfigFile, replacement: Replacement) -> ManageResult {
    let common = file.common_mcp_gateway_config.get_or_insert_with(Default::default);
    common.policies = Some(replacement.policies);
    if let Some(default) = replacement.policy_default {
        common.policy_default = Some(default);
    }
    if let Some(quotas) = replacement.quotas {
        common.quotas = Some(quotas);
    }
    rules(file)
}

/// A record's `timestamp` (UTC, written without a zone: `2026-12-01T10:00:00.123456`; one with a zone is read too).
pub(super) fn recorded_at(text: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(text).ok().or_else(|| {
        let naive = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f").ok()?;
        Some(naive.and_utc().fixed_offset())
    })
}

/// What a replayed call met, or meets under the proposal.
fn outcome(error_code: Option<&str>) -> &'static str {
    match error_code {
        Some("POLICY_DENIED") => "deny",
        Some("QUOTA_EXCEEDED") => "quota_exceeded",
        _ => "allow",
    }
}

/// Replays the audit log at `audit` under `proposal` (see the module documentation).
pub fn simulate(snapshot: &Snapshot, audit: Option<&Path>, proposal: &Proposal) -> ManageResult<Value> {
    let Some(audit) = audit else {
        return Err(ManageError::Validation(
            "the audit log is off (audit_log.enabled): there are no audited decisions to replay".into(),
        ));
    };
    let records = last_calls(audit, proposal.last)?;
    let book = &proposal.book;
    let current = &snapshot.policies;
    let mut counters = meter::Counters::default();
    let (mut evaluated, mut undecided) = (0usize, 0usize);
    let mut changed = Vec::new();
    for record in &records {
        let text = |field: &str| record.get(field).and_then(Value::as_str).unwrap_or_default();
        let Some(target) = record.get("target").filter(|t| t.is_object()) else {
            undecided += 1;
            continue;
        };
        let kind = target.get("kind").and_then(Value::as_str).unwrap_or("tool");
        let (project_id, user_id) = (text("project_id"), text("user_id"));
        let config_id = snapshot.file.projects.get(project_id).and_then(|p| p.mcp_config_id.as_deref());
        let kept = record.get("principal");
        let list = |field: &str| -> Vec<&str> {
            let items = kept.and_then(|p| p.get(field)).and_then(Value::as_array);
            items.map(|items| items.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
        };
        let (groups, roles, scopes) = (list("groups"), list("roles"), list("scopes"));
        let email = snapshot.file.users.get(user_id).map_or("", |u| u.email.as_str());
        let no_claims = Map::new();
        let principal = policy::principal(&policy::Who {
            user_id,
            email,
            project_id,
            key_id: text("key_id"),
            auth: kept.and_then(|p| p.get("auth")).and_then(Value::as_str).unwrap_or("apikey"),
            claims: &no_claims,
            groups: &groups,
            roles: &roles,
            scopes: &scopes,
        });
        let empty = Value::Object(Map::new());
        let method = match record.get("event").and_then(Value::as_str) {
            Some("prompt_get") => "prompts/get",
            Some("resource_read") => "resources/read",
            _ => "tools/call",
        };
        let when = record.get("timestamp").and_then(Value::as_str).and_then(recorded_at);
        let now = when.unwrap_or_else(|| chrono::Utc::now().fixed_offset());
        let input = Input {
            principal: &principal,
            target: &policy::Target {
                kind,
                server: text("server_name"),
                name: text("tool_name"),
                exposed_name: target.get("exposed_name").and_then(Value::as_str).unwrap_or(text("tool_name")),
                annotations: target.get("annotations").unwrap_or(&empty),
            },
            // Without `args`: the record keeps none, so a rule that needs them cannot be decided (see `replay`).
            request: Some(policy::Request { method, args: None }),
            now,
        };
        let mut scope = Scope::new(&input);
        let rules: Vec<_> = book.rules(None, "").chain(current.scoped(config_id, project_id)).collect();
        let default_allow = if proposal.default { book.default_allow } else { current.default_allow };
        let Some((allowed, rule)) = replay(&mut scope, &rules, default_allow) else {
            undecided += 1;
            continue;
        };
        evaluated += 1;
        let before = outcome(record.get("error_code").and_then(Value::as_str));
        let (mut after, mut by) = (if allowed { "allow" } else { "deny" }, rule.map(|r| r.name.clone()));
        if after == "allow" {
            if proposal.quotas {
                let at = now.with_timezone(&chrono::Utc);
                let charges: Vec<Charge> = book
                    .quotas
                    .iter()
                    .filter(|q| q.when.as_ref().is_none_or(|w| scope.matches(w)))
                    .map(|q| Charge::new(q, meter::subject(q.per, text("key_id"), user_id, project_id), at))
                    .collect();
                let micros = at.timestamp_micros().max(0) as u64;
                if let Err(over) = counters.admit(&charges, micros) {
                    (after, by) = ("quota_exceeded", Some(over.quota));
                }
            } else if before == "quota_exceeded" {
                (after, by) = ("quota_exceeded", record.get("quota").and_then(Value::as_str).map(str::to_string));
            }
        }
        if before != after {
            changed.push(json!({
                "seq": record.get("seq"),
                "event": record.get("event"),
                "timestamp": record.get("timestamp"),
                "principal": {"user_id": user_id, "key_id": text("key_id"), "project_id": project_id},
                "target": {"kind": kind, "server": text("server_name"), "name": text("tool_name")},
                "before": before,
                "after": after,
                "rule": by,
            }));
        }
    }
    Ok(json!({
        "evaluated": evaluated,
        "undecided": undecided,
        "changed_count": changed.len(),
        "changed": changed,
    }))
}

/// The decision of `rules` in `scope` without the call's arguments: `(allowed, the deciding rule)`, or `None` when a
/// rule that reads `request` needed them to decide. A rule that fails otherwise fails closed, as at a call.
fn replay<'r>(scope: &mut Scope, rules: &[&'r Rule], default_allow: bool) -> Option<(bool, Option<&'r Rule>)> {
    for rule in rules {
        match scope.evaluate(rule) {
            Some(true) => return Some((rule.allow, Some(rule))),
            Some(false) => {}
            None if rule.reads_request => return None,
            None if !rule.allow => return Some((false, Some(rule))),
            None => {}
        }
    }
    Some((default_allow, None))
}

/// The last `last` records of calls in the audit log at `path` (calls refused before any rule applied left out), in
/// the order written; memory is bounded by `last`.
fn last_calls(path: &Path, last: usize) -> ManageResult<Vec<Map<String, Value>>> {
    let file = std::fs::File::open(path)
        .map_err(|e| ManageError::Internal(format!("the audit log {} cannot be read: {e}", path.display())))?;
    let mut kept: VecDeque<Map<String, Value>> = VecDeque::with_capacity(last.min(4096));
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        let Ok(record) = serde_json::from_str::<Map<String, Value>>(&line) else { continue };
        let event = record.get("event").and_then(Value::as_str).unwrap_or_default();
        let code = record.get("error_code").and_then(Value::as_str).unwrap_or_default();
        if !CALL_EVENTS.contains(&event) || BEFORE_RULES.contains(&code) {
            continue;
        }
        if kept.len() == last {
            kept.pop_front();
        }
        kept.push_back(record);
    }
    Ok(kept.into())
}

/// How many rules and quotas a compiled book holds, for `mcpgw policy check`.
pub fn counts(book: &PolicyBook) -> HashMap<&'static str, usize> {
    HashMap::from([("policies", book.len()), ("quotas", book.quotas.len())])
}
