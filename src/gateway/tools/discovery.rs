//! Discovery (spec 4.1): the tools of a server come from (1) the tool cache, (2) the tools configured on the server
//! entry, (3) the live server, in that order. Live results are cached for `gw_tool_cache_expiration` hours and carry
//! `server_metadata`.
//!
//! With the external cache on, step (1) asks the shared cache (Redis) first: it is the authority while it answers, so a
//! `gw_clear_cache` on any instance makes every instance discover live again. A shared record counts only when its
//! fingerprint matches this instance's server entry. While Redis is unreachable the local cache answers instead, and
//! live results go to both.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::review::{Reviewed, review};
use super::{DiscoverInput, ListServersInput, ServerInput};
use crate::auth::Identity;
use crate::cache::ExternalError;
use crate::cache::shared::fingerprint;
use crate::config::model::ServerEntry;
use crate::config::snapshot::Snapshot;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::boundary::listing;
use crate::gateway::exposure::filter::Curation;
use crate::gateway::exposure::policy;
use crate::gateway::user_secrets::{pool_key, user_values};
use crate::gateway::{CachedTools, GatewayContext};
use crate::guardrails::strings::{self, UPSTREAM_ERROR_LIMIT};
use crate::guardrails::tool_scan::Finding;
use crate::telemetry::spans;
use crate::timeouts::TimeoutKind;
use crate::upstream::oauth::{self, Bearer, OAuthSettings, TokenKey};
use crate::upstream::{PoolKey, ServerSpec, UpstreamError};

/// What discovery found and where.
#[derive(Debug, Clone)]
pub struct DiscoveryResult {
    pub tools: Arc<Vec<Value>>,
    pub source: &'static str,
    pub server_metadata: Option<Value>,
    /// The review's poisoning findings, and the tools it quarantined (not in `tools`), contract section 11.
    pub findings: Arc<Vec<Finding>>,
    pub quarantined: Arc<Vec<String>>,
}

impl DiscoveryResult {
    /// The spec 4.1 answer object.
    pub fn to_value(&self) -> Value {
        let n = self.tools.len();
        let mut out = json!({
            "status": "success",
            "message": format!("discovered {n} tool{}", if n == 1 { "" } else { "s" }),
            "tools": self.tools,
            "source": self.source,
        });
        if let Some(meta) = &self.server_metadata {
            out["server_metadata"] = meta.clone();
        }
        if !self.findings.is_empty() {
            out["findings"] = json!(*self.findings);
        }
        if !self.quarantined.is_empty() {
            out["quarantined"] = json!(*self.quarantined);
        }
        out
    }

    /// A result with no review (configured tools, a shared cache's answer).
    fn unreviewed(tools: Arc<Vec<Value>>, source: &'static str, server_metadata: Option<Value>) -> DiscoveryResult {
        DiscoveryResult { tools, source, server_metadata, findings: Arc::default(), quarantined: Arc::default() }
    }
}

/// Discovers `entry`'s tools and keeps those the caller may see (contract 8's curation): what every listing shows.
pub async fn discover_visible(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    entry: &ServerEntry,
) -> Result<DiscoveryResult, GatewayError> {
    let mut found = discover(ctx, identity, session, entry).await?;
    let curation = Curation::of(identity);
    let hidden = |tool: &Value| !shown_to(identity, &curation, entry, tool);
    if found.tools.iter().any(hidden) {
        found.tools = Arc::new(found.tools.iter().filter(|t| !hidden(t)).cloned().collect());
    }
    Ok(found)
}

/// Whether `identity` is shown `tool` of `entry`: curation, then the caller's authorization rules (contract 17: a
/// listing shows what a call could be allowed for).
pub fn shown_to(identity: &Identity, curation: &Curation, entry: &ServerEntry, tool: &Value) -> bool {
    curation.visible(entry, tool.get("name").and_then(Value::as_str).unwrap_or(""))
        && policy::listed(identity, policy::Kind::Tool, entry, tool)
}

/// The servers of the caller's configuration, or the failure to answer instead.
pub fn servers(identity: &Identity) -> Result<&[ServerEntry], GatewayError> {
    if let Some(remote) = &identity.servers {
        return Ok(remote.as_slice());
    }
    let Some(config_id) = identity.mcp_config_id.as_deref() else {
        return Err(GatewayError::new(ErrorCode::NoMcpConfig, "the project of this API key has no MCP configuration"));
    };
    identity
        .snapshot
        .file
        .mcp_configs
        .get(config_id)
        .map(|c| c.mcp_config.as_slice())
        .ok_or_else(|| GatewayError::new(ErrorCode::NoMcpConfig, "the project's MCP configuration does not exist"))
}

/// The servers of the caller's configuration of which curation could let the caller see anything (contract 14: a
/// server with nothing visible is absent from every listing).
pub fn visible_servers(identity: &Identity) -> Result<Vec<&ServerEntry>, GatewayError> {
    let entries = servers(identity)?;
    if !filtered(identity, entries) {
        return Ok(entries.iter().collect());
    }
    let curation = Curation::of(identity);
    Ok(entries.iter().filter(|entry| curation.server_visible(entry)).collect())
}

/// Whether any filter applies to `identity`'s view of `entries` (without one, every server is visible, and the
/// common path costs nothing).
fn filtered(identity: &Identity, entries: &[ServerEntry]) -> bool {
    let project = identity.snapshot.file.projects.get(&identity.project_id).and_then(|p| p.tool_filter.as_ref());
    project.is_some() || entries.iter().any(|entry| entry.tool_filter.is_some())
}

/// The server entry `name` of the caller's configuration, or `SERVER_NOT_FOUND` (a server the caller can see nothing
/// of is not found either).
pub fn find_server<'a>(identity: &'a Identity, name: &str) -> Result<&'a ServerEntry, GatewayError> {
    let entry = servers(identity)?.iter().find(|s| s.server_name == name);
    let visible = |entry: &&ServerEntry| {
        !filtered(identity, std::slice::from_ref(*entry)) || Curation::of(identity).server_visible(entry)
    };
    entry.filter(visible).ok_or_else(|| {
        GatewayError::new(ErrorCode::ServerNotFound, format!("no server named {name:?} in your MCP configuration"))
    })
}

/// Tools configured on the entry, as tool records (an object keyed by name, or an array).
pub fn configured_tools(entry: &ServerEntry) -> Vec<Value> {
    match &entry.tools {
        Some(Value::Array(items)) => items.clone(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(name, tool)| {
                let mut tool = match tool {
                    Value::Object(t) => t.clone(),
                    _ => serde_json::Map::new(),
                };
                tool.entry("name").or_insert_with(|| json!(name));
                Value::Object(tool)
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Maps an upstream error to the answer's error code (counting a result over `limits.max_tool_result_bytes`).
pub fn upstream_failure(ctx: &GatewayContext, err: &UpstreamError) -> GatewayError {
    let mut error = upstream_failure_uncut(ctx, err);
    // An upstream's error text reaches a client cut to 1 KiB whatever the path (contract 13); the per-call stack also
    // checks it with the output guardrails (`CallGuard::check_upstream_error`).
    strings::cut(&mut error.message, UPSTREAM_ERROR_LIMIT);
    error
}

fn upstream_failure_uncut(ctx: &GatewayContext, err: &UpstreamError) -> GatewayError {
    match err {
        UpstreamError::Timeout(d) => GatewayError::new(ErrorCode::Timeout, crate::timeouts::TimedOut(*d).to_string()),
        UpstreamError::OutputTooLarge { .. } => {
            ctx.store.metrics().limit_hit("tool_result");
            GatewayError::new(ErrorCode::UpstreamOutputTooLarge, err.to_string())
        }
        UpstreamError::Unavailable { .. } => GatewayError::new(ErrorCode::UpstreamUnavailable, err.to_string()),
        UpstreamError::NoProcessSlot { limit, .. } => {
            ctx.store.metrics().limit_hit(limit);
            GatewayError::new(ErrorCode::UpstreamUnavailable, err.to_string())
        }
        other => GatewayError::new(ErrorCode::UpstreamError, other.to_string()),
    }
}

/// How to start `entry`'s server for this caller: its configured command (for a `per_user` server, with the caller's
/// user's values in place of its `${user.NAME}` references, or `CREDENTIALS_REQUIRED`), plus, for a server with
/// `oauth_config`, an
/// access token for (server, MCP config, project) in its environment (`OAUTH_ACCESS_TOKEN`, `OAUTH_TOKEN_TYPE`) and
/// in any argument that names `${OAUTH_ACCESS_TOKEN}`. A new token makes a new spec, so the pool starts processes
/// with it and lets the ones holding the old token go idle and end.
pub async fn upstream_spec(
    ctx: &GatewayContext,
    identity: &Identity,
    entry: &ServerEntry,
) -> Result<ServerSpec, GatewayError> {
    let mut spec = match user_values(ctx, identity, entry).await? {
        Some(values) => ServerSpec::for_user(entry, &identity.user_id, &values),
        None => ServerSpec::from_entry(entry),
    };
    let Some(config) = &entry.oauth_config else { return Ok(spec) };
    let settings = match OAuthSettings::from_config(config) {
        Ok(Some(settings)) => settings,
        Ok(None) => return Ok(spec),
        Err(problems) => {
            return Err(GatewayError::new(
                ErrorCode::UpstreamError,
                format!("oauth_config is invalid: {}", problems.join("; ")),
            ));
        }
    };
    let key = TokenKey::new(
        entry.server_name.clone(),
        identity.mcp_config_id.clone().unwrap_or_default(),
        identity.project_id.clone(),
    );
    let (token, obtained_now) = ctx.oauth.token_noting_acquisition(&key, &settings).await.map_err(|e| {
        tracing::warn!(server = %entry.server_name, error = %e, "no OAuth token for the upstream server");
        GatewayError::new(
            ErrorCode::UpstreamError,
            format!("could not obtain an OAuth access token for the server: {e}"),
        )
    })?;
    match &mut spec.remote {
        // A remote server gets the token as a bearer credential with each request, refreshed on a 401 (contract
        // section 9); the session outlives the token.
        Some(remote) => {
            let bearer = Bearer::new(Arc::clone(&ctx.oauth), key, settings);
            remote.bearer = Some(if obtained_now { bearer.obtained_now(token) } else { bearer });
        }
        None => oauth::inject(&token, &mut spec.env, &mut spec.args),
    }
    Ok(spec)
}

/// Discovers the tools of `entry` in the caller's configuration, traced as a `discovery` span.
/// `session` is the caller's MCP session (a `per_session` server lists its tools on the session's process).
pub async fn discover(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    entry: &ServerEntry,
) -> Result<DiscoveryResult, GatewayError> {
    spans::discovery(&entry.server_name, discover_untraced(ctx, identity, session, entry), |found| found.source).await
}

async fn discover_untraced(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    entry: &ServerEntry,
) -> Result<DiscoveryResult, GatewayError> {
    // A user without the values of a `per_user` server gets nothing of it, not even its cached tools (contract 16).
    user_values(ctx, identity, entry).await?;
    let key = pool_key(identity, entry);
    let settings = &identity.snapshot.settings;
    // A `per_user` server's tools are the user's own (cached locally under the user's pool key), never shared.
    let shared = settings.use_external_cache && ctx.external_cache.enabled() && !entry.is_per_user();
    let fingerprint = shared.then(|| fingerprint(entry, identity.snapshot.file.admin_apikey.as_deref()));
    // The shared cache bounds each Redis operation by `cache_timeout` itself (so it can count the failure and fall
    // back); the margin keeps this outer bound from cutting that short.
    let cached = ctx
        .timeouts
        .of(identity.mcp_config_id.as_deref())
        .run_classified(
            TimeoutKind::Cache,
            settings.timeouts.cache + crate::gateway::tools::execute::TIMEOUT_MARGIN,
            cached_tools(ctx, &identity.snapshot, &key, entry, fingerprint.as_deref()),
            |(_, timed_out)| *timed_out,
        )
        .await;
    if let Ok((Some(hit), _)) = cached {
        let tools = Arc::clone(&hit.tools);
        let (findings, quarantined) = (Arc::clone(&hit.findings), Arc::clone(&hit.quarantined));
        return Ok(DiscoveryResult { tools, source: "cache", server_metadata: None, findings, quarantined });
    }
    let configured = configured_tools(entry);
    if !configured.is_empty() {
        return Ok(DiscoveryResult::unreviewed(Arc::new(configured), "config", None));
    }
    // Boxed: asking the server is the rare case, and its future is many times the size of a cache hit's, which every
    // call's future would otherwise carry (and copy).
    Box::pin(discover_live(ctx, identity, session, entry, key, fingerprint)).await
}

/// Discovery by asking the server, after a cache miss: its tools reviewed, cached and returned.
async fn discover_live(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    entry: &ServerEntry,
    key: PoolKey,
    fingerprint: Option<String>,
) -> Result<DiscoveryResult, GatewayError> {
    let settings = &identity.snapshot.settings;
    let limit = settings.timeouts.discovery;
    let spec = upstream_spec(ctx, identity, entry).await?;
    // The pool enforces `limit` on the server's work; waiting for a process start is bounded by the start timeout.
    let backstop = limit + settings.start_timeout + crate::gateway::tools::execute::TIMEOUT_MARGIN;
    let live = ctx
        .timeouts
        .of(identity.mcp_config_id.as_deref())
        .run_classified(
            TimeoutKind::Discovery,
            backstop,
            ctx.pool.list_tools(&key, &spec, ctx.caller(identity, session, &spec), limit),
            |r| matches!(r, Err(UpstreamError::Timeout(_))),
        )
        .await
        .map_err(|t| GatewayError::new(ErrorCode::Timeout, t.to_string()))?
        .map_err(|e| upstream_failure(ctx, &e))?;
    let Reviewed { tools, findings, quarantined, pinned_now } = review(ctx, identity, entry, &key, live.tools);
    let (tools, quarantined) = listing::discovered_tools(ctx, identity, entry, tools, quarantined).await;
    let metadata = json!({
        "name": live.server_name,
        "version": live.server_version,
        "description": live.server_description.clone().or_else(|| entry.description.clone()),
    });
    if let Some(fingerprint) = &fingerprint {
        let (id, server) = (&key.mcp_config_id, &key.server_name);
        // A Redis that is down was counted and logged by the external cache; the local cache still gets the tools.
        let _ =
            ctx.external_cache.put_tools(id, server, fingerprint, &tools, &metadata, settings.tool_cache_expiry).await;
    }
    // Pins written on first use change the entry in the file: the tools are cached with the entry as it is now.
    let mut cached_entry = entry.clone();
    if pinned_now.is_some() {
        cached_entry.pinned_tools = pinned_now;
    }
    let cached = CachedTools {
        tools: Arc::clone(&tools),
        server_metadata: metadata.clone(),
        entry: cached_entry,
        same_in: AtomicU64::new(0),
        findings: Arc::clone(&findings),
        quarantined: Arc::clone(&quarantined),
    };
    ctx.tool_cache.insert(key, Arc::new(cached));
    Ok(DiscoveryResult { tools, source: "discovery", server_metadata: Some(metadata), findings, quarantined })
}

/// Step (1) of discovery: the shared cache when `fingerprint` is given (external cache on) and Redis answers, else the
/// local cache. Counts one hit or miss; says whether a Redis operation timed out.
async fn cached_tools(
    ctx: &GatewayContext,
    snapshot: &Snapshot,
    key: &PoolKey,
    entry: &ServerEntry,
    fingerprint: Option<&str>,
) -> (Option<Arc<CachedTools>>, bool) {
    let mut timed_out = false;
    if let Some(fingerprint) = fingerprint {
        match ctx.external_cache.get_tools(&key.mcp_config_id, &key.server_name, fingerprint).await {
            Ok(Some(found)) => {
                let hit = Arc::new(CachedTools {
                    tools: Arc::new(found.tools),
                    server_metadata: found.server_metadata,
                    entry: entry.clone(),
                    same_in: AtomicU64::new(0),
                    findings: Arc::default(),
                    quarantined: Arc::default(),
                });
                // Kept locally too, as the fallback for when Redis goes away.
                ctx.tool_cache.insert(key.clone(), Arc::clone(&hit));
                ctx.tool_cache.record_in(&key.mcp_config_id, true);
                return (Some(hit), false);
            }
            Ok(None) => {
                // Cleared or expired in the shared cache (maybe by another instance): the local copy goes too.
                ctx.tool_cache.remove(key);
                ctx.tool_cache.record_in(&key.mcp_config_id, false);
                return (None, false);
            }
            Err(e) => timed_out = matches!(e, ExternalError::Timeout(_)),
        }
    }
    let hit = ctx.tool_cache.peek(key).filter(|hit| same_entry(snapshot, key, entry, hit));
    ctx.tool_cache.record_in(&key.mcp_config_id, hit.is_some());
    (hit, timed_out)
}

/// Whether `hit` was discovered with `entry` (but for its prompt and resource pins). The entries are compared in full
/// once per snapshot (a cost that grows with the entry: its command, arguments, environment, filters, pins): when
/// `entry` is the snapshot's own entry for `key`, which never changes, a hit once found the same under that snapshot
/// is the same for every later call under it.
fn same_entry(snapshot: &Snapshot, key: &PoolKey, entry: &ServerEntry, hit: &CachedTools) -> bool {
    let of_snapshot = entry.server_name == key.server_name
        && snapshot
            .file
            .mcp_configs
            .get(&key.mcp_config_id)
            .is_some_and(|config| config.mcp_config.as_ptr_range().contains(&std::ptr::from_ref(entry)));
    if of_snapshot && hit.same_in.load(Ordering::Relaxed) == snapshot.generation {
        return true;
    }
    let same = hit.entry.same_but_offer_pins(entry);
    if same && of_snapshot {
        hit.same_in.store(snapshot.generation, Ordering::Relaxed);
    }
    same
}

/// `gw_discover_all_tools`.
pub async fn discover_tool(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    input: DiscoverInput,
) -> Value {
    match input.server_name {
        Some(name) => match find_server(identity, &name) {
            Ok(entry) => discover_visible(ctx, identity, session, entry)
                .await
                .map(|d| d.to_value())
                .unwrap_or_else(|f| f.answer()),
            Err(f) => f.answer(),
        },
        None => {
            let entries = match visible_servers(identity) {
                Ok(entries) => entries,
                Err(f) => return f.answer(),
            };
            let mut out = serde_json::Map::new();
            for entry in entries {
                let one = discover_visible(ctx, identity, session, entry)
                    .await
                    .map(|d| d.to_value())
                    .unwrap_or_else(|f| f.answer());
                out.insert(entry.server_name.clone(), one);
            }
            json!({"status": "success", "servers": out})
        }
    }
}

/// `gw_list_all_servers`.
pub async fn list_servers(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    input: ListServersInput,
) -> Value {
    let entries = match visible_servers(identity) {
        Ok(entries) => entries,
        Err(f) => return f.answer(),
    };
    let mut list = Vec::with_capacity(entries.len());
    for entry in entries {
        let mut server = json!({"server_name": entry.server_name, "description": entry.description});
        if input.discover_tools {
            match discover_visible(ctx, identity, session, entry).await {
                Ok(found) => server["tools"] = json!(found.tools),
                Err(f) => server["tools_error"] = f.answer(),
            }
        }
        list.push(server);
    }
    json!({"status": "success", "servers": list})
}

/// `gw_get_server_info`: never env values or OAuth secrets.
pub async fn server_info(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    input: ServerInput,
) -> Value {
    let entry = match find_server(identity, &input.server_name) {
        Ok(entry) => entry,
        Err(f) => return f.answer(),
    };
    let enabled = |p: &Option<crate::config::model::GuardrailPolicy>| p.as_ref().is_some_and(|p| p.is_enabled());
    let mut info = json!({
        "server_name": entry.server_name,
        "description": entry.description,
        "input_guardrails_enabled": enabled(&entry.input_guardrails_policy),
        "output_guardrails_enabled": enabled(&entry.output_guardrails_policy),
    });
    match discover_visible(ctx, identity, session, entry).await {
        Ok(found) => {
            info["tools"] = json!(found.tools);
            info["tools_source"] = json!(found.source);
        }
        Err(f) => {
            info["tools"] = json!([]);
            info["tools_error"] = f.answer();
        }
    }
    json!({"status": "success", "server_name": entry.server_name, "server_info": info})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(args: &[&str]) -> Snapshot {
        let file = json!({
            "mcp_configs": {"c1": {"mcp_config_name": "one", "mcp_config": [
                {"server_name": "s", "config": {"command": "run", "args": args}},
                {"server_name": "t", "config": {"command": "other"}}
            ]}},
            "projects": {}, "users": {}, "apikeys": {}
        });
        Snapshot::from_value(file, [0; 32]).expect("a valid configuration")
    }

    fn cached(entry: &ServerEntry) -> CachedTools {
        CachedTools {
            tools: Arc::default(),
            server_metadata: Value::Null,
            entry: entry.clone(),
            same_in: AtomicU64::new(0),
            findings: Arc::default(),
            quarantined: Arc::default(),
        }
    }

    #[test]
    fn a_hit_is_compared_once_per_snapshot_and_only_with_the_snapshots_own_entry() {
        let first = snapshot(&["a"]);
        let key = PoolKey::new("c1", "s");
        let entry = &first.file.mcp_configs["c1"].mcp_config[0];
        let hit = cached(entry);
        assert!(same_entry(&first, &key, entry, &hit));
        assert_eq!(hit.same_in.load(Ordering::Relaxed), first.generation, "found the same under this snapshot");
        assert!(same_entry(&first, &key, entry, &hit));

        // An entry that is not the snapshot's own (a copy, changed) is compared in full, whatever was found before.
        let mut changed = entry.clone();
        changed.tool_prefix = Some("x_".into());
        assert!(!same_entry(&first, &key, &changed, &hit));
        // Another server's entry of the same snapshot does not pass for this key's.
        let other = &first.file.mcp_configs["c1"].mcp_config[1];
        assert!(!same_entry(&first, &key, other, &hit));

        // A new snapshot with the entry changed: compared again, and the hit is not the same.
        let second = snapshot(&["b"]);
        assert_ne!(second.generation, first.generation);
        let changed = &second.file.mcp_configs["c1"].mcp_config[0];
        assert!(!same_entry(&second, &key, changed, &hit));
        assert_eq!(hit.same_in.load(Ordering::Relaxed), first.generation);
        // A new snapshot with the same entry: compared again, and the same.
        let third = snapshot(&["a"]);
        assert!(same_entry(&third, &key, &third.file.mcp_configs["c1"].mcp_config[0], &hit));
        assert_eq!(hit.same_in.load(Ordering::Relaxed), third.generation);
    }
}
