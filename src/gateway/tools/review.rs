//! The review of a server's tool definitions at each live discovery (contract sections 11 and 14): the poisoning
//! checks (`guardrails/tool_scan.rs`) under `tool_scan`, and the pins (`config/pins.rs`) under `tool_pinning`, both
//! over every field of each definition as the server sent it. A server without pins is pinned now (trust on first
//! use): the pins are written into its entry in the configuration file, or kept in memory when the file cannot be
//! written. A server with pins has each tool compared: a changed or a new definition is logged, counted and, under
//! `enforce`, quarantined until approved. What the review quarantines is left out of the tools every listing and every
//! call path reads (the tool cache), and remembered by name, so that a call of it answers `TOOL_QUARANTINED` rather
//! than "no such tool".
//! What a review finds is logged and audited per tool, or, when more than [`SUMMARY_OVER`] tools have something to
//! tell (at once, or in the server's reviews of the last minute), in one summary record of each.

use std::sync::Arc;

use serde_json::Value;

use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::config::pins::{PinRow, PinStatus, pin_of};
use crate::config::settings::{PinMode, ScanMode};
use crate::gateway::GatewayContext;
use crate::guardrails::tool_scan::{self, Finding};
use crate::upstream::PoolKey;

/// What the review decided about one server's tools.
#[derive(Clone, Debug, Default)]
pub struct Reviewed {
    /// The tools in service (quarantined ones left out).
    pub tools: Arc<Vec<Value>>,
    pub findings: Arc<Vec<Finding>>,
    /// The names of the tools left out.
    pub quarantined: Arc<Vec<String>>,
    /// The pins this review wrote into the server's entry (trust on first use): the entry the tools are cached with
    /// carries them, so the reload that the write causes keeps the cache.
    pub pinned_now: Option<indexmap::IndexMap<String, String>>,
}

/// Reviews the definitions `tools` just discovered on `entry`'s server.
pub fn review(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
    key: &PoolKey,
    tools: Vec<Value>,
) -> Reviewed {
    let mode = identity.snapshot.settings.tool_scan;
    let (mut quarantined, pinned_now, mut notices) = pin_review(ctx, identity, entry, key, &tools);
    let findings =
        if mode == ScanMode::Off { Vec::new() } else { tool_scan::scan(&tools, &sibling_tool_names(ctx, key)) };
    let server = entry.server_name.as_str();
    for finding in &findings {
        ctx.store.metrics().tool_scan_findings.with_label_values(&[server, finding.kind]).inc();
        notices.push(Notice {
            tool: finding.tool_name.clone(),
            quarantined: mode == ScanMode::Block,
            what: What::Finding { kind: finding.kind, excerpt: finding.excerpt.clone() },
        });
    }
    tell(ctx, identity, server, &notices);
    if mode == ScanMode::Block {
        quarantined.extend(findings.iter().map(|f| f.tool_name.clone()));
    }
    quarantined.sort();
    quarantined.dedup();
    let tools = if quarantined.is_empty() {
        tools
    } else {
        tools
            .into_iter()
            .filter(|t| !quarantined.iter().any(|q| t.get("name").and_then(Value::as_str) == Some(q)))
            .collect()
    };
    Reviewed { tools: Arc::new(tools), findings: Arc::new(findings), quarantined: Arc::new(quarantined), pinned_now }
}

/// The tool names the other servers of the same configuration have shown so far (in the tool cache), for shadowing
/// (also by the review of prompts and resources, `gateway/boundary/offer_review.rs`).
pub(crate) fn sibling_tool_names(ctx: &GatewayContext, key: &PoolKey) -> Vec<String> {
    let mut names = Vec::new();
    ctx.tool_cache.for_each(|other, cached| {
        if other.mcp_config_id == key.mcp_config_id && other.server_name != key.server_name {
            names.extend(cached.tools.iter().filter_map(|t| t.get("name").and_then(Value::as_str)).map(str::to_string));
        }
    });
    names
}

/// What [`pin_review`] found: the tools to quarantine, the pins written when this was the first use, and what to
/// tell the log and the audit log.
type PinReview = (Vec<String>, Option<indexmap::IndexMap<String, String>>, Vec<Notice>);

/// Compares `tools` with the pins of `entry` (pinning them on first use).
fn pin_review(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
    key: &PoolKey,
    tools: &[Value],
) -> PinReview {
    let mode = identity.snapshot.settings.tool_pinning;
    // Servers a remote authentication service supplied have no entry in the file to pin them in.
    if mode == PinMode::Off || identity.servers.is_some() {
        return (Vec::new(), None, Vec::new());
    }
    let (config_id, server) = (key.mcp_config_id.as_str(), entry.server_name.as_str());
    let current: Vec<(&str, String, &Value)> = tools
        .iter()
        .map(|tool| (tool.get("name").and_then(Value::as_str).unwrap_or_default(), pin_of(tool), tool))
        .collect();
    let pinned = entry.pinned_tools.clone().or_else(|| ctx.pins.in_memory(config_id, server));
    let Some(pinned) = pinned else {
        let written = pin_on_first_use(ctx, config_id, server, &current);
        for (_, pin, tool) in &current {
            ctx.pins.saw(pin, tool);
        }
        let rows =
            current.iter().map(|(name, pin, _)| row(name, Some(pin), Some(pin), PinStatus::Pinned, None)).collect();
        ctx.pins.record(config_id, server, rows);
        return (Vec::new(), written, Vec::new());
    };
    let mut rows = Vec::new();
    let mut quarantined = Vec::new();
    let mut notices = Vec::new();
    for (name, pin, tool) in &current {
        let status = match pinned.get(*name) {
            Some(approved) if approved == pin => PinStatus::Pinned,
            Some(_) => PinStatus::Changed,
            None => PinStatus::New,
        };
        if status != PinStatus::Pinned {
            ctx.store.metrics().tool_pin_mismatches.with_label_values(&[server]).inc();
            let quarantine = mode == PinMode::Enforce;
            let what = match pinned.get(*name) {
                Some(approved) => What::Changed { pinned: approved.clone(), current: pin.clone() },
                None => What::New { current: pin.clone() },
            };
            notices.push(Notice { tool: name.to_string(), quarantined: quarantine, what });
            if quarantine {
                quarantined.push(name.to_string());
            }
        }
        // What each pin stands for is remembered, so that a later change can be shown beside what was approved.
        ctx.pins.saw(pin, tool);
        let mut entry = row(name, pinned.get(*name).map(String::as_str), Some(pin), status, None);
        if status != PinStatus::Pinned {
            entry.current_definition = Some((*tool).clone());
            entry.pinned_definition = pinned.get(*name).and_then(|approved| ctx.pins.definition_of(approved));
        }
        rows.push(entry);
    }
    for (name, approved) in &pinned {
        if !current.iter().any(|(n, _, _)| n == name) {
            notices.push(Notice {
                tool: name.clone(),
                quarantined: false,
                what: What::Missing { pinned: approved.clone() },
            });
            rows.push(row(name, Some(approved), None, PinStatus::Missing, None));
        }
    }
    ctx.pins.record(config_id, server, rows);
    (quarantined, None, notices)
}

/// Above this many tools with something to tell in one review, the log and the audit log get one summary each rather
/// than a record per tool (contract section 14): a server that changes thousands of definitions at once must not
/// flood either.
pub const SUMMARY_OVER: usize = 100;

/// Whether what a review of `server` found about `items` items is told in one summary: more than [`SUMMARY_OVER`]
/// items at once, or more than that many items' records of that server's reviews in the last minute.
pub fn summarised(ctx: &GatewayContext, identity: &Identity, server: &str, items: usize) -> bool {
    let config_id = identity.mcp_config_id.as_deref().unwrap_or_default();
    items > SUMMARY_OVER || !ctx.pins.may_tell(config_id, server, items, SUMMARY_OVER)
}

/// Something one review found about one tool.
struct Notice {
    tool: String,
    /// Left out of service until approved.
    quarantined: bool,
    what: What,
}

enum What {
    Changed { pinned: String, current: String },
    New { current: String },
    Missing { pinned: String },
    Finding { kind: &'static str, excerpt: String },
}

/// Logs and audits what one review of `server` found: a record per tool, or one summary of each when more than
/// [`SUMMARY_OVER`] tools have something to tell.
fn tell(ctx: &GatewayContext, identity: &Identity, server: &str, notices: &[Notice]) {
    let revision = || Some(crate::audit::revision(&identity.snapshot.source_digest));
    let mut tools: Vec<&str> = notices.iter().map(|n| n.tool.as_str()).collect();
    tools.sort_unstable();
    tools.dedup();
    if summarised(ctx, identity, server, tools.len()) {
        let count = |f: fn(&What) -> bool| notices.iter().filter(|n| f(&n.what)).count();
        let mut quarantined: Vec<&str> = notices.iter().filter(|n| n.quarantined).map(|n| n.tool.as_str()).collect();
        quarantined.sort_unstable();
        quarantined.dedup();
        tracing::warn!(
            server_name = server,
            tools = tools.len(),
            changed = count(|w| matches!(w, What::Changed { .. })),
            new = count(|w| matches!(w, What::New { .. })),
            missing = count(|w| matches!(w, What::Missing { .. })),
            findings = count(|w| matches!(w, What::Finding { .. })),
            quarantined = quarantined.len(),
            "tool definitions changed on many tools at once (one summary; the tool-pins listing shows each)"
        );
        ctx.audit.record_blocking(crate::audit::Event {
            event: "tools_changed_summary",
            project_id: Some(&identity.project_id),
            server_name: Some(server),
            outcome: Some(if quarantined.is_empty() { "warned" } else { "quarantined" }),
            config_revision: revision(),
            count: Some(tools.len() as u64),
            ..Default::default()
        });
        return;
    }
    for notice in notices {
        let (tool_name, enforced) = (notice.tool.as_str(), notice.quarantined);
        let outcome = Some(if enforced { "quarantined" } else { "warned" });
        let (event, error_code) = match &notice.what {
            What::Changed { pinned, current } => {
                tracing::warn!(server_name = server, tool_name, %pinned, %current, enforced, "tool definition changed");
                ("tool_definition_changed", None)
            }
            What::New { current } => {
                tracing::warn!(server_name = server, tool_name, %current, enforced, "new tool");
                ("tool_new", None)
            }
            What::Missing { pinned } => {
                tracing::warn!(server_name = server, tool_name, %pinned, "pinned tool missing");
                continue;
            }
            What::Finding { kind, excerpt } => {
                tracing::warn!(server_name = server, tool_name, kind, %excerpt, blocked = enforced,
                    "tool definition finding");
                ("tool_finding", Some(*kind))
            }
        };
        ctx.audit.record_blocking(crate::audit::Event {
            event,
            project_id: Some(&identity.project_id),
            server_name: Some(server),
            tool_name: Some(tool_name),
            outcome,
            error_code,
            config_revision: revision(),
            ..Default::default()
        });
    }
}

fn row(
    name: &str,
    pinned: Option<&str>,
    current: Option<&str>,
    status: PinStatus,
    definition: Option<Value>,
) -> PinRow {
    PinRow {
        tool_name: name.to_string(),
        pinned: pinned.map(str::to_string),
        current: current.map(str::to_string),
        status,
        pinned_definition: None,
        current_definition: definition,
    }
}

/// Writes the pins of `current` into the server's entry (only if it still has none), or keeps them in memory when the
/// file cannot be written; returns the pins when this call wrote them.
fn pin_on_first_use(
    ctx: &GatewayContext,
    config_id: &str,
    server: &str,
    current: &[(&str, String, &Value)],
) -> Option<indexmap::IndexMap<String, String>> {
    let pins: indexmap::IndexMap<String, String> =
        current.iter().map(|(name, pin, _)| (name.to_string(), pin.clone())).collect();
    let written = ctx.store.update_off_worker(|file, _| -> Result<bool, crate::config::WriteError> {
        let entry = file
            .mcp_configs
            .get_mut(config_id)
            .and_then(|config| config.mcp_config.iter_mut().find(|entry| entry.server_name == server));
        match entry {
            Some(entry) if entry.pinned_tools.is_none() => {
                entry.pinned_tools = Some(pins.clone());
                Ok(true)
            }
            _ => Ok(false),
        }
    });
    ctx.audit.record_blocking(crate::audit::Event {
        event: "tools_pinned",
        server_name: Some(server),
        outcome: Some(if written.is_ok() { "written" } else { "in_memory" }),
        count: Some(pins.len() as u64),
        ..Default::default()
    });
    match written {
        Ok(wrote) => {
            tracing::info!(server_name = server, tools = pins.len(), "tools pinned on first use");
            wrote.then_some(pins)
        }
        Err(error) => {
            tracing::warn!(server_name = server, tools = pins.len(), %error,
                "tools pinned on first use in memory only: the configuration file could not be written");
            ctx.pins.keep_in_memory(config_id, server, pins);
            None
        }
    }
}
