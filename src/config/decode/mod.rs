//! Reading JSON values into the typed model while collecting every problem, not only the first.
//!
//! `fields.rs` holds [`Fields`], which walks one JSON object and records each type problem with its full path;
//! `model.rs` holds one decoder per record of the model ([`super::model`]), built on it. [`super::ConfigFile::parse`]
//! is the entry point: bytes -> JSON -> `decode_file` -> the model and the list of [`Problems`].

mod credentials;
mod fields;
mod model;
mod server_credentials;

pub use fields::{Fields, Problems, type_name};
pub(super) use model::decode_file;
pub use model::decode_server_at;
