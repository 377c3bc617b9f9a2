//! The review of what a server offers besides its tools (contract 14): its prompts, resources and resource templates
//! are pinned and scanned as its tools are (`gateway/tools/review.rs`), each over the whole object as the server sent
//! it (`config/pins.rs`, `guardrails/tool_scan.rs`).
//!
//! Prompts, resources and templates are not cached: every listing asks the server, so every listing is reviewed,
//! before curation and the output guardrails ([`super::listing::offered`]), over the server's whole list (pins belong
//! to the server, not to a project). Pins live in the server entry: `prompt_pins` by prompt name, `resource_pins` by
//! resource `uri` and by template `uriTemplate` (one map: a URI template is never a URI, its `{` cannot be in one).
//! A kind the entry has no pins of yet is pinned at its first listing (trust on first use), written into the file or
//! kept in memory when the file is read-only; after that a changed or a new item is logged, counted and audited, and
//! under `tool_pinning: "enforce"` left out of the listing, so `prompts/get`, `resources/read` and completions, which
//! route through the same listings, do not find it either. A finding of the scanner does the same under
//! `tool_scan: "block"`. Since a client may list as often as it likes, a listing logs, counts and audits only what
//! differs from the last listing of the same server (the [`OfferReview`] kept in the pin book), not the same change
//! again.

use indexmap::IndexMap;
use serde_json::Value;

use super::listing::Offered;
use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::config::pins::{OfferReview, PinRow, PinStatus, pin_of};
use crate::config::settings::{PinMode, ScanMode};
use crate::gateway::GatewayContext;
use crate::gateway::tools::review::{sibling_tool_names, summarised};
use crate::guardrails::tool_scan;
use crate::upstream::PoolKey;

/// How one kind of offer is named, keyed and pinned.
#[derive(Clone, Copy)]
struct Kind {
    /// `prompt`, `resource` or `template`: in logs, audit events and the pin book.
    noun: &'static str,
    /// The field that keys an item in its pins.
    key: &'static str,
    /// The server entry's field its pins are kept in.
    pins: &'static str,
}

fn kind_of(offered: Offered) -> Kind {
    match offered {
        Offered::Prompt => Kind { noun: "prompt", key: "name", pins: "prompt_pins" },
        Offered::Resource => Kind { noun: "resource", key: "uri", pins: "resource_pins" },
        Offered::Template => Kind { noun: "template", key: "uriTemplate", pins: "resource_pins" },
    }
}

impl Kind {
    /// Whether `key`, a key of this kind's pins map, is one of this kind's (resources and templates share a map).
    fn owns(self, key: &str) -> bool {
        match self.noun {
            "resource" => !key.contains('{'),
            "template" => key.contains('{'),
            _ => true,
        }
    }

    /// The pins of this kind in `entry`, or kept in memory for it.
    fn pinned(self, ctx: &GatewayContext, config_id: &str, entry: &ServerEntry) -> Option<IndexMap<String, String>> {
        let in_file = if self.pins == "prompt_pins" { &entry.prompt_pins } else { &entry.resource_pins };
        in_file.clone().or_else(|| ctx.pins.offers_in_memory(config_id, &entry.server_name, self.pins))
    }
}

/// Reviews `items`, the whole list of one kind that `entry`'s server just offered: returns them without those it
/// quarantines.
pub fn review(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
    offered: Offered,
    items: Vec<Value>,
) -> Vec<Value> {
    let settings = &identity.snapshot.settings;
    let (pinning, scanning) = (settings.tool_pinning, settings.tool_scan);
    if pinning == PinMode::Off && scanning == ScanMode::Off {
        return items;
    }
    let kind = kind_of(offered);
    let config_id = identity.mcp_config_id.as_deref().unwrap_or_default();
    let key_of = |item: &Value| item.get(kind.key).and_then(Value::as_str).unwrap_or_default().to_string();
    // Servers a remote authentication service supplied have no entry in the file to pin them in.
    let rows = if pinning == PinMode::Off || identity.servers.is_some() {
        Vec::new()
    } else {
        let current: Vec<(String, String, &Value)> = items.iter().map(|i| (key_of(i), pin_of(i), i)).collect();
        pin_rows(ctx, config_id, entry, kind, &current)
    };
    let findings = if scanning == ScanMode::Off {
        Vec::new()
    } else {
        let key = PoolKey::new(config_id.to_string(), entry.server_name.clone());
        let siblings = sibling_tool_names(ctx, &key);
        let mut findings = Vec::new();
        for item in &items {
            for finding in tool_scan::scan(std::slice::from_ref(item), &siblings) {
                findings.push((key_of(item), finding.kind, finding.excerpt));
            }
        }
        findings
    };
    let mut quarantined: Vec<&str> = Vec::new();
    if pinning == PinMode::Enforce {
        let moved = rows.iter().filter(|r| matches!(r.status, PinStatus::Changed | PinStatus::New));
        quarantined.extend(moved.map(|r| r.tool_name.as_str()));
    }
    if scanning == ScanMode::Block {
        quarantined.extend(findings.iter().map(|(key, _, _)| key.as_str()));
    }
    let mut quarantined: Vec<String> = quarantined.into_iter().map(str::to_string).collect();
    quarantined.sort_unstable();
    quarantined.dedup();
    let review = OfferReview { rows, findings, quarantined };
    let before = ctx.pins.record_offers(config_id, &entry.server_name, kind.noun, review.clone());
    report(ctx, identity, entry, kind, &review, before.as_ref(), &review.quarantined);
    if review.quarantined.is_empty() {
        return items;
    }
    items.into_iter().filter(|item| review.quarantined.binary_search(&key_of(item)).is_err()).collect()
}

/// Whether the last listing of `offered` of `entry`'s server quarantined an item `held` picks out (by its key).
pub fn quarantined(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
    offered: Offered,
    held: impl Fn(&str) -> bool,
) -> bool {
    let config_id = identity.mcp_config_id.as_deref().unwrap_or_default();
    quarantined_in(ctx, config_id, &entry.server_name, offered, held)
}

/// [`quarantined`] for server `server_name` of MCP config `config_id`, whoever asks.
pub fn quarantined_in(
    ctx: &GatewayContext,
    config_id: &str,
    server_name: &str,
    offered: Offered,
    held: impl Fn(&str) -> bool,
) -> bool {
    ctx.pins.offer_quarantined(config_id, server_name, kind_of(offered).noun, held)
}

/// Each item of `current` (key, pin, definition) against the pins of `kind`; a kind with no pins yet is pinned now.
fn pin_rows(
    ctx: &GatewayContext,
    config_id: &str,
    entry: &ServerEntry,
    kind: Kind,
    current: &[(String, String, &Value)],
) -> Vec<PinRow> {
    let stored = kind.pinned(ctx, config_id, entry);
    // Resources and templates share a map, each kind pinned at its own first listing (while the map holds none of its
    // keys); a key already there is compared whatever its shape, so a URI that looks like a template cannot dodge its
    // pin.
    let first_use = match &stored {
        None => true,
        Some(map) => kind.pins == "resource_pins" && !map.keys().any(|key| kind.owns(key)),
    };
    let pinned = stored.clone().unwrap_or_default();
    let mut rows = Vec::with_capacity(current.len());
    let mut pinned_now = IndexMap::new();
    for (key, pin, definition) in current {
        let status = match pinned.get(key) {
            Some(approved) if approved == pin => PinStatus::Pinned,
            Some(_) => PinStatus::Changed,
            None if first_use => {
                pinned_now.insert(key.clone(), pin.clone());
                PinStatus::Pinned
            }
            None => PinStatus::New,
        };
        // What an approved pin stands for is remembered, to be shown beside a later change. Only approved ones: a
        // server that changes an item at every listing must not grow this memory.
        if status == PinStatus::Pinned {
            ctx.pins.saw(pin, definition);
        }
        let mut row = PinRow {
            tool_name: key.clone(),
            pinned: pinned.get(key).cloned().or_else(|| (status == PinStatus::Pinned).then(|| pin.clone())),
            current: Some(pin.clone()),
            status,
            pinned_definition: None,
            current_definition: None,
        };
        if status != PinStatus::Pinned {
            row.current_definition = Some((*definition).clone());
            row.pinned_definition = pinned.get(key).and_then(|approved| ctx.pins.definition_of(approved));
        }
        rows.push(row);
    }
    for (key, approved) in pinned.iter().filter(|(key, _)| kind.owns(key)) {
        if !current.iter().any(|(k, _, _)| k == key) {
            let row = PinRow {
                tool_name: key.clone(),
                pinned: Some(approved.clone()),
                current: None,
                status: PinStatus::Missing,
                pinned_definition: None,
                current_definition: None,
            };
            rows.push(row);
        }
    }
    // An empty first list writes an empty map (whatever comes later is new); otherwise only new pins are written.
    if first_use && (stored.is_none() || !pinned_now.is_empty()) {
        pin_on_first_use(ctx, config_id, &entry.server_name, kind, pinned_now);
    }
    rows
}

/// Adds `pins` to the entry's pins of `kind` (never replacing one), in the file, or in memory when the file cannot be
/// written.
fn pin_on_first_use(ctx: &GatewayContext, config_id: &str, server: &str, kind: Kind, pins: IndexMap<String, String>) {
    let count = pins.len();
    let written = ctx.store.update_off_worker(|file, _| -> Result<bool, crate::config::WriteError> {
        let entry = file
            .mcp_configs
            .get_mut(config_id)
            .and_then(|config| config.mcp_config.iter_mut().find(|entry| entry.server_name == server));
        let Some(entry) = entry else { return Ok(false) };
        let map = if kind.pins == "prompt_pins" { &mut entry.prompt_pins } else { &mut entry.resource_pins };
        let Some(map) = map else {
            *map = Some(pins.clone());
            return Ok(true);
        };
        let before = map.len();
        for (key, pin) in &pins {
            map.entry(key.clone()).or_insert_with(|| pin.clone());
        }
        Ok(map.len() > before)
    });
    let outcome = match written {
        Ok(false) => return,
        Ok(true) => {
            tracing::info!(server_name = server, items = pins.len(), "{}s pinned on first use", kind.noun);
            "written"
        }
        Err(error) => {
            tracing::warn!(server_name = server, items = pins.len(), %error,
                "{}s pinned on first use in memory only: the configuration file could not be written", kind.noun);
            let mut kept = ctx.pins.offers_in_memory(config_id, server, kind.pins).unwrap_or_default();
            for (key, pin) in pins {
                kept.entry(key).or_insert(pin);
            }
            ctx.pins.keep_offers_in_memory(config_id, server, kind.pins, kept);
            "in_memory"
        }
    };
    let event = format!("{}s_pinned", kind.noun);
    ctx.audit.record_blocking(crate::audit::Event {
        event: &event,
        server_name: Some(server),
        outcome: Some(outcome),
        count: Some(count as u64),
        ..Default::default()
    });
}

/// Logs, counts and audits what `review` found that `before` (the last listing's review) had not: a record per item,
/// or one summary of each when more than `SUMMARY_OVER` (100) items have something to tell, at once or in the server's
/// reviews of the last minute (as a tool review does).
fn report(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
    kind: Kind,
    review: &OfferReview,
    before: Option<&OfferReview>,
    quarantined: &[String],
) {
    let server = entry.server_name.as_str();
    let rows = review.rows.iter().filter(|row| row.status != PinStatus::Pinned);
    let rows: Vec<&PinRow> = rows.filter(|row| !before.is_some_and(|b| b.rows.contains(row))).collect();
    let findings = review.findings.iter().filter(|f| !before.is_some_and(|b| b.findings.contains(f)));
    let findings: Vec<&(String, &'static str, String)> = findings.collect();
    let metrics = ctx.store.metrics();
    let mismatches = rows.iter().filter(|row| row.status != PinStatus::Missing).count();
    metrics.tool_pin_mismatches.with_label_values(&[server]).inc_by(mismatches as u64);
    for (_, finding_kind, _) in &findings {
        metrics.tool_scan_findings.with_label_values(&[server, finding_kind]).inc();
    }
    // One audit record: the event, the item it is about (none for a summary), a finding's kind, the outcome.
    let audit = |event: &str, item: Option<&str>, error_code: Option<&str>, outcome: &str, count: Option<u64>| {
        ctx.audit.record_blocking(crate::audit::Event {
            event,
            project_id: Some(&identity.project_id),
            server_name: Some(server),
            tool_name: item,
            outcome: Some(outcome),
            error_code,
            config_revision: Some(crate::audit::revision(&identity.snapshot.source_digest)),
            count,
            ..Default::default()
        })
    };
    let enforced = |item: &str| quarantined.iter().any(|q| q == item);
    let outcome = |item: &str| if enforced(item) { "quarantined" } else { "warned" };
    let mut items: Vec<&str> =
        rows.iter().map(|r| r.tool_name.as_str()).chain(findings.iter().map(|f| f.0.as_str())).collect();
    items.sort_unstable();
    items.dedup();
    if summarised(ctx, identity, server, items.len()) {
        let count = |status: PinStatus| rows.iter().filter(|r| r.status == status).count();
        let held = items.iter().filter(|item| enforced(item)).count();
        tracing::warn!(
            server_name = server,
            items = items.len(),
            changed = count(PinStatus::Changed),
            new = count(PinStatus::New),
            missing = count(PinStatus::Missing),
            findings = findings.len(),
            quarantined = held,
            "{} definitions changed on many at once (one summary)",
            kind.noun
        );
        let outcome = if held == 0 { "warned" } else { "quarantined" };
        audit(&format!("{}s_changed_summary", kind.noun), None, None, outcome, Some(items.len() as u64));
        return;
    }
    for row in rows {
        let (item, pinned, current) = (row.tool_name.as_str(), row.pinned.as_deref(), row.current.as_deref());
        let event = match row.status {
            PinStatus::Changed => {
                tracing::warn!(
                    server_name = server,
                    item,
                    pinned,
                    current,
                    enforced = enforced(item),
                    "{} definition changed",
                    kind.noun
                );
                format!("{}_definition_changed", kind.noun)
            }
            PinStatus::New => {
                tracing::warn!(server_name = server, item, current, enforced = enforced(item), "new {}", kind.noun);
                format!("{}_new", kind.noun)
            }
            PinStatus::Missing | PinStatus::Pinned => {
                tracing::warn!(server_name = server, item, pinned, "pinned {} missing", kind.noun);
                continue;
            }
        };
        audit(&event, Some(item), None, outcome(item), None);
    }
    for (item, finding_kind, excerpt) in findings {
        tracing::warn!(
            server_name = server,
            item,
            kind = finding_kind,
            excerpt,
            blocked = enforced(item),
            "{} definition finding",
            kind.noun
        );
        audit(&format!("{}_finding", kind.noun), Some(item), Some(finding_kind), outcome(item), None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_and_templates_share_a_map_by_the_shape_of_their_keys() {
        let (resource, template) = (kind_of(Offered::Resource), kind_of(Offered::Template));
        assert!(resource.owns("test://a") && !resource.owns("test://t/{id}"));
        assert!(template.owns("test://t/{id}") && !template.owns("test://a"));
        assert!(kind_of(Offered::Prompt).owns("anything{}"));
        assert_eq!((resource.pins, template.pins), ("resource_pins", "resource_pins"));
    }
}
