//! Which API key opened which MCP session, and how long a session may stay idle. A session id is usable only with the
//! key that opened it: an unknown or foreign session id gets 404, as if it did not exist, so a leaked session id is
//! useless without its key.
//!
//! This registry is the authority on a session's life: a session idle for `limits.session_idle_timeout_seconds` is
//! unknown from then on, and [`SessionRegistry::expire`] hands its id to the sweeper that closes it in the protocol
//! layer. `limits.max_sessions` bounds how many are open at once: [`SessionRegistry::reserve`] takes a place for an
//! `initialize` before the protocol layer creates the session, so concurrent `initialize` requests cannot overshoot.
//! The drain waits on [`SessionRegistry::wait_empty`]: it may end early once the clients have closed their sessions.
//!
//! A session costs the protocol layer (rmcp) a worker task and its channels, tens of KiB, for as long as rmcp knows
//! it. A session with no request for `limits.session_dormant_seconds` and no request in flight goes *dormant*:
//! [`SessionRegistry::to_sleep`] picks it, the sweeper ends its rmcp worker, and only its entry here (its key, its
//! client's capabilities, its sealed id, what it is told: about 1 KiB) is left. Its next request wakes it
//! ([`SessionRegistry::enter`]): rmcp replays its `initialize` from the sealed id, as for a session taken over from
//! another replica (see [`super::session_id`]), and the session goes on; a `tools/call` on the fast route needs no
//! worker at all. A request that comes while the worker is being ended waits for that to finish. Neither its `GET`
//! stream nor its resource subscriptions keep a session awake: what it is told goes through its own [`Outbox`], which
//! the session layer sends on that stream, not through rmcp's worker.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::ClientCapabilities;

use super::notify::Scope;

mod outbox;
mod reservation;
mod told;
mod tombstones;

pub use outbox::{Ended, EventStream, Outbox, Refused, encode};
pub use reservation::{Full, Reservation};
pub use told::{Channel, NoStream};
use tombstones::Tombstones;

/// What to do when a session ends (the upstream pool ends the session's own processes).
type OnEnd = Box<dyn Fn(&str) + Send + Sync>;

/// One open session: the digest of the key that opened it, when it was last used, its requests in flight, and what it
/// is told and how.
struct Session {
    key: [u8; 32],
    seen: Instant,
    activity: Arc<Activity>,
    life: Life,
    /// What the session's listings depend on, once known (at `initialize` over HTTP, at the first request that
    /// reaches the handler over stdio): a change of what it sees is told to it (a reload, an upstream's lists;
    /// contract 15).
    scope: Option<Scope>,
    /// Where it is told: its [`Outbox`] (HTTP, sent on its `GET` stream), or the stdio connection's peer.
    channel: Channel,
    /// What the client declared in its `initialize` (what may be asked of it during a relayed call).
    capabilities: Option<ClientCapabilities>,
    /// The resources it subscribed to: (server, URI).
    subscriptions: std::collections::HashSet<(String, String)>,
    /// The stdio connection's one session: it lives as long as the connection, never idling out.
    pinned: bool,
    /// The id the client knows the session by (sealed, see [`super::session_id`]); none over stdio.
    external: Option<String>,
}

/// Whether the protocol layer has a worker for a session.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Life {
    /// It has (or will have, at the session's first request).
    Live,
    /// Its worker is being ended; requests wait for the end.
    Closing,
    /// It has none: the next request wakes the session.
    Dormant,
}

/// What a session is doing now: its requests in flight.
#[derive(Default)]
struct Activity {
    busy: AtomicUsize,
}

/// A request of a session in flight (held until its answer is sent): the session does not go dormant meanwhile.
pub struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a request entered its session.
pub enum Entered {
    /// The session was live.
    Live(Busy),
    /// The session was dormant: the protocol layer must be given its `initialize` to replay before the request
    /// reaches it.
    Woken(Busy),
}

/// A map looked up on every request by ids the gateway made (random local ids, sealed ids of about 450 characters):
/// foldhash, seeded per process, rather than SipHash, which cost about 1 % of a call's CPU over the sealed ids.
type Ids<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// Session id to its [`Session`].
#[derive(Default)]
pub struct SessionRegistry {
    sessions: Mutex<Ids<Session>>,
    /// `initialize` requests under way that hold a place (see [`SessionRegistry::reserve`]).
    pending: Arc<AtomicUsize>,
    /// The same, per key digest (for `limits.max_sessions_per_key`).
    pending_by_key: Arc<Mutex<HashMap<[u8; 32], usize>>>,
    /// The sessions open per key digest (so that an `initialize` costs the same with 10 or 100,000 sessions open).
    open_by_key: Mutex<HashMap<[u8; 32], usize>>,
    on_end: std::sync::OnceLock<OnEnd>,
    /// Woken when the last session is forgotten.
    emptied: tokio::sync::Notify,
    /// The sealed id a client uses to the local id of its session.
    by_external: Mutex<Ids<String>>,
    /// The local ids of the sessions that ended here (closed or idle), so that their sealed ids are not taken over
    /// again by this replica.
    ended_ids: Mutex<Tombstones>,
    /// What rmcp replays for a session taken over from another replica, or woken.
    pub restore: super::session_id::RestoreStates,
    /// Told when sessions that were going dormant are dormant (see [`SessionRegistry::enter`]).
    slept: tokio::sync::Notify,
}

fn uncount(counts: &mut HashMap<[u8; 32], usize>, key: &[u8; 32]) {
    if let Some(count) = counts.get_mut(key) {
        *count = count.saturating_sub(1);
        if *count == 0 {
            counts.remove(key);
        }
    }
}

/// What a request's session id means for its key.
#[derive(Debug, PartialEq, Eq)]
pub enum SessionCheck {
    Owned,
    Unknown,
}

impl SessionRegistry {
    fn map(&self) -> std::sync::MutexGuard<'_, Ids<Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets what happens when a session ends (closed or expired); once.
    pub fn on_end(&self, action: impl Fn(&str) + Send + Sync + 'static) {
        let _ = self.on_end.set(Box::new(action));
    }

    fn ended(&self, session_id: &str) {
        if let Some(action) = self.on_end.get() {
            action(session_id);
        }
    }

    /// A place for one more session of the key `key_digest` when fewer than `max` sessions are open or being opened,
    /// and fewer than `max_per_key` of that key; else which limit is full.
    pub fn reserve(&self, max: usize, key_digest: [u8; 32], max_per_key: usize) -> Result<Reservation, Full> {
        let map = self.map();
        let pending = self.pending.load(Ordering::SeqCst);
        if map.len().saturating_add(pending) >= max {
            return Err(Full::Gateway);
        }
        let mut by_key = self.pending_by_key.lock().unwrap_or_else(|p| p.into_inner());
        let opening = by_key.get(&key_digest).copied().unwrap_or(0);
        let open = self.open_of(&key_digest);
        if open.saturating_add(opening) >= max_per_key {
            return Err(Full::Key);
        }
        *by_key.entry(key_digest).or_default() += 1;
        self.pending.fetch_add(1, Ordering::SeqCst);
        Ok(Reservation {
            pending: Arc::clone(&self.pending),
            by_key: Arc::clone(&self.pending_by_key),
            key: key_digest,
        })
    }

    /// Records a new session for a key (before its reservation, if any, is dropped), with what its client declared,
    /// the sealed id its client knows it by and what its listings depend on; it is told through an [`Outbox`] of its
    /// own.
    pub fn open(
        &self,
        session_id: &str,
        external: Option<&str>,
        key_digest: [u8; 32],
        capabilities: Option<ClientCapabilities>,
        scope: Option<Scope>,
    ) {
        let session = Session {
            key: key_digest,
            seen: Instant::now(),
            activity: Arc::default(),
            life: Life::Live,
            scope,
            channel: Channel::Outbox(Arc::default()),
            capabilities,
            subscriptions: Default::default(),
            pinned: false,
            external: external.map(str::to_string),
        };
        if let Some(external) = external {
            self.externals().insert(external.to_string(), session_id.to_string());
        }
        let replaced = self.map().insert(session_id.to_string(), session);
        let mut counts = self.counts();
        if let Some(old) = replaced {
            old.channel.close();
            uncount(&mut counts, &old.key);
        }
        *counts.entry(key_digest).or_default() += 1;
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], usize>> {
        self.open_by_key.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many sessions of the key `key_digest` are open.
    fn open_of(&self, key_digest: &[u8; 32]) -> usize {
        self.counts().get(key_digest).copied().unwrap_or(0)
    }

    fn externals(&self) -> std::sync::MutexGuard<'_, Ids<String>> {
        self.by_external.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The local id of the session its client knows as `external`, when this replica has it.
    pub fn local_of(&self, external: &str) -> Option<String> {
        self.externals().get(external).cloned()
    }

    /// Whether session `local` ended here (so its sealed id is not taken over again).
    pub fn has_ended(&self, local: &str) -> bool {
        self.ended_ids.lock().unwrap_or_else(|p| p.into_inner()).ids.contains(local)
    }

    /// Forgets what a session that ended leaves behind: its sealed id, its restore state, its place in its key's
    /// count; remembers it ended.
    fn bury(&self, session_id: &str, session: &Session) {
        uncount(&mut self.counts(), &session.key);
        if let Some(external) = &session.external {
            self.externals().remove(external);
        }
        self.restore.forget(session_id);
        self.ended_ids.lock().unwrap_or_else(|p| p.into_inner()).add(session_id);
    }

    /// Keeps a session from idling out (the stdio connection's: it ends with the connection).
    pub fn pin(&self, session_id: &str) {
        if let Some(session) = self.map().get_mut(session_id) {
            session.pinned = true;
        }
    }

    /// Enters a request into its session (checked by [`SessionRegistry::check`] first): waits while the session's
    /// worker is being ended, wakes a dormant session; `None` when the session ended meanwhile.
    pub async fn enter(&self, session_id: &str) -> Option<Entered> {
        loop {
            // Registered before the look, so that the end of the sleep in between still wakes this request.
            let slept = self.slept.notified();
            tokio::pin!(slept);
            slept.as_mut().enable();
            {
                let mut map = self.map();
                let session = map.get_mut(session_id)?;
                let busy = || {
                    session.activity.busy.fetch_add(1, Ordering::AcqRel);
                    Busy(Arc::clone(&session.activity))
                };
                match session.life {
                    Life::Live => return Some(Entered::Live(busy())),
                    Life::Dormant => {
                        let busy = busy();
                        session.life = Life::Live;
                        return Some(Entered::Woken(busy));
                    }
                    Life::Closing => {}
                }
            }
            slept.await;
        }
    }

    /// The sessions that go dormant now: live, not used for `after`, nothing in flight (and not the stdio
    /// connection's). An open `GET` stream and subscriptions do not keep a session awake: the session layer sends
    /// what it is told from its [`Outbox`]. They are marked as going dormant; the caller ends their workers in the
    /// protocol layer, then calls [`SessionRegistry::slept`].
    pub fn to_sleep(&self, after: Duration) -> Vec<String> {
        let mut map = self.map();
        let now = Instant::now();
        let mut ids = Vec::new();
        for (id, session) in map.iter_mut() {
            if session.life == Life::Live
                && !session.pinned
                && session.activity.busy.load(Ordering::Acquire) == 0
                && now.duration_since(session.seen) >= after
            {
                session.life = Life::Closing;
                ids.push(id.clone());
            }
        }
        drop(map);
        for id in &ids {
            // What a takeover or an earlier wake left for rmcp to replay: the next wake puts it again.
            self.restore.forget(id);
        }
        ids
    }

    /// The sessions of [`SessionRegistry::to_sleep`] are dormant now (those still known); their waiting requests go on.
    pub fn slept(&self, ids: &[String]) {
        let mut map = self.map();
        for id in ids {
            if let Some(session) = map.get_mut(id)
                && session.life == Life::Closing
            {
                session.life = Life::Dormant;
            }
        }
        drop(map);
        self.slept.notify_waiters();
    }

    /// Whether session `session_id` is dormant now.
    pub fn is_dormant(&self, session_id: &str) -> bool {
        self.map().get(session_id).is_some_and(|session| session.life == Life::Dormant)
    }

    /// How many sessions are dormant now.
    pub fn dormant(&self) -> usize {
        self.map().values().filter(|session| session.life == Life::Dormant).count()
    }

    /// How many sessions have their `GET` stream open now.
    pub fn streams(&self) -> usize {
        self.map().values().filter(|session| session.channel.is_streaming()).count()
    }

    /// Whether `session_id` belongs to the key and has not been idle for `idle_limit`; a foreign session is
    /// reported as unknown. A use refreshes the session.
    pub fn check(&self, session_id: &str, key_digest: &[u8; 32], idle_limit: Duration) -> SessionCheck {
        let mut map = self.map();
        let now = Instant::now();
        match map.get_mut(session_id) {
            Some(session)
                if crate::secrets::ct_eq_digest(&session.key, key_digest)
                    && now.duration_since(session.seen) < idle_limit =>
            {
                session.seen = now;
                SessionCheck::Owned
            }
            _ => SessionCheck::Unknown,
        }
    }

    /// Forgets the sessions idle for `idle_limit` or more and returns their ids (to close them in the protocol layer).
    pub fn expire(&self, idle_limit: Duration) -> Vec<String> {
        let mut map = self.map();
        let now = Instant::now();
        let expired: Vec<String> = map
            .iter()
            .filter(|(_, session)| !session.pinned && now.duration_since(session.seen) >= idle_limit)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &expired {
            if let Some(session) = map.remove(id) {
                session.channel.close();
                self.bury(id, &session);
            }
        }
        let empty = map.is_empty();
        drop(map);
        for id in &expired {
            self.ended(id);
        }
        if empty {
            self.emptied.notify_waiters();
        }
        expired
    }

    /// Forgets a session (closed by the client, or unknown to the protocol layer).
    pub fn close(&self, session_id: &str) {
        let mut map = self.map();
        let removed = map.remove(session_id);
        let known = removed.is_some();
        if let Some(session) = removed {
            session.channel.close();
            self.bury(session_id, &session);
        }
        let empty = map.is_empty();
        drop(map);
        if known {
            self.ended(session_id);
        }
        if empty {
            self.emptied.notify_waiters();
        }
    }

    /// Ends every session's `GET` stream (the gateway is stopping: its sessions end).
    pub fn end_streams(&self) {
        for session in self.map().values() {
            session.channel.close();
        }
    }

    /// Waits until no session is known (returns at once when none is).
    pub async fn wait_empty(&self) {
        loop {
            // Registered before the check, so a session forgotten in between still wakes this waiter.
            let emptied = self.emptied.notified();
            if self.is_empty() {
                return;
            }
            emptied.await;
        }
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

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn sessions_belong_to_their_key() {
        let reg = SessionRegistry::default();
        reg.open("s1", None, [1; 32], None, None);
        assert_eq!(reg.check("s1", &[1; 32], DAY), SessionCheck::Owned);
        assert_eq!(reg.check("s1", &[2; 32], DAY), SessionCheck::Unknown);
        assert_eq!(reg.check("s2", &[1; 32], DAY), SessionCheck::Unknown);
        reg.close("s1");
        assert_eq!(reg.check("s1", &[1; 32], DAY), SessionCheck::Unknown);
    }

    #[test]
    fn idle_sessions_are_unknown_and_expire() {
        let reg = SessionRegistry::default();
        reg.open("s1", None, [1; 32], None, None);
        assert_eq!(reg.check("s1", &[1; 32], Duration::ZERO), SessionCheck::Unknown);
        assert!(reg.expire(DAY).is_empty());
        assert_eq!(reg.expire(Duration::ZERO), vec!["s1".to_string()]);
        assert!(reg.is_empty());
        // The stdio connection's session does not idle out.
        reg.open("stdio-1", None, [1; 32], None, None);
        reg.pin("stdio-1");
        assert!(reg.expire(Duration::ZERO).is_empty());
        assert_eq!(reg.len(), 1);
    }

    #[tokio::test]
    async fn waiting_for_no_sessions_ends_when_the_last_one_closes() {
        let reg = Arc::new(SessionRegistry::default());
        reg.wait_empty().await;
        reg.open("s1", None, [1; 32], None, None);
        reg.open("s2", None, [1; 32], None, None);
        let waiter = tokio::spawn({
            let reg = Arc::clone(&reg);
            async move { reg.wait_empty().await }
        });
        reg.close("s1");
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one session is still open");
        reg.close("s2");
        let ended = tokio::time::timeout(Duration::from_secs(5), waiter).await;
        assert!(ended.is_ok_and(|joined| joined.is_ok()));
    }

    #[test]
    fn closed_and_expired_sessions_are_reported_once() {
        let reg = SessionRegistry::default();
        let ended = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&ended);
        reg.on_end(move |id| seen.lock().unwrap().push(id.to_string()));
        reg.open("s1", None, [1; 32], None, None);
        reg.open("s2", None, [1; 32], None, None);
        reg.close("s1");
        reg.close("s1");
        reg.expire(Duration::ZERO);
        assert_eq!(*ended.lock().unwrap(), vec!["s1".to_string(), "s2".to_string()]);
    }

    #[test]
    fn reservations_count_against_the_limit_until_dropped() {
        let reg = SessionRegistry::default();
        reg.open("s1", None, [1; 32], None, None);
        let first = reg.reserve(3, [2; 32], 100);
        assert!(first.is_ok());
        let second = reg.reserve(3, [3; 32], 100);
        assert!(second.is_ok());
        assert_eq!(reg.reserve(3, [4; 32], 100).err(), Some(Full::Gateway), "one open, two being opened: 3 places");
        drop(second);
        assert!(reg.reserve(3, [4; 32], 100).is_ok());
        drop(first);
    }

    #[test]
    fn each_key_has_its_own_share() {
        let reg = SessionRegistry::default();
        reg.open("a1", None, [1; 32], None, None);
        let opening = reg.reserve(100, [1; 32], 2);
        assert!(opening.is_ok());
        assert_eq!(reg.reserve(100, [1; 32], 2).err(), Some(Full::Key), "one open and one being opened");
        assert!(reg.reserve(100, [2; 32], 2).is_ok(), "another key is not affected");
        drop(opening);
        assert!(reg.reserve(100, [1; 32], 2).is_ok());
        reg.close("a1");
        assert!(reg.reserve(100, [1; 32], 2).is_ok());
    }
}
