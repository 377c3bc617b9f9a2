//! The typed model of the configuration file (contract section 2).
//!
//! Every record keeps its annotations (keys that start with `_`, `x-` or `x_`) in `extra` and writes them back, so a
//! rewrite by the admin API never drops what an operator put in the file; any other unknown key is refused at decoding
//! (contract 15, `decode/fields.rs`). Optional settings stay `None` when the file leaves them
//! out (the defaults live in [`super::Settings`]), so a rewrite does not inflate the file with defaults either.
//! Decoding lives in `decode/model.rs` and goes through [`Fields`](super::decode::Fields) to collect every type
//! problem at once; cross-record rules live in `validate`.

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::{Map, Number, Value};

use super::decode::{Problems, decode_file};

/// Decoding a server entry lives with the other decoders; re-exported so `config::model::decode_server_at` stays.
pub use super::decode::decode_server_at;

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ConfigFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_apikey: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub common_mcp_gateway_config: Option<CommonConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Plugins>,
    pub mcp_configs: IndexMap<String, McpConfig>,
    pub projects: IndexMap<String, Project>,
    pub users: IndexMap<String, User>,
    pub apikeys: IndexMap<String, ApiKeyRecord>,
    /// Each user's own upstream credentials, sealed (contract 16; `config/user_credentials.rs`).
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub user_credentials: super::user_credentials::UserCredentials,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `common_mcp_gateway_config`: gateway-wide settings.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct CommonConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_log_level: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_mcp_use_external_cache: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_cache_host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_cache_port: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_cache_db: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_cache_password: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_tool_cache_expiration: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_gateway_cache_expiration: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_settings: Option<TimeoutSettings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relevancy_threshold: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adherence_threshold: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_limits: Option<RateLimits>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_pool: Option<UpstreamPool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsConfig>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_allowed_hosts: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_allowed_origins: Option<Vec<String>>,
    /// The one folder backups are written to and restored from (relative: to the config file's folder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gw_backup_dir: Option<String>,
    /// What `tools/list` shows: `"gateway"` (default), `"transparent"` or `"both"` (contract section 8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_exposure: Option<String>,
    /// Between a server's name and its tool's in an exposed name (default `__`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name_separator: Option<String>,
    /// Poisoning checks on discovered tools: `"off"`, `"warn"` (default) or `"block"` (contract section 11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_scan: Option<String>,
    /// Tool pinning: `"off"`, `"warn"` (default) or `"enforce"` (contract section 11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_pinning: Option<String>,
    /// The audit log: `{"enabled": false, "path": "<file>"}` (contract section 11).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit_log: Option<AuditLogConfig>,
    /// Where the configuration lives: `{"type": "file"}` (default) or `{"type": "redis"}` (contract section 12).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_store: Option<ConfigStoreConfig>,
    /// What every replica derives the key that seals MCP session ids from (contract section 12). A secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_secret: Option<String>,
    /// What users' upstream credentials are sealed under (contract 16; `config/secrets_key.rs`). A secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets_key: Option<String>,
    /// An absolute path to a file holding `secrets_key` (a mounted Kubernetes Secret); wins over `secrets_key`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secrets_key_file: Option<String>,
    /// Authorization rules (contract 17), evaluated before a configuration's and a project's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policies: Option<Vec<PolicyRule>>,
    /// What no rule matching decides: `"allow"` (default) or `"deny"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_default: Option<String>,
    /// How often keys, users or projects may call upstream tools, prompts and resources (contract 17).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quotas: Option<Vec<QuotaRule>>,
    /// The gateway listener's URL as users' browsers and clients reach it (`https://mcpgw.example.com`): the base of
    /// the OAuth broker's connect and callback URLs (contract 16).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `config_store`: `{"type": "file" | "redis"}`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ConfigStoreConfig {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The timeout names of spec section 8, in seconds.
pub const TIMEOUT_NAMES: [&str; 7] = [
    "default_timeout",
    "guardrail_timeout",
    "auth_timeout",
    "tool_execution_timeout",
    "discovery_timeout",
    "cache_timeout",
    "connectivity_timeout",
];

/// `timeout_settings`: each of [`TIMEOUT_NAMES`] in seconds (unknown names kept in `extra`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TimeoutSettings {
    #[serde(flatten)]
    pub values: IndexMap<String, Number>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `rate_limits`: a token bucket per API key; 0 means no limit.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct RateLimits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_key_requests_per_second: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `upstream_pool`: how many processes serve one upstream server, and when idle ones end.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct UpstreamPool {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_processes_per_server: Option<u64>,
    /// The processes of one (server, user) pool of a `per_user` server (contract 16).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_processes_per_user_server: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout_seconds: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_calls_per_process: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_timeout_seconds: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prestart: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `limits`: sizes, counts and read deadlines that bound what one client or one upstream can make the gateway hold.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct LimitsConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_body_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_admin_body_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_header_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sessions: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_idle_timeout_seconds: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_dormant_seconds: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_read_timeout_seconds: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tool_result_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_calls_per_request: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sessions_per_key: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_admin_connections: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_connection_seconds: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_inflight_per_key: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pending_answer_bytes_per_key: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_timeout_seconds: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_unauthenticated_connections: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections_per_ip: Option<u64>,
    /// Processes of `per_session` servers (and waiting rounds) per key (contract section 14).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_processes_per_key: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_process_seconds: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_required_seconds: Option<Number>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_waiting_rounds_per_key: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tasks_per_key: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_task_seconds: Option<Number>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `plugins`: the provider chosen for each plugin family.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Plugins {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<PluginChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guardrails: Option<PluginChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<PluginChoice>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One plugin family's provider and its provider-specific config.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PluginChoice {
    pub provider: String,
    pub config: Map<String, Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One MCP configuration: a named list of upstream servers.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct McpConfig {
    pub mcp_config_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    pub mcp_config: Vec<ServerEntry>,
    /// Overrides `common_mcp_gateway_config.tool_exposure` for this configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_exposure: Option<String>,
    /// Overrides `common_mcp_gateway_config.tool_name_separator` for this configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name_separator: Option<String>,
    /// Authorization rules (contract 17) for this configuration's callers, after the common ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policies: Option<Vec<PolicyRule>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One authorization rule (contract 17): `{"name", "effect": "allow"|"deny", "when": "<CEL>", "message"?}`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PolicyRule {
    pub name: String,
    pub effect: String,
    pub when: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One quota (contract 17): `{"name", "per", "when"?, "rate"?, "burst"?, "limit"?}` (checked by
/// `crate::policy::quota::Quota::compile`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct QuotaRule {
    pub name: String,
    pub per: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One upstream server entry (spec 2.3, contract section 2).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ServerEntry {
    pub server_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub config: ServerCommand,
    /// Tools answered by discovery without starting the server: an object keyed by name or an array of records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_guardrails_policy: Option<GuardrailPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_guardrails_policy: Option<GuardrailPolicy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oauth_config: Option<OAuthConfig>,
    /// Whose credentials the server's calls carry (contract 16): absent or `mode: "shared"` for the entry's own,
    /// `mode: "per_user"` for each calling user's (checked in `config/server_credentials.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credentials: Option<ServerCredentials>,
    /// Replaces `{server_name}{sep}` in the exposed names of this server's tools and prompts (`""`: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_prefix: Option<String>,
    /// Which of this server's tools a client may see and call, by upstream tool name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_filter: Option<ToolFilter>,
    /// The approved definition of each tool, `sha256:<hex>` (contract section 11); written at the first live
    /// discovery when absent (trust on first use), or by hand, GitOps or the admin API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pinned_tools: Option<IndexMap<String, String>>,
    /// The approved definition of each prompt, by the upstream's prompt name, pinned as tools are (contract 14).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_pins: Option<IndexMap<String, String>>,
    /// The approved definition of each resource (by its `uri`) and resource template (by its `uriTemplate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_pins: Option<IndexMap<String, String>>,
    /// How long a transparent listing waits for this server, its start included (seconds; the gateway's
    /// `timeout_settings.discovery_timeout` when absent). A server not ready by then is left out of that answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovery_timeout: Option<Number>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ServerEntry {
    /// How long a transparent listing waits for this server: its `discovery_timeout`, else `default` (the
    /// gateway's `timeout_settings.discovery_timeout`). Validated when the configuration loads.
    pub fn discovery_wait(&self, default: std::time::Duration) -> std::time::Duration {
        let seconds = self.discovery_timeout.as_ref().and_then(Number::as_f64);
        seconds.filter(|v| v.is_finite() && *v > 0.0).map_or(default, std::time::Duration::from_secs_f64)
    }

    /// Whether `self` and `other` are the same entry but for their prompt and resource pins: pins of what a server
    /// offers besides tools say nothing about its tools, so writing them (trust on first use) keeps the tool cache.
    /// Asked at every tool cache hit, so it compares in place (no copy); every field is named, so a new one cannot
    /// be left out by mistake.
    pub fn same_but_offer_pins(&self, other: &ServerEntry) -> bool {
        let ServerEntry {
            server_name,
            description,
            config,
            tools,
            input_guardrails_policy,
            output_guardrails_policy,
            oauth_config,
            credentials,
            tool_prefix,
            tool_filter,
            pinned_tools,
            prompt_pins: _,
            resource_pins: _,
            discovery_timeout,
            extra,
        } = self;
        *server_name == other.server_name
            && *description == other.description
            && *config == other.config
            && *tools == other.tools
            && *input_guardrails_policy == other.input_guardrails_policy
            && *output_guardrails_policy == other.output_guardrails_policy
            && *oauth_config == other.oauth_config
            && *credentials == other.credentials
            && *tool_prefix == other.tool_prefix
            && *tool_filter == other.tool_filter
            && *pinned_tools == other.pinned_tools
            && *discovery_timeout == other.discovery_timeout
            && *extra == other.extra
    }
}

/// `credentials` of a server entry (contract 16), as written; `config/server_credentials.rs` holds its rules. The
/// fields after `names` belong to the kinds `oauth` and `token_exchange`, which are read and checked but not yet
/// served (a load refuses them, so that nothing fails in silence later).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ServerCredentials {
    /// `"shared"` (the default) or `"per_user"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// With `per_user`: `"secret"`, `"oauth"` or `"token_exchange"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// With `secret`: the names of each user's values, referenced as `${user.NAME}` in `env`, `args` and `headers`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authorization_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issuer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revocation_url: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `tool_filter` of a server entry (on upstream tool names) or a project (on exposed names): `*` matches any run of
/// characters, no `allow` means all, `deny` wins (contract section 8).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct ToolFilter {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deny: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// How to reach an upstream server: a command to start (stdio), or a remote server's `url` (contract section 9).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ServerCommand {
    /// The command that starts a stdio server; empty for a remote server.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env: Option<IndexMap<String, String>>,
    /// Names of the gateway's own environment variables passed on to the server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inherit_env: Option<Vec<String>>,
    /// `"shared"` (default: pooled for every caller) or `"per_session"` (a process per MCP session).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// A remote server's endpoint (`http` or `https`), instead of `command`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A remote server's transport: `"streamable_http"` (default) or `"sse"` (the 2024-11-05 HTTP+SSE transport).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<String>,
    /// The protocol revision a remote streamable HTTP server is spoken to in: `"2025-11-25"` (a session),
    /// `"2026-07-28"` (stateless), or `"auto"` (the default: 2025-11-25 unless the server's `server/discover` lists
    /// only 2026-07-28).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// Headers sent with every request to a remote server (masked in listings, like `env`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headers: Option<IndexMap<String, String>>,
    /// TLS toward a remote server: a CA bundle, and a client certificate for mutual TLS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `common_mcp_gateway_config.audit_log`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct AuditLogConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// What `args_hmac` is keyed with (contract section 14). A secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hmac_key: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `config.tls` of a remote server: PEM files.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct TlsConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_bundle_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cert_path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_key_path: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `config.transport` values.
pub const STREAMABLE_HTTP: &str = "streamable_http";
pub const SSE: &str = "sse";

/// `session_affinity` values.
pub const SHARED: &str = "shared";
pub const PER_SESSION: &str = "per_session";

/// `input_guardrails_policy` / `output_guardrails_policy`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct GuardrailPolicy {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub additional_config: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl GuardrailPolicy {
    /// Whether the policy is switched on.
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(false)
    }
}

/// `oauth_config`: OAuth 2.0 client credentials for an upstream server (spec 5.3). Field names as the contract writes them.
#[allow(non_snake_case)]
#[derive(Clone, Default, Serialize, PartialEq)]
pub struct OAuthConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub OAUTH_GRANT_TYPE: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub OAUTH_CLIENT_ID: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub OAUTH_CLIENT_SECRET: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub OAUTH_TOKEN_URL: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub OAUTH_SCOPE: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub OAUTH_AUDIENCE: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub OAUTH_USE_MTLS: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub OAUTH_CLIENT_CERT_PATH: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub OAUTH_CLIENT_KEY_PATH: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub OAUTH_CA_BUNDLE_PATH: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Written by hand so that the client secret never reaches a log or a panic message.
impl std::fmt::Debug for OAuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthConfig")
            .field("enabled", &self.enabled)
            .field("OAUTH_CLIENT_ID", &self.OAUTH_CLIENT_ID)
            .field("OAUTH_CLIENT_SECRET", &self.OAUTH_CLIENT_SECRET.as_ref().map(|_| "***"))
            .field("OAUTH_TOKEN_URL", &self.OAUTH_TOKEN_URL)
            .field("OAUTH_USE_MTLS", &self.OAUTH_USE_MTLS)
            .finish_non_exhaustive()
    }
}

/// A project: a name, the MCP configuration it uses, and its members.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Project {
    pub project_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_config_id: Option<String>,
    pub users: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Which exposed tools (`{server_name}{sep}{tool_name}`) the project's callers may see and call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_filter: Option<ToolFilter>,
    /// Authorization rules (contract 17) for this project's callers, after the common and the configuration's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policies: Option<Vec<PolicyRule>>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A user, known by e-mail.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct User {
    pub email: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A gateway API key's record (the key itself is the map key in `apikeys`).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ApiKeyRecord {
    pub project_id: String,
    pub user_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ApiKeyRecord {
    /// Whether the key is disabled.
    pub fn is_disabled(&self) -> bool {
        self.disabled.unwrap_or(false)
    }
}

impl ConfigFile {
    /// Parses file bytes: JSON syntax, then every type problem at once.
    pub fn parse(bytes: &[u8]) -> Result<ConfigFile, Problems> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| vec![format!("invalid JSON: {e}")])?;
        Self::from_value(value)
    }

    /// Decodes an already parsed JSON value.
    pub fn from_value(value: Value) -> Result<ConfigFile, Problems> {
        let (file, problems) = Self::from_value_partial(value);
        if problems.is_empty() { Ok(file) } else { Err(problems) }
    }

    /// Decodes what can be decoded: records with type problems are left out and the problems returned, so the rest
    /// can still be checked and one run of `check-config` lists everything.
    pub fn from_value_partial(value: Value) -> (ConfigFile, Problems) {
        let mut problems = Problems::new();
        let file = decode_file(value, &mut problems).unwrap_or_default();
        (file, problems)
    }

    /// The file as pretty-printed JSON bytes, with a trailing newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serialising plain maps, strings and numbers cannot fail; fall back to an empty object rather than panic.
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_else(|_| b"{}".to_vec());
        bytes.push(b'\n');
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offer_pins_alone_keep_an_entry_the_same_for_its_tools() {
        let entry = ServerEntry { server_name: "s".into(), ..ServerEntry::default() };
        let pinned = IndexMap::from([("p".to_string(), format!("sha256:{}", "0".repeat(64)))]);
        let with_offers =
            ServerEntry { prompt_pins: Some(pinned.clone()), resource_pins: Some(pinned.clone()), ..entry.clone() };
        assert!(entry.same_but_offer_pins(&with_offers) && with_offers.same_but_offer_pins(&entry));
        let with_tools = ServerEntry { pinned_tools: Some(pinned), ..entry.clone() };
        assert!(!entry.same_but_offer_pins(&with_tools), "tool pins are the tools' business");
        let renamed = ServerEntry { tool_prefix: Some("x".into()), ..with_offers.clone() };
        assert!(!with_offers.same_but_offer_pins(&renamed));
    }
}
