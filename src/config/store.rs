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
use super::redis_store::{RedisStore, Stored, Unavailable};
use super::settings::StoreKind;
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
    /// The Redis store cannot be reached (or changed under the write).
    #[error("{0}")]
    StoreUnavailable(String),
    #[error(
        "the configuration in the Redis store cannot be used ({}); restore a backup or reset it first",
        .0.join("; ")
    )]
    StoreInvalid(Problems),
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
    /// The Redis store when `config_store` is `redis` (contract section 12); the file is then only the seed.
    redis: Option<Arc<RedisStore>>,
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
            redis: None,
        })
    }

    /// [`ConfigStore::open`] for the service: when the file's `config_store` is `redis`, the configuration is then
    /// read from (and written to) Redis, the file seeding an empty store. Nothing is connected yet: the first
    /// [`ConfigStore::reload`] reads the store.
    pub fn open_serving(path: impl Into<PathBuf>, metrics: Arc<Metrics>) -> Result<ConfigStore, LoadError> {
        let mut store = ConfigStore::open(path, metrics)?;
        let snapshot = store.snapshot();
        if snapshot.settings.config_store == StoreKind::Redis {
            let redis = RedisStore::new(&snapshot.settings).map_err(|e| LoadError::Invalid {
                path: store.path.clone(),
                problems: vec![format!("common_mcp_gateway_config: the Redis connection is invalid: {e}")],
            })?;
            store.redis = Some(Arc::new(redis));
        }
        Ok(store)
    }

    /// The Redis store, when the configuration lives there.
    pub fn redis(&self) -> Option<&Arc<RedisStore>> {
        self.redis.as_ref()
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
        if let Some(redis) = &self.redis {
            return self.refresh_locked(redis).unwrap_or_else(|e| ReloadOutcome::Failed(vec![e.to_string()]));
        }
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

    /// Reads the Redis store: a new version is installed (an invalid one is reported and ignored), an empty store is
    /// seeded with the file's configuration (and a generated `session_secret` and `secrets_key` when the file has none).
    fn refresh_locked(&self, redis: &RedisStore) -> Result<ReloadOutcome, Unavailable> {
        if redis.read_version()?.is_some_and(|version| version == redis.version()) {
            return Ok(ReloadOutcome::Unchanged);
        }
        let stored = match redis.read()? {
            Some(stored) => stored,
            None => {
                let mut seed = self.snapshot().file.clone();
                let common = seed.common_mcp_gateway_config.get_or_insert_with(Default::default);
                if common.session_secret.is_none() {
                    common.session_secret = crate::secrets::random_token().ok();
                }
                if common.secrets_key.is_none() && common.secrets_key_file.is_none() {
                    common.secrets_key = crate::secrets::random_token().ok();
                }
                let document = seed.to_bytes();
                match redis.compare_and_set(0, &document)? {
                    Some(version) => {
                        tracing::info!(redis = %redis.target(), version, "configuration store seeded from the file");
                        Stored { version, document }
                    }
                    // Another replica seeded it first.
                    None => match redis.read()? {
                        Some(stored) => stored,
                        None => return Ok(ReloadOutcome::Unchanged),
                    },
                }
            }
        };
        redis.installed(stored.version);
        let digest = sha256(&stored.document);
        if digest == self.current.load().source_digest {
            if !self.status.load().valid {
                self.status.store(Arc::new(ReloadStatus { valid: true, problems: Vec::new() }));
            }
            return Ok(ReloadOutcome::Unchanged);
        }
        Ok(match snapshot_from_bytes(&stored.document) {
            Ok(snapshot) => {
                self.install(snapshot);
                self.metrics.config_reloads.with_label_values(&["ok"]).inc();
                tracing::info!(version = stored.version, "configuration read from the store");
                self.reloaded(true, Some(digest));
                ReloadOutcome::Reloaded
            }
            Err(problems) => {
                self.reloaded(false, Some(digest));
                self.reload_failed(problems)
            }
        })
    }

    /// A write on the Redis store (the caller holds the writers' lock, then the store's): `build` makes the new
    /// configuration from the latest stored one, which is then compare-and-set on its version.
    ///
    /// A change (`replacing` false) is refused while the stored configuration is invalid (written to Redis by something
    /// else than a gateway), as a change of an invalid file is; a restore or reset (`replacing`) replaces it.
    fn write_redis<T, E>(
        &self,
        redis: &RedisStore,
        replacing: bool,
        build: impl FnOnce(&Snapshot) -> Result<(ConfigFile, T), E>,
    ) -> Result<T, E>
    where
        E: From<WriteError>,
    {
        let unavailable = |e: Unavailable| WriteError::StoreUnavailable(e.to_string());
        self.refresh_locked(redis).map_err(unavailable)?;
        let status = self.status();
        if !replacing && !status.valid {
            return Err(WriteError::StoreInvalid(status.problems.clone()).into());
        }
        let current = self.snapshot();
        let (file, out) = build(&current)?;
        let document = file.to_bytes();
        let snapshot = Snapshot::build(file, sha256(&document)).map_err(WriteError::Invalid)?;
        match redis.compare_and_set(redis.version(), &document).map_err(unavailable)? {
            Some(version) => {
                redis.installed(version);
                self.install(snapshot);
                Ok(out)
            }
            None => Err(WriteError::StoreUnavailable(format!(
                "the configuration store (redis at {}) changed under this write; nothing was written, try again",
                redis.target()
            ))
            .into()),
        }
    }

    /// [`ConfigStore::update`] for synchronous code that may run on a tokio worker (the pins written at a server's
    /// first use): the worker first hands its other tasks to another thread (`block_in_place`), so that the write, which
    /// takes seconds for a configuration of a million keys, holds up no other request (issue 36). Outside a
    /// multi-threaded runtime it is `update`.
    pub fn update_off_worker<T, E>(
        &self,
        change: impl FnOnce(&mut ConfigFile, &Snapshot) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<WriteError>,
    {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| self.update(change))
            }
            _ => self.update(change),
        }
    }

    /// Applies `change` to the current file and writes the result. The change sees a copy of the file as it is on
    /// disk now (re-read under the lock) and the snapshot of it; when it fails, or the result does not validate,
    /// nothing is written.
    pub fn update<T, E>(&self, change: impl FnOnce(&mut ConfigFile, &Snapshot) -> Result<T, E>) -> Result<T, E>
    where
        E: From<WriteError>,
    {
        if let Some(redis) = &self.redis {
            // The writers' lock first: waiting for another replica's write must not hold up this replica's reads.
            let _lock = redis.lock().map_err(|e| WriteError::StoreUnavailable(e.to_string()))?;
            let _guard = self.guard();
            return self.write_redis(redis, false, |current| {
                let mut file = current.file.clone();
                let out = change(&mut file, current)?;
                Ok((file, out))
            });
        }
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
        if let Some(redis) = &self.redis {
            let _lock = redis.lock().map_err(|e| WriteError::StoreUnavailable(e.to_string()))?;
            let _guard = self.guard();
            return self.write_redis(redis, true, |current| Ok((build(current)?, ())));
        }
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
