//! At most one relayed list change per server, list and [`WINDOW`]: an upstream that sends `list_changed` in a loop
//! (a hostile or a broken one) makes its clients list again at most once a window, not once per notification. The
//! first change of a quiet window goes out at once; the ones that follow within the window become one, sent when the
//! window ends, so the last change is never lost.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::List;
use crate::upstream::PoolKey;

/// The shortest time between two relays of one server's list.
pub const WINDOW: Duration = Duration::from_secs(1);

/// Past this many remembered (server, list) pairs, those quiet for a window are forgotten.
const TIDY_AT: usize = 4096;

/// What to do with a change.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Relay it now.
    Now,
    /// Relay it after this long (one relay for every change until then).
    Later(Duration),
    /// A relay is already due: this change goes with it.
    Merged,
}

#[derive(Clone, Copy)]
struct Slot {
    /// When the last relay went out (or is due); `None` before the first.
    sent: Option<Instant>,
    /// Whether a relay is due at `sent`.
    due: bool,
}

#[derive(Default)]
pub struct Coalescer {
    slots: Mutex<HashMap<(PoolKey, List), Slot>>,
}

impl Coalescer {
    /// The decision for a change of `list` of `key`'s server at `now`.
    pub fn admit(&self, key: &PoolKey, list: List, now: Instant) -> Decision {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() >= TIDY_AT {
            slots.retain(|_, slot| slot.due || slot.sent.is_some_and(|sent| now.duration_since(sent) < WINDOW));
        }
        let slot = slots.entry((key.clone(), list)).or_insert(Slot { sent: None, due: false });
        if slot.due {
            return Decision::Merged;
        }
        let next = match slot.sent {
            Some(sent) if sent + WINDOW > now => sent + WINDOW,
            _ => {
                slot.sent = Some(now);
                return Decision::Now;
            }
        };
        *slot = Slot { sent: Some(next), due: true };
        Decision::Later(next - now)
    }

    /// The relay due for `list` of `key`'s server went out.
    pub fn sent(&self, key: &PoolKey, list: List) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = slots.get_mut(&(key.clone(), list)) {
            slot.due = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_changes_is_one_relay_now_and_one_at_the_end_of_the_window() {
        let coalescer = Coalescer::default();
        let key = PoolKey::new("c", "s");
        let start = Instant::now();
        assert_eq!(coalescer.admit(&key, List::Tools, start), Decision::Now);
        let later = coalescer.admit(&key, List::Tools, start + Duration::from_millis(100));
        assert_eq!(later, Decision::Later(Duration::from_millis(900)));
        for ms in [200, 300, 999] {
            assert_eq!(coalescer.admit(&key, List::Tools, start + Duration::from_millis(ms)), Decision::Merged);
        }
        // Another list and another server have windows of their own.
        assert_eq!(coalescer.admit(&key, List::Prompts, start), Decision::Now);
        assert_eq!(coalescer.admit(&PoolKey::new("c", "t"), List::Tools, start), Decision::Now);
        coalescer.sent(&key, List::Tools);
        // The relay went out at the window's end (start + 1 s): the next window starts there.
        let next = coalescer.admit(&key, List::Tools, start + Duration::from_millis(1500));
        assert_eq!(next, Decision::Later(Duration::from_millis(500)));
        coalescer.sent(&key, List::Tools);
        assert_eq!(coalescer.admit(&key, List::Tools, start + Duration::from_secs(3)), Decision::Now);
    }
}
