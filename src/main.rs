//! The `mcpgw` binary: parse the command line and run it (see `mcpgw::cli`).

#![forbid(unsafe_code)]

/// mimalloc instead of the system allocator: loading a large config is dominated by small allocations, and with
/// mimalloc it takes half the time (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    mcpgw::cli::run(std::env::args_os())
}
