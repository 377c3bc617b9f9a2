//! `mcpgw policy check FILE` (compile rules and quotas without a gateway) and `mcpgw policy test FILE` (the simulator
//! of contract 17 over the audit log: from the config file's `audit_log.path` in file mode, or through a running
//! gateway's `POST /api/v1/policy/simulate` with `--admin-url`). FILE is a rules document (`{"policies",
//! "policy_default"?, "quotas"?}`) or, for `check`, a whole configuration file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::Value;

use super::args::Target;
use super::output::CliError;
use crate::manage::policy;

/// `mcpgw policy ...`
#[derive(Debug, Args)]
pub struct PolicyCommand {
    #[command(subcommand)]
    pub action: PolicyAction,
}

#[derive(Debug, Subcommand)]
pub enum PolicyAction {
    /// Compile the rules and quotas of FILE (a rules document, or a whole config file) and list every problem; no
    /// gateway needed. Exit 0 when they all compile, 1 otherwise.
    ///
    /// Example: mcpgw policy check ./rules.json
    Check { file: PathBuf },
    /// Replay the last audited calls against the rules of FILE and list the decisions they would change; nothing is
    /// applied.
    ///
    /// Example: mcpgw policy test ./rules.json --last 5000
    Test {
        file: PathBuf,
        /// How many of the last audited calls to replay (default 1000, at most 100000).
        #[arg(long)]
        last: Option<u64>,
        #[command(flatten)]
        target: Target,
    },
}

pub fn run(command: PolicyCommand) -> ExitCode {
    match command.action {
        PolicyAction::Check { file } => check(&file),
        PolicyAction::Test { file, last, target } => match test(&file, last, &target) {
            Ok(code) => code,
            Err(error) => error.report(),
        },
    }
}

fn read(file: &Path) -> Result<Value, CliError> {
    let text = std::fs::read(file).map_err(|e| CliError::Usage(format!("{}: cannot be read: {e}", file.display())))?;
    crate::json_strict::parse(&text).map_err(|e| CliError::Usage(format!("{}: not JSON: {e}", file.display())))
}

fn check(file: &Path) -> ExitCode {
    let document = match read(file) {
        Ok(document) => document,
        Err(error) => return error.report(),
    };
    let (book, problems) = policy::compile(document);
    if problems.is_empty() {
        println!("{}: {} rules and {} quotas compile", file.display(), book.len(), book.quotas.len());
        return ExitCode::SUCCESS;
    }
    eprintln!("mcpgw: error: {} has {} problem(s):", file.display(), problems.len());
    for problem in &problems {
        eprintln!("  - {problem}");
    }
    ExitCode::FAILURE
}

fn test(file: &Path, last: Option<u64>, target: &Target) -> Result<ExitCode, CliError> {
    let mut proposal = read(file)?;
    if let (Some(last), Value::Object(fields)) = (last, &mut proposal) {
        fields.insert("last".into(), Value::from(last));
    }
    let answer = match &target.admin_url {
        Some(url) => {
            let client = super::remote::AdminClient::new(url)?;
            let route = super::ops::Route {
                method: reqwest::Method::POST,
                segments: ["api", "v1", "policy", "simulate"].map(String::from).to_vec(),
                body: Some(proposal),
                query: Vec::new(),
            };
            client.send(&route)?.data.unwrap_or(Value::Null)
        }
        None => {
            let path = target.config.clone().unwrap_or_else(crate::config::default_path);
            let snapshot = crate::config::store::load_file(&path).map_err(|e| CliError::Failed(e.to_string()))?;
            let audit = snapshot.settings.audit_path_for(&path);
            let proposal = policy::proposal(proposal)?;
            policy::simulate(&snapshot, audit.as_deref(), &proposal)?
        }
    };
    if target.json {
        println!("{}", serde_json::to_string_pretty(&answer).unwrap_or_default());
        return Ok(ExitCode::SUCCESS);
    }
    let count = |field: &str| answer.get(field).and_then(Value::as_u64).unwrap_or(0);
    println!(
        "{} calls replayed, {} undecided (their rules read request arguments, which the audit log does not keep), {} would change",
        count("evaluated"),
        count("undecided"),
        count("changed_count")
    );
    for change in answer.get("changed").and_then(Value::as_array).into_iter().flatten() {
        let text = |path: &[&str]| {
            let mut value = change;
            for key in path {
                value = value.get(key).unwrap_or(&Value::Null);
            }
            value.as_str().map(str::to_string).unwrap_or_else(|| value.to_string())
        };
        println!(
            "  seq {:<8} {:<14} {:<24} {}/{}  {} -> {}  ({})",
            text(&["seq"]),
            text(&["event"]),
            text(&["principal", "user_id"]),
            text(&["target", "server"]),
            text(&["target", "name"]),
            text(&["before"]),
            text(&["after"]),
            if change["rule"].is_null() { "policy_default".to_string() } else { text(&["rule"]) },
        );
    }
    Ok(ExitCode::SUCCESS)
}
