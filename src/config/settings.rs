//! Resolved settings: `common_mcp_gateway_config` and `plugins` with every default applied and every value checked.
//!
//! The model keeps what the file says; this is what the gateway runs with. Building it is part of validation, so a
//! non-positive timeout, an unknown log level or an unknown provider is a problem that keeps the file from loading.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Number, Value};

use super::decode::Problems;
use super::exposure::Exposure;
use super::fsutil;
use super::model::{CommonConfig, ConfigFile, LimitsConfig, PluginChoice, Plugins};
pub use crate::telemetry::logging::LogLevel;
use crate::telemetry::traces::TraceExport;

/// The timeouts of spec section 8.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeouts {
    pub default: Duration,
    pub guardrail: Duration,
    pub auth: Duration,
    pub tool_execution: Duration,
    pub discovery: Duration,
    pub cache: Duration,
    pub connectivity: Duration,
}

/// `common_mcp_gateway_config.limits` (contract section 4), defaults applied. Each one is enforced where the
/// resource is taken, answered with its own status and error code, and counted in `mcpgw_limit_hits_total{limit}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// An MCP request body (413 `PAYLOAD_TOO_LARGE`).
    pub max_request_body_bytes: usize,
    /// An admin API request body (413 `PAYLOAD_TOO_LARGE`).
    pub max_admin_body_bytes: usize,
    /// A request's line and headers (431 `HEADERS_TOO_LARGE`).
    pub max_header_bytes: usize,
    /// MCP sessions open at once (503 `TOO_MANY_SESSIONS` for one more `initialize`).
    pub max_sessions: usize,
    /// A session with no request for this long is closed (then 404 `SESSION_NOT_FOUND`).
    pub session_idle_timeout: Duration,
    /// A session with no request for this long, and no stream or subscription open, goes dormant: the protocol
    /// layer's worker for it is ended and the session is woken, from its sealed id, by its next request.
    pub session_dormant: Duration,
    /// A client's time to send a request's headers, and then its body (the connection is closed; 408
    /// `REQUEST_TIMEOUT` for a body).
    pub request_read_timeout: Duration,
    /// One upstream message, i.e. one tool result (that call fails with `UPSTREAM_OUTPUT_TOO_LARGE`).
    pub max_tool_result_bytes: usize,
    /// The calls of one `gw_secure_call_tools` (more: `TOO_MANY_CALLS`, none run).
    pub max_calls_per_request: usize,
    /// The upstream results of one request together (once reached, the calls left get `RESPONSE_TOO_LARGE`).
    pub max_response_bytes: usize,
    /// MCP sessions of one key open at once (429 `SESSION_LIMIT` for one more `initialize` of that key).
    pub max_sessions_per_key: usize,
    /// Client connections open at once on the gateway listener (one more is closed at once); never more than half
    /// the descriptor limit, see `listener::connection_cap`.
    pub max_connections: usize,
    /// Client connections open at once on the admin listener.
    pub max_admin_connections: usize,
    /// A connection with no request in flight for this long is closed.
    pub idle_connection: Duration,
    /// Requests of one key in flight at once, answers still being sent included (429 `RATE_LIMITED` for one more).
    pub max_inflight_per_key: usize,
    /// Bytes of one key's answers ready but not yet taken by its client: while over, its new requests get 429
    /// `RATE_LIMITED`.
    pub max_pending_answer_bytes_per_key: usize,
    /// A connection whose client takes none of its answer for this long is closed.
    pub write_timeout: Duration,
    /// Gateway connections open at once that no request has authenticated yet (the oldest idle one is closed for a
    /// new one).
    pub max_unauthenticated_connections: usize,
    /// The same, from one client address.
    pub max_connections_per_ip: usize,
    /// Processes of `per_session` servers one key may have at once (one more call waits, then gets
    /// `UPSTREAM_UNAVAILABLE`).
    pub max_processes_per_key: usize,
    /// How long a key's process of a `per_session` server, started for its stateless calls, waits idle for the next.
    pub idle_process: Duration,
    /// How long a 2026-07-28 call waiting on `input_required` keeps its process for the client's answer.
    pub input_required: Duration,
    /// Calls of one key waiting on `input_required` at once (one more is refused and ended).
    pub max_waiting_rounds_per_key: usize,
    /// Tasks (contract 15) one key has at once in transparent mode; one more task-augmented call is refused.
    pub max_tasks_per_key: usize,
    /// How long a task may live: then the gateway cancels it upstream and forgets it.
    pub max_task: Duration,
}

/// Bounds of the byte and count limits: (name, default, smallest, largest).
const LIMIT_BOUNDS: [(&str, u64, u64, u64); 14] = [
    ("max_request_body_bytes", 4 << 20, 1024, 256 << 20),
    ("max_admin_body_bytes", 1 << 20, 1024, 256 << 20),
    // hyper's own read buffer (about 400 KiB) caps headers before this limit could.
    ("max_header_bytes", 64 << 10, 1024, 256 << 10),
    ("max_sessions", 10_000, 1, 1_000_000),
    ("max_tool_result_bytes", 16 << 20, 1024, 1 << 30),
    ("max_calls_per_request", 64, 1, 10_000),
    ("max_response_bytes", 32 << 20, 1024, 1 << 30),
    ("max_sessions_per_key", 64, 1, 1_000_000),
    ("max_connections", 4096, 1, 1_000_000),
    ("max_admin_connections", 64, 1, 100_000),
    ("max_inflight_per_key", 32, 1, 1_000_000),
    ("max_pending_answer_bytes_per_key", 64 << 20, 64 << 10, 1 << 34),
    ("max_unauthenticated_connections", 256, 1, 1_000_000),
    ("max_connections_per_ip", 128, 1, 1_000_000),
];

impl Default for Limits {
    fn default() -> Limits {
        Limits::resolve(None, &mut Problems::default())
    }
}

impl Limits {
    fn resolve(config: Option<&LimitsConfig>, problems: &mut Problems) -> Limits {
        let empty = LimitsConfig::default();
        let c = config.unwrap_or(&empty);
        let mut values = [0usize; 14];
        let given = [
            c.max_request_body_bytes,
            c.max_admin_body_bytes,
            c.max_header_bytes,
            c.max_sessions,
            c.max_tool_result_bytes,
            c.max_calls_per_request,
            c.max_response_bytes,
            c.max_sessions_per_key,
            c.max_connections,
            c.max_admin_connections,
            c.max_inflight_per_key,
            c.max_pending_answer_bytes_per_key,
            c.max_unauthenticated_connections,
            c.max_connections_per_ip,
        ];
        for (slot, ((name, default, min, max), value)) in values.iter_mut().zip(LIMIT_BOUNDS.into_iter().zip(given)) {
            let value = match value {
                Some(v) if (min..=max).contains(&v) => v,
                Some(v) => {
                    problems.push(format!(
                        "common_mcp_gateway_config.limits.{name}: must be an integer from {min} to {max}, found {v}"
                    ));
                    default
                }
                None => default,
            };
            *slot = usize::try_from(value).unwrap_or(usize::MAX);
        }
        let [
            max_request_body_bytes,
            max_admin_body_bytes,
            max_header_bytes,
            max_sessions,
            max_tool_result_bytes,
            max_calls_per_request,
            max_response_bytes,
            max_sessions_per_key,
            max_connections,
            max_admin_connections,
            max_inflight_per_key,
            max_pending_answer_bytes_per_key,
            max_unauthenticated_connections,
            max_connections_per_ip,
        ] = values;
        let max_processes_per_key = count(c.max_processes_per_key, "max_processes_per_key", 8, 100_000, problems);
        let max_waiting_rounds_per_key =
            count(c.max_waiting_rounds_per_key, "max_waiting_rounds_per_key", 4, 100_000, problems);
        let max_tasks_per_key = count(c.max_tasks_per_key, "max_tasks_per_key", 16, 100_000, problems);
        let mut timeout = |value: Option<&Number>, default: f64, name: &str| {
            seconds(value, default, &format!("common_mcp_gateway_config.limits.{name}"), false, problems)
        };
        Limits {
            max_request_body_bytes,
            max_admin_body_bytes,
            max_header_bytes,
            max_sessions,
            session_idle_timeout: timeout(
                c.session_idle_timeout_seconds.as_ref(),
                3600.0,
                "session_idle_timeout_seconds",
            ),
            session_dormant: timeout(c.session_dormant_seconds.as_ref(), 30.0, "session_dormant_seconds"),
            request_read_timeout: timeout(
                c.request_read_timeout_seconds.as_ref(),
                30.0,
                "request_read_timeout_seconds",
            ),
            max_tool_result_bytes,
            max_calls_per_request,
            max_response_bytes,
            max_sessions_per_key,
            max_connections,
            max_admin_connections,
            idle_connection: timeout(c.idle_connection_seconds.as_ref(), 60.0, "idle_connection_seconds"),
            max_inflight_per_key,
            max_pending_answer_bytes_per_key,
            write_timeout: timeout(c.write_timeout_seconds.as_ref(), 30.0, "write_timeout_seconds"),
            max_unauthenticated_connections,
            max_connections_per_ip,
            max_processes_per_key,
            idle_process: timeout(c.idle_process_seconds.as_ref(), 60.0, "idle_process_seconds"),
            input_required: timeout(c.input_required_seconds.as_ref(), 60.0, "input_required_seconds"),
            max_waiting_rounds_per_key,
            max_tasks_per_key,
            max_task: timeout(c.max_task_seconds.as_ref(), 3600.0, "max_task_seconds"),
        }
    }
}

/// A count of `limits` outside [`LIMIT_BOUNDS`]: `default` when absent, from 1 to `max`.
fn count(value: Option<u64>, name: &str, default: usize, max: u64, problems: &mut Problems) -> usize {
    match value {
        None => default,
        Some(v) if (1..=max).contains(&v) => usize::try_from(v).unwrap_or(usize::MAX),
        Some(v) => {
            problems.push(format!(
                "common_mcp_gateway_config.limits.{name}: must be an integer from 1 to {max}, found {v}"
            ));
            default
        }
    }
}

/// One plugin family's resolved choice.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginSetting {
    pub provider: String,
    pub config: Map<String, Value>,
}

/// What the poisoning checks do with a finding (`tool_scan`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ScanMode {
    /// No checks.
    Off,
    /// Logged, counted and reported in `gw_discover_all_tools`; the tool stays usable.
    #[default]
    Warn,
    /// As `Warn`, and the tool is quarantined: listed nowhere, calls refused with `TOOL_QUARANTINED`.
    Block,
}

/// Where the configuration lives (`config_store.type`, contract section 12).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreKind {
    /// The config file, written in place by admin writes.
    #[default]
    File,
    /// Redis at the `gw_cache_*` connection; the file only seeds an empty store.
    Redis,
}

/// `session_secret`: what the key sealing MCP session ids is derived from. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionSecret(pub String);

impl std::fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionSecret([redacted])")
    }
}

/// `audit_log.hmac_key`: what the digests of a call's arguments in the audit log are keyed with. `Debug` does not
/// show it.
#[derive(Clone, PartialEq, Eq)]
pub struct AuditKey(pub String);

impl std::fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuditKey([redacted])")
    }
}

/// The shortest `audit_log.hmac_key` accepted (`init` writes 43: 32 random bytes in URL-safe base64).
pub const MIN_AUDIT_KEY_CHARS: usize = 32;

/// The shortest `session_secret` accepted.
pub const MIN_SESSION_SECRET_CHARS: usize = 32;

/// What a tool whose definition differs from its pin does (`tool_pinning`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PinMode {
    /// No pins.
    Off,
    /// Pinned on first use; a change is logged, counted and audited, and the tool stays usable.
    #[default]
    Warn,
    /// As `Warn`, and a changed or new tool is quarantined until approved.
    Enforce,
}

/// Everything the gateway runs with, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub log_level: LogLevel,
    pub use_external_cache: bool,
    pub cache_host: String,
    pub cache_port: u16,
    pub cache_db: u32,
    pub cache_password: Option<String>,
    pub tool_cache_expiry: Duration,
    pub gateway_cache_expiry: Duration,
    pub timeouts: Timeouts,
    pub relevancy_threshold: f64,
    pub adherence_threshold: f64,
    pub rate_limit_per_second: f64,
    pub rate_limit_burst: u32,
    pub max_processes_per_server: u32,
    /// Processes of one (server, user) pool of a `per_user` server (`upstream_pool.max_processes_per_user_server`,
    /// default 1; contract 16).
    pub max_processes_per_user_server: u32,
    /// Calls one upstream process may serve at once (`upstream_pool.max_calls_per_process`, default 1).
    pub max_calls_per_process: u32,
    pub idle_timeout: Duration,
    /// How long one upstream process start may take (`upstream_pool.start_timeout_seconds`, default 120).
    pub start_timeout: Duration,
    /// Start each server's first process when the config loads (`upstream_pool.prestart`, default false).
    pub prestart: bool,
    pub limits: Limits,
    pub allowed_hosts: Vec<String>,
    pub allowed_origins: Vec<String>,
    pub auth: PluginSetting,
    /// Provider `oauth`'s settings (contract section 10), read from `auth.config`.
    pub client_oauth: Option<std::sync::Arc<super::client_oauth::ClientOAuth>>,
    pub guardrails: Option<PluginSetting>,
    pub telemetry: Option<PluginSetting>,
    /// `gw_backup_dir` as the file gives it (checked: a non-empty path); see [`Settings::backup_dir_for`].
    pub backup_dir: Option<PathBuf>,
    /// `tool_scan`: what the poisoning checks on discovered tools do (contract section 11).
    pub tool_scan: ScanMode,
    /// `tool_pinning`: what a tool definition that differs from its pin does (contract section 11).
    pub tool_pinning: PinMode,
    /// `audit_log.path` when `audit_log.enabled` (contract section 11); see [`Settings::audit_path_for`].
    pub audit_log: Option<PathBuf>,
    /// `audit_log.hmac_key`, when the file has one (without one the audit log keys with the process's own).
    pub audit_key: Option<AuditKey>,
    /// `tool_exposure` and `tool_name_separator` of `common_mcp_gateway_config`; see [`Snapshot::exposure`].
    ///
    /// [`Snapshot::exposure`]: super::Snapshot::exposure
    pub exposure: Exposure,
    /// `config_store.type` (contract section 12).
    pub config_store: StoreKind,
    /// `session_secret`, when the file has one.
    pub session_secret: Option<SessionSecret>,
    /// The key users' upstream credentials are sealed under (`MCPGW_SECRETS_KEY`, `secrets_key_file` or
    /// `secrets_key`, contract 16), when one is configured.
    pub secrets_key: Option<super::secrets_key::SecretsKey>,
    /// `public_url` without a trailing `/`: the gateway as browsers reach it (the OAuth broker's URLs, contract 16).
    pub public_url: Option<String>,
}

/// The folder backups go to when `gw_backup_dir` is not set: `backups` beside the config file.
pub const DEFAULT_BACKUP_DIR: &str = "backups";

impl Settings {
    /// The one folder backups are written to and restored from: `gw_backup_dir`, a relative one taken from the folder
    /// of the config file (the path as given, like `config_path` in health answers), by default `backups` there.
    pub fn backup_dir_for(&self, config_path: &Path) -> PathBuf {
        let configured = self.backup_dir.as_deref().unwrap_or(Path::new(DEFAULT_BACKUP_DIR));
        if configured.is_absolute() {
            configured.to_path_buf()
        } else {
            fsutil::parent_dir(config_path).join(configured)
        }
    }

    /// The audit log's file, when enabled: a relative `audit_log.path` is taken from the config file's folder.
    pub fn audit_path_for(&self, config_path: &Path) -> Option<PathBuf> {
        let configured = self.audit_log.as_deref()?;
        Some(if configured.is_absolute() {
            configured.to_path_buf()
        } else {
            fsutil::parent_dir(config_path).join(configured)
        })
    }

    /// Whether telemetry export is switched on.
    pub fn telemetry_enabled(&self) -> bool {
        self.telemetry.as_ref().is_some_and(|t| t.config.get("enabled").and_then(Value::as_bool).unwrap_or(true))
    }

    /// The trace export `plugins.telemetry` asks for; `None` when traces are off.
    pub fn trace_export(&self) -> Option<TraceExport> {
        if !self.telemetry_enabled() {
            return None;
        }
        let plugin = self.telemetry.as_ref()?;
        TraceExport::from_plugin(&plugin.provider, &plugin.config)
    }

    /// Resolves the settings of `file`, recording every problem.
    pub fn resolve(file: &ConfigFile, problems: &mut Problems) -> Settings {
        let empty = CommonConfig::default();
        let c = file.common_mcp_gateway_config.as_ref().unwrap_or(&empty);
        let p = "common_mcp_gateway_config";
        let auth = resolve_auth(file.plugins.as_ref(), problems);
        let log_level = match c.gw_log_level.as_deref() {
            None => LogLevel::Info,
            Some(name) => LogLevel::parse(name).unwrap_or_else(|| {
                problems.push(format!(
                    "{p}.gw_log_level: must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL, found {name:?}"
                ));
                LogLevel::Info
            }),
        };
        let timeout = |name: &str, default: f64, problems: &mut Problems| {
            let value = c.timeout_settings.as_ref().and_then(|t| t.values.get(name));
            seconds(value, default, &format!("{p}.timeout_settings.{name}"), false, problems)
        };
        let timeouts = Timeouts {
            default: timeout("default_timeout", 30.0, problems),
            guardrail: timeout("guardrail_timeout", 15.0, problems),
            auth: timeout("auth_timeout", 10.0, problems),
            tool_execution: timeout("tool_execution_timeout", 60.0, problems),
            discovery: timeout("discovery_timeout", 20.0, problems),
            cache: timeout("cache_timeout", 5.0, problems),
            connectivity: timeout("connectivity_timeout", 2.0, problems),
        };
        let hours = |value: Option<&Number>, default: f64, name: &str, problems: &mut Problems| {
            let hours = seconds(value, default, &format!("{p}.{name}"), true, problems);
            Duration::from_secs_f64(hours.as_secs_f64() * 3600.0)
        };
        let rate = c.rate_limits.as_ref();
        let pool = c.upstream_pool.as_ref();
        let max_processes = pool.and_then(|u| u.max_processes_per_server).unwrap_or(4);
        if max_processes == 0 {
            problems.push(format!("{p}.upstream_pool.max_processes_per_server: must be at least 1"));
        }
        let max_per_user = pool.and_then(|u| u.max_processes_per_user_server).unwrap_or(1);
        if max_per_user == 0 {
            problems.push(format!("{p}.upstream_pool.max_processes_per_user_server: must be at least 1"));
        }
        let max_calls = pool.and_then(|u| u.max_calls_per_process).unwrap_or(1);
        if max_calls == 0 {
            problems.push(format!("{p}.upstream_pool.max_calls_per_process: must be at least 1"));
        }
        let rate_per_second = number(
            rate.and_then(|r| r.per_key_requests_per_second.as_ref()),
            0.0,
            &format!("{p}.rate_limits.per_key_requests_per_second"),
            0.0..=f64::MAX,
            problems,
        );
        Settings {
            log_level,
            use_external_cache: c.gw_mcp_use_external_cache.unwrap_or(false),
            cache_host: c.gw_cache_host.clone().unwrap_or_else(|| "localhost".to_string()),
            cache_port: c.gw_cache_port.and_then(|v| u16::try_from(v).ok()).unwrap_or(6379),
            cache_db: c.gw_cache_db.and_then(|v| u32::try_from(v).ok()).unwrap_or(0),
            cache_password: c.gw_cache_password.clone(),
            tool_cache_expiry: hours(c.gw_tool_cache_expiration.as_ref(), 4.0, "gw_tool_cache_expiration", problems),
            gateway_cache_expiry: hours(
                c.gw_gateway_cache_expiration.as_ref(),
                24.0,
                "gw_gateway_cache_expiration",
                problems,
            ),
            timeouts,
            relevancy_threshold: threshold(
                c.relevancy_threshold.as_ref(),
                &format!("{p}.relevancy_threshold"),
                problems,
            ),
            adherence_threshold: threshold(
                c.adherence_threshold.as_ref(),
                &format!("{p}.adherence_threshold"),
                problems,
            ),
            rate_limit_per_second: rate_per_second,
            rate_limit_burst: rate.and_then(|r| r.burst).and_then(|b| u32::try_from(b).ok()).unwrap_or(0),
            max_processes_per_server: u32::try_from(max_processes.max(1)).unwrap_or(4),
            max_processes_per_user_server: u32::try_from(max_per_user.max(1)).unwrap_or(1),
            max_calls_per_process: u32::try_from(max_calls.max(1)).unwrap_or(1),
            idle_timeout: seconds(
                pool.and_then(|u| u.idle_timeout_seconds.as_ref()),
                300.0,
                &format!("{p}.upstream_pool.idle_timeout_seconds"),
                false,
                problems,
            ),
            start_timeout: seconds(
                pool.and_then(|u| u.start_timeout_seconds.as_ref()),
                120.0,
                &format!("{p}.upstream_pool.start_timeout_seconds"),
                false,
                problems,
            ),
            prestart: pool.and_then(|u| u.prestart).unwrap_or(false),
            limits: Limits::resolve(c.limits.as_ref(), problems),
            allowed_hosts: c
                .gw_allowed_hosts
                .clone()
                .unwrap_or_else(|| vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]),
            allowed_origins: c.gw_allowed_origins.clone().unwrap_or_default(),
            auth: auth.clone(),
            client_oauth: (auth.provider == "oauth")
                .then(|| super::client_oauth::read(&auth.config, problems).map(std::sync::Arc::new))
                .flatten(),
            guardrails: resolve_plugin(
                file.plugins.as_ref().and_then(|p| p.guardrails.as_ref()),
                "guardrails",
                problems,
            ),
            telemetry: resolve_plugin(file.plugins.as_ref().and_then(|p| p.telemetry.as_ref()), "telemetry", problems),
            backup_dir: backup_dir(c.gw_backup_dir.as_deref(), problems),
            exposure: Exposure::resolve(c.tool_exposure.as_deref(), c.tool_name_separator.as_deref(), p, problems),
            audit_log: match &c.audit_log {
                Some(audit) if audit.enabled == Some(true) => match audit.path.as_deref().map(str::trim) {
                    Some(path) if !path.is_empty() && !path.contains('\0') => Some(PathBuf::from(path)),
                    _ => {
                        problems
                            .push(format!("{p}.audit_log.path: is required (a file) when the audit log is enabled"));
                        None
                    }
                },
                _ => None,
            },
            audit_key: match c.audit_log.as_ref().and_then(|audit| audit.hmac_key.as_deref()) {
                None => None,
                Some(key) if key.chars().count() >= MIN_AUDIT_KEY_CHARS => Some(AuditKey(key.to_string())),
                Some(_) => {
                    // Never the value: problems are shown by `check-config`, in logs and in the health report.
                    problems.push(format!(
                        "{p}.audit_log.hmac_key: must be at least {MIN_AUDIT_KEY_CHARS} characters \
                         (`mcpgw init` writes a random one)"
                    ));
                    None
                }
            },
            tool_pinning: match c.tool_pinning.as_deref() {
                None | Some("warn") => PinMode::Warn,
                Some("off") => PinMode::Off,
                Some("enforce") => PinMode::Enforce,
                Some(other) => {
                    problems.push(format!(
                        "{p}.tool_pinning: must be one of \"off\", \"warn\", \"enforce\", found {other:?}"
                    ));
                    PinMode::Warn
                }
            },
            config_store: match c.config_store.as_ref().map(|store| store.kind.as_deref()) {
                None | Some(Some("file")) => StoreKind::File,
                Some(Some("redis")) => StoreKind::Redis,
                Some(other) => {
                    problems.push(format!(
                        "{p}.config_store.type: must be \"file\" or \"redis\", found {}",
                        other.map_or("nothing".to_string(), |o| format!("{o:?}"))
                    ));
                    StoreKind::File
                }
            },
            session_secret: match c.session_secret.as_deref() {
                None => None,
                Some(secret) if secret.chars().count() >= MIN_SESSION_SECRET_CHARS => {
                    Some(SessionSecret(secret.to_string()))
                }
                Some(_) => {
                    problems.push(format!(
                        "{p}.session_secret: must be at least {MIN_SESSION_SECRET_CHARS} characters \
                         (`mcpgw init` writes a random one)"
                    ));
                    None
                }
            },
            secrets_key: super::secrets_key::resolve(c, problems),
            public_url: c.public_url.as_deref().and_then(|url| match super::remote::check_url(url) {
                Ok(()) if !url.contains(['?', '#']) => Some(url.trim_end_matches('/').to_string()),
                Ok(()) => {
                    problems.push(format!("{p}.public_url: a base URL has no query or fragment, found {url:?}"));
                    None
                }
                Err(why) => {
                    problems.push(format!("{p}.public_url: {why}"));
                    None
                }
            }),
            tool_scan: match c.tool_scan.as_deref() {
                None | Some("warn") => ScanMode::Warn,
                Some("off") => ScanMode::Off,
                Some("block") => ScanMode::Block,
                Some(other) => {
                    problems
                        .push(format!("{p}.tool_scan: must be one of \"off\", \"warn\", \"block\", found {other:?}"));
                    ScanMode::Warn
                }
            },
        }
    }
}

/// `gw_backup_dir`: a path that names a folder (not empty, no NUL byte, which no system call accepts).
fn backup_dir(value: Option<&str>, problems: &mut Problems) -> Option<PathBuf> {
    let dir = value?;
    if dir.trim().is_empty() || dir.contains('\0') {
        problems
            .push("common_mcp_gateway_config.gw_backup_dir: must be a non-empty path without NUL bytes".to_string());
        return None;
    }
    Some(PathBuf::from(dir))
}

/// A duration in seconds: positive (or, with `zero_ok`, non-negative) and finite.
fn seconds(value: Option<&Number>, default: f64, path: &str, zero_ok: bool, problems: &mut Problems) -> Duration {
    let Some(n) = value else { return Duration::from_secs_f64(default) };
    match n.as_f64() {
        Some(v) if v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0)) && v < 1e9 => Duration::from_secs_f64(v),
        _ => {
            let rule = if zero_ok { "zero or positive" } else { "positive" };
            problems.push(format!("{path}: must be a {rule} number, found {n}"));
            Duration::from_secs_f64(default)
        }
    }
}

fn number(
    value: Option<&Number>,
    default: f64,
    path: &str,
    range: std::ops::RangeInclusive<f64>,
    problems: &mut Problems,
) -> f64 {
    let Some(n) = value else { return default };
    match n.as_f64() {
        Some(v) if v.is_finite() && range.contains(&v) => v,
        _ => {
            problems.push(format!("{path}: must be a number from {} to {}, found {n}", range.start(), range.end()));
            default
        }
    }
}

fn threshold(value: Option<&Number>, path: &str, problems: &mut Problems) -> f64 {
    number(value, 0.75, path, 0.0..=1.0, problems)
}

/// Provider names per family, and the config fields each provider needs.
const PROVIDERS: &[(&str, &str, &[&str])] = &[
    ("auth", "local_apikey", &[]),
    ("auth", "gw", &["base_url", "api_key"]),
    ("auth", "oauth", &[]),
    ("guardrails", "gw", &["base_url", "api_key"]),
    ("guardrails", "thirdparty_moderation", &["base_url", "api_key"]),
    ("guardrails", "custom_keyword", &[]),
    ("telemetry", "opentelemetry", &[]),
    ("telemetry", "stdout", &[]),
];

fn resolve_auth(plugins: Option<&Plugins>, problems: &mut Problems) -> PluginSetting {
    resolve_plugin(plugins.and_then(|p| p.auth.as_ref()), "auth", problems)
        .unwrap_or(PluginSetting { provider: "local_apikey".to_string(), config: Map::new() })
}

fn resolve_plugin(choice: Option<&PluginChoice>, family: &str, problems: &mut Problems) -> Option<PluginSetting> {
    let choice = choice?;
    let path = format!("plugins.{family}");
    let known: Vec<&str> = PROVIDERS.iter().filter(|(f, _, _)| *f == family).map(|(_, name, _)| *name).collect();
    let Some((_, _, required)) = PROVIDERS.iter().find(|(f, name, _)| *f == family && *name == choice.provider) else {
        problems.push(format!("{path}.provider: must be one of {}, found {:?}", known.join(", "), choice.provider));
        return None;
    };
    for field in *required {
        match choice.config.get(*field) {
            Some(Value::String(s)) if !s.trim().is_empty() => {}
            _ => problems.push(format!(
                "{path}.config.{field}: is required as a non-empty string for provider {:?}",
                choice.provider
            )),
        }
    }
    let config = &choice.config;
    if choice.provider == "custom_keyword"
        && let Some(keywords) = config.get("blocked_keywords")
    {
        let ok = keywords.as_array().is_some_and(|a| a.iter().all(Value::is_string));
        if !ok {
            problems.push(format!("{path}.config.blocked_keywords: must be an array of strings"));
        }
    }
    if choice.provider == "opentelemetry" {
        check_otlp(config, &path, problems);
    }
    if let Some(enabled) = config.get("enabled")
        && !enabled.is_boolean()
    {
        problems.push(format!("{path}.config.enabled: must be a boolean"));
    }
    Some(PluginSetting { provider: choice.provider.clone(), config: config.clone() })
}

/// The `opentelemetry` provider's config: `protocol` grpc or http, `insecure` a boolean, and, unless disabled, an
/// `http(s)` `url` without credentials (they would reach logs in connection errors).
fn check_otlp(config: &Map<String, Value>, path: &str, problems: &mut Problems) {
    if let Some(protocol) = config.get("protocol")
        && !matches!(protocol.as_str(), Some("grpc" | "http"))
    {
        problems.push(format!("{path}.config.protocol: must be \"grpc\" or \"http\""));
    }
    if let Some(insecure) = config.get("insecure")
        && !insecure.is_boolean()
    {
        problems.push(format!("{path}.config.insecure: must be a boolean"));
    }
    if config.get("enabled").and_then(Value::as_bool) == Some(false) {
        return;
    }
    match config.get("url").and_then(Value::as_str).map(str::trim) {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            let authority = url.split_once("://").map_or("", |(_, rest)| rest.split(['/', '?']).next().unwrap_or(""));
            if authority.is_empty() {
                problems.push(format!("{path}.config.url: has no host"));
            } else if authority.contains('@') {
                problems.push(format!("{path}.config.url: must not contain credentials"));
            }
        }
        _ => problems.push(format!(
            "{path}.config.url: is required as an http:// or https:// URL when the opentelemetry provider is enabled"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolve(value: Value) -> (Settings, Problems) {
        let file = ConfigFile::from_value(value).unwrap();
        let mut problems = Problems::new();
        let settings = Settings::resolve(&file, &mut problems);
        (settings, problems)
    }

    #[test]
    fn defaults_follow_the_spec() {
        let (s, problems) = resolve(json!({}));
        assert!(problems.is_empty());
        assert_eq!(s.timeouts.tool_execution, Duration::from_secs(60));
        assert_eq!(s.timeouts.connectivity, Duration::from_secs(2));
        assert_eq!(s.tool_cache_expiry, Duration::from_secs(4 * 3600));
        assert_eq!(s.gateway_cache_expiry, Duration::from_secs(24 * 3600));
        assert_eq!(s.relevancy_threshold, 0.75);
        assert_eq!(s.auth.provider, "local_apikey");
        assert_eq!(s.max_processes_per_server, 4);
        assert_eq!(s.max_processes_per_user_server, 1);
        assert_eq!(s.max_calls_per_process, 1);
        assert_eq!(s.backup_dir_for(Path::new("/etc/gw/gw.json")), Path::new("/etc/gw/backups"));
        assert_eq!(s.backup_dir_for(Path::new("gw.json")), Path::new("./backups"));
    }

    #[test]
    fn process_and_round_limits_default_and_are_checked() {
        let (s, problems) = resolve(json!({}));
        assert!(problems.is_empty());
        let limits = &s.limits;
        assert_eq!((limits.max_processes_per_key, limits.max_waiting_rounds_per_key), (8, 4));
        assert_eq!((limits.idle_process, limits.input_required), (Duration::from_secs(60), Duration::from_secs(60)));
        let limits = json!({"max_processes_per_key": 0, "max_waiting_rounds_per_key": 100_001,
                            "idle_process_seconds": 0, "input_required_seconds": -1});
        let (s, problems) = resolve(json!({"common_mcp_gateway_config": {"limits": limits}}));
        assert_eq!(problems.len(), 4, "{problems:#?}");
        assert!(problems[0].contains("limits.max_processes_per_key: must be an integer from 1"), "{problems:#?}");
        assert_eq!(s.limits.max_processes_per_key, 8, "a bad value keeps the default");
    }

    #[test]
    fn backup_dir_is_taken_from_the_config_folder_when_relative() {
        let (s, problems) = resolve(json!({"common_mcp_gateway_config": {"gw_backup_dir": "saved/here"}}));
        assert!(problems.is_empty(), "{problems:#?}");
        assert_eq!(s.backup_dir_for(Path::new("/etc/gw/gw.json")), Path::new("/etc/gw/saved/here"));
        let (s, _) = resolve(json!({"common_mcp_gateway_config": {"gw_backup_dir": "/var/backups/gw"}}));
        assert_eq!(s.backup_dir_for(Path::new("/etc/gw/gw.json")), Path::new("/var/backups/gw"));
        for bad in ["", "  ", "a\u{0}b"] {
            let (_, problems) = resolve(json!({"common_mcp_gateway_config": {"gw_backup_dir": bad}}));
            assert_eq!(problems.len(), 1, "{bad:?}: {problems:#?}");
        }
    }

    #[test]
    fn bad_values_are_all_reported() {
        let (_, problems) = resolve(json!({
            "common_mcp_gateway_config": {
                "gw_log_level": "LOUD",
                "timeout_settings": {"default_timeout": 0, "auth_timeout": -1},
                "relevancy_threshold": 2,
                "upstream_pool": {"max_processes_per_server": 0, "max_calls_per_process": 0,
                    "max_processes_per_user_server": 0}
            },
            "plugins": {"guardrails": {"provider": "magic", "config": {}},
                        "auth": {"provider": "gw", "config": {"base_url": "http://x"}}}
        }));
        assert_eq!(problems.len(), 9, "{problems:#?}");
    }

    #[test]
    fn opentelemetry_needs_an_http_url_and_a_known_protocol() {
        let otel = |config: Value| json!({"plugins": {"telemetry": {"provider": "opentelemetry", "config": config}}});
        let (_, ok) = resolve(otel(json!({"url": "http://collector:4317", "protocol": "grpc", "insecure": true})));
        assert!(ok.is_empty(), "{ok:#?}");
        let (_, off) = resolve(otel(json!({"enabled": false})));
        assert!(off.is_empty(), "{off:#?}");
        let (_, missing) = resolve(otel(json!({"protocol": "http"})));
        assert_eq!(missing.len(), 1, "{missing:#?}");
        let (_, bad) = resolve(otel(json!({"url": "collector:4317", "protocol": "udp", "insecure": "yes"})));
        assert_eq!(bad.len(), 3, "{bad:#?}");
        let (_, secret) = resolve(otel(json!({"url": "https://user:pw@collector/v1/traces"})));
        assert_eq!(secret.len(), 1, "{secret:#?}");
        assert!(!secret[0].contains("pw"), "{secret:#?}");
    }
}
