//! One pool of processes: those of one (MCP config, server) with one spec, and how many calls each is serving.
//!
//! A caller asks [`ServerPool::take`] what to do: use an idle process (the most recently used, so rarely needed ones
//! age out), start one when the pool is below its maximum, share the least busy process when the pool is full and
//! sharing is allowed (`calls_per_process` > 1), or wait. A call that leaves its process unusable (crash, timeout,
//! garbage) marks it failed: it takes no new calls and ends when its last call is done, so calls sharing it are not cut
//! off. The state sits behind a mutex that is never held across an await; waiters wait on `returned`, registered under
//! the lock so no hand-back is missed.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::lease::Verdict;
use super::process::UpstreamProcess;
use super::supervisor::{ProcessSet, StopMode};
use super::{PoolKey, PoolSettings, ServerSpec, lock};

/// What every server pool and lease reports to.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub processes: Arc<ProcessSet>,
    pub started: AtomicU64,
    pub restarts: AtomicU64,
    pub connect_attempts: AtomicU64,
    pub connect_timeouts: AtomicU64,
    pub shutting_down: AtomicBool,
}

/// The processes of one (key, spec).
pub(super) struct ServerPool {
    pub key: PoolKey,
    pub spec: ServerSpec,
    /// The server's name, for logs.
    pub label: Arc<str>,
    shared: Arc<Shared>,
    state: Mutex<ServerState>,
    /// Signalled when a call ends or a place frees up, and (to all) when the pool is retired.
    pub returned: Notify,
}

#[derive(Default)]
struct ServerState {
    entries: Vec<Entry>,
    /// Places taken by processes being started.
    starting: usize,
    /// No longer in the map: processes end when their calls are done, and callers look the pool up again.
    retired: bool,
}

struct Entry {
    process: Arc<UpstreamProcess>,
    /// Calls it is serving now.
    calls: usize,
    /// When it last became idle.
    since: Instant,
    /// Set when a call left it unusable: it takes no new calls and ends this way once its calls are done.
    failed: Option<StopMode>,
}

impl Entry {
    fn usable(&self) -> bool {
        self.failed.is_none()
    }
}

/// What a caller does after looking at a pool.
pub(super) enum Take {
    Use(Arc<UpstreamProcess>),
    Start,
    Wait,
    LookUpAgain,
}

impl ServerPool {
    pub(super) fn new(key: PoolKey, spec: ServerSpec, shared: Arc<Shared>) -> ServerPool {
        ServerPool {
            label: Arc::from(key.server_name.as_str()),
            key,
            spec,
            shared,
            state: Mutex::default(),
            returned: Notify::new(),
        }
    }

    pub(super) fn shutting_down(&self) -> bool {
        self.shared.shutting_down.load(Ordering::SeqCst)
    }

    /// Decides under the lock what a caller does; registers `returned` before unlocking when it has to wait.
    pub(super) fn take(&self, max: usize, calls_per_process: usize, returned: Pin<&mut Notified<'_>>) -> Take {
        let mut state = lock(&self.state);
        if state.retired {
            return Take::LookUpAgain;
        }
        let dead = remove_gone(&mut state.entries);
        self.count_restarts(dead.len());
        let idle = state.entries.iter_mut().filter(|entry| entry.usable() && entry.calls == 0);
        if let Some(entry) = idle.max_by_key(|entry| entry.since) {
            entry.calls = 1;
            return Take::Use(entry.process.clone());
        }
        if state.entries.len() + state.starting < max {
            state.starting += 1;
            return Take::Start;
        }
        let shareable = state.entries.iter_mut().filter(|entry| entry.usable() && entry.calls < calls_per_process);
        if let Some(entry) = shareable.min_by_key(|entry| entry.calls) {
            entry.calls += 1;
            return Take::Use(entry.process.clone());
        }
        returned.enable();
        Take::Wait
    }

    /// A started process joins the pool, serving the call that started it.
    pub(super) fn add_started(&self, process: UpstreamProcess) -> Arc<UpstreamProcess> {
        let process = Arc::new(process);
        {
            let mut state = lock(&self.state);
            state.starting = state.starting.saturating_sub(1);
            state.entries.push(Entry { process: process.clone(), calls: 1, since: Instant::now(), failed: None });
        }
        // Callers that waited while every place was taken by starts may share the new process.
        self.returned.notify_waiters();
        process
    }

    /// A call on `process` is done; `verdict` says whether the process is still usable.
    pub(super) fn check_in(&self, process: &Arc<UpstreamProcess>, verdict: Verdict) {
        let failure = match verdict {
            Verdict::End(mode) => Some(mode),
            Verdict::Keep if process.is_gone() => Some(StopMode::Kill),
            Verdict::Keep => None,
        };
        let ended = {
            let mut state = lock(&self.state);
            let retiring = state.retired || self.shutting_down();
            match state.entries.iter().position(|entry| Arc::ptr_eq(&entry.process, process)) {
                Some(index) => {
                    let entry = &mut state.entries[index];
                    entry.calls = entry.calls.saturating_sub(1);
                    entry.failed = entry.failed.max(failure);
                    if entry.calls > 0 {
                        None
                    } else if entry.failed.is_some() || retiring {
                        Some(state.entries.swap_remove(index))
                    } else {
                        entry.since = Instant::now();
                        None
                    }
                }
                // Not in the pool any more (shutdown took it): end it all the same.
                None => {
                    process.control().request_stop(failure.unwrap_or(StopMode::Graceful));
                    None
                }
            }
        };
        self.returned.notify_one();
        if let Some(entry) = ended {
            if entry.failed.is_some() {
                self.count_restarts(1);
            }
            entry.process.control().request_stop(entry.failed.unwrap_or(StopMode::Graceful));
        }
    }

    /// A place taken for a start is free again (the start failed or was cancelled).
    pub(super) fn release_slot(&self) {
        {
            let mut state = lock(&self.state);
            state.starting = state.starting.saturating_sub(1);
        }
        self.returned.notify_one();
    }

    /// Marks the pool retired and wakes its waiters. Idle processes are handed over (they end when dropped); busy ones
    /// end when their calls are done.
    pub(super) fn retire(&self) -> Vec<Arc<UpstreamProcess>> {
        let idle = {
            let mut state = lock(&self.state);
            state.retired = true;
            let (idle, busy) = std::mem::take(&mut state.entries).into_iter().partition(|entry| entry.calls == 0);
            state.entries = busy;
            idle
        };
        self.returned.notify_waiters();
        idle.into_iter().map(|entry| entry.process).collect()
    }

    /// Takes out the idle processes that should end now (idle too long, over a lowered maximum, or gone); the pool is
    /// retired when nothing is left in it.
    pub(super) fn expire(&self, now: Instant, settings: &PoolSettings) -> (Vec<Arc<UpstreamProcess>>, bool) {
        let mut state = lock(&self.state);
        let mut ended = remove_gone(&mut state.entries);
        self.count_restarts(ended.len());
        let mut over = (state.entries.len() + state.starting).saturating_sub(settings.max_processes_per_server.max(1));
        // Longest idle first, so a lowered maximum ends those.
        state.entries.sort_by_key(|entry| entry.since);
        let (expired, kept): (Vec<Entry>, Vec<Entry>) =
            std::mem::take(&mut state.entries).into_iter().partition(|entry| {
                let expire = entry.calls == 0
                    && (over > 0 || now.saturating_duration_since(entry.since) >= settings.idle_timeout);
                over = over.saturating_sub(usize::from(expire));
                expire
            });
        state.entries = kept;
        ended.extend(expired.into_iter().map(|entry| entry.process));
        let empty = state.entries.is_empty() && state.starting == 0;
        state.retired |= empty;
        (ended, empty)
    }

    /// Counts processes that ended abnormally, except while the pool is shutting down.
    fn count_restarts(&self, abnormal: usize) {
        if abnormal > 0 && !self.shutting_down() {
            self.shared.restarts.fetch_add(abnormal as u64, Ordering::Relaxed);
        }
    }
}

/// Removes the processes that died or lost their connection while serving no call, and returns them; those that did
/// so while serving calls take no new ones.
fn remove_gone(entries: &mut Vec<Entry>) -> Vec<Arc<UpstreamProcess>> {
    let (gone, mut alive): (Vec<Entry>, Vec<Entry>) =
        std::mem::take(entries).into_iter().partition(|entry| entry.calls == 0 && entry.process.is_gone());
    for entry in alive.iter_mut().filter(|entry| entry.process.is_gone()) {
        entry.failed = entry.failed.max(Some(StopMode::Kill));
    }
    *entries = alive;
    gone.into_iter().map(|entry| entry.process).collect()
}
