//! What the management commands print, and how they fail.
//!
//! A command ends in an [`Outcome`] (the success message and the `data` the admin REST API answers) or a [`CliError`].
//! With `--json` the `data` is printed as JSON, exactly as the REST API returns it (routes without data print
//! `{"message": ...}`); otherwise lists become aligned tables and records become `field: value` lines. An error is one
//! line on stderr, `mcpgw: error: ...`, and an exit code from [`exit`] that scripts can rely on.

use std::fmt::Write as _;
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::manage::ManageError;

/// Exit codes of every `mcpgw` command. They are part of the command line contract and never change meaning.
pub mod exit {
    /// The command did what was asked.
    pub const OK: u8 = 0;
    /// Anything else went wrong: an unreadable or invalid config file, an I/O error, an unexpected answer.
    pub const FAILURE: u8 = 1;
    /// The command line is wrong: an unknown flag, a missing argument, a missing confirmation.
    pub const USAGE: u8 = 2;
    /// The request was refused as invalid (REST 400 `VALIDATION_ERROR`): a bad e-mail, a non-member key, a bad entry.
    pub const VALIDATION: u8 = 3;
    /// What the command names does not exist (REST 404).
    pub const NOT_FOUND: u8 = 4;
    /// The change clashes with what exists (REST 409): a taken name, a config still in use, a read-only file.
    pub const CONFLICT: u8 = 5;
    /// The admin API cannot be reached (connection refused, timeout, not an mcpgw admin API).
    pub const UNREACHABLE: u8 = 6;
    /// The admin API refused the admin key, or `GW_ADMIN_APIKEY` is not set.
    pub const AUTH: u8 = 7;
}

/// A successful management command: the message and `data` of the REST envelope.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub message: String,
    pub data: Option<Value>,
}

impl Outcome {
    pub fn new(message: impl Into<String>, data: Value) -> Outcome {
        Outcome { message: message.into(), data: Some(data) }
    }

    pub fn message(message: impl Into<String>) -> Outcome {
        Outcome { message: message.into(), data: None }
    }
}

/// Why a management command failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A management operation refused (file mode).
    #[error("{0}")]
    Manage(#[from] ManageError),
    /// The admin API answered an error (HTTP mode).
    #[error("{detail} (HTTP {status} {code})")]
    Api { status: u16, code: String, detail: String },
    /// The admin API cannot be reached.
    #[error("{0}")]
    Unreachable(String),
    /// No admin key, or the admin API refused it.
    #[error("{0}")]
    Auth(String),
    /// The command line is incomplete or contradictory.
    #[error("{0}")]
    Usage(String),
    /// A problem found on our side (unreadable file, invalid config, bad JSON input).
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    /// The exit code for this error (see [`exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Manage(e) => match e {
                ManageError::Validation(_) | ManageError::Invalid(_) | ManageError::ResetNotConfirmed => {
                    exit::VALIDATION
                }
                ManageError::NotFound(_) => exit::NOT_FOUND,
                ManageError::Conflict(_) | ManageError::ReadOnly(_) => exit::CONFLICT,
                ManageError::Internal(_) | ManageError::StoreUnavailable(_) => exit::FAILURE,
            },
            CliError::Api { status, .. } => match status {
                400 | 413 | 415 | 422 => exit::VALIDATION,
                401 | 403 => exit::AUTH,
                404 => exit::NOT_FOUND,
                409 => exit::CONFLICT,
                _ => exit::FAILURE,
            },
            CliError::Unreachable(_) => exit::UNREACHABLE,
            CliError::Auth(_) => exit::AUTH,
            CliError::Usage(_) => exit::USAGE,
            CliError::Failed(_) => exit::FAILURE,
        }
    }

    /// Prints the error as one line on stderr and returns its exit code.
    pub fn report(&self) -> ExitCode {
        let text = self.to_string().replace('\n', "; ");
        eprintln!("mcpgw: error: {text}");
        ExitCode::from(self.exit_code())
    }
}

/// How a command's `data` is shown as text.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// An array shown as a table with these columns.
    Table(&'static [Column]),
    /// One object shown as `field: value` lines.
    Record,
}

/// One column of a table: its header and where its cell comes from.
#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub header: &'static str,
    pub cell: fn(&Value) -> String,
}

/// Writes `text` to stdout. A closed pipe (`mcpgw key list | head -1`) is not an error worth a panic: the reader
/// has what it wanted, so write errors are ignored.
pub fn emit(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// Prints an outcome on stdout, as JSON or as text.
pub fn print(outcome: &Outcome, shape: Shape, as_json: bool) {
    if as_json {
        let value = outcome.data.clone().unwrap_or_else(|| json!({"message": outcome.message}));
        emit(&format!("{}\n", serde_json::to_string_pretty(&value).unwrap_or_default()));
        return;
    }
    emit(&render(outcome, shape));
}

/// The text form of an outcome.
pub fn render(outcome: &Outcome, shape: Shape) -> String {
    let Some(data) = &outcome.data else { return format!("{}\n", outcome.message) };
    match (shape, data) {
        (Shape::Table(columns), Value::Array(rows)) => table(columns, rows),
        (_, Value::Array(rows)) => rows.iter().map(record).collect::<Vec<_>>().join("\n"),
        (_, value) => format!("{}\n{}", outcome.message, record(value)),
    }
}

/// An aligned table: upper-case headers, two spaces between columns, no trailing blanks.
pub fn table(columns: &[Column], rows: &[Value]) -> String {
    let cells: Vec<Vec<String>> = rows.iter().map(|row| columns.iter().map(|c| (c.cell)(row)).collect()).collect();
    let mut widths: Vec<usize> = columns.iter().map(|c| c.header.chars().count()).collect();
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let headers: Vec<String> = columns.iter().map(|c| c.header.to_string()).collect();
    for row in std::iter::once(&headers).chain(&cells) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `field: value` lines with the values aligned.
pub fn record(value: &Value) -> String {
    let Value::Object(map) = value else { return format!("{}\n", scalar(value)) };
    let width = map.keys().map(|k| k.chars().count()).max().unwrap_or(0) + 1;
    let mut out = String::new();
    for (field, value) in map {
        let _ = writeln!(out, "{:<width$} {}", format!("{field}:"), summary(value));
    }
    out
}

/// A value in one cell: scalars as text, lists of records by their names, other structures as compact JSON.
pub fn summary(value: &Value) -> String {
    match value {
        Value::Array(items) if items.iter().all(|i| name_of(i).is_some()) => {
            let names: Vec<String> = items.iter().filter_map(name_of).collect();
            if names.is_empty() { "-".to_string() } else { names.join(", ") }
        }
        Value::Array(_) | Value::Object(_) => value.to_string(),
        other => scalar(other),
    }
}

fn name_of(item: &Value) -> Option<String> {
    if let Value::String(s) = item {
        return Some(s.clone());
    }
    ["server_name", "project_name", "email", "key_id", "mcp_config_name"]
        .iter()
        .find_map(|field| item.get(*field).and_then(Value::as_str).map(str::to_string))
}

fn scalar(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A cell reading `field` of a row.
pub fn field(row: &Value, name: &str) -> String {
    row.get(name).map(summary).unwrap_or_else(|| "-".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLUMNS: &[Column] =
        &[Column { header: "ID", cell: |r| field(r, "id") }, Column { header: "NAMES", cell: |r| field(r, "users") }];

    #[test]
    fn tables_align_and_summarise_nested_records() {
        let rows = vec![
            json!({"id": "a", "users": [{"email": "x@example.com"}, {"email": "y@example.com"}]}),
            json!({"id": "long-id", "users": []}),
        ];
        let text = table(COLUMNS, &rows);
        assert_eq!(text, "ID       NAMES\na        x@example.com, y@example.com\nlong-id  -\n");
    }

    #[test]
    fn records_and_exit_codes() {
        let text = record(&json!({"user_id": "u", "projects": [{"project_name": "p"}], "n": null}));
        assert_eq!(text, "user_id:  u\nprojects: p\nn:        -\n");
        assert_eq!(CliError::Manage(ManageError::NotFound("x".into())).exit_code(), exit::NOT_FOUND);
        let api = CliError::Api { status: 409, code: "CONFLICT".into(), detail: "taken".into() };
        assert_eq!(api.exit_code(), exit::CONFLICT);
        assert_eq!(api.to_string(), "taken (HTTP 409 CONFLICT)");
    }
}
