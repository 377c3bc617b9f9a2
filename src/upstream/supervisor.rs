//! The supervisor of one child process: the one task that owns the `tokio::process::Child` for its whole life.
//!
//! [`adopt`] registers a freshly spawned child in the pool's [`ProcessSet`] and hands it to [`supervise`], which waits
//! for either of two things: the process exits by itself (a crash), or someone asks it to end through its
//! [`ProcessControl`] with a [`StopMode`]. Ending signals the whole process group (SIGTERM, then SIGKILL after
//! [`STOP_GRACE`], or SIGKILL at once), so servers that are shell wrappers or spawn helpers leave nothing behind; after
//! the process is gone the group gets one more SIGKILL for stragglers. The supervisor then publishes how the process
//! ended and leaves the set, which is how shutdown knows when everything is gone.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::sync::watch;

use super::lock;

/// How long a process may take to exit after SIGTERM before it gets SIGKILL.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(2);

/// How a process is asked to end; `Kill` outranks `Graceful`, so a later graceful request never softens a kill.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum StopMode {
    /// SIGTERM to the group, SIGKILL after [`STOP_GRACE`].
    Graceful,
    /// SIGKILL to the group now (hung or misbehaving processes).
    Kill,
}

/// The shared handle to a process's supervisor: ask it to stop, see whether and how the process ended.
#[derive(Debug)]
pub(crate) struct ProcessControl {
    pid: u32,
    stop: watch::Sender<Option<StopMode>>,
    exit: watch::Receiver<Option<String>>,
}

impl ProcessControl {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Asks the supervisor to end the process (and its group); idempotent, and escalates only.
    pub fn request_stop(&self, mode: StopMode) {
        self.stop.send_if_modified(|current| {
            let escalate = current.is_none_or(|current| current < mode);
            if escalate {
                *current = Some(mode);
            }
            escalate
        });
    }

    pub fn has_exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// Waits until the process has ended and been reaped; returns how it ended ("exit code 1", "signal SIGKILL").
    pub async fn exited(&self) -> String {
        let mut exit = self.exit.clone();
        match exit.wait_for(Option::is_some).await {
            Ok(report) => report.clone().unwrap_or_default(),
            Err(_) => "ended".to_string(),
        }
    }

    /// How the process ended, waiting at most `patience` for the supervisor to see it.
    pub async fn exit_report(&self, patience: Duration) -> String {
        tokio::time::timeout(patience, self.exited()).await.unwrap_or_else(|_| "still running".to_string())
    }
}

/// Every live process of a pool, so shutdown can end the busy ones too.
#[derive(Debug, Default)]
pub(crate) struct ProcessSet {
    inner: Mutex<ProcessSetInner>,
}

#[derive(Debug, Default)]
struct ProcessSetInner {
    closed: bool,
    next_id: u64,
    live: HashMap<u64, Arc<ProcessControl>>,
}

impl ProcessSet {
    /// Adds a process; `None` once the set is closed (the caller must then end the process itself).
    fn register(&self, control: Arc<ProcessControl>) -> Option<u64> {
        let mut inner = lock(&self.inner);
        if inner.closed {
            return None;
        }
        inner.next_id += 1;
        let id = inner.next_id;
        inner.live.insert(id, control);
        Some(id)
    }

    fn remove(&self, id: u64) {
        lock(&self.inner).live.remove(&id);
    }

    pub fn len(&self) -> usize {
        lock(&self.inner).live.len()
    }

    /// Refuses further processes and returns those still alive. Idempotent.
    pub fn close(&self) -> Vec<Arc<ProcessControl>> {
        let mut inner = lock(&self.inner);
        inner.closed = true;
        inner.live.values().cloned().collect()
    }
}

/// Registers `child` (already running as `pid`) and starts its supervisor; `None` when the set is closed for shutdown,
/// in which case the child has been killed.
pub(crate) fn adopt(
    child: Child,
    pid: u32,
    processes: &Arc<ProcessSet>,
    label: Arc<str>,
) -> Option<Arc<ProcessControl>> {
    let (stop, stop_requests) = watch::channel(None);
    let (exit_sender, exit) = watch::channel(None);
    let control = Arc::new(ProcessControl { pid, stop, exit });
    let Some(id) = processes.register(control.clone()) else {
        signal_group(pid, Signal::SIGKILL);
        return None;
    };
    tokio::spawn(supervise(child, pid, stop_requests, exit_sender, processes.clone(), id, label));
    Some(control)
}

/// The one task that owns a child process: waits for it to exit or for a stop request, ends its group, reports.
async fn supervise(
    mut child: Child,
    pid: u32,
    mut stop_requests: watch::Receiver<Option<StopMode>>,
    exit: watch::Sender<Option<String>>,
    processes: Arc<ProcessSet>,
    id: u64,
    label: Arc<str>,
) {
    let status = tokio::select! {
        status = child.wait() => status,
        mode = next_stop(&mut stop_requests) => terminate(&mut child, pid, mode, &mut stop_requests).await,
    };
    // Stragglers: helpers the server started in its group and left running.
    signal_group(pid, Signal::SIGKILL);
    let report = match &status {
        Ok(status) => describe(*status),
        Err(error) => format!("wait failed: {error}"),
    };
    if stop_requests.borrow().is_some() {
        tracing::info!(server = %label, pid, status = %report, "upstream process ended");
    } else {
        tracing::warn!(server = %label, pid, status = %report, "upstream process exited by itself");
    }
    exit.send_replace(Some(report));
    processes.remove(id);
}

/// The first stop request; a dropped control counts as a graceful one.
async fn next_stop(stop_requests: &mut watch::Receiver<Option<StopMode>>) -> StopMode {
    match stop_requests.wait_for(Option::is_some).await {
        Ok(mode) => mode.unwrap_or(StopMode::Graceful),
        Err(_) => StopMode::Graceful,
    }
}

async fn terminate(
    child: &mut Child,
    pid: u32,
    mode: StopMode,
    stop_requests: &mut watch::Receiver<Option<StopMode>>,
) -> std::io::Result<ExitStatus> {
    if mode == StopMode::Graceful {
        signal_group(pid, Signal::SIGTERM);
        let escalated = async {
            if stop_requests.wait_for(|mode| *mode == Some(StopMode::Kill)).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            status = child.wait() => return status,
            () = tokio::time::sleep(STOP_GRACE) => {}
            () = escalated => {}
        }
    }
    signal_group(pid, Signal::SIGKILL);
    child.wait().await
}

/// Sends `signal` to the process group `pgid` (our children lead their own groups). Never signals group 0 or 1.
fn signal_group(pgid: u32, signal: Signal) {
    let Ok(raw) = i32::try_from(pgid) else { return };
    if raw <= 1 {
        return;
    }
    match killpg(Pid::from_raw(raw), signal) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(error) => tracing::debug!(pgid, %signal, %error, "signalling the upstream process group failed"),
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("signal {signal}"),
            Err(_) => format!("signal {signal}"),
        },
        (None, None) => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_requests_only_escalate() {
        let (stop, _requests) = watch::channel(None);
        let (_exit_sender, exit) = watch::channel(None);
        let control = ProcessControl { pid: 0, stop, exit };
        assert_eq!(*control.stop.borrow(), None);
        control.request_stop(StopMode::Kill);
        control.request_stop(StopMode::Graceful);
        assert_eq!(*control.stop.borrow(), Some(StopMode::Kill));
    }

    #[test]
    fn exit_statuses_are_described() {
        assert_eq!(describe(ExitStatus::from_raw(1 << 8)), "exit code 1");
        assert_eq!(describe(ExitStatus::from_raw(9)), "signal SIGKILL");
    }

    #[tokio::test]
    async fn a_closed_set_refuses_processes_and_reports_live_ones() {
        let set = ProcessSet::default();
        let (stop, _requests) = watch::channel(None);
        let (_exit_sender, exit) = watch::channel(None);
        let control = Arc::new(ProcessControl { pid: 0, stop, exit });
        let id = set.register(control.clone()).unwrap();
        assert_eq!(set.len(), 1);
        assert_eq!(set.close().len(), 1);
        assert!(set.register(control).is_none());
        set.remove(id);
        assert_eq!(set.len(), 0);
    }
}
