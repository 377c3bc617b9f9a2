//! The upstream tools a caller sees in transparent mode, under their exposed names (contract section 8).
//!
//! Built from the tool cache on every `tools/list` and `tools/call` (discovery's order: cache, the entry's `tools`,
//! live), so it never lags the configuration or the cache: each server's tools as curation lets the caller see them
//! ([`discover_visible`]), named by [`names::expose`] (names claimed twice, or a `gw_*` name, are left out and
//! logged). A server that cannot be reached is left out and logged; it does not fail the list.
//!
//! A call looks its exact name up here, never splitting it at the separator. To find it without discovering every
//! server, it asks only the servers that could have made the name: those whose prefix begins it (an empty prefix
//! begins every name). Every claimant of a name is among them, so a name claimed twice is still refused.

use serde_json::Value;

use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::gateway::GatewayContext;
use crate::gateway::exposure::names::{self, MAX_NAME};
use crate::gateway::tools::{discover_visible, servers};
use crate::telemetry::metrics::GW_TOOLS;

/// One upstream tool as the caller sees it.
pub struct ExposedTool<'a> {
    /// Its exposed name.
    pub name: String,
    /// The server entry it belongs to.
    pub entry: &'a ServerEntry,
    /// The upstream's definition, its `name` the upstream's own.
    pub definition: Value,
}

impl ExposedTool<'_> {
    /// The upstream's own name of the tool.
    pub fn upstream_name(&self) -> &str {
        self.definition.get("name").and_then(Value::as_str).unwrap_or("")
    }

    /// The definition a client is shown: the upstream's, under the exposed name.
    pub fn listed(mut self) -> Value {
        if let Some(fields) = self.definition.as_object_mut() {
            fields.insert("name".into(), Value::String(self.name));
        }
        self.definition
    }
}

/// The prefix of `entry`'s exposed names in a configuration whose separator is `separator`.
pub fn prefix(entry: &ServerEntry, separator: &str) -> String {
    names::prefix_of(&entry.server_name, entry.tool_prefix.as_deref(), separator)
}

/// Whether a server whose names begin with `prefix` could have made the exposed name `name` (names too long or
/// with characters MCP refuses are cut, so only what survives the cut is compared).
fn could_make(prefix: &str, name: &str) -> bool {
    let kept = prefix.char_indices().nth(MAX_NAME - 9).map_or(prefix, |(at, _)| &prefix[..at]);
    name.starts_with(kept)
}

/// The upstream tools `identity` sees, in configuration order; with `only`, just what could be named `only`.
pub async fn tools<'a>(
    ctx: &GatewayContext,
    identity: &'a Identity,
    session: Option<&str>,
    only: Option<&str>,
) -> Vec<ExposedTool<'a>> {
    let Ok(entries) = servers(identity) else { return Vec::new() };
    let separator = identity.snapshot.exposure(identity.mcp_config_id.as_deref()).separator;
    let mut found: Vec<(&'a ServerEntry, String, Value)> = Vec::new();
    for entry in entries {
        let prefix = prefix(entry, &separator);
        if only.is_some_and(|name| !could_make(&prefix, name)) {
            continue;
        }
        match discover_visible(ctx, identity, session, entry).await {
            Ok(discovered) => {
                for tool in discovered.tools.iter() {
                    found.push((entry, prefix.clone(), tool.clone()));
                }
            }
            Err(failure) => tracing::warn!(
                server_name = %entry.server_name,
                error_code = %failure.code,
                error = %failure.message,
                "transparent mode: the server's tools are left out of the list (discovery failed)"
            ),
        }
    }
    let claims = found.iter().map(|(entry, prefix, tool)| {
        (entry.server_name.as_str(), prefix.as_str(), tool.get("name").and_then(Value::as_str).unwrap_or(""))
    });
    let (exposed, collisions) = names::expose(claims, &GW_TOOLS);
    for collision in &collisions {
        let claimants: Vec<String> = collision
            .claimants
            .iter()
            .map(
                |(server, tool)| {
                    if server.is_empty() { format!("the gateway's {tool}") } else { format!("{server}/{tool}") }
                },
            )
            .collect();
        tracing::warn!(
            name = %collision.name,
            claimants = %claimants.join(", "),
            "transparent mode: an exposed name is claimed more than once; no claimant is listed or callable under it"
        );
    }
    // `expose` keeps the order of what it was given, so the two lists are walked side by side.
    let mut listed = Vec::with_capacity(exposed.len());
    let mut rest = found.into_iter();
    for one in exposed {
        for (entry, _, definition) in rest.by_ref() {
            let upstream = definition.get("name").and_then(Value::as_str).unwrap_or("");
            if entry.server_name == one.server && upstream == one.tool {
                listed.push(ExposedTool { name: one.name, entry, definition });
                break;
            }
        }
    }
    listed
}

/// The tool exposed as `name`, if `identity` may see one.
pub async fn find<'a>(
    ctx: &GatewayContext,
    identity: &'a Identity,
    session: Option<&str>,
    name: &str,
) -> Option<ExposedTool<'a>> {
    tools(ctx, identity, session, Some(name)).await.into_iter().find(|tool| tool.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_servers_whose_prefix_begins_the_name_could_have_made_it() {
        assert!(could_make("github__", "github__create_issue"));
        assert!(!could_make("gitlab__", "github__create_issue"));
        assert!(could_make("", "anything"));
        let long = "p".repeat(200);
        let cut = names::exposed_name(&long, "tool");
        assert!(could_make(&long, &cut), "a name cut to 128 characters still begins with what is left of the prefix");
    }
}
