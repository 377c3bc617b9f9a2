//! A place under `limits.max_sessions` and `limits.max_sessions_per_key`, held from an `initialize` (or a 2026-07-28
//! `subscriptions/listen`) until the session it opens is recorded, or, for a listen stream, until the stream ends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A place for one more session, held while its `initialize` runs.
#[must_use]
pub struct Reservation {
    pub(super) pending: Arc<AtomicUsize>,
    pub(super) by_key: Arc<Mutex<HashMap<[u8; 32], usize>>>,
    pub(super) key: [u8; 32],
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.pending.fetch_sub(1, Ordering::SeqCst);
        let mut by_key = self.by_key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = by_key.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                by_key.remove(&self.key);
            }
        }
    }
}

/// Why no place was reserved.
#[derive(Debug, PartialEq, Eq)]
pub enum Full {
    /// `max_sessions` are open or being opened.
    Gateway,
    /// This key has `max_sessions_per_key` open or being opened.
    Key,
}
