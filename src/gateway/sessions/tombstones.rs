//! The ids of sessions that ended on this replica, remembered for a day (at most 100,000) so that their sealed ids
//! are not taken over again here (a client replaying the id of a session it closed gets 404).

use std::time::{Duration, Instant};

/// Ids of ended sessions, kept for [`TOMBSTONE_TTL`] and at most [`MAX_TOMBSTONES`].
#[derive(Default)]
pub(super) struct Tombstones {
    pub(super) ids: std::collections::HashSet<String>,
    order: std::collections::VecDeque<(Instant, String)>,
}

const TOMBSTONE_TTL: Duration = Duration::from_secs(24 * 3600);
const MAX_TOMBSTONES: usize = 100_000;

impl Tombstones {
    pub(super) fn add(&mut self, id: &str) {
        let now = Instant::now();
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) < TOMBSTONE_TTL && self.order.len() < MAX_TOMBSTONES {
                break;
            }
            if let Some((_, old)) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
        if self.ids.insert(id.to_string()) {
            self.order.push_back((now, id.to_string()));
        }
    }
}
