//! Watching the config file for changes.
//!
//! The watcher observes the file's *parent directory*, not the file: editors and `kubectl` replace files by rename,
//! and Kubernetes ConfigMap and Secret volumes swap a `..data` symlink, so a watch on the file itself would go stale
//! after the first change. Events are debounced (a burst of writes is one reload) and every batch calls
//! [`ConfigStore::reload_on_change`], which re-reads the file and does nothing when its content did not change or is
//! the content whose reload just failed (one edit can raise several batches). When the path
//! is a symlink into another directory, that directory is watched too.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer};

use super::fsutil::parent_dir;
use super::store::ConfigStore;

/// How long a burst of file events must be quiet before the reload runs.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// Keeps the watch alive; dropping it stops watching.
pub struct ConfigWatcher {
    _debouncer: Debouncer<notify::RecommendedWatcher, RecommendedCache>,
}

/// Starts watching the store's config file.
pub fn watch(store: Arc<ConfigStore>) -> Result<ConfigWatcher, notify::Error> {
    let mut dirs: Vec<PathBuf> = vec![parent_dir(store.path()).to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(store.path()) {
        let real_dir = parent_dir(&real).to_path_buf();
        let same = std::fs::canonicalize(&dirs[0]).is_ok_and(|d| d == real_dir);
        if !same {
            dirs.push(real_dir);
        }
    }
    let reload_store = Arc::clone(&store);
    let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| match result {
        Ok(events) if !events.is_empty() => {
            reload_store.reload_on_change();
        }
        Ok(_) => {}
        Err(errors) => {
            for error in errors {
                tracing::warn!(error = %error, "config watcher error");
            }
            reload_store.reload_on_change();
        }
    })?;
    for dir in &dirs {
        debouncer.watch(dir, RecursiveMode::NonRecursive)?;
    }
    tracing::debug!(dirs = ?dirs, "watching config directory");
    Ok(ConfigWatcher { _debouncer: debouncer })
}
