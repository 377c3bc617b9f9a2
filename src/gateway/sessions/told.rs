//! What a session is told, and how: where it is told ([`Channel`]: its own [`Outbox`] over HTTP, sent on its `GET`
//! stream by the session layer; the stdio connection's peer), what its listings depend on ([`Scope`]: told when a
//! reload changes them, contract 15), what its client declared, and the resources it subscribed to.

use std::sync::Arc;

use bytes::Bytes;
use rmcp::RoleServer;
use rmcp::model::{ClientCapabilities, ServerNotification};
use rmcp::service::Peer;

use super::{Ended, EventStream, Outbox, Refused, SessionRegistry, encode};
use crate::gateway::notify::Scope;

/// Where a session is told what changed.
#[derive(Clone)]
pub enum Channel {
    /// An HTTP session: its own queue, sent on its `GET` stream (whether or not rmcp has a worker for it).
    Outbox(Arc<Outbox>),
    /// The stdio connection's one session: rmcp's peer, which writes to stdout.
    Stdio(Peer<RoleServer>),
}

impl Channel {
    /// Tells the session `notification`: queued at once (an outbox), or sent by the peer.
    pub async fn notify(&self, notification: ServerNotification) -> Result<(), String> {
        match self {
            Channel::Outbox(outbox) => {
                let message = encode(notification).ok_or("a notification that does not encode")?;
                outbox.push(message).map(drop).map_err(|Ended| "the session ended".to_string())
            }
            Channel::Stdio(peer) => peer.send_notification(notification).await.map_err(|e| e.to_string()),
        }
    }

    /// Queues `message` (already encoded by [`encode`]) when the channel is an outbox, and says how many unsent events
    /// made room for it; `None` for a peer, which the caller tells itself.
    pub fn queue(&self, message: &Bytes) -> Option<usize> {
        match self {
            Channel::Outbox(outbox) => Some(outbox.push(message.clone()).unwrap_or(0)),
            Channel::Stdio(_) => None,
        }
    }

    pub(super) fn close(&self) {
        if let Channel::Outbox(outbox) = self {
            outbox.close();
        }
    }

    pub(super) fn is_streaming(&self) -> bool {
        matches!(self, Channel::Outbox(outbox) if outbox.is_streaming())
    }
}

/// Why a session's `GET` stream was not opened.
#[derive(Debug, PartialEq, Eq)]
pub enum NoStream {
    /// The session is unknown (it ended meanwhile), or has no outbox (the stdio connection's).
    Unknown,
    /// The session has its stream open already.
    Open,
}

impl SessionRegistry {
    /// Whether session `session_id` is known here (over stdio: once its first request reached the handler).
    pub fn contains(&self, session_id: &str) -> bool {
        self.map().contains_key(session_id)
    }

    /// Records what the listings of session `session_id` depend on now (the key's project or configuration may have
    /// changed with a reload).
    pub fn rescope(&self, session_id: &str, scope: Scope) {
        if let Some(session) = self.map().get_mut(session_id)
            && session.scope.as_ref() != Some(&scope)
        {
            session.scope = Some(scope);
        }
    }

    /// The stdio connection's one session, not opened by a request: recorded (and pinned, it lasts as long as the
    /// connection) at its first request that reaches the handler, told through `peer`; its scope kept up to date.
    pub fn attach_stdio(&self, session_id: &str, key_digest: [u8; 32], scope: Scope, peer: &Peer<RoleServer>) {
        if !self.contains(session_id) {
            let capabilities = peer.peer_info().map(|info| info.capabilities.clone());
            self.open(session_id, None, key_digest, capabilities, Some(scope.clone()));
            self.pin(session_id);
            if let Some(session) = self.map().get_mut(session_id) {
                session.channel = Channel::Stdio(peer.clone());
            }
        }
        self.rescope(session_id, scope);
    }

    /// Opens the `GET` stream of session `session_id` (see [`Outbox::open_stream`]).
    pub fn open_stream(&self, session_id: &str, last_seen: Option<u64>) -> Result<EventStream, NoStream> {
        let outbox = match self.map().get(session_id).map(|session| &session.channel) {
            Some(Channel::Outbox(outbox)) => Arc::clone(outbox),
            _ => return Err(NoStream::Unknown),
        };
        outbox.open_stream(last_seen).map_err(|Refused::Open| NoStream::Open)
    }

    /// What the client of session `session_id` declared at `initialize`; `None` when the session is unknown.
    pub fn client_capabilities(&self, session_id: &str) -> Option<Option<ClientCapabilities>> {
        self.map().get(session_id).map(|session| session.capabilities.clone())
    }

    /// What the client of session `session_id` declared it can relay, as an upstream is told it (a `per_session`
    /// server's process: contract 15); everything when the session or its capabilities are not known.
    pub fn declared(&self, session_id: &str) -> crate::upstream::Declared {
        let map = self.map();
        let Some(capabilities) = map.get(session_id).and_then(|session| session.capabilities.as_ref()) else {
            return crate::upstream::Declared::ALL;
        };
        crate::upstream::Declared {
            sampling: capabilities.sampling.is_some(),
            elicitation: capabilities.elicitation.is_some(),
            roots: capabilities.roots.is_some(),
        }
    }

    /// Records (or, with `subscribed` false, forgets) the session's subscription to `uri` of `server`.
    pub fn subscription(&self, session_id: &str, server: &str, uri: &str, subscribed: bool) {
        if let Some(session) = self.map().get_mut(session_id) {
            let entry = (server.to_string(), uri.to_string());
            if subscribed {
                session.subscriptions.insert(entry);
            } else {
                session.subscriptions.remove(&entry);
            }
        }
    }

    /// The channels of the open sessions of MCP configuration `config_id` subscribed to `uri` of `server`, of the
    /// scopes `sees` lets see it now.
    pub fn subscribers(&self, config_id: &str, server: &str, uri: &str, sees: impl Fn(&Scope) -> bool) -> Vec<Channel> {
        let entry = (server.to_string(), uri.to_string());
        self.map()
            .values()
            .filter(|session| session.subscriptions.contains(&entry))
            .filter(|session| session.scope.as_ref().is_some_and(|scope| scope.config == config_id && sees(scope)))
            .map(|session| session.channel.clone())
            .collect()
    }

    /// The channels of the open sessions of MCP configuration `config_id`, with their scopes.
    pub fn channels_of(&self, config_id: &str) -> Vec<(Scope, Channel)> {
        let map = self.map();
        map.values()
            .filter(|session| session.scope.as_ref().is_some_and(|scope| scope.config == config_id))
            .filter_map(|session| Some((session.scope.clone()?, session.channel.clone())))
            .collect()
    }

    /// The channels of every open session whose scope is known, with their scopes (for a reload's comparison).
    pub fn audience(&self) -> Vec<(Scope, Channel)> {
        self.map().values().filter_map(|session| Some((session.scope.clone()?, session.channel.clone()))).collect()
    }

    /// The channel of session `session_id`, once its scope is known.
    pub fn channel_of(&self, session_id: &str) -> Option<Channel> {
        self.map().get(session_id).filter(|session| session.scope.is_some()).map(|session| session.channel.clone())
    }
}
