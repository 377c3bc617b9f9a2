//! The count of `per_session` processes (contract section 14, "Processes are counted"): per server, against
//! `upstream_pool.max_processes_per_server`, and per key, against `limits.max_processes_per_key`.
//!
//! A shared server's pool bounds its own processes; the processes of a `per_session` server live in many pools (one per
//! MCP session, one per key for stateless calls), so they are counted here, across those pools. A pool that wants to
//! start one takes a [`Slot`] first ([`ProcessBudget::reserve`]) and keeps it for as long as the process (or its start)
//! is in the pool; dropping the slot gives the place back and wakes the callers waiting for one (`freed`). The counts
//! sit behind a mutex that is taken after a pool's state lock, never before it, and never across an await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::{PoolKey, lock};

/// Who a process is counted against besides its server: the digest of the caller's credential.
pub(super) type KeyId = [u8; 32];

/// The places taken by `per_session` processes, per server and per key.
#[derive(Debug, Default)]
pub(super) struct ProcessBudget {
    counts: Mutex<Counts>,
    /// Signalled (to every waiter) when a place frees up.
    pub freed: Notify,
}

#[derive(Debug, Default)]
struct Counts {
    per_server: HashMap<PoolKey, usize>,
    per_key: HashMap<KeyId, usize>,
}

/// Which limit is full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Full {
    /// `upstream_pool.max_processes_per_server`.
    Server,
    /// `limits.max_processes_per_key`.
    Key,
}

impl Full {
    /// The `limit` label of `mcpgw_limit_hits_total`.
    pub fn label(self) -> &'static str {
        match self {
            Full::Server => "processes_per_server",
            Full::Key => "processes_per_key",
        }
    }

    /// The setting that is reached.
    pub fn setting(self) -> &'static str {
        match self {
            Full::Server => "upstream_pool.max_processes_per_server",
            Full::Key => "limits.max_processes_per_key",
        }
    }
}

impl ProcessBudget {
    /// One more process of `server` for `key` (no key: counted only against the server), when both have room.
    pub fn reserve(
        self: &Arc<Self>,
        server: &PoolKey,
        key: Option<KeyId>,
        max_per_server: usize,
        max_per_key: usize,
    ) -> Result<Slot, Full> {
        let mut counts = lock(&self.counts);
        if counts.per_server.get(server).copied().unwrap_or(0) >= max_per_server.max(1) {
            return Err(Full::Server);
        }
        if let Some(key) = key
            && counts.per_key.get(&key).copied().unwrap_or(0) >= max_per_key.max(1)
        {
            return Err(Full::Key);
        }
        *counts.per_server.entry(server.clone()).or_default() += 1;
        if let Some(key) = key {
            *counts.per_key.entry(key).or_default() += 1;
        }
        Ok(Slot { budget: Arc::clone(self), server: server.clone(), key })
    }

    /// The places taken now: (of `server`, of `key`).
    #[cfg(test)]
    fn taken(&self, server: &PoolKey, key: &KeyId) -> (usize, usize) {
        let counts = lock(&self.counts);
        (counts.per_server.get(server).copied().unwrap_or(0), counts.per_key.get(key).copied().unwrap_or(0))
    }
}

/// One process's place in the budget, given back when dropped.
#[derive(Debug)]
pub(super) struct Slot {
    budget: Arc<ProcessBudget>,
    server: PoolKey,
    key: Option<KeyId>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        {
            let mut counts = lock(&self.budget.counts);
            if let Some(count) = counts.per_server.get_mut(&self.server) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    counts.per_server.remove(&self.server);
                }
            }
            if let Some(key) = &self.key
                && let Some(count) = counts.per_key.get_mut(key)
            {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    counts.per_key.remove(key);
                }
            }
        }
        self.budget.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_counted_per_server_and_per_key_and_given_back_on_drop() {
        let budget = Arc::new(ProcessBudget::default());
        let (server, other_server) = (PoolKey::new("c", "a"), PoolKey::new("c", "b"));
        let (key, other_key) = ([1u8; 32], [2u8; 32]);
        let first = budget.reserve(&server, Some(key), 3, 2).expect("room");
        let second = budget.reserve(&other_server, Some(key), 3, 2).expect("room");
        assert_eq!(budget.reserve(&server, Some(key), 3, 2).err(), Some(Full::Key), "the key has its 2");
        let third = budget.reserve(&server, Some(other_key), 3, 2).expect("another key has room");
        let fourth = budget.reserve(&server, None, 3, 2).expect("no key: counted against the server only");
        assert_eq!(budget.reserve(&server, Some(other_key), 3, 2).err(), Some(Full::Server), "the server has its 3");
        assert_eq!(budget.taken(&server, &key), (3, 2));
        drop((first, second, third, fourth));
        assert_eq!(budget.taken(&server, &key), (0, 0));
        assert!(lock(&budget.counts).per_server.is_empty() && lock(&budget.counts).per_key.is_empty());
    }
}
