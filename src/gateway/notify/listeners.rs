//! The open 2026-07-28 `subscriptions/listen` streams: a stateless client's way to hear of list changes and of
//! updates of the resources it named (the revision has no `resources/subscribe`: the URIs travel in the listen
//! request's `notifications.resourceSubscriptions`).
//!
//! Bounds: over HTTP a listen stream holds a place under `limits.max_sessions` and `limits.max_sessions_per_key` for
//! as long as it is open (`gateway/middleware/sessions.rs`); [`Listeners::add`] holds the per-key bound again for
//! every front (stdio included), and a stream names at most [`MAX_RESOURCES`] resources. A stream ends when its client
//! goes, or when the drain begins (`gateway/handler/`).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::service::SubscriptionSink;

use super::Scope;

/// The most resources one listen stream may name (more are not subscribed, and logged).
pub const MAX_RESOURCES: usize = 64;

struct Listener {
    key: [u8; 32],
    scope: Scope,
    sink: SubscriptionSink,
    /// (server, URI) of the resources it named that an upstream subscribed to.
    resources: HashSet<(String, String)>,
}

/// Every open listen stream, by a number of its own.
#[derive(Default)]
pub struct Listeners {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Listener>>,
}

/// Removes its stream from the registry when dropped (the stream ended, however it ended).
pub struct Listening<'a> {
    listeners: &'a Listeners,
    id: u64,
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.listeners.map().remove(&self.id);
    }
}

impl Listening<'_> {
    /// The stream's number.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Records that the stream hears of updates of `uri` of `server`.
    pub fn subscribed(&self, server: &str, uri: &str) {
        if let Some(listener) = self.listeners.map().get_mut(&self.id) {
            listener.resources.insert((server.to_string(), uri.to_string()));
        }
    }
}

impl Listeners {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Listener>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a stream of key `key`, unless the key has `max_per_key` open already.
    pub fn add(
        &self,
        key: [u8; 32],
        scope: Scope,
        sink: SubscriptionSink,
        max_per_key: usize,
    ) -> Option<Listening<'_>> {
        let mut map = self.map();
        if map.values().filter(|listener| listener.key == key).count() >= max_per_key {
            return None;
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        map.insert(id, Listener { key, scope, sink, resources: HashSet::new() });
        Some(Listening { listeners: self, id })
    }

    /// Every open stream with its scope (for a reload's comparison).
    pub fn audience(&self) -> Vec<(Scope, SubscriptionSink)> {
        self.map().values().map(|listener| (listener.scope.clone(), listener.sink.clone())).collect()
    }

    /// The streams of MCP configuration `config`, with their scopes.
    pub fn of_config(&self, config: &str) -> Vec<(Scope, SubscriptionSink)> {
        let map = self.map();
        map.values()
            .filter(|listener| listener.scope.config == config)
            .map(|listener| (listener.scope.clone(), listener.sink.clone()))
            .collect()
    }

    /// The streams of configuration `config` that named `uri` of `server`.
    pub fn subscribers(
        &self,
        config: &str,
        server: &str,
        uri: &str,
        sees: impl Fn(&Scope) -> bool,
    ) -> Vec<SubscriptionSink> {
        let entry = (server.to_string(), uri.to_string());
        let map = self.map();
        map.values()
            .filter(|listener| listener.scope.config == config && listener.resources.contains(&entry))
            .filter(|listener| sees(&listener.scope))
            .map(|listener| listener.sink.clone())
            .collect()
    }

    /// Streams open now.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
