//! The command line: `init`, `serve`, `check-config` (contract section 1), the management commands that mirror the
//! admin REST API (`config`, `project`, `user`, `key`, `system`; see [`manage`]), `client-config`, `inject` (the
//! Kubernetes sidecar, see [`inject`]) and `completions`.
//!
//! Every failure ends with a clear message on stderr and a non-zero exit code, never a panic trace: a bad flag is one
//! line (clap's first line, without the usage block), an unreadable config or a busy port is one line, an invalid
//! config lists every problem.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::app::{self, ServeOptions, Transport};
use crate::config::{self, LoadError, defaults};

pub mod args;
pub mod client_config;
pub mod inject;
pub mod manage;
pub mod ops;
pub mod output;
pub mod policy;
pub mod remote;
pub mod secrets;
pub mod server_edit;
pub mod validate;

const AFTER_HELP: &str = "\
Management commands work on the config file (--config, default $HOME/.gw/gw_mcp_config.json) or, with
--admin-url URL, on a running gateway's admin API with the admin key from GW_ADMIN_APIKEY.

Exit codes: 0 ok, 1 failure, 2 usage, 3 validation, 4 not found, 5 conflict, 6 admin API unreachable,
7 admin key missing or refused.";

/// mcpgw: a security gateway for the Model Context Protocol.
#[derive(Debug, Parser)]
#[command(name = "mcpgw", version, about, long_about = None, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// `mcpgw audit` actions.
#[derive(Debug, Subcommand)]
pub enum AuditAction {
    /// Check the hash chain of an audit log file.
    Verify { path: std::path::PathBuf },
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a fresh config with new admin and gateway keys.
    ///
    /// Example: mcpgw init --config ./gw_mcp_config.json
    Init(InitArgs),
    /// Run the gateway, the admin API and the metrics listener.
    ///
    /// Example: mcpgw serve --config ./gw_mcp_config.json --admin-addr 127.0.0.1:8001
    Serve(ServeArgs),
    /// Load and validate a config file; list every problem.
    ///
    /// Example: mcpgw check-config --config ./gw_mcp_config.json
    CheckConfig(ConfigArg),
    /// Manage MCP configurations and their upstream servers.
    ///
    /// Example: mcpgw config list
    Config(Box<args::ConfigCommand>),
    /// The audit log: `verify PATH` checks its hash chain (exit 0 and the record count when it holds; exit 1 and the
    /// first broken record when a record was changed, removed or inserted, has a key twice, or the chain does not
    /// start at seq 1; exit 1 for an empty file).
    ///
    /// Example: mcpgw audit verify /var/lib/mcpgw/audit.jsonl
    Audit {
        #[command(subcommand)]
        action: AuditAction,
    },
    /// Authorization rules and quotas (contract 17): `check FILE` compiles them without a gateway, `test FILE` replays
    /// the audited calls against them and lists what they would change (nothing is applied).
    ///
    /// Example: mcpgw policy check ./rules.json
    Policy(policy::PolicyCommand),
    /// Manage projects and their members.
    ///
    /// Example: mcpgw project create payments --mcp-config default_config
    Project(args::ProjectCommand),
    /// Manage users.
    ///
    /// Example: mcpgw user create alice@example.com
    User(args::UserCommand),
    /// Manage gateway API keys (create, list, rotate, disable, enable, delete).
    ///
    /// Example: mcpgw key create --user alice@example.com --project payments
    Key(args::KeyCommand),
    /// The key users' upstream credentials are sealed under: `rotate-key`.
    ///
    /// Example: mcpgw secrets rotate-key --config ./gw_mcp_config.json
    Secrets(secrets::SecretsCommand),
    /// Health, backup, restore and reset.
    ///
    /// Example: GW_ADMIN_APIKEY=... mcpgw system health --admin-url http://127.0.0.1:8001
    System(args::SystemCommand),
    /// Print (or --write) the entry that points an MCP client at the gateway.
    ///
    /// Example: mcpgw client-config --client cursor --key-from-env MCPGW_KEY --write
    ClientConfig(client_config::ClientConfigArgs),
    /// Add the mcpgw sidecar to the workloads of a Kubernetes manifest (a file, or stdin) and print it.
    ///
    /// Example: mcpgw inject --secret mcpgw-config agent.yaml | kubectl apply -f -
    Inject(inject::InjectArgs),
    /// Print a shell completion script.
    ///
    /// Example: mcpgw completions bash > /etc/bash_completion.d/mcpgw
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Args)]
pub struct ConfigArg {
    /// Config file [default: $HOME/.gw/gw_mcp_config.json]
    #[arg(long, env = "GW_CONFIG_PATH", value_name = "PATH")]
    pub config: Option<PathBuf>,
}

impl ConfigArg {
    fn path(&self) -> PathBuf {
        self.config.clone().unwrap_or_else(config::default_path)
    }
}

#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Overwrite an existing file.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub config: ConfigArg,
    /// Client transport: http (streamable HTTP) or stdio.
    #[arg(long, env = "MCP_TRANSPORT", value_enum, default_value = "http")]
    pub transport: Transport,
    /// Gateway listener address [default: 0.0.0.0:8000].
    #[arg(long, env = "GW_GATEWAY_ADDR", value_name = "ADDR")]
    pub gateway_addr: Option<SocketAddr>,
    /// Admin REST API address [default: 127.0.0.1:8001; the container image sets 0.0.0.0:8001].
    #[arg(long, env = "GW_ADMIN_ADDR", value_name = "ADDR")]
    pub admin_addr: Option<SocketAddr>,
    /// Metrics and probes address [default: 0.0.0.0:9464].
    #[arg(long, env = "GW_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Seconds to let requests in flight finish after SIGTERM.
    #[arg(long, env = "GW_SHUTDOWN_GRACE_SECONDS", value_name = "SECONDS", default_value_t = 25)]
    pub shutdown_grace: u64,
}

/// Parses `args` and runs the command.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            output::emit(&e.to_string());
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprint!("{e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            let text = e.render().to_string();
            let mut lines = text.lines();
            let first = lines.next().unwrap_or("invalid arguments").trim_start_matches("error: ");
            // Some errors list what they are about on the indented lines below (the missing arguments): kept, on the
            // one line, so the message names them.
            let listed: Vec<&str> =
                lines.take_while(|line| line.starts_with(' ')).map(str::trim).filter(|l| !l.is_empty()).collect();
            let first = if listed.is_empty() { first.to_string() } else { format!("{first} {}", listed.join(", ")) };
            eprintln!("mcpgw: error: {first} (see mcpgw --help)");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Init(args) => init(&args),
        Command::CheckConfig(args) => check_config(&args),
        Command::Serve(args) => serve(args),
        Command::Config(cmd) => manage::config(*cmd),
        Command::Audit { action: AuditAction::Verify { path } } => audit_verify(&path),
        Command::Policy(cmd) => policy::run(cmd),
        Command::Project(cmd) => manage::project(cmd),
        Command::User(cmd) => manage::user(cmd),
        Command::Key(cmd) => manage::key(cmd),
        Command::System(cmd) => manage::system(cmd),
        Command::Secrets(cmd) => secrets::run(cmd),
        Command::ClientConfig(args) => client_config::run(&args),
        Command::Inject(args) => inject::run(&args),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "mcpgw", &mut script);
            output::emit(&String::from_utf8_lossy(&script));
            ExitCode::SUCCESS
        }
    }
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("mcpgw: error: {message}");
    ExitCode::FAILURE
}

fn init(args: &InitArgs) -> ExitCode {
    let path = args.config.path();
    match defaults::init_file(&path, args.force) {
        Ok(keys) => {
            println!("Config written to {}", path.display());
            println!("Admin API key: {}", keys.admin_key);
            println!("Gateway API key: {}", keys.gateway_key);
            println!("Keep both secret; they are not shown again.");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

fn print_invalid(path: &std::path::Path, problems: &[String]) -> ExitCode {
    let count = match problems.len() {
        1 => "1 problem".to_string(),
        n => format!("{n} problems"),
    };
    eprintln!("mcpgw: error: config file {} is invalid ({count}):", path.display());
    for problem in problems {
        eprintln!("  - {problem}");
    }
    ExitCode::FAILURE
}

fn check_config(args: &ConfigArg) -> ExitCode {
    let path = args.path();
    match config::store::load_file(&path) {
        Ok(snap) => {
            println!(
                "{} is valid: {} MCP configs, {} projects, {} users, {} API keys",
                path.display(),
                snap.file.mcp_configs.len(),
                snap.file.projects.len(),
                snap.file.users.len(),
                snap.key_count()
            );
            ExitCode::SUCCESS
        }
        Err(LoadError::Invalid { path, problems }) => print_invalid(&path, &problems),
        Err(e) => fail(e),
    }
}

/// `mcpgw audit verify PATH`.
fn audit_verify(path: &std::path::Path) -> ExitCode {
    match crate::audit::verify(path) {
        Ok(count) => {
            println!("{}: the chain holds ({count} records)", path.display());
            ExitCode::SUCCESS
        }
        Err(crate::audit::VerifyError::Broken(broken)) => {
            eprintln!("mcpgw: {}: the chain breaks at record seq {}: {}", path.display(), broken.seq, broken.why);
            ExitCode::FAILURE
        }
        Err(crate::audit::VerifyError::Empty) => {
            eprintln!("mcpgw: {}: the file holds no audit record (an empty log proves nothing)", path.display());
            ExitCode::FAILURE
        }
        Err(crate::audit::VerifyError::Io(why)) => fail(why),
    }
}

const WORKER_STACK_BYTES: usize = 8 * 1024 * 1024;

/// The environment variable that sets the async runtime's worker threads.
const WORKER_THREADS_VAR: &str = "MCPGW_WORKER_THREADS";
/// At most this many worker threads.
const MAX_WORKER_THREADS: usize = 1024;

/// The runtime's worker threads: `MCPGW_WORKER_THREADS`, else half the CPUs this process may use, rounded up (the
/// standard library counts a cgroup's CPU quota, so a container limited to 1 CPU gets 1 thread).
///
/// Half rather than all: the gateway shares its CPUs with the upstream servers it starts and the agent it serves, and
/// its work per call is small beside theirs. A second thread on 2 CPUs bought no throughput in `cargo bench --bench
/// gateway` and cost a fifth more CPU per call (threads waking each other, tasks moving between them; BENCHMARKS.md).
fn worker_threads(setting: Option<std::ffi::OsString>, cpus: usize) -> Result<usize, String> {
    let Some(setting) = setting else {
        return Ok(cpus.div_ceil(2).max(1));
    };
    let text = setting.to_string_lossy();
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_WORKER_THREADS).contains(&n) => Ok(n),
        _ => Err(format!("{WORKER_THREADS_VAR} must be a whole number from 1 to {MAX_WORKER_THREADS}, not {text:?}")),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let workers = match worker_threads(std::env::var_os(WORKER_THREADS_VAR), cpus) {
        Ok(n) => n,
        Err(why) => return fail(why),
    };
    if let Err(why) = crate::guardrails::builtin_patterns_compile() {
        return fail(why);
    }
    let opts = ServeOptions {
        config_path: args.config.path(),
        transport: args.transport,
        gateway_addr: args.gateway_addr,
        admin_addr: args.admin_addr,
        metrics_addr: args.metrics_addr,
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
        worker_threads: workers,
    };
    // Worker stacks of 8 MiB (tokio's default is 2): a call nests the request path, the tools, discovery and the pool,
    // and unoptimised builds give each of those futures' poll functions frames of several pages. Only the pages used
    // are ever resident.
    // A worker writes the log lines it made when it is about to sleep, with one `write` (telemetry/log_output.rs).
    let built = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_stack_size(WORKER_STACK_BYTES)
        .on_thread_unpark(crate::telemetry::log_output::defer_on_this_thread)
        .on_thread_park(crate::telemetry::log_output::flush)
        .on_thread_stop(crate::telemetry::log_output::flush)
        .enable_all()
        .build();
    let runtime = match built {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the async runtime: {e}")),
    };
    let result = runtime.block_on(app::serve(opts));
    // A read of stdin (the stdio front) sits on a blocking thread that nothing can interrupt; waiting for it would
    // keep the process alive after the drain, so the runtime's leftover blocking threads are not waited for.
    runtime.shutdown_background();
    crate::telemetry::log_output::flush();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(app::ServeError::Config(LoadError::Invalid { path, problems })) => print_invalid(&path, &problems),
        Err(e) => fail(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_threads_are_half_the_cpus_unless_set() {
        assert_eq!(worker_threads(None, 1), Ok(1));
        assert_eq!(worker_threads(None, 2), Ok(1));
        assert_eq!(worker_threads(None, 3), Ok(2));
        assert_eq!(worker_threads(None, 16), Ok(8));
        assert_eq!(worker_threads(Some("16".into()), 2), Ok(16));
        assert_eq!(worker_threads(Some(" 3 ".into()), 2), Ok(3));
        for bad in ["0", "-1", "two", "", "1025", "1.5"] {
            let why = worker_threads(Some(bad.into()), 2).unwrap_err();
            assert!(why.contains("MCPGW_WORKER_THREADS must be a whole number from 1 to 1024"), "{why}");
        }
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        // clap checks ids, globals and flags here rather than at the first unlucky parse.
        Cli::command().debug_assert();
    }
}
