//! What a client sees of the upstream servers in transparent mode (contract section 8), as pure decisions over names:
//!
//! - [`names`]: the exposed name of each upstream tool or prompt (`{server_name}{sep}{tool_name}`, or the server's
//!   `tool_prefix`), names made valid and short enough by one deterministic rule, and names claimed twice left out;
//! - [`filter`]: the `tool_filter` patterns of a server entry and of a project, and the one decision whether a tool
//!   is visible, shared by every listing and every call path;
//! - [`apps`]: MCP Apps views (`ui://` resources) namespaced per server, and every place a client sees one renamed.
//!
//! The listing and the routing of transparent `tools/list`, `tools/call`, prompts and resources build on these
//! (issue 17); they hold no state and do no I/O.

pub mod apps;
pub mod filter;
pub mod names;
pub mod policy;

/// The request header with which a client picks its view of the servers (`gateway`, `transparent`, `both`), where
/// its configuration's `tool_exposure` is `"both"`.
pub const EXPOSURE_HEADER: axum::http::HeaderName = axum::http::HeaderName::from_static("x-mcpgw-tool-exposure");
