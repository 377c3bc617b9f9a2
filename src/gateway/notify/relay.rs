//! The three ways a change reaches open clients, each a function over the gateway's context: a reload
//! ([`reload`]), an upstream's `list_changed` ([`upstream_list_changed`]) and an upstream's `resources/updated`
//! ([`resource_updated`]). Each takes what it needs of the registries under their locks in one pass (clones of the
//! sessions' channels and the streams' sinks), lets go of the locks, then decides and sends.

use std::collections::HashMap;
use std::time::Instant;

use serde_json::Value;

use super::coalesce::Decision;
use super::{List, Lists, Scope, Target, tell, updated, view};
use crate::config::Snapshot;
use crate::gateway::GatewayContext;
use crate::gateway::boundary::listing::Offered;
use crate::gateway::boundary::offer_review::quarantined_in;
use crate::gateway::transparent::resources::template_matches;
use crate::upstream::PoolKey;

/// A reload swapped `old` for `new`: every open client whose view changed is told which lists did. One comparison
/// per distinct [`Scope`], however many clients share it.
pub fn reload(ctx: &GatewayContext, old: &Snapshot, new: &Snapshot) {
    let mut audience: Vec<(Scope, Target)> =
        ctx.sessions.audience().into_iter().map(|(scope, channel)| (scope, Target::Session(channel))).collect();
    audience.extend(ctx.listeners.audience().into_iter().map(|(scope, sink)| (scope, Target::Listener(sink))));
    if audience.is_empty() {
        return;
    }
    let mut compared: HashMap<Scope, Lists> = HashMap::new();
    let mut by_change: HashMap<(bool, bool, bool), Vec<Target>> = HashMap::new();
    for (scope, target) in audience {
        let lists = *compared.entry(scope).or_insert_with_key(|scope| view::changed(old, new, scope));
        if lists.any() {
            by_change.entry((lists.tools, lists.prompts, lists.resources)).or_default().push(target);
        }
    }
    let told: usize = by_change.values().map(Vec::len).sum();
    if told > 0 {
        tracing::info!(
            clients = told,
            scopes = compared.len(),
            "a reload changed what open clients see; they are told"
        );
    }
    for ((tools, prompts, resources), targets) in by_change {
        tell(ctx, targets, Lists { tools, prompts, resources }, "a reload");
    }
}

/// An upstream said one of its lists changed (contract 8): its cached tools go, and the open clients of its
/// configuration that see the upstreams are told, at most once a window per server and list (see
/// [`super::coalesce`]).
pub fn upstream_list_changed(ctx: &GatewayContext, key: &PoolKey, list: &str) {
    let list = List::of_upstream(list);
    if list == List::Tools {
        ctx.tool_cache.remove(key);
    }
    match ctx.coalesce.admit(key, list, Instant::now()) {
        Decision::Now => relay_list_change(ctx, key, list),
        Decision::Merged => {}
        Decision::Later(wait) => {
            let (me, key) = (ctx.me.clone(), key.clone());
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                if let Some(ctx) = me.upgrade() {
                    ctx.coalesce.sent(&key, list);
                    relay_list_change(&ctx, &key, list);
                }
            });
        }
    }
}

fn relay_list_change(ctx: &GatewayContext, key: &PoolKey, list: List) {
    let snapshot = ctx.store.snapshot();
    let sees = |scope: &Scope| scope.sees_upstreams(&snapshot);
    let mut targets: Vec<Target> = ctx
        .sessions
        .channels_of(&key.mcp_config_id)
        .into_iter()
        .filter(|(s, _)| sees(s))
        .map(|(_, channel)| Target::Session(channel))
        .collect();
    let listeners = ctx.listeners.of_config(&key.mcp_config_id);
    targets.extend(listeners.into_iter().filter(|(s, _)| sees(s)).map(|(_, sink)| Target::Listener(sink)));
    tracing::info!(server_name = %key.server_name, list = list.name(), clients = targets.len(),
        "an upstream server's list changed; its clients are told");
    tell(ctx, targets, Lists::one(list), "an upstream's list change");
}

/// An upstream said a resource changed (contract 8): the clients subscribed to it on that server are told (sessions
/// through `resources/subscribe`, listen streams through the URIs they named), unless the resource (or a template of
/// that server matching it) is quarantined now (contract 14: a quarantined offer reaches no client, whoever
/// subscribed before). An update nobody subscribed to costs one pass over the registries.
pub fn resource_updated(ctx: &GatewayContext, key: &PoolKey, params: Value) {
    let Some(uri) = params.get("uri").and_then(Value::as_str) else { return };
    let (config, server) = (key.mcp_config_id.as_str(), key.server_name.as_str());
    // Curation as it is now (a reload since the subscription may hide the resource from a project): the resource by
    // the server's own URI, as `resources/subscribe` and the listings decide it.
    let snapshot = ctx.store.snapshot();
    let Some(entry) =
        snapshot.file.mcp_configs.get(config).and_then(|c| c.mcp_config.iter().find(|e| e.server_name == server))
    else {
        return;
    };
    let separator = snapshot.exposure(Some(config)).separator;
    let exposed = format!("{server}{separator}{uri}");
    let sees = |scope: &Scope| {
        let project = snapshot.file.projects.get(&scope.project).and_then(|p| p.tool_filter.as_ref());
        crate::gateway::exposure::filter::visible(entry.tool_filter.as_ref(), project, uri, &exposed)
    };
    let mut targets: Vec<Target> =
        ctx.sessions.subscribers(config, server, uri, sees).into_iter().map(Target::Session).collect();
    targets.extend(ctx.listeners.subscribers(config, server, uri, sees).into_iter().map(Target::Listener));
    if targets.is_empty() {
        return;
    }
    let held_as = |offered, held: &dyn Fn(&str) -> bool| quarantined_in(ctx, config, server, offered, held);
    if held_as(Offered::Resource, &|held| held == uri) || held_as(Offered::Template, &|t| template_matches(t, uri)) {
        tracing::info!(server_name = %key.server_name, "an update of a quarantined resource was not relayed");
        return;
    }
    let Ok(mut params) = serde_json::from_value::<rmcp::model::ResourceUpdatedNotificationParam>(params.clone()) else {
        return;
    };
    // A view (MCP Apps) is known to clients by its namespaced URI.
    if params.uri.starts_with(crate::gateway::exposure::apps::UI_SCHEME) {
        let snapshot = ctx.store.snapshot();
        let separator = snapshot.exposure(Some(config)).separator;
        let entry =
            snapshot.file.mcp_configs.get(config).and_then(|c| c.mcp_config.iter().find(|e| e.server_name == server));
        let prefix = entry.map(|entry| crate::gateway::transparent::catalog::prefix(entry, &separator));
        if let Some(exposed) = prefix.and_then(|prefix| crate::gateway::exposure::apps::exposed_uri(&prefix, uri)) {
            params.uri = exposed;
        }
    }
    updated(ctx, targets, params);
}
