//! Watching the config file for changes.
//!
//! The watcher observes the file's *parent directory*, not the file: editors and `kubectl` replace files by rename,
//! and Kubernetes ConfigMap and Secret volumes swap a `..data` symlink, so a watch on the file itself would go stale
//! after the first change. Events are debounced (a burst of writes is one reload) and every batch calls
//! [`ConfigStore::reload_on_change`], which re-reads the file and does nothing when its content did not change or is
//! the content whose reload just failed (one edit can raise several batches). When the path
//! is a symlink into another directory, that directory is watched too.
//!
//! Only events that can change what the path reads count ([`relevant`]): ones about the file itself (by its name or
//! its symlink target's name) or about Kubernetes' `..data` swap, and never a mere open, read or close without writing.
//! Otherwise the reload's own read of the file would raise the next batch (a re-read and a hash every 200 ms for
//! ever), and an audit log written beside the config would cause a reload after every call.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::EventKindMask;
use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, Debouncer, RecommendedCache, new_debouncer_opt};

use super::fsutil::parent_dir;
use super::store::ConfigStore;

/// How long a burst of file events must be quiet before the reload runs.
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// What the watch asks the kernel for: names created, removed and renamed (a save by rename, the `..data` swap),
/// changed attributes, and a file closed after writing (an edit in place). Not every write (`IN_MODIFY`) nor every
/// open: a file kept open and appended to beside the config (an audit log, `audit_log.path` relative) would otherwise
/// wake the watcher's thread on every record, several microseconds of a gateway's CPU per call.
const EVENT_KINDS: EventKindMask = EventKindMask::CREATE
    .union(EventKindMask::REMOVE)
    .union(EventKindMask::MODIFY_NAME)
    .union(EventKindMask::MODIFY_META)
    .union(EventKindMask::ACCESS_CLOSE);

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
    let mut names: Vec<OsString> = store.path().file_name().map(OsString::from).into_iter().collect();
    if let Some(real) = std::fs::canonicalize(store.path()).ok().and_then(|r| r.file_name().map(OsString::from)) {
        names.push(real);
    }
    let handler = move |result: DebounceEventResult| match result {
        // The debouncer's thread does nothing but reload: at the lowest priority (`background.rs`).
        Ok(events) if events.iter().any(|event| relevant(&event.event, &names)) => {
            super::background::yield_to_requests();
            reload_store.reload_on_change();
        }
        Ok(_) => {}
        Err(errors) => {
            for error in errors {
                tracing::warn!(error = %error, "config watcher error");
            }
            super::background::yield_to_requests();
            reload_store.reload_on_change();
        }
    };
    let config = notify::Config::default().with_event_kinds(EVENT_KINDS);
    let mut debouncer = new_debouncer_opt(DEBOUNCE, None, handler, RecommendedCache::new(), config)?;
    for dir in &dirs {
        debouncer.watch(dir, RecursiveMode::NonRecursive)?;
    }
    tracing::debug!(dirs = ?dirs, "watching config directory");
    Ok(ConfigWatcher { _debouncer: debouncer })
}

/// Whether `event` can change what the config path reads: not a mere access, and about a file named in `names` (the
/// config file's name, its symlink target's) or one of Kubernetes' `..` entries (the `..data` swap of a volume), or
/// about no path at all (a watcher that lost track: reload to be sure).
fn relevant(event: &notify::Event, names: &[OsString]) -> bool {
    use notify::EventKind;
    use notify::event::{AccessKind, AccessMode};
    if let EventKind::Access(access) = event.kind
        && !matches!(access, AccessKind::Close(AccessMode::Write))
    {
        return false;
    }
    event.paths.is_empty()
        || event.paths.iter().any(|path| {
            path.file_name()
                .is_some_and(|name| names.iter().any(|n| n == name) || name.to_string_lossy().starts_with(".."))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind};
    use notify::{Event, EventKind};

    #[test]
    fn only_changes_to_the_config_file_or_a_volume_swap_count() {
        let names = [OsString::from("gw.json")];
        let at = |kind: EventKind, path: &str| Event::new(kind).add_path(PathBuf::from(path));
        assert!(relevant(&at(EventKind::Modify(ModifyKind::Any), "/etc/gw/gw.json"), &names));
        assert!(relevant(&at(EventKind::Create(CreateKind::File), "/etc/gw/..data"), &names));
        assert!(relevant(&at(EventKind::Access(AccessKind::Close(AccessMode::Write)), "/etc/gw/gw.json"), &names));
        assert!(!relevant(&at(EventKind::Access(AccessKind::Open(AccessMode::Any)), "/etc/gw/gw.json"), &names));
        assert!(!relevant(&at(EventKind::Access(AccessKind::Close(AccessMode::Read)), "/etc/gw/gw.json"), &names));
        assert!(!relevant(&at(EventKind::Modify(ModifyKind::Any), "/etc/gw/audit.jsonl"), &names));
        assert!(relevant(&Event::new(EventKind::Any), &names));
    }
}
