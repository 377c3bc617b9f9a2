//! The settings of transparent mode (contract section 8), resolved and checked: `tool_exposure` and
//! `tool_name_separator` (in `common_mcp_gateway_config`, each overridable per MCP configuration), a server entry's
//! `tool_prefix`, and the `tool_filter` of a server entry or a project.

use super::decode::Problems;
use super::model::{ConfigFile, McpConfig, ToolFilter};

/// What `tools/list` shows a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ToolExposure {
    /// The seven `gw_*` tools only (the default).
    #[default]
    Gateway,
    /// Every allowed upstream tool under its exposed name, and the upstreams' prompts and resources.
    Transparent,
    /// The `gw_*` tools first, then everything of `Transparent`.
    Both,
}

impl ToolExposure {
    /// The values the file may give, in the order the documentation lists them.
    pub const NAMES: [&'static str; 3] = ["gateway", "transparent", "both"];

    pub fn parse(value: &str) -> Option<ToolExposure> {
        match value {
            "gateway" => Some(ToolExposure::Gateway),
            "transparent" => Some(ToolExposure::Transparent),
            "both" => Some(ToolExposure::Both),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolExposure::Gateway => "gateway",
            ToolExposure::Transparent => "transparent",
            ToolExposure::Both => "both",
        }
    }

    /// Whether the `gw_*` tools are listed.
    pub fn gateway_tools(self) -> bool {
        self != ToolExposure::Transparent
    }

    /// Whether upstream tools, prompts and resources are served as the gateway's own.
    pub fn upstream(self) -> bool {
        self != ToolExposure::Gateway
    }

    /// The view a client gets that asked for `requested` (`X-Mcpgw-Tool-Exposure`, `GW_TOOL_EXPOSURE`): under
    /// `"both"` a client may narrow it to either view; otherwise the configuration's view, whatever was asked.
    pub fn chosen(self, requested: Option<ToolExposure>) -> ToolExposure {
        match (self, requested) {
            (ToolExposure::Both, Some(requested)) => requested,
            _ => self,
        }
    }
}

/// The default `tool_name_separator`.
pub const DEFAULT_SEPARATOR: &str = "__";
/// The longest separator and prefix accepted: an exposed name must stay readable within MCP's 128 characters.
const MAX_SEPARATOR: usize = 8;
const MAX_PREFIX: usize = 64;
/// Bounds of one `tool_filter`: patterns are matched on every listing and call.
const MAX_PATTERNS: usize = 256;
const MAX_PATTERN: usize = 256;

/// How one MCP configuration exposes its servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposure {
    pub mode: ToolExposure,
    pub separator: String,
}

impl Default for Exposure {
    fn default() -> Exposure {
        Exposure { mode: ToolExposure::Gateway, separator: DEFAULT_SEPARATOR.to_string() }
    }
}

impl Exposure {
    /// `common_mcp_gateway_config`'s values (defaults applied), problems reported under `path`.
    pub fn resolve(mode: Option<&str>, separator: Option<&str>, path: &str, problems: &mut Problems) -> Exposure {
        Exposure::default().overridden(mode, separator, path, problems)
    }

    /// These settings with an MCP configuration's overrides applied.
    pub fn overridden(
        &self,
        mode: Option<&str>,
        separator: Option<&str>,
        path: &str,
        problems: &mut Problems,
    ) -> Exposure {
        let mode = match mode {
            None => self.mode,
            Some(value) => ToolExposure::parse(value).unwrap_or_else(|| {
                problems.push(format!(
                    "{path}.tool_exposure: must be one of \"gateway\", \"transparent\", \"both\", found {value:?}"
                ));
                self.mode
            }),
        };
        let separator = match separator {
            None => self.separator.clone(),
            Some(value) => match check_name_part(value, MAX_SEPARATOR) {
                Ok(()) if !value.is_empty() => value.to_string(),
                Ok(()) => {
                    problems.push(format!("{path}.tool_name_separator: must not be empty"));
                    self.separator.clone()
                }
                Err(why) => {
                    problems.push(format!("{path}.tool_name_separator: {why}"));
                    self.separator.clone()
                }
            },
        };
        Exposure { mode, separator }
    }

    /// The settings of MCP configuration `config` (these settings when it sets none, or is unknown).
    pub fn of_config(&self, config: Option<&McpConfig>) -> Exposure {
        match config {
            None => self.clone(),
            Some(c) => {
                let mut ignored = Problems::new();
                self.overridden(c.tool_exposure.as_deref(), c.tool_name_separator.as_deref(), "", &mut ignored)
            }
        }
    }
}

/// A part of an exposed name: at most `max` characters of `[A-Za-z0-9_.-]` (MCP's tool-name characters).
fn check_name_part(value: &str, max: usize) -> Result<(), String> {
    if value.len() > max {
        return Err(format!("at most {max} characters, found {}", value.len()));
    }
    if let Some(bad) = value.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))) {
        return Err(format!("only letters, digits, '_', '.' and '-' (MCP tool-name characters), found {bad:?}"));
    }
    Ok(())
}

/// The longest `discovery_timeout` a server entry may set (a day).
const MAX_DISCOVERY_SECONDS: f64 = 86_400.0;

/// Checks every transparent-mode setting of `file` beyond `common_mcp_gateway_config` (checked by [`Exposure::resolve`]).
pub fn check(file: &ConfigFile, common: &Exposure, problems: &mut Problems) {
    for (id, config) in &file.mcp_configs {
        let path = format!("mcp_configs.{id}");
        common.overridden(config.tool_exposure.as_deref(), config.tool_name_separator.as_deref(), &path, problems);
        for (i, server) in config.mcp_config.iter().enumerate() {
            let path = format!("{path}.mcp_config[{i}]");
            if let Some(prefix) = &server.tool_prefix
                && let Err(why) = check_name_part(prefix, MAX_PREFIX)
            {
                problems.push(format!("{path}.tool_prefix: {why}"));
            }
            if let Some(filter) = &server.tool_filter {
                check_filter(filter, &format!("{path}.tool_filter"), problems);
            }
            if let Some(seconds) = &server.discovery_timeout
                && !seconds.as_f64().is_some_and(|v| v.is_finite() && v > 0.0 && v <= MAX_DISCOVERY_SECONDS)
            {
                problems.push(format!(
                    "{path}.discovery_timeout: must be a positive number of seconds, at most {MAX_DISCOVERY_SECONDS}, \
                     found {seconds}"
                ));
            }
        }
    }
    for (id, project) in &file.projects {
        if let Some(filter) = &project.tool_filter {
            check_filter(filter, &format!("projects.{id}.tool_filter"), problems);
        }
    }
}

fn check_filter(filter: &ToolFilter, path: &str, problems: &mut Problems) {
    for (key, patterns) in [("allow", &filter.allow), ("deny", &filter.deny)] {
        let Some(patterns) = patterns else { continue };
        if patterns.len() > MAX_PATTERNS {
            problems.push(format!("{path}.{key}: at most {MAX_PATTERNS} patterns, found {}", patterns.len()));
        }
        for (i, pattern) in patterns.iter().enumerate() {
            if pattern.is_empty() || pattern.len() > MAX_PATTERN || pattern.chars().any(char::is_control) {
                problems.push(format!(
                    "{path}.{key}[{i}]: a pattern is 1 to {MAX_PATTERN} characters without control characters"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_apply_and_bad_values_are_reported() {
        let mut problems = Problems::new();
        let common = Exposure::resolve(Some("both"), None, "common_mcp_gateway_config", &mut problems);
        assert_eq!(common, Exposure { mode: ToolExposure::Both, separator: "__".into() });
        let config = common.overridden(Some("transparent"), Some("."), "mcp_configs.c", &mut problems);
        assert_eq!(config, Exposure { mode: ToolExposure::Transparent, separator: ".".into() });
        assert!(problems.is_empty(), "{problems:?}");
        common.overridden(Some("all"), Some("::"), "mcp_configs.c", &mut problems);
        common.overridden(None, Some(""), "mcp_configs.d", &mut problems);
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert!(problems[0].starts_with("mcp_configs.c.tool_exposure: must be one of"), "{problems:?}");
        assert!(problems[1].starts_with("mcp_configs.c.tool_name_separator: only letters"), "{problems:?}");
        assert_eq!(problems[2], "mcp_configs.d.tool_name_separator: must not be empty");
    }

    #[test]
    fn modes_say_what_is_listed() {
        assert!(ToolExposure::Gateway.gateway_tools() && !ToolExposure::Gateway.upstream());
        assert!(!ToolExposure::Transparent.gateway_tools() && ToolExposure::Transparent.upstream());
        assert!(ToolExposure::Both.gateway_tools() && ToolExposure::Both.upstream());
        for name in ToolExposure::NAMES {
            assert_eq!(ToolExposure::parse(name).map(ToolExposure::as_str), Some(name));
        }
        let (gateway, transparent, both) = (ToolExposure::Gateway, ToolExposure::Transparent, ToolExposure::Both);
        assert_eq!(both.chosen(Some(transparent)), transparent, "\"both\" lets a client narrow the view");
        assert_eq!(both.chosen(Some(gateway)), gateway);
        assert_eq!(both.chosen(None), both);
        assert_eq!(gateway.chosen(Some(transparent)), gateway, "a client cannot widen the view");
        assert_eq!(transparent.chosen(Some(both)), transparent);
    }
}
