//! `gw_get_cache_status`, `gw_clear_cache` and `gw_get_timeout_metrics`.
//!
//! Each caller sees and clears only its own share (contract 13, "Tenants stay apart"): the cached tools of its MCP
//! configuration, the resolved identities of that configuration, and their hits and misses.
//!
//! With the external cache on, the status adds `external: {reachable, host, port, db, errors}` (never the password)
//! and a clear also deletes the shared entries it covers, reporting their count in `external_cleared`.

use serde_json::{Value, json};

use super::ClearCacheInput;
use crate::auth::Identity;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::timeouts::config_report;
use crate::upstream::oauth::TokenKey;

/// `gw_get_cache_status`.
pub fn cache_status(ctx: &GatewayContext, identity: &Identity) -> Value {
    let external = identity.snapshot.settings.use_external_cache;
    let config_id = identity.mcp_config_id.clone().unwrap_or_default();
    let scope = identity.cache_scope();
    let mut out = json!({
        "status": "success",
        "cache_type": if external { "external" } else { "local" },
        "tool_cache": ctx.tool_cache.stats_in(&config_id, |key, _| key.mcp_config_id == config_id),
        "config_cache": ctx.config_cache.stats_in(&scope, |_, cached| cached.cache_scope() == scope),
    });
    if external && let Some(report) = ctx.external_cache.report() {
        out["external"] = json!(report);
    }
    out
}

/// `gw_clear_cache`: cached tools of the caller's configuration (one server or all) and/or the gateway config cache.
pub async fn clear_cache(ctx: &GatewayContext, identity: &Identity, input: ClearCacheInput) -> Value {
    let kind = input.cache_type.as_deref().unwrap_or("all");
    let (tools, gateway_config) = match kind {
        "all" => (true, true),
        "tools" => (true, false),
        "gateway_config" => (false, true),
        other => {
            return GatewayError::new(
                ErrorCode::InvalidArguments,
                format!("cache_type must be all, tools or gateway_config, not {other:?}"),
            )
            .answer();
        }
    };
    let config_id = identity.mcp_config_id.clone().unwrap_or_default();
    let server = input.server_name.as_deref();
    let cleared_tools = if tools {
        ctx.tool_cache
            .remove_where(|key, _| key.mcp_config_id == config_id && server.is_none_or(|s| s == key.server_name))
    } else {
        0
    };
    // Only the identities of the caller's own configuration: a key holder never clears other projects' entries.
    let scope = identity.cache_scope();
    let cleared_config =
        if gateway_config { ctx.config_cache.remove_where(|_, cached| cached.cache_scope() == scope) } else { 0 };
    // `all` also forgets the caller's upstream OAuth tokens: the next call gets a new one from the issuer (a forced
    // refresh, for when an upstream rejects a token before it expires).
    let cleared_tokens = if kind == "all" { forget_oauth_tokens(ctx, identity, &config_id, server) } else { 0 };
    let mut message = format!(
        "cleared {cleared_tools} tool cache entries, {cleared_config} gateway config cache entries and \
         {cleared_tokens} OAuth tokens"
    );
    let mut out = json!({"status": "success", "cleared": {"tools": cleared_tools, "gateway_config": cleared_config,
        "oauth_tokens": cleared_tokens}});
    if identity.snapshot.settings.use_external_cache && ctx.external_cache.enabled() {
        let shared_tools = if tools { Some(ctx.external_cache.clear_tools(&config_id, server).await) } else { None };
        // Shared answers are sealed with each key, so the one the gateway can tell apart is the caller's own.
        let shared_config = if gateway_config {
            Some(ctx.external_cache.clear_gateway_config(&identity.key_digest).await)
        } else {
            None
        };
        let count = |r: &Option<Result<u64, _>>| match r {
            Some(Ok(n)) => json!(n),
            None => json!(0),
            Some(Err(_)) => Value::Null,
        };
        out["external_cleared"] = json!({"tools": count(&shared_tools), "gateway_config": count(&shared_config)});
        match [shared_tools, shared_config].into_iter().flatten().find_map(Result::err) {
            None => message.push_str("; and their shared (external cache) entries"),
            Some(e) => message.push_str(&format!("; the shared (external cache) entries were not cleared: {e}")),
        }
    }
    out["message"] = json!(message);
    out
}

/// Forgets the OAuth tokens of the caller's project for its servers (one server or all); returns how many servers
/// with OAuth that covered.
fn forget_oauth_tokens(ctx: &GatewayContext, identity: &Identity, config_id: &str, server: Option<&str>) -> usize {
    let Ok(entries) = super::discovery::servers(identity) else { return 0 };
    let with_oauth = entries.iter().filter(|entry| {
        server.is_none_or(|s| s == entry.server_name)
            && entry.oauth_config.as_ref().and_then(|c| c.enabled).unwrap_or(false)
    });
    let mut count = 0;
    for entry in with_oauth {
        let key = TokenKey::new(entry.server_name.clone(), config_id.to_string(), identity.project_id.clone());
        ctx.oauth.invalidate(&key);
        count += 1;
    }
    count
}

/// `gw_get_timeout_metrics`.
pub fn timeout_metrics(ctx: &GatewayContext, identity: &Identity) -> Value {
    let pool = ctx.pool.stats();
    json!({
        "status": "success",
        // The caller's configuration's operations only (contract 14), as `gw_get_cache_status` reports its entries.
        "timeout_metrics": ctx.timeouts.report(identity.mcp_config_id.as_deref()),
        "timeout_config": config_report(&identity.snapshot.settings.timeouts),
        // Process starts have a timeout of their own (`upstream_pool.start_timeout_seconds`), counted by the pool.
        "upstream_starts": {
            "attempts": pool.start_attempts,
            "failures": pool.start_failures,
            "timeouts": pool.start_timeouts,
            "start_timeout_seconds": identity.snapshot.settings.start_timeout.as_secs_f64(),
        },
    })
}
