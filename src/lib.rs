//! mcpgw: a security gateway for the Model Context Protocol.
//!
//! The crate is organised by concept. `config` owns the one JSON file that holds all state: its typed model,
//! validation into an immutable [`config::Snapshot`], the [`config::ConfigStore`] that swaps snapshots and writes the
//! file, and the watcher that reloads it. `manage` holds the management operations (configs, projects, users, API keys,
//! backup, restore, reset) as plain functions over the model, so every front end (the admin REST API in `admin`, the
//! command line later) shares one code path. `app` wires the listeners together and `cli` parses the command line. `upstream`
//! pools the upstream MCP server processes that tool calls are forwarded to.

#![forbid(unsafe_code)]

pub mod admin;
pub mod app;
pub mod audit;
pub mod auth;
pub mod body_limit;
pub mod cache;
pub mod cli;
pub mod config;
pub mod console;
pub mod credentials;
pub mod error;
pub mod gateway;
pub mod guardrails;
pub mod held_body;
pub mod ids;
pub mod json_strict;
pub mod json_text;
pub mod listener;
pub mod manage;
pub mod mcp_headers;
pub mod meter;
pub mod outbound;
pub mod policy;
pub mod secrets;
pub mod signal;
pub mod telemetry;
pub mod timeouts;
pub mod unicode;
pub mod upstream;

/// The gateway version reported by the health endpoints.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
