//! A value derived from the current configuration snapshot (an HTTP client for a provider, say), built on first use
//! and rebuilt when the snapshot changes. Such values hold connection pools, so they are not built per request.

use std::sync::{Arc, Mutex};

use super::Snapshot;

/// See the module documentation.
pub struct PerSnapshot<T> {
    current: Mutex<Option<(Arc<Snapshot>, Arc<T>)>>,
}

impl<T> Default for PerSnapshot<T> {
    fn default() -> Self {
        PerSnapshot { current: Mutex::new(None) }
    }
}

impl<T> PerSnapshot<T> {
    /// The value for `snapshot`, built with `build` when the snapshot is not the one it was last built for.
    pub fn get(&self, snapshot: &Arc<Snapshot>, build: impl FnOnce(&Snapshot) -> T) -> Arc<T> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((built_for, value)) = current.as_ref()
            && Arc::ptr_eq(built_for, snapshot)
        {
            return Arc::clone(value);
        }
        let value = Arc::new(build(snapshot));
        *current = Some((Arc::clone(snapshot), Arc::clone(&value)));
        value
    }
}
