//! One slow server does not stall the others (contract 15): a transparent listing waits at most the server's
//! `discovery_timeout` for each server, its start included ([`within`]). A server not ready by then is left out of
//! that answer (a WARN log names it); what it was asked goes on in the background, and once it has answered, the
//! sessions that listed without it, and the 2026-07-28 listen streams of its configuration, are told that the list
//! changed, so their clients list again and find it.
//!
//! Bounds: one background wait per (configuration, server, list) at a time, however many clients list while it
//! starts (later ones only add their session to those to tell); the wait itself is bounded by the pool's own
//! timeouts (`start_timeout_seconds`, then `discovery_timeout` on the upstream's work).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};

use super::upstream;
use crate::auth::Identity;
use crate::config::model::ServerEntry;
use crate::error::{ErrorCode, GatewayError};
use crate::gateway::GatewayContext;
use crate::gateway::capabilities::Capability;
use crate::gateway::notify::{self, List, Lists, Target};
use crate::gateway::tools::discover_visible;
use crate::upstream::PoolKey;

/// The servers being waited for in the background, with the sessions to tell when each is ready.
#[derive(Default)]
pub struct LateServers {
    waiting: Mutex<HashMap<(PoolKey, List), HashSet<String>>>,
}

impl LateServers {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(PoolKey, List), HashSet<String>>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds `session` to those to tell; `true` when nobody waits for this server and list yet (the caller starts
    /// the wait).
    fn wait(&self, key: &PoolKey, list: List, session: Option<&str>) -> bool {
        let mut map = self.map();
        let first = !map.contains_key(&(key.clone(), list));
        let sessions = map.entry((key.clone(), list)).or_default();
        if let Some(session) = session {
            sessions.insert(session.to_string());
        }
        first
    }

    fn done(&self, key: &PoolKey, list: List) -> HashSet<String> {
        self.map().remove(&(key.clone(), list)).unwrap_or_default()
    }
}

/// `asked` (what a listing asks `entry`'s server for `list`), bounded by the server's `discovery_timeout`. Past it,
/// the server is left out of this answer (`TIMEOUT`, which the listing logs as left out) and waited for in the
/// background.
pub async fn within<T>(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    entry: &ServerEntry,
    list: List,
    asked: impl Future<Output = Result<T, GatewayError>>,
) -> Result<T, GatewayError> {
    let limit = entry.discovery_wait(identity.snapshot.settings.timeouts.discovery);
    match tokio::time::timeout(limit, asked).await {
        Ok(answer) => answer,
        Err(_) => {
            tracing::warn!(server_name = %entry.server_name, list = list.name(), seconds = limit.as_secs_f64(),
                "transparent mode: the server was not ready within its discovery_timeout; it is left out of this \
                 answer, and its clients are told when it is ready");
            wait_in_background(ctx, identity, session, entry, list);
            let message = format!(
                "the server {:?} was not ready within its discovery_timeout ({} s); a list change follows when it is",
                entry.server_name,
                limit.as_secs_f64()
            );
            Err(GatewayError::new(ErrorCode::Timeout, message))
        }
    }
}

fn wait_in_background(
    ctx: &GatewayContext,
    identity: &Identity,
    session: Option<&str>,
    entry: &ServerEntry,
    list: List,
) {
    let key = crate::gateway::user_secrets::pool_key(identity, entry);
    if !ctx.late.wait(&key, list, session) {
        return;
    }
    let Some(ctx) = ctx.me.upgrade() else { return };
    let (identity, entry, session) = (Arc::new(identity.clone()), entry.clone(), session.map(str::to_string));
    tokio::spawn(async move {
        let session = session.as_deref();
        let ready = match list {
            List::Tools => discover_visible(&ctx, &identity, session, &entry).await.map(drop),
            List::Prompts => {
                upstream::list_all(&ctx, &identity, session, &entry, Capability::Prompts, "prompts/list", "prompts")
                    .await
                    .map(drop)
            }
            List::Resources => {
                let (resources, method) = (Capability::Resources, "resources/list");
                upstream::list_all(&ctx, &identity, session, &entry, resources, method, "resources").await.map(drop)
            }
        };
        let sessions = ctx.late.done(&key, list);
        match ready {
            Ok(()) => told_ready(&ctx, &key, list, sessions),
            Err(failure) => tracing::warn!(server_name = %key.server_name, list = list.name(),
                error_code = %failure.code, error = %failure.message,
                "transparent mode: a server left out of a listing failed to become ready; nobody is told"),
        }
    });
}

/// Tells the sessions that listed without the server, and the listen streams of its configuration that see the
/// upstreams, that `list` changed.
fn told_ready(ctx: &GatewayContext, key: &PoolKey, list: List, sessions: HashSet<String>) {
    let snapshot = ctx.store.snapshot();
    let mut targets: Vec<Target> =
        sessions.iter().filter_map(|session| ctx.sessions.channel_of(session)).map(Target::Session).collect();
    let listeners = ctx.listeners.of_config(&key.mcp_config_id);
    targets.extend(
        listeners
            .into_iter()
            .filter(|(scope, _)| scope.sees_upstreams(&snapshot))
            .map(|(_, sink)| Target::Listener(sink)),
    );
    tracing::info!(server_name = %key.server_name, list = list.name(), clients = targets.len(),
        "transparent mode: a server left out of a listing is ready; its clients are told");
    notify::tell(ctx, targets, Lists::one(list), "a late server");
}
