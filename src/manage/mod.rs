//! Management operations: what the admin REST API (and, later, the command line) can do to the configuration.
//!
//! Each operation is a plain function over the model. Reads take the current [`Snapshot`]; writes take a mutable copy
//! of the file plus the snapshot it came from (to resolve ids and names) and run inside [`ConfigStore::update`], which
//! validates the result and writes it atomically. Keeping the operations free of HTTP means every front end shares one
//! code path for validation and writing, and the HTTP layer only maps [`ManageError`] to statuses.
//!
//! [`ConfigStore::update`]: crate::config::ConfigStore::update

pub mod api_keys;
pub mod audit;
pub mod backup;
pub mod backup_files;
pub mod client_entry;
pub mod configs;
pub mod credentials;
pub mod offer_pins;
pub mod policy;
pub mod projects;
pub mod system;
pub mod users;
pub mod views;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::{Problems, WriteError};

/// Why a management operation did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    /// The request is malformed or names something that does not exist in its body.
    #[error("{0}")]
    Validation(String),
    /// The change would make the configuration invalid.
    #[error("{}", .0.join("; "))]
    Invalid(Problems),
    /// The resource in the path does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The change clashes with what exists (a taken name, a config still in use).
    #[error("{0}")]
    Conflict(String),
    /// The config file or its directory cannot be written.
    #[error("{0}")]
    ReadOnly(String),
    /// Reset was asked for without `confirm: true`.
    #[error("reset requires confirm=true")]
    ResetNotConfirmed,
    /// The configuration store (Redis) cannot be reached; nothing was changed.
    #[error("{0}")]
    StoreUnavailable(String),
    /// Something failed that the caller cannot fix.
    #[error("{0}")]
    Internal(String),
}

impl From<WriteError> for ManageError {
    fn from(err: WriteError) -> Self {
        match err {
            WriteError::ReadOnly(ro) => ManageError::ReadOnly(ro.0),
            WriteError::Invalid(problems) => ManageError::Invalid(problems),
            e @ (WriteError::DiskInvalid(_) | WriteError::StoreInvalid(_)) => ManageError::Conflict(e.to_string()),
            WriteError::Io(e) => ManageError::Internal(e),
            WriteError::StoreUnavailable(e) => ManageError::StoreUnavailable(e),
        }
    }
}

impl From<crate::secrets::RandomError> for ManageError {
    fn from(err: crate::secrets::RandomError) -> Self {
        ManageError::Internal(err.to_string())
    }
}

/// Result of a management operation.
pub type ManageResult<T = Value> = Result<T, ManageError>;

/// Decodes a request body into `T`, turning serde's message into a validation error.
pub fn decode_body<T: DeserializeOwned>(body: Value) -> ManageResult<T> {
    if !body.is_object() {
        return Err(ManageError::Validation("the request body must be a JSON object".to_string()));
    }
    serde_json::from_value(body).map_err(|e| ManageError::Validation(format!("invalid request body: {e}")))
}

/// A required, trimmed, non-empty name from a request.
pub fn required_name(value: &str, field: &str) -> ManageResult<String> {
    let name = value.trim();
    if name.is_empty() {
        return Err(ManageError::Validation(format!("{field} must not be empty")));
    }
    if name.len() > 256 {
        return Err(ManageError::Validation(format!("{field} must be at most 256 characters")));
    }
    Ok(name.to_string())
}

/// A point in time a query names (`since`, `until`): an RFC 3339 time, or a span back from `now` (a whole number and
/// `m`, `h` or `d`: `90m`, `24h`, `7d`). The error names `field` and says what it found.
pub fn point_in_time(
    field: &str,
    text: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&chrono::Utc));
    }
    let unit = text.chars().last().unwrap_or(' ');
    let count: Option<i64> = text[..text.len() - unit.len_utf8().min(text.len())].parse().ok().filter(|n| *n >= 0);
    let span = match (count, unit) {
        (Some(n), 'm') => chrono::Duration::try_minutes(n),
        (Some(n), 'h') => chrono::Duration::try_hours(n),
        (Some(n), 'd') => chrono::Duration::try_days(n),
        _ => None,
    };
    span.and_then(|span| now.checked_sub_signed(span))
        .ok_or_else(|| format!("{field}: must be an RFC 3339 time or a span such as 90m, 24h or 7d, found {text:?}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_point_in_time_is_a_time_or_a_span() {
        let now = chrono::Utc::now();
        assert_eq!(super::point_in_time("since", "2h", now).unwrap(), now - chrono::Duration::hours(2));
        assert_eq!(super::point_in_time("since", "2026-12-01T10:00:00Z", now).unwrap().timestamp(), 1_796_119_200);
        assert!(super::point_in_time("since", "2w", now).is_err());
        assert!(super::point_in_time("until", "", now).unwrap_err().starts_with("until: "));
        assert!(super::point_in_time("since", "é", now).is_err());
    }
}
