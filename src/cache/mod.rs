//! Caches: the tool cache (tools found by live discovery, per MCP config and server) and the gateway config cache
//! (what an API key resolved to). Both are local, in memory, for this instance; each counts hits and misses for
//! `gw_get_cache_status`.

pub mod local;

pub use local::{CacheStats, TtlCache};
