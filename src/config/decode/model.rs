//! The decoders of the configuration model: one function per record of [`crate::config::model`], each reading a
//! [`Fields`] so that every type problem of the file is collected in one pass.

use indexmap::IndexMap;
use serde_json::Value;

use super::fields::{Fields, Problems, type_name};
use crate::config::model::{
    ApiKeyRecord, AuditLogConfig, CommonConfig, ConfigFile, ConfigStoreConfig, GuardrailPolicy, LimitsConfig,
    McpConfig, OAuthConfig, PluginChoice, Plugins, PolicyRule, Project, QuotaRule, RateLimits, ServerCommand,
    ServerEntry, TIMEOUT_NAMES, TimeoutSettings, TlsConfig, ToolFilter, UpstreamPool, User,
};

/// The whole file, for [`ConfigFile::parse`]: each section decoded, the unknown top-level keys kept.
pub(in crate::config) fn decode_file(value: Value, problems: &mut Problems) -> Option<ConfigFile> {
    let mut f = Fields::new(value, "", problems)?;
    let admin_apikey = f.string("admin_apikey");
    let common_mcp_gateway_config = f.nested("common_mcp_gateway_config", decode_common);
    let plugins = f.nested("plugins", decode_plugins);
    let mcp_configs = decode_section(&mut f, "mcp_configs", decode_mcp_config);
    let projects = decode_section(&mut f, "projects", decode_project);
    let users = decode_section(&mut f, "users", decode_user);
    let apikeys = decode_apikeys(&mut f);
    let user_credentials = super::credentials::decode_user_credentials(&mut f);
    Some(ConfigFile {
        admin_apikey,
        common_mcp_gateway_config,
        plugins,
        mcp_configs,
        projects,
        users,
        apikeys,
        user_credentials,
        extra: f.rest(),
    })
}

/// A section keyed by id (`mcp_configs`, `projects`, `users`); a missing section is empty.
fn decode_section<T>(
    f: &mut Fields<'_>,
    key: &'static str,
    decode: impl Fn(Fields<'_>) -> Option<T>,
) -> IndexMap<String, T> {
    let Some(entries) = f.object(key) else { return IndexMap::new() };
    let mut out = IndexMap::with_capacity(entries.len());
    for (id, value) in entries {
        if let Some(record) = Fields::record(value, f.problems(), || format!("{key}.{id}"), &decode) {
            out.insert(id, record);
        }
    }
    out
}

/// `apikeys`: like [`decode_section`] but problem paths name the key by its `key_id`, never the key itself.
fn decode_apikeys(f: &mut Fields<'_>) -> IndexMap<String, ApiKeyRecord> {
    let Some(entries) = f.object("apikeys") else { return IndexMap::new() };
    let mut out = IndexMap::with_capacity(entries.len());
    for (key, value) in entries {
        if key.is_empty() {
            f.problems().push("apikeys: an API key must not be the empty string".to_string());
        }
        let path = || format!("apikeys[key_id {}]", crate::secrets::key_id(&key));
        if let Some(record) = Fields::record(value, f.problems(), path, decode_apikey) {
            out.insert(key, record);
        }
    }
    out
}

fn decode_common(mut f: Fields<'_>) -> CommonConfig {
    CommonConfig {
        gw_log_level: f.string("gw_log_level"),
        gw_mcp_use_external_cache: f.bool("gw_mcp_use_external_cache"),
        gw_cache_host: f.string("gw_cache_host"),
        gw_cache_port: f.integer("gw_cache_port", u64::from(u16::MAX)),
        gw_cache_db: f.integer("gw_cache_db", u64::from(u32::MAX)),
        gw_cache_password: f.string("gw_cache_password"),
        gw_tool_cache_expiration: f.number("gw_tool_cache_expiration"),
        gw_gateway_cache_expiration: f.number("gw_gateway_cache_expiration"),
        timeout_settings: f.nested("timeout_settings", decode_timeouts),
        relevancy_threshold: f.number("relevancy_threshold"),
        adherence_threshold: f.number("adherence_threshold"),
        rate_limits: f.nested("rate_limits", |mut r| RateLimits {
            per_key_requests_per_second: r.number("per_key_requests_per_second"),
            burst: r.integer("burst", u64::from(u32::MAX)),
            extra: r.rest(),
        }),
        upstream_pool: f.nested("upstream_pool", |mut p| UpstreamPool {
            max_processes_per_server: p.integer("max_processes_per_server", 1024),
            max_processes_per_user_server: p.integer("max_processes_per_user_server", 1024),
            idle_timeout_seconds: p.number("idle_timeout_seconds"),
            max_calls_per_process: p.integer("max_calls_per_process", 1024),
            start_timeout_seconds: p.number("start_timeout_seconds"),
            prestart: p.bool("prestart"),
            extra: p.rest(),
        }),
        limits: f.nested("limits", |mut l| LimitsConfig {
            max_request_body_bytes: l.integer("max_request_body_bytes", u64::MAX),
            max_admin_body_bytes: l.integer("max_admin_body_bytes", u64::MAX),
            max_header_bytes: l.integer("max_header_bytes", u64::MAX),
            max_sessions: l.integer("max_sessions", u64::MAX),
            session_idle_timeout_seconds: l.number("session_idle_timeout_seconds"),
            session_dormant_seconds: l.number("session_dormant_seconds"),
            request_read_timeout_seconds: l.number("request_read_timeout_seconds"),
            max_tool_result_bytes: l.integer("max_tool_result_bytes", u64::MAX),
            max_calls_per_request: l.integer("max_calls_per_request", u64::MAX),
            max_sessions_per_key: l.integer("max_sessions_per_key", u64::MAX),
            max_response_bytes: l.integer("max_response_bytes", u64::MAX),
            max_connections: l.integer("max_connections", u64::MAX),
            max_admin_connections: l.integer("max_admin_connections", u64::MAX),
            idle_connection_seconds: l.number("idle_connection_seconds"),
            max_inflight_per_key: l.integer("max_inflight_per_key", u64::MAX),
            max_pending_answer_bytes_per_key: l.integer("max_pending_answer_bytes_per_key", u64::MAX),
            write_timeout_seconds: l.number("write_timeout_seconds"),
            max_unauthenticated_connections: l.integer("max_unauthenticated_connections", u64::MAX),
            max_connections_per_ip: l.integer("max_connections_per_ip", u64::MAX),
            max_processes_per_key: l.integer("max_processes_per_key", u64::MAX),
            idle_process_seconds: l.number("idle_process_seconds"),
            input_required_seconds: l.number("input_required_seconds"),
            max_waiting_rounds_per_key: l.integer("max_waiting_rounds_per_key", u64::MAX),
            max_tasks_per_key: l.integer("max_tasks_per_key", u64::MAX),
            max_task_seconds: l.number("max_task_seconds"),
            extra: l.rest(),
        }),
        gw_allowed_hosts: f.string_list("gw_allowed_hosts"),
        gw_allowed_origins: f.string_list("gw_allowed_origins"),
        gw_backup_dir: f.string("gw_backup_dir"),
        tool_exposure: f.string("tool_exposure"),
        tool_name_separator: f.string("tool_name_separator"),
        tool_scan: f.string("tool_scan"),
        tool_pinning: f.string("tool_pinning"),
        audit_log: f.nested("audit_log", |mut a| AuditLogConfig {
            enabled: a.bool("enabled"),
            path: a.string("path"),
            hmac_key: a.string("hmac_key"),
            extra: a.rest(),
        }),
        config_store: f.nested("config_store", |mut c| ConfigStoreConfig { kind: c.string("type"), extra: c.rest() }),
        session_secret: f.string("session_secret"),
        secrets_key: f.string("secrets_key"),
        secrets_key_file: f.string("secrets_key_file"),
        public_url: f.string("public_url"),
        policies: decode_policies(&mut f),
        policy_default: f.string("policy_default"),
        quotas: decode_quotas(&mut f),
        extra: f.rest(),
    }
}

fn decode_timeouts(mut f: Fields<'_>) -> TimeoutSettings {
    let mut values = IndexMap::new();
    for name in TIMEOUT_NAMES {
        if let Some(n) = f.number(name) {
            values.insert(name.to_string(), n);
        }
    }
    TimeoutSettings { values, extra: f.rest() }
}

fn decode_plugins(mut f: Fields<'_>) -> Plugins {
    Plugins {
        auth: f.nested("auth", decode_plugin_choice).flatten(),
        guardrails: f.nested("guardrails", decode_plugin_choice).flatten(),
        telemetry: f.nested("telemetry", decode_plugin_choice).flatten(),
        extra: f.rest(),
    }
}

fn decode_plugin_choice(mut f: Fields<'_>) -> Option<PluginChoice> {
    let provider = f.required_string("provider");
    let config = f.object("config").unwrap_or_default();
    let extra = f.rest();
    Some(PluginChoice { provider: provider?, config, extra })
}

fn decode_mcp_config(mut f: Fields<'_>) -> Option<McpConfig> {
    let name = f.required_string("mcp_config_name");
    let created_at = f.string("created_at");
    let servers = match f.take("mcp_config") {
        None => Vec::new(),
        Some(Value::Array(items)) => {
            let base = f.path_of("mcp_config");
            items
                .into_iter()
                .enumerate()
                .filter_map(|(i, item)| decode_server_at(item, &format!("{base}[{i}]"), f.problems()))
                .collect()
        }
        Some(other) => {
            f.problem("mcp_config", format!("must be an array of server entries, found {}", type_name(&other)));
            Vec::new()
        }
    };
    let tool_exposure = f.string("tool_exposure");
    let tool_name_separator = f.string("tool_name_separator");
    let policies = decode_policies(&mut f);
    let extra = f.rest();
    Some(McpConfig {
        mcp_config_name: name?,
        created_at,
        mcp_config: servers,
        tool_exposure,
        tool_name_separator,
        policies,
        extra,
    })
}

/// Decodes one server entry found at `path` (also used for admin API bodies, with the path `server`).
pub fn decode_server_at(value: Value, path: &str, problems: &mut Problems) -> Option<ServerEntry> {
    let mut f = Fields::new(value, path, problems)?;
    let server_name = f.required_string("server_name");
    let description = f.string("description");
    let config = match f.take("config") {
        None => {
            f.problem("config", "is required (an object with command, args and env)");
            None
        }
        Some(v) => {
            let path = f.path_of("config");
            Fields::new(v, path, f.problems()).and_then(decode_command)
        }
    };
    let tools = match f.take("tools") {
        Some(v @ (Value::Object(_) | Value::Array(_))) => Some(v),
        Some(other) => {
            f.problem("tools", format!("must be an object or an array, found {}", type_name(&other)));
            None
        }
        None => None,
    };
    let input_guardrails_policy = f.nested("input_guardrails_policy", decode_policy);
    let output_guardrails_policy = f.nested("output_guardrails_policy", decode_policy);
    let oauth_config = f.nested("oauth_config", decode_oauth);
    let credentials = f.nested("credentials", super::server_credentials::decode);
    let tool_prefix = f.string("tool_prefix");
    let tool_filter = f.nested("tool_filter", decode_tool_filter);
    let pinned_tools = pins(&mut f, "pinned_tools");
    let prompt_pins = pins(&mut f, "prompt_pins");
    let resource_pins = pins(&mut f, "resource_pins");
    let discovery_timeout = f.number("discovery_timeout");
    let extra = f.rest();
    Some(ServerEntry {
        server_name: server_name?,
        description,
        config: config?,
        tools,
        input_guardrails_policy,
        output_guardrails_policy,
        oauth_config,
        credentials,
        tool_prefix,
        tool_filter,
        pinned_tools,
        prompt_pins,
        resource_pins,
        discovery_timeout,
        extra,
    })
}

/// A map of pins (`pinned_tools`, `prompt_pins`, `resource_pins`): each value `sha256:` and 64 lower-case hex digits.
fn pins(f: &mut Fields<'_>, key: &'static str) -> Option<IndexMap<String, String>> {
    let pins = f.string_map(key);
    for (name, pin) in pins.iter().flatten() {
        if !crate::config::pins::is_pin(pin) {
            f.problem(key, format!("{name:?}: must be \"sha256:\" and 64 lower-case hex digits"));
        }
    }
    pins
}

fn decode_tool_filter(mut f: Fields<'_>) -> ToolFilter {
    ToolFilter { allow: f.string_list("allow"), deny: f.string_list("deny"), extra: f.rest() }
}

fn decode_command(mut f: Fields<'_>) -> Option<ServerCommand> {
    // A remote server names a `url` instead of a `command` (contract section 9); the rules are in validation.
    let url = f.string("url");
    let command = if url.is_some() { f.string("command") } else { f.required_string("command") };
    let args = f.string_list("args").unwrap_or_default();
    let env = f.string_map("env");
    let inherit_env = f.string_list("inherit_env");
    let session_affinity = f.string("session_affinity");
    let transport = f.string("transport");
    let protocol_version = f.string("protocol_version");
    let headers = f.string_map("headers");
    let tls = f.nested("tls", |mut t| TlsConfig {
        ca_bundle_path: t.string("ca_bundle_path"),
        client_cert_path: t.string("client_cert_path"),
        client_key_path: t.string("client_key_path"),
        extra: t.rest(),
    });
    let extra = f.rest();
    let command = if url.is_some() { command.unwrap_or_default() } else { command? };
    Some(ServerCommand {
        command,
        args,
        env,
        inherit_env,
        session_affinity,
        url,
        transport,
        protocol_version,
        headers,
        tls,
        extra,
    })
}

fn decode_policy(mut f: Fields<'_>) -> GuardrailPolicy {
    GuardrailPolicy {
        enabled: f.bool("enabled"),
        policy_name: f.string("policy_name"),
        additional_config: f.object("additional_config"),
        block: f.string_list("block"),
        extra: f.rest(),
    }
}

fn decode_oauth(mut f: Fields<'_>) -> OAuthConfig {
    OAuthConfig {
        enabled: f.bool("enabled"),
        OAUTH_GRANT_TYPE: f.string("OAUTH_GRANT_TYPE"),
        OAUTH_CLIENT_ID: f.string("OAUTH_CLIENT_ID"),
        OAUTH_CLIENT_SECRET: f.string("OAUTH_CLIENT_SECRET"),
        OAUTH_TOKEN_URL: f.string("OAUTH_TOKEN_URL"),
        OAUTH_SCOPE: f.string("OAUTH_SCOPE"),
        OAUTH_AUDIENCE: f.string("OAUTH_AUDIENCE"),
        OAUTH_USE_MTLS: f.bool("OAUTH_USE_MTLS"),
        OAUTH_CLIENT_CERT_PATH: f.string("OAUTH_CLIENT_CERT_PATH"),
        OAUTH_CLIENT_KEY_PATH: f.string("OAUTH_CLIENT_KEY_PATH"),
        OAUTH_CA_BUNDLE_PATH: f.string("OAUTH_CA_BUNDLE_PATH"),
        extra: f.rest(),
    }
}

fn decode_project(mut f: Fields<'_>) -> Option<Project> {
    let project_name = f.required_string("project_name");
    let mcp_config_id = f.string("mcp_config_id");
    let users = f.string_list("users").unwrap_or_default();
    let created_at = f.string("created_at");
    let tool_filter = f.nested("tool_filter", decode_tool_filter);
    let policies = decode_policies(&mut f);
    let extra = f.rest();
    Some(Project { project_name: project_name?, mcp_config_id, users, created_at, tool_filter, policies, extra })
}

/// `policies`: a list of rules `{name, effect, when, message?}` (compiled with the snapshot, `config/policies.rs`).
fn decode_policies(f: &mut Fields<'_>) -> Option<Vec<PolicyRule>> {
    let items = match f.take("policies")? {
        Value::Array(items) => items,
        other => {
            f.problem("policies", format!("must be an array of rules, found {}", type_name(&other)));
            return None;
        }
    };
    let base = f.path_of("policies");
    let rules = items.into_iter().enumerate().filter_map(|(i, item)| {
        Fields::record(
            item,
            f.problems(),
            || format!("{base}[{i}]"),
            |mut r| {
                let (name, effect, when) =
                    (r.required_string("name"), r.required_string("effect"), r.required_string("when"));
                let message = r.string("message");
                let extra = r.rest();
                Some(PolicyRule { name: name?, effect: effect?, when: when?, message, extra })
            },
        )
    });
    Some(rules.collect())
}

/// `quotas`: a list of `{name, per, when?, rate?, burst?, limit?}` (checked with the snapshot, `config/policies.rs`).
fn decode_quotas(f: &mut Fields<'_>) -> Option<Vec<QuotaRule>> {
    let items = match f.take("quotas")? {
        Value::Array(items) => items,
        other => {
            f.problem("quotas", format!("must be an array of quotas, found {}", type_name(&other)));
            return None;
        }
    };
    let base = f.path_of("quotas");
    let quotas = items.into_iter().enumerate().filter_map(|(i, item)| {
        Fields::record(
            item,
            f.problems(),
            || format!("{base}[{i}]"),
            |mut r| {
                let (name, per) = (r.required_string("name"), r.required_string("per"));
                let (when, rate, limit) = (r.string("when"), r.string("rate"), r.string("limit"));
                let burst = r.integer("burst", crate::policy::quota::MAX_COUNT);
                let extra = r.rest();
                Some(QuotaRule { name: name?, per: per?, when, rate, burst, limit, extra })
            },
        )
    });
    Some(quotas.collect())
}

fn decode_user(mut f: Fields<'_>) -> Option<User> {
    let email = f.required_string("email");
    let created_at = f.string("created_at");
    let extra = f.rest();
    Some(User { email: email?, created_at, extra })
}

fn decode_apikey(mut f: Fields<'_>) -> Option<ApiKeyRecord> {
    let project_id = f.required_string("project_id");
    let user_id = f.required_string("user_id");
    let created_at = f.string("created_at");
    let disabled = f.bool("disabled");
    let extra = f.rest();
    Some(ApiKeyRecord { project_id: project_id?, user_id: user_id?, created_at, disabled, extra })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn annotations_survive_a_round_trip_everywhere() {
        let original = json!({
            "admin_apikey": "k",
            "_comment": {"x": 1},
            "common_mcp_gateway_config": {"gw_log_level": "INFO", "gw_tool_cache_expiration": 4, "x-owner": true,
                "timeout_settings": {"default_timeout": 30, "_note": "n"}},
            "plugins": {"auth": {"provider": "local_apikey", "config": {"anything": 1}, "_note": "n"}},
            "mcp_configs": {"c1": {"mcp_config_name": "a", "mcp_config": [
                {"server_name": "s", "config": {"command": "x", "args": [], "x-cwd": "/tmp"}, "_custom": [1]}],
                "x-tag": 1}},
            "projects": {"p1": {"project_name": "p", "mcp_config_id": "c1", "users": ["u1"], "x-owner": "ops"}},
            "users": {"u1": {"email": "a@b.co", "_team": "t"}},
            "apikeys": {"key": {"project_id": "p1", "user_id": "u1", "_note": "ci"}}
        });
        let file = ConfigFile::from_value(original.clone()).unwrap();
        let written: Value = serde_json::from_slice(&file.to_bytes()).unwrap();
        assert_eq!(written, original);
    }

    #[test]
    fn unknown_keys_are_refused_with_the_nearest_known_one() {
        let bad = json!({
            "mcp_config": {},
            "common_mcp_gateway_config": {"limits": {"max_sesions": 5}, "timeout_settings": {"tool_timeout": 3}},
            "mcp_configs": {"c1": {"mcp_config_name": "a", "mcp_config": [
                {"server_name": "s", "config": {"command": "x", "inherit_evn": ["HTTPS_PROXY"]},
                 "output_guardrail_policy": {"enabled": true}, "zzzzzzzzzzzzzzzz": 1}]}},
            "apikeys": {"secret-key-value": {"project_id": "p1", "user_id": "u1", "dissabled": true}}
        });
        let problems = ConfigFile::from_value(bad).unwrap_err();
        let text = problems.join("\n");
        for expected in [
            "mcp_config: unknown key; did you mean `mcp_configs`?",
            "common_mcp_gateway_config.limits.max_sesions: unknown key; did you mean `max_sessions`?",
            "mcp_configs.c1.mcp_config[0].config.inherit_evn: unknown key; did you mean `inherit_env`?",
            "mcp_configs.c1.mcp_config[0].output_guardrail_policy: unknown key; did you mean `output_guardrails_policy`?",
            "mcp_configs.c1.mcp_config[0].zzzzzzzzzzzzzzzz: unknown key (keys that start with `_`, `x-` or `x_`",
            "dissabled: unknown key; did you mean `disabled`?",
            "common_mcp_gateway_config.timeout_settings.tool_timeout: unknown key",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        assert!(!text.contains("secret-key-value"), "a key leaked into a problem message");
    }

    #[test]
    fn every_type_problem_is_reported() {
        let bad = json!({
            "common_mcp_gateway_config": {"gw_cache_port": "x", "gw_mcp_use_external_cache": "yes"},
            "mcp_configs": {"c1": {"mcp_config": [{"config": {"args": [1]}}]}},
            "users": {"u1": {}},
            "apikeys": {"secret-key-value": {"project_id": 5}}
        });
        let problems = ConfigFile::from_value(bad).unwrap_err();
        let text = problems.join("\n");
        for expected in [
            "common_mcp_gateway_config.gw_cache_port",
            "common_mcp_gateway_config.gw_mcp_use_external_cache",
            "mcp_configs.c1.mcp_config_name: is required",
            "mcp_configs.c1.mcp_config[0].server_name: is required",
            "mcp_configs.c1.mcp_config[0].config.command: is required",
            "mcp_configs.c1.mcp_config[0].config.args[0]",
            "users.u1.email: is required",
            "user_id: is required",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in\n{text}");
        }
        assert!(!text.contains("secret-key-value"), "a key leaked into a problem message");
    }

    #[test]
    fn syntax_errors_are_one_problem() {
        let problems = ConfigFile::parse(b"{\"admin_apikey\": ").unwrap_err();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].starts_with("invalid JSON"));
    }
}
