//! The upstream tools and prompts a caller sees in transparent mode, under their exposed names (contract section 8).
//!
//! Built from the tool cache on every `tools/list` and `tools/call` (discovery's order: cache, the entry's `tools`,
//! live), so it never lags the configuration or the cache: each server's tools as curation and the rules let the
//! caller see them ([`shown_to`]), under their exposed names (names claimed twice, or a `gw_*` name, are left out and
//! logged: [`names::refused`]); a listing's text is what `tool_list.rs` keeps of each cached list. A server that cannot
//! be reached is left out and logged; it does not fail the list.
//!
//! A call looks its exact name up here, never splitting it at the separator. To find it without discovering every
//! server, it asks only the servers that could have made the name: those whose prefix begins it (an empty prefix
//! begins every name). Every claimant of a name is among them, so a name claimed twice is still refused.

use serde_json::Value;

use std::sync::Arc;

use super::tool_list::{ShownList, ToolList};
use super::{late, upstream};
use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::gateway::boundary::listing::{self, Offered};
use crate::gateway::boundary::offer_review;
use crate::gateway::capabilities::Capability;
use crate::gateway::exposure::apps;
use crate::gateway::exposure::filter::Curation;
use crate::gateway::exposure::names::{self, MAX_NAME};
use crate::gateway::exposure::policy;
use crate::gateway::notify::List;
use crate::gateway::tools::{DiscoveryResult, discover, discover_visible, shown_to, visible_servers};
use crate::telemetry::metrics::GW_TOOLS;

/// One upstream tool or prompt as the caller sees it.
pub struct Exposed<'a> {
    /// Its exposed name.
    pub name: String,
    /// The server entry it belongs to.
    pub entry: &'a ServerEntry,
    /// The prefix of its server's exposed names (its views are namespaced with it: [`apps`]).
    pub prefix: String,
    /// The upstream's definition, its `name` the upstream's own.
    pub definition: Value,
}

impl Exposed<'_> {
    /// The upstream's own name of the tool or prompt.
    pub fn upstream_name(&self) -> &str {
        self.definition.get("name").and_then(Value::as_str).unwrap_or("")
    }

    /// The definition a client is shown: the upstream's, under the exposed name, naming its view (MCP Apps) by the
    /// view's exposed URI.
    pub fn listed(mut self) -> Value {
        if let Some(fields) = self.definition.as_object_mut() {
            fields.insert("name".into(), Value::String(self.name));
        }
        apps::rewrite_tool(&self.prefix, &mut self.definition);
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

/// The upstream tools `identity` sees, in configuration order, as `tools/list` shows them (see `tool_list.rs`).
pub async fn tool_list(ctx: &GatewayContext, identity: &Identity, session: Option<&str>) -> ToolList {
    let candidates = candidates(identity, None);
    // Every server asked at once (contract 15: one slow server does not stall the others), kept in config order.
    // Each waited for at most its `discovery_timeout` (a late one is left out, and its clients told when it is ready).
    let asked = candidates.iter().map(|(entry, _)| {
        late::within(ctx, identity, session, entry, List::Tools, discover(ctx, identity, session, entry))
    });
    let answers = futures_util::future::join_all(asked).await;
    let curation = Curation::of(identity);
    let mut servers = Vec::with_capacity(candidates.len());
    for ((entry, prefix), answer) in candidates.iter().zip(answers) {
        match answer {
            Ok(found) => {
                let shown = ctx.shown_tools.of(prefix, &found.tools);
                let seen = found.tools.iter().zip(shown.iter()).enumerate();
                let seen =
                    seen.filter(|(_, (tool, shown))| shown.is_some() && shown_to(identity, &curation, entry, tool));
                let seen: Vec<u32> = seen.map(|(at, _)| at as u32).collect();
                servers.push(Seen { entry, tools: found.tools, shown, seen });
            }
            Err(failure) => left_out(entry, "tools", &failure),
        }
    }
    // Names claimed twice, or a gateway tool's: no claimant is listed (the rule of `names::refused`).
    let refused: Vec<String> = names::refused(servers.iter().flat_map(Seen::exposed).map(|(_, name)| name), &GW_TOOLS)
        .into_iter()
        .map(str::to_string)
        .collect();
    for name in &refused {
        let gateway = GW_TOOLS.contains(&name.as_str()).then(|| format!("the gateway's {name}"));
        let claims = servers.iter().flat_map(|server| {
            server.exposed().filter(|(_, exposed)| exposed == name).map(|(at, _)| {
                let upstream = server.tools.get(at).and_then(|t| t.get("name")).and_then(Value::as_str);
                format!("{}/{}", server.entry.server_name, upstream.unwrap_or_default())
            })
        });
        collision(name, &gateway.into_iter().chain(claims).collect::<Vec<_>>(), "tool");
    }
    let servers = servers.into_iter().map(|mut server| {
        if !refused.is_empty() {
            let shown = &server.shown;
            let refused =
                |at: &u32| shown[*at as usize].as_ref().is_some_and(|t| refused.iter().any(|r| **r == *t.exposed));
            server.seen.retain(|at| !refused(at));
        }
        (server.shown, server.seen)
    });
    ToolList { servers: servers.collect() }
}

/// A server's tools in a listing: as discovered, as shown, and which of them the caller sees.
struct Seen<'a> {
    entry: &'a ServerEntry,
    tools: Arc<Vec<Value>>,
    shown: ShownList,
    seen: Vec<u32>,
}

impl Seen<'_> {
    /// Each seen tool's index and exposed name.
    fn exposed(&self) -> impl Iterator<Item = (usize, &str)> {
        self.seen.iter().filter_map(|&at| Some((at as usize, &*self.shown.get(at as usize)?.as_ref()?.exposed)))
    }
}

/// The upstream prompts `identity` sees, in configuration order, named as tools are; with `only`, just what could be
/// named `only`.
pub async fn prompts<'a>(
    ctx: &GatewayContext,
    identity: &'a Identity,
    session: Option<&str>,
    only: Option<&str>,
) -> Vec<Exposed<'a>> {
    let candidates = candidates(identity, only);
    // Every server asked at once, kept in config order (as for tools).
    let asked = candidates.iter().map(|(entry, _)| {
        let asked = upstream::list_all(ctx, identity, session, entry, Capability::Prompts, "prompts/list", "prompts");
        late::within(ctx, identity, session, entry, List::Prompts, asked)
    });
    let answers = futures_util::future::join_all(asked).await;
    let mut found = Vec::new();
    for ((entry, prefix), answer) in candidates.into_iter().zip(answers) {
        match answer {
            Ok(listed) => {
                let listed = listing::offered(ctx, identity, entry, Offered::Prompt, listed).await;
                found.extend(listed.into_iter().map(|prompt| (entry, prefix.clone(), prompt)))
            }
            Err(failure) => left_out(entry, "prompts", &failure),
        }
    }
    expose_all(found, &[], "prompt")
}

/// The tool exposed as `name`, if `identity` may see one, with its server's tools as discovery found them. The same
/// decision as [`tools`] (a name claimed twice, or a `gw_*` name, is nobody's), without building the whole list: only
/// the tool found is copied.
pub async fn find<'a>(
    ctx: &GatewayContext,
    identity: &'a Identity,
    session: Option<&str>,
    name: &str,
) -> Option<(Exposed<'a>, DiscoveryResult)> {
    if GW_TOOLS.contains(&name) {
        return None;
    }
    let mut found = None;
    let mut claims = 0;
    for (entry, prefix) in candidates(identity, Some(name)) {
        let discovered = match discover_visible(ctx, identity, session, entry).await {
            Ok(discovered) => discovered,
            Err(failure) => {
                left_out(entry, "tools", &failure);
                continue;
            }
        };
        let mut here = None;
        for tool in discovered.tools.iter() {
            let upstream = tool.get("name").and_then(Value::as_str).unwrap_or("");
            if names::exposes(&prefix, upstream, name) {
                claims += 1;
                here.get_or_insert_with(|| tool.clone());
            }
        }
        if let Some(definition) = here
            && found.is_none()
        {
            found = Some((Exposed { name: name.to_string(), entry, prefix, definition }, discovered));
        }
    }
    match found.filter(|_| claims == 1) {
        Some(found) => Some(found),
        None if claims == 0 => called_by_a_view(ctx, identity, session, name).await,
        None => None,
    }
}

/// The tool a view (MCP Apps) calls by its server's own name `name`, which is no exposed name: a view calls its own
/// server's tools as that server names them (contract 15). Only servers that are apps (a tool of theirs names a view)
/// are asked, and only one may have a tool of that name: several apps with one name leave it unknown.
async fn called_by_a_view<'a>(
    ctx: &GatewayContext,
    identity: &'a Identity,
    session: Option<&str>,
    name: &str,
) -> Option<(Exposed<'a>, DiscoveryResult)> {
    let mut found = None;
    for (entry, prefix) in candidates(identity, None) {
        if prefix.is_empty() {
            // Its exposed names are its own: the lookup above already asked it.
            continue;
        }
        let Ok(discovered) = discover_visible(ctx, identity, session, entry).await else { continue };
        if !discovered.tools.iter().any(apps::has_view) {
            continue;
        }
        let Some(definition) =
            discovered.tools.iter().find(|tool| tool.get("name").and_then(Value::as_str) == Some(name))
        else {
            continue;
        };
        if found.is_some() {
            tracing::warn!(
                tool = name,
                "transparent mode: several apps have a tool of this name; a view's call by it is refused"
            );
            return None;
        }
        let exposed = names::exposed_name(&prefix, name);
        found = Some((Exposed { name: exposed, entry, prefix, definition: definition.clone() }, discovered));
    }
    found
}

/// The prompt exposed as `name`, if there is one.
pub async fn find_prompt<'a>(
    ctx: &GatewayContext,
    identity: &'a Identity,
    session: Option<&str>,
    name: &str,
) -> Option<Exposed<'a>> {
    prompts(ctx, identity, session, Some(name)).await.into_iter().find(|prompt| prompt.name == name)
}

/// Whether `name` is the exposed name of a tool the review quarantined (contract section 11): such a call answers
/// `TOOL_QUARANTINED` rather than "unknown tool". Only asked after a name was not found.
pub async fn is_quarantined(ctx: &GatewayContext, identity: &Identity, session: Option<&str>, name: &str) -> bool {
    for (entry, prefix) in candidates(identity, Some(name)) {
        if let Ok(discovered) = discover_visible(ctx, identity, session, entry).await
            && discovered.quarantined.iter().any(|q| names::exposes(&prefix, q, name))
        {
            return true;
        }
    }
    false
}

/// The tool exposed as `name` that no listing shows because the caller's authorization rules hide it (contract 17),
/// with its upstream name: its call runs through the per-call pipeline, which denies it (`POLICY_DENIED`, naming the
/// rule), audits and counts it, so that the caller learns that it is denied rather than that it does not exist. Only
/// asked after a name was not found.
pub async fn policy_hidden<'a>(
    ctx: &GatewayContext,
    identity: &'a Identity,
    session: Option<&str>,
    name: &str,
) -> Option<(&'a ServerEntry, String)> {
    if !policy::applies(identity) {
        return None;
    }
    let curation = Curation::of(identity);
    for (entry, prefix) in candidates(identity, Some(name)) {
        let Ok(found) = crate::gateway::tools::discover(ctx, identity, session, entry).await else {
            continue;
        };
        for tool in found.tools.iter() {
            let upstream = tool.get("name").and_then(Value::as_str).unwrap_or("");
            if names::exposes(&prefix, upstream, name) && curation.visible(entry, upstream) {
                let target = policy::Target::of(identity, policy::Kind::Tool, entry, tool);
                if !policy::decide(identity, &target, None).allowed {
                    return Some((entry, upstream.to_string()));
                }
            }
        }
    }
    None
}

/// The `CREDENTIALS_REQUIRED` answer for a call of `name` that no server claims, when a `per_user` server that could
/// have made it was left out because the caller's user has not set their values (contract 16): the caller learns
/// what to set rather than that the tool does not exist. Only asked after a name was not found.
pub async fn credentials_required(ctx: &GatewayContext, identity: &Identity, name: &str) -> Option<GatewayError> {
    for (entry, _) in candidates(identity, Some(name)).into_iter().filter(|(entry, _)| entry.is_per_user()) {
        if let Err(failure) = crate::gateway::user_secrets::user_values(ctx, identity, entry).await
            && failure.code == ErrorCode::CredentialsRequired
        {
            return Some(failure);
        }
    }
    None
}

/// Whether `name` is the exposed name of a prompt the review of its server's last listing quarantined (contract 14),
/// and that curation would show: `prompts/get` answers `TOOL_QUARANTINED` rather than "unknown prompt". Only asked
/// after a name was not found.
pub fn is_quarantined_prompt(identity: &Identity, ctx: &GatewayContext, name: &str) -> bool {
    let curation = Curation::of(identity);
    candidates(identity, Some(name)).into_iter().any(|(entry, prefix)| {
        let held = |prompt: &str| names::exposes(&prefix, prompt, name) && curation.visible(entry, prompt);
        offer_review::quarantined(ctx, identity, entry, Offered::Prompt, held)
    })
}

/// The servers of the caller's configuration with the prefix of their exposed names; with `only`, those that could
/// have made that name.
fn candidates<'a>(identity: &'a Identity, only: Option<&str>) -> Vec<(&'a ServerEntry, String)> {
    let Ok(entries) = visible_servers(identity) else { return Vec::new() };
    let separator = identity.snapshot.exposure(identity.mcp_config_id.as_deref()).separator;
    entries
        .into_iter()
        .map(|entry| (entry, prefix(entry, &separator)))
        .filter(|(_, prefix)| only.is_none_or(|name| could_make(prefix, name)))
        .collect()
}

/// Logs why `entry`'s `what` are left out of a listing.
pub(super) fn left_out(entry: &ServerEntry, what: &str, failure: &GatewayError) {
    if failure.code == ErrorCode::CredentialsRequired {
        // The caller's user has not set their values for a `per_user` server (contract 16): not a fault of the server.
        tracing::info!(server_name = %entry.server_name,
            "transparent mode: the server's {what} are left out of this user's list (their credentials are not set)");
        return;
    }
    tracing::warn!(
        server_name = %entry.server_name,
        error_code = %failure.code,
        error = %failure.message,
        "transparent mode: the server's {what} are left out of the list (it could not be asked)"
    );
}

/// Logs that exposed name `name` of a `kind` is claimed by each of `claimants`, so none of them has it.
fn collision(name: &str, claimants: &[String], kind: &str) {
    tracing::warn!(
        name = %name,
        claimants = %claimants.join(", "),
        "transparent mode: an exposed {kind} name is claimed more than once; no claimant is listed or callable under it"
    );
}

/// `found` (server, prefix, item) under exposed names, in the order given: names in `reserved` and names claimed
/// twice are left out, and logged.
fn expose_all<'a>(found: Vec<(&'a ServerEntry, String, Value)>, reserved: &[&str], kind: &str) -> Vec<Exposed<'a>> {
    let claims = found.iter().map(|(entry, prefix, item)| {
        (entry.server_name.as_str(), prefix.as_str(), item.get("name").and_then(Value::as_str).unwrap_or(""))
    });
    let (exposed, collisions) = names::expose(claims, reserved);
    for found in &collisions {
        let claimants: Vec<String> = found
            .claimants
            .iter()
            .map(
                |(server, item)| {
                    if server.is_empty() { format!("the gateway's {item}") } else { format!("{server}/{item}") }
                },
            )
            .collect();
        collision(&found.name, &claimants, kind);
    }
    // `expose` keeps the order of what it was given, so the two lists are walked side by side.
    let mut listed = Vec::with_capacity(exposed.len());
    let mut rest = found.into_iter();
    for one in exposed {
        for (entry, prefix, definition) in rest.by_ref() {
            let upstream = definition.get("name").and_then(Value::as_str).unwrap_or("");
            if entry.server_name == one.server && upstream == one.tool {
                listed.push(Exposed { name: one.name, entry, prefix, definition });
                break;
            }
        }
    }
    listed
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
