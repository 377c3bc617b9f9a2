//! The `mcpgw` binary: parse the command line and run it (see `mcpgw::cli`).

#![forbid(unsafe_code)]

/// jemalloc instead of the system allocator: loading a large config is dominated by small allocations, which glibc's
/// allocator makes twice as slow, and glibc keeps far more memory after load (62 MiB against 24 with 16 worker
/// threads). jemalloc rather than mimalloc: with its options below it costs no more CPU per call and holds a third less
/// memory with many worker threads (BENCHMARKS.md, "One allocator arena").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    restart_with_allocator_options();
    // Transparent huge pages make the resident size grow in 2 MiB steps that are mostly untouched (an idle gateway
    // held 6 MiB of them). A sidecar's footprint matters more than the TLB misses saved; upstream processes inherit
    // the setting. Failure (an old kernel) changes nothing.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_thp_disable(true);
    mcpgw::cli::run(std::env::args_os())
}

/// jemalloc's options, read from the environment when the process starts (before `main`), so the binary starts itself
/// again once with them set, unless the environment sets `_RJEM_MALLOC_CONF` already (a failure to do so, no
/// `/proc/self/exe` say, changes nothing else). Each option was measured (BENCHMARKS.md, "One allocator arena"):
/// - `narenas:1`: one arena for every thread. By default each CPU gets four, and every arena keeps partly used pages
///   of its own, so memory after load grew with the worker threads. The threads share its lock; the thread caches
///   below serve most allocations without taking it (CPU per call measured the same as with mimalloc).
/// - `tcache_nslots_small_max:16`, `tcache_nslots_large:2`, `tcache_gc_incr_bytes:8192`: each thread caches at most
///   16 blocks per small size class and 2 per large one, and hands back what it has not used sooner. The default
///   caches (up to 200 blocks per class) held 6 MiB with 16 worker threads, and cost no less CPU per call.
/// - `dirty_decay_ms:0`, `muzzy_decay_ms:0`: freed pages go back to the OS at once rather than over 10 seconds, so
///   resident memory is back near idle right after a large answer (contract 13).
#[cfg(target_os = "linux")]
fn restart_with_allocator_options() {
    use std::os::unix::process::CommandExt;
    const CONF: &str = "_RJEM_MALLOC_CONF";
    const OPTIONS: &str = "narenas:1,tcache_nslots_small_max:16,tcache_nslots_large:2,tcache_gc_incr_bytes:8192,\
                           dirty_decay_ms:0,muzzy_decay_ms:0";
    if std::env::var_os(CONF).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(name) = args.next() {
        command.arg0(name);
    }
    // `exec` returns only when it failed: carry on as we are.
    let _ = command.args(args).env(CONF, OPTIONS).exec();
}
