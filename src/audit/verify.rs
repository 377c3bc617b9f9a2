//! `mcpgw audit verify PATH`: reads a whole audit file and checks, record by record, what the writer promised: each
//! record is one JSON object with no key twice (read with the strict parser, so that a verifier and any other reader
//! see the same record), `seq` counts up from 1, `prev_hash` links to the record before (64 zeros for the first) and
//! `hash` is the SHA-256 of the record without it. A file with no record is refused too: it proves nothing (it may be
//! a log cut to nothing), and a chain that starts at a `seq` other than 1 lost its beginning.
//!
//! [`verify_appending`] checks a log the gateway may be appending to (`GET /api/v1/audit/verify`). One writer at a time
//! writes a batch of whole records, each with its newline, in one `write_all` on a file opened for appending, so a
//! reader sees whole lines followed, at most, by the beginning of the records being written: a last line without its
//! newline is taken as not yet written, and the check stops before it (the next check sees it whole). `mcpgw audit
//! verify` reads a file at rest and checks every line, the last one too.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::Value;

use super::{FIRST_PREV, hash_of};
use crate::json_strict::{self, StrictError};

/// Why a file's chain does not hold.
#[derive(Debug, PartialEq, Eq)]
pub struct Broken {
    /// The `seq` of the first record that breaks the chain (or the one it should have had).
    pub seq: u64,
    pub why: String,
}

/// Why [`verify`] failed.
#[derive(Debug)]
pub enum VerifyError {
    Io(String),
    /// The file holds no record at all.
    Empty,
    Broken(Broken),
}

/// Checks a whole audit file: each record's hash, its link to the one before, and `seq` counting up from 1. Returns
/// the number of records.
pub fn verify(path: &Path) -> Result<u64, VerifyError> {
    check(path, LastLine::Record)
}

/// [`verify`] of a log that may be being appended to: a last line without its newline is a record not yet written,
/// left out (see the module documentation). Returns the number of records checked.
pub fn verify_appending(path: &Path) -> Result<u64, VerifyError> {
    check(path, LastLine::NotYetWritten)
}

/// What a last line without its newline is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LastLine {
    Record,
    NotYetWritten,
}

fn check(path: &Path, unterminated: LastLine) -> Result<u64, VerifyError> {
    let file = File::open(path).map_err(|e| VerifyError::Io(format!("{}: {e}", path.display())))?;
    let mut reader = BufReader::new(file);
    let mut prev = FIRST_PREV.to_string();
    let mut count = 0u64;
    let mut line = Vec::new();
    for number in 1u64.. {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(|e| VerifyError::Io(e.to_string()))? == 0 {
            break;
        }
        match line.strip_suffix(b"\n") {
            Some(whole) => line.truncate(whole.len()),
            None if unterminated == LastLine::NotYetWritten => break,
            None => {}
        }
        let expected = count + 1;
        let broken = |why: &str| VerifyError::Broken(Broken { seq: expected, why: why.to_string() });
        let record = json_strict::parse(&line).map_err(|error| match error {
            StrictError::DuplicateKey(key) => broken(&format!(
                "line {number} has the key {key:?} twice (readers may disagree on what the record says)"
            )),
            StrictError::Syntax(_) => broken(&format!("line {number} is not JSON")),
        })?;
        if !record.is_object() {
            return Err(broken(&format!("line {number} is not a JSON object")));
        }
        let seq = record.get("seq").and_then(Value::as_u64);
        if count == 0 && seq != Some(1) {
            let found = seq.map_or("no seq".to_string(), |s| format!("seq {s}"));
            return Err(broken(&format!(
                "the chain does not start at seq 1 (the first record has {found}: its beginning was cut)"
            )));
        }
        if seq != Some(expected) {
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
    if count == 0 {
        return Err(VerifyError::Empty);
    }
    Ok(count)
}
