//! Caches: the tool cache (tools found by live discovery, per MCP config and server) and the gateway config cache
//! (what an API key resolved to). Both are local, in memory, for this instance; each counts hits and misses for
//! `gw_get_cache_status`.
//!
//! With `gw_mcp_use_external_cache` a shared cache in Redis ([`external`] for the connection, [`shared`] for what is
//! stored and how) sits in front of the local tool cache and beside the gateway config cache of the `gw` auth
//! provider; the local caches stay as the fallback while Redis is unreachable.

pub mod external;
pub mod local;
pub mod shared;

pub use external::{ExternalCache, ExternalError, ExternalReport};
pub use local::{CacheStats, TtlCache};
