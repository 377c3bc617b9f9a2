//! The `mcpgw` binary: parse the command line and run it (see `mcpgw::cli`).

#![forbid(unsafe_code)]

/// mimalloc instead of the system allocator: loading a large config is dominated by small allocations, and with
/// mimalloc it takes half the time (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // mimalloc asks for transparent huge pages on its arena, so the resident size grows in 2 MiB steps that are mostly
    // untouched (an idle gateway held 6 MiB of huge pages; without them its idle RSS fell from 18.5-21.3 to 15 MiB).
    // A sidecar's footprint matters more than the TLB misses saved; upstream processes inherit the setting. Failure
    // (an old kernel) changes nothing.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
    mcpgw::cli::run(std::env::args_os())
}
