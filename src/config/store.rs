//! The configuration store: the current [`Snapshot`] behind an `ArcSwap`, the one reload path, and serialised,
//! validated, atomic writes.
//!
//! Readers call [`ConfigStore::snapshot`] (a lock-free `Arc` load) and keep that snapshot for the whole request.
//! Everything that changes the configuration goes through one mutex: [`ConfigStore::reload`] (used by the file
//! watcher, SIGHUP and anyone who wants the file re-read) and [`ConfigStore::update`] / [`ConfigStore::replace`] (used
//! by admin writes). An update re-reads the file under the lock, applies the change to a copy, validates the result,
//! writes it atomically and installs the new snapshot before it answers, so concurrent writers never lose an update and
//! a write is in effect for the gateway at once. A file that fails validation never replaces the snapshot.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use super::decode::Problems;
use super::fsutil::{self, ReadOnly};
use super::model::ConfigFile;
use super::snapshot::Snapshot;
use crate::telemetry::metrics::Metrics;

/// Why the configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read config file {path}: {source}")]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is invalid:\n{}", .problems.join("\n"))]
    Invalid { path: PathBuf, problems: Problems },
}

/// Why a write was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{}", .0.0)]
    ReadOnly(ReadOnly),
    #[error("the change would make the configuration invalid: {}", .0.join("; "))]
    Invalid(Problems),
    #[error("the config file on disk cannot be used ({}); fix it or restore a backup first", .0.join("; "))]
    DiskInvalid(Problems),
    #[error("writing the config file failed: {0}")]
    Io(String),
}

/// The outcome of the last reload attempt, for the health report.
#[derive(Debug, Clone, Default)]
pub struct ReloadStatus {
    /// Whether the file on disk is the valid one serving now.
    pub valid: bool,
    /// What was wrong with the file when it is not valid.
    pub problems: Problems,
}

/// What [`ConfigStore::reload`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ReloadOutcome {
    Unchanged,
    Reloaded,
    Failed(Problems),
}

/// The configuration store. See the module documentation.
pub struct ConfigStore {
    path: PathBuf,
    current: ArcSwap<Snapshot>,
    status: ArcSwap<ReloadStatus>,
    lock: Mutex<()>,
    /// The digest of the content whose reload failed last (cleared by a good one); see
    /// [`ConfigStore::reload_on_change`].
    failed_digest: Mutex<Option<[u8; 32]>>,
    metrics: Arc<Metrics>,
    changes: tokio::sync::watch::Sender<Arc<Snapshot>>,
    /// Told of each reload of the file that found new content: whether it was used, and the content's digest (the
    /// audit log records both outcomes).
    reload_hook: std::sync::OnceLock<ReloadHook>,
}

/// See [`ConfigStore::on_reload`].
type ReloadHook = Box<dyn Fn(bool, Option<[u8; 32]>) + Send + Sync>;

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Reads, parses and validates the file at `path`.
pub fn load_file(path: &Path) -> Result<Snapshot, LoadError> {
    let bytes = fs::read(path).map_err(|source| LoadError::Unreadable { path: path.to_path_buf(), source })?;
    snapshot_from_bytes(&bytes).map_err(|problems| LoadError::Invalid { path: path.to_path_buf(), problems })
}

/// Parses and validates config file bytes (what the fuzz target `config` drives).
pub fn snapshot_from_bytes(bytes: &[u8]) -> Result<Snapshot, Problems> {
    let value = serde_json::from_slice(bytes).map_err(|e| vec![format!("invalid JSON: {e}")])?;
    Snapshot::from_value(value, sha256(bytes))
}

impl ConfigStore {
    /// Loads the file at `path`; fails with every problem when it is unreadable or invalid.
    /// The process's metrics (shared with everything that counts).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn open(path: impl Into<PathBuf>, metrics: Arc<Metrics>) -> Result<ConfigStore, LoadError> {
        let path = path.into();
        let snapshot = Arc::new(load_file(&path)?);
        Ok(ConfigStore {
            path,
            changes: tokio::sync::watch::Sender::new(Arc::clone(&snapshot)),
            current: ArcSwap::new(snapshot),
            status: ArcSwap::from_pointee(ReloadStatus { valid: true, problems: Vec::new() }),
            lock: Mutex::new(()),
            failed_digest: Mutex::new(None),
            metrics,
            reload_hook: std::sync::OnceLock::new(),
        })
    }

    /// The config file path as given (flag or environment), not resolved through symlinks.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The snapshot serving now. Keep it for the whole request.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The outcome of the last reload.
    pub fn status(&self) -> Arc<ReloadStatus> {
        self.status.load_full()
    }

    fn guard(&self) -> MutexGuard<'_, ()> {
        // A panic while holding the lock leaves no half-written state (writes are atomic), so a poisoned lock is safe.
        self.lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Re-reads the file. A valid, changed file replaces the snapshot; an invalid one is reported and ignored.
    pub fn reload(&self) -> ReloadOutcome {
        let _guard = self.guard();
        self.reload_locked(false)
    }

    /// [`ConfigStore::reload`] for the file watcher: one edit raises several file events, so content whose reload has
    /// just failed is not evaluated, counted or logged again (its problems stay in [`ConfigStore::status`]).
    pub fn reload_on_change(&self) -> ReloadOutcome {
        let _guard = self.guard();
        self.reload_locked(true)
    }

    fn reload_locked(&self, skip_known_failure: bool) -> ReloadOutcome {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) => {
                self.reloaded(false, None);
                return self.reload_failed(vec![format!("cannot read {}: {e}", self.path.display())]);
            }
        };
        let digest = sha256(&bytes);
        let mut failed = self.failed_digest.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if digest == self.current.load().source_digest {
            *failed = None;
            if !self.status.load().valid {
                self.status.store(Arc::new(ReloadStatus { valid: true, problems: Vec::new() }));
            }
            return ReloadOutcome::Unchanged;
        }
        if skip_known_failure && *failed == Some(digest) {
            return ReloadOutcome::Failed(self.status.load().problems.clone());
        }
        match snapshot_from_bytes(&bytes) {
            Ok(snapshot) => {
                *failed = None;
                self.install(snapshot);
                self.metrics.config_reloads.with_label_values(&["ok"]).inc();
                tracing::info!(config_path = %self.path.display(), "configuration reloaded");
                self.reloaded(true, Some(digest));
                ReloadOutcome::Reloaded
            }
            Err(problems) => {
                *failed = Some(digest);
                self.reloaded(false, Some(digest));
                self.reload_failed(problems)
            }
        }
    }

    fn reload_failed(&self, problems: Problems) -> ReloadOutcome {
        self.metrics.config_reloads.with_label_values(&["error"]).inc();
        tracing::warn!(
            config_path = %self.path.display(),
            problems = %problems.join("; "),
            "configuration reload failed; the last valid configuration keeps serving"
        );
        self.status.store(Arc::new(ReloadStatus { valid: false, problems: problems.clone() }));
        ReloadOutcome::Failed(problems)
    }

    /// Calls `hook` after each reload of the file that found new content, with whether it was used and the digest of
    /// the content (`None` when the file could not be read). Admin writes are not reloads. Set once.
    pub fn on_reload(&self, hook: impl Fn(bool, Option<[u8; 32]>) + Send + Sync + 'static) {
        let _ = self.reload_hook.set(Box::new(hook));
    }

    fn reloaded(&self, used: bool, digest: Option<[u8; 32]>) {
        if let Some(hook) = self.reload_hook.get() {
            hook(used, digest);
        }
    }

    /// A receiver that sees every new snapshot (for settings that must follow reloads, and caches to drop).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Arc<Snapshot>> {
        self.changes.subscribe()
    }

    fn install(&self, snapshot: Snapshot) {
        let snapshot = Arc::new(snapshot);
        self.current.store(Arc::clone(&snapshot));
        self.changes.send_replace(snapshot);
        self.status.store(Arc::new(ReloadStatus { valid: true, problems: Vec::new() }));
    }

    /// Applies `change` to the current file and writes the result. The change sees a copy of the file as it is on
    /// disk now (re-read under the lock) and the snapshot of it; when it fails, or the result does not validate,
    /// nothing is written.
    pub fn update<T, E>(&self, change: impl FnOnce(&mut ConfigFile, &Snapshot) -> Result<T, E>) -> Result<T, E>
    where
        E: From<WriteError>,
    {
        let _guard = self.guard();
        fsutil::check_writable(&self.path).map_err(WriteError::ReadOnly)?;
        let _other_processes = self.lock_directory()?;
        let current = self.latest_locked()?;
        let mut file = current.file.clone();
        let out = change(&mut file, &current)?;
        self.write_locked(file)?;
        Ok(out)
    }

    /// Replaces the whole file with what `build` returns (restore, reset). The file on disk need not be valid.
    pub fn replace<E>(&self, build: impl FnOnce(&Snapshot) -> Result<ConfigFile, E>) -> Result<(), E>
    where
        E: From<WriteError>,
    {
        let _guard = self.guard();
        fsutil::check_writable(&self.path).map_err(WriteError::ReadOnly)?;
        let _other_processes = self.lock_directory()?;
        let file = build(&self.snapshot())?;
        Ok(self.write_locked(file)?)
    }

    /// Serialises writers in other processes too (the gateway's admin API and `mcpgw` management commands on the same
    /// file): an exclusive advisory lock on the file's directory, held until the returned handle drops. The directory,
    /// not the file, because every write replaces the file by rename; locking it leaves no lock file behind.
    fn lock_directory(&self) -> Result<fs::File, WriteError> {
        let target = fsutil::write_target(&self.path);
        let dir = fsutil::parent_dir(&target);
        let handle = fs::File::open(dir).map_err(|e| WriteError::Io(format!("cannot open {}: {e}", dir.display())))?;
        handle.lock().map_err(|e| WriteError::Io(format!("cannot lock {}: {e}", dir.display())))?;
        Ok(handle)
    }

    /// The snapshot of the file as it is on disk now, installing it when it changed.
    fn latest_locked(&self) -> Result<Arc<Snapshot>, WriteError> {
        match self.reload_locked(false) {
            ReloadOutcome::Unchanged | ReloadOutcome::Reloaded => Ok(self.snapshot()),
            ReloadOutcome::Failed(problems) => Err(WriteError::DiskInvalid(problems)),
        }
    }

    fn write_locked(&self, file: ConfigFile) -> Result<(), WriteError> {
        let bytes = file.to_bytes();
        let snapshot = Snapshot::build(file, sha256(&bytes)).map_err(WriteError::Invalid)?;
        let target = fsutil::write_target(&self.path);
        fsutil::write_atomic(&target, &bytes).map_err(|e| {
            if fsutil::is_read_only_error(&e) {
                WriteError::ReadOnly(ReadOnly(format!("{} cannot be written: {e}", target.display())))
            } else {
                WriteError::Io(e.to_string())
            }
        })?;
        self.install(snapshot);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(path: &Path, value: serde_json::Value) {
        fs::write(path, serde_json::to_vec_pretty(&value).unwrap()).unwrap();
    }

    fn store(dir: &Path) -> ConfigStore {
        let path = dir.join("gw.json");
        write(&path, json!({"admin_apikey": "a", "users": {"u1": {"email": "a@b.co"}}}));
        ConfigStore::open(path, Arc::new(Metrics::new())).unwrap()
    }

    #[test]
    fn an_invalid_file_keeps_the_last_good_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        write(store.path(), json!({"admin_apikey": "b", "users": {"u1": {"email": "broken"}}}));
        assert!(matches!(store.reload(), ReloadOutcome::Failed(_)));
        assert_eq!(store.snapshot().file.admin_apikey.as_deref(), Some("a"));
        assert!(!store.status().valid);

        write(store.path(), json!({"admin_apikey": "c"}));
        assert_eq!(store.reload(), ReloadOutcome::Reloaded);
        assert_eq!(store.snapshot().file.admin_apikey.as_deref(), Some("c"));
        assert!(store.status().valid);
        assert_eq!(store.reload(), ReloadOutcome::Unchanged);
    }

    #[test]
    fn the_watcher_counts_and_logs_an_invalid_content_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let errors = || store.metrics().config_reloads.with_label_values(&["error"]).get();
        write(store.path(), json!({"admin_apikey": "b", "users": {"u1": {"email": "broken"}}}));
        assert!(matches!(store.reload_on_change(), ReloadOutcome::Failed(_)));
        assert!(matches!(store.reload_on_change(), ReloadOutcome::Failed(p) if !p.is_empty()));
        assert_eq!(errors(), 1, "the same content is not evaluated again");
        assert!(!store.status().valid);
        // An explicit reload (SIGHUP) evaluates it again; so does the watcher once the content changes.
        assert!(matches!(store.reload(), ReloadOutcome::Failed(_)));
        assert_eq!(errors(), 2);
        fs::write(store.path(), b"{ not json").unwrap();
        assert!(matches!(store.reload_on_change(), ReloadOutcome::Failed(_)));
        assert_eq!(errors(), 3);
        write(store.path(), json!({"admin_apikey": "c"}));
        assert_eq!(store.reload_on_change(), ReloadOutcome::Reloaded);
        assert!(store.status().valid);
    }

    #[test]
    fn a_failed_change_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let before = fs::read(store.path()).unwrap();
        let result: Result<(), WriteError> = store.update(|file, _| {
            file.users.get_mut("u1").unwrap().email = "not an email".into();
            Ok(())
        });
        assert!(matches!(result, Err(WriteError::Invalid(_))));
        assert_eq!(fs::read(store.path()).unwrap(), before);
    }

    #[test]
    fn updates_are_written_and_in_effect_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let result: Result<(), WriteError> = store.update(|file, _| {
            file.admin_apikey = Some("new".into());
            Ok(())
        });
        result.unwrap();
        assert_eq!(store.snapshot().file.admin_apikey.as_deref(), Some("new"));
        let on_disk = ConfigFile::parse(&fs::read(store.path()).unwrap()).unwrap();
        assert_eq!(on_disk.admin_apikey.as_deref(), Some("new"));
    }
}
