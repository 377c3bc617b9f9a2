//! The audit log (contract section 11): one JSON line per event worth answering for later (every tool call, every
//! authentication failure, every admin write, every pin change and quarantine, every configuration reload), chained by
//! hashes so that a changed, removed or inserted record shows.
//!
//! Each record has `seq` (from 1), `timestamp`, `event`, `project_id`, `user_id`, `key_id`, `server_name`,
//! `tool_name`, `args_sha256`, `outcome`, `error_code`, `config_revision`, `prev_hash` (the previous record's `hash`;
//! 64 zeros for the first) and `hash`: the SHA-256 of the record without `hash` as JSON with sorted keys. It never holds
//! a key, a token, an argument value or a secret: a call's arguments are only hashed.
//!
//! The file is created with mode 0600 and appended to; each record is written and flushed before the answer it records
//! is sent (a write that fails is logged, and the answer still goes). After a restart the chain continues from the
//! file's last record. [`verify`] (`mcpgw audit verify PATH`) checks a file.
//!
//! What the chain proves: that the records were not changed, removed or inserted after they were written, *unless*
//! the file was rewritten from the changed record to its end, hashes included (anyone who can write the file can do
//! that). Ship the log off the machine (to a write-once store, or as OTLP logs) to close that gap; SECURITY.md says so.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::json_strict::canonical;
use crate::secrets::hex;

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
    /// The SHA-256 of the call's arguments (as sorted-key JSON), never the arguments.
    pub args_sha256: Option<String>,
    pub outcome: Option<&'a str>,
    pub error_code: Option<&'a str>,
    /// The SHA-256 of the configuration file the event happened under.
    pub config_revision: Option<String>,
}

/// The SHA-256, in hex, of `value` as sorted-key JSON (a call's arguments).
pub fn sha256_of(value: &Value) -> String {
    hex(&Sha256::digest(canonical(value).as_bytes()))
}

/// The hex form of a configuration digest.
pub fn revision(digest: &[u8; 32]) -> String {
    hex(digest)
}

struct Writer {
    path: PathBuf,
    file: File,
    seq: u64,
    prev: String,
}

/// The audit log of one gateway; off until [`AuditLog::configure`] names a file.
#[derive(Default)]
pub struct AuditLog {
    writer: Mutex<Option<Writer>>,
}

impl AuditLog {
    /// Follows the configuration: `path` on (the file opened, its chain continued), `None` off. The same path keeps
    /// the open file.
    pub fn configure(&self, path: Option<&Path>) {
        let mut writer = self.lock();
        match (path, writer.as_ref()) {
            (Some(path), Some(open)) if open.path == path => {}
            (Some(path), _) => match open(path) {
                Ok(opened) => {
                    tracing::info!(path = %path.display(), seq = opened.seq, "audit log open");
                    *writer = Some(opened);
                }
                Err(error) => {
                    tracing::error!(path = %path.display(), %error, "the audit log cannot be opened; no events are recorded");
                    *writer = None;
                }
            },
            (None, _) => *writer = None,
        }
    }

    /// Whether events are being recorded.
    pub fn enabled(&self) -> bool {
        self.lock().is_some()
    }

    /// Writes one record (and flushes it) before returning.
    pub fn record(&self, event: Event<'_>) {
        let mut guard = self.lock();
        let Some(writer) = guard.as_mut() else { return };
        let seq = writer.seq + 1;
        let mut record = json!({
            "seq": seq,
            "timestamp": crate::ids::timestamp(),
            "event": event.event,
            "project_id": event.project_id,
            "user_id": event.user_id,
            "key_id": event.key_id,
            "server_name": event.server_name,
            "tool_name": event.tool_name,
            "args_sha256": event.args_sha256,
            "outcome": event.outcome,
            "error_code": event.error_code,
            "config_revision": event.config_revision,
            "prev_hash": writer.prev,
        });
        let hash = hash_of(&record);
        record["hash"] = Value::String(hash.clone());
        let mut line = record.to_string();
        line.push('\n');
        match writer.file.write_all(line.as_bytes()).and_then(|()| writer.file.flush()) {
            Ok(()) => {
                writer.seq = seq;
                writer.prev = hash;
            }
            Err(error) => {
                tracing::error!(path = %writer.path.display(), %error, "an audit record could not be written")
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Writer>> {
        self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
fn open(path: &Path) -> std::io::Result<Writer> {
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
    Ok(Writer { path: path.to_path_buf(), file, seq, prev })
}

/// Why a file's chain does not hold.
#[derive(Debug, PartialEq, Eq)]
pub struct Broken {
    /// The `seq` of the first record that breaks the chain (or the line number, when it has none).
    pub seq: u64,
    pub why: String,
}

/// Checks a whole audit file: each record's hash, its link to the one before, and `seq` counting up from 1. Returns
/// the number of records.
pub fn verify(path: &Path) -> Result<u64, VerifyError> {
    let file = File::open(path).map_err(|e| VerifyError::Io(format!("{}: {e}", path.display())))?;
    let mut prev = FIRST_PREV.to_string();
    let mut count = 0u64;
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| VerifyError::Io(e.to_string()))?;
        let expected = count + 1;
        let broken = |why: &str| VerifyError::Broken(Broken { seq: expected, why: why.to_string() });
        let record: Value =
            serde_json::from_str(&line).map_err(|_| broken(&format!("line {} is not JSON", index + 1)))?;
        if record.get("seq").and_then(Value::as_u64) != Some(expected) {
            return Err(broken("the sequence skips or repeats here (a record was removed or inserted)"));
        }
        if record.get("prev_hash").and_then(Value::as_str) != Some(prev.as_str()) {
            return Err(broken("it does not link to the record before it (a record was removed, inserted or changed)"));
        }
        let hash = record.get("hash").and_then(Value::as_str).unwrap_or_default().to_string();
        if hash_of(&record) != hash {
            return Err(broken("its content does not match its hash (the record was changed)"));
        }
        prev = hash;
        count = expected;
    }
    Ok(count)
}

/// Why [`verify`] failed.
#[derive(Debug)]
pub enum VerifyError {
    Io(String),
    Broken(Broken),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_holds_across_reopening_and_breaks_on_any_edit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::default();
        log.configure(Some(&path));
        for i in 0..3 {
            log.record(Event { event: "tool_call", tool_name: Some(&format!("t{i}")), ..Event::default() });
        }
        // A restart: the chain continues.
        let again = AuditLog::default();
        again.configure(Some(&path));
        again.record(Event { event: "config_reload", outcome: Some("ok"), ..Event::default() });
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

    fn verify_text(dir: &Path, lines: &[String]) -> Result<u64, VerifyError> {
        let path = dir.join("edited.jsonl");
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        verify(&path)
    }
}
