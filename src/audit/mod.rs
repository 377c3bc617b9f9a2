//! The audit log (contract section 11): one JSON line per event worth answering for later (every tool call, every
//! authentication failure, every admin write, every pin change and quarantine, every configuration reload), chained by
//! hashes so that a changed, removed or inserted record shows.
//!
//! Each record has `seq` (from 1), `timestamp`, `event`, `project_id`, `user_id`, `key_id`, `server_name`,
//! `tool_name`, `args_hmac`, `outcome`, `error_code`, `config_revision`, `prev_hash` (the previous record's `hash`;
//! 64 zeros for the first) and `hash`: the SHA-256 of the record without `hash` as JSON with sorted keys. Some events
//! add `source_address` and `suppressed` (authentication failures, [`flood`]) or `count` (a summary); the calls of an
//! upstream add `credential` (`"shared"` or `"secret"`: whose credentials the call carried, contract 16). It never holds
//! a key, a token, an argument value or a secret.
//!
//! A call's arguments appear only as `args_hmac`: HMAC-SHA-256 of their sorted-key JSON under `audit_log.hmac_key`.
//! A plain hash would be an oracle: whoever reads the log could confirm a guess (a 9-digit number, a name) by hashing
//! it. The key is written by `init`; a file without one gets the key this process generated, written into the file
//! like a trust-on-first-use pin, or kept in memory when the file cannot be written (its digests then compare only
//! within this process).
//!
//! The file is created with mode 0600 and appended to; each record is written (`write(2)` done, no `fsync`) before the
//! answer it records is sent (a write that fails is logged, and the answer still goes). The records of the calls in
//! flight are written together, with one `write` ([`commit`]: group commit): a caller builds its record's text
//! outside any lock ([`record`]), queues it under a short lock, and either writes the queue itself or waits, yielding
//! on the async path ([`AuditLog::record`]), for the write in progress and the next one. Each line is the record in
//! the form its hash is taken of (sorted keys), `hash` in its place; the records of one write share its `timestamp`,
//! so `seq` and `timestamp` go up together. After a restart the chain continues from the file's last record.
//! [`verify()`] (`mcpgw audit verify PATH`) checks a file.
//!
//! What the chain proves: that the records were not changed, removed or inserted after they were written, *unless*
//! the file was rewritten from the changed record to its end, hashes included (anyone who can write the file can do
//! that). Ship the log off the machine (to a write-once store, or as OTLP logs) to close that gap; SECURITY.md says so.

mod commit;
pub mod flood;
mod record;
mod verify;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use ring::hmac;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::json_strict::canonical;
use crate::secrets::hex;
use commit::{Chain, State};
pub use verify::{Broken, VerifyError, verify, verify_appending};

const FIRST_PREV: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One event to record; absent fields are written as `null`.
#[derive(Default)]
pub struct Event<'a> {
    pub event: &'a str,
    pub project_id: Option<&'a str>,
    pub user_id: Option<&'a str>,
    pub key_id: Option<&'a str>,
    pub server_name: Option<&'a str>,
    pub tool_name: Option<&'a str>,
    /// The HMAC of the call's arguments ([`AuditLog::args_hmac`]), never the arguments.
    pub args_hmac: Option<String>,
    pub outcome: Option<&'a str>,
    pub error_code: Option<&'a str>,
    /// The SHA-256 of the configuration file the event happened under.
    pub config_revision: Option<String>,
    /// Where an authentication failure came from (written only when set).
    pub source_address: Option<IpAddr>,
    /// How many records of this kind were left out since the last one (written only when set).
    pub suppressed: Option<u64>,
    /// How many things a summary record stands for (written only when set).
    pub count: Option<u64>,
    /// Whose credentials an upstream call carried: `"shared"` or a per-user kind (written only when set).
    pub credential: Option<&'a str>,
    /// The authorization rule that decided the call (contract 17; written only when a rule decided).
    pub policy_rule: Option<&'a str>,
    /// A call's target as the authorization rules saw it (`{kind, exposed_name, annotations}` as canonical JSON
    /// text, written as it is; only when set), for the simulator.
    pub target: Option<Arc<str>>,
    /// What of the caller the rules read that is not elsewhere in the record (`{auth, groups, roles, scopes}` as
    /// canonical JSON text, written as it is; only when set), for the simulator.
    pub principal: Option<Arc<str>>,
}

/// The hex form of a configuration digest.
pub fn revision(digest: &[u8; 32]) -> String {
    hex(digest)
}

/// The file events are recorded in.
struct Open {
    path: PathBuf,
    /// What `args_hmac` is keyed with; `None` only when no key could be had (the digests are then left out).
    key: Option<Arc<hmac::Key>>,
    /// The end of its chain; `None` while a writer holds it ([`commit`]).
    chain: Option<Chain>,
}

/// The audit log of one gateway; off until [`AuditLog::configure`] names a file.
#[derive(Default)]
pub struct AuditLog {
    /// The open file, the records queued for it and who writes them ([`commit`]).
    state: Mutex<State>,
    /// Whether a file is open, read without the lock (the calls of a gateway without an audit log ask on each call).
    on: AtomicBool,
    /// The ticket of the last record written (or whose write failed): waiters read it without the lock.
    written: AtomicU64,
    /// Wakes the tasks waiting for their record after each write.
    written_notify: tokio::sync::Notify,
    /// Wakes the threads waiting for their record (and `configure`, waiting for a write to end).
    written_condvar: Condvar,
    /// The key this process uses when the configuration has none (generated once, on first need).
    own_key: OnceLock<Option<String>>,
    /// The bound on authentication failure records.
    failures: Mutex<flood::PerAddress>,
}

impl AuditLog {
    /// Follows the configuration: `path` on (the file opened, its chain continued), `None` off; `key` is
    /// `audit_log.hmac_key` (when `None`, this process's own, [`AuditLog::own_key`]). The same path keeps the open
    /// file. The records queued for the file in use are written to it before it changes.
    pub fn configure(&self, path: Option<&Path>, key: Option<&str>) {
        let key = key.or_else(|| self.own_key()).map(|k| Arc::new(hmac::Key::new(hmac::HMAC_SHA256, k.as_bytes())));
        let mut state = self.lock();
        if let (Some(path), Some(open)) = (path, state.open.as_mut())
            && open.path == path
        {
            open.key = key;
            return;
        }
        let mut state = self.write_all_queued(state);
        state.open = path.and_then(|path| match open(path) {
            Ok(chain) => {
                tracing::info!(path = %path.display(), seq = chain.seq, "audit log open");
                Some(Open { path: path.to_path_buf(), key, chain: Some(chain) })
            }
            Err(error) => {
                tracing::error!(path = %path.display(), %error,
                    "the audit log cannot be opened; no events are recorded");
                None
            }
        });
        self.on.store(state.open.is_some(), Ordering::Release);
        self.wake(state);
    }

    /// The file events are recorded in, if any.
    pub fn path(&self) -> Option<PathBuf> {
        self.lock().open.as_ref().map(|open| open.path.clone())
    }

    /// Whether events are being recorded.
    pub fn enabled(&self) -> bool {
        self.on.load(Ordering::Acquire)
    }

    /// The key this process uses when `audit_log.hmac_key` is missing: 32 bytes from the operating system, URL-safe
    /// base64, the same for the life of the process (so that the gateway can write it into the file and go on with
    /// the same digests). `None` only when the system's generator fails.
    pub fn own_key(&self) -> Option<&str> {
        self.own_key
            .get_or_init(|| match crate::secrets::random_token() {
                Ok(key) => Some(key),
                Err(error) => {
                    tracing::error!(%error, "no audit_log.hmac_key could be generated; args_hmac is left out");
                    None
                }
            })
            .as_deref()
    }

    /// The HMAC-SHA-256, in hex, of a call's arguments as sorted-key JSON, under the log's key; `None` when the log
    /// is off (nothing to compute) or has no key.
    pub fn args_hmac(&self, args: &Value) -> Option<String> {
        // The key is taken out so that a large argument is digested without holding the log's lock.
        let key = self.lock().open.as_ref()?.key.clone()?;
        Some(hex(hmac::sign(&key, canonical(args).as_bytes()).as_ref()))
    }

    /// Records an authentication failure from `source` (`None` over stdio), unless that address already had
    /// [`flood::RECORDS_PER_SECOND`] records in its window: then it is only counted, and the next record written for
    /// the address carries the count as `suppressed`.
    pub async fn record_auth_failure(&self, source: Option<IpAddr>, event: Event<'_>) {
        if !self.enabled() {
            return;
        }
        let admitted = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .admit(source, tokio::time::Instant::now());
        if let Some(suppressed) = admitted {
            self.record(Event { source_address: source, suppressed: Some(suppressed), ..event }).await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The hash of a record: SHA-256 of its sorted-key JSON without `hash`.
fn hash_of(record: &Value) -> String {
    let mut without = record.clone();
    if let Some(map) = without.as_object_mut() {
        map.remove("hash");
    }
    hex(&Sha256::digest(canonical(&without).as_bytes()))
}

/// Opens (or creates, mode 0600) the file and reads where its chain ends.
fn open(path: &Path) -> std::io::Result<Chain> {
    let (mut seq, mut prev) = (0, FIRST_PREV.to_string());
    if let Ok(existing) = File::open(path) {
        for line in BufReader::new(existing).lines() {
            let line = line?;
            if let Ok(record) = serde_json::from_str::<Map<String, Value>>(&line) {
                seq = record.get("seq").and_then(Value::as_u64).unwrap_or(seq);
                prev = record.get("hash").and_then(Value::as_str).map(str::to_string).unwrap_or(prev);
            }
        }
    }
    let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    // Kept as the JSON string the next record's `prev_hash` holds (escaped: the file may say anything).
    let prev = Value::String(prev).to_string();
    Ok(Chain::new(path.to_path_buf(), file, seq, prev))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_chain_holds_across_reopening_and_breaks_on_any_edit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::default();
        log.configure(Some(&path), None);
        for i in 0..3 {
            log.record_blocking(Event { event: "tool_call", tool_name: Some(&format!("t{i}")), ..Event::default() });
        }
        // A restart: the chain continues.
        let again = AuditLog::default();
        again.configure(Some(&path), None);
        again.record_blocking(Event { event: "config_reload", outcome: Some("ok"), ..Event::default() });
        assert_eq!(verify(&path).unwrap(), 4);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);

        let lines: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(str::to_string).collect();
        let broken_at = |lines: &[String]| match verify_text(dir.path(), lines) {
            Err(VerifyError::Broken(b)) => b.seq,
            other => panic!("{other:?}"),
        };
        let mut edited = lines.clone();
        edited[1] = edited[1].replace("\"t1\"", "\"t9\"");
        assert_eq!(broken_at(&edited), 2);
        let mut removed = lines.clone();
        removed.remove(2);
        assert_eq!(broken_at(&removed), 3);
        let mut inserted = lines.clone();
        inserted.insert(1, lines[0].clone());
        assert_eq!(broken_at(&inserted), 2);
    }

    #[test]
    fn args_are_keyed_digests_not_plain_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::default();
        let args = json!({"ssn": "123456789"});
        assert_eq!(log.args_hmac(&args), None, "nothing is computed while the log is off");
        log.configure(Some(&dir.path().join("a.jsonl")), Some("k".repeat(43).as_str()));
        let keyed = log.args_hmac(&args).unwrap();
        assert_eq!(keyed.len(), 64);
        assert_eq!(log.args_hmac(&json!({"ssn": "123456789"})).as_deref(), Some(keyed.as_str()));
        assert_ne!(keyed, hex(&Sha256::digest(canonical(&args).as_bytes())));
        let expected =
            hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, "k".repeat(43).as_bytes()), b"{\"ssn\":\"123456789\"}");
        assert_eq!(keyed, hex(expected.as_ref()));
        // Without a key in the configuration: this process's own, the same each time.
        log.configure(Some(&dir.path().join("a.jsonl")), None);
        let own = log.args_hmac(&args).unwrap();
        assert_ne!(own, keyed);
        assert_eq!(log.args_hmac(&args).unwrap(), own);
        assert_eq!(log.own_key().map(str::len), Some(43));
    }

    #[test]
    fn verify_refuses_duplicate_keys_an_empty_file_and_a_cut_beginning() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::default();
        log.configure(Some(&path), None);
        for _ in 0..3 {
            log.record_blocking(Event { event: "admin_write", outcome: Some("ok"), ..Event::default() });
        }
        let lines: Vec<String> = std::fs::read_to_string(&path).unwrap().lines().map(str::to_string).collect();
        let why = |lines: &[String]| match verify_text(dir.path(), lines) {
            Err(VerifyError::Broken(b)) => (b.seq, b.why),
            other => panic!("{other:?}"),
        };
        // The same key twice: a lenient reader takes the last, so the hash of what it read still matches.
        let mut doubled = lines.clone();
        doubled[1] = doubled[1].replacen("{", "{\"outcome\":\"refused\",", 1);
        let (seq, said) = why(&doubled);
        assert_eq!(seq, 2);
        assert!(said.contains("\"outcome\" twice"), "{said}");
        let (seq, said) = why(&lines[1..]);
        assert_eq!(seq, 1);
        assert!(said.contains("does not start at seq 1"), "{said}");
        assert!(matches!(verify_text(dir.path(), &[]), Err(VerifyError::Empty)));
    }

    #[test]
    fn a_last_line_without_its_newline_is_not_yet_written_while_appending() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::default();
        log.configure(Some(&path), None);
        for _ in 0..2 {
            log.record_blocking(Event { event: "admin_write", outcome: Some("ok"), ..Event::default() });
        }
        let whole = std::fs::read_to_string(&path).unwrap();
        let third = whole.lines().next().unwrap().to_string();
        // The beginning of a record the writer is still writing.
        std::fs::write(&path, format!("{whole}{}", &third[..20])).unwrap();
        assert_eq!(verify_appending(&path).unwrap(), 2);
        match verify(&path) {
            Err(VerifyError::Broken(b)) => assert_eq!(b.seq, 3, "{}", b.why),
            other => panic!("at rest, a torn last line breaks the chain: {other:?}"),
        }
        // A last record that is whole but for its newline is left for the next check too.
        std::fs::write(&path, whole.trim_end()).unwrap();
        assert_eq!(verify_appending(&path).unwrap(), 1);
        assert_eq!(verify(&path).unwrap(), 2);
    }

    fn verify_text(dir: &Path, lines: &[String]) -> Result<u64, VerifyError> {
        let path = dir.join("edited.jsonl");
        let text = if lines.is_empty() { String::new() } else { lines.join("\n") + "\n" };
        std::fs::write(&path, text).unwrap();
        verify(&path)
    }
}
