//! One pool of processes: those of one (MCP config, server) with one spec. Its state (idle processes, how many are
//! lent, whether it is retired) sits behind a mutex that is never held across an await; callers that must wait for a
//! process wait on its `Notify`, registered under the lock so no hand-back is missed.

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
    /// Signalled when a process or a place to start one becomes free, and (to all) when the pool is retired.
    pub returned: Notify,
}

#[derive(Default)]
struct ServerState {
    /// Oldest first; calls take from the end, so rarely needed processes age out.
    idle: Vec<IdleProcess>,
    /// Processes lent out or starting.
    lent: usize,
    /// No longer in the map: lent processes end when they come back, and callers look the pool up again.
    retired: bool,
}

pub(super) struct IdleProcess {
    process: UpstreamProcess,
    since: Instant,
}

/// What a caller does after looking at a pool.
pub(super) enum Take {
    Idle(UpstreamProcess),
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
    pub(super) fn take(&self, max: usize, returned: Pin<&mut Notified<'_>>) -> Take {
        let mut dead = Vec::new();
        let take = {
            let mut state = lock(&self.state);
            loop {
                if state.retired {
                    break Take::LookUpAgain;
                }
                match state.idle.pop() {
                    Some(idle) if idle.process.is_gone() => dead.push(idle.process),
                    Some(idle) => {
                        state.lent += 1;
                        break Take::Idle(idle.process);
                    }
                    None if state.lent < max => {
                        state.lent += 1;
                        break Take::Start;
                    }
                    None => {
                        returned.enable();
                        break Take::Wait;
                    }
                }
            }
        };
        self.count_restarts(&dead);
        take
    }

    /// A process comes back from a lease.
    pub(super) fn check_in(&self, process: UpstreamProcess, verdict: Verdict) {
        let unusable = match verdict {
            Verdict::End(mode) => Some(mode),
            Verdict::Keep if process.is_gone() => Some(StopMode::Kill),
            Verdict::Keep => None,
        };
        let mut ending = None;
        {
            let mut state = lock(&self.state);
            state.lent = state.lent.saturating_sub(1);
            match unusable {
                Some(mode) => {
                    process.control().request_stop(mode);
                    ending = Some(process);
                }
                None if state.retired || self.shutting_down() => ending = Some(process),
                None => state.idle.push(IdleProcess { process, since: Instant::now() }),
            }
        }
        self.returned.notify_one();
        if unusable.is_some() {
            self.count_restarts(ending.as_slice());
        }
        drop(ending);
    }

    /// A place taken for a start is free again (the start failed or was cancelled).
    pub(super) fn release_slot(&self) {
        {
            let mut state = lock(&self.state);
            state.lent = state.lent.saturating_sub(1);
        }
        self.returned.notify_one();
    }

    /// Marks the pool retired, wakes its waiters and hands over its idle processes (which end when dropped).
    pub(super) fn retire(&self) -> Vec<IdleProcess> {
        let idle = {
            let mut state = lock(&self.state);
            state.retired = true;
            std::mem::take(&mut state.idle)
        };
        self.returned.notify_waiters();
        idle
    }

    /// Takes out the idle processes that should end now; the pool is retired when it has nothing left at all.
    pub(super) fn expire(&self, now: Instant, settings: &PoolSettings) -> (Vec<UpstreamProcess>, bool) {
        let mut ended = Vec::new();
        let mut dead = Vec::new();
        let empty = {
            let mut state = lock(&self.state);
            let (alive, exited): (Vec<IdleProcess>, Vec<IdleProcess>) =
                std::mem::take(&mut state.idle).into_iter().partition(|idle| !idle.process.is_gone());
            dead.extend(exited.into_iter().map(|idle| idle.process));
            let mut over = (alive.len() + state.lent).saturating_sub(settings.max_processes_per_server.max(1));
            let mut kept = Vec::with_capacity(alive.len());
            // Oldest first, so a lowered maximum ends the longest idle processes.
            for idle in alive {
                if over > 0 || now.saturating_duration_since(idle.since) >= settings.idle_timeout {
                    over = over.saturating_sub(1);
                    ended.push(idle.process);
                } else {
                    kept.push(idle);
                }
            }
            state.idle = kept;
            let empty = state.idle.is_empty() && state.lent == 0;
            state.retired |= empty;
            empty
        };
        self.count_restarts(&dead);
        ended.extend(dead);
        (ended, empty)
    }

    /// Counts processes that ended abnormally, except those the pool itself stopped for shutting down.
    fn count_restarts(&self, processes: &[UpstreamProcess]) {
        let abnormal = processes.len() as u64;
        if abnormal > 0 && !self.shutting_down() {
            self.shared.restarts.fetch_add(abnormal, Ordering::Relaxed);
        }
    }
}
