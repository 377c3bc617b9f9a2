//! TEMPORARY STUB (not committed): replaced by the upstream branch.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub mcp_config_id: String,
    pub server_name: String,
}
#[derive(Clone, Debug, PartialEq)]
pub struct ServerSpec {
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub inherit_env: Vec<String>,
}
impl ServerSpec {
    pub fn from_entry(entry: &crate::config::model::ServerEntry) -> ServerSpec {
        ServerSpec {
            command: entry.config.command.clone(),
            args: entry.config.args.clone(),
            env: entry.config.env.clone().unwrap_or_default().into_iter().collect(),
            inherit_env: entry.config.inherit_env.clone().unwrap_or_default(),
        }
    }
}
#[derive(Clone, Debug)]
pub struct PoolSettings {
    pub max_processes_per_server: usize,
    pub idle_timeout: Duration,
}
pub struct Discovered {
    pub tools: Vec<rmcp::model::Tool>,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    pub server_description: Option<String>,
}
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("{0}")]
    Start(String),
    #[error("timeout {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Crashed(String),
    #[error("{0}")]
    Protocol(String),
    #[error("shutting down")]
    ShuttingDown,
}
pub struct PoolStats {
    pub processes: usize,
    pub restarts: u64,
    pub started: u64,
}
pub struct UpstreamPool;
impl UpstreamPool {
    pub fn new(_settings: PoolSettings) -> Arc<UpstreamPool> {
        Arc::new(UpstreamPool)
    }
    pub fn set_settings(&self, _settings: PoolSettings) {}
    pub async fn list_tools(&self, _k: &PoolKey, _s: &ServerSpec, _t: Duration) -> Result<Discovered, UpstreamError> {
        Err(UpstreamError::Start("stub".into()))
    }
    pub async fn call_tool(
        &self,
        _k: &PoolKey,
        _s: &ServerSpec,
        _name: &str,
        _args: serde_json::Map<String, serde_json::Value>,
        _t: Duration,
    ) -> Result<rmcp::model::CallToolResult, UpstreamError> {
        Err(UpstreamError::Start("stub".into()))
    }
    pub fn retain(&self, _live: &HashMap<PoolKey, ServerSpec>) {}
    pub async fn shutdown(&self) {}
    pub fn stats(&self) -> PoolStats {
        PoolStats { processes: 0, restarts: 0, started: 0 }
    }
}
