//! `mcpgw config validate`: is the configuration valid, and if not, every problem.
//!
//! File mode loads and validates the file as a start or reload would (the same check as `check-config`); HTTP mode
//! asks the running gateway, whose health report says whether the file on disk is the valid one serving now and lists
//! the problems of a failed reload. Valid: exit 0; invalid: the problems on stderr and exit 3.

use std::process::ExitCode;

use serde_json::{Value, json};

use super::args::Target;
use super::ops::Op;
use super::output::{self, CliError, Outcome, Shape};
use super::remote::AdminClient;
use crate::config::{self, LoadError};

/// Runs the validation and prints its verdict.
pub fn run(target: &Target) -> ExitCode {
    match verdict(target) {
        Ok(data) => {
            let problems: Vec<String> = data["problems"]
                .as_array()
                .map(|list| list.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default();
            if target.json {
                output::emit(&format!("{}\n", serde_json::to_string_pretty(&data).unwrap_or_default()));
            }
            if problems.is_empty() {
                if !target.json {
                    output::print(&Outcome::new("the configuration is valid", data), Shape::Record, false);
                }
                return ExitCode::SUCCESS;
            }
            let noun = if problems.len() == 1 { "problem" } else { "problems" };
            eprintln!("mcpgw: error: the configuration is invalid ({} {noun}):", problems.len());
            for problem in &problems {
                eprintln!("  - {problem}");
            }
            ExitCode::from(output::exit::VALIDATION)
        }
        Err(e) => e.report(),
    }
}

/// `{valid, config_path, problems, ...counts}`.
fn verdict(target: &Target) -> Result<Value, CliError> {
    if let Some(url) = &target.admin_url {
        let health = AdminClient::new(url)?.run(&Op::Health)?.data.unwrap_or(Value::Null);
        let valid = health["config_valid"].as_bool().unwrap_or(false);
        return Ok(json!({
            "valid": valid,
            "config_path": health["config_path"],
            "problems": health.get("config_problems").cloned().unwrap_or_else(|| json!([])),
            "total_configs": health["total_configs"],
            "total_projects": health["total_projects"],
            "total_users": health["total_users"],
            "total_api_keys": health["total_api_keys"],
        }));
    }
    let path = target.config.clone().unwrap_or_else(config::default_path);
    match config::store::load_file(&path) {
        Ok(snap) => Ok(json!({
            "valid": true,
            "config_path": path.display().to_string(),
            "problems": [],
            "total_configs": snap.file.mcp_configs.len(),
            "total_projects": snap.file.projects.len(),
            "total_users": snap.file.users.len(),
            "total_api_keys": snap.key_count(),
        })),
        Err(LoadError::Invalid { path, problems }) => {
            Ok(json!({"valid": false, "config_path": path.display().to_string(), "problems": problems}))
        }
        Err(e) => Err(CliError::Failed(e.to_string())),
    }
}
