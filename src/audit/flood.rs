//! The bound on audit records of authentication failures (contract section 14): at most [`RECORDS_PER_SECOND`] in
//! any one-second window per source address, the gateway's and the admin API's failures together, so that a client
//! sending bad credentials in a loop cannot fill the disk. The failures left out are counted per address, and the next
//! record written for that address carries the count as `suppressed`.
//!
//! The table of addresses is bounded ([`MAX_ADDRESSES`]): a client with many addresses cannot grow it without end.
//! When it is full, the addresses whose window has passed with nothing left out go first (forgetting them loses
//! nothing: a new entry starts the same way), then the eighth seen longest ago, whose `suppressed` counts go with
//! them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

/// Records of authentication failures per source address in any one-second window.
pub const RECORDS_PER_SECOND: u32 = 10;
/// The most source addresses remembered at once.
pub const MAX_ADDRESSES: usize = 4096;
const WINDOW: Duration = Duration::from_secs(1);

/// What one address has written in its current window, and what it had left out since its last record.
#[derive(Debug)]
struct Window {
    started: Instant,
    written: u32,
    suppressed: u64,
    last_seen: Instant,
}

/// Per source address (`None`: stdio, which has none), when records may be written.
#[derive(Debug, Default)]
pub struct PerAddress {
    windows: HashMap<Option<IpAddr>, Window>,
}

impl PerAddress {
    /// `Some(suppressed)` when a record for `source` may be written at `now` (with the count of the failures left out
    /// since its last one); `None` leaves this one out and counts it.
    pub fn admit(&mut self, source: Option<IpAddr>, now: Instant) -> Option<u64> {
        if !self.windows.contains_key(&source) && self.windows.len() >= MAX_ADDRESSES {
            self.make_room(now);
        }
        let window =
            self.windows.entry(source).or_insert(Window { started: now, written: 0, suppressed: 0, last_seen: now });
        window.last_seen = now;
        if now.saturating_duration_since(window.started) >= WINDOW {
            window.started = now;
            window.written = 0;
        }
        if window.written < RECORDS_PER_SECOND {
            window.written += 1;
            Some(std::mem::take(&mut window.suppressed))
        } else {
            window.suppressed += 1;
            None
        }
    }

    /// Frees places: first every address whose window has passed with nothing to report; if that is not enough, the
    /// eighth of the table seen longest ago, at once, so that a stream of new addresses costs one scan per
    /// [`MAX_ADDRESSES`] / 8 of them rather than one each.
    fn make_room(&mut self, now: Instant) {
        self.windows.retain(|_, w| w.suppressed > 0 || now.saturating_duration_since(w.started) < WINDOW);
        if self.windows.len() < MAX_ADDRESSES {
            return;
        }
        let mut seen: Vec<Instant> = self.windows.values().map(|w| w.last_seen).collect();
        let cut = (seen.len() / 8).max(1) - 1;
        let (_, threshold, _) = seen.select_nth_unstable(cut);
        let threshold = *threshold;
        self.windows.retain(|_, w| w.last_seen > threshold);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.windows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(n: u32) -> Option<IpAddr> {
        Some(IpAddr::V4(Ipv4Addr::from(n)))
    }

    #[test]
    fn ten_a_second_per_address_and_the_next_record_counts_those_left_out() {
        let mut table = PerAddress::default();
        let start = Instant::now();
        let admitted = (0..200).filter(|_| table.admit(ip(1), start).is_some()).count();
        assert_eq!(admitted, RECORDS_PER_SECOND as usize);
        // Another address has its own window.
        assert_eq!(table.admit(ip(2), start), Some(0));
        assert_eq!(table.admit(None, start), Some(0));
        let later = start + WINDOW;
        assert_eq!(table.admit(ip(1), later), Some(190));
        assert_eq!(table.admit(ip(1), later), Some(0));
    }

    #[test]
    fn the_table_stays_bounded_and_keeps_what_it_still_owes() {
        let mut table = PerAddress::default();
        let start = Instant::now();
        for _ in 0..=RECORDS_PER_SECOND {
            table.admit(ip(0), start);
        }
        // Full of addresses that owe nothing.
        let full = start + WINDOW;
        for n in 1..MAX_ADDRESSES as u32 {
            table.admit(ip(n), full);
        }
        assert_eq!(table.len(), MAX_ADDRESSES);
        // A new address once their windows passed: they go, address 0 (which owes a count) stays.
        let after = full + WINDOW;
        assert_eq!(table.admit(ip(1_000_000), after), Some(0));
        assert_eq!(table.len(), 2);
        assert_eq!(table.admit(ip(0), after), Some(1));
        // Many addresses at once, all in their window: still bounded.
        for n in 0..(MAX_ADDRESSES as u32 * 3) {
            table.admit(ip(2_000_000 + n), after);
            assert!(table.len() <= MAX_ADDRESSES);
        }
    }
}
