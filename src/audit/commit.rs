//! Group commit: one `write` for the records of the calls in flight, each answer still sent after its record is
//! written.
//!
//! A caller prepares its record ([`Prepared`]) outside any lock, then, under the log's lock, queues it and takes a
//! ticket (a number counting every record this process queued). An async caller then yields once, so that the other
//! tasks ready on its worker thread queue theirs too (with one worker thread, as on two cores, nothing else could
//! ever be queued beside it). The first caller that then finds no write in progress takes the writer's role: it
//! moves out the queue and the chain (the file, the last `seq` and hash), and, with the lock released so that others
//! keep queueing, gives each record its `seq`, `prev_hash` and the batch's `timestamp`,
//! and writes the batch with one `write_all`. It then publishes the highest ticket written (`written`) and wakes
//! the waiters; a waiter whose record came too late for that batch takes the role for the next one. Whoever holds the
//! role only runs code that does not wait on anything but the file, so a waiter never waits longer than the write in
//! progress and the one after it.
//!
//! Waiting is async on the call path ([`AuditLog::record`]: the task yields, its worker thread runs other tasks) and
//! blocking for the few callers that are not async ([`AuditLog::record_blocking`]). A wait given up before its record
//! was written (the request's future dropped) writes the queue itself, or, when a write is in progress, leaves a mark
//! for its writer to write the queue again: a queued record is always written.
//!
//! A failed write is logged and its records are left out (the chain goes on from the last record written, as the
//! file has it); their waiters are released, and the answers still go.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

use super::record::Prepared;
use super::{AuditLog, Event};

/// The end of the file's chain, and the buffer its lines are written from; held by the writer while it writes.
pub(super) struct Chain {
    pub path: PathBuf,
    pub file: File,
    /// The `seq` of the last record written.
    pub seq: u64,
    /// The `hash` of the last record written, as a JSON string.
    pub prev: String,
    line: Vec<u8>,
}

impl Chain {
    pub fn new(path: PathBuf, file: File, seq: u64, prev: String) -> Chain {
        Chain { path, file, seq, prev, line: Vec::new() }
    }

    /// Chains `records` after the last one written and writes them with one `write_all`, logging a failure.
    fn append(&mut self, records: &[Prepared]) {
        let timestamp = crate::ids::timestamp();
        self.line.clear();
        let (mut seq, mut prev) = (self.seq, self.prev.clone());
        for record in records {
            seq += 1;
            prev = record.chain(seq, &prev, &timestamp, &mut self.line);
        }
        match (&self.file).write_all(&self.line) {
            Ok(()) => (self.seq, self.prev) = (seq, prev),
            Err(error) => tracing::error!(path = %self.path.display(), %error, records = records.len(),
                "audit records could not be written"),
        }
        // One very large record does not keep its buffer for the life of the process.
        if self.line.capacity() > 1 << 20 {
            self.line = Vec::new();
        }
    }
}

/// What a writer took: the chain, the records queued and the ticket of the last of them.
pub(super) struct Batch {
    chain: Chain,
    records: Vec<Prepared>,
    through: u64,
}

/// The log's state under its lock.
#[derive(Default)]
pub(super) struct State {
    /// The open file: its path, the key of `args_hmac`, and its chain (`None` while a writer holds it).
    pub open: Option<super::Open>,
    queue: Vec<Prepared>,
    /// The ticket of the last record queued.
    queued: u64,
    /// Whether a writer holds the role (and the chain).
    writing: bool,
    /// A wait was given up while a write was in progress: its writer writes the queue again before it lets go.
    stranded: bool,
    /// Threads blocked on the condition variable (signalled only when there are some: each signal is a system call).
    blocked: usize,
}

impl AuditLog {
    /// Writes one record before it returns, the task yielding while another task's write is in progress. Nothing is
    /// done when the log is off.
    ///
    /// The task yields once before it writes: the other tasks ready on this worker thread (the answers of the calls
    /// in flight that came in together) queue their records meanwhile, and one write takes them all. On a gateway
    /// with one worker thread (two cores: half the CPUs) no record would otherwise ever find another queued.
    pub async fn record(&self, event: Event<'_>) {
        let Some(ticket) = self.queue(event, false) else { return };
        // Written by whoever finishes the wait if this future is dropped first.
        let _abandoned = Abandoned { log: self, ticket };
        tokio::task::yield_now().await;
        self.wait_async(ticket).await;
    }

    /// [`AuditLog::record`] for a caller that is not async: blocks the thread while another write is in progress
    /// (that write only waits on the file). On the async path, prefer `record(..).await`.
    pub fn record_blocking(&self, event: Event<'_>) {
        if let Some(ticket) = self.queue(event, true) {
            self.wait_blocking(ticket);
        }
    }

    /// Queues `event`'s record and, with `write_now` and no write in progress, writes the queue; the record's
    /// ticket, `None` when the log is off.
    fn queue(&self, event: Event<'_>, write_now: bool) -> Option<u64> {
        if !self.enabled() {
            return None;
        }
        let prepared = Prepared::new(event);
        let (ticket, batch) = {
            let mut state = self.lock();
            state.open.as_ref()?;
            state.queue.push(prepared);
            state.queued += 1;
            (state.queued, if write_now { take_batch(&mut state) } else { None })
        };
        if let Some(batch) = batch {
            self.write(batch);
        }
        Some(ticket)
    }

    async fn wait_async(&self, ticket: u64) {
        loop {
            if self.written.load(Ordering::Acquire) >= ticket {
                return;
            }
            // Registered before the checks, so that a write published after them wakes this task.
            let mut notified = pin!(self.written_notify.notified());
            notified.as_mut().enable();
            if self.written.load(Ordering::Acquire) >= ticket {
                return;
            }
            let batch = take_batch(&mut self.lock());
            match batch {
                Some(batch) => self.write(batch),
                None => notified.await,
            }
        }
    }

    fn wait_blocking(&self, ticket: u64) {
        let mut state = self.lock();
        while self.written.load(Ordering::Acquire) < ticket {
            match take_batch(&mut state) {
                Some(batch) => {
                    drop(state);
                    self.write(batch);
                    state = self.lock();
                }
                None => state = self.wait_for_writer(state),
            }
        }
    }

    /// Blocks until the writer in progress publishes.
    pub(super) fn wait_for_writer<'a>(&self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        state.blocked += 1;
        let mut state = self.written_condvar.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
        state.blocked -= 1;
        state
    }

    /// Writes `batch` (and the queue again while a given-up wait asks for it), then gives the role back and wakes the
    /// waiters.
    fn write(&self, mut batch: Batch) {
        loop {
            batch.chain.append(&batch.records);
            batch.records.clear();
            let mut state = self.lock();
            self.written.store(batch.through, Ordering::Release);
            if std::mem::take(&mut state.stranded) && !state.queue.is_empty() {
                std::mem::swap(&mut batch.records, &mut state.queue);
                batch.through = state.queued;
                continue;
            }
            if state.queue.is_empty() {
                // The next batch reuses this one's allocation.
                std::mem::swap(&mut batch.records, &mut state.queue);
            }
            state.writing = false;
            // `configure` waits for the role to come back before it changes the file: this is the chain it lent.
            if let Some(open) = state.open.as_mut() {
                open.chain = Some(batch.chain);
            }
            self.wake(state);
            return;
        }
    }

    /// Writes what is queued and waits for any write in progress: on return, every ticket handed out is written and
    /// the chain is in `state.open` (for `configure`, before it changes or closes the file).
    pub(super) fn write_all_queued<'a>(&self, mut state: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        while state.writing {
            state = self.wait_for_writer(state);
        }
        let queued = std::mem::take(&mut state.queue);
        if let Some(chain) = state.open.as_mut().and_then(|open| open.chain.as_mut())
            && !queued.is_empty()
        {
            chain.append(&queued);
        }
        self.written.store(state.queued, Ordering::Release);
        state
    }

    /// Wakes every waiter after `written` moved; takes the guard to release the lock first.
    pub(super) fn wake(&self, state: MutexGuard<'_, State>) {
        let blocked = state.blocked > 0;
        drop(state);
        self.written_notify.notify_waiters();
        if blocked {
            self.written_condvar.notify_all();
        }
    }
}

/// The writer's role, when it is free and there is something to write.
fn take_batch(state: &mut State) -> Option<Batch> {
    if state.writing || state.queue.is_empty() {
        return None;
    }
    let chain = state.open.as_mut()?.chain.take()?;
    state.writing = true;
    Some(Batch { chain, records: std::mem::take(&mut state.queue), through: state.queued })
}

/// A wait on `ticket`; if dropped before the record is written, makes sure it still is.
struct Abandoned<'a> {
    log: &'a AuditLog,
    ticket: u64,
}

impl Drop for Abandoned<'_> {
    fn drop(&mut self) {
        if self.log.written.load(Ordering::Acquire) >= self.ticket {
            return;
        }
        let mut state = self.log.lock();
        match take_batch(&mut state) {
            Some(batch) => {
                drop(state);
                self.log.write(batch);
            }
            None if state.writing => state.stranded = true,
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::task::{Context, Waker};

    fn tool_names(path: &std::path::Path) -> Vec<String> {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["tool_name"].as_str().unwrap().into())
            .collect()
    }

    #[test]
    fn tasks_and_threads_recording_at_once_write_one_chain_with_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = Arc::new(AuditLog::default());
        log.configure(Some(&path), None);
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).build().unwrap();
        let (tasks, threads, each) = (64, 4, 40);
        runtime.block_on(async {
            let mut handles = Vec::new();
            for task in 0..tasks {
                let log = Arc::clone(&log);
                handles.push(tokio::spawn(async move {
                    for i in 0..each {
                        let name = format!("task{task}-{i}");
                        log.record(Event { event: "tool_call", tool_name: Some(&name), ..Event::default() }).await;
                        // Written before `record` returned (looked at now and then: the file grows).
                        if i % 10 == 0 {
                            assert!(std::fs::read_to_string(log.path().unwrap()).unwrap().contains(&name));
                        }
                        tokio::task::yield_now().await;
                    }
                }));
            }
            let blocking: Vec<_> = (0..threads)
                .map(|thread| {
                    let log = Arc::clone(&log);
                    std::thread::spawn(move || {
                        for i in 0..each {
                            let name = format!("thread{thread}-{i}");
                            log.record_blocking(Event {
                                event: "tool_call",
                                tool_name: Some(&name),
                                ..Event::default()
                            });
                        }
                    })
                })
                .collect();
            for handle in handles {
                handle.await.unwrap();
            }
            for thread in blocking {
                thread.join().unwrap();
            }
        });
        let total = (tasks + threads) * each;
        assert_eq!(super::super::verify(&path).unwrap(), total as u64);
        let names: HashSet<String> = tool_names(&path).into_iter().collect();
        assert_eq!(names.len(), total, "each record once");
        // The chain goes on in the next process, and a file changed while records wait for their write gets them first.
        let again = AuditLog::default();
        again.configure(Some(&path), None);
        again.record_blocking(Event { event: "config_reload", tool_name: Some("after"), ..Event::default() });
        assert_eq!(super::super::verify(&path).unwrap(), total as u64 + 1);
    }

    #[test]
    fn the_records_of_tasks_ready_together_on_one_worker_thread_go_in_one_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = Arc::new(AuditLog::default());
        log.configure(Some(&path), None);
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let tasks: Vec<_> = (0..16)
                .map(|n| {
                    let log = Arc::clone(&log);
                    tokio::spawn(async move {
                        let name = format!("call{n}");
                        log.record(Event { event: "tool_call", tool_name: Some(&name), ..Event::default() }).await;
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
        assert_eq!(super::super::verify(&path).unwrap(), 16);
        // The records of one write share its timestamp.
        let text = std::fs::read_to_string(&path).unwrap();
        let stamps: HashSet<String> = text
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["timestamp"].to_string())
            .collect();
        assert_eq!(stamps.len(), 1, "{text}");
    }

    #[test]
    fn a_wait_given_up_during_a_write_still_gets_its_record_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::default();
        log.configure(Some(&path), None);
        let event = |name: &'static str| Event { event: "tool_call", tool_name: Some(name), ..Event::default() };
        // A write in progress: its writer holds the role (and the chain).
        let batch = {
            let mut state = log.lock();
            state.queue.push(Prepared::new(event("first")));
            state.queued += 1;
            take_batch(&mut state).unwrap()
        };
        {
            let mut waiting = std::pin::pin!(log.record(event("second")));
            let mut context = Context::from_waker(Waker::noop());
            assert!(waiting.as_mut().poll(&mut context).is_pending(), "queued behind the write in progress");
        }
        // The request went away while it waited; the writer in progress writes its record too.
        log.write(batch);
        assert_eq!(tool_names(&path), ["first", "second"]);
        assert_eq!(super::super::verify(&path).unwrap(), 2);

        // Given up with no write in progress: written as the wait ends.
        let mut state = log.lock();
        state.queue.push(Prepared::new(event("third")));
        state.queued += 1;
        let ticket = state.queued;
        drop(state);
        drop(Abandoned { log: &log, ticket });
        assert_eq!(tool_names(&path), ["first", "second", "third"]);
        assert_eq!(log.written.load(Ordering::Acquire), ticket);
    }

    #[test]
    fn a_failed_write_releases_its_waiters_and_the_chain_goes_on_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::default();
        log.configure(Some(&path), None);
        log.record_blocking(Event { event: "tool_call", tool_name: Some("kept"), ..Event::default() });
        // A file that refuses writes (opened read-only in place of the log's own).
        let writable = {
            let mut state = log.lock();
            let chain = state.open.as_mut().unwrap().chain.as_mut().unwrap();
            std::mem::replace(&mut chain.file, File::open(&path).unwrap())
        };
        log.record_blocking(Event { event: "tool_call", tool_name: Some("lost"), ..Event::default() });
        log.lock().open.as_mut().unwrap().chain.as_mut().unwrap().file = writable;
        log.record_blocking(Event { event: "tool_call", tool_name: Some("next"), ..Event::default() });
        assert_eq!(tool_names(&path), ["kept", "next"]);
        assert_eq!(super::super::verify(&path).unwrap(), 2);
    }
}
