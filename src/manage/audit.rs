//! The audit log read back (`GET /api/v1/audit` and `GET /api/v1/audit/verify`): the records that match a search,
//! and the check of the file's hash chain.
//!
//! A search ([`Search::from_query`]) names at most one value per filter, each matched against the record's own
//! fields (`crate::audit` lists them): `since` and `until` against `timestamp` (inclusive; a record whose timestamp
//! cannot be read matches no time filter), `user` against `user_id` (an e-mail is looked up in the configuration
//! serving now: the record keeps the id only), `project` against `project_id` (a project name likewise), `server`
//! against `server_name`, `tool` against `tool_name` (the upstream's tool, prompt or resource URI) or the target's
//! `exposed_name` (`m__echo`), `event` against `event`, and `outcome`: `success` is a record with no `error_code`
//! whose `outcome` is not `error`, `blocked` or `refused` (a failed reload, a refused admin write have no code),
//! `error` every other record, and any other value an exact `error_code`. Parameters it does not know are ignored,
//! as elsewhere in the admin API.
//!
//! [`search`] reads the file from its end backwards ([`Backwards`], 64 KiB at a time) and stops once `limit` records
//! match or at the first record older than `since`, so memory is bounded by `limit` and the time by what it reads,
//! whatever the file's size; it answers the matches newest first, with how many matched, how many records it read and
//! whether that was the whole file. Like [`verify`], it leaves out a last line without its newline: the writer is
//! still writing that record.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use super::policy::recorded_at;
use super::{ManageError, ManageResult, point_in_time};
use crate::audit::VerifyError;
use crate::config::Snapshot;

/// How many records a search answers by default.
pub const DEFAULT_LIMIT: usize = 100;
/// How many it answers at most.
pub const MAX_LIMIT: usize = 1_000;

/// The parameters a search takes.
const PARAMETERS: [&str; 9] = ["since", "until", "user", "project", "server", "tool", "event", "outcome", "limit"];

/// The `outcome` values of a record that did not succeed though it has no `error_code`.
const FAILED_OUTCOMES: [&str; 3] = ["error", "blocked", "refused"];

/// What `outcome=` asks for.
#[derive(Debug, PartialEq)]
enum Outcome {
    Success,
    Error,
    Code(String),
}

/// A search of the audit log (see the module documentation).
#[derive(Debug)]
pub struct Search {
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
    /// The `user_id`s that match: the value given, and the id of the user it names in the configuration.
    users: Option<Vec<String>>,
    /// The `project_id`s that match, likewise.
    projects: Option<Vec<String>>,
    server: Option<String>,
    tool: Option<String>,
    event: Option<String>,
    outcome: Option<Outcome>,
    limit: usize,
}

/// Why the audit log cannot be read back: it is off.
pub fn off() -> ManageError {
    ManageError::Validation(
        "the audit log is off (audit_log.enabled), or could not be opened: there are no records to read".into(),
    )
}

impl Search {
    /// The search a query string asks for; `snapshot` resolves e-mails and project names, `now` the spans of
    /// `since` and `until`. A parameter given twice, empty, or that cannot be read is a validation error naming it.
    pub fn from_query(query: Vec<(String, String)>, snapshot: &Snapshot, now: DateTime<Utc>) -> ManageResult<Search> {
        let mut given: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in query {
            if !PARAMETERS.contains(&name.as_str()) {
                continue;
            }
            if value.is_empty() {
                return Err(ManageError::Validation(format!("{name}: must not be empty")));
            }
            if given.insert(name.clone(), value).is_some() {
                return Err(ManageError::Validation(format!("{name}: is given more than once")));
            }
        }
        let text = |name: &str| given.get(name).cloned();
        let time = |name: &str| text(name).map(|t| point_in_time(name, &t, now)).transpose();
        let since = time("since").map_err(ManageError::Validation)?;
        let until = time("until").map_err(ManageError::Validation)?;
        if let (Some(since), Some(until)) = (since, until)
            && since > until
        {
            return Err(ManageError::Validation("until: must not be before since".into()));
        }
        let limit = match text("limit") {
            None => DEFAULT_LIMIT,
            Some(limit) => limit.parse::<usize>().ok().filter(|n| (1..=MAX_LIMIT).contains(n)).ok_or_else(|| {
                ManageError::Validation(format!("limit: must be a whole number from 1 to {MAX_LIMIT}, found {limit:?}"))
            })?,
        };
        // The value as given (an id, or an e-mail or name that is no longer in the configuration), and what it names.
        let with_id = |value: String, id: Option<&str>| match id {
            Some(id) if id != value => vec![id.to_string(), value],
            _ => vec![value],
        };
        let users = text("user").map(|u| with_id(u.clone(), snapshot.resolve_user(&u)));
        let projects = text("project").map(|p| with_id(p.clone(), snapshot.resolve_project(&p)));
        let outcome = text("outcome").map(|o| match o.as_str() {
            "success" => Outcome::Success,
            "error" => Outcome::Error,
            _ => Outcome::Code(o),
        });
        Ok(Search {
            since,
            until,
            users,
            projects,
            server: text("server"),
            tool: text("tool"),
            event: text("event"),
            outcome,
            limit,
        })
    }

    /// Whether `record` is older than `since` (a record whose time cannot be read is not).
    fn before_since(&self, record: &Map<String, Value>) -> bool {
        let Some(since) = self.since else { return false };
        let at = record.get("timestamp").and_then(Value::as_str).and_then(recorded_at);
        at.is_some_and(|at| at.with_timezone(&Utc) < since)
    }

    /// Whether `record` matches every filter.
    fn matches(&self, record: &Map<String, Value>) -> bool {
        let text = |field: &str| record.get(field).and_then(Value::as_str);
        let is = |wanted: &Option<String>, field: &str| wanted.as_deref().is_none_or(|w| text(field) == Some(w));
        let one_of = |ids: &Option<Vec<String>>, field: &str| {
            ids.as_ref().is_none_or(|ids| text(field).is_some_and(|v| ids.iter().any(|id| id == v)))
        };
        if self.since.is_some() || self.until.is_some() {
            let Some(at) = text("timestamp").and_then(recorded_at).map(|t| t.with_timezone(&Utc)) else {
                return false;
            };
            if self.since.is_some_and(|since| at < since) || self.until.is_some_and(|until| at > until) {
                return false;
            }
        }
        let exposed = record.get("target").and_then(|t| t.get("exposed_name")).and_then(Value::as_str);
        let tool = self.tool.as_deref().is_none_or(|t| text("tool_name") == Some(t) || exposed == Some(t));
        let code = text("error_code");
        let succeeded = code.is_none() && !text("outcome").is_some_and(|o| FAILED_OUTCOMES.contains(&o));
        let outcome = match &self.outcome {
            None => true,
            Some(Outcome::Success) => succeeded,
            Some(Outcome::Error) => !succeeded,
            Some(Outcome::Code(wanted)) => code == Some(wanted.as_str()),
        };
        tool && outcome
            && is(&self.server, "server_name")
            && is(&self.event, "event")
            && one_of(&self.users, "user_id")
            && one_of(&self.projects, "project_id")
    }
}

/// The records of the audit log at `path` that `search` matches, read from the end of the file backwards: `{records
/// (newest first, at most limit), matched, scanned, complete, path}`. The reading stops once `limit` records match,
/// or at the first record older than `since` (records are written in time order), so a search for the latest calls
/// costs the same however long the log is: `matched` and `scanned` count what was read, and `complete` says whether
/// that was the whole file (when it is, `matched` is every record that matches).
pub fn search(path: &Path, search: &Search) -> ManageResult {
    let file = std::fs::File::open(path).map_err(|e| unreadable(path, &e))?;
    let mut lines = Backwards::new(file).map_err(|e| unreadable(path, &e))?;
    let mut records: Vec<Value> = Vec::with_capacity(search.limit.min(MAX_LIMIT));
    let (mut matched, mut scanned, mut complete) = (0u64, 0u64, true);
    while let Some(line) = lines.next_line().map_err(|e| unreadable(path, &e))? {
        let Ok(record) = serde_json::from_slice::<Map<String, Value>>(&line) else { continue };
        scanned += 1;
        if search.before_since(&record) {
            // Every record before this one is older still.
            break;
        }
        if !search.matches(&record) {
            continue;
        }
        matched += 1;
        records.push(Value::Object(record));
        if records.len() == search.limit {
            complete = lines.at_start();
            break;
        }
    }
    Ok(json!({"records": records, "matched": matched, "scanned": scanned, "complete": complete,
              "path": path.display().to_string()}))
}

/// The size of the pieces [`Backwards`] reads.
const PIECE: usize = 64 * 1024;

/// The lines of a file from its end to its start, read in pieces of [`PIECE`] bytes. A last line without its newline
/// is the record being written: it is left out (the next search sees it whole).
struct Backwards {
    file: std::fs::File,
    /// Where the part not read yet ends.
    unread: u64,
    /// What was read and not yet given out, the start of a line (its beginning may still be unread).
    held: Vec<u8>,
}

impl Backwards {
    fn new(file: std::fs::File) -> std::io::Result<Backwards> {
        let unread = file.metadata()?.len();
        let mut lines = Backwards { file, unread, held: Vec::new() };
        // Drop what follows the last newline: a record not yet written whole (or nothing).
        loop {
            if let Some(at) = lines.held.iter().rposition(|b| *b == b'\n') {
                lines.held.truncate(at + 1);
                break;
            }
            if !lines.read_piece()? {
                lines.held.clear();
                break;
            }
        }
        Ok(lines)
    }

    /// Reads the piece before what is held; false at the start of the file.
    fn read_piece(&mut self) -> std::io::Result<bool> {
        use std::io::{Read, Seek, SeekFrom};
        if self.unread == 0 {
            return Ok(false);
        }
        let size = self.unread.min(PIECE as u64);
        self.unread -= size;
        self.file.seek(SeekFrom::Start(self.unread))?;
        let mut piece = vec![0u8; usize::try_from(size).unwrap_or(PIECE)];
        self.file.read_exact(&mut piece)?;
        piece.extend_from_slice(&self.held);
        self.held = piece;
        Ok(true)
    }

    /// Whether every line has been given out.
    fn at_start(&self) -> bool {
        self.unread == 0 && self.held.is_empty()
    }

    /// The line before the last one given out, without its newline.
    fn next_line(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        if self.held.is_empty() && !self.read_piece()? {
            return Ok(None);
        }
        // `held` ends with the newline of the line to give out: the line is what follows the newline before it.
        self.held.pop();
        loop {
            if let Some(at) = self.held.iter().rposition(|b| *b == b'\n') {
                return Ok(Some(self.held.split_off(at + 1)));
            }
            if !self.read_piece()? {
                return Ok(Some(std::mem::take(&mut self.held)));
            }
        }
    }
}

/// The check of the hash chain of the audit log at `path`, which the gateway may be appending to
/// ([`crate::audit::verify_appending`]): `{valid: true, records, path}`, or `{valid: false, broken_seq, why, path}`.
/// A file that cannot be read is an error, not an answer.
pub fn verify(path: &Path) -> ManageResult {
    let shown = path.display().to_string();
    match crate::audit::verify_appending(path) {
        Ok(records) => Ok(json!({"valid": true, "records": records, "path": shown})),
        Err(VerifyError::Broken(broken)) => {
            Ok(json!({"valid": false, "broken_seq": broken.seq, "why": broken.why, "path": shown}))
        }
        Err(VerifyError::Empty) => Ok(json!({
            "valid": false,
            "broken_seq": 1,
            "why": "the file holds no audit record (an empty log proves nothing: it may have been cut)",
            "path": shown,
        })),
        Err(VerifyError::Io(why)) => Err(ManageError::Internal(format!("the audit log {shown} cannot be read: {why}"))),
    }
}

fn unreadable(path: &Path, error: &std::io::Error) -> ManageError {
    ManageError::Internal(format!("the audit log {} cannot be read: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search() -> Search {
        Search {
            since: None,
            until: None,
            users: None,
            projects: None,
            server: None,
            tool: None,
            event: None,
            outcome: None,
            limit: DEFAULT_LIMIT,
        }
    }

    fn record(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    /// Every line of `text` given back by [`Backwards`], last first.
    fn backwards(text: &str) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        std::fs::write(&path, text).unwrap();
        let mut lines = Backwards::new(std::fs::File::open(&path).unwrap()).unwrap();
        let mut found = Vec::new();
        while let Some(line) = lines.next_line().unwrap() {
            found.push(String::from_utf8(line).unwrap());
        }
        assert!(lines.at_start());
        found
    }

    #[test]
    fn lines_are_read_from_the_end_and_a_torn_last_line_is_left_out() {
        assert_eq!(backwards("a\nbb\nccc\n"), ["ccc", "bb", "a"]);
        assert_eq!(backwards("a\nbb\ncc"), ["bb", "a"], "the line being written");
        assert_eq!(backwards("torn"), Vec::<String>::new());
        assert_eq!(backwards(""), Vec::<String>::new());
        assert_eq!(backwards("\nx\n"), ["x", ""]);
        // Lines longer than a piece, and pieces that end inside a line.
        let long: Vec<String> = (0..5).map(|i| format!("{i}").repeat(PIECE / 2 + 7 * i)).collect();
        let text = long.iter().map(|l| format!("{l}\n")).collect::<String>();
        let mut expected = long.clone();
        expected.reverse();
        assert_eq!(backwards(&text), expected);
    }

    #[test]
    fn outcomes_split_records_in_two_and_name_codes() {
        let ok = record(json!({"event": "tool_call", "outcome": "success", "error_code": null}));
        let blocked = record(json!({"event": "tool_call", "outcome": "blocked", "error_code": "GUARDRAIL_VIOLATION"}));
        let refused = record(json!({"event": "admin_write", "outcome": "refused", "error_code": null}));
        let wanting = |outcome| Search { outcome: Some(outcome), ..search() };
        let success = wanting(Outcome::Success);
        assert!(success.matches(&ok) && !success.matches(&blocked) && !success.matches(&refused));
        let error = wanting(Outcome::Error);
        assert!(!error.matches(&ok) && error.matches(&blocked) && error.matches(&refused));
        let code = wanting(Outcome::Code("GUARDRAIL_VIOLATION".into()));
        assert!(!code.matches(&ok) && code.matches(&blocked) && !code.matches(&refused));
    }

    #[test]
    fn a_tool_is_its_upstream_name_or_its_exposed_name_and_times_are_inclusive() {
        let call = record(json!({"tool_name": "echo", "target": {"exposed_name": "m__echo"},
                                 "timestamp": "2026-12-01T10:00:00.000000", "user_id": "u1"}));
        for tool in ["echo", "m__echo"] {
            assert!(Search { tool: Some(tool.into()), ..search() }.matches(&call), "{tool}");
        }
        assert!(!Search { tool: Some("m__add".into()), ..search() }.matches(&call));
        let at = |text: &str| DateTime::parse_from_rfc3339(text).map(|t| t.with_timezone(&Utc)).ok();
        let since = Search { since: at("2026-12-01T10:00:00Z"), ..search() };
        assert!(since.matches(&call));
        let until = Search { until: at("2026-12-01T09:59:59Z"), ..search() };
        assert!(!until.matches(&call));
        let untimed = record(json!({"tool_name": "echo"}));
        assert!(!since.matches(&untimed) && search().matches(&untimed));
        let users = Search { users: Some(vec!["alice@example.com".into(), "u1".into()]), ..search() };
        assert!(users.matches(&call) && !users.matches(&untimed));
    }
}
