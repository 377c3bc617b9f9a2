//! An in-memory cache whose entries expire after a fixed lifetime, with hit and miss counters.
//!
//! Lookups take a short lock; values are `Arc`s so a hit only clones a pointer. A lifetime of zero turns caching off
//! (every lookup misses, nothing is stored).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

/// What `gw_get_cache_status` reports for one cache.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CacheStats {
    pub entries: usize,
    pub hits: u64,
    pub misses: u64,
    pub expiry_seconds: u64,
}

struct Entry<V> {
    value: Arc<V>,
    expires: Instant,
}

/// A map whose entries expire.
pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, Entry<V>>>,
    lifetime: Mutex<Duration>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Hits and misses per scope (an MCP configuration), for callers who may see only their own.
    scoped: Mutex<HashMap<String, (u64, u64)>>,
}

impl<K: Eq + Hash + Clone, V> TtlCache<K, V> {
    /// A cache whose entries live for `lifetime`.
    pub fn new(lifetime: Duration) -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
            lifetime: Mutex::new(lifetime),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            scoped: Mutex::new(HashMap::new()),
        }
    }

    fn map(&self) -> MutexGuard<'_, HashMap<K, Entry<V>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The lifetime of new entries.
    pub fn lifetime(&self) -> Duration {
        *self.lifetime.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the lifetime of new entries (after a config reload).
    pub fn set_lifetime(&self, lifetime: Duration) {
        *self.lifetime.lock().unwrap_or_else(|p| p.into_inner()) = lifetime;
    }

    /// A live entry, counting a hit or a miss.
    pub fn get(&self, key: &K) -> Option<Arc<V>> {
        let found = self.peek(key);
        self.record(found.is_some());
        found
    }

    /// A live entry, counting nothing (the caller decides with [`TtlCache::record`] what the lookup was).
    pub fn peek(&self, key: &K) -> Option<Arc<V>> {
        let mut map = self.map();
        match map.get(key) {
            Some(entry) if entry.expires > Instant::now() => Some(Arc::clone(&entry.value)),
            Some(_) => {
                map.remove(key);
                None
            }
            None => None,
        }
    }

    /// Counts one lookup as a hit or a miss (a hit in the shared cache counts here too).
    pub fn record(&self, hit: bool) {
        let counter = if hit { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one lookup of `scope` as a hit or a miss (and in the totals).
    pub fn record_in(&self, scope: &str, hit: bool) {
        self.record(hit);
        let mut scoped = self.scoped.lock().unwrap_or_else(|p| p.into_inner());
        let counts = match scoped.get_mut(scope) {
            Some(counts) => counts,
            None => scoped.entry(scope.to_string()).or_default(),
        };
        if hit {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
    }

    /// What one scope sees: its live entries (those for which `belongs` is true), its hits and misses, the lifetime.
    pub fn stats_in(&self, scope: &str, mut belongs: impl FnMut(&K, &V) -> bool) -> CacheStats {
        let now = Instant::now();
        let entries = self.map().iter().filter(|(k, e)| e.expires > now && belongs(k, &e.value)).count();
        let scoped = self.scoped.lock().unwrap_or_else(|p| p.into_inner());
        let (hits, misses) = scoped.get(scope).copied().unwrap_or_default();
        CacheStats { entries, hits, misses, expiry_seconds: self.lifetime().as_secs() }
    }

    /// Calls `visit` with each live entry.
    pub fn for_each(&self, mut visit: impl FnMut(&K, &V)) {
        let now = Instant::now();
        self.map().iter().filter(|(_, e)| e.expires > now).for_each(|(k, e)| visit(k, &e.value));
    }

    /// Removes one entry.
    pub fn remove(&self, key: &K) {
        self.map().remove(key);
    }

    /// Stores a value (nothing when the lifetime is zero).
    pub fn insert(&self, key: K, value: Arc<V>) {
        let lifetime = self.lifetime();
        if lifetime.is_zero() {
            return;
        }
        let expires = Instant::now() + lifetime;
        self.map().insert(key, Entry { value, expires });
    }

    /// Removes the entries for which `remove` is true; returns how many.
    pub fn remove_where(&self, mut remove: impl FnMut(&K, &V) -> bool) -> usize {
        let mut map = self.map();
        let before = map.len();
        map.retain(|k, e| !remove(k, &e.value));
        before - map.len()
    }

    /// Removes every entry; returns how many.
    pub fn clear(&self) -> usize {
        let mut map = self.map();
        let n = map.len();
        map.clear();
        n
    }

    /// Entries (live or not yet purged), hits, misses and lifetime.
    pub fn stats(&self) -> CacheStats {
        let now = Instant::now();
        CacheStats {
            entries: self.map().values().filter(|e| e.expires > now).count(),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            expiry_seconds: self.lifetime().as_secs(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hits_misses_and_expiry() {
        let cache: TtlCache<&str, u32> = TtlCache::new(Duration::from_millis(50));
        assert!(cache.get(&"a").is_none());
        cache.insert("a", Arc::new(1));
        assert_eq!(cache.get(&"a").as_deref(), Some(&1));
        let stats = cache.stats();
        assert_eq!((stats.entries, stats.hits, stats.misses), (1, 1, 1));
        std::thread::sleep(Duration::from_millis(60));
        assert!(cache.get(&"a").is_none(), "expired");
        assert_eq!(cache.stats().entries, 0);
    }

    #[test]
    fn zero_lifetime_disables_caching_and_removal_counts() {
        let cache: TtlCache<u8, u8> = TtlCache::new(Duration::ZERO);
        cache.insert(1, Arc::new(1));
        assert!(cache.get(&1).is_none());
        cache.set_lifetime(Duration::from_secs(60));
        cache.insert(1, Arc::new(1));
        cache.insert(2, Arc::new(2));
        assert_eq!(cache.remove_where(|k, _| *k == 1), 1);
        assert_eq!(cache.clear(), 1);
    }
}
