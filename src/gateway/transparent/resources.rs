//! Transparent resources (contract section 8): every upstream's resources and resource templates merged with their
//! URIs unchanged, and a URI routed to the server that listed it, or else whose template matches it (several: the
//! first in configuration order, with a warning). MCP Apps views (`ui://` URIs) are the exception: namespaced per
//! server ([`apps`]), and a view's URI is routed to the server whose prefix it carries. Completion routes by the prompt
//! or resource it names; the logging level goes to every upstream of the configuration.

use rmcp::ErrorData as McpError;
use serde_json::{Map, Value, json};

use std::sync::Arc;

use super::subscriptions::{self, Holder, Target};
use super::upstream::{self, list_all};
use super::{catalog, late};
use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::gateway::boundary::listing::{self, Offered};
use crate::gateway::boundary::offer_review;
use crate::gateway::capabilities::Capability;
use crate::gateway::exposure::apps;
use crate::gateway::exposure::filter::Curation;
use crate::gateway::notify::List;
use crate::gateway::tools::{audit_call, visible_servers};
use crate::upstream::relay::Relay;

/// Every upstream's resources (`resources/list`), in configuration order.
pub async fn list(ctx: &GatewayContext, identity: &Identity, session: Option<&str>) -> Vec<Value> {
    merged(ctx, identity, session, "resources/list", "resources").await.into_iter().map(|(_, item)| item).collect()
}

/// Every upstream's resource templates (`resources/templates/list`), in configuration order.
pub async fn templates(ctx: &GatewayContext, identity: &Identity, session: Option<&str>) -> Vec<Value> {
    merged(ctx, identity, session, "resources/templates/list", "resourceTemplates")
        .await
        .into_iter()
        .map(|(_, item)| item)
        .collect()
}

async fn merged<'a>(
    ctx: &GatewayContext,
    identity: &'a Identity,
    session: Option<&str>,
    method: &str,
    field: &str,
) -> Vec<(&'a ServerEntry, Value)> {
    let Ok(entries) = visible_servers(identity) else { return Vec::new() };
    // Every server asked at once (contract 15: one slow server does not stall the others), kept in config order.
    // Each waited for at most its `discovery_timeout` (a late one is left out, and its clients told when it is ready).
    let asked = entries.iter().map(|entry| {
        let asked = list_all(ctx, identity, session, entry, Capability::Resources, method, field);
        late::within(ctx, identity, session, entry, List::Resources, asked)
    });
    let answers = futures_util::future::join_all(asked).await;
    let mut all = Vec::new();
    for (entry, answer) in entries.into_iter().zip(answers) {
        match answer {
            Ok(items) => {
                let kind = if field == "resources" { Offered::Resource } else { Offered::Template };
                let items = listing::offered(ctx, identity, entry, kind, items).await;
                let prefix = prefix_of(identity, entry);
                let uri_field = if field == "resources" { "uri" } else { "uriTemplate" };
                all.extend(items.into_iter().map(|mut item| {
                    apps::rewrite_listed(&prefix, &mut item, uri_field);
                    (entry, item)
                }))
            }
            Err(failure) => super::catalog::left_out(entry, field, &failure),
        }
    }
    all
}

/// The prefix of `entry`'s exposed names in the caller's configuration (its views are namespaced with it).
fn prefix_of(identity: &Identity, entry: &ServerEntry) -> String {
    let separator = identity.snapshot.exposure(identity.mcp_config_id.as_deref()).separator;
    catalog::prefix(entry, &separator)
}

/// `uri` as a client sent it, as `entry`'s server names it (a view's namespace taken off); `None`: another server's
/// view.
fn upstream_uri(identity: &Identity, entry: &ServerEntry, uri: &str) -> Option<String> {
    apps::upstream_uri(&prefix_of(identity, entry), uri)
}

/// The server a resource URI belongs to: the first that lists it, else the first whose template matches it.
pub async fn owner<'a>(
    ctx: &GatewayContext,
    identity: &'a Identity,
    session: Option<&str>,
    uri: &str,
) -> Option<&'a ServerEntry> {
    owner_of(ctx, identity, session, uri).await.map(|(entry, _)| entry)
}

/// [`owner`], with the item that matched: the resource as listed, or the template that matches the URI (the target
/// the caller's authorization rules decide a read of it by: contract 17).
async fn owner_of<'a>(
    ctx: &GatewayContext,
    identity: &'a Identity,
    session: Option<&str>,
    uri: &str,
) -> Option<(&'a ServerEntry, Value)> {
    let listed = merged(ctx, identity, session, "resources/list", "resources").await;
    if let Some((entry, item)) = listed.into_iter().find(|(_, r)| r.get("uri").and_then(Value::as_str) == Some(uri)) {
        return Some((entry, item));
    }
    let templates = merged(ctx, identity, session, "resources/templates/list", "resourceTemplates").await;
    let mut matching = templates.into_iter().filter(|(_, t)| {
        t.get("uriTemplate").and_then(Value::as_str).is_some_and(|template| template_matches(template, uri))
    });
    let (first, template) = matching.next()?;
    let others: Vec<&str> = matching.map(|(e, _)| e.server_name.as_str()).filter(|s| *s != first.server_name).collect();
    if !others.is_empty() {
        tracing::warn!(uri, chosen = %first.server_name, also = %others.join(", "),
            "transparent mode: resource templates of several servers match the URI; the first in configuration order serves it");
    }
    Some((first, template))
}

/// `resources/read` of `uri` on the server it belongs to, through that server's guardrails.
pub async fn read(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    uri: &str,
    relay: Option<Relay>,
) -> Result<Value, McpError> {
    let found = owner_of(ctx, identity, session, uri).await;
    let (found, item) = found.unzip();
    if quarantined(ctx, identity, uri, found) {
        return Err(quarantine_error(uri));
    }
    let Some((entry, upstream)) = found.and_then(|entry| Some((entry, upstream_uri(identity, entry, uri)?))) else {
        return Err(not_served(uri));
    };
    let request = (super::Operation::ReadResource, upstream.as_str(), Map::new(), item.as_ref());
    let mut result = super::relay_request(ctx, identity, session, entry, request, relay).await?;
    apps::rewrite_result(&prefix_of(identity, entry), &mut result);
    Ok(result)
}

/// The error for a URI no server serves: resource not found, with the URI as `data.uri` (SEP-2164, as an upstream
/// answers it, so a client sees the same error directly and through the gateway).
fn not_served(uri: &str) -> McpError {
    McpError::resource_not_found(format!("no upstream server serves the resource {uri:?}"), Some(json!({"uri": uri})))
}

/// The answer to a request for a quarantined resource: the gateway's answer object as the JSON-RPC error's `data`.
fn quarantine_error(uri: &str) -> McpError {
    let why = format!("resource {uri:?} is quarantined: its definition is under review");
    let answer = GatewayError::new(ErrorCode::ToolQuarantined, why.clone()).answer();
    McpError::internal_error(why, Some(answer))
}

/// Whether a read of (or a subscription to) `uri` is refused as quarantined (contract 14): the server that would
/// serve it (`owner`, through a template) quarantined it as a resource at its last listing, or, when no server serves
/// it, a server curation lets the caller see quarantined it or a template matching it.
fn quarantined(ctx: &GatewayContext, identity: &Identity, uri: &str, owner: Option<&ServerEntry>) -> bool {
    let curation = Curation::of(identity);
    // Pins and curation know a view by the server's own URI.
    let as_resource = |entry: &ServerEntry, uri: &str| {
        curation.visible(entry, uri)
            && offer_review::quarantined(ctx, identity, entry, Offered::Resource, |held| held == uri)
    };
    if let Some(entry) = owner {
        return upstream_uri(identity, entry, uri).is_some_and(|uri| as_resource(entry, &uri));
    }
    let Ok(entries) = visible_servers(identity) else { return false };
    entries.into_iter().any(|entry| {
        let Some(uri) = upstream_uri(identity, entry, uri) else { return false };
        let held = |template: &str| template_matches(template, &uri) && curation.visible(entry, template);
        as_resource(entry, &uri) || offer_review::quarantined(ctx, identity, entry, Offered::Template, held)
    })
}

/// `resources/subscribe` (or, with `subscribed` false, `resources/unsubscribe`) of `uri` for `holder` (a session or
/// a listen stream): sent to the server it belongs to, and recorded for the session, so the server's
/// `notifications/resources/updated` for it reach the session. The subscription lives in the upstream process that
/// received it; a shared process's is ended only when its last holder lets go ([`subscriptions`]).
pub async fn subscribe(
    ctx: &GatewayContext,
    identity: &Arc<Identity>,
    session: Option<&str>,
    holder: Holder,
    uri: &str,
    subscribed: bool,
) -> Result<String, McpError> {
    let found = owner(ctx, identity, session, uri).await;
    if subscribed && quarantined(ctx, identity, uri, found) {
        return Err(quarantine_error(uri));
    }
    let Some((entry, upstream)) = found.and_then(|entry| Some((entry, upstream_uri(identity, entry, uri)?))) else {
        return Err(not_served(uri));
    };
    let uri = upstream.as_str();
    // A per_session server's process is the session's own; a shared one's subscriptions are counted by holder.
    let shared = !per_session(entry) || session.is_none();
    let target = (identity.cache_scope(), entry.server_name.clone(), uri.to_string());
    if subscribed && shared && ctx.subscriptions.room_for(&holder, &target).is_err() {
        return Err(McpError::invalid_params(
            format!(
                "this client holds {} resource subscriptions, its limit; unsubscribe one first",
                subscriptions::MAX_PER_HOLDER
            ),
            None,
        ));
    }
    if !subscribed && shared && !ctx.subscriptions.release(&target, &holder) {
        // Another client still hears of it: the upstream keeps the subscription.
        if let Some(session) = session {
            ctx.sessions.subscription(session, &entry.server_name, uri, false);
        }
        return Ok(entry.server_name.clone());
    }
    let method = if subscribed { "resources/subscribe" } else { "resources/unsubscribe" };
    let params = json!({"uri": uri});
    match upstream::request(ctx, identity, session, entry, Capability::Subscriptions, method, params).await {
        Ok(Some(_)) => {
            if subscribed && shared {
                ctx.subscriptions.hold(target, holder, Arc::clone(identity));
            }
            if let Some(session) = session {
                ctx.sessions.subscription(session, &entry.server_name, uri, subscribed);
            }
            Ok(entry.server_name.clone())
        }
        Ok(None) => Err(McpError::invalid_params(
            format!("the server of {uri:?} does not offer subscriptions to its resources"),
            None,
        )),
        Err(failure) => Err(McpError::internal_error(failure.message.clone(), Some(failure.answer()))),
    }
}

/// Ends at their upstreams the subscriptions nobody holds any more (a session or listen stream ended): each sent
/// `resources/unsubscribe` as the identity that subscribed, to a process running now (none is started for it).
pub async fn unsubscribe_released(ctx: &GatewayContext, released: Vec<(Target, Arc<Identity>)>) {
    for ((_, server, uri), identity) in released {
        let Ok(entries) = visible_servers(&identity) else { continue };
        let Some(entry) = entries.into_iter().find(|entry| entry.server_name == server) else { continue };
        if !upstream::running(ctx, &identity, None, entry).await {
            continue;
        }
        let params = json!({"uri": uri});
        let method = "resources/unsubscribe";
        if let Err(failure) =
            upstream::request(ctx, &identity, None, entry, Capability::Subscriptions, method, params).await
        {
            tracing::info!(server = %server, error = %failure.message, "a released subscription was not ended upstream");
        }
    }
}

fn per_session(entry: &ServerEntry) -> bool {
    entry.config.session_affinity.as_deref() == Some(crate::config::model::PER_SESSION)
}

/// `completion/complete`: sent to the server of the prompt (by its exposed name, renamed to the upstream's) or of the
/// resource it names.
pub async fn complete(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    mut params: Value,
) -> Result<Value, McpError> {
    let reference = params.get("ref").cloned().unwrap_or(Value::Null);
    let entry = match reference.get("type").and_then(Value::as_str) {
        Some("ref/prompt") => {
            let name = reference.get("name").and_then(Value::as_str).unwrap_or("");
            let prompt = catalog::find_prompt(ctx, identity, session, name).await;
            let Some(prompt) = prompt else {
                return Err(McpError::invalid_params(format!("unknown prompt {name:?}"), None));
            };
            params["ref"]["name"] = json!(prompt.upstream_name());
            prompt.entry
        }
        Some("ref/resource") => {
            let uri = reference.get("uri").and_then(Value::as_str).unwrap_or("");
            match owner(ctx, identity, session, uri).await {
                Some(entry) => entry,
                None => return Err(not_served(uri)),
            }
        }
        _ => return Err(McpError::invalid_params("ref must be a ref/prompt or a ref/resource", None)),
    };
    // Audited like a tool call (contract 14): the prompt or resource it completes, a keyed digest of the argument.
    let audited = ctx.audit.enabled().then(|| {
        let name = params["ref"].get("name").or_else(|| params["ref"].get("uri")).and_then(Value::as_str);
        (name.unwrap_or("").to_string(), ctx.audit.args_hmac(params.get("argument").unwrap_or(&Value::Null)))
    });
    let answered =
        upstream::request(ctx, identity, session, entry, Capability::Completions, "completion/complete", params).await;
    if let Some((name, args_hmac)) = audited {
        let outcome = match &answered {
            Ok(_) => json!({"status": "success"}),
            Err(failure) => failure.answer(),
        };
        audit_call(ctx, identity, ("completion", entry, &name), args_hmac, &outcome, None).await;
    }
    match answered {
        Ok(Some(result)) => Ok(listing::completion(ctx, identity, entry, result).await),
        // A server without completions has none to offer.
        Ok(None) => Ok(json!({"completion": {"values": []}})),
        Err(failure) => Err(McpError::internal_error(failure.message.clone(), Some(failure.answer()))),
    }
}

/// `logging/setLevel`: sent to every upstream of the configuration that is running for this caller and declares
/// logging (none is started for it); one that cannot be reached is logged and skipped.
pub async fn set_level(ctx: &GatewayContext, identity: &Identity, session: Option<&str>, params: Value) {
    let Ok(entries) = visible_servers(identity) else { return };
    for entry in entries {
        // Only servers running now: a level is no reason to start one (contract 15; the Inspector sets it first
        // thing, and five cold `npx` servers took it a minute).
        if !upstream::running(ctx, identity, session, entry).await {
            continue;
        }
        let sent =
            upstream::request(ctx, identity, session, entry, Capability::Logging, "logging/setLevel", params.clone())
                .await;
        if let Err(failure) = sent {
            tracing::warn!(server_name = %entry.server_name, error = %failure.message,
                "transparent mode: logging/setLevel did not reach the server");
        }
    }
}

/// Whether `uri` fits the RFC 6570 `template`: `{name}` (and `{?…}`, `{&…}`, `{.…}`, `{;…}`) stands for a run
/// without `/`, `{+name}` and `{#name}` for any run; the rest matches itself.
pub fn template_matches(template: &str, uri: &str) -> bool {
    // The template as parts: literal text, or a variable (whether it may span '/').
    let mut parts: Vec<(Option<bool>, &str)> = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { break };
        if open > 0 {
            parts.push((None, &rest[..open]));
        }
        let expression = &rest[open + 1..open + close];
        parts.push((Some(expression.starts_with('+') || expression.starts_with('#')), ""));
        rest = &rest[open + close + 1..];
    }
    if !rest.is_empty() {
        parts.push((None, rest));
    }
    fits(&parts, uri)
}

fn fits(parts: &[(Option<bool>, &str)], uri: &str) -> bool {
    match parts.split_first() {
        None => uri.is_empty(),
        Some(((None, literal), rest)) => uri.strip_prefix(literal).is_some_and(|after| fits(rest, after)),
        Some(((Some(any), _), rest)) => {
            // The variable takes 0..n characters (without '/' unless `any`), shortest first.
            let mut end = 0;
            loop {
                if fits(rest, &uri[end..]) {
                    return true;
                }
                let Some(c) = uri[end..].chars().next() else { return false };
                if c == '/' && !any {
                    return false;
                }
                end += c.len_utf8();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::template_matches;

    #[test]
    fn templates_match_as_rfc_6570_expands_them() {
        assert!(template_matches("test://template/{id}/data", "test://template/42/data"));
        assert!(!template_matches("test://template/{id}/data", "test://template/4/2/data"));
        assert!(template_matches("file:///{+path}", "file:///a/b/c.txt"));
        assert!(template_matches("demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/text/7"));
        assert!(!template_matches("demo://resource/dynamic/text/{resourceId}", "demo://resource/static/7"));
        assert!(template_matches("exact://uri", "exact://uri"));
        assert!(!template_matches("exact://uri", "exact://uri2"));
        assert!(template_matches("search://{?q}", "search://?q=x"));
    }
}
