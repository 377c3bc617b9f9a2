//! Listings and completions on their way to the client (contract 14): what a server offers besides its tools
//! (prompts, resources, resource templates) and the values of `completion/complete`.
//!
//! Each item passes curation first: the server's and the project's `tool_filter` read a prompt by its name (the
//! project's filter by the exposed name, `{server_name}{sep}{name}`), a resource by its URI and a template by its URI
//! template (the project's filter by `{server_name}{sep}` and the URI), so a project filtered down to some tools of
//! one server sees nothing else of the others. Then the output guardrails of the server that offered it read every
//! string of the item; an item they block is left out (logged and counted as a block), as a blocked message is not
//! delivered. Completion values are checked one by one, and a blocked one is left out.
//!
//! A route that lists, reads or completes takes its items from here; the lookups that route a `prompts/get`,
//! `resources/read` or `completion/complete` read the same curated lists, so a hidden item is unknown there too.

use std::sync::Arc;

use serde_json::Value;

use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::gateway::GatewayContext;
use crate::gateway::exposure::filter::Curation;
use crate::gateway::exposure::policy;
use crate::gateway::middleware::guardrails::GuardrailLayer;
use crate::guardrails::provider::Provider;
use crate::guardrails::stage::CallGuard;

/// What kind of item a listing holds, and the field that names it for curation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offered {
    Prompt,
    Resource,
    Template,
}

impl Offered {
    fn field(self) -> &'static str {
        match self {
            Offered::Prompt => "name",
            Offered::Resource => "uri",
            Offered::Template => "uriTemplate",
        }
    }

    /// The kind of target authorization rules see (contract 17).
    fn policy_kind(self) -> policy::Kind {
        match self {
            Offered::Prompt => policy::Kind::Prompt,
            Offered::Resource => policy::Kind::Resource,
            Offered::Template => policy::Kind::Template,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Offered::Prompt => "prompt",
            Offered::Resource => "resource",
            Offered::Template => "resource template",
        }
    }
}

/// Whether `entry`'s server has an output policy (without one, listings pass as curation leaves them).
fn checks_output(entry: &ServerEntry) -> bool {
    entry.output_guardrails_policy.as_ref().is_some_and(|p| p.is_enabled())
}

/// The items of `entry`'s server that may reach `identity`: reviewed (pins and scan, over the whole list), curated,
/// then through the server's output guardrails.
pub async fn offered(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
    kind: Offered,
    items: Vec<Value>,
) -> Vec<Value> {
    let items = super::offer_review::review(ctx, identity, entry, kind, items);
    let curation = Curation::of(identity);
    let visible = |item: &Value| {
        item.get(kind.field()).and_then(Value::as_str).is_some_and(|name| curation.visible(entry, name))
            && policy::listed(identity, kind.policy_kind(), entry, item)
    };
    let mut items: Vec<Value> = items.into_iter().filter(visible).collect();
    if !checks_output(entry) {
        return items;
    }
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let guard = GuardrailLayer::of(ctx, identity, entry, &provider).guard();
    let blocked = blocked_items(&guard, &items).await;
    for at in blocked.iter().rev() {
        let item = items.remove(*at);
        let name = item.get(kind.field()).and_then(Value::as_str).unwrap_or("");
        tracing::warn!(server_name = %entry.server_name, item = %name,
            "a {} the output guardrails block is left out of the listing", kind.noun());
    }
    items
}

/// The places in `items` of those `guard`'s output policy blocks. The whole list is checked as one message first
/// (one call of a remote provider per listing); a blocked list is halved, and only blocked halves are looked into,
/// so a hostile server listing thousands of items with one bad one costs about twice the log of their number in
/// checks, not one per item. A blocked listing counts once in `mcpgw_guardrail_blocks_total` (and is logged once).
async fn blocked_items(guard: &CallGuard<'_>, items: &[Value]) -> Vec<usize> {
    let blocked_range = |range: std::ops::Range<usize>| guard.check_relayed(Value::Array(items[range].to_vec()));
    if items.is_empty() || blocked_range(0..items.len()).await.is_ok() {
        return Vec::new();
    }
    // Counted and logged once, as the listing's one block; its parts are looked into quietly.
    guard.quietly(true);
    let mut blocked = Vec::new();
    // Ranges known to be blocked, still to be narrowed down.
    let mut ranges = Vec::new();
    ranges.push(0..items.len());
    while let Some(range) = ranges.pop() {
        if range.len() == 1 {
            blocked.push(range.start);
            continue;
        }
        let middle = range.start + range.len() / 2;
        for half in [range.start..middle, middle..range.end] {
            if blocked_range(half.clone()).await.is_err() {
                ranges.push(half);
            }
        }
    }
    guard.quietly(false);
    blocked.sort_unstable();
    blocked
}

/// A `completion/complete` result of `entry`'s server as `identity` may see it: each value through the server's output
/// guardrails, a blocked one left out (and `total` with it).
pub async fn completion(ctx: &GatewayContext, identity: &Identity, entry: &ServerEntry, mut result: Value) -> Value {
    if !checks_output(entry) {
        return result;
    }
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let guard = GuardrailLayer::of(ctx, identity, entry, &provider).guard();
    if let Some(values) = result.pointer_mut("/completion/values").and_then(Value::as_array_mut) {
        let blocked = blocked_items(&guard, values).await;
        for at in blocked.iter().rev() {
            values.remove(*at);
        }
        let left_out = blocked.len() as u64;
        if left_out > 0 {
            tracing::warn!(server_name = %entry.server_name, left_out,
                "completion values the output guardrails block are left out");
            if let Some(total) = result.pointer_mut("/completion/total")
                && let Some(n) = total.as_u64()
            {
                *total = Value::from(n.saturating_sub(left_out));
            }
        }
    }
    // The rest of the result (its `_meta`, fields no revision defines) is output too: blocked, nothing is offered.
    match guard.check_relayed(result).await {
        Ok(result) => result,
        Err(_) => serde_json::json!({"completion": {"values": []}}),
    }
}

/// Tool definitions found by live discovery, through the server's output guardrails (contract 14), before they are
/// cached: a tool whose definition the policy blocks is withheld as a quarantined one is (never listed; a call of it
/// answers `TOOL_QUARANTINED`), and logged. Checked once per discovery, not per listing.
pub async fn discovered_tools(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
    tools: Arc<Vec<Value>>,
    quarantined: Arc<Vec<String>>,
) -> (Arc<Vec<Value>>, Arc<Vec<String>>) {
    if !checks_output(entry) {
        return (tools, quarantined);
    }
    let provider = ctx.guardrails.get(&identity.snapshot, Provider::from_snapshot);
    let guard = GuardrailLayer::of(ctx, identity, entry, &provider).guard();
    let mut withheld = Vec::new();
    for at in blocked_items(&guard, &tools).await {
        let name = tools[at].get("name").and_then(Value::as_str).unwrap_or("").to_string();
        tracing::warn!(server_name = %entry.server_name, tool_name = %name,
            "a tool whose definition the output guardrails block is withheld");
        withheld.push(name);
    }
    if withheld.is_empty() {
        return (tools, quarantined);
    }
    let kept = tools
        .iter()
        .filter(|t| !withheld.iter().any(|w| Some(w.as_str()) == t.get("name").and_then(Value::as_str)))
        .cloned()
        .collect();
    let mut all = quarantined.as_ref().clone();
    all.extend(withheld);
    (Arc::new(kept), Arc::new(all))
}
