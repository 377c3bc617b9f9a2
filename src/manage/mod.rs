//! Management operations: what the admin REST API (and, later, the command line) can do to the configuration.
//!
//! Each operation is a plain function over the model. Reads take the current [`Snapshot`]; writes take a mutable copy
//! of the file plus the snapshot it came from (to resolve ids and names) and run inside [`ConfigStore::update`], which
//! validates the result and writes it atomically. Keeping the operations free of HTTP means every front end shares one
//! code path for validation and writing, and the HTTP layer only maps [`ManageError`] to statuses.
//!
//! [`ConfigStore::update`]: crate::config::ConfigStore::update

pub mod api_keys;
pub mod backup;
pub mod backup_files;
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
