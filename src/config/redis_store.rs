//! The Redis configuration store (`config_store: {"type": "redis"}`, contract section 12): the configuration every
//! replica shares.
//!
//! Redis holds one hash, `mcpgw:config:current`, with the configuration document (`document`, the file's JSON) and its
//! version (`version`, 1 for the seed, one more for each write). A write is a compare-and-set on the version (a Lua
//! script: the new document is stored only if the version is still the one the write started from, and the new
//! version is published on `mcpgw:config:changes`).
//!
//! A document over [`IN_HASH_MAX`] (a configuration of some 30,000 keys and more) is not sent in one command nor read
//! in one answer: it is cut into pieces of [`PIECE`] bytes, each stored under a staging key of the writer's own
//! (`mcpgw:config:staging:{token}:{n}`), which the compare-and-set renames to `mcpgw:config:document:{version}:{n}`
//! (the hash then names the prefix in `document_key`, with `document_pieces` and `document_length`); a read gets the
//! pieces one by one. Every transfer is thus bounded: a 127 MB document moved in one system call held a CPU of Redis
//! and of the gateway for milliseconds at a time (issue 36), and one answer of it could take longer than [`TIMEOUT`];
//! and no piece is ever copied or grown inside Redis (appending to one 127 MB string cost Redis 0.7 s of copies). The
//! previous version's pieces are kept for [`OLD_DOCUMENT_TTL`], so that a replica still reading them finishes; a read
//! that finds a piece gone reads the new version instead.
//!
//! Writers on different replicas are also serialised by a short lock (`mcpgw:config:lock`, with an expiry, released by
//! its holder only), so that a write's change runs once against the latest document; the compare-and-set still refuses
//! a write whose lock expired under it.
//!
//! This module is the synchronous client the [`super::ConfigStore`] uses under its lock (reads, the seed, writes); the
//! replicas learn of a change from the publication and, as a fallback, by reading the version every 2 seconds (see
//! [`super::sync`]). Every operation is bounded ([`TIMEOUT`]); a failure marks the store unreachable until an operation
//! succeeds again. The password never leaves this module.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo, RedisResult};

use super::settings::Settings;

/// The hash that holds the configuration.
pub const CONFIG_KEY: &str = "mcpgw:config:current";
/// Where each new version is published.
pub const CHANNEL: &str = "mcpgw:config:changes";
const LOCK_KEY: &str = "mcpgw:config:lock";
/// How long a writer's lock lives if the writer dies holding it (or Redis restarts from its append-only file with it
/// held). A write holds it for a few milliseconds.
const LOCK_TTL: Duration = Duration::from_secs(3);
/// How long a writer waits for another replica's write to finish.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// The bound on connecting and on each answer.
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// The largest document kept in the hash itself; larger ones are stored and read in pieces.
pub const IN_HASH_MAX: usize = 4 << 20;
/// The size of each piece of a larger document, each a key of its own, written or read in one command.
pub const PIECE: usize = 512 << 10;
/// How long a replaced document's key is kept for the replicas still reading it.
const OLD_DOCUMENT_TTL: Duration = Duration::from_secs(60);
/// How long a staged piece lives if its writer dies before the compare-and-set.
const STAGING_TTL: Duration = Duration::from_secs(120);
/// The most a stored `document_length` may say (a larger one is refused, never allocated).
const DOCUMENT_MAX: u64 = 4 << 30;
/// How many times a read starts again when the version it was reading was replaced and expired under it.
const READ_ATTEMPTS: usize = 3;

/// KEYS: the hash, the channel, the staging prefix and the document prefix ('' for a document in the hash); ARGV: the
/// expected version ('' for an empty store), the new one, the document ('' when staged), its length and number of
/// pieces when staged, and how long the replaced document's pieces are kept (ms).
const CAS_SCRIPT: &str = r"
local current = redis.call('HGET', KEYS[1], 'version')
local staged = KEYS[3] ~= ''
local pieces = tonumber(ARGV[5]) or 0
local function drop_staged()
  for n = 0, pieces - 1 do redis.call('DEL', KEYS[3] .. ':' .. n) end
end
if (current or '') ~= ARGV[1] then
  if staged then drop_staged() end
  return 0
end
local old = redis.call('HMGET', KEYS[1], 'document_key', 'document_pieces')
if staged then
  for n = 0, pieces - 1 do
    if redis.call('EXISTS', KEYS[3] .. ':' .. n) == 0 then
      drop_staged()
      return redis.error_reply('a staged piece of the document is missing')
    end
  end
  for n = 0, pieces - 1 do
    local key = KEYS[4] .. ':' .. n
    redis.call('RENAME', KEYS[3] .. ':' .. n, key)
    redis.call('PERSIST', key)
  end
  redis.call('HSET', KEYS[1], 'version', ARGV[2], 'document_key', KEYS[4], 'document_length', ARGV[4],
    'document_pieces', ARGV[5])
  redis.call('HDEL', KEYS[1], 'document')
else
  redis.call('HSET', KEYS[1], 'version', ARGV[2], 'document', ARGV[3])
  redis.call('HDEL', KEYS[1], 'document_key', 'document_length', 'document_pieces')
end
if old[1] and old[1] ~= KEYS[4] then
  for n = 0, (tonumber(old[2]) or 0) - 1 do redis.call('PEXPIRE', old[1] .. ':' .. n, ARGV[6]) end
end
redis.call('PUBLISH', KEYS[2], ARGV[2])
return 1
";

const UNLOCK_SCRIPT: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
";

/// The Redis connection of the `gw_cache_*` settings (the shared cache's, and the config store's).
pub fn connection_info(host: &str, port: u16, db: u32, password: Option<&str>) -> RedisResult<ConnectionInfo> {
    let mut redis = RedisConnectionInfo::default().set_db(i64::from(db));
    if let Some(password) = password.filter(|p| !p.is_empty()) {
        redis = redis.set_password(password);
    }
    Ok(ConnectionAddr::Tcp(host.to_string(), port).into_connection_info()?.set_redis_settings(redis))
}

/// Why the store could not be used.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the configuration store (redis at {target}) is unavailable: {reason}")]
pub struct Unavailable {
    pub target: String,
    pub reason: String,
}

/// What the health report says about the store.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StoreReport {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub reachable: bool,
    pub host: String,
    pub port: u16,
    pub db: u32,
    /// The version serving on this replica (0: none read from Redis yet; the seed file is serving).
    pub version: u64,
}

/// The configuration in Redis: its version and document.
pub struct Stored {
    pub version: u64,
    pub document: Vec<u8>,
}

/// The synchronous client of the store. See the module documentation.
pub struct RedisStore {
    client: redis::Client,
    host: String,
    port: u16,
    db: u32,
    connection: Mutex<Option<redis::Connection>>,
    /// The version installed on this replica.
    version: AtomicU64,
    reachable: AtomicBool,
    /// Whether anything was tried yet (the report says unreachable only after a failure).
    tried: AtomicBool,
}

impl RedisStore {
    /// The store at the `gw_cache_*` connection of `settings` (nothing is connected yet).
    pub fn new(settings: &Settings) -> RedisResult<RedisStore> {
        let info = connection_info(
            &settings.cache_host,
            settings.cache_port,
            settings.cache_db,
            settings.cache_password.as_deref(),
        )?;
        Ok(RedisStore {
            client: redis::Client::open(info)?,
            host: settings.cache_host.clone(),
            port: settings.cache_port,
            db: settings.cache_db,
            connection: Mutex::new(None),
            version: AtomicU64::new(0),
            reachable: AtomicBool::new(false),
            tried: AtomicBool::new(false),
        })
    }

    /// A client for a dedicated connection (the subscription to [`CHANNEL`]).
    pub fn client(&self) -> &redis::Client {
        &self.client
    }

    /// `host:port` (never the password).
    pub fn target(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The version installed on this replica.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// Records the version now installed.
    pub fn installed(&self, version: u64) {
        self.version.store(version, Ordering::SeqCst);
    }

    /// Whether the last operation reached Redis.
    pub fn reachable(&self) -> bool {
        self.reachable.load(Ordering::SeqCst)
    }

    pub fn report(&self) -> StoreReport {
        StoreReport {
            kind: "redis",
            reachable: self.reachable(),
            host: self.host.clone(),
            port: self.port,
            db: self.db,
            version: self.version(),
        }
    }

    /// The reason the health report gives while the store is unreachable.
    pub fn degraded_reason(&self) -> Option<String> {
        (self.tried.load(Ordering::SeqCst) && !self.reachable()).then(|| {
            format!(
                "configuration store (redis at {}) unreachable; the last configuration read keeps serving and admin \
                 writes are refused",
                self.target()
            )
        })
    }

    fn guard(&self) -> MutexGuard<'_, Option<redis::Connection>> {
        self.connection.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `op` on the connection (made when there is none); a failure drops the connection and marks Redis
    /// unreachable.
    fn with<T>(&self, op: impl FnOnce(&mut redis::Connection) -> RedisResult<T>) -> Result<T, Unavailable> {
        let mut slot = self.guard();
        self.tried.store(true, Ordering::SeqCst);
        let result = (|| {
            if slot.is_none() {
                let connection = self.client.get_connection_with_timeout(TIMEOUT)?;
                connection.set_read_timeout(Some(TIMEOUT))?;
                connection.set_write_timeout(Some(TIMEOUT))?;
                *slot = Some(connection);
            }
            match slot.as_mut() {
                Some(connection) => op(connection),
                None => Err(redis::RedisError::from((redis::ErrorKind::Io, "no connection"))),
            }
        })();
        match result {
            Ok(value) => {
                if !self.reachable.swap(true, Ordering::SeqCst) {
                    tracing::info!(redis = %self.target(), "configuration store reachable");
                }
                Ok(value)
            }
            Err(e) => {
                *slot = None;
                if self.reachable.swap(false, Ordering::SeqCst) {
                    tracing::warn!(redis = %self.target(), error = %e, "configuration store unreachable");
                }
                Err(Unavailable { target: self.target(), reason: e.to_string() })
            }
        }
    }

    /// The version in Redis (`None`: the store is empty).
    pub fn read_version(&self) -> Result<Option<u64>, Unavailable> {
        let version: Option<String> = self.with(|c| redis::cmd("HGET").arg(CONFIG_KEY).arg("version").query(c))?;
        Ok(version.and_then(|v| v.parse().ok()))
    }

    /// The configuration in Redis (`None`: the store is empty).
    pub fn read(&self) -> Result<Option<Stored>, Unavailable> {
        type Fields = (Option<String>, Option<Vec<u8>>, Option<String>, Option<String>, Option<String>);
        for _ in 0..READ_ATTEMPTS {
            let (version, document, key, length, pieces): Fields = self.with(|c| {
                redis::cmd("HMGET")
                    .arg(CONFIG_KEY)
                    .arg("version")
                    .arg("document")
                    .arg("document_key")
                    .arg("document_length")
                    .arg("document_pieces")
                    .query(c)
            })?;
            let Some(version) = version.and_then(|v| v.parse().ok()) else { return Ok(None) };
            if let Some(document) = document {
                return Ok(Some(Stored { version, document }));
            }
            let number = |field: Option<String>| field.and_then(|v| v.parse::<u64>().ok());
            let (Some(key), Some(length), Some(pieces)) = (key, number(length), number(pieces)) else {
                return Ok(None);
            };
            if length > DOCUMENT_MAX || pieces > DOCUMENT_MAX / PIECE as u64 + 1 {
                return Err(
                    self.unavailable(format!("the stored document says it has {length} bytes in {pieces} pieces"))
                );
            }
            if let Some(document) = self.read_pieces(&key, length, pieces)? {
                return Ok(Some(Stored { version, document }));
            }
            // Replaced and expired while this read went on: read the version that replaced it.
        }
        Err(self.unavailable(format!("the document changed under {READ_ATTEMPTS} reads in a row")))
    }

    /// The `pieces` keys under `prefix`, `length` bytes in all; `None` when one of them is gone (it expired).
    fn read_pieces(&self, prefix: &str, length: u64, pieces: u64) -> Result<Option<Vec<u8>>, Unavailable> {
        let length = usize::try_from(length).map_err(|_| self.unavailable("the stored document is too long".into()))?;
        let mut document = Vec::with_capacity(length.min(256 << 20));
        for n in 0..pieces {
            let piece: Option<Vec<u8>> = self.with(|c| redis::cmd("GET").arg(format!("{prefix}:{n}")).query(c))?;
            let Some(piece) = piece else { return Ok(None) };
            if piece.len() > PIECE || document.len() + piece.len() > length {
                return Err(self.unavailable(format!("piece {n} of the stored document is not what its hash says")));
            }
            document.extend_from_slice(&piece);
        }
        if document.len() != length {
            return Err(self.unavailable(format!("the stored document has {} bytes, not {length}", document.len())));
        }
        Ok(Some(document))
    }

    /// A failure of this module's own (not Redis's): logged here, since Redis stays reachable.
    fn unavailable(&self, reason: String) -> Unavailable {
        tracing::warn!(redis = %self.target(), %reason, "the configuration store could not be used");
        Unavailable { target: self.target(), reason }
    }

    /// Stores `document` as version `expected + 1` if the version in Redis is still `expected` (0: the store is
    /// empty); `Ok(None)` when it is not. A document over [`IN_HASH_MAX`] is staged in pieces first.
    pub fn compare_and_set(&self, expected: u64, document: &[u8]) -> Result<Option<u64>, Unavailable> {
        let next = expected + 1;
        let expected = if expected == 0 { String::new() } else { expected.to_string() };
        let (staging, prefix, pieces) = if document.len() > IN_HASH_MAX {
            let token = crate::secrets::random_token().map_err(|e| self.unavailable(e.to_string()))?;
            let staging = format!("mcpgw:config:staging:{token}");
            let pieces = self.stage(&staging, document)?;
            (staging, format!("mcpgw:config:document:{next}"), pieces)
        } else {
            (String::new(), String::new(), 0)
        };
        let inline: &[u8] = if staging.is_empty() { document } else { b"" };
        let stored: i64 = self.with(|c| {
            redis::cmd("EVAL")
                .arg(CAS_SCRIPT)
                .arg(4)
                .arg(CONFIG_KEY)
                .arg(CHANNEL)
                .arg(&staging)
                .arg(&prefix)
                .arg(expected)
                .arg(next)
                .arg(inline)
                .arg(document.len())
                .arg(pieces)
                .arg(OLD_DOCUMENT_TTL.as_millis() as u64)
                .query(c)
        })?;
        Ok((stored == 1).then_some(next))
    }

    /// Stores `document` in pieces of [`PIECE`] bytes under `staging:0`, `staging:1`... (each expiring if this writer
    /// dies first); the number of pieces.
    fn stage(&self, staging: &str, document: &[u8]) -> Result<usize, Unavailable> {
        let ttl = STAGING_TTL.as_millis() as u64;
        let mut pieces = 0;
        for (n, piece) in document.chunks(PIECE).enumerate() {
            let key = format!("{staging}:{n}");
            let () = self.with(|c| redis::cmd("SET").arg(key).arg(piece).arg("PX").arg(ttl).query(c))?;
            pieces = n + 1;
        }
        Ok(pieces)
    }

    /// Takes the writers' lock (waiting up to [`LOCK_WAIT`] for another replica's write); released when the returned
    /// guard drops.
    pub fn lock(&self) -> Result<WriteLock<'_>, Unavailable> {
        let token = crate::secrets::random_token().map_err(|e| self.unavailable(e.to_string()))?;
        let deadline = Instant::now() + LOCK_WAIT;
        let mut pause = Duration::from_millis(2);
        loop {
            let taken: Option<String> = self.with(|c| {
                redis::cmd("SET")
                    .arg(LOCK_KEY)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(LOCK_TTL.as_millis() as u64)
                    .query(c)
            })?;
            if taken.is_some() {
                return Ok(WriteLock { store: self, token });
            }
            if Instant::now() >= deadline {
                return Err(Unavailable {
                    target: self.target(),
                    reason: format!("another replica's write held the lock for {} s", LOCK_WAIT.as_secs()),
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

/// The writers' lock; see [`RedisStore::lock`].
pub struct WriteLock<'a> {
    store: &'a RedisStore,
    token: String,
}

impl Drop for WriteLock<'_> {
    fn drop(&mut self) {
        let released: Result<i64, _> =
            self.store.with(|c| redis::cmd("EVAL").arg(UNLOCK_SCRIPT).arg(1).arg(LOCK_KEY).arg(&self.token).query(c));
        if let Err(e) = released {
            tracing::debug!(error = %e, "releasing the configuration store's write lock (it expires by itself)");
        }
    }
}
