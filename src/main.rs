//! The `mcpgw` binary: parse the command line and run it (see `mcpgw::cli`).

#![forbid(unsafe_code)]

/// mimalloc instead of the system allocator: loading a large config is dominated by small allocations, and with
/// mimalloc it takes half the time (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    restart_with_allocator_options();
    // mimalloc asks for transparent huge pages on its arena, so the resident size grows in 2 MiB steps that are mostly
    // untouched (an idle gateway held 6 MiB of huge pages; without them its idle RSS fell from 18.5-21.3 to 15 MiB).
    // A sidecar's footprint matters more than the TLB misses saved; upstream processes inherit the setting. Failure
    // (an old kernel) changes nothing.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
    mcpgw::cli::run(std::env::args_os())
}

/// mimalloc's options, read from the environment when the process starts (before `main`), so the binary starts itself
/// again once with them set, unless the environment sets them already (a failure to do so, no `/proc/self/exe` say,
/// changes nothing else):
/// - `MIMALLOC_PURGE_DELAY=0`: mimalloc keeps the pages that freed memory occupied until the thread that freed them
///   allocates again; after a large answer (a batch of big results) an idle gateway would hold that memory for good.
///   With 0 it gives pages back to the OS as soon as they are free, so resident memory is back near idle right after
///   the answer (contract 13; the figures are in BENCHMARKS.md).
/// - `MIMALLOC_ARENA_EAGER_COMMIT=0`: memory of its arena is committed as it is used rather than in large steps up
///   front: 3 MiB less resident when idle, 2 MiB less after load with 16 worker threads (BENCHMARKS.md).
#[cfg(target_os = "linux")]
fn restart_with_allocator_options() {
    use std::os::unix::process::CommandExt;
    const OPTIONS: [(&str, &str); 2] = [("MIMALLOC_PURGE_DELAY", "0"), ("MIMALLOC_ARENA_EAGER_COMMIT", "0")];
    let missing: Vec<(&str, &str)> = OPTIONS.into_iter().filter(|(name, _)| std::env::var_os(name).is_none()).collect();
    if missing.is_empty() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(name) = args.next() {
        command.arg0(name);
    }
    // `exec` returns only when it failed: carry on as we are.
    let _ = command.args(args).envs(missing).exec();
}
