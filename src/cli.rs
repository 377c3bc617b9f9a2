//! The command line (contract section 1): `init`, `serve`, `check-config`.
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
use clap::{Args, Parser, Subcommand};

use crate::app::{self, ServeOptions, Transport};
use crate::config::{self, LoadError, defaults};

/// mcpgw: a security gateway for the Model Context Protocol.
#[derive(Debug, Parser)]
#[command(name = "mcpgw", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
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
    /// Admin REST API address [default: 0.0.0.0:8001].
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
            print!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprint!("{e}");
            return ExitCode::from(2);
        }
        Err(e) => {
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ");
            eprintln!("mcpgw: error: {first} (see mcpgw --help)");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Init(args) => init(&args),
        Command::CheckConfig(args) => check_config(&args),
        Command::Serve(args) => serve(args),
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

fn serve(args: ServeArgs) -> ExitCode {
    let opts = ServeOptions {
        config_path: args.config.path(),
        transport: args.transport,
        gateway_addr: args.gateway_addr,
        admin_addr: args.admin_addr,
        metrics_addr: args.metrics_addr,
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the async runtime: {e}")),
    };
    let result = runtime.block_on(app::serve(opts));
    // A read of stdin (the stdio front) sits on a blocking thread that nothing can interrupt; waiting for it would
    // keep the process alive after the drain, so the runtime's leftover blocking threads are not waited for.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(app::ServeError::Config(LoadError::Invalid { path, problems })) => print_invalid(&path, &problems),
        Err(e) => fail(e),
    }
}
