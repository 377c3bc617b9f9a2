//! `gw_get_cache_status`, `gw_clear_cache` and `gw_get_timeout_metrics`.

use serde_json::{Value, json};

use super::{ClearCacheInput, Failure};
use crate::gateway::timeouts::config_report;
use crate::gateway::{GatewayContext, Identity};

/// `gw_get_cache_status`.
pub fn cache_status(ctx: &GatewayContext, identity: &Identity) -> Value {
    let external = identity.snapshot.settings.use_external_cache;
    json!({
        "status": "success",
        "cache_type": if external { "external" } else { "local" },
        "tool_cache": ctx.tool_cache.stats(),
        "config_cache": ctx.config_cache.stats(),
    })
}

/// `gw_clear_cache`: cached tools of the caller's configuration (one server or all) and/or the gateway config cache.
pub fn clear_cache(ctx: &GatewayContext, identity: &Identity, input: ClearCacheInput) -> Value {
    let kind = input.cache_type.as_deref().unwrap_or("all");
    let (tools, gateway_config) = match kind {
        "all" => (true, true),
        "tools" => (true, false),
        "gateway_config" => (false, true),
        other => {
            return Failure::new(
                "INVALID_ARGUMENTS",
                format!("cache_type must be all, tools or gateway_config, not {other:?}"),
            )
            .to_value();
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
    let cleared_config = if gateway_config { ctx.config_cache.clear() } else { 0 };
    json!({
        "status": "success",
        "message": format!("cleared {cleared_tools} tool cache entries and {cleared_config} gateway config cache entries"),
        "cleared": {"tools": cleared_tools, "gateway_config": cleared_config},
    })
}

/// `gw_get_timeout_metrics`.
pub fn timeout_metrics(ctx: &GatewayContext, identity: &Identity) -> Value {
    let pool = ctx.pool.stats();
    json!({
        "status": "success",
        "timeout_metrics": ctx.timeouts.report((pool.connect_attempts, pool.connect_timeouts)),
        "timeout_config": config_report(&identity.snapshot.settings.timeouts),
    })
}
