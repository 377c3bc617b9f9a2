//! What a session is told, and how: its peer (recorded once a request of the session reached the handler), what its
//! listings depend on ([`Scope`]: told when a reload changes them, contract 15), what its client declared, and the
//! resources it subscribed to.

use rmcp::RoleServer;
use rmcp::model::ClientCapabilities;
use rmcp::service::Peer;

use super::SessionRegistry;
use crate::gateway::notify::Scope;

impl SessionRegistry {
    /// Whether session `session_id` has its peer recorded.
    pub fn has_peer(&self, session_id: &str) -> bool {
        self.map().get(session_id).is_some_and(|session| session.peer.is_some())
    }

    /// Remembers the peer of a session (the first time only) and what its listings depend on (each time: the key's
    /// project or configuration may have changed with a reload). Over stdio, where the one session is not opened by a
    /// request, it is recorded here.
    pub fn attach(&self, session_id: &str, key_digest: [u8; 32], scope: Scope, peer: &Peer<RoleServer>, stdio: bool) {
        let mut map = self.map();
        if stdio && !map.contains_key(session_id) {
            drop(map);
            let capabilities = peer.peer_info().map(|info| info.capabilities.clone());
            self.open(session_id, None, key_digest, capabilities);
            self.pin(session_id);
            map = self.map();
        }
        let Some(session) = map.get_mut(session_id) else { return };
        if let Some((known, _)) = session.peer.as_mut() {
            if *known != scope {
                *known = scope;
            }
        } else {
            session.peer = Some((scope, peer.clone()));
        }
    }

    /// Records what session `session_id`'s listings depend on, for a listing answered without rmcp's handler (a
    /// transparent `tools/list`, `transparent/task_route.rs`); false when the session has no peer recorded yet, so
    /// that the listing goes to the handler, which records both.
    pub fn rescope(&self, session_id: &str, scope: Scope) -> bool {
        let mut map = self.map();
        let Some((known, _)) = map.get_mut(session_id).and_then(|session| session.peer.as_mut()) else { return false };
        if *known != scope {
            *known = scope;
        }
        true
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

    /// The peers of the open sessions of MCP configuration `config_id` subscribed to `uri` of `server`, of the scopes
    /// `sees` lets see it now.
    pub fn subscribers(
        &self,
        config_id: &str,
        server: &str,
        uri: &str,
        sees: impl Fn(&Scope) -> bool,
    ) -> Vec<Peer<RoleServer>> {
        let entry = (server.to_string(), uri.to_string());
        self.map()
            .values()
            .filter(|session| session.subscriptions.contains(&entry))
            .filter_map(|session| session.peer.as_ref())
            .filter(|(scope, _)| scope.config == config_id && sees(scope))
            .map(|(_, peer)| peer.clone())
            .collect()
    }

    /// The peers of the open sessions of MCP configuration `config_id`, with their scopes.
    pub fn peers_of(&self, config_id: &str) -> Vec<(Scope, Peer<RoleServer>)> {
        let map = self.map();
        map.values().filter_map(|session| session.peer.clone()).filter(|(scope, _)| scope.config == config_id).collect()
    }

    /// The peers of every open session, with their scopes (for a reload's comparison).
    pub fn audience(&self) -> Vec<(Scope, Peer<RoleServer>)> {
        self.map().values().filter_map(|session| session.peer.clone()).collect()
    }

    /// The peer of session `session_id`, once recorded.
    pub fn peer_of(&self, session_id: &str) -> Option<Peer<RoleServer>> {
        self.map().get(session_id).and_then(|session| session.peer.as_ref()).map(|(_, peer)| peer.clone())
    }
}
