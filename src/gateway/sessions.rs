//! Which API key opened which MCP session. A session id is usable only with the key that opened it: an unknown or
//! foreign session id gets 404, as if it did not exist, so a leaked session id is useless without its key.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a session id stays known after its last request.
pub const SESSION_IDLE_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// Session id to the digest of the key that opened it.
#[derive(Default)]
pub struct SessionRegistry {
    sessions: Mutex<HashMap<String, (/* key digest */ [u8; 32], Instant)>>,
}

/// What a request's session id means for its key.
#[derive(Debug, PartialEq, Eq)]
pub enum SessionCheck {
    Owned,
    Unknown,
}

impl SessionRegistry {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, ([u8; 32], Instant)>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a new session for a key; forgets sessions idle for more than [`SESSION_IDLE_LIMIT`].
    pub fn open(&self, session_id: &str, key_digest: [u8; 32]) {
        let mut map = self.map();
        let now = Instant::now();
        map.retain(|_, (_, seen)| now.duration_since(*seen) < SESSION_IDLE_LIMIT);
        map.insert(session_id.to_string(), (key_digest, now));
    }

    /// Whether `session_id` belongs to the key; a foreign session is reported as unknown.
    pub fn check(&self, session_id: &str, key_digest: &[u8; 32]) -> SessionCheck {
        let mut map = self.map();
        match map.get_mut(session_id) {
            Some((owner, seen)) if crate::secrets::ct_eq_digest(owner, key_digest) => {
                *seen = Instant::now();
                SessionCheck::Owned
            }
            _ => SessionCheck::Unknown,
        }
    }

    /// Forgets a session (closed by the client, or unknown to the protocol layer).
    pub fn close(&self, session_id: &str) {
        self.map().remove(session_id);
    }

    /// Number of known sessions.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether no session is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_belong_to_their_key() {
        let reg = SessionRegistry::default();
        reg.open("s1", [1; 32]);
        assert_eq!(reg.check("s1", &[1; 32]), SessionCheck::Owned);
        assert_eq!(reg.check("s1", &[2; 32]), SessionCheck::Unknown);
        assert_eq!(reg.check("s2", &[1; 32]), SessionCheck::Unknown);
        reg.close("s1");
        assert_eq!(reg.check("s1", &[1; 32]), SessionCheck::Unknown);
    }
}
