//! Telling open clients that what they see changed (contract 15, "Changes reach open clients").
//!
//! Three causes, one way out:
//! - a reload (file watcher, SIGHUP, admin write, the Redis follower: they share the store's one reload path) that
//!   changes what a client's key sees: [`view::changed`] compares, per [`Scope`] (configuration, project, the view the
//!   client asked for), a digest of everything the listing depends on in the old and the new snapshot, so the cost of
//!   a reload is one digest per scope, not per session, and asks no upstream anything;
//! - an upstream's own `list_changed`, limited per server and list by [`coalesce`] (a hostile upstream spamming them
//!   costs at most one relay a second);
//! - a server that was left out of a listing because it was not ready within its `discovery_timeout`, once it is
//!   (`gateway/transparent/late.rs`).
//!
//! Each goes to the [`Target`]s that see the list: sessions of the revisions with `initialize` (queued in the
//! session's own outbox, which the session layer sends on its `GET` stream, dormant or not: `gateway/sessions/`), and
//! 2026-07-28 clients on their `subscriptions/listen` stream ([`listeners`]). A list change carries no content, so it
//! needs no guardrail; a `resources/updated` passes the boundary's quarantine check first (`gateway/mod.rs`). A
//! session's message is encoded once for all and queued at once (a bounded queue: a client that does not read loses
//! its oldest messages, counted as `session_stream_queue`); every other target is told on a task of its own: a client
//! that does not read holds no lock and delays nobody else.

pub mod coalesce;
pub mod listeners;
pub mod relay;
pub mod view;

use bytes::Bytes;
use rmcp::model::{
    PromptListChangedNotification, ResourceListChangedNotification, ResourceUpdatedNotification,
    ResourceUpdatedNotificationParam, ServerNotification, ToolListChangedNotification,
};
use rmcp::service::SubscriptionSink;

use crate::config::exposure::ToolExposure;
use crate::gateway::GatewayContext;
use crate::gateway::sessions::{Channel, encode};

/// One of the lists a client can be told changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum List {
    Tools,
    Prompts,
    /// Resources and resource templates (one notification covers both).
    Resources,
}

impl List {
    /// The list an upstream's `notifications/{list}/list_changed` names.
    pub fn of_upstream(list: &str) -> List {
        match list {
            "tools" => List::Tools,
            "prompts" => List::Prompts,
            _ => List::Resources,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            List::Tools => "tools",
            List::Prompts => "prompts",
            List::Resources => "resources",
        }
    }

    /// Its `notifications/{list}/list_changed`.
    fn changed(self) -> ServerNotification {
        match self {
            List::Tools => ServerNotification::ToolListChangedNotification(ToolListChangedNotification::default()),
            List::Prompts => {
                ServerNotification::PromptListChangedNotification(PromptListChangedNotification::default())
            }
            List::Resources => {
                ServerNotification::ResourceListChangedNotification(ResourceListChangedNotification::default())
            }
        }
    }
}

/// Which lists changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lists {
    pub tools: bool,
    pub prompts: bool,
    pub resources: bool,
}

impl Lists {
    pub fn one(list: List) -> Lists {
        let mut lists = Lists::default();
        match list {
            List::Tools => lists.tools = true,
            List::Prompts => lists.prompts = true,
            List::Resources => lists.resources = true,
        }
        lists
    }

    pub fn any(self) -> bool {
        self.tools || self.prompts || self.resources
    }

    fn each(self) -> impl Iterator<Item = List> {
        [(self.tools, List::Tools), (self.prompts, List::Prompts), (self.resources, List::Resources)]
            .into_iter()
            .filter_map(|(changed, list)| changed.then_some(list))
    }
}

/// What a client's listings depend on besides the upstreams: its MCP configuration, its project (curation), and the
/// view it asked for (`X-Mcpgw-Tool-Exposure`, `GW_TOOL_EXPOSURE`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    pub config: String,
    pub project: String,
    pub asked: Option<ToolExposure>,
}

impl Scope {
    pub fn of(identity: &crate::auth::Identity, asked: Option<ToolExposure>) -> Scope {
        Scope {
            config: identity.mcp_config_id.clone().unwrap_or_default(),
            project: identity.project_id.clone(),
            asked,
        }
    }

    /// Whether the client sees the upstreams' lists under `snapshot` (and so hears of their changes).
    pub fn sees_upstreams(&self, snapshot: &crate::config::Snapshot) -> bool {
        snapshot.tool_exposure(Some(&self.config)).chosen(self.asked).upstream()
    }
}

/// Where a client is told.
#[derive(Clone)]
pub enum Target {
    /// A session of a revision with `initialize` (over HTTP its outbox, sent on its `GET` stream; over stdio its peer).
    Session(Channel),
    /// A 2026-07-28 `subscriptions/listen` stream (rmcp sends only what its filter accepted).
    Listener(SubscriptionSink),
}

impl Target {
    async fn tell(&self, list: List) -> Result<(), String> {
        match self {
            Target::Session(channel) => channel.notify(list.changed()).await,
            Target::Listener(sink) => match list {
                List::Tools => sink.notify_tool_list_changed().await,
                List::Prompts => sink.notify_prompt_list_changed().await,
                List::Resources => sink.notify_resource_list_changed().await,
            }
            .map_err(|e| e.to_string()),
        }
    }

    /// Sends `notifications/resources/updated` of `uri` (already checked by the boundary).
    async fn updated(&self, params: ResourceUpdatedNotificationParam) -> Result<(), String> {
        match self {
            Target::Session(channel) => {
                channel
                    .notify(ServerNotification::ResourceUpdatedNotification(ResourceUpdatedNotification::new(params)))
                    .await
            }
            Target::Listener(sink) => sink.notify_resource_updated(params.uri).await.map_err(|e| e.to_string()),
        }
    }

    /// Queues `message` at once when the target is a session's outbox (counting the unsent messages it pushed out);
    /// false for a target to be told on a task.
    fn queued(&self, ctx: &GatewayContext, message: Option<&Bytes>) -> bool {
        let (Target::Session(channel), Some(message)) = (self, message) else { return false };
        let Some(dropped) = channel.queue(message) else { return false };
        if dropped > 0 {
            ctx.store.metrics().limit_hit("session_stream_queue");
            tracing::debug!(dropped, "a session's queue was full; its oldest unsent messages were dropped");
        }
        true
    }
}

/// Tells each target that `lists` changed: a session's outbox at once, the others each on a task of its own. `why`
/// goes to the debug log of a failure.
pub fn tell(ctx: &GatewayContext, targets: Vec<Target>, lists: Lists, why: &'static str) {
    if !lists.any() {
        return;
    }
    let encoded: Vec<(List, Option<Bytes>)> = lists.each().map(|list| (list, encode(list.changed()))).collect();
    for target in targets {
        let rest: Vec<List> = encoded
            .iter()
            .filter(|(_, message)| !target.queued(ctx, message.as_ref()))
            .map(|(list, _)| *list)
            .collect();
        if rest.is_empty() {
            continue;
        }
        tokio::spawn(async move {
            for list in rest {
                if let Err(error) = target.tell(list).await {
                    tracing::debug!(%error, list = list.name(), why, "a client was not told of a changed list");
                }
            }
        });
    }
}

/// Tells each target subscribed to a resource that it was updated (`params` already checked by the boundary): a
/// session's outbox at once, the others each on a task of its own.
pub fn updated(ctx: &GatewayContext, targets: Vec<Target>, params: ResourceUpdatedNotificationParam) {
    let notification =
        ServerNotification::ResourceUpdatedNotification(ResourceUpdatedNotification::new(params.clone()));
    let message = encode(notification);
    let params = std::sync::Arc::new(params);
    for target in targets {
        if target.queued(ctx, message.as_ref()) {
            continue;
        }
        let params = std::sync::Arc::clone(&params);
        tokio::spawn(async move {
            if let Err(error) = target.updated(params.as_ref().clone()).await {
                tracing::debug!(%error, "a client was not told of an updated resource");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_name_what_changed() {
        assert!(!Lists::default().any());
        let tools = Lists::one(List::Tools);
        assert_eq!(tools.each().collect::<Vec<_>>(), [List::Tools]);
        assert_eq!(List::of_upstream("prompts"), List::Prompts);
        assert_eq!(List::of_upstream("resources"), List::Resources);
    }
}
