//! The review of a server's tool definitions at each live discovery (contract section 11): the poisoning checks
//! (`guardrails/tool_scan.rs`) under `tool_scan`. What the review quarantines is left out of the tools every listing and
//! every call path reads (the tool cache), and remembered by name, so that a call of it answers `TOOL_QUARANTINED`
//! rather than "no such tool".

use std::sync::Arc;

use serde_json::Value;

use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::config::settings::ScanMode;
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
    if mode == ScanMode::Off {
        return Reviewed { tools: Arc::new(tools), ..Reviewed::default() };
    }
    let findings = tool_scan::scan(&tools, &sibling_tool_names(ctx, key));
    let server = entry.server_name.as_str();
    for finding in &findings {
        ctx.store.metrics().tool_scan_findings.with_label_values(&[server, finding.kind]).inc();
        tracing::warn!(server_name = server, tool_name = %finding.tool_name, kind = finding.kind,
            excerpt = %finding.excerpt, blocked = mode == ScanMode::Block, "tool definition finding");
    }
    let mut quarantined: Vec<String> = Vec::new();
    if mode == ScanMode::Block {
        quarantined = findings.iter().map(|f| f.tool_name.clone()).collect();
        quarantined.dedup();
    }
    let tools = if quarantined.is_empty() {
        tools
    } else {
        tools
            .into_iter()
            .filter(|t| !quarantined.iter().any(|q| t.get("name").and_then(Value::as_str) == Some(q)))
            .collect()
    };
    Reviewed { tools: Arc::new(tools), findings: Arc::new(findings), quarantined: Arc::new(quarantined) }
}

/// The tool names the other servers of the same configuration have shown so far (in the tool cache), for shadowing.
fn sibling_tool_names(ctx: &GatewayContext, key: &PoolKey) -> Vec<String> {
    let mut names = Vec::new();
    ctx.tool_cache.for_each(|other, cached| {
        if other.mcp_config_id == key.mcp_config_id && other.server_name != key.server_name {
            names.extend(cached.tools.iter().filter_map(|t| t.get("name").and_then(Value::as_str)).map(str::to_string));
        }
    });
    names
}
