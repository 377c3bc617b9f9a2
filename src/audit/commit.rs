//! Group commit: one `write` for the records of the calls in flight, each answer still sent after its record is
//! written.
//!
//! A caller prepares its record ([`Prepared`]) outside any lock, then, under the log's lock, queues it and takes a
//! ticket (a number counting every record this process queued). The first caller that finds no write in progress
//! takes the writer's role: it moves out the queue and the chain (the file, the last `seq` and hash), and, with the
//! lock released so that others keep queueing, gives each record its `seq`, `prev_hash` and the batch's `timestamp`,
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
    pub async fn record(&self, event: Event<'_>) {
        if let Some(ticket) = self.queue(event) {
            self.wait_async(ticket).await;
        }
    }

    /// [`AuditLog::record`] for a caller that is not async: blocks the thread while another write is in progress
    /// (that write only waits on the file). On the async path, prefer `record(..).await`.
    pub fn record_blocking(&self, event: Event<'_>) {
        if let Some(ticket) = self.queue(event) {
            self.wait_blocking(ticket);
        }
    }

    /// Queues `event`'s record and, when no write is in progress, writes the queue; the record's ticket, `None` when
    /// the log is off.
    fn queue(&self, event: Event<'_>) -> Option<u64> {
        if !self.enabled() {
            return None;
        }
        let prepared = Prepared::new(event);
        let (ticket, batch) = {
            let mut state = self.lock();
            state.open.as_ref()?;
            state.queue.push(prepared);
            state.queued += 1;
            (state.queued, take_batch(&mut state))
        };
        if let Some(batch) = batch {
            self.write(batch);
        }
        Some(ticket)
    }

    async fn wait_async(&self, ticket: u64) {
        // Written by whoever finishes the wait if this future is dropped first.
        let _abandoned = Abandoned { log: self, ticket };
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
