//! Requests to one upstream server for what transparent mode serves besides tools: paged lists (prompts, resources,
//! resource templates) and single requests (completion, logging level), on a pooled process under
//! `discovery_timeout`. A server whose `initialize` did not declare the capability is not asked.

use rmcp::model::ServerCapabilities;
use serde_json::{Map, Value, json};

use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::gateway::capabilities::{Capability, declares};
use crate::gateway::tools::{TIMEOUT_MARGIN, upstream_failure, upstream_spec};
use crate::gateway::user_secrets::pool_key;
use crate::timeouts::TimeoutKind;
use crate::upstream::{Caller, UpstreamError};

/// Pages read of one list before the server is taken to be looping.
const MAX_PAGES: usize = 100;

/// One request to `entry`'s server; `None` when it does not declare `capability`.
pub async fn request(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    entry: &ServerEntry,
    capability: Capability,
    method: &str,
    params: Value,
) -> Result<Option<Value>, GatewayError> {
    let key = pool_key(identity, entry);
    let spec = upstream_spec(ctx, identity, entry).await?;
    let settings = &identity.snapshot.settings;
    let limit = settings.timeouts.discovery;
    let declared = move |c: &ServerCapabilities| declares(c, capability);
    let caller = ctx.caller(identity, session, &spec);
    ctx.timeouts
        .of(identity.mcp_config_id.as_deref())
        .run_classified(
            TimeoutKind::Discovery,
            limit + settings.start_timeout + TIMEOUT_MARGIN,
            ctx.pool.request(&key, &spec, caller, method, params, limit, declared, None),
            |r| matches!(r, Err(UpstreamError::Timeout(_))),
        )
        .await
        .map_err(|t| GatewayError::new(ErrorCode::Timeout, t.to_string()))?
        .map_err(|e| upstream_failure(ctx, &e))
}

/// Whether `entry`'s server has a process running (or starting) for this caller now; starts none.
pub async fn running(ctx: &GatewayContext, identity: &Identity, session: Option<&str>, entry: &ServerEntry) -> bool {
    let key = pool_key(identity, entry);
    let Ok(spec) = upstream_spec(ctx, identity, entry).await else { return false };
    ctx.pool.has_process(&key, &spec, Caller::new(&identity.key_digest, session))
}

/// Every item of list `method` (the array `field` of each page) of `entry`'s server; empty when it does not
/// declare `capability`.
pub async fn list_all(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    entry: &ServerEntry,
    capability: Capability,
    method: &str,
    field: &str,
) -> Result<Vec<Value>, GatewayError> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => Value::Object(Map::new()),
        };
        let Some(mut page) = request(ctx, identity, session, entry, capability, method, params).await? else {
            return Ok(items);
        };
        match page.get_mut(field).map(Value::take) {
            Some(Value::Array(listed)) => items.extend(listed.into_iter().filter(Value::is_object)),
            None | Some(Value::Null) => {}
            Some(_) => {
                let message = format!("the server's {method} result has no array {field:?}");
                return Err(GatewayError::new(ErrorCode::UpstreamError, message));
            }
        }
        cursor = match page.get("nextCursor") {
            Some(Value::String(next)) if Some(next) != cursor.as_ref() => Some(next.clone()),
            _ => return Ok(items),
        };
    }
    let message = format!("the server's {method} goes on past {MAX_PAGES} pages");
    Err(GatewayError::new(ErrorCode::UpstreamError, message))
}
