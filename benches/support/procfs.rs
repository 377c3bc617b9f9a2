//! What `/proc` says about a process: resident memory, open descriptors, children, and the processes that carry an
//! environment marker (to find upstream processes that outlived the gateway, whoever their parent is now).

use std::collections::BTreeMap;

/// Resident set size in KiB (0 when the process is gone).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Open file descriptors by kind (`socket`, `pipe`, `anon_inode:[eventpoll]`, `file`, ...).
pub fn fds_by_kind(pid: u32) -> BTreeMap<String, u64> {
    let mut kinds = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return kinds };
    for entry in entries.flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else { continue };
        let target = target.to_string_lossy().into_owned();
        let kind = if target.starts_with('/') {
            "file".to_string()
        } else if let Some((kind, _)) = target.split_once(":[") {
            kind.to_string()
        } else {
            target
        };
        *kinds.entry(kind).or_default() += 1;
    }
    kinds
}

/// The process's sockets as `tcp <local port> -> <remote port> <state>` (or `unix <path>`), sorted: what a leaked
/// socket was connected to.
pub fn sockets(pid: u32) -> Vec<String> {
    let mut inodes = std::collections::BTreeSet::new();
    if let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for entry in entries.flatten() {
            let Ok(target) = std::fs::read_link(entry.path()) else { continue };
            let target = target.to_string_lossy().into_owned();
            if let Some(inode) = target.strip_prefix("socket:[").and_then(|t| t.strip_suffix(']')) {
                inodes.insert(inode.to_string());
            }
        }
    }
    let mut found = Vec::new();
    let port = |address: &str| {
        address.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok()).map_or(0, u32::from)
    };
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && inodes.remove(f[9]) {
                let state = match f[3] {
                    "01" => "ESTABLISHED",
                    "06" => "TIME_WAIT",
                    "07" => "CLOSE",
                    "08" => "CLOSE_WAIT",
                    "0A" => "LISTEN",
                    other => other,
                };
                found.push(format!("tcp {} -> {} {state}", port(f[1]), port(f[2])));
            }
        }
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap_or_default();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 6 && inodes.remove(f[6]) {
            found.push(format!("unix {}", f.get(7).copied().unwrap_or("(unnamed)")));
        }
    }
    found.extend(inodes.into_iter().map(|i| format!("other socket {i}")));
    found.sort();
    found
}

/// CPU time (user and system) used so far by `pid`, in microseconds (0 when the process is gone). The kernel counts
/// in clock ticks of 10 ms (`CLK_TCK` 100 on Linux), so a reading needs a few seconds of work to mean much.
pub fn cpu_micros(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    let Some(rest) = stat.rfind(')').and_then(|at| stat.get(at + 2..)) else { return 0 };
    // After the command name: state is field 3, utime field 14 and stime field 15.
    let fields: Vec<&str> = rest.split(' ').collect();
    let ticks = |i: usize| fields.get(i - 3).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks(14) + ticks(15)) * 10_000
}

/// The pid, parent pid and state of `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(u32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces; the fields after its closing one are fixed.
    let mut rest = stat.get(stat.rfind(')')? + 2..)?.split(' ');
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((ppid, state))
}

fn all_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect()
}

/// The live (not zombie) children of `parent`.
pub fn children(parent: u32) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|&pid| matches!(stat(pid), Some((ppid, state)) if ppid == parent && state != 'Z'))
        .collect()
}

/// Live processes whose environment holds `NAME=value` exactly (`marker` is that text).
pub fn processes_with_env(marker: &str) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|&pid| {
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { return false };
            environ.split(|&b| b == 0).any(|var| var == marker.as_bytes())
                && !matches!(stat(pid), Some((_, 'Z')) | None)
        })
        .collect()
}
