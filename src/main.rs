//! The `mcpgw` binary: parse the command line and run it (see `mcpgw::cli`).

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    mcpgw::cli::run(std::env::args_os())
}
