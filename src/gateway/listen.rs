//! A 2026-07-28 `subscriptions/listen` stream (contract 15): the revision's replacement of the session's `GET` stream
//! and of `resources/subscribe`. The client POSTs `subscriptions/listen` with `notifications: {toolsListChanged,
//! promptsListChanged, resourcesListChanged, resourceSubscriptions: [uri, ...]}`; rmcp acknowledges what the gateway
//! accepts (`notifications/subscriptions/acknowledged`, the answer turning into an event stream) and the request
//! stays open. Every notification on it carries the listen request's id as `_meta.subscriptionId`.
//!
//! The stream hears what a session would: list changes of a reload that changes its key's view, of an upstream,
//! and of a server that was late for a listing; `notifications/resources/updated` of the URIs it named, each
//! subscribed at the server that serves it exactly as `resources/subscribe` is (curation, quarantine: a URI the
//! caller may not read is not subscribed, and an update of one quarantined since is dropped by the boundary). It ends
//! when the client closes it (a cancelled request) or when the drain begins: the final result (`resultType:
//! "complete"`) tells the client to listen again, elsewhere. The upstream subscriptions it alone held end with it.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::service::SubscriptionContext;

use super::GatewayContext;
use super::notify::Scope;
use super::notify::listeners::MAX_RESOURCES;
use super::transparent::resources;
use super::transparent::subscriptions::Holder;
use crate::auth::Identity;
use crate::config::exposure::ToolExposure;
use crate::error::{ErrorCode, GatewayError};

/// Serves one listen stream of `identity` until it ends.
pub async fn serve(
    ctx: &GatewayContext,
    identity: Arc<Identity>,
    asked: Option<ToolExposure>,
    subscription: &SubscriptionContext,
) -> Result<(), McpError> {
    let scope = Scope::of(&identity, asked);
    let max = identity.snapshot.settings.limits.max_sessions_per_key;
    let sink = subscription.sink().clone();
    let Some(listening) = ctx.listeners.add(identity.key_digest, scope.clone(), sink, max) else {
        let message = format!(
            "this API key has {max} MCP sessions and listen streams open, its limit (limits.max_sessions_per_key); \
             close one first"
        );
        let refused = GatewayError::new(ErrorCode::SessionLimit, message);
        return Err(McpError::new(rmcp::model::ErrorCode(-32000), refused.message.clone(), Some(refused.answer())));
    };
    let holder = Holder::Stream(listening.id());
    let uris = subscription.accepted().resource_subscriptions.clone().unwrap_or_default();
    if !uris.is_empty() && !scope.sees_upstreams(&identity.snapshot) {
        tracing::info!(resources = uris.len(), "a listen stream named resources, but its view has none");
    } else {
        for uri in uris.iter().take(MAX_RESOURCES) {
            match resources::subscribe(ctx, &identity, None, holder.clone(), uri, true).await {
                Ok(server) => listening.subscribed(&server, uri),
                Err(refused) => {
                    tracing::info!(error = %refused.message, "a resource named by a listen stream is not subscribed")
                }
            }
        }
    }
    tracing::debug!(streams = ctx.listeners.len(), "a listen stream is open");
    tokio::select! {
        _ = subscription.cancelled() => {}
        _ = ctx.drain_begun.cancelled() => tracing::debug!("a listen stream ends: the gateway drains"),
    }
    drop(listening);
    // What it alone subscribed to ends upstream.
    resources::unsubscribe_released(ctx, ctx.subscriptions.release_all(&holder)).await;
    Ok(())
}
