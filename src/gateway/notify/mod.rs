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
//! Each goes to the [`Target`]s that see the list: sessions of the revisions with `initialize` (on their `GET`
//! stream), and 2026-07-28 clients on their `subscriptions/listen` stream ([`listeners`]). A list change carries no
//! content, so it needs no guardrail; a `resources/updated` passes the boundary's quarantine check first
//! (`gateway/mod.rs`). Each target is told on a task of its own: a client that does not read holds no lock and
//! delays nobody else.

pub mod coalesce;
pub mod listeners;
pub mod relay;
pub mod view;

use rmcp::RoleServer;
use rmcp::service::{Peer, SubscriptionSink};

use crate::config::exposure::ToolExposure;

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
    /// A session of a revision with `initialize`: its notifications go to its `GET` stream.
    Session(Peer<RoleServer>),
    /// A 2026-07-28 `subscriptions/listen` stream (rmcp sends only what its filter accepted).
    Listener(SubscriptionSink),
}

impl Target {
    async fn tell(&self, list: List) -> Result<(), String> {
        match self {
            Target::Session(peer) => match list {
                List::Tools => peer.notify_tool_list_changed().await,
                List::Prompts => peer.notify_prompt_list_changed().await,
                List::Resources => peer.notify_resource_list_changed().await,
            }
            .map_err(|e| e.to_string()),
            Target::Listener(sink) => match list {
                List::Tools => sink.notify_tool_list_changed().await,
                List::Prompts => sink.notify_prompt_list_changed().await,
                List::Resources => sink.notify_resource_list_changed().await,
            }
            .map_err(|e| e.to_string()),
        }
    }

    /// Sends `notifications/resources/updated` of `uri` (already checked by the boundary).
    pub async fn updated(&self, params: rmcp::model::ResourceUpdatedNotificationParam) -> Result<(), String> {
        match self {
            Target::Session(peer) => peer.notify_resource_updated(params).await.map_err(|e| e.to_string()),
            Target::Listener(sink) => sink.notify_resource_updated(params.uri).await.map_err(|e| e.to_string()),
        }
    }
}

/// Tells each target that `lists` changed, each on a task of its own. `why` goes to the debug log of a failure.
pub fn tell(targets: Vec<Target>, lists: Lists, why: &'static str) {
    if !lists.any() {
        return;
    }
    for target in targets {
        tokio::spawn(async move {
            for list in lists.each() {
                if let Err(error) = target.tell(list).await {
                    tracing::debug!(%error, list = list.name(), why, "a client was not told of a changed list");
                }
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
