//! One pool of processes: those of one (MCP config, server) with one spec (and, for `per_session` servers, one MCP
//! session, or one key's stateless calls: see [`Tenancy`]), the calls they serve, and the starts under way.
//!
//! A caller asks [`ServerPool::take`] what to do: use an idle process (the most recently used, so rarely needed ones
//! age out), start one when the pool is below its maximum, share the least busy process when the pool is full and
//! sharing is allowed (`calls_per_process` > 1), or wait. A start runs as a task of its own ([`ServerPool::begin_start`])
//! bounded by `start_timeout_seconds`, never by a caller's patience: a caller that gives up leaves the start running,
//! and the process joins the pool as idle when it is ready, for whoever asks next. A caller starts a process only when
//! the starts under way do not already cover the callers waiting, so a replacement started in the background serves
//! the next caller and a cold burst makes at most `max_processes_per_server` starts.
//!
//! Failed starts are remembered: a caller that waited for a start that failed gets its error, and after
//! [`COOL_DOWN_AFTER`] failures in a row the pool cools down (1 s, doubling up to [`MAX_COOL_DOWN`]); calls then fail
//! at once and nothing is spawned until it is over. A call that leaves its process unusable (crash, timeout, garbage)
//! marks it failed: it takes no new calls, ends when its last call is done, and a replacement starts at once, so the
//! next call of the same batch does not pay a cold start. The state sits behind a mutex that is never held across an
//! await; waiters wait on `returned`, registered under the lock so no hand-back or finished start is missed.
//!
//! The processes of a `per_session` server are also counted across its pools (`budget.rs`): a start takes a place
//! there first, and a caller that finds the server's or its key's places all taken waits ([`Take::Wait`] says which
//! limit) for one to free up.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::budget::{Full, KeyId, ProcessBudget, Slot};
use super::lease::Verdict;
use super::process::{self, Connections, StartOptions, UpstreamProcess};
use super::relay::ServerEvent;
use super::supervisor::{ProcessSet, StopMode};
use super::{PoolKey, PoolSettings, ServerSpec, UpstreamError, lock};

/// Failed starts in a row after which a server cools down.
pub(super) const COOL_DOWN_AFTER: u32 = 3;
/// The longest cool-down.
pub(super) const MAX_COOL_DOWN: Duration = Duration::from_secs(60);

/// What every server pool and lease reports to, and the settings they all follow.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub processes: Arc<ProcessSet>,
    pub connections: Arc<Connections>,
    /// The places of `per_session` processes, per server and per key.
    pub budget: Arc<ProcessBudget>,
    pub settings: Mutex<PoolSettings>,
    pub max_message_bytes: AtomicUsize,
    pub calls_per_process: AtomicUsize,
    pub started: AtomicU64,
    pub restarts: AtomicU64,
    pub start_attempts: AtomicU64,
    pub start_failures: AtomicU64,
    pub start_timeouts: AtomicU64,
    pub shutting_down: AtomicBool,
    /// Told what a process says that belongs to no call.
    pub events: Mutex<Listener>,
}

/// What the pool's owner is told when an upstream says something that belongs to no call: the server's key and
/// the event.
pub type PoolEvents = Arc<dyn Fn(&PoolKey, ServerEvent) + Send + Sync>;

/// The pool's [`PoolEvents`], if its owner gave one.
#[derive(Clone, Default)]
pub(super) struct Listener(pub Option<PoolEvents>);

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Listener(set)" } else { "Listener(none)" })
    }
}

/// Whose calls a pool serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Tenancy {
    /// Every caller's (a shared server): up to `max_processes_per_server` processes, ended after `idle_timeout`.
    Shared,
    /// One MCP session's (a `per_session` server): one process for all the session's calls, which ends with the
    /// session.
    Session(Arc<str>),
    /// One key's stateless calls to a `per_session` server: processes serving one call at a time, ended after
    /// `idle_process_timeout`. No relayed message can then reach a call it does not belong to.
    Key,
}

/// The processes of one (key, spec, tenancy).
pub(super) struct ServerPool {
    pub key: PoolKey,
    pub spec: ServerSpec,
    pub tenancy: Tenancy,
    /// The key whose processes these are (pools other than [`Tenancy::Shared`]), counted in the budget.
    pub owner: Option<KeyId>,
    /// The client capabilities its processes are told (a session's pool: what its client declared).
    pub declares: super::Declared,
    /// The server's name, for logs.
    pub label: Arc<str>,
    shared: Arc<Shared>,
    state: Mutex<ServerState>,
    /// Signalled when a call ends, a place frees up or a start ends, and (to all) when the pool is retired.
    pub returned: Notify,
}

#[derive(Default)]
struct ServerState {
    entries: Vec<Entry>,
    /// Starts under way.
    starting: usize,
    /// Callers waiting for a process (see [`ServerPool::waiting`]), including those waiting for a place in the budget.
    waiting: usize,
    /// No longer in the map: processes end when their calls are done, and callers look the pool up again.
    retired: bool,
    /// Failed starts since the last successful one.
    failures_in_row: u32,
    /// Every failed start of this pool; a caller compares it with the value it saw first.
    failure_seq: u64,
    last_failure: Option<Arc<str>>,
    cool_down_until: Option<Instant>,
}

struct Entry {
    process: Arc<UpstreamProcess>,
    /// Its place in the budget (a `per_session` server's process), given back when it leaves the pool.
    _slot: Option<Slot>,
    /// Calls it is serving now.
    calls: usize,
    /// When it last became idle.
    since: Instant,
    /// Set when a call left it unusable: it takes no new calls and ends this way once its calls are done.
    failed: Option<StopMode>,
    /// Tasks it runs for the gateway's clients (`task_hold.rs`): while any, it does not idle out, and a retired pool
    /// keeps it until they end.
    tasks: usize,
    /// Told a client's roots ([`Verdict::Retire`]): it takes no new call, serves its tasks, and ends when idle.
    retiring: bool,
}

impl Entry {
    /// Whether it may take a new call.
    fn usable(&self) -> bool {
        self.failed.is_none() && !self.retiring
    }

    /// Whether it may serve the requests of a task it already runs.
    fn serves_its_tasks(&self) -> bool {
        self.failed.is_none()
    }

    /// Whether it ends now: nothing of its own left to serve, and a reason to end.
    fn done(&self, retiring_pool: bool) -> bool {
        self.calls == 0 && (self.failed.is_some() || ((retiring_pool || self.retiring) && self.tasks == 0))
    }
}

/// What a caller does after looking at a pool.
pub(super) enum Take {
    Use(Arc<UpstreamProcess>),
    /// A place was taken for a new process (and its place in the budget, for a `per_session` server): the caller
    /// begins the start ([`ServerPool::begin_start`]), then waits.
    Start(Option<Slot>),
    /// Wait for `returned`; `starts_under_way` says whether a start may end the wait, `full` whether the budget
    /// keeps this pool from starting one (then a place freed anywhere may end it too).
    Wait {
        starts_under_way: bool,
        full: Option<Full>,
    },
    LookUpAgain,
    /// The start this caller waited for failed, and nothing else can serve it.
    Failed(Arc<str>),
    /// The server is cooling down after failed starts.
    CoolingDown {
        failures: u32,
        retry_after: Duration,
        last: Arc<str>,
    },
}

impl ServerPool {
    pub(super) fn new(
        key: PoolKey,
        spec: ServerSpec,
        tenancy: Tenancy,
        owner: Option<KeyId>,
        declares: super::Declared,
        shared: Arc<Shared>,
    ) -> ServerPool {
        ServerPool {
            label: Arc::from(key.server_name.as_str()),
            key,
            spec,
            tenancy,
            owner,
            declares,
            shared,
            state: Mutex::default(),
            returned: Notify::new(),
        }
    }

    pub(super) fn shutting_down(&self) -> bool {
        self.shared.shutting_down.load(Ordering::SeqCst)
    }

    /// Processes this pool may have: a session's pool has one, which serves all the session's calls.
    fn max_processes(&self) -> usize {
        match self.tenancy {
            Tenancy::Session(_) => 1,
            // A user's own pool of a `per_user` server (contract 16).
            Tenancy::Shared if self.key.user.is_some() => {
                lock(&self.shared.settings).max_processes_per_user_server.max(1)
            }
            Tenancy::Shared | Tenancy::Key => lock(&self.shared.settings).max_processes_per_server.max(1),
        }
    }

    fn calls_per_process(&self) -> usize {
        match self.tenancy {
            Tenancy::Session(_) => usize::MAX,
            Tenancy::Shared => self.shared.calls_per_process.load(Ordering::Relaxed).max(1),
            Tenancy::Key => 1,
        }
    }

    /// Whether it holds a process that is running (or starting), without starting one.
    pub(super) fn has_process(&self) -> bool {
        let state = lock(&self.state);
        !state.retired && (state.starting > 0 || state.entries.iter().any(|entry| entry.usable()))
    }

    /// Adds what it holds now to `status` (see [`super::ServerStatus`]).
    pub(super) fn add_status(&self, status: &mut super::ServerStatus) {
        let state = lock(&self.state);
        if state.retired {
            return;
        }
        status.processes += state.entries.len();
        status.starting += state.starting;
        status.calls += state.entries.iter().map(|entry| entry.calls).sum::<usize>();
        if state.failures_in_row > 0 && status.failing.is_none() {
            status.failing = state.last_failure.as_deref().map(str::to_string);
        }
    }

    /// Whether its processes are counted in the budget (those of a `per_session` server).
    pub(super) fn counted(&self) -> bool {
        self.tenancy != Tenancy::Shared
    }

    /// A place in the budget for one more process, when this pool's processes are counted there.
    fn reserve(&self) -> Result<Option<Slot>, Full> {
        if !self.counted() {
            return Ok(None);
        }
        let (per_server, per_key) = {
            let settings = lock(&self.shared.settings);
            (settings.max_processes_per_server, settings.max_processes_per_key)
        };
        // Counted per server, whatever the user of a `per_user` server's pool.
        self.shared.budget.reserve(&self.key.server_key(), self.owner, per_server, per_key).map(Some)
    }

    /// Decides under the lock what a caller does; registers `returned` before unlocking when it has to wait (also
    /// after [`Take::Start`]), and then counts the caller as waiting: it must hold [`ServerPool::waiting`] until its
    /// wait ends. `seen_failures` is the pool's failure count when this caller first looked.
    pub(super) fn take(&self, seen_failures: &mut Option<u64>, returned: Pin<&mut Notified<'_>>) -> Take {
        let (max, calls_per_process) = (self.max_processes(), self.calls_per_process());
        let mut state = lock(&self.state);
        if state.retired {
            return Take::LookUpAgain;
        }
        let dead = remove_gone(&mut state.entries);
        self.count_restarts(dead.len());
        let seen = *seen_failures.get_or_insert(state.failure_seq);
        let idle = state.entries.iter_mut().filter(|entry| entry.usable() && entry.calls == 0);
        if let Some(entry) = idle.max_by_key(|entry| entry.since) {
            entry.calls = 1;
            return Take::Use(entry.process.clone());
        }
        let usable = state.entries.iter().filter(|entry| entry.usable()).count();
        if state.failure_seq > seen
            && state.starting == 0
            && usable == 0
            && let Some(last) = &state.last_failure
        {
            return Take::Failed(last.clone());
        }
        if let Some(until) = state.cool_down_until
            && let Some(retry_after) = until.checked_duration_since(Instant::now()).filter(|left| !left.is_zero())
        {
            let last = state.last_failure.clone().unwrap_or_else(|| Arc::from("unknown"));
            return Take::CoolingDown { failures: state.failures_in_row, retry_after, last };
        }
        // A start for this caller, unless the starts under way already cover every waiting caller (a replacement
        // started in the background, or the starts of a cold burst): then it waits for one of those.
        let mut full = None;
        if usable + state.starting < max && state.starting <= state.waiting {
            match self.reserve() {
                Ok(slot) => {
                    state.starting += 1;
                    state.waiting += 1;
                    returned.enable();
                    return Take::Start(slot);
                }
                Err(which) => full = Some(which),
            }
        }
        let shareable = state.entries.iter_mut().filter(|entry| entry.usable() && entry.calls < calls_per_process);
        if let Some(entry) = shareable.min_by_key(|entry| entry.calls) {
            entry.calls += 1;
            return Take::Use(entry.process.clone());
        }
        state.waiting += 1;
        returned.enable();
        Take::Wait { starts_under_way: state.starting > 0, full }
    }

    /// The caller that [`ServerPool::take`] counted as waiting stops being counted when this guard drops (woken or
    /// cancelled), so the starts follow the callers that wait for them.
    pub(super) fn waiting(&self) -> Waiting<'_> {
        Waiting(self)
    }

    /// Starts the first process of an empty pool ahead of any call (`upstream_pool.prestart`); nothing when the pool
    /// has a process, a start under way, or is cooling down.
    pub(super) fn prestart(self: &Arc<Self>) {
        {
            let mut state = lock(&self.state);
            let cooling = state.cool_down_until.is_some_and(|until| until > Instant::now());
            if state.retired || cooling || state.starting > 0 || !state.entries.is_empty() {
                return;
            }
            state.starting += 1;
        }
        self.begin_start(None);
    }

    /// Runs one start (for which a place was taken, and `slot` in the budget) as a task of its own; the process joins
    /// the pool as idle, with its slot.
    pub(super) fn begin_start(self: &Arc<Self>, slot: Option<Slot>) {
        let server = Arc::clone(self);
        let shared = &self.shared;
        shared.start_attempts.fetch_add(1, Ordering::Relaxed);
        let settings = lock(&shared.settings).clone();
        let options = StartOptions {
            label: self.label.clone(),
            max_message_bytes: shared.max_message_bytes.load(Ordering::Relaxed),
            start_timeout: settings.start_timeout,
            connect_timeout: settings.connect_timeout,
            connections: Arc::clone(&shared.connections),
            declares: self.declares,
        };
        tokio::spawn(async move {
            match process::start(&server.spec, &options, &server.shared.processes).await {
                Ok(process) => server.add_started(process, slot),
                Err(failure) => {
                    drop(slot);
                    server.start_failed(failure.error, failure.timed_out)
                }
            }
        });
    }

    /// A started process joins the pool, idle, and every waiter looks again.
    fn add_started(&self, process: UpstreamProcess, slot: Option<Slot>) {
        if let Some(listener) = lock(&self.shared.events).0.clone() {
            let key = self.key.clone();
            process.on_events(Arc::new(move |event| listener(&key, event)));
        }
        let process = Arc::new(process);
        let joined = {
            let mut state = lock(&self.state);
            state.starting = state.starting.saturating_sub(1);
            let joined = !state.retired && !self.shutting_down();
            if joined {
                let entry = Entry {
                    process: process.clone(),
                    _slot: slot,
                    calls: 0,
                    since: Instant::now(),
                    failed: None,
                    tasks: 0,
                    retiring: false,
                };
                state.entries.push(entry);
                state.failures_in_row = 0;
                state.cool_down_until = None;
                self.shared.started.fetch_add(1, Ordering::Relaxed);
            }
            joined
        };
        if !joined {
            // The configuration changed or the gateway is stopping while it started: it ends (on drop) unused.
            tracing::info!(server = %self.label, pid = process.pid(), "a process started for a retired pool ends");
        }
        self.returned.notify_waiters();
    }

    /// A start failed: remember why, cool down after too many in a row, and let the waiters see it.
    fn start_failed(&self, error: UpstreamError, timed_out: bool) {
        // A start cut short by the shutdown is no failure of the server.
        if matches!(error, UpstreamError::ShuttingDown) || self.shutting_down() {
            let mut state = lock(&self.state);
            state.starting = state.starting.saturating_sub(1);
            drop(state);
            self.returned.notify_waiters();
            return;
        }
        let message: Arc<str> = Arc::from(match &error {
            UpstreamError::Start(message) => message.clone(),
            other => other.to_string(),
        });
        self.shared.start_failures.fetch_add(1, Ordering::Relaxed);
        if timed_out {
            self.shared.start_timeouts.fetch_add(1, Ordering::Relaxed);
        }
        let (failures, cool_down) = {
            let mut state = lock(&self.state);
            state.starting = state.starting.saturating_sub(1);
            state.failure_seq += 1;
            state.failures_in_row += 1;
            state.last_failure = Some(message.clone());
            let cool_down = cool_down_after(state.failures_in_row);
            if let Some(cool_down) = cool_down {
                state.cool_down_until = Some(Instant::now() + cool_down);
            }
            (state.failures_in_row, cool_down)
        };
        match cool_down {
            Some(cool_down) => tracing::warn!(server = %self.label, failures, cool_down_seconds = cool_down.as_secs(),
                error = %message, "upstream process did not start; cooling the server down"),
            None => tracing::warn!(server = %self.label, failures, error = %message, "upstream process did not start"),
        }
        self.returned.notify_waiters();
    }

    /// A call on `process` is done; `verdict` says whether the process is still usable. A process the call left
    /// unusable is replaced at once (when the pool is live), so the next call finds a process ready or starting.
    /// Whether this pool's processes serve every caller ([`Tenancy::Shared`]).
    pub(super) fn serves_everyone(&self) -> bool {
        self.tenancy == Tenancy::Shared
    }

    pub(super) fn check_in(self: &Arc<Self>, process: &Arc<UpstreamProcess>, verdict: Verdict) {
        let failure = match verdict {
            Verdict::End(mode) => Some(mode),
            Verdict::Keep | Verdict::Retire if process.is_gone() => Some(StopMode::Kill),
            Verdict::Keep | Verdict::Retire => None,
        };
        // Only a call that failed its process may start a replacement, so only then are the settings read.
        let max = failure.map(|_| self.max_processes()).unwrap_or(0);
        let (ended, replace) = {
            let mut state = lock(&self.state);
            let retiring = state.retired || self.shutting_down();
            match state.entries.iter().position(|entry| Arc::ptr_eq(&entry.process, process)) {
                Some(index) => {
                    let entry = &mut state.entries[index];
                    let newly_failed = failure.is_some() && entry.failed.is_none();
                    entry.calls = entry.calls.saturating_sub(1);
                    entry.failed = entry.failed.max(failure);
                    // Told a client's roots: no new call, its tasks served, ended when idle (no restart counted).
                    entry.retiring |= verdict == Verdict::Retire;
                    let mut ended = if entry.done(retiring) {
                        Some(state.entries.swap_remove(index))
                    } else {
                        if entry.calls == 0 {
                            entry.since = Instant::now();
                        }
                        None
                    };
                    let usable = state.entries.iter().filter(|entry| entry.usable()).count();
                    // The process that ended gave its place in the budget back: the replacement takes one, if free.
                    drop(ended.as_mut().and_then(|entry| entry._slot.take()));
                    let replace = (newly_failed && !retiring && usable + state.starting < max)
                        .then(|| self.reserve().ok())
                        .flatten();
                    if replace.is_some() {
                        state.starting += 1;
                    }
                    (ended, replace)
                }
                // Not in the pool any more (shutdown took it): end it all the same.
                None => {
                    process.stop(failure.unwrap_or(StopMode::Graceful));
                    (None, None)
                }
            }
        };
        self.returned.notify_one();
        if let Some(entry) = ended {
            if entry.failed.is_some() {
                self.count_restarts(1);
            } else if entry.retiring {
                tracing::info!(server = %self.label, "an upstream process told a client's roots ends: it serves no other caller");
            }
            entry.process.stop(entry.failed.unwrap_or(StopMode::Graceful));
        }
        if let Some(slot) = replace {
            tracing::info!(server = %self.label, "replacing an upstream process that a call left unusable");
            self.begin_start(slot);
        }
    }

    /// Marks the pool retired and wakes its waiters. Idle processes are handed over (they end when dropped); busy ones
    /// end when their calls are done.
    pub(super) fn retire(&self) -> Vec<Arc<UpstreamProcess>> {
        let idle = {
            let mut state = lock(&self.state);
            state.retired = true;
            let (idle, busy) =
                std::mem::take(&mut state.entries).into_iter().partition(|entry| entry.calls == 0 && entry.tasks == 0);
            state.entries = busy;
            idle
        };
        self.returned.notify_waiters();
        idle.into_iter().map(|entry| entry.process).collect()
    }

    /// Takes out the idle processes that should end now (idle too long, over a lowered maximum, or gone); the pool is
    /// retired when nothing is left in it. A session's process does not idle out: it ends with its session; a key's
    /// processes of a `per_session` server end after `idle_process_timeout`.
    pub(super) fn expire(&self, now: Instant, settings: &PoolSettings) -> (Vec<Arc<UpstreamProcess>>, bool) {
        let max = self.max_processes();
        let idle_timeout = match self.tenancy {
            Tenancy::Shared => settings.idle_timeout,
            Tenancy::Session(_) => Duration::MAX,
            Tenancy::Key => settings.idle_process_timeout,
        };
        let mut state = lock(&self.state);
        let mut ended = remove_gone(&mut state.entries);
        self.count_restarts(ended.len());
        let mut over = (state.entries.len() + state.starting).saturating_sub(max);
        // Longest idle first, so a lowered maximum ends those.
        state.entries.sort_by_key(|entry| entry.since);
        let (expired, kept): (Vec<Entry>, Vec<Entry>) =
            std::mem::take(&mut state.entries).into_iter().partition(|entry| {
                let expire = entry.calls == 0
                    && entry.tasks == 0
                    && (over > 0 || now.saturating_duration_since(entry.since) >= idle_timeout);
                over = over.saturating_sub(usize::from(expire));
                expire
            });
        state.entries = kept;
        ended.extend(expired.into_iter().map(|entry| entry.process));
        // A pool that is cooling down is kept (with its memory of the failures) until the cool-down is over.
        let cooling = state.cool_down_until.is_some_and(|until| until > now);
        let empty = state.entries.is_empty() && state.starting == 0 && !cooling;
        state.retired |= empty;
        (ended, empty)
    }

    /// Takes out its longest idle process when it has been idle for `idle_for` at least, for a caller that waits for
    /// a place in the budget (the process ends when dropped, and its place frees up).
    pub(super) fn end_one_idle(&self, now: Instant, idle_for: Duration) -> Option<Arc<UpstreamProcess>> {
        let mut state = lock(&self.state);
        let idle = state
            .entries
            .iter()
            .enumerate()
            .filter(|(_, entry)| entry.usable() && entry.calls == 0 && entry.tasks == 0);
        let (index, since) = idle.map(|(index, entry)| (index, entry.since)).min_by_key(|(_, since)| *since)?;
        if now.saturating_duration_since(since) < idle_for {
            return None;
        }
        Some(state.entries.swap_remove(index).process)
    }

    /// Counts a task that `process` runs (it stays until [`ServerPool::release_task`]); `false` when it is no longer a
    /// usable process of this pool.
    pub(super) fn hold_task(&self, process: &Arc<UpstreamProcess>) -> bool {
        let mut state = lock(&self.state);
        let entry = state.entries.iter_mut().find(|entry| Arc::ptr_eq(&entry.process, process));
        entry.filter(|entry| entry.serves_its_tasks()).map(|entry| entry.tasks += 1).is_some()
    }

    /// A task of `process` ended: a retired pool's process with no call and no task left ends now.
    pub(super) fn release_task(&self, process: &Arc<UpstreamProcess>) {
        let ended = {
            let mut state = lock(&self.state);
            let retiring = state.retired || self.shutting_down();
            let index = state.entries.iter().position(|entry| Arc::ptr_eq(&entry.process, process));
            index.and_then(|index| {
                let entry = &mut state.entries[index];
                entry.tasks = entry.tasks.saturating_sub(1);
                entry.done(retiring).then(|| state.entries.swap_remove(index))
            })
        };
        if let Some(entry) = ended {
            entry.process.stop(StopMode::Graceful);
        }
    }

    /// Lends `process` to one more exchange (a task's request: it is already lent to the task, so it is not taken
    /// from the idle list); `false` when it is no longer a usable process of this pool.
    pub(super) fn lend(&self, process: &Arc<UpstreamProcess>) -> bool {
        let mut state = lock(&self.state);
        let entry = state.entries.iter_mut().find(|entry| Arc::ptr_eq(&entry.process, process));
        entry.filter(|entry| entry.serves_its_tasks()).map(|entry| entry.calls += 1).is_some()
    }

    /// Counts processes that ended abnormally, except while the pool is shutting down.
    fn count_restarts(&self, abnormal: usize) {
        if abnormal > 0 && !self.shutting_down() {
            self.shared.restarts.fetch_add(abnormal as u64, Ordering::Relaxed);
        }
    }
}

/// A caller waiting for a process of a pool; dropping it (woken or cancelled) ends the wait.
pub(super) struct Waiting<'a>(&'a ServerPool);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        state.waiting = state.waiting.saturating_sub(1);
    }
}

/// The cool-down after `failures` failed starts in a row: none before [`COOL_DOWN_AFTER`], then 1 s doubling up to
/// [`MAX_COOL_DOWN`].
fn cool_down_after(failures: u32) -> Option<Duration> {
    let doublings = failures.checked_sub(COOL_DOWN_AFTER)?;
    let seconds = 1u64.checked_shl(doublings.min(16)).unwrap_or(u64::MAX);
    Some(Duration::from_secs(seconds).min(MAX_COOL_DOWN))
}

/// Removes the processes that died or lost their connection while serving no call, and returns them; those that did
/// so while serving calls take no new ones.
/// In place: it runs on every call, and allocates only when a process is gone.
fn remove_gone(entries: &mut Vec<Entry>) -> Vec<Arc<UpstreamProcess>> {
    let gone = entries.extract_if(.., |entry| {
        if !entry.process.is_gone() {
            return false;
        }
        if entry.calls > 0 {
            entry.failed = entry.failed.max(Some(StopMode::Kill));
        }
        entry.calls == 0
    });
    gone.map(|entry| entry.process).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cool_down_starts_after_three_failures_and_doubles_to_a_minute() {
        let seconds = |failures| cool_down_after(failures).map(|d| d.as_secs());
        assert_eq!((seconds(1), seconds(2)), (None, None));
        assert_eq!((seconds(3), seconds(4), seconds(5)), (Some(1), Some(2), Some(4)));
        assert_eq!((seconds(9), seconds(10), seconds(400)), (Some(60), Some(60), Some(60)));
    }
}
