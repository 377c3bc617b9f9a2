//! Gateway connections that no request has authenticated yet, bounded apart (contract section 14), so that a client
//! without a key cannot hold the places of the clients with one.
//!
//! Every new gateway connection starts here: it counts against `limits.max_unauthenticated_connections` (256) and,
//! for its source address, `limits.max_connections_per_ip` (128; an IPv6 address counts by its /64). The first of its
//! requests that authenticates (the admission step calls [`Unauthenticated::authenticated`]) moves it out, to the rest
//! of `max_connections`. A new connection past either cap makes room by closing the oldest unauthenticated connection
//! with no request in flight (of its own source address, for the per-address cap), counted in
//! `mcpgw_limit_hits_total` as `connections_per_ip` or `unauthenticated_connections`; when every such connection has a
//! request in flight, the new one is closed instead.
//!
//! Why the oldest and not the new one: at accept nothing tells a client with a key from one without, so closing the
//! new connection would lock out every client (all of them, behind one NAT or on one host) once an anonymous one
//! holds the cap. Closing the oldest idle one costs a client with a key nothing (its connection authenticates with its
//! first request, at once) and leaves an anonymous one at most the cap.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio_util::sync::CancellationToken;

use super::Activity;
use crate::config::settings::Limits;
use crate::telemetry::metrics::Metrics;

/// The unauthenticated connections of one listener, oldest first.
#[derive(Default)]
pub(super) struct Strangers {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    per_source: HashMap<IpAddr, usize>,
    open: BTreeMap<u64, Arc<Place>>,
}

/// One unauthenticated connection's place.
pub(super) struct Place {
    strangers: Weak<Strangers>,
    seq: u64,
    source: IpAddr,
    activity: Arc<Activity>,
    /// Cancelled when the connection is closed to make room.
    pub(super) close: CancellationToken,
    left: AtomicBool,
}

impl Place {
    /// Whether the connection has left the unauthenticated count (authenticated, closed to make room, or ended).
    pub(super) fn has_left(&self) -> bool {
        self.left.load(Ordering::Acquire)
    }

    /// Leaves the count, once.
    pub(super) fn leave(&self) {
        if self.left.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(strangers) = self.strangers.upgrade() {
            let mut inner = strangers.inner.lock().unwrap_or_else(PoisonError::into_inner);
            if inner.open.remove(&self.seq).is_some() {
                inner.forget(self.source);
            }
        }
    }
}

/// In a request's extensions while its connection is unauthenticated; the admission step calls
/// [`Unauthenticated::authenticated`] when the request's credential is valid.
#[derive(Clone)]
pub struct Unauthenticated(pub(super) Arc<Place>);

impl Unauthenticated {
    /// The connection's request authenticated: it no longer counts as unauthenticated.
    pub fn authenticated(&self) {
        self.0.leave();
    }
}

/// The address a connection counts under: IPv4 (an IPv4-mapped IPv6 address as IPv4), or the /64 of an IPv6 one.
fn source_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(prefix.into())
        }
        v4 => v4,
    }
}

impl Inner {
    fn forget(&mut self, source: IpAddr) {
        if let Some(n) = self.per_source.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_source.remove(&source);
            }
        }
    }

    /// Closes the oldest connection with no request in flight (of `source`, when given); false when there is none.
    fn close_oldest(&mut self, source: Option<IpAddr>) -> bool {
        let oldest = self
            .open
            .iter()
            .find(|(_, place)| source.is_none_or(|s| place.source == s) && place.activity.is_idle())
            .map(|(seq, _)| *seq);
        let Some(place) = oldest.and_then(|seq| self.open.remove(&seq)) else { return false };
        self.forget(place.source);
        place.left.store(true, Ordering::Release);
        place.close.cancel();
        true
    }
}

impl Strangers {
    /// Counts a new connection from `ip`, making room under the caps of `limits` (see the module documentation);
    /// `None` when the new connection is to be closed.
    pub(super) fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        activity: &Arc<Activity>,
        limits: &Limits,
        metrics: &Metrics,
    ) -> Option<Arc<Place>> {
        let source = source_of(ip);
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // A loop, not an `if`: after a reload lowered a cap, more than one may be over it.
        while inner.per_source.get(&source).copied().unwrap_or(0) >= limits.max_connections_per_ip {
            metrics.limit_hit("connections_per_ip");
            if !inner.close_oldest(Some(source)) {
                return None;
            }
        }
        while inner.open.len() >= limits.max_unauthenticated_connections {
            metrics.limit_hit("unauthenticated_connections");
            if !inner.close_oldest(None) {
                return None;
            }
        }
        inner.next += 1;
        let place = Arc::new(Place {
            strangers: Arc::downgrade(self),
            seq: inner.next,
            source,
            activity: Arc::clone(activity),
            close: CancellationToken::new(),
            left: AtomicBool::new(false),
        });
        inner.open.insert(place.seq, Arc::clone(&place));
        *inner.per_source.entry(source).or_default() += 1;
        Some(place)
    }

    #[cfg(test)]
    fn counts(&self, ip: IpAddr) -> (usize, usize) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        (inner.open.len(), inner.per_source.get(&source_of(ip)).copied().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per_ip: usize) -> Limits {
        Limits { max_unauthenticated_connections: total, max_connections_per_ip: per_ip, ..Limits::default() }
    }

    #[tokio::test]
    async fn past_a_cap_the_oldest_idle_connection_makes_room_and_authenticated_ones_leave_the_count() {
        let metrics = Metrics::new();
        let strangers = Arc::new(Strangers::default());
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let l = limits(3, 2);
        let first = strangers.admit(a, &Activity::new(), &l, &metrics).expect("first");
        let second = strangers.admit(a, &Activity::new(), &l, &metrics).expect("second");
        // Per address: a's oldest makes room for a's third.
        let third = strangers.admit(a, &Activity::new(), &l, &metrics).expect("third");
        assert!(first.close.is_cancelled() && first.has_left(), "the oldest of a closed");
        assert_eq!(strangers.counts(a), (2, 2));
        // In total: b's first takes the last place, b's second closes the oldest of all (a's second).
        let _b1 = strangers.admit(b, &Activity::new(), &l, &metrics).expect("b1");
        let _b2 = strangers.admit(b, &Activity::new(), &l, &metrics).expect("b2");
        assert!(second.close.is_cancelled());
        assert_eq!(strangers.counts(a), (3, 1));
        // Authenticated: out of the count, never closed to make room.
        Unauthenticated(Arc::clone(&third)).authenticated();
        assert_eq!(strangers.counts(a), (2, 0));
        let _a4 = strangers.admit(a, &Activity::new(), &l, &metrics).expect("a4");
        assert!(!third.close.is_cancelled());
    }

    #[tokio::test]
    async fn connections_with_a_request_in_flight_are_not_closed_the_new_one_is() {
        let metrics = Metrics::new();
        let strangers = Arc::new(Strangers::default());
        let ip: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let busy = Activity::new();
        let _in_flight = busy.begin();
        let held = strangers.admit(ip, &busy, &limits(1, 1), &metrics).expect("first");
        assert!(strangers.admit(ip, &Activity::new(), &limits(1, 1), &metrics).is_none());
        assert!(!held.close.is_cancelled());
        held.leave();
        assert_eq!(strangers.counts(ip), (0, 0));
    }

    #[test]
    fn ipv6_counts_by_its_64() {
        let one: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let two: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        assert_eq!(source_of(one), source_of(two));
        assert_eq!(source_of("::ffff:1.2.3.4".parse().unwrap()), "1.2.3.4".parse::<IpAddr>().unwrap());
    }
}
