//! Who holds each upstream resource subscription (contract 15, "clients are not each other's").
//!
//! A `shared` server's process serves every client of its configuration, and so does its subscription to a URI: the
//! first session or listen stream that subscribes makes it, and only the last one to let go (`resources/unsubscribe`,
//! the session's end, the stream's end) ends it at the upstream. One client's unsubscribe therefore never silences
//! another's updates, and a client that goes without unsubscribing leaves no subscription behind at the upstream.
//! A `per_session` server's process is the session's own: its subscriptions pass through and end with the process.
//!
//! Bounds: a session or listen stream holds at most [`MAX_PER_HOLDER`] subscriptions (a template can match endless
//! URIs); each holder keeps the identity it subscribed with, only as long as it holds something.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::auth::Identity;
use crate::gateway::notify::listeners::MAX_RESOURCES;

/// The most upstream subscriptions one session or listen stream holds.
pub const MAX_PER_HOLDER: usize = MAX_RESOURCES;

/// What holds a subscription: an MCP session (its local id) or a listen stream (its number).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Holder {
    Session(String),
    Stream(u64),
}

/// One subscription at an upstream: (the caller's cache scope, the server's name, the upstream's URI).
pub type Target = (String, String, String);

struct Book<V> {
    /// Each target's holders, with the identity each subscribed with.
    holders: HashMap<Target, HashMap<Holder, V>>,
    /// Each holder's targets.
    held: HashMap<Holder, HashSet<Target>>,
}

/// Every upstream subscription made for the clients of shared processes, by holder, with what each subscribed as.
pub struct Subscriptions<V = Arc<Identity>> {
    book: Mutex<Book<V>>,
}

impl<V> Default for Subscriptions<V> {
    fn default() -> Self {
        Subscriptions { book: Mutex::new(Book { holders: HashMap::new(), held: HashMap::new() }) }
    }
}

/// A holder already holds [`MAX_PER_HOLDER`] subscriptions.
#[derive(Debug, PartialEq, Eq)]
pub struct TooMany;

impl<V> Subscriptions<V> {
    fn book(&self) -> std::sync::MutexGuard<'_, Book<V>> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `holder` may hold one more subscription, `target` (one it holds already counts as held).
    pub fn room_for(&self, holder: &Holder, target: &Target) -> Result<(), TooMany> {
        let book = self.book();
        match book.held.get(holder) {
            Some(targets) if targets.len() >= MAX_PER_HOLDER && !targets.contains(target) => Err(TooMany),
            _ => Ok(()),
        }
    }

    /// Records that `holder` holds `target`, subscribed with `identity`.
    pub fn hold(&self, target: Target, holder: Holder, identity: V) {
        let mut book = self.book();
        book.held.entry(holder.clone()).or_default().insert(target.clone());
        book.holders.entry(target).or_default().insert(holder, identity);
    }

    /// Forgets that `holder` holds `target`; true when nobody holds it now (the upstream may be told to stop).
    pub fn release(&self, target: &Target, holder: &Holder) -> bool {
        let mut book = self.book();
        forget(&mut book, target, holder);
        if let Some(targets) = book.held.get_mut(holder) {
            targets.remove(target);
            if targets.is_empty() {
                book.held.remove(holder);
            }
        }
        !book.holders.contains_key(target)
    }

    /// Forgets everything `holder` held; the targets nobody holds now, each with the identity it was subscribed with.
    pub fn release_all(&self, holder: &Holder) -> Vec<(Target, V)> {
        let mut book = self.book();
        let Some(targets) = book.held.remove(holder) else { return Vec::new() };
        targets
            .into_iter()
            .filter_map(|target| forget(&mut book, &target, holder).map(|identity| (target, identity)))
            .collect()
    }

    /// Subscriptions held now, counted once per target.
    pub fn len(&self) -> usize {
        self.book().holders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Removes `holder` from `target`'s holders; the identity it held it with when it was the last.
fn forget<V>(book: &mut Book<V>, target: &Target, holder: &Holder) -> Option<V> {
    let holders = book.holders.get_mut(target)?;
    let identity = holders.remove(holder)?;
    if !holders.is_empty() {
        return None;
    }
    book.holders.remove(target);
    Some(identity)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(uri: &str) -> Target {
        ("c".into(), "s".into(), uri.into())
    }

    #[test]
    fn the_last_holder_ends_a_subscription() {
        let book = Subscriptions::<()>::default();
        let (a, b) = (Holder::Session("a".into()), Holder::Stream(1));
        book.hold(target("x"), a.clone(), ());
        book.hold(target("x"), b.clone(), ());
        assert!(!book.release(&target("x"), &a), "b still holds it");
        assert!(!book.release(&target("x"), &a), "releasing twice changes nothing");
        assert_eq!(book.release_all(&b).len(), 1, "b was the last");
        assert!(book.is_empty());
        assert!(book.release(&target("never"), &a), "nobody holds what was never held");
    }

    #[test]
    fn a_holder_holds_at_most_its_share() {
        let book = Subscriptions::<()>::default();
        let a = Holder::Session("a".into());
        for n in 0..MAX_PER_HOLDER {
            assert_eq!(book.room_for(&a, &target(&n.to_string())), Ok(()));
            book.hold(target(&n.to_string()), a.clone(), ());
        }
        assert_eq!(book.room_for(&a, &target("one more")), Err(TooMany));
        assert_eq!(book.room_for(&a, &target("0")), Ok(()), "one it holds is no more");
        assert_eq!(book.room_for(&Holder::Stream(2), &target("one more")), Ok(()), "per holder");
        assert_eq!(book.release_all(&a).len(), MAX_PER_HOLDER);
    }
}
